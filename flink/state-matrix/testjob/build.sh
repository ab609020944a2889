#!/usr/bin/env bash
# Builds the test job jars for one Flink version: <out>/job-{base,added,removed,retyped}.jar
#   bash testjob/build.sh <flink folder with lib/> <out dir>
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
flink="$1"; out="$2"
mkdir -p "$out"
for pojo in base added removed retyped; do
  work="$(mktemp -d)"
  nice -n 19 javac -nowarn --release 17 -cp "$flink/lib/*" -d "$work" \
    $(find "$here/common" "$here/pojo-$pojo" $(case "$(basename "$flink")" in flink-2*) echo "$here/v2only";; esac) -name '*.java') 2>&1 | grep -v '^Note: ' >&2 || true
  test -f "$work/dev/streamjob/precheck34/job/StateJob.class"
  jar --create --file "$out/job-$pojo.jar" --main-class dev.streamjob.precheck34.job.StateJob -C "$work" .
  rm -rf "$work"
done
