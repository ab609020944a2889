#!/usr/bin/env bash
# Writes OUT_DIR/bids.csv and OUT_DIR/generator.csv with the deterministic Java generator
# (development input and fallback; the benchmark normally reads the files the Rust side writes).
#   bench/flink/generate.sh OUT_DIR BIDS_COUNT GEN_COUNT [SEED]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ $# -lt 3 ]]; then
  echo "usage: $0 OUT_DIR BIDS_COUNT GEN_COUNT [SEED]" >&2
  exit 2
fi
"$here/build.sh"
exec java -Xmx1g -cp "$here/target/streamjob-flink-bench.jar" dev.streamjob.bench.GenerateInput "$@"
