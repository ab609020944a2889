#!/usr/bin/env bash
# Start a loopback-only MiniDFS cluster (1 namenode, 1 datanode) for tests.
#
#   tools/minidfs/minidfs.sh DATA_DIR [PORT] [hadoop.key=value ...]
#   tools/minidfs/minidfs.sh --build-only
#
# stdout: exactly one line "MINIDFS_READY hdfs://127.0.0.1:<port>" once HDFS accepts RPC
# and writes. Everything else (Maven, Hadoop logs, timings) goes to stderr.
# The JVM stops on SIGTERM/SIGINT or when its stdin reaches EOF; keep stdin open (a pipe)
# for as long as you need the cluster, or set MINIDFS_NO_STDIN_WATCH=1.
#
# Env: JAVA_HOME / MINIDFS_JAVA (java binary), MINIDFS_HEAP (default 512m),
#      MINIDFS_JAVA_OPTS (extra JVM flags), MINIDFS_MVN (default mvn).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
jar="$here/target/minidfs.jar"
mvn="${MINIDFS_MVN:-mvn}"

log() { echo "minidfs.sh: $*" >&2; }
now_ms() { date +%s%3N; }

needs_build() {
  [[ ! -f "$jar" || ! -d "$here/target/lib" ]] && return 0
  [[ -n "$(find "$here/pom.xml" "$here/src" -newer "$jar" -print -quit)" ]]
}

build() {
  needs_build || return 0
  mkdir -p "$here/target"
  # Serialize concurrent first-time builds (parallel tests); re-check under the lock.
  exec 9>"$here/target/.build.lock"
  flock 9
  if needs_build; then
    local t0 rc=0
    t0=$(now_ms)
    # Offline first (works once ~/.m2 has everything); online only if that fails.
    # Maven writes errors to stdout: keep our stdout clean for the READY line.
    if ! "$mvn" -B -q -o -f "$here/pom.xml" package >/dev/null 2>&1; then
      log "offline build failed (first run?), resolving from Maven Central"
      "$mvn" -B -q -f "$here/pom.xml" package >&2 || rc=$?
    fi
    if [[ $rc -ne 0 ]]; then
      log "build FAILED (mvn exit $rc)"
      exit $rc
    fi
    log "built $jar in $(( $(now_ms) - t0 )) ms"
  fi
  flock -u 9
  exec 9>&-
}

if [[ "${1:-}" == "--build-only" ]]; then
  build
  exit 0
fi
if [[ $# -lt 1 || "${1:-}" == -* ]]; then
  echo "usage: $0 DATA_DIR [PORT] [hadoop.key=value ...] | --build-only" >&2
  exit 2
fi

build

if [[ -n "${MINIDFS_JAVA:-}" ]]; then
  java="$MINIDFS_JAVA"
elif [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then
  java="$JAVA_HOME/bin/java"
else
  java=java
fi

# Java 17: Hadoop 3.4 reflects into these JDK internals.
opens=()
for p in java.lang java.lang.reflect java.io java.net java.nio java.util java.util.concurrent sun.nio.ch; do
  opens+=("--add-opens=java.base/$p=ALL-UNNAMED")
done

# shellcheck disable=SC2086
exec "$java" \
  -Xmx"${MINIDFS_HEAP:-512m}" -Xss512k \
  -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:+ExitOnOutOfMemoryError \
  -Djava.net.preferIPv4Stack=true \
  -Dminidfs.launch.ms="$(now_ms)" \
  "${opens[@]}" \
  ${MINIDFS_JAVA_OPTS:-} \
  -jar "$jar" "$@"
