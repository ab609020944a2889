#!/usr/bin/env bash
# The agreement matrix for one Flink version: builds the pre-check (flink/build.sh) and the test
# job jars, takes a savepoint of version A (job-base.jar, --variant base) on a local MiniCluster,
# then for every changed version B runs the pre-check (its verdict: the prediction) and Flink's
# real restore (local MiniCluster, restart strategy none, until the first completed checkpoint or
# the job's failure). `python3 agreement.py runs/<dir>` prints the table.
#   bash run-matrix.sh <flink version: 1.20.0 | 2.3.0> [backend: hashmap (default) | rocksdb]
# Writes runs/<version>[-<backend>][-<A variant>]/cases/<case>/{probe,restore}.txt and .../matrix.tsv.
# Env: CASES="name:variant ..." (default: the full list below), A_VARIANT (version A's variant,
# default base), A_FORMAT (CANONICAL default, or NATIVE), EXTRA_CP (e.g. the RocksDB backend's jars),
# RUNS_DIR (where runs/ goes, default here), STREAMJOB_CACHE (the Flink distributions under bin/).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"; source jvm-opts.sh
v="$1"; backend="${2:-hashmap}"
F="${STREAMJOB_CACHE:-$HOME/.cache/streamjob}/bin/flink-$v"
CP="$F/lib/*"
[ -n "${EXTRA_CP:-}" ] && CP="$CP:$EXTRA_CP"
runs="${RUNS_DIR:-$here/runs}/$v"; [ "$backend" != hashmap ] && runs="$runs-$backend"
avariant="${A_VARIANT:-base}"; [ "$avariant" != base ] && runs="$runs-$avariant"
bash ../build.sh "$F"
out="$runs/jars"
bash testjob/build.sh "$F" "$out"
mkdir -p "$runs"
if [ ! -f "$runs/savepoint.txt" ]; then
  rm -rf "$runs/A"; mkdir -p "$runs/A"
  nice -n 19 java "${JVM_OPTS[@]}" -Xmx600m -cp "$CP:$out/job-base.jar" dev.streamjob.precheck34.job.StateJob \
    --mode savepoint --dir "$runs/A" --seconds 8 --variant "$avariant" --backend "$backend" --format "${A_FORMAT:-CANONICAL}" >"$runs/A/out.txt" 2>"$runs/A/err.txt"
  awk '/^SAVEPOINT/{print $2}' "$runs/A/out.txt" >"$runs/savepoint.txt"
fi
sp="$(cat "$runs/savepoint.txt")"; test -n "$sp" || { echo "no savepoint" >&2; exit 1; }
cases="${CASES:-base:base pojo-added:base pojo-removed:base pojo-retyped:base count-int:count-int count-string:count-string key-string:key-string count-ttl:count-ttl count-list:count-list count-renamed:count-renamed buffer-string:buffer-string map-value-string:map-value-string window-string:window-string window-value-string:window-value-string broadcast-string:broadcast-string}"
printf 'case\tflink\tprobe\n' >"$runs/matrix.tsv"
for c in $cases; do
  name="${c%%:*}"; variant="${c#*:}"
  case "$name" in pojo-added) jar=job-added.jar;; pojo-removed) jar=job-removed.jar;; pojo-retyped) jar=job-retyped.jar;; *) jar=job-base.jar;; esac
  d="$runs/cases/$name"; rm -rf "$d"; mkdir -p "$d"
  start=$(date +%s%N)
  nice -n 19 java "${JVM_OPTS[@]}" -Xmx512m -cp "$CP:$F/checker/*" dev.streamjob.flink.checker.Check \
    --savepoint "$sp" --jar "$out/$jar" --parallelism 2 --conf "state.backend.type=$backend" -- --variant "$variant" >"$d/verdict.json" 2>"$d/check-err.txt"
  echo "$(( ($(date +%s%N) - start) / 1000000 )) ms" >"$d/check-time.txt"
  nice -n 19 java "${JVM_OPTS[@]}" -Xmx600m -cp "$CP:$out/$jar" dev.streamjob.precheck34.job.StateJob \
    --mode restore --savepoint "$sp" --dir "$d" --timeout 90 --variant "$variant" --backend "$backend" >"$d/restore.txt" 2>"$d/restore-err.txt"
  flink="$(grep -m1 '^RESULT' "$d/restore.txt" | sed 's/@[0-9a-f]\{4,\}//g')"
  probe="$(python3 "$here/agreement.py" --prediction "$d/verdict.json")"
  printf '%s\t%s\t%s\n' "$name" "$flink" "$probe" >>"$runs/matrix.tsv"
  echo "$name | $flink | $probe"
done
