//! The real node's configuration files, as text (pure; written by [`super::RealNode`]).
//!
//! Every path the node's programs would otherwise take from the host (`/etc/containerd`,
//! `/etc/cni/net.d`, `/opt/cni/bin`, `/var/lib/kubelet`, `/etc/resolv.conf`) is set here to a
//! folder of the run or of the unpacked Debian packages. What stays hard-coded in those programs
//! (`/run`, `/var/log`, `/var/lib/cni`) is a tmpfs of the namespace `node-netns.sh` creates.

use std::net::Ipv4Addr;
use std::path::Path;

/// The pod network: one bridge, one /24 (a single node).
pub const POD_CIDR: &str = "10.244.0.0/24";
/// The bridge the CNI plugin attaches pods to; `node-netns.sh` creates it (the Service CIDR is
/// routed through it for clients in the node's own namespace).
pub const BRIDGE: &str = "cni0";
/// containerd's socket (its default path: cAdvisor in the kubelet looks there).
pub const CONTAINERD_SOCKET: &str = "/run/containerd/containerd.sock";
/// The pod sandbox image (`e2e/node/pause.c`, built by `build-images.sh`).
pub const SANDBOX_IMAGE: &str = "docker.io/streamjob/pause:e2e";

/// What the configuration files depend on.
#[derive(Debug, Clone)]
pub struct NodeLayout<'a> {
    /// Node name (also the kubelet's hostname override).
    pub name: &'a str,
    /// The node's address (on `lo` of the node's namespace).
    pub ip: Ipv4Addr,
    /// The unpacked Debian packages (`usr/sbin/runc`, `usr/lib/cni/…`).
    pub packages: &'a Path,
    /// The run's folder for the node (containerd's root, the kubelet's root, configs).
    pub dir: &'a Path,
    /// The cgroup every pod goes under (below the run's own memory cgroup).
    pub cgroup_root: &'a str,
    /// The cluster CA (the kubelet authenticates the API server's client certificate with it).
    pub client_ca: &'a Path,
}

/// containerd 1.6's configuration (version 2). `restrict_oom_score_adj`: the machine refuses a
/// negative `oom_score_adj`, which containerd gives every sandbox otherwise.
pub fn containerd_toml(l: &NodeLayout<'_>) -> String {
    let runc = l.packages.join("usr/sbin/runc");
    let cni_bin = l.packages.join("usr/lib/cni");
    format!(
        r#"version = 2
root = "{root}"
state = "/run/containerd"
oom_score = 0
[grpc]
  address = "{CONTAINERD_SOCKET}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{SANDBOX_IMAGE}"
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{conf_dir}"
    max_conf_num = 1
"#,
        root = l.dir.join("containerd").display(),
        runc = runc.display(),
        cni_bin = cni_bin.display(),
        conf_dir = l.dir.join("cni").display(),
    )
}

/// The CNI network: a bridge with the pods' gateway, hairpin on (a pod reaching itself through
/// its Service), no masquerading (nothing leaves the namespace).
pub fn cni_conflist() -> String {
    serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "streamjob-e2e",
        "plugins": [{
            "type": "bridge",
            "bridge": BRIDGE,
            "isGateway": true,
            "ipMasq": false,
            "hairpinMode": true,
            "ipam": {
                "type": "host-local",
                "ranges": [[{ "subnet": POD_CIDR }]],
                "routes": [{ "dst": "0.0.0.0/0" }],
                "dataDir": "/run/streamjob-node/ipam",
            },
        }],
    })
    .to_string()
}

/// The kubelet's configuration. cgroup v1 is refused by default since 1.35 (`failCgroupV1`);
/// `oomScoreAdj: 0` because -999 is refused here; image GC off and eviction thresholds tiny,
/// because preloaded images cannot be pulled back; webhook authentication and authorisation,
/// so `logs`/`exec`/`port-forward` go through the API server's RBAC.
pub fn kubelet_yaml(l: &NodeLayout<'_>, resolv_conf: &Path) -> String {
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: "{cgroup_root}"
oomScoreAdj: 0
containerRuntimeEndpoint: "unix://{CONTAINERD_SOCKET}"
address: "{ip}"
port: 10250
readOnlyPort: 0
healthzBindAddress: "127.0.0.1"
healthzPort: 10248
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: "{ca}"}}
authorization: {{mode: Webhook}}
resolvConf: "{resolv}"
clusterDNS: ["{dns}"]
clusterDomain: "{domain}"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {{memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}}
failSwapOn: false
serializeImagePulls: false
nodeStatusUpdateFrequency: 10s
shutdownGracePeriod: 0s
"#,
        cgroup_root = l.cgroup_root,
        ip = l.ip,
        ca = l.client_ca.display(),
        resolv = resolv_conf.display(),
        dns = super::dns::CLUSTER_DNS_IP,
        domain = super::dns::CLUSTER_DOMAIN,
    )
}

/// kube-proxy in nftables mode (no IPVS on this kernel; nftables is the current default backend).
/// `conntrack.*: 0` leaves the namespace's conntrack settings alone (`nf_conntrack_max` is
/// read-only outside the initial namespace).
pub fn kube_proxy_yaml(name: &str, kubeconfig: &Path) -> String {
    format!(
        r#"apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
hostnameOverride: "{name}"
clusterCIDR: "{POD_CIDR}"
clientConnection:
  kubeconfig: "{kc}"
healthzBindAddress: "127.0.0.1:10256"
metricsBindAddress: "127.0.0.1:10249"
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
"#,
        kc = kubeconfig.display(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> NodeLayout<'static> {
        NodeLayout {
            name: "n1",
            ip: Ipv4Addr::new(10, 200, 0, 1),
            packages: Path::new("/p"),
            dir: Path::new("/d"),
            cgroup_root: "/a/streamjob-node",
            client_ca: Path::new("/pki/ca.crt"),
        }
    }

    #[test]
    fn containerd_points_at_the_unpacked_packages_and_restricts_oom_score() {
        let t = containerd_toml(&layout());
        for line in [
            "restrict_oom_score_adj = true",
            "bin_dir = \"/p/usr/lib/cni\"",
            "BinaryName = \"/p/usr/sbin/runc\"",
            "root = \"/d/containerd\"",
            "SystemdCgroup = false",
        ] {
            assert!(
                t.lines().any(|l| l.trim() == line),
                "{line} missing in:\n{t}"
            );
        }
    }

    #[test]
    fn kubelet_yaml_parses_with_the_settings_this_machine_needs() {
        let t = kubelet_yaml(&layout(), Path::new("/d/resolv.conf"));
        let v: serde_json::Value = serde_yaml_ng::from_str(&t).unwrap();
        assert_eq!(v["failCgroupV1"], false);
        assert_eq!(v["oomScoreAdj"], 0);
        assert_eq!(v["cgroupRoot"], "/a/streamjob-node");
        assert_eq!(v["authorization"]["mode"], "Webhook");
        assert_eq!(v["address"], "10.200.0.1");
    }

    #[test]
    fn cni_and_kube_proxy_configs_parse() {
        let c: serde_json::Value = serde_json::from_str(&cni_conflist()).unwrap();
        assert_eq!(c["plugins"][0]["ipMasq"], false);
        let p: serde_json::Value =
            serde_yaml_ng::from_str(&kube_proxy_yaml("n1", Path::new("/k"))).unwrap();
        assert_eq!(p["mode"], "nftables");
        assert_eq!(p["conntrack"]["maxPerCore"], 0);
    }
}
