#!/usr/bin/env bash
# Today's pre-check (flink/checker, as built in ~/.cache/streamjob/bin/flink-<v>/checker) on the
# same cases, for comparison: bash run-current-checker.sh <version>  -> runs/<v>/current-checker.tsv
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"; cd "$here"; source jvm-opts.sh
v="$1"; F="$HOME/.cache/streamjob/bin/flink-$v"; sp="$(cat runs/$v/savepoint.txt)"
printf 'case\tcurrent checker verdict\n' >"runs/$v/current-checker.tsv"
for c in base:base pojo-added:base pojo-removed:base pojo-retyped:base count-int:count-int count-string:count-string key-string:key-string count-ttl:count-ttl count-list:count-list count-renamed:count-renamed buffer-string:buffer-string map-value-string:map-value-string window-string:window-string window-value-string:window-value-string broadcast-string:broadcast-string; do
  name="${c%%:*}"; variant="${c#*:}"
  case "$name" in pojo-added) jar=job-added.jar;; pojo-removed) jar=job-removed.jar;; pojo-retyped) jar=job-retyped.jar;; *) jar=job-base.jar;; esac
  out=$(nice -n 19 java "${JVM_OPTS[@]}" -Xmx512m -cp "$F/lib/*:$F/checker/*" dev.streamjob.flink.checker.Check \
    --savepoint "$sp" --jar "out/$v/$jar" --parallelism 2 -- --variant "$variant" 2>/dev/null | tail -1 | grep -o '"verdict":"[a-z]*"')
  printf '%s\t%s\n' "$name" "$out" | tee -a "runs/$v/current-checker.tsv"
done
