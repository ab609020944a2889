#!/usr/bin/env bash
# Builds target/streamjob-flink-bench.jar (shaded) if it is missing or older than the sources.
# Offline first (everything already in ~/.m2), online on a fresh machine (Maven Central).
# All Maven output goes to stderr: stdout of run.sh carries only the JSON result line.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
jar="$here/target/streamjob-flink-bench.jar"
if [[ -f "$jar" ]] && [[ -z "$(find "$here/pom.xml" "$here/src" -newer "$jar" -print -quit)" ]]; then
  exit 0
fi
cd "$here"
echo "building $jar ..." >&2
if ! mvn -q -o -B package -DskipTests >/dev/null 2>&1; then
  mvn -q -B package -DskipTests 1>&2
fi
test -f "$jar"
