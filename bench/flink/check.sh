#!/usr/bin/env bash
# Correctness check of the Flink baseline on a small input: every query at P=1 and P=2, compared
# (outputRecords and every column checksum) with the engine-independent bench/tools/expected.py.
#   bench/flink/check.sh [WORK_DIR] [BIDS] [GEN]     (default /tmp/flink-bench-check 100000 100000)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="${1:-/tmp/flink-bench-check}"; bids="${2:-100000}"; gen="${3:-100000}"
rm -rf "$work"; mkdir -p "$work"
"$here/generate.sh" "$work/in" "$bids" "$gen"
pass=0; fail=0
for q in q0 q1 q2 q5 q7 gen-count; do
  exp="$(python3 "$here/../tools/expected.py" "$q" "$work/in")"
  for p in 1 2; do
    got="$("$here/run.sh" "$q" "$work/in" "$work/out-$q-p$p" "$p" 2>"$work/log-$q-p$p.txt")"
    if python3 - "$exp" "$got" <<'PY'
import json, sys
e, g = json.loads(sys.argv[1]), json.loads(sys.argv[2])
ok = e["outputRecords"] == g["outputRecords"] and e["columnSums"] == g["columnSums"]
print(("ok  " if ok else "BAD ") + f'{g["query"]:9} p={g["parallelism"]} records={g["outputRecords"]} '
      f'{g["outputSumColumn"]}={g["outputSum"]} (expected records={e["outputRecords"]} sum={e["outputSum"]})')
sys.exit(0 if ok else 1)
PY
    then pass=$((pass+1)); else fail=$((fail+1)); fi
  done
done
echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
