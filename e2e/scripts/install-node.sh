# Sourced by install.sh: the pieces of a real Kubernetes node (e2e/src/node/), pinned and cached.
#
#   - containerd, runc, the CNI plugins, nftables and conntrack (kube-proxy's nftables mode) and
#     buildah + mmdebstrap (offline image builds) from Debian's packages: downloaded at the pinned
#     version and unpacked into the cache (dpkg -x), never installed on the host. A library the
#     host lacks is unpacked beside them (LD_LIBRARY_PATH in the env file); a binary that still
#     misses one fails the install, naming it.
#   - kubelet and kube-proxy from the control plane's Kubernetes module (build_k8s in install.sh).
#   - CoreDNS, the cluster DNS: e2e/node/coredns (upstream's main with only the plugins we use),
#     built from its checked-in go.mod/go.sum.
#
# Uses install.sh's CACHE, ROOT, log, build_one, build_k8s, FAILED.

# ---- pins -------------------------------------------------------------------------------------
# Debian 12 (bookworm) package versions. A pin the archive no longer serves fails loudly in
# apt-get download; bump it here (and NODE_DEBS_RECIPE) after checking REAL-NODE-NOTES' traps.
NODE_DEBS=(
  "containerd=1.6.20~ds1-1+deb12u3"
  "runc=1.1.5+ds1-1+deb12u1"
  "containernetworking-plugins=1.1.1+ds1-3+b5"
  "buildah=1.28.2+ds1-3+deb12u1+b3"
  "libgpgme11=1.18.0-3+deb12u1"
  "mmdebstrap=1.3.5-7"
  "nftables=1.0.6-2+deb12u2"
  "libnftables1=1.0.6-2+deb12u2"
  "libnftnl11=1.2.4-2"
  "conntrack=1:1.4.7-1+b2"
  "libnetfilter-conntrack3=1.0.9-3"
  "libnfnetlink0=1.0.2-2"
)
NODE_DEBS_RECIPE="r1"
NODE_ROOT="$CACHE/bin/node-debs-$NODE_DEBS_RECIPE"
COREDNS_VERSION="v1.15.0"         # github.com/coredns/coredns, required by e2e/node/coredns/go.mod (the same)
# Bump when build_coredns's flags change. The cache key also hashes e2e/node/coredns's go.mod and
# main.go, so an edited plugin list or dependency is rebuilt.
COREDNS_RECIPE="r1"
COREDNS_BUILD="$COREDNS_VERSION-$COREDNS_RECIPE-$(cat "$ROOT/e2e/node/coredns/go.mod" "$ROOT/e2e/node/coredns/main.go" | sha256sum | cut -c1-8)"
# ------------------------------------------------------------------------------------------------

install_node_debs() {
  if [ -f "$NODE_ROOT/.complete" ]; then
    log "node packages $NODE_DEBS_RECIPE: cached ($NODE_ROOT)"
    return 0
  fi
  local logf="$CACHE/logs/node-debs-$NODE_DEBS_RECIPE.log" debs="$NODE_ROOT.debs" t0
  t0=$(date +%s)
  log "node packages $NODE_DEBS_RECIPE: downloading and unpacking (log: $logf)"
  rm -rf "$NODE_ROOT" "$debs"
  mkdir -p "$NODE_ROOT/root" "$debs"
  chmod 0777 "$debs" # apt's sandbox user writes the downloads
  if ! (cd "$debs" && apt-get download "${NODE_DEBS[@]}") >"$logf" 2>&1; then
    tail -n 20 "$logf" >&2
    FAILED+=("node-debs")
    return 1
  fi
  local deb missing=""
  for deb in "$debs"/*.deb; do
    dpkg-deb -x "$deb" "$NODE_ROOT/root" >>"$logf" 2>&1
    dpkg-deb -f "$deb" Package Version >>"$logf"
  done
  local libs="$NODE_ROOT/root/usr/lib/x86_64-linux-gnu:$NODE_ROOT/root/lib/x86_64-linux-gnu" bin
  for bin in usr/bin/containerd usr/bin/containerd-shim-runc-v2 usr/bin/ctr usr/sbin/runc \
             usr/bin/buildah usr/sbin/nft usr/sbin/conntrack usr/lib/cni/bridge usr/lib/cni/host-local \
             usr/lib/cni/loopback; do
    if [ ! -x "$NODE_ROOT/root/$bin" ]; then
      missing="$missing $bin(absent)"
    elif LD_LIBRARY_PATH="$libs" ldd "$NODE_ROOT/root/$bin" 2>/dev/null | grep -q "not found"; then
      missing="$missing $bin($(LD_LIBRARY_PATH="$libs" ldd "$NODE_ROOT/root/$bin" | grep "not found" | awk '{print $1}' | tr '\n' ' '))"
    fi
  done
  if [ -n "$missing" ]; then
    log "node packages: missing pieces:$missing"
    FAILED+=("node-debs")
    return 1
  fi
  rm -rf "$debs"
  touch "$NODE_ROOT/.complete"
  log "node packages $NODE_DEBS_RECIPE: unpacked in $(( $(date +%s) - t0 ))s -> $NODE_ROOT/root"
}

build_kubelet() { build_k8s kubelet "$1"; }
build_kube_proxy() { build_k8s kube-proxy "$1"; }

# CoreDNS: our module's go.sum is complete, so no -mod=mod (GOFLAGS' default -mod=readonly).
build_coredns() {
  local out="$1" src="$ROOT/e2e/node/coredns"
  if ! grep -q "^require github.com/coredns/coredns $COREDNS_VERSION\$" "$src/go.mod"; then
    echo "e2e/node/coredns/go.mod does not require github.com/coredns/coredns $COREDNS_VERSION" >&2
    return 1
  fi
  (cd "$src" && go build -trimpath -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$COREDNS_BUILD" -o "$out" .)
}

install_node_debs || true
build_one kubelet "$KUBERNETES_VERSION-$KUBERNETES_RECIPE" kubelet build_kubelet
build_one kube-proxy "$KUBERNETES_VERSION-$KUBERNETES_RECIPE" kube-proxy build_kube_proxy
build_one coredns "$COREDNS_BUILD" coredns build_coredns

node_env() {
  echo "export STREAMJOB_E2E_NODE_ROOT='$NODE_ROOT/root'"
  echo "export STREAMJOB_E2E_KUBELET='$CACHE/bin/kubelet-$KUBERNETES_VERSION-$KUBERNETES_RECIPE/kubelet'"
  echo "export STREAMJOB_E2E_KUBE_PROXY='$CACHE/bin/kube-proxy-$KUBERNETES_VERSION-$KUBERNETES_RECIPE/kube-proxy'"
  echo "export STREAMJOB_E2E_COREDNS='$CACHE/bin/coredns-$COREDNS_BUILD/coredns'"
}
