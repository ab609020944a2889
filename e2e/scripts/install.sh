#!/usr/bin/env bash
# Builds (once) the pinned binaries the e2e suite needs and writes an env file that exports their
# paths. Idempotent: a binary that already exists for its pinned version is not rebuilt, so a warm
# run does nothing but write the env file.
#
#   bash e2e/scripts/install.sh            # build what is missing, print the env file path
#   STREAMJOB_CACHE=/some/dir bash e2e/scripts/install.sh
#
# Everything lives in ${STREAMJOB_CACHE:-$HOME/.cache/streamjob}:
#   bin/<component>-<version>/<binary>   the built binaries
#   go/build, go/mod                     GOCACHE and GOMODCACHE (kept warm between runs)
#   logs/<component>-<version>.log       build logs
#   e2e-env.sh                           exports STREAMJOB_E2E_* paths (source it, or let the tests read it)
#
# Only one Go target is built at a time (the machine has 2 cores shared with Rust builds).
set -euo pipefail

# ---- pins -------------------------------------------------------------------------------------
KUBERNETES_VERSION="v1.36.3"      # k8s.io/kubernetes; staging modules at v0.36.3
# Bump when the way the Kubernetes binaries are built changes (flags), so cached ones are rebuilt.
# r2: version ldflags (without them the apiserver reports v0.0.0-master and helm refuses charts
#     with a kubeVersion constraint).
KUBERNETES_RECIPE="r2"
ETCD_VERSION="v3.6.16"            # go.etcd.io/etcd/server/v3
HELM_VERSION="v3.22.0"            # helm.sh/helm/v3/cmd/helm
KAFKA_VERSION="4.4.0"             # org.apache.kafka:kafka_2.13 from Maven Central (tools/kafka/pom.xml pins the same)
MINIO_VERSION="v0.0.0-20260212201848-7aac2a2c5b7c"   # github.com/minio/minio: the proxy serves no RELEASE.* tag here, only pseudo-versions; this is @latest (2026-02-12, master after the last release)
FAKE_GCS_VERSION="v1.56.1"        # github.com/fsouza/fake-gcs-server (the GCS emulator)
AZURITE_VERSION="3.37.0"          # npm azurite (the Azure Storage emulator; runs on the machine's Node.js)
AZURE_BLOB_SDK_VERSION="12.34.0"  # npm @azure/storage-blob: creates the tests' containers (tools/azurite/)
# Apache Flink, the versions the Flink engine supports (one per minor; the newest that serves
# every jar tools/flink/pom.xml lists: flink-container 1.20.x stops at 1.20.0 here).
FLINK_VERSIONS=("1.20.0" "2.3.0")
# ------------------------------------------------------------------------------------------------

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${STREAMJOB_CACHE:-$HOME/.cache/streamjob}"
mkdir -p "$CACHE/bin" "$CACHE/go/build" "$CACHE/go/mod" "$CACHE/logs" "$CACHE/work"
export GOCACHE="$CACHE/go/build"
export GOMODCACHE="$CACHE/go/mod"
export CGO_ENABLED=0
export GOFLAGS="-buildvcs=false -p=2"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

if ! command -v go >/dev/null 2>&1; then
  echo "install.sh: 'go' is not on PATH; install Go >= 1.26 (the Kubernetes ${KUBERNETES_VERSION} go.mod declares go 1.26.0)" >&2
  exit 1
fi
GO_MINOR="$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')"
if [ "$GO_MINOR" -ge 27 ]; then
  # JSON v2 on by default breaks the apiserver's OpenAPI (kubectl apply: "failed to download openapi").
  export GOEXPERIMENT="${GOEXPERIMENT:+$GOEXPERIMENT,}nojsonv2"
fi

# Serialise concurrent runs (two test runs, or a CI run beside a developer) on the cache.
exec 9>"$CACHE/install.lock"
flock 9

FAILED=()
START_ALL=$(date +%s)

log() { echo "[install.sh $(date -u +%H:%M:%S)] $*" >&2; }

# build_one NAME VERSION BINARY FUNCTION : runs FUNCTION OUT_PATH unless OUT_PATH exists.
build_one() {
  local name="$1" version="$2" binary="$3" fn="$4"
  local dir="$CACHE/bin/$name-$version"
  local out="$dir/$binary"
  if [ -x "$out" ]; then
    log "$name $version: cached ($out)"
    return 0
  fi
  mkdir -p "$dir"
  local logf="$CACHE/logs/$name-$version.log"
  local t0
  t0=$(date +%s)
  log "$name $version: building (log: $logf)"
  if "$fn" "$out.tmp" >"$logf" 2>&1; then
    mv "$out.tmp" "$out"
    log "$name $version: built in $(( $(date +%s) - t0 ))s -> $out"
  else
    rm -f "$out.tmp"
    log "$name $version: FAILED after $(( $(date +%s) - t0 ))s; last lines of $logf:"
    tail -n 30 "$logf" >&2 || true
    FAILED+=("$name")
  fi
}

# ---- Kubernetes: wrapper module with replace lines for every staging module --------------------
K8S_WRAPPER="$CACHE/work/k8s-wrapper-$KUBERNETES_VERSION"
k8s_wrapper() {
  if [ -f "$K8S_WRAPPER/go.mod" ] && [ -f "$K8S_WRAPPER/.complete" ]; then
    return 0
  fi
  rm -rf "$K8S_WRAPPER"
  mkdir -p "$K8S_WRAPPER"
  local gomod staging_version
  gomod="$(cd "$K8S_WRAPPER" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" \
    | sed -n -E 's/^[[:space:]]*"GoMod": "(.*)",?$/\1/p')"
  if [ -z "$gomod" ] || [ ! -f "$gomod" ]; then
    echo "could not download k8s.io/kubernetes@$KUBERNETES_VERSION go.mod" >&2
    return 1
  fi
  staging_version="v0.${KUBERNETES_VERSION#v1.}"
  {
    echo "module streamjob.local/k8s-wrapper"
    echo
    echo "go 1.26.0"
    echo
    echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
    echo
    # Every `k8s.io/x => ./staging/src/k8s.io/x` line becomes `k8s.io/x => k8s.io/x v0.N.P`.
    sed -n -E "s#^[[:space:]]*(replace[[:space:]]+)?(k8s\.io/[A-Za-z0-9._/-]+)[[:space:]]+=>[[:space:]]+\./staging/src/.*#replace \2 => \2 $staging_version#p" "$gomod"
  } >"$K8S_WRAPPER/go.mod"
  echo "wrapper go.mod:"; cat "$K8S_WRAPPER/go.mod"
  (cd "$K8S_WRAPPER" && GOFLAGS="$GOFLAGS -mod=mod" go mod download k8s.io/kubernetes)
  touch "$K8S_WRAPPER/.complete"
}
build_k8s() {
  local pkg="$1" out="$2"
  k8s_wrapper
  # What kubernetes' hack/lib/version.sh stamps in; the apiserver's /version comes from here.
  local minor="${KUBERNETES_VERSION#v1.}"; minor="${minor%%.*}"
  local ldflags="-s -w" p
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $p.gitVersion=$KUBERNETES_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ldflags="$ldflags -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$K8S_WRAPPER" && GOFLAGS="$GOFLAGS -mod=mod" go build -trimpath -ldflags "$ldflags" -o "$out" "k8s.io/kubernetes/cmd/$pkg")
}
build_kube_apiserver() { build_k8s kube-apiserver "$1"; }
build_kube_controller_manager() { build_k8s kube-controller-manager "$1"; }
build_kube_scheduler() { build_k8s kube-scheduler "$1"; }
build_kubectl() { build_k8s kubectl "$1"; }

# ---- etcd: wrapper module requiring the server module (its go.mod pins api/client at the same tag)
build_etcd() {
  local out="$1" w="$CACHE/work/etcd-wrapper-$ETCD_VERSION"
  mkdir -p "$w"
  printf 'module streamjob.local/etcd-wrapper\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >"$w/go.mod"
  (cd "$w" && GOFLAGS="$GOFLAGS -mod=mod" go build -trimpath -ldflags "-s -w" -o "$out" go.etcd.io/etcd/server/v3)
}

# ---- helm: plain go install-able module -------------------------------------------------------
build_helm() {
  local out="$1" gobin="$CACHE/work/helm-gobin-$HELM_VERSION"
  mkdir -p "$gobin"
  GOBIN="$gobin" go install -trimpath -ldflags "-s -w" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  mv "$gobin/helm" "$out"
}

# ---- MinIO: its documented source install -----------------------------------------------------
build_minio() {
  local out="$1" gobin="$CACHE/work/minio-gobin-$MINIO_VERSION"
  mkdir -p "$gobin"
  GOBIN="$gobin" go install -trimpath -ldflags "-s -w" "github.com/minio/minio@$MINIO_VERSION"
  mv "$gobin/minio" "$out"
}

# ---- fake-gcs-server: the GCS emulator, go install-able ------------------------------------------
build_fake_gcs() {
  local out="$1" gobin="$CACHE/work/fake-gcs-gobin-$FAKE_GCS_VERSION"
  mkdir -p "$gobin"
  GOBIN="$gobin" go install -trimpath -ldflags "-s -w" "github.com/fsouza/fake-gcs-server@$FAKE_GCS_VERSION"
  mv "$gobin/fake-gcs-server" "$out"
}

# ---- Azurite: the Azure Storage emulator from npm (exact version, no lock-free ranges) ----------
build_azurite() {
  local out="$1" dir
  dir="$(dirname "$out")/pkg"
  rm -rf "$dir" && mkdir -p "$dir"
  (cd "$dir" && npm install --no-audit --no-fund --save-exact --prefix "$dir" \
    "azurite@$AZURITE_VERSION" "@azure/storage-blob@$AZURE_BLOB_SDK_VERSION")
  cp "$ROOT/tools/azurite/create-container.mjs" "$dir/"
  printf '#!/bin/sh\nexec node "%s/node_modules/azurite/dist/src/blob/main.js" "$@"\n' "$dir" >"$out"
  chmod +x "$out"
}

build_one etcd "$ETCD_VERSION" etcd build_etcd
build_one kube-apiserver "$KUBERNETES_VERSION-$KUBERNETES_RECIPE" kube-apiserver build_kube_apiserver
build_one kube-controller-manager "$KUBERNETES_VERSION-$KUBERNETES_RECIPE" kube-controller-manager build_kube_controller_manager
build_one kube-scheduler "$KUBERNETES_VERSION-$KUBERNETES_RECIPE" kube-scheduler build_kube_scheduler
build_one kubectl "$KUBERNETES_VERSION-$KUBERNETES_RECIPE" kubectl build_kubectl
build_one helm "$HELM_VERSION" helm build_helm
build_one minio "$MINIO_VERSION" minio build_minio
build_one fake-gcs-server "$FAKE_GCS_VERSION" fake-gcs-server build_fake_gcs
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  build_one azurite "$AZURITE_VERSION-sdk$AZURE_BLOB_SDK_VERSION" azurite-blob build_azurite
else
  log "azurite: node/npm not on PATH"; FAILED+=("azurite")
fi

# ---- Kafka: the broker's jars from Maven Central (run by e2e/src/kafka.rs, KRaft, loopback only)
KAFKA_LIB="$CACHE/bin/kafka-$KAFKA_VERSION/lib"
if [ -f "$KAFKA_LIB/.complete" ]; then
  log "kafka $KAFKA_VERSION: cached ($KAFKA_LIB)"
else
  if ! grep -q "<kafka.version>$KAFKA_VERSION</kafka.version>" "$ROOT/tools/kafka/pom.xml"; then
    log "kafka: tools/kafka/pom.xml does not pin $KAFKA_VERSION"; FAILED+=("kafka")
  else
    log "kafka $KAFKA_VERSION: fetching jars (log: $CACHE/logs/kafka-$KAFKA_VERSION.log)"
    rm -rf "$KAFKA_LIB"
    if mvn -B -q -f "$ROOT/tools/kafka/pom.xml" dependency:copy-dependencies -DoutputDirectory="$KAFKA_LIB" \
        >"$CACHE/logs/kafka-$KAFKA_VERSION.log" 2>&1 && ls "$KAFKA_LIB"/kafka_2.13-*.jar >/dev/null 2>&1; then
      touch "$KAFKA_LIB/.complete"
      log "kafka $KAFKA_VERSION: $(ls "$KAFKA_LIB" | wc -l) jars in $KAFKA_LIB"
    else
      tail -n 30 "$CACHE/logs/kafka-$KAFKA_VERSION.log" >&2 || true
      FAILED+=("kafka")
    fi
  fi
fi

# ---- Flink: JobManager/TaskManager jars from Maven Central per version, and our pre-check and
#      test job compiled against each (flink/build.sh; rebuilt when their sources change)
for FLINK_VERSION in "${FLINK_VERSIONS[@]}"; do
  FLINK_DIR="$CACHE/bin/flink-$FLINK_VERSION"
  if [ -f "$FLINK_DIR/lib/.complete" ]; then
    log "flink $FLINK_VERSION: cached ($FLINK_DIR/lib)"
  else
    log "flink $FLINK_VERSION: fetching jars (log: $CACHE/logs/flink-$FLINK_VERSION.log)"
    rm -rf "$FLINK_DIR/lib"
    if mvn -B -q -f "$ROOT/tools/flink/pom.xml" -Dflink.version="$FLINK_VERSION" dependency:copy-dependencies \
        -DoutputDirectory="$FLINK_DIR/lib" >"$CACHE/logs/flink-$FLINK_VERSION.log" 2>&1 \
        && ls "$FLINK_DIR/lib"/flink-runtime-"$FLINK_VERSION".jar >/dev/null 2>&1; then
      touch "$FLINK_DIR/lib/.complete"
      log "flink $FLINK_VERSION: $(ls "$FLINK_DIR/lib" | wc -l) jars"
    else
      tail -n 30 "$CACHE/logs/flink-$FLINK_VERSION.log" >&2 || true
      FAILED+=("flink-$FLINK_VERSION")
      continue
    fi
  fi
  # the Prometheus reporter, where every Flink distribution (and so the official image) has it:
  # plugins/metrics-prometheus (the operator configures it)
  PROM_PLUGIN="$FLINK_DIR/plugins/metrics-prometheus/flink-metrics-prometheus-$FLINK_VERSION.jar"
  if [ ! -f "$PROM_PLUGIN" ]; then
    if ! mvn -B -q dependency:copy -Dartifact="org.apache.flink:flink-metrics-prometheus:$FLINK_VERSION" \
        -DoutputDirectory="$(dirname "$PROM_PLUGIN")" >>"$CACHE/logs/flink-$FLINK_VERSION.log" 2>&1; then
      tail -n 30 "$CACHE/logs/flink-$FLINK_VERSION.log" >&2 || true
      FAILED+=("flink-$FLINK_VERSION-metrics-prometheus")
    fi
  fi
  # the S3 file system (Hadoop's S3A, the one whose writer Flink's FileSink can resume), where the
  # distribution keeps optional plugins: opt/, enabled by ENABLE_BUILT_IN_PLUGINS (the Flink base
  # image built by build-images.sh; the real node's Flink jobs keep state and output on MinIO)
  S3_PLUGIN="$FLINK_DIR/opt/flink-s3-fs-hadoop-$FLINK_VERSION.jar"
  if [ ! -f "$S3_PLUGIN" ]; then
    if ! mvn -B -q dependency:copy -Dartifact="org.apache.flink:flink-s3-fs-hadoop:$FLINK_VERSION" \
        -DoutputDirectory="$(dirname "$S3_PLUGIN")" >>"$CACHE/logs/flink-$FLINK_VERSION.log" 2>&1; then
      tail -n 30 "$CACHE/logs/flink-$FLINK_VERSION.log" >&2 || true
      FAILED+=("flink-$FLINK_VERSION-s3-fs-hadoop")
    fi
  fi
  if ! bash "$ROOT/flink/build.sh" "$FLINK_DIR" 2>>"$CACHE/logs/flink-$FLINK_VERSION.log"; then
    tail -n 30 "$CACHE/logs/flink-$FLINK_VERSION.log" >&2 || true
    FAILED+=("flink-$FLINK_VERSION-checker")
  fi
done

# ---- the real node: containerd, runc, CNI, kubelet, kube-proxy, image builders
source "$ROOT/e2e/scripts/install-node.sh"

ENV_FILE="$CACHE/e2e-env.sh"
{
  echo "# written by e2e/scripts/install.sh at $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "export STREAMJOB_E2E_ETCD='$CACHE/bin/etcd-$ETCD_VERSION/etcd'"
  echo "export STREAMJOB_E2E_KUBE_APISERVER='$CACHE/bin/kube-apiserver-$KUBERNETES_VERSION-$KUBERNETES_RECIPE/kube-apiserver'"
  echo "export STREAMJOB_E2E_KUBE_CONTROLLER_MANAGER='$CACHE/bin/kube-controller-manager-$KUBERNETES_VERSION-$KUBERNETES_RECIPE/kube-controller-manager'"
  echo "export STREAMJOB_E2E_KUBE_SCHEDULER='$CACHE/bin/kube-scheduler-$KUBERNETES_VERSION-$KUBERNETES_RECIPE/kube-scheduler'"
  echo "export STREAMJOB_E2E_KUBECTL='$CACHE/bin/kubectl-$KUBERNETES_VERSION-$KUBERNETES_RECIPE/kubectl'"
  echo "export STREAMJOB_E2E_HELM='$CACHE/bin/helm-$HELM_VERSION/helm'"
  echo "export STREAMJOB_E2E_MINIO='$CACHE/bin/minio-$MINIO_VERSION/minio'"
  echo "export STREAMJOB_E2E_KAFKA_LIB='$KAFKA_LIB'"
  echo "export STREAMJOB_E2E_FAKE_GCS='$CACHE/bin/fake-gcs-server-$FAKE_GCS_VERSION/fake-gcs-server'"
  for FLINK_VERSION in "${FLINK_VERSIONS[@]}"; do
    echo "export STREAMJOB_E2E_FLINK_${FLINK_VERSION//./_}='$CACHE/bin/flink-$FLINK_VERSION'"
  done
  echo "export STREAMJOB_E2E_AZURITE='$CACHE/bin/azurite-$AZURITE_VERSION-sdk$AZURE_BLOB_SDK_VERSION/azurite-blob'"
  node_env
} >"$ENV_FILE"

log "done in $(( $(date +%s) - START_ALL ))s; env file: $ENV_FILE"
cat "$ENV_FILE"
if [ "${#FAILED[@]}" -gt 0 ]; then
  log "FAILED components: ${FAILED[*]} (see $CACHE/logs/)"
  exit 1
fi
