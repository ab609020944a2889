#!/usr/bin/env bash
# The process kubelet's Flink "image": the kubelet maps a Flink image (e.g.
# streamjob/flink-testjob:1.20.0) to this script with FLINK_HOME set to the version's folder
# install.sh filled (lib/ with the Maven jars, plugins/, opt/) and FLINK_USRLIB to the folder with
# the job jar (what the image holds in /opt/flink/usrlib). It lays out in the container's working
# folder what the Flink base image holds in /opt/flink (flink/image/Dockerfile) and runs that
# image's entrypoint, flink/image/docker-entrypoint.sh, so both kubelets run the same entrypoint:
#
#   standalone-job|jobmanager|taskmanager [args]   the image entrypoint's roles
#   /opt/streamjob/checker/flink-check [args]      the pre-check (the check pod's init container
#                                                  copies it there on a real node; this kubelet
#                                                  runs no init containers: the version's
#                                                  checker folder, flink/build.sh, stands in)
#   /opt/streamjob/checker/flink-jobmanager [args] the JobManager (finds where the run resumes,
#                                                  then runs this script as standalone-job)
#
# What differs from a container, and why: FLINK_CONF_DIR (a mounted ConfigMap) is a path under
# $STREAMJOB_ROOT here; every pod binds to its own pod IP ($POD_IP, through -D options) and the
# Prometheus reporter and query service take ports from a range, because all pods share this
# host's network; the JVM uses the serial collector (many JVMs on two cores).
set -euo pipefail
: "${FLINK_HOME:?FLINK_HOME (the Flink version folder with lib/) is not set by the image mapping}"
role="${1:?usage: flink-entrypoint.sh standalone-job|jobmanager|taskmanager [args]}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# The mounted ConfigMap, once: flink-jobmanager runs this script again for standalone-job.
if [ -n "${FLINK_CONF_DIR:-}" ] && [ -n "${STREAMJOB_ROOT:-}" ]; then
  case "$FLINK_CONF_DIR" in
    "$STREAMJOB_ROOT"/*) ;;
    *) export FLINK_CONF_DIR="$STREAMJOB_ROOT$FLINK_CONF_DIR" ;;
  esac
fi

case "$role" in
  /opt/streamjob/checker/*)
    shift
    : "${STREAMJOB_CHECKER_DIR:?STREAMJOB_CHECKER_DIR is not set by the image mapping}"
    # flink-jobmanager ends in the image's entrypoint: this script here, /docker-entrypoint.sh in
    # an image
    export STREAMJOB_FLINK_ENTRYPOINT="$repo/e2e/scripts/flink-entrypoint.sh"
    exec "$STREAMJOB_CHECKER_DIR/${role#/opt/streamjob/checker/}" "$@"
    ;;
esac

# /opt/flink: lib/, plugins/ and opt/ from the cache, usrlib/ and conf/ of this container
home="$PWD/flink-home"
mkdir -p "$home/conf" "$home/log"
ln -sfn "$FLINK_HOME/lib" "$home/lib"
ln -sfn "$FLINK_HOME/plugins" "$home/plugins"
[ ! -d "$FLINK_HOME/opt" ] || ln -sfn "$FLINK_HOME/opt" "$home/opt"
cp "$repo/flink/image/conf/config.yaml" "$repo/flink/image/conf/log4j-console.properties" "$home/conf/"
# A copy, not a link: Flink lists usrlib/ without following a symbolic link.
if [ -n "${FLINK_USRLIB:-}" ]; then
  rm -rf "$home/usrlib"
  mkdir -p "$home/usrlib"
  cp -R "$FLINK_USRLIB/." "$home/usrlib/"
fi

args=("$@")
if [ -n "${POD_IP:-}" ]; then
  for kv in "jobmanager.bind-host=$POD_IP" "taskmanager.bind-host=$POD_IP" "taskmanager.host=$POD_IP" \
    "rest.bind-address=$POD_IP" "rest.address=$POD_IP" "metrics.internal.query-service.port=50100-50900" \
    "metrics.reporter.prom.port=9249-9299"; do
    args+=("-D" "$kv")
  done
fi
export FLINK_HOME="$home" FLINK_LIB_DIR="$home/lib" FLINK_PLUGINS_DIR="$home/plugins"
export JVM_ARGS="${JVM_ARGS:-} -XX:+UseSerialGC"
if [ -n "${STREAMJOB_JAVA:-}" ]; then
  JAVA_HOME="$(dirname "$(dirname "$(readlink -f "$(command -v "$STREAMJOB_JAVA")")")")"
  export JAVA_HOME
fi
exec "$repo/flink/image/docker-entrypoint.sh" "${args[@]}"
