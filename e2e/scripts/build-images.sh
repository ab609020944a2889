#!/usr/bin/env bash
# Builds, offline and without a Docker daemon or registry, the container images the real-node e2e
# tests load into containerd, and exports each as a docker-archive that `ctr -n k8s.io images
# import` takes with its full name. Idempotent: every image is keyed by a content hash of its inputs
# (pins, this script's recipe functions, the Dockerfile, the binaries); a warm run only hashes the
# binaries and rewrites the index.
#
#   bash e2e/scripts/build-images.sh           # build what is missing or stale, print a summary
#   bash e2e/scripts/build-images.sh --force   # rebuild everything
#   STREAMJOB_IMAGE_BINARIES=/dir bash e2e/scripts/build-images.sh   # binaries from elsewhere
#       (a folder laid out like target/debug: the binaries, and the template's in examples/)
#
# Images:
#   streamjob/base-cc:debian12  a distroless-like base (like gcr.io/distroless/cc-debian12:nonroot)
#       from pinned Debian 12 packages with mmdebstrap's `extract` variant (files only: no dpkg, no
#       shell, no maintainer scripts); packages pulled in only as dependencies (debconf, mawk, the
#       openssl CLI) are removed again, the CA bundle is assembled here, passwd/group have root,
#       nobody and nonroot (65532:65532), /tmp is 1777. Package list: base-cc-debian12.manifest.
#   streamjob/runtime:e2e, streamjob/operator:e2e  the Dockerfile's `runtime` and `operator`
#       targets with BASE_IMAGE=<the base above> and BINARIES=prebuilt: the cargo binaries (debug
#       builds in $CARGO_TARGET_DIR/debug unless STREAMJOB_IMAGE_BINARIES says otherwise; cargo is
#       never run here), stripped of debug info, in a temporary build context. Each is smoke-tested
#       (`<binary> --version` on the image's own loader and libraries, as 65532, in an empty netns).
#   streamjob/job-template:{v1,v2,v3,v2-crashing}  templates/streamjob-job/Dockerfile the same way
#       (BASE_IMAGE=<the base>, BINARIES=prebuilt, smoke-tested), its window-totals-job being
#       window-totals-job (v1), examples/upgrade_compatible (v2: changed logic, same state),
#       examples/upgrade_incompatible (v3: a changed state type) of the same cargo build;
#       v2-crashing is v2 plus ENV JOB_TEMPLATE_FAIL_AFTER_RECORDS=6000 (a bug shipped in an image),
#       v2-oom v2 plus ENV JOB_TEMPLATE_ALLOCATE_AFTER_RECORDS=20000 (a memory spike).
#   streamjob/pause:e2e, streamjob/e2e-probe:e2e  e2e/node/{pause,probe}.c, static, from scratch.
#   streamjob/jre:17-debian12  Debian 12's minbase with openjdk-17-jre-headless (mmdebstrap, every
#       package pinned in e2e/node/jre17-debian12.pins; the installed set must equal it), the base
#       of the Flink images (like eclipse-temurin:17-jre, which the official Flink images use).
#   streamjob/flink:<version>  flink/image/Dockerfile (BASE_IMAGE=<the JRE>): the Flink base image
#       per supported version, /opt/flink laid out like the official flink:<version> images (lib/
#       from install.sh's Maven jars, plugins/metrics-prometheus, opt/flink-s3-fs-hadoop, conf/,
#       user flink 9999, flink/image/docker-entrypoint.sh).
#   streamjob/flink-testjob:<version>, :<version>-r2, streamjob/flink-testjob-v2:<version>  the
#       test job built FROM that image as a Flink user builds theirs (flink/testjob/Dockerfile,
#       the jar in usrlib/); -r2 is a new image of the same job (an image bump), -v2 the next
#       version whose AuditTally state class is gone (flink/build.sh).
#   streamjob/flink-checker:e2e  the Dockerfile's `flink-checker` target with CHECKER_FILES=
#       flink-checker-prebuilt (flink/build.sh's checker/ of every version) on the JRE image.
#
# Everything lives in ${STREAMJOB_CACHE:-$HOME/.cache/streamjob}/images:
#   <name>-<tag>.tar                 docker-archive, RepoTags docker.io/streamjob/<name>:<tag>
#   base-cc-debian12.manifest        the base's packages (name, version, arch, .deb sha256, kept|dropped)
#   index.tsv                        one line per image: name:tag, archive path, size bytes, sha256:<archive>
#   .stamps/<name>-<tag>             input key, size and sha256 of the archive that was built from it
#   .stamps/<name>-<tag>.binary      the binary's size before and after stripping
#   .storage/                        buildah's own storage (vfs), .config/ its configuration files
#   .work/                           temporary build contexts and rootfs (removed after each run)
# Logs: ${STREAMJOB_CACHE}/logs/images-<name>-<tag>.log.
#
# Isolation (see e2e's REAL-NODE-NOTES traps): every buildah command runs inside
# `unshare --net --mount --propagation private` (an empty network namespace of its own) and with
# --isolation chroot, which never sets up a network (it uses the caller's, the empty one; buildah
# 1.28 refuses --network none with it); its configuration (netns "none", an empty CNI directory)
# leaves nothing to configure either. The one RUN step (the Flink image's useradd) runs there
# too, with no network. mmdebstrap
# needs the Debian mirror, so it runs in the host's network namespace but a private mount namespace;
# it creates no links, routes or rules. The script compares `ip link`, `ip route`, `nft list
# ruleset` and net.ipv4.ip_forward before and after and fails if anything changed.
# Needs root, the node packages install.sh unpacks (buildah, mmdebstrap, nft) and the host's apt.
set -euo pipefail

# ---- pins -------------------------------------------------------------------------------------
DEBIAN_SUITE="bookworm"
DEBIAN_MIRRORS=(
  "deb http://deb.debian.org/debian bookworm main"
  "deb http://deb.debian.org/debian bookworm-updates main"
  "deb http://deb.debian.org/debian-security bookworm-security main"
)
# Every package of the base, dependencies included, at an exact version (Debian 12.15 + security,
# as served on 2026-12-04; snapshot.debian.org is not reachable from here, so the pins are the
# snapshot). A version the mirror no longer serves fails loudly in mmdebstrap's download; bump it
# here and BASE_RECIPE. The downloaded set must equal this list exactly.
BASE_DEBS=(
  "libc6=2.36-9+deb12u14"
  "libgcc-s1=12.2.0-14+deb12u1"
  "gcc-12-base=12.2.0-14+deb12u1"
  "libstdc++6=12.2.0-14+deb12u1"
  "libgomp1=12.2.0-14+deb12u1"
  "libssl3=3.0.22-1~deb12u2"
  "zlib1g=1:1.2.13.dfsg-1+deb12u1"
  "ca-certificates=20250419~deb12u2"
  "tzdata=2026f-0+deb12u1"
  "netbase=6.4"
  "base-files=12.4+deb12u15"
  # dependencies only (ca-certificates, tzdata, base-files); their files are removed below
  "openssl=3.0.22-1~deb12u2"
  "debconf=1.5.82"
  "mawk=1.3.4.20200120-3.1"
)
# Dependencies whose files are removed after extraction, except paths matching BASE_KEEP_REGEX
# (openssl's configuration, which libssl3 reads).
BASE_DROP_DEBS=("openssl" "debconf" "mawk")
BASE_KEEP_REGEX='^\./(etc/ssl/|usr/lib/ssl/(cert\.pem|certs|openssl\.cnf|private)$)'
# Bump when the recipe changes in a way the hashed inputs do not show.
BASE_RECIPE="r1"
APP_RECIPE="r1"
BASE_IMAGE="docker.io/streamjob/base-cc:debian12"
# The JRE base of the Flink images: Debian's minbase plus openjdk-17-jre-headless, every package
# pinned (the file lists package=version; the installed set must equal it exactly).
JRE_PINS="e2e/node/jre17-debian12.pins"
JRE_RECIPE="r1"
JRE_IMAGE="docker.io/streamjob/jre:17-debian12"
FLINK_VERSIONS=("1.20.0" "2.3.0")   # install.sh's
APP_TAG="e2e"
# Created timestamp of every image and mtime of every file in it (reproducible archives).
BUILD_EPOCH=0
NODE_DEBS_RECIPE="r1"   # install-node.sh's, for the unpacked buildah/mmdebstrap/nft
# ------------------------------------------------------------------------------------------------

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SELF="$REPO/e2e/scripts/build-images.sh"
CACHE="${STREAMJOB_CACHE:-$HOME/.cache/streamjob}"
IMAGES="$CACHE/images"
NODE_ROOT="${STREAMJOB_E2E_NODE_ROOT:-$CACHE/bin/node-debs-$NODE_DEBS_RECIPE/root}"
NODE_LIBS="$NODE_ROOT/usr/lib/x86_64-linux-gnu:$NODE_ROOT/lib/x86_64-linux-gnu"
BUILDAH="$NODE_ROOT/usr/bin/buildah"
MMDEBSTRAP="$NODE_ROOT/usr/bin/mmdebstrap"
RUNC="$NODE_ROOT/usr/sbin/runc"
NFT="$NODE_ROOT/usr/sbin/nft"
BINARIES_DIR="${STREAMJOB_IMAGE_BINARIES:-${CARGO_TARGET_DIR:-$REPO/target}/debug}"
CONF="$IMAGES/.config"
WORK="$IMAGES/.work"
STAMPS="$IMAGES/.stamps"

log() { echo "[build-images.sh $(date -u +%H:%M:%S)] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
secs_since() { local d=$(( $(now_ms) - $1 )); printf '%d.%01ds' $(( d / 1000 )) $(( (d % 1000) / 100 )); }
sha256() { sha256sum "$1" | cut -d' ' -f1; }
human() { numfmt --to=iec-i --suffix=B --format='%.1f' "$1"; }

# ---- the base's rootfs: runs as mmdebstrap's --extract-hook (this script, re-entered) ----------
# $1 = the rootfs being built (packages extracted, .debs still in var/cache/apt/archives, apt lists
# still present), $2 = where to write the package manifest.
base_rootfs_hook() {
  local r="$1" manifest="$2" deb pkg ver arch entry state
  shopt -s nullglob
  local debs=("$r"/var/cache/apt/archives/*.deb)
  # 1. exactly the pinned set was downloaded
  local got
  got="$(for deb in "${debs[@]}"; do dpkg-deb -W --showformat='${Package}=${Version}\n' "$deb"; done | sort)"
  if [ "$got" != "$(printf '%s\n' "${BASE_DEBS[@]}" | sort)" ]; then
    echo "downloaded packages differ from BASE_DEBS:" >&2
    diff <(printf '%s\n' "${BASE_DEBS[@]}" | sort) <(echo "$got") >&2 || true
    return 1
  fi
  # 2. the manifest: what the mirror said (Release dates) and every package with its state
  {
    echo "# streamjob/base-cc:debian12 $BASE_RECIPE, mmdebstrap --variant=extract, suite $DEBIAN_SUITE"
    local rel
    for rel in "$r"/var/lib/apt/lists/*InRelease; do
      echo "# $(basename "$rel" | sed 's/_InRelease$//'): $(grep -m1 '^Date:' "$rel")"
    done
    echo "# package	version	architecture	sha256(.deb)	state"
    for deb in "${debs[@]}"; do
      IFS=$'\t' read -r pkg ver arch < <(dpkg-deb -W --showformat='${Package}\t${Version}\t${Architecture}\n' "$deb")
      state=kept
      if printf '%s\n' "${BASE_DROP_DEBS[@]}" | grep -qx "$pkg"; then state=dropped; fi
      printf '%s\t%s\t%s\t%s\t%s\n' "$pkg" "$ver" "$arch" "$(sha256 "$deb")" "$state"
    done | sort
  } >"$manifest"
  # 3. remove the dropped packages' files (directories only where they end up empty)
  for deb in "${debs[@]}"; do
    pkg="$(dpkg-deb -f "$deb" Package)"
    printf '%s\n' "${BASE_DROP_DEBS[@]}" | grep -qx "$pkg" || continue
    local listing
    listing="$(dpkg-deb --fsys-tarfile "$deb" | tar -t)"
    while IFS= read -r entry; do
      case "$entry" in */) continue ;; esac
      [[ "$entry" =~ $BASE_KEEP_REGEX ]] && continue
      rm -f "$r/$entry"
    done <<<"$listing"
    # deepest first; top-level directories (./usr/bin/, ./etc/x/) stay
    while IFS= read -r entry; do
      [[ "$entry" =~ $BASE_KEEP_REGEX ]] && continue
      [ "$(tr -cd / <<<"${entry%/}" | wc -c)" -ge 3 ] || continue
      rmdir "$r/$entry" 2>/dev/null || true
    done < <(grep '/$' <<<"$listing" | sort -r)
  done
  # 4. no executables but the dynamic loader: what is left of /usr/bin, /usr/sbin are scripts
  #    whose interpreters are gone (update-ca-certificates); no documentation but copyrights
  rm -f "$r"/usr/sbin/update-ca-certificates
  rm -rf "$r"/usr/share/{man,info,lintian,bash-completion,gcc,gdb,pixmaps,debconf,perl5} \
         "$r"/var/cache/debconf "$r"/etc/update-motd.d
  find "$r"/usr/share/doc -mindepth 2 ! -type d ! -name copyright -delete
  find "$r"/usr/share/doc -mindepth 1 -depth -type d -empty -delete
  # 5. dpkg's database stays empty (nothing installs here); scanners read status.d, as in
  #    distroless (the rest of /var/lib/dpkg, apt's directories go in base_rootfs_finish, after
  #    mmdebstrap's own cleanup)
  mkdir -p "$r"/var/lib/dpkg/status.d
  for deb in "${debs[@]}"; do
    pkg="$(dpkg-deb -f "$deb" Package)"
    printf '%s\n' "${BASE_DROP_DEBS[@]}" | grep -qx "$pkg" && continue
    { dpkg-deb -f "$deb"; echo "Status: install ok installed"; } >"$r/var/lib/dpkg/status.d/$pkg"
  done
  # 6. what the maintainer scripts would have done: the CA bundle (update-ca-certificates with
  #    every Mozilla certificate enabled, the default)
  local crt n=0
  : >"$r"/etc/ssl/certs/ca-certificates.crt
  while IFS= read -r crt; do
    sed -e '$a\' "$crt" >>"$r"/etc/ssl/certs/ca-certificates.crt; n=$((n + 1))
  done < <(find "$r"/usr/share/ca-certificates -name '*.crt' | LC_ALL=C sort)
  [ "$n" -gt 100 ] || { echo "only $n CA certificates found" >&2; return 1; }
  # 7. users, like gcr.io/distroless/cc-debian12:nonroot
  printf '%s\n' "root:x:0:0:root:/root:/sbin/nologin" \
    "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin" \
    "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin" >"$r"/etc/passwd
  printf '%s\n' "root:x:0:" "nobody:x:65534:" "tty:x:5:" "staff:x:50:" "nonroot:x:65532:" >"$r"/etc/group
  printf '%s\n' "passwd: files" "group: files" "shadow: files" "hosts: files dns" "networks: files" \
    "protocols: files" "services: files" "ethers: files" "rpc: files" >"$r"/etc/nsswitch.conf
  chmod 0644 "$r"/etc/passwd "$r"/etc/group "$r"/etc/nsswitch.conf
  install -d -m 0700 -o 65532 -g 65532 "$r"/home/nonroot
  install -d -m 0700 "$r"/root
  chmod 1777 "$r"/tmp "$r"/var/tmp
}

# After mmdebstrap (--format=directory): what its cleanup step still needs is removed here, then
# the checks. $1 = the rootfs directory.
base_rootfs_finish() {
  local r="$1" entry bad
  rm -rf "$r"/etc/apt "$r"/var/lib/apt "$r"/var/cache/apt "$r"/var/log/apt "$r"/etc/dpkg/dpkg.cfg.d
  find "$r"/var/lib/dpkg -mindepth 1 -maxdepth 1 ! -name status.d -exec rm -rf {} +
  # files mmdebstrap copies from the host (the kubelet mounts its own), device nodes it creates
  # (the runtime mounts /dev)
  rm -f "$r"/etc/resolv.conf "$r"/etc/hostname "$r"/etc/hosts
  find "$r"/dev -mindepth 1 -delete
  # checks: no shell or interpreter, the loader and the libraries the binaries need are there
  bad="$(find "$r" \( -name sh -o -name bash -o -name dash -o -name busybox -o -name 'perl*' -o -name mawk -o -name awk \) ! -type d)"
  [ -z "$bad" ] || { echo "interpreters left in the rootfs: $bad" >&2; return 1; }
  bad="$(find "$r"/usr/bin "$r"/usr/sbin ! -type d)"
  [ -z "$bad" ] || { echo "executables left in the rootfs: $bad" >&2; return 1; }
  [ "$(readlink "$r"/usr/lib64/ld-linux-x86-64.so.2)" = /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 ] \
    || { echo "/lib64/ld-linux-x86-64.so.2 does not point to the loader" >&2; return 1; }
  for entry in ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libgcc_s.so.1 libstdc++.so.6 libssl.so.3 \
               libcrypto.so.3 libz.so.1; do
    [ -e "$r/usr/lib/x86_64-linux-gnu/$entry" ] || { echo "missing in the rootfs: /lib/x86_64-linux-gnu/$entry" >&2; return 1; }
  done
  for entry in etc/ssl/certs/ca-certificates.crt usr/share/zoneinfo/UTC etc/os-release etc/services; do
    [ -e "$r/$entry" ] || [ -L "$r/$entry" ] || { echo "missing in the rootfs: /$entry" >&2; return 1; }
  done
}

if [ "${1:-}" = "--base-hook" ]; then
  base_rootfs_hook "$2" "$3"
  exit 0
fi

FORCE=0
case "${1:-}" in
  "") ;;
  --force) FORCE=1 ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
  *) die "unknown argument '$1' (see --help)" ;;
esac

[ "$(id -u)" = 0 ] || die "needs root (mmdebstrap's root mode, buildah's storage, unshare)"
for f in "$BUILDAH" "$MMDEBSTRAP" "$RUNC" "$NFT"; do
  [ -x "$f" ] || die "$f missing: run e2e/scripts/install.sh (node packages $NODE_DEBS_RECIPE)"
done
for b in streamjob-runtime streamjob-operator window-totals-job examples/upgrade_compatible examples/upgrade_incompatible; do
  case "$b" in
    streamjob-*) how="cargo build -p $b" ;;
    *) how="cargo build -p streamjob-job-template --bins --examples" ;;
  esac
  [ -x "$BINARIES_DIR/$b" ] || die "$BINARIES_DIR/$b missing: build it first ($how); this script never runs cargo"
done
for t in unshare strip dpkg-deb apt-get numfmt; do command -v "$t" >/dev/null || die "'$t' not on PATH"; done

mkdir -p "$IMAGES" "$CONF/cni" "$STAMPS" "$CACHE/logs"
exec 9>"$IMAGES/.lock"
flock 9

# ---- buildah's configuration: all of it ours, nothing from /etc/containers ---------------------
cat >"$CONF/policy.json" <<'EOF'
{ "default": [ { "type": "insecureAcceptAnything" } ] }
EOF
cat >"$CONF/registries.conf" <<'EOF'
# Nothing is pulled: every FROM this script builds resolves in local storage (--pull=never).
unqualified-search-registries = ["docker.io"]
short-name-mode = "permissive"
EOF
cat >"$CONF/storage.conf" <<EOF
[storage]
driver = "vfs"
graphroot = "$IMAGES/.storage/root"
runroot = "$IMAGES/.storage/run"
EOF
cat >"$CONF/containers.conf" <<EOF
[containers]
netns = "none"
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[network]
network_config_dir = "$CONF/cni"
cni_plugin_dirs = ["$CONF/cni"]
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
[engine.runtimes]
runc = ["$RUNC"]
EOF

# bh ARGS... : buildah in a network namespace of its own (nothing in it, not even lo up) and a
# private mount namespace; storage vfs, so no mount outlives the command. buildah's libraries are
# unpacked, not installed: LD_LIBRARY_PATH finds them, and for the helper buildah re-executes to
# run a RUN step (buildah-chroot-runtime, started without our environment) a dynamic loader cache
# that lists their folders is bind-mounted over /etc/ld.so.cache inside that mount namespace only.
printf '%s\n' "${NODE_LIBS//:/$'\n'}" /usr/local/lib /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib /usr/lib >"$CONF/ld.so.conf"
ldconfig -X -C "$CONF/ld.so.cache" -f "$CONF/ld.so.conf" 2>/dev/null || die "ldconfig could not write $CONF/ld.so.cache"
bh() {
  unshare --net --mount --propagation private \
    sh -c 'mount --bind "$0" /etc/ld.so.cache && exec "$@"' "$CONF/ld.so.cache" \
    env LD_LIBRARY_PATH="$NODE_LIBS" \
        CONTAINERS_REGISTRIES_CONF="$CONF/registries.conf" \
        CONTAINERS_STORAGE_CONF="$CONF/storage.conf" \
        CONTAINERS_CONF="$CONF/containers.conf" \
        BUILDAH_ISOLATION=chroot BUILDAH_RUNTIME="$RUNC" \
        "$BUILDAH" "$@"
}
POLICY=(--signature-policy "$CONF/policy.json")

# ---- the host's network state, compared at the end ---------------------------------------------
host_net_state() {
  echo "## ip link"; ip -o link show | sed -E 's/ qlen [0-9]+//'
  echo "## ip route"; ip route show table all
  echo "## nft"; LD_LIBRARY_PATH="$NODE_LIBS" "$NFT" list ruleset
  echo "## ip_forward"; sysctl -n net.ipv4.ip_forward
}
NET_BEFORE="$(host_net_state)"

STEP="setup"
cleanup() {
  local rc=$?
  [ "$rc" = 0 ] || log "FAILED during: $STEP (exit $rc)"
  # our storage holds nothing but this script's images: every container in it is a leftover
  bh rm --all >/dev/null 2>&1 || true
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT

# run_logged LOGFILE CMD... : CMD's output to LOGFILE; on failure the last lines, loudly
run_logged() {
  local logf="$1"; shift
  if ! "$@" >>"$logf" 2>&1; then
    log "FAILED: $*"
    log "last lines of $logf:"
    tail -n 30 "$logf" >&2 || true
    return 1
  fi
}

# stamp_hit FILE KEY : the archive FILE was built from KEY and is still there, whole
stamp_hit() {
  local file="$1" key="$2" stamp="$STAMPS/$(basename "$1" .tar)"
  [ "$FORCE" = 0 ] && [ -f "$stamp" ] && [ -f "$file" ] || return 1
  local skey ssize
  read -r skey ssize _ <"$stamp"
  [ "$skey" = "$key" ] && [ "$ssize" = "$(stat -c %s "$file")" ]
}

# export_archive IMAGE FILE KEY LOG : docker-archive of IMAGE (already named docker.io/...) at FILE
export_archive() {
  local image="$1" file="$2" key="$3" logf="$4"
  rm -f "$file.tmp"
  run_logged "$logf" bh push "${POLICY[@]}" "$image" "docker-archive:$file.tmp:$image"
  local tags
  tags="$(tar -xOf "$file.tmp" manifest.json | grep -o '"RepoTags":\[[^]]*\]')"
  if [ "$tags" != "\"RepoTags\":[\"$image\"]" ]; then
    log "FAILED: $file.tmp has $tags, expected [\"$image\"]"; return 1
  fi
  mv "$file.tmp" "$file"
  echo "$key $(stat -c %s "$file") $(sha256 "$file")" >"$STAMPS/$(basename "$file" .tar)"
}

# ensure_in_storage IMAGE FILE LOG : a cached image whose storage was wiped comes back from its archive
ensure_in_storage() {
  bh inspect --type image "$1" >/dev/null 2>&1 && return 0
  log "$1: not in buildah storage, loading $2"
  run_logged "$3" bh pull "${POLICY[@]}" "docker-archive:$2"
}

# record IMAGE FILE RESULT T0 : IMAGE's line in the summary (built|cached, seconds since T0) and
# in the index (its archive FILE)
SUMMARY=()
ARCHIVES=()
record() { SUMMARY+=("$1	$3	$(secs_since "$4")"); ARCHIVES+=("$1	$2"); }
START_ALL=$(now_ms)

# ---- 1. base ------------------------------------------------------------------------------------
build_base() {
  local file="$1" key="$2" logf="$3" dir="$WORK/base/rootfs" rootfs="$WORK/base/rootfs.tar" manifest="$WORK/base/manifest"
  mkdir -p "$WORK/base"
  log "base: mmdebstrap $DEBIAN_SUITE (${#BASE_DEBS[@]} packages, variant extract)"
  # the host's network namespace (the mirror), a private mount namespace (its /dev, /proc binds)
  run_logged "$logf" unshare --mount --propagation private \
    env TMPDIR="$WORK/base" SOURCE_DATE_EPOCH="$BUILD_EPOCH" \
    perl "$MMDEBSTRAP" --variant=extract --mode=root --format=directory --skip=output/dev \
      --aptopt='APT::Sandbox::User "root"' --aptopt='Acquire::Retries "3"' \
      --include="$(IFS=,; echo "${BASE_DEBS[*]}")" \
      --setup-hook='for d in bin sbin lib lib64; do ln -s usr/$d "$1/$d"; mkdir -p "$1/usr/$d"; done' \
      --extract-hook="bash '$SELF' --base-hook \"\$1\" '$manifest'" \
      "$DEBIAN_SUITE" "$dir" "${DEBIAN_MIRRORS[@]}"
  run_logged "$logf" base_rootfs_finish "$dir"
  # owners, modes and 1777 kept by the tar (buildah add of a folder would make it all root's)
  run_logged "$logf" tar --create --file "$rootfs" --directory "$dir" --sort=name --numeric-owner \
    --mtime="@$BUILD_EPOCH" --format=pax --pax-option=delete=atime,delete=ctime --one-file-system .
  log "base: rootfs $(du -sh --apparent-size "$dir" | cut -f1) in $(find "$dir" ! -type d | wc -l) files; committing $BASE_IMAGE"
  local ctr
  ctr="$(bh from "${POLICY[@]}" --pull=never scratch 2>>"$logf")" || { tail -n 30 "$logf" >&2; return 1; }
  run_logged "$logf" bh add "$ctr" "$rootfs" /
  run_logged "$logf" bh config --os linux --arch amd64 --user 65532 --workingdir /home/nonroot \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    --label "org.opencontainers.image.description=distroless-like Debian 12 base (libc, libgcc, libstdc++, libssl3, zlib, CA certificates, tzdata), built by e2e/scripts/build-images.sh" \
    --label "streamjob.e2e/inputs=$key" --created-by "e2e/scripts/build-images.sh $BASE_RECIPE" "$ctr"
  run_logged "$logf" bh commit "${POLICY[@]}" --format docker --timestamp "$BUILD_EPOCH" --rm "$ctr" "$BASE_IMAGE"
  export_archive "$BASE_IMAGE" "$file" "$key" "$logf"
  mv "$manifest" "$IMAGES/base-cc-debian12.manifest"
}

BASE_FILE="$IMAGES/base-cc-debian12.tar"
BASE_LOG="$CACHE/logs/images-base-cc-debian12.log"
BASE_KEY="$(
  { echo "$BASE_RECIPE $BUILD_EPOCH $DEBIAN_SUITE $BASE_IMAGE"; printf '%s\n' "${DEBIAN_MIRRORS[@]}" "${BASE_DEBS[@]}" "${BASE_DROP_DEBS[@]}" "$BASE_KEEP_REGEX"
    declare -f base_rootfs_hook base_rootfs_finish build_base; sha256 "$MMDEBSTRAP"; } | sha256sum | cut -c1-32)"
t0=$(now_ms)
if stamp_hit "$BASE_FILE" "$BASE_KEY"; then
  log "base: cached ($BASE_FILE)"
  record "$BASE_IMAGE" "$BASE_FILE" cached "$t0"
else
  : >"$BASE_LOG"
  STEP="base image (log: $BASE_LOG)"
  build_base "$BASE_FILE" "$BASE_KEY" "$BASE_LOG"
  record "$BASE_IMAGE" "$BASE_FILE" built "$t0"
fi

# ---- 1b. static C programs alone in an image from scratch ----------------------------------------
# static_image IMAGE SOURCE USER : gcc -static SOURCE as /<name>, the entrypoint, run as USER.
#   streamjob/pause       containerd's sandbox_image (e2e/src/node/config.rs): registry.k8s.io/pause
#                         cannot be pulled here, so our own e2e/node/pause.c
#   streamjob/e2e-probe   the tests' network probe (e2e/node/probe.c: connect, resolve, serve):
#                         our other images have no shell or client on purpose
build_static() {
  local image="$1" file="$2" key="$3" logf="$4" src="$5" user="$6" ctx="$WORK/$(archive_name "$1")"
  local prog
  prog="$(basename "$src" .c)"
  mkdir -p "$ctx"
  run_logged "$logf" gcc -static -Os -s -Wall -Werror -o "$ctx/$prog" "$src"
  local ctr
  ctr="$(bh from "${POLICY[@]}" --pull=never scratch 2>>"$logf")" || { tail -n 30 "$logf" >&2; return 1; }
  run_logged "$logf" bh copy "$ctr" "$ctx/$prog" "/$prog"
  run_logged "$logf" bh config --os linux --arch amd64 --user "$user" --entrypoint "[\"/$prog\"]" \
    --label "streamjob.e2e/inputs=$key" "$ctr"
  run_logged "$logf" bh commit "${POLICY[@]}" --format docker --timestamp "$BUILD_EPOCH" --rm "$ctr" "$image"
  export_archive "$image" "$file" "$key" "$logf"
  rm -rf "$ctx"
}
static_image() {
  local image="$1" src="$2" user="$3" name t0 key
  name="$(archive_name "$image")"
  local file="$IMAGES/$name.tar" logf="$CACHE/logs/images-$name.log"
  key="$( { echo "$BUILD_EPOCH $image $user"; sha256 "$src"; gcc --version | head -1; declare -f build_static export_archive; } | sha256sum | cut -c1-32)"
  t0=$(now_ms)
  if stamp_hit "$file" "$key"; then
    log "$name: cached ($file)"
    record "$image" "$file" cached "$t0"
    return 0
  fi
  : >"$logf"
  STEP="$image (log: $logf)"
  build_static "$image" "$file" "$key" "$logf" "$src" "$user"
  record "$image" "$file" built "$t0"
}
# archive_name IMAGE : docker.io/streamjob/<name>:<tag> -> <name>-<tag> (archive, stamp, log)
archive_name() { local n="${1#docker.io/streamjob/}"; echo "${n/:/-}"; }
static_image "docker.io/streamjob/pause:$APP_TAG" "$REPO/e2e/node/pause.c" 65535:65535
static_image "docker.io/streamjob/e2e-probe:$APP_TAG" "$REPO/e2e/node/probe.c" 65532:65532

# ---- 2. runtime, operator and the job template's images, from their Dockerfiles ----------------
# The job template (templates/streamjob-job) as the tags an upgrade test bumps through, each with
# the template's Dockerfile and one cargo binary as its window-totals-job:
#   v1           the template's window-totals-job
#   v2           examples/upgrade_compatible: changed logic, same state
#   v3           examples/upgrade_incompatible: a changed state type
#   v2-crashing  v2 plus ENV JOB_TEMPLATE_FAIL_AFTER_RECORDS=6000, a bug shipped in the image (v2
#                fails once it has processed that many records)
#   v2-oom       v2 plus ENV JOB_TEMPLATE_ALLOCATE_AFTER_RECORDS=20000: a memory spike, once per
#                pod, that the container's memory limit kills (OOMKilled)
TEMPLATE_IMAGE="docker.io/streamjob/job-template"
TEMPLATE_DOCKERFILE="$REPO/templates/streamjob-job/Dockerfile"
TEMPLATE_CRASH_ENV="JOB_TEMPLATE_FAIL_AFTER_RECORDS=6000"
TEMPLATE_OOM_ENV="JOB_TEMPLATE_ALLOCATE_AFTER_RECORDS=20000"

# build_prebuilt IMAGE FILE KEY LOG CTX BIN DOCKERFILE TARGET : DOCKERFILE's stage TARGET (its last
# stage if empty) with BASE_IMAGE=<the base> and BINARIES=prebuilt, the context CTX a folder holding
# only prebuilt/BIN; smoke-tested, exported to FILE.
build_prebuilt() {
  local image="$1" file="$2" key="$3" logf="$4" ctx="$5" bin="$6" dockerfile="$7" target="$8"
  local stage=()
  [ -z "$target" ] || stage=(--target "$target")
  ensure_in_storage "$BASE_IMAGE" "$BASE_FILE" "$logf"
  # the `build` stage (rust:1.95-bookworm, not available offline) is skipped as unused
  run_logged "$logf" bh build "${POLICY[@]}" --isolation chroot --pull=never \
    --format docker --timestamp "$BUILD_EPOCH" --layers=false --rm \
    --build-arg BASE_IMAGE="$BASE_IMAGE" --build-arg BINARIES=prebuilt \
    --label "streamjob.e2e/inputs=$key" \
    "${stage[@]}" -f "$dockerfile" -t "$image" "$ctx"
  if grep -q 'rust:1.95-bookworm' "$logf"; then
    log "FAILED: buildah touched the unused build stage (rust:1.95-bookworm); see $logf"; return 1
  fi
  # smoke test: the binary starts on the image's own loader and libraries, as 65532. (`buildah run`
  # cannot: its chroot helper re-executes buildah without LD_LIBRARY_PATH, and buildah's libraries
  # are not installed on the host.) vfs: the container's root is a plain folder, no mount needed.
  local ctr root out
  ctr="$(bh from "${POLICY[@]}" --pull=never "$image" 2>>"$logf")" || { tail -n 30 "$logf" >&2; return 1; }
  root="$(bh mount "$ctr" 2>>"$logf")" || { tail -n 30 "$logf" >&2; return 1; }
  out="$(unshare --net --mount --propagation private chroot --userspec=65532:65532 "$root" \
           "/usr/local/bin/$bin" --version 2>>"$logf")" \
    || { log "FAILED: $bin --version in $image"; tail -n 30 "$logf" >&2; return 1; }
  bh rm "$ctr" >/dev/null
  log "$bin: smoke test in $image as 65532: $out"
  export_archive "$image" "$file" "$key" "$logf"
}

prebuilt_key() { # IMAGE DOCKERFILE TARGET BINARY_SHA256
  { echo "$APP_RECIPE $BUILD_EPOCH $1 $BASE_KEY $(sha256 "$2") ${3:-<last stage>} $4"
    declare -f prebuilt_key prebuilt_image build_prebuilt export_archive; } | sha256sum | cut -c1-32
}

# prebuilt_image IMAGE SRC BIN DOCKERFILE [TARGET] : IMAGE built (build_prebuilt) with the cargo
# binary SRC, stripped of debug info, as BIN, unless its archive is up to date
prebuilt_image() {
  local image="$1" src="$2" bin="$3" dockerfile="$4" target="${5:-}" t0 key name
  name="$(archive_name "$image")"
  local file="$IMAGES/$name.tar" logf="$CACHE/logs/images-$name.log" work="$WORK/$name"
  t0=$(now_ms)
  key="$(prebuilt_key "$image" "$dockerfile" "$target" "$(sha256 "$src")")"
  if stamp_hit "$file" "$key"; then
    log "$name: cached ($file)"
    record "$image" "$file" cached "$t0"
    return 0
  fi
  : >"$logf"
  STEP="$image (log: $logf)"
  # a private copy (cargo may replace the binary meanwhile); the key is the copy's content
  mkdir -p "$work/ctx/prebuilt"
  cp "$src" "$work/raw"
  key="$(prebuilt_key "$image" "$dockerfile" "$target" "$(sha256 "$work/raw")")"
  strip --strip-debug -o "$work/ctx/prebuilt/$bin" "$work/raw"
  log "$name: ${src#"$BINARIES_DIR"/} $(human "$(stat -c %s "$work/raw")") debug build -> $(human "$(stat -c %s "$work/ctx/prebuilt/$bin")") stripped of debug info"
  build_prebuilt "$image" "$file" "$key" "$logf" "$work/ctx" "$bin" "$dockerfile" "$target"
  echo "${src#"$BINARIES_DIR"/}	$(stat -c %s "$work/raw")	$(stat -c %s "$work/ctx/prebuilt/$bin")" >"$STAMPS/$name.binary"
  rm -rf "$work"
  record "$image" "$file" built "$t0"
}

# derived_image IMAGE FROM LINE... : IMAGE from a generated Containerfile, `FROM <FROM>` (an image
# built above) and the LINEs (no RUN: nothing executes), unless its archive is up to date
derived_image() {
  local image="$1" from="$2" t0 key from_key name containerfile
  shift 2
  name="$(archive_name "$image")"
  local file="$IMAGES/$name.tar" logf="$CACHE/logs/images-$name.log" ctx="$WORK/$name"
  t0=$(now_ms)
  containerfile="$(printf '%s\n' "FROM $from" "$@")"
  read -r from_key _ <"$STAMPS/$(archive_name "$from")"
  key="$( { echo "$APP_RECIPE $BUILD_EPOCH $image $from_key"; echo "$containerfile"; declare -f derived_image export_archive; } | sha256sum | cut -c1-32)"
  if stamp_hit "$file" "$key"; then
    log "$name: cached ($file)"
    record "$image" "$file" cached "$t0"
    return 0
  fi
  : >"$logf"
  STEP="$image (log: $logf)"
  mkdir -p "$ctx"
  echo "$containerfile" >"$ctx/Containerfile"
  ensure_in_storage "$from" "$IMAGES/$(archive_name "$from").tar" "$logf"
  run_logged "$logf" bh build "${POLICY[@]}" --isolation chroot --pull=never \
    --format docker --timestamp "$BUILD_EPOCH" --layers=false --rm \
    --label "streamjob.e2e/inputs=$key" -f "$ctx/Containerfile" -t "$image" "$ctx"
  export_archive "$image" "$file" "$key" "$logf"
  rm -rf "$ctx"
  record "$image" "$file" built "$t0"
}

for bin in streamjob-runtime streamjob-operator; do
  prebuilt_image "docker.io/streamjob/${bin#streamjob-}:$APP_TAG" "$BINARIES_DIR/$bin" "$bin" "$REPO/Dockerfile" "${bin#streamjob-}"
done
prebuilt_image "$TEMPLATE_IMAGE:v1" "$BINARIES_DIR/window-totals-job" window-totals-job "$TEMPLATE_DOCKERFILE"
prebuilt_image "$TEMPLATE_IMAGE:v2" "$BINARIES_DIR/examples/upgrade_compatible" window-totals-job "$TEMPLATE_DOCKERFILE"
prebuilt_image "$TEMPLATE_IMAGE:v3" "$BINARIES_DIR/examples/upgrade_incompatible" window-totals-job "$TEMPLATE_DOCKERFILE"
derived_image "$TEMPLATE_IMAGE:v2-crashing" "$TEMPLATE_IMAGE:v2" "ENV $TEMPLATE_CRASH_ENV"
derived_image "$TEMPLATE_IMAGE:v2-oom" "$TEMPLATE_IMAGE:v2" "ENV $TEMPLATE_OOM_ENV"

# ---- 3. the Flink images (build-images-flink.sh, sourced: it uses the functions above) ---------
# shellcheck source=e2e/scripts/build-images-flink.sh
source "$REPO/e2e/scripts/build-images-flink.sh"

STEP="index"
# leftover containers (buildah build keeps its stages' ones) and unnamed images (build stages,
# earlier builds of the same names) go; the named images stay for the next build
{ bh rm --all && bh rmi --prune; } >"$CACHE/logs/images-prune.log" 2>&1 || log "WARNING: buildah rmi --prune failed; see $CACHE/logs/images-prune.log"

# ---- 4. index and summary ------------------------------------------------------------------------
{
  for entry in "${ARCHIVES[@]}"; do
    IFS=$'\t' read -r image file <<<"$entry"
    read -r _ size sha <"$STAMPS/$(basename "$file" .tar)"
    printf '%s\t%s\t%s\tsha256:%s\n' "${image#docker.io/}" "$file" "$size" "$sha"
  done
} >"$IMAGES/index.tsv.tmp"
mv "$IMAGES/index.tsv.tmp" "$IMAGES/index.tsv"

NET_AFTER="$(host_net_state)"
if [ "$NET_BEFORE" != "$NET_AFTER" ]; then
  log "ERROR: the host's network state changed during the build:"
  diff <(echo "$NET_BEFORE") <(echo "$NET_AFTER") >&2 || true
  exit 1
fi

log "done in $(secs_since "$START_ALL"); host network unchanged (links, routes, nft, ip_forward)"
{
  printf '%-40s %-7s %8s %10s  %s\n' IMAGE RESULT TIME ARCHIVE PATH
  for line in "${SUMMARY[@]}"; do
    IFS=$'\t' read -r image result took <<<"$line"
    short="${image#docker.io/}"
    entry="$(grep -P "^\Q$short\E\t" "$IMAGES/index.tsv")"
    IFS=$'\t' read -r _ file size _ <<<"$entry"
    printf '%-40s %-7s %8s %10s  %s\n' "$short" "$result" "$took" "$(human "$size")" "$file"
  done
  for f in "$STAMPS"/*.binary; do
    IFS=$'\t' read -r bin raw stripped <"$f"
    printf '  %s: debug build %s, in the image %s (strip --strip-debug)\n' "$bin" "$(human "$raw")" "$(human "$stripped")"
  done
  echo "  base packages: $(awk -F'\t' '!/^#/ && $5=="kept" {printf "%s%s=%s", sep, $1, $2; sep=" "}' "$IMAGES/base-cc-debian12.manifest")"
  echo "  index: $IMAGES/index.tsv"
} >&2
