#!/usr/bin/env bash
# Compiles the pre-check (flink/checker) and the test job (flink/testjob) against one Flink
# version's jars, as the Flink engine needs them: the checker must run with the *target* Flink
# version, so it is built once per supported version.
#
#   bash flink/build.sh <flink folder>      # the folder holds lib/ (install.sh fills it)
#
# Writes <flink folder>/streamjob-flink-checker.jar and streamjob-flink-testjob.jar, checker/ (what
# the check pod's init container copies from the flink-checker image), and the test
# job alone in <flink folder>/testjob-usrlib/ and, without its AuditTally class, in
# testjob-v2-usrlib/ (the usrlib/ of the test job's "images" in the
# process kubelet), and the tests' file system plugin (flink/testplugin: a scheme only a plugin
# provides) in <flink folder>/plugins/streamjob-plugin/, where flink-check finds it as in an image
# with plugins; skipped when the sources are unchanged (their hash is kept in
# <flink folder>/.sources-sha256).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="${1:?usage: build.sh <flink folder with lib/>}"
test -f "$dir/lib/.complete" || { echo "build.sh: $dir/lib holds no complete Flink jar set" >&2; exit 1; }
sources=$(cd "$here" && find checker testjob testplugin -type f \( -name '*.java' -o -path '*/src/main/resources/*' \) \
  | LC_ALL=C sort; echo checker/bin/flink-check; echo checker/bin/flink-jobmanager)
sha=$( (cd "$here" && cat build.sh $sources) | sha256sum | cut -d' ' -f1)
if [ -f "$dir/.sources-sha256" ] && [ "$(cat "$dir/.sources-sha256")" = "$sha" ] \
    && [ -f "$dir/checker/streamjob-flink-checker.jar" ] && [ -f "$dir/testjob-usrlib/streamjob-flink-testjob.jar" ] \
    && [ -f "$dir/testjob-v2-usrlib/streamjob-flink-testjob.jar" ] \
    && [ -f "$dir/plugins/streamjob-plugin/streamjob-flink-testplugin.jar" ]; then
  exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# reproducible_jar JAR DIR : a jar of DIR's files in a fixed order with fixed entry times, so the
# same sources give the same bytes on every machine (the images built from the jars are keyed by
# their content; `jar cf` takes the directory order and the build's clock)
reproducible_jar() {
  local list="$work/jar-args"
  (cd "$2" && find . -type f | LC_ALL=C sort | sed 's|^\./||') \
    | while IFS= read -r f; do printf -- '-C\n%s\n%s\n' "$2" "$f"; done >"$list"
  jar --create --file "$1" --date=1980-01-01T00:00:02Z @"$list"
}
for part in checker testjob testplugin; do
  mkdir -p "$work/$part"
  # --release 17: the jars run on the Java 17 the Flink JVMs use
  (cd "$here" && javac -nowarn --release 17 -cp "$dir/lib/*" -d "$work/$part" $(find "$part" -name '*.java')) 2>&1 \
    | grep -v '^Note: ' >&2 || true
  test -n "$(find "$work/$part" -name '*.class' -print -quit)" || { echo "build.sh: compiling $part failed" >&2; exit 1; }
  # service registrations (a plugin's file system factory is found through them)
  if [ -d "$here/$part/src/main/resources" ]; then cp -R "$here/$part/src/main/resources/." "$work/$part/"; fi
  reproducible_jar "$dir/streamjob-flink-$part.jar.tmp" "$work/$part"
  mv "$dir/streamjob-flink-$part.jar.tmp" "$dir/streamjob-flink-$part.jar"
done
# What the flink-checker image holds for this minor (the check pod's init container copies it):
# the checker, the state processor API it reads savepoints with (not in Flink's own lib/), and
# the script the check pod runs.
rm -rf "$dir/checker"
mkdir -p "$dir/checker"
cp "$dir/streamjob-flink-checker.jar" "$here/checker/bin/flink-check" "$here/checker/bin/flink-jobmanager" "$dir/checker/"
cp "$dir"/lib/flink-state-processor-api-*.jar "$dir/checker/"
mkdir -p "$dir/testjob-usrlib"
cp "$dir/streamjob-flink-testjob.jar" "$dir/testjob-usrlib/streamjob-flink-testjob.jar"
# The job's "next image" whose state class was deleted (AuditTally): its restore of a savepoint
# with the tally state fails, which the pre-check must see coming.
rm -f "$work/testjob/dev/streamjob/flink/testjob/AuditTally.class"
rm -rf "$dir/testjob-v2-usrlib"
mkdir -p "$dir/testjob-v2-usrlib"
reproducible_jar "$dir/testjob-v2-usrlib/streamjob-flink-testjob.jar" "$work/testjob"
# Flink loads each plugin from its own folder under plugins/, in a class loader of its own.
rm -rf "$dir/plugins/streamjob-plugin"
mkdir -p "$dir/plugins/streamjob-plugin"
mv "$dir/streamjob-flink-testplugin.jar" "$dir/plugins/streamjob-plugin/"
echo "$sha" >"$dir/.sources-sha256"
