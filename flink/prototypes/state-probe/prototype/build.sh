#!/usr/bin/env bash
# Compiles the probe against one Flink version's lib/ (which holds flink-state-processor-api):
#   bash prototype/build.sh <flink folder> <out jar>
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
nice -n 19 javac -nowarn --release 17 -cp "$1/lib/*" -d "$work" $(find "$here/src" -name '*.java') 2>&1 | grep -v '^Note: ' >&2 || true
test -f "$work/dev/streamjob/precheck34/StateProbe.class"
mkdir -p "$(dirname "$2")"
jar --create --file "$2" -C "$work" .
