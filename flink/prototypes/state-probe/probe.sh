#!/usr/bin/env bash
# Runs the probe with one Flink version: probe.sh <flink version> <job jar> <savepoint> [job args...]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/jvm-opts.sh"
v="$1"; jar="$2"; sp="$3"; shift 3
F="$HOME/.cache/streamjob/bin/flink-$v"
exec nice -n 19 java "${JVM_OPTS[@]}" -Xmx512m -cp "$F/lib/*:$here/out/$v/state-probe.jar" \
  dev.streamjob.precheck34.StateProbe --savepoint "$sp" --jar "$jar" --parallelism 2 -- "$@"
