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
# Configuration comes, as with the official image, from $FLINK_PROPERTIES (YAML lines appended to
# the config) and -D arguments; every pod binds to its own pod IP ($POD_IP), so several clusters
# share this host. Runs the JVM in the foreground (exec), so the kubelet's signals reach it.
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
# The operator's configuration first; defaults only for keys it does not set (a YAML key twice
# is an error).
conf="$home/conf/config.yaml"
printf '%s\n' "${FLINK_PROPERTIES:-}" >"$conf"
default() {
  grep -q "^$1:" "$conf" || echo "$1: $2" >>"$conf"
}
default jobmanager.memory.process.size 1024m
default taskmanager.memory.process.size 1280m
# JobManagers and TaskManagers of all pods share this host: a range for the query service.
default metrics.internal.query-service.port 50100-50900
default taskmanager.data.port 0
if [ -n "${POD_IP:-}" ]; then
  default jobmanager.bind-host "$POD_IP"
  default taskmanager.bind-host "$POD_IP"
  default taskmanager.host "$POD_IP"
  default rest.bind-address "$POD_IP"
  default rest.address "$POD_IP"
fi
cat >"$home/conf/log4j-console.properties" <<'LOG4J'
rootLogger.level = INFO
rootLogger.appenderRef.console.ref = ConsoleAppender
appender.console.name = ConsoleAppender
appender.console.type = CONSOLE
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss,SSS} %-5p %-40c{1} - %m%n
logger.pekko.name = org.apache.pekko
logger.pekko.level = WARN
LOG4J

# -D arguments go to BashJavaUtils too (they may set memory); the rest are the entry point's.
dynamic=()
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
  "$java" -cp "$cp" org.apache.flink.runtime.util.bash.BashJavaUtils "$1" -c "$home/conf" "${dynamic[@]}" \
    | sed -n 's/^BASH_JAVA_UTILS_EXEC_RESULT://p'
}
export FLINK_LIB_DIR="$home/lib" FLINK_CONF_DIR="$home/conf"
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
    exec "$java" ${p[0]} "${opens[@]}" -XX:+UseSerialGC -Dlog4j.configurationFile="$home/conf/log4j-console.properties" \
      -cp "$cp" "$main" -c "$home/conf" ${p[1]} "${dynamic[@]}" "${rest[@]}"
    ;;
  taskmanager)
    mapfile -t p < <(params GET_TM_RESOURCE_PARAMS)
    [ "${#p[@]}" -eq 2 ] || { echo "flink-entrypoint.sh: BashJavaUtils printed no TaskManager options" >&2; exit 1; }
    # shellcheck disable=SC2086
    exec "$java" ${p[0]} "${opens[@]}" -XX:+UseSerialGC -Dlog4j.configurationFile="$home/conf/log4j-console.properties" \
      -cp "$cp" org.apache.flink.runtime.taskexecutor.TaskManagerRunner -c "$home/conf" ${p[1]} "${dynamic[@]}" "${rest[@]}"
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
