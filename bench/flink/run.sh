#!/usr/bin/env bash
# Runs one benchmark query on an in-process Apache Flink MiniCluster (one JVM) and prints one JSON
# line on stdout.
#   bench/flink/run.sh QUERY INPUT_DIR OUTPUT_DIR PARALLELISM [CHECKPOINT_INTERVAL_MS] [--codec C]
#   QUERY: q0 | q1 | q2 | q5 | q7 | gen-count ; OUTPUT_DIR must be missing or empty.
# The JVM replaces this shell (exec), so $! / the pid of this script is the pid of the JVM
# (peak RSS: VmHWM in /proc/<pid>/status).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ $# -lt 4 ]]; then
  echo "usage: $0 QUERY INPUT_DIR OUTPUT_DIR PARALLELISM [CHECKPOINT_INTERVAL_MS] [--codec C]" >&2
  exit 2
fi
"$here/build.sh"
# JVM options as a tuned Flink user on Java 17 would set them: fixed max heap, G1 (Flink's
# default), and the --add-opens Flink's own launcher scripts pass on Java 17.
java_opts=(
  -Xmx2g
  -XX:+UseG1GC
  --add-exports=java.base/sun.net.util=ALL-UNNAMED
  --add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED
  --add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED
  --add-opens=java.base/java.lang=ALL-UNNAMED
  --add-opens=java.base/java.net=ALL-UNNAMED
  --add-opens=java.base/java.io=ALL-UNNAMED
  --add-opens=java.base/java.nio=ALL-UNNAMED
  --add-opens=java.base/sun.nio.ch=ALL-UNNAMED
  --add-opens=java.base/java.lang.reflect=ALL-UNNAMED
  --add-opens=java.base/java.text=ALL-UNNAMED
  --add-opens=java.base/java.time=ALL-UNNAMED
  --add-opens=java.base/java.util=ALL-UNNAMED
  --add-opens=java.base/java.util.concurrent=ALL-UNNAMED
  --add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED
  --add-opens=java.base/java.util.concurrent.locks=ALL-UNNAMED
)
exec java "${java_opts[@]}" ${FLINK_BENCH_JAVA_OPTS:-} -jar "$here/target/streamjob-flink-bench.jar" "$@"
