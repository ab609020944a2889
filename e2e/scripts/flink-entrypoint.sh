#!/usr/bin/env bash
# The process kubelet's stand-in for the official Flink image's /docker-entrypoint.sh: the kubelet
# maps a Flink image (e.g. streamjob/flink-testjob:1.20.0) to this script with FLINK_HOME set to
# the version's folder install.sh filled (lib/ with the Maven jars) and FLINK_USRLIB to the folder
# with the job jar (what the image holds in /opt/flink/usrlib). It takes the image's arguments:
#
#   standalone-job --job-classname C [--job-id ID] [--fromSavepoint P] [--allowNonRestoredState] [-D k=v]... [job args]
#   jobmanager [-D k=v]...            (a session JobManager)
#   taskmanager [-D k=v]...
#   /opt/streamjob/checker/flink-check [args]   (the savepoint pre-check, flink/checker/bin)
#
# Configuration, as the official image's entrypoint and Flink's scripts find it:
# - FLINK_CONF_DIR set (the operator mounts the version's ConfigMap there): Flink reads that
#   folder as it is. Under the process kubelet a container path P is $STREAMJOB_ROOT/P.
# - otherwise the image's own conf/config.yaml (the official image's defaults: every bind address
#   0.0.0.0), to which each FLINK_PROPERTIES line is added the way the official entrypoint adds
#   it: every blank removed, the key up to the first ':', the rest handed to Flink as a literal
#   string (quotes kept) — so a value in quotes or with blanks arrives mangled, as on a cluster.
# Every pod binds to its own pod IP ($POD_IP) through -D options below: under the process kubelet
# several clusters share this host's ports. Runs the JVM in the foreground (exec), so the
# kubelet's signals reach it.
set -euo pipefail
: "${FLINK_HOME:?FLINK_HOME (the Flink version folder with lib/) is not set by the image mapping}"
role="${1:?usage: flink-entrypoint.sh standalone-job|jobmanager|taskmanager [args]}"
shift

# A Flink home in the container's working folder: lib/ from the cache, usrlib/ from the image.
home="$PWD/flink-home"
mkdir -p "$home/conf" "$home/log"
ln -sfn "$FLINK_HOME/lib" "$home/lib"
# A copy, not a link: Flink lists usrlib/ without following a symbolic link.
if [ -n "${FLINK_USRLIB:-}" ]; then
  rm -rf "$home/usrlib"
  mkdir -p "$home/usrlib"
  cp -R "$FLINK_USRLIB/." "$home/usrlib/"
fi

if [ -n "${FLINK_CONF_DIR:-}" ]; then
  conf_dir="${STREAMJOB_ROOT:-}$FLINK_CONF_DIR"
else
  conf_dir="$home/conf"
  cat >"$conf_dir/config.yaml" <<'CONF'
jobmanager.rpc.address: localhost
jobmanager.rpc.port: 6123
jobmanager.bind-host: 0.0.0.0
jobmanager.memory.process.size: 1600m
taskmanager.bind-host: 0.0.0.0
taskmanager.memory.process.size: 1728m
taskmanager.numberOfTaskSlots: 1
parallelism.default: 1
rest.address: 0.0.0.0
rest.bind-address: 0.0.0.0
CONF
  # the official entrypoint's handling of FLINK_PROPERTIES, applied last (later keys win)
  while IFS= read -r line; do
    line="${line//[[:space:]]/}"
    [ -n "$line" ] || continue
    key="${line%%:*}"
    value="${line#*:}"
    [ "$key" != "$line" ] || value=""
    # a literal string: quotes kept (YAML single-quoted, ' doubled)
    sed -i "/^${key//./\\.}:/d" "$conf_dir/config.yaml"
    printf "%s: '%s'\n" "$key" "${value//\'/\'\'}" >>"$conf_dir/config.yaml"
  done <<<"${FLINK_PROPERTIES:-}"
  cat >"$conf_dir/log4j-console.properties" <<'LOG4J'
rootLogger.level = INFO
rootLogger.appenderRef.console.ref = ConsoleAppender
appender.console.name = ConsoleAppender
appender.console.type = CONSOLE
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss,SSS} %-5p %-40c{1} - %m%n
logger.pekko.name = org.apache.pekko
logger.pekko.level = WARN
LOG4J
fi

# -D arguments go to BashJavaUtils too (they may set memory); the rest are the entry point's.
# Under the process kubelet every pod binds to its own loopback address and the JVMs of all pods
# share this host's ports (a real pod has a network namespace of its own). Flink's Prometheus
# reporter listens on every address, so here it takes the first free port of a range.
dynamic=()
if [ -n "${POD_IP:-}" ]; then
  for kv in "jobmanager.bind-host=$POD_IP" "taskmanager.bind-host=$POD_IP" "taskmanager.host=$POD_IP" \
    "rest.bind-address=$POD_IP" "rest.address=$POD_IP" "metrics.internal.query-service.port=50100-50900" \
    "metrics.reporter.prom.port=9249-9299"; do
    dynamic+=("-D" "$kv")
  done
fi
rest=()
while [ $# -gt 0 ]; do
  case "$1" in
    -D) dynamic+=("-D" "$2"); shift 2 ;;
    -D*) dynamic+=("-D" "${1#-D}"); shift ;;
    *) rest+=("$1"); shift ;;
  esac
done

java="${STREAMJOB_JAVA:-java}"
cp="$home/lib/*"
opens=(
  --add-exports=java.base/sun.net.util=ALL-UNNAMED --add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED
  --add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED --add-opens=java.base/java.lang=ALL-UNNAMED
  --add-opens=java.base/java.net=ALL-UNNAMED --add-opens=java.base/java.io=ALL-UNNAMED
  --add-opens=java.base/java.nio=ALL-UNNAMED --add-opens=java.base/sun.nio.ch=ALL-UNNAMED
  --add-opens=java.base/java.lang.reflect=ALL-UNNAMED --add-opens=java.base/java.text=ALL-UNNAMED
  --add-opens=java.base/java.time=ALL-UNNAMED --add-opens=java.base/java.util=ALL-UNNAMED
  --add-opens=java.base/java.util.concurrent=ALL-UNNAMED --add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED
  --add-opens=java.base/java.util.concurrent.locks=ALL-UNNAMED
)
params() { # GET_JM_RESOURCE_PARAMS | GET_TM_RESOURCE_PARAMS → two lines: JVM options, -D options
  "$java" -cp "$cp" org.apache.flink.runtime.util.bash.BashJavaUtils "$1" -c "$conf_dir" "${dynamic[@]}" \
    | sed -n 's/^BASH_JAVA_UTILS_EXEC_RESULT://p'
}
# the image's plugins (/opt/flink/plugins: the metric reporters install.sh put there)
export FLINK_LIB_DIR="$home/lib" FLINK_CONF_DIR="$conf_dir" FLINK_PLUGINS_DIR="$FLINK_HOME/plugins"
case "$role" in
  standalone-job|jobmanager|taskmanager)
    [ -f "$conf_dir/config.yaml" ] || { echo "flink-entrypoint.sh: no config.yaml in the configuration folder $conf_dir" >&2; exit 1; } ;;
esac
case "$role" in
  standalone-job|jobmanager)
    mapfile -t p < <(params GET_JM_RESOURCE_PARAMS)
    [ "${#p[@]}" -eq 2 ] || { echo "flink-entrypoint.sh: BashJavaUtils printed no JobManager options" >&2; exit 1; }
    if [ "$role" = standalone-job ]; then
      main=org.apache.flink.container.entrypoint.StandaloneApplicationClusterEntryPoint
    else
      main=org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint
    fi
    # shellcheck disable=SC2086  # the JVM and -D options are word lists
    exec "$java" ${p[0]} "${opens[@]}" -XX:+UseSerialGC -Dlog4j.configurationFile="$conf_dir/log4j-console.properties" \
      -cp "$cp" "$main" -c "$conf_dir" ${p[1]} "${dynamic[@]}" "${rest[@]}"
    ;;
  taskmanager)
    mapfile -t p < <(params GET_TM_RESOURCE_PARAMS)
    [ "${#p[@]}" -eq 2 ] || { echo "flink-entrypoint.sh: BashJavaUtils printed no TaskManager options" >&2; exit 1; }
    # shellcheck disable=SC2086
    exec "$java" ${p[0]} "${opens[@]}" -XX:+UseSerialGC -Dlog4j.configurationFile="$conf_dir/log4j-console.properties" \
      -cp "$cp" org.apache.flink.runtime.taskexecutor.TaskManagerRunner -c "$conf_dir" ${p[1]} "${dynamic[@]}" "${rest[@]}"
    ;;
  /opt/streamjob/checker/*)
    # The official entrypoint runs any other command as given (`exec "$@"`); the check pod's init
    # container put the checker there. This kubelet runs no init containers: the version's
    # checker folder (flink/build.sh) stands for that copy.
    : "${STREAMJOB_CHECKER_DIR:?STREAMJOB_CHECKER_DIR is not set by the image mapping}"
    exec "$STREAMJOB_CHECKER_DIR/${role#/opt/streamjob/checker/}" "${rest[@]}"
    ;;
  *)
    echo "flink-entrypoint.sh: unknown role $role (standalone-job, jobmanager, taskmanager, /opt/streamjob/checker/flink-check)" >&2
    exit 1
    ;;
esac
