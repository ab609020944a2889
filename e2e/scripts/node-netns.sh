#!/usr/bin/env bash
# Runs a command inside a network namespace and a private mount namespace of its own: the place
# where the e2e harness runs a whole cluster with a real node (e2e/src/node/) — control plane,
# containerd, kubelet, stores and the test process itself. Nothing is added to the host's network
# namespace (no bridge, route, firewall rule or sysctl there); both namespaces are anonymous and
# vanish with their last process.
#
#   e2e/scripts/node-netns.sh COMMAND [ARGS...]
#
# Inside: loopback up, the node's address on lo (no dummy link driver on this kernel), IP
# forwarding on (this namespace only: Service traffic is routed between pods), tmpfs over the
# paths the kubelet, containerd and the CNI plugins hard-code (/run, /var/log, /var/lib/cni), and
# the root mount rshared so containerd and the kubelet see each other's volume mounts.
#
# The kubelet writes three global sysctls when it starts (vm.overcommit_memory, kernel.panic,
# kernel.panic_on_oops). Their values are recorded before and restored after; a run that was
# killed is cleaned up by the next one (its processes, found by their network namespace, killed;
# its cgroups removed; the recorded sysctls restored).
set -euo pipefail

NODE_IP="${STREAMJOB_NODE_IP:-10.200.0.1}"
BRIDGE=cni0                 # e2e/src/node/config.rs: BRIDGE, POD_CIDR
POD_GATEWAY=10.244.0.1
SERVICE_CIDR=10.0.0.0/24    # e2e/src/cluster.rs: SERVICE_CIDR
STATE="${STREAMJOB_CACHE:-$HOME/.cache/streamjob}/node-ns"
SYSCTLS=(vm.overcommit_memory kernel.panic kernel.panic_on_oops)

log() { echo "[node-netns $(date -u +%H:%M:%S)] $*" >&2; }

# The kubelet's cgroups go under this process's own memory cgroup (cgroup v1: the same relative
# path is created in every hierarchy).
own_memory_cgroup() { sed -n -E 's/^[0-9]+:memory:(.*)$/\1/p' /proc/self/cgroup; }
cgroup_root() { local m; m="$(own_memory_cgroup)"; echo "${m%/}/streamjob-node"; }

kill_namespace() { # $1: "net:[inode]" — SIGKILL every process in that network namespace
  local target="$1" p pids=()
  for p in /proc/[0-9]*; do
    [ "$p" = "/proc/$$" ] && continue
    if [ "$(readlink "$p/ns/net" 2>/dev/null)" = "$target" ]; then pids+=("${p#/proc/}"); fi
  done
  if [ "${#pids[@]}" -gt 0 ]; then
    log "killing ${#pids[@]} process(es) left in $target"
    kill -9 "${pids[@]}" 2>/dev/null || true
  fi
}

kill_cgroups() { # $1: cgroup path relative to each hierarchy's root — SIGKILL every process under it
  # (containers run in network namespaces of their own, out of kill_namespace's reach: a Flink pod's
  # JVMs outlived a run), then wait until the kernel has taken them out of the cgroups
  local rel="$1" h pids=() deadline
  [ -n "$rel" ] || return 0
  for h in /sys/fs/cgroup/*/; do
    [ -d "$h$rel" ] || continue
    mapfile -t -O "${#pids[@]}" pids < <(find "$h$rel" -name cgroup.procs -exec cat {} + 2>/dev/null)
  done
  [ "${#pids[@]}" -gt 0 ] || return 0
  mapfile -t pids < <(printf '%s\n' "${pids[@]}" | sort -un)
  log "killing ${#pids[@]} process(es) left in the node's cgroups ($rel)"
  kill -9 "${pids[@]}" 2>/dev/null || true
  deadline=$((SECONDS + 10))
  for p in "${pids[@]}"; do
    while [ -e "/proc/$p" ] && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
  done
}

remove_cgroups() { # $1: cgroup path relative to each hierarchy's root
  local rel="$1" h
  [ -n "$rel" ] || return 0
  for h in /sys/fs/cgroup/*/; do
    [ -d "$h$rel" ] || continue
    # deepest first; a cgroup with a process left cannot go (reported, not hidden)
    find "$h$rel" -depth -type d -exec rmdir {} \; 2>/dev/null || log "could not remove every cgroup under $h$rel"
  done
}

make_cgroups() { # $1: relative path; created in every v1 hierarchy, each new folder recorded
  local rel="$1" h part path
  for h in /sys/fs/cgroup/*/; do
    [ -f "${h}cgroup.procs" ] && [ "$h" != /sys/fs/cgroup/unified/ ] || continue
    path="${h%/}"
    for part in ${rel//\// }; do
      path="$path/$part"
      [ -d "$path" ] && continue
      mkdir "$path"
      echo "$path" >>"$STATE/cgroups-made"
      if [ -f "$path/cpuset.cpus" ]; then # cpuset v1: a new cgroup starts with no CPU and no node
        cat "$(dirname "$path")/cpuset.cpus" >"$path/cpuset.cpus"
        cat "$(dirname "$path")/cpuset.mems" >"$path/cpuset.mems"
      fi
    done
  done
}

restore_sysctls() {
  [ -f "$STATE/sysctls" ] || return 0
  local k v
  while read -r k v; do
    if [ "$(sysctl -n "$k")" != "$v" ]; then
      log "restoring $k=$v (was $(sysctl -n "$k"))"
      sysctl -qw "$k=$v"
    fi
  done <"$STATE/sysctls"
  rm -f "$STATE/sysctls"
}

cleanup_previous() {
  if [ -f "$STATE/netns" ]; then
    kill_namespace "$(cat "$STATE/netns")"
    rm -f "$STATE/netns"
  fi
  # the node's cgroups are always the same path below this script's own
  kill_cgroups "$(cgroup_root)"
  if [ -f "$STATE/cgroup" ]; then
    remove_cgroups "$(cat "$STATE/cgroup")"
    rm -f "$STATE/cgroup"
  fi
  if [ -f "$STATE/cgroups-made" ]; then # the folders above it this script made, deepest first
    tac "$STATE/cgroups-made" | while read -r d; do rmdir "$d" 2>/dev/null || true; done
    rm -f "$STATE/cgroups-made"
  fi
  restore_sysctls
}

if [ "${1:-}" = "--inside" ]; then
  shift
  readlink /proc/self/ns/net >"$STATE/netns"
  ip link set lo up
  ip addr add "$NODE_IP/32" dev lo
  echo 1 >/proc/sys/net/ipv4/ip_forward
  # The pods' bridge, made before the CNI plugin (which adopts it) so that the Service range can
  # be routed through it: clients in this namespace need a route before kube-proxy's DNAT applies.
  ip link add "$BRIDGE" type bridge
  ip addr add "$POD_GATEWAY/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  ip route add "$SERVICE_CIDR" dev "$BRIDGE"
  mount --make-rshared /
  mount -t tmpfs -o mode=0755 streamjob-run /run
  mount -t tmpfs -o mode=0755 streamjob-log /var/log
  mount -t tmpfs -o mode=0755 streamjob-cni /var/lib/cni
  export STREAMJOB_NODE_IP="$NODE_IP" STREAMJOB_NODE_NETNS=1
  STREAMJOB_NODE_CGROUP_ROOT="$(cgroup_root)"
  export STREAMJOB_NODE_CGROUP_ROOT
  echo "$STREAMJOB_NODE_CGROUP_ROOT" >"$STATE/cgroup"
  make_cgroups "$STREAMJOB_NODE_CGROUP_ROOT"
  rc=0
  "$@" || rc=$?
  kill_namespace "$(readlink /proc/self/ns/net)"
  exit "$rc"
fi

mkdir -p "$STATE"
exec 8>"$STATE/lock"
if ! flock -n 8; then
  log "another run holds $STATE/lock; waiting"
  flock 8
fi
cleanup_previous
for k in "${SYSCTLS[@]}"; do echo "$k $(sysctl -n "$k")"; done >"$STATE/sysctls"
mkdir -p /var/lib/cni # the mount point of the tmpfs inside (empty on the host)
rc=0
unshare --net --mount --propagation private -- "$0" --inside "$@" 8>&- || rc=$? # the lock stays here: a killed run's leftovers must not hold it
cleanup_previous
exit "$rc"
