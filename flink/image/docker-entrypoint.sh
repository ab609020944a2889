#!/usr/bin/env bash
# The entrypoint of our Flink base images (flink/image/Dockerfile), written to behave like the
# official flink:<version> images' /docker-entrypoint.sh as their documentation describes it and as
# it was observed (Flink 1.20.0 and 2.3.0). The official images start Flink through the
# distribution's bin/ scripts, which are not published on Maven Central; this script does what
# they do (BashJavaUtils for memory, the classpath from lib/, log4j-console.properties) itself.
#
#   jobmanager [-D k=v]...                       a session JobManager
#   standalone-job --job-classname C [--job-id ID] [--fromSavepoint P] [--allowNonRestoredState]
#                  [-D k=v]... [job args]        an application cluster's JobManager (job in usrlib/)
#   taskmanager [-D k=v]...
#   help                                         this text
#   anything else                                run as given (`exec "$@"`), e.g. a checker
#
# Environment, as in the official images:
#   FLINK_PROPERTIES         lines `key: value` added to $FLINK_HOME/conf/config.yaml: every blank
#                            is removed from a line, the key ends at the first ':', the value is
#                            the rest taken literally (quotes kept) after envsubst-like expansion
#                            of $VAR and ${VAR}
#   ENABLE_BUILT_IN_PLUGINS  `a.jar;b.jar`: jars of $FLINK_HOME/opt linked into plugins/<name>/
#   JOB_MANAGER_RPC_ADDRESS  jobmanager.rpc.address (default: this host's name)
#   TASK_MANAGER_NUMBER_OF_TASK_SLOTS  taskmanager.numberOfTaskSlots
#   FLINK_CONF_DIR           where Flink reads its configuration (default $FLINK_HOME/conf). As with
#                            the official images, the edits above go to $FLINK_HOME/conf only: a
#                            mounted FLINK_CONF_DIR (what the operator does) is read as it is.
#   JVM_ARGS                 extra JVM options (as bin/flink-console.sh takes them)
# Runs as the flink user (9999) when started as root, like the official images (gosu there,
# setpriv here); the JVM replaces this shell (exec), so signals reach it.
set -euo pipefail

FLINK_HOME="${FLINK_HOME:-/opt/flink}"
IMAGE_CONF="$FLINK_HOME/conf"
export FLINK_CONF_DIR="${FLINK_CONF_DIR:-$IMAGE_CONF}"
export FLINK_LIB_DIR="${FLINK_LIB_DIR:-$FLINK_HOME/lib}"
export FLINK_PLUGINS_DIR="${FLINK_PLUGINS_DIR:-$FLINK_HOME/plugins}"
JAVA="${JAVA_HOME:+$JAVA_HOME/bin/}java"

usage() {
  sed -n '9,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

# drop_privs: the command prefix that runs as flink when this runs as root and the user exists
drop_privs() {
  if [ "$(id -u)" = 0 ] && id flink >/dev/null 2>&1; then
    echo "setpriv --reuid=flink --regid=flink --init-groups"
  fi
}

copy_plugins_if_required() {
  [ -n "${ENABLE_BUILT_IN_PLUGINS:-}" ] || return 0
  echo "Enabling required built-in plugins"
  local jar name
  for jar in ${ENABLE_BUILT_IN_PLUGINS//;/ }; do
    name="${jar%.jar}"
    if [ ! -e "$FLINK_HOME/opt/$jar" ]; then
      echo "Plugin $jar does not exist. Exiting."
      exit 1
    fi
    mkdir -p "$FLINK_PLUGINS_DIR/$name"
    ln -fs "$FLINK_HOME/opt/$jar" "$FLINK_PLUGINS_DIR/$name"
    echo "Successfully enabled $jar"
  done
}

# bash_java_utils COMMAND ARGS... : Flink's BashJavaUtils, its result lines only
bash_java_utils() {
  local out
  out="$("$JAVA" -cp "$FLINK_LIB_DIR/*" org.apache.flink.runtime.util.bash.BashJavaUtils "$@" 2>&1)" || {
    echo "BashJavaUtils $1 failed:" >&2
    echo "$out" >&2
    return 1
  }
  sed -n 's/^BASH_JAVA_UTILS_EXEC_RESULT://p' <<<"$out"
}

# set_config_options KEY VALUE... : written into the image's config.yaml (bin/config-parser-utils.sh)
set_config_options() {
  local params=()
  while [ $# -gt 0 ]; do params+=("-D$1=$2"); shift 2; done
  [ "${#params[@]}" -gt 0 ] || return 0
  local updated
  updated="$(bash_java_utils UPDATE_AND_GET_FLINK_CONFIGURATION -c "$IMAGE_CONF" "${params[@]}")"
  printf '%s\n' "$updated" >"$IMAGE_CONF/config.yaml"
}

# envsubst: $VAR and ${VAR} replaced by their values (empty when unset), nothing else
expand_env() {
  local s="$1" out="" name
  while [[ "$s" =~ ^([^\$]*)\$(\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))(.*)$ ]]; do
    name="${BASH_REMATCH[3]:-${BASH_REMATCH[4]}}"
    out+="${BASH_REMATCH[1]}${!name:-}"
    s="${BASH_REMATCH[5]}"
  done
  printf '%s' "$out$s"
}

prepare_configuration() {
  local options=(jobmanager.rpc.address "${JOB_MANAGER_RPC_ADDRESS:-$(hostname -f)}"
                 blob.server.port 6124 query.server.port 6125)
  if [ -n "${TASK_MANAGER_NUMBER_OF_TASK_SLOTS:-}" ]; then
    options+=(taskmanager.numberOfTaskSlots "$TASK_MANAGER_NUMBER_OF_TASK_SLOTS")
  fi
  local line key value
  while IFS= read -r line; do
    line="${line//[[:space:]]/}"
    [ -n "$line" ] || continue
    key="${line%%:*}"
    value=""
    [ "$key" = "$line" ] || value="$(expand_env "${line#*:}")"
    options+=("$key" "$value")
  done <<<"${FLINK_PROPERTIES:-}"
  if [ -w "$IMAGE_CONF" ] || [ -w "$IMAGE_CONF/config.yaml" ]; then
    set_config_options "${options[@]}"
  elif [ "$FLINK_CONF_DIR" = "$IMAGE_CONF" ]; then
    echo "$IMAGE_CONF is not writable: the configuration cannot be prepared" >&2
    exit 1
  fi
}

# config_value KEY... : the first of the KEYs set in the effective configuration (flattened)
config_value() {
  local key line v
  for key in "$@"; do
    line="$(grep -m1 -F "$key: " <<<"$EFFECTIVE" | grep -m1 "^${key//./\\.}: " || true)"
    [ -n "$line" ] || continue
    v="${line#"$key: "}"
    if [[ "$v" == \'*\' ]]; then v="${v:1:${#v}-2}"; v="${v//\'\'/\'}"; fi
    printf '%s' "$v"
    return 0
  done
}

# launch ROLE ARGS... : bin/flink-console.sh's java command for a JobManager or TaskManager
launch() {
  local role="$1"; shift
  local dynamic=() rest=()
  while [ $# -gt 0 ]; do
    case "$1" in
      -D) dynamic+=("-D" "$2"); shift 2 ;;
      -D*) dynamic+=("-D" "${1#-D}"); shift ;;
      *) rest+=("$1"); shift ;;
    esac
  done
  [ -f "$FLINK_CONF_DIR/config.yaml" ] || { echo "no config.yaml in $FLINK_CONF_DIR" >&2; exit 1; }
  EFFECTIVE="$(bash_java_utils UPDATE_AND_GET_FLINK_CONFIGURATION -c "$FLINK_CONF_DIR" "${dynamic[@]}" -flatten)"
  local main params kind
  case "$role" in
    standalone-job) main=org.apache.flink.container.entrypoint.StandaloneApplicationClusterEntryPoint; params=GET_JM_RESOURCE_PARAMS; kind=jobmanager ;;
    jobmanager) main=org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint; params=GET_JM_RESOURCE_PARAMS; kind=jobmanager ;;
    taskmanager) main=org.apache.flink.runtime.taskexecutor.TaskManagerRunner; params=GET_TM_RESOURCE_PARAMS; kind=taskmanager ;;
  esac
  local p
  mapfile -t p < <(bash_java_utils "$params" -c "$FLINK_CONF_DIR" "${dynamic[@]}")
  [ "${#p[@]}" -eq 2 ] || { echo "BashJavaUtils $params printed no memory options" >&2; exit 1; }
  local opts
  opts="$(config_value env.java.default-opts.all) $(config_value env.java.opts.all env.java.opts) $(config_value "env.java.opts.$kind")"
  local log4j="$FLINK_CONF_DIR/log4j-console.properties"
  local classpath
  classpath="$(find "$FLINK_LIB_DIR/" -maxdepth 1 -name '*.jar' | LC_ALL=C sort | tr '\n' ':')"
  # shellcheck disable=SC2046,SC2086  # word lists: the privilege drop, memory and user options
  exec $(drop_privs) "$JAVA" ${p[0]} ${JVM_ARGS:-} ${JAVA_17_OPENS} $opts \
    "-Dlog.file=$FLINK_HOME/log/flink--$kind-$(hostname).log" \
    "-Dlog4j.configuration=file:$log4j" "-Dlog4j.configurationFile=file:$log4j" \
    -classpath "${classpath%:}" "$main" --configDir "$FLINK_CONF_DIR" ${p[1]} "${dynamic[@]}" "${rest[@]}"
}

# what Flink's default config.yaml puts in env.java.opts.all for Java 17 (the module openings)
JAVA_17_OPENS="--add-exports=java.base/sun.net.util=ALL-UNNAMED --add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED
--add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED --add-opens=java.base/java.lang=ALL-UNNAMED
--add-opens=java.base/java.net=ALL-UNNAMED --add-opens=java.base/java.io=ALL-UNNAMED
--add-opens=java.base/java.nio=ALL-UNNAMED --add-opens=java.base/sun.nio.ch=ALL-UNNAMED
--add-opens=java.base/java.lang.reflect=ALL-UNNAMED --add-opens=java.base/java.text=ALL-UNNAMED
--add-opens=java.base/java.time=ALL-UNNAMED --add-opens=java.base/java.util=ALL-UNNAMED
--add-opens=java.base/java.util.concurrent=ALL-UNNAMED --add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED
--add-opens=java.base/java.util.concurrent.locks=ALL-UNNAMED"

case "${1:-help}" in
  help|--help|-h) usage; exit 0 ;;
  jobmanager|standalone-job|taskmanager)
    role="$1"; shift
    copy_plugins_if_required
    prepare_configuration
    launch "$role" "$@"
    ;;
  *)
    # shellcheck disable=SC2046
    exec $(drop_privs) "$@"
    ;;
esac
