//! A **real node** for the e2e suite: containerd, runc and the CNI bridge from Debian's packages,
//! the kubelet and kube-proxy of the control plane's Kubernetes version, every pod a container
//! built from the project's images (`e2e/scripts/build-images.sh`).
//!
//! It runs only inside the namespaces `e2e/scripts/node-netns.sh` creates (checked through the
//! variables that script exports): the whole cluster and the test process share one network
//! namespace of their own, and nothing touches the host's.
//!
//! ```text
//!  test process ──► kube-apiserver (0.0.0.0) ◄── kubelet ──CRI──► containerd ──► runc ──► pods
//!        │                    ▲                    │                               │
//!        └── 10.200.0.1 (lo) ─┴─ kube-proxy (nftables: Service IPs)   cni0 bridge 10.244.0.0/24
//! ```

pub mod config;
pub mod dns;
pub mod images;
pub mod netpol;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::Api;

use crate::certs::{KubeconfigAuth, write_kubeconfig};
use crate::cluster::ControlPlane;
use crate::error::{Error, IoContext, Result};
use crate::process::{ManagedProcess, Watchdog, run_checked};
use crate::wait::poll_until;
use config::{CONTAINERD_SOCKET, NodeLayout};

/// The node's name.
pub const NODE_NAME: &str = "streamjob-e2e-real";

/// What `node-netns.sh` tells the processes it runs.
#[derive(Debug, Clone)]
pub struct Namespace {
    /// The node's address on the namespace's `lo`.
    pub node_ip: Ipv4Addr,
    /// The cgroup the kubelet puts pods under.
    pub cgroup_root: String,
}

impl Namespace {
    /// `Some` inside `node-netns.sh`, `None` elsewhere.
    pub fn current() -> Option<Self> {
        if std::env::var("STREAMJOB_NODE_NETNS").ok().as_deref() != Some("1") {
            return None;
        }
        let node_ip = std::env::var("STREAMJOB_NODE_IP").ok()?.parse().ok()?;
        let cgroup_root = std::env::var("STREAMJOB_NODE_CGROUP_ROOT").ok()?;
        Some(Self {
            node_ip,
            cgroup_root,
        })
    }

    /// Like [`current`](Self::current), with an error saying how to get there.
    pub fn required() -> Result<Self> {
        Self::current().ok_or_else(|| {
            Error::Other(
                "the real node runs only inside e2e/scripts/node-netns.sh (STREAMJOB_NODE_NETNS, \
                 STREAMJOB_NODE_IP and STREAMJOB_NODE_CGROUP_ROOT unset): run the test as \
                 `e2e/scripts/node-netns.sh cargo test …` or `cargo xtask node-test`"
                    .into(),
            )
        })
    }
}

/// Paths of the node's programs (install.sh's env file: `STREAMJOB_E2E_NODE_ROOT`, `…_KUBELET`,
/// `…_KUBE_PROXY`, `…_COREDNS`).
#[derive(Debug, Clone)]
pub struct NodeBinaries {
    /// The unpacked Debian packages (containerd, runc, CNI plugins, nft, conntrack).
    pub packages: PathBuf,
    /// kubelet.
    pub kubelet: PathBuf,
    /// kube-proxy.
    pub kube_proxy: PathBuf,
    /// CoreDNS.
    pub coredns: PathBuf,
}

impl NodeBinaries {
    /// Reads the paths from the environment or install.sh's env file.
    pub fn locate() -> Result<Self> {
        let get = |var: &str| crate::binaries::lookup(var).map(PathBuf::from);
        Ok(Self {
            packages: get("STREAMJOB_E2E_NODE_ROOT")?,
            kubelet: get("STREAMJOB_E2E_KUBELET")?,
            kube_proxy: get("STREAMJOB_E2E_KUBE_PROXY")?,
            coredns: get("STREAMJOB_E2E_COREDNS")?,
        })
    }

    /// PATH and LD_LIBRARY_PATH for the node's programs: the unpacked packages first.
    fn apply_env(&self, cmd: &mut Command) {
        let p = &self.packages;
        let path = std::env::var("PATH").unwrap_or_default();
        cmd.env(
            "PATH",
            format!(
                "{}:{}:{path}",
                p.join("usr/bin").display(),
                p.join("usr/sbin").display()
            ),
        );
        cmd.env(
            "LD_LIBRARY_PATH",
            format!(
                "{}:{}",
                p.join("usr/lib/x86_64-linux-gnu").display(),
                p.join("lib/x86_64-linux-gnu").display()
            ),
        );
    }
}

/// A running node: containerd, kubelet, kube-proxy and the NetworkPolicy agent, stopped in
/// reverse order.
#[derive(Debug)]
pub struct RealNode {
    coredns: Option<ManagedProcess>,
    netpol_agent: Option<ManagedProcess>,
    kube_proxy: Option<ManagedProcess>,
    kubelet: Option<ManagedProcess>,
    containerd: Option<ManagedProcess>,
    bins: NodeBinaries,
    ns: Namespace,
    /// The node's folder in the run (configs, logs, containerd's and the kubelet's roots).
    pub dir: PathBuf,
    /// Time from start to Node Ready.
    pub start_duration: Duration,
    /// Time spent importing the images into containerd.
    pub import_duration: Duration,
    /// The NetworkPolicy table the agent applied last (`nft` syntax).
    pub netpol_applied: PathBuf,
}

impl RealNode {
    /// Starts containerd, imports `images` (archives `ctr images import` reads), starts the
    /// kubelet, kube-proxy and the NetworkPolicy agent (`netpol_agent`, the workspace's
    /// `netpol-agent` binary), and waits until the Node is Ready without a not-ready taint.
    pub async fn start(
        plane: &ControlPlane,
        dir: &Path,
        images: &[PathBuf],
        netpol_agent: &Path,
        watchdog: Option<&Watchdog>,
    ) -> Result<Self> {
        let t0 = Instant::now();
        let ns = Namespace::required()?;
        let bins = NodeBinaries::locate()?;
        std::fs::create_dir_all(dir.join("cni")).ctx(|| format!("create {}", dir.display()))?;
        let layout = NodeLayout {
            name: NODE_NAME,
            ip: ns.node_ip,
            packages: &bins.packages,
            dir,
            cgroup_root: &ns.cgroup_root,
            client_ca: &plane.pki.ca.cert,
        };
        let write = |name: &str, text: String| -> Result<PathBuf> {
            let path = dir.join(name);
            std::fs::write(&path, text).ctx(|| format!("write {}", path.display()))?;
            Ok(path)
        };
        let containerd_cfg = write("containerd.toml", config::containerd_toml(&layout))?;
        write("cni/10-streamjob.conflist", config::cni_conflist())?;
        // The node's own resolver (pods with dnsPolicy Default): none reachable here, so an
        // address that answers nothing rather than the host's resolv.conf.
        let resolv = write("resolv.conf", "nameserver 127.0.0.1\n".into())?;
        let kubelet_cfg = write("kubelet.yaml", config::kubelet_yaml(&layout, &resolv))?;

        let mut node = Self {
            coredns: None,
            netpol_agent: None,
            kube_proxy: None,
            kubelet: None,
            containerd: None,
            bins,
            ns,
            dir: dir.to_path_buf(),
            start_duration: Duration::ZERO,
            import_duration: Duration::ZERO,
            netpol_applied: dir.join("netpol.nft"),
        };

        let mut cmd = Command::new(node.bins.packages.join("usr/bin/containerd"));
        cmd.arg("--config").arg(&containerd_cfg);
        node.bins.apply_env(&mut cmd);
        let containerd = ManagedProcess::spawn("containerd", cmd, dir, watchdog)?;
        poll_until(
            "containerd socket",
            Duration::from_secs(30),
            Duration::from_millis(100),
            || async {
                containerd.check_running()?;
                Ok(Path::new(CONTAINERD_SOCKET).exists().then_some(()))
            },
        )
        .await?;
        node.containerd = Some(containerd);

        let t_import = Instant::now();
        for image in images {
            node.ctr(&["images", "import"], Some(image))?;
        }
        node.import_duration = t_import.elapsed();
        tracing::info!(images = images.len(), elapsed = ?node.import_duration, "images imported");

        let kubelet_kc = identity_kubeconfig(
            plane,
            dir,
            "kubelet",
            &format!("/O=system:nodes/CN=system:node:{NODE_NAME}"),
        )?;
        let mut cmd = Command::new(&node.bins.kubelet);
        cmd.arg("--config")
            .arg(&kubelet_cfg)
            .arg("--kubeconfig")
            .arg(&kubelet_kc)
            .arg("--root-dir")
            .arg(dir.join("kubelet"))
            .arg(format!("--node-ip={}", node.ns.node_ip))
            .arg(format!("--hostname-override={NODE_NAME}"))
            .arg("--v=1");
        node.bins.apply_env(&mut cmd);
        let kubelet = ManagedProcess::spawn("kubelet", cmd, dir, watchdog)?;
        node.kubelet = Some(kubelet);

        let proxy_kc = identity_kubeconfig(plane, dir, "kube-proxy", "/CN=system:kube-proxy")?;
        let proxy_cfg = write(
            "kube-proxy.yaml",
            config::kube_proxy_yaml(NODE_NAME, &proxy_kc),
        )?;
        let mut cmd = Command::new(&node.bins.kube_proxy);
        cmd.arg("--config").arg(&proxy_cfg).arg("--v=1");
        node.bins.apply_env(&mut cmd);
        node.kube_proxy = Some(ManagedProcess::spawn("kube-proxy", cmd, dir, watchdog)?);

        let client = plane.client().await?;
        let agent_kc = identity_kubeconfig(plane, dir, "netpol-agent", NETPOL_AGENT_USER_SUBJECT)?;
        grant_cluster_read(
            &client,
            NETPOL_AGENT_USER,
            &[
                ("", &["pods", "namespaces"][..]),
                ("networking.k8s.io", &["networkpolicies"][..]),
            ],
        )
        .await?;
        let mut cmd = Command::new(netpol_agent);
        cmd.arg("--kubeconfig")
            .arg(&agent_kc)
            .arg("--nft")
            .arg(node.bins.packages.join("usr/sbin/nft"))
            .arg("--applied")
            .arg(&node.netpol_applied);
        node.bins.apply_env(&mut cmd);
        node.netpol_agent = Some(ManagedProcess::spawn("netpol-agent", cmd, dir, watchdog)?);

        // CoreDNS before the node is Ready: the first pod already resolves Services
        let dns_kc = identity_kubeconfig(plane, dir, "coredns", &format!("/CN={}", dns::USER))?;
        grant_cluster_read(&client, dns::USER, &dns::READS).await?;
        let corefile = write("Corefile", dns::corefile(node.ns.node_ip, &dns_kc))?;
        let mut cmd = Command::new(&node.bins.coredns);
        cmd.arg("-conf").arg(&corefile);
        let coredns = ManagedProcess::spawn("coredns", cmd, dir, watchdog)?;
        node.coredns = Some(coredns);
        dns::publish(&client, node.ns.node_ip).await?;
        let ready = format!("http://{}/ready", dns::READY_ADDR);
        poll_until(
            "CoreDNS ready (its kubernetes plugin synced)",
            Duration::from_secs(30),
            Duration::from_millis(100),
            || async {
                node.check_running()?;
                let ok = reqwest::get(&ready)
                    .await
                    .is_ok_and(|r| r.status().is_success());
                Ok(ok.then_some(()))
            },
        )
        .await?;

        let nodes: Api<Node> = Api::all(client);
        poll_until(
            "real node Ready without not-ready taint",
            Duration::from_secs(90),
            Duration::from_millis(250),
            || async {
                node.check_running()?;
                let Some(n) = nodes.get_opt(NODE_NAME).await? else {
                    return Ok(None);
                };
                Ok(crate::fixtures::node_schedulable(&n).then_some(()))
            },
        )
        .await?;
        node.start_duration = t0.elapsed();
        tracing::info!(elapsed = ?node.start_duration, "real node ready");
        Ok(node)
    }

    /// The node's programs that are running, in start order.
    fn processes(&self) -> impl Iterator<Item = &ManagedProcess> {
        [
            &self.containerd,
            &self.kubelet,
            &self.kube_proxy,
            &self.netpol_agent,
            &self.coredns,
        ]
        .into_iter()
        .flatten()
    }

    /// Fails when one of the node's programs has exited.
    pub fn check_running(&self) -> Result<()> {
        self.processes().try_for_each(ManagedProcess::check_running)
    }

    /// The node's address.
    pub fn ip(&self) -> Ipv4Addr {
        self.ns.node_ip
    }

    /// Process ids of the node's programs (for resource figures).
    pub fn pids(&self) -> Vec<(String, u32)> {
        self.processes()
            .map(|p| (p.name().to_string(), p.pid()))
            .collect()
    }

    /// The host pid of a container's first process, found through its cgroup (named after the
    /// container id under the node's cgroup root, cgroupfs driver).
    pub fn container_pid(&self, container_id: &str) -> Option<u32> {
        let base =
            Path::new("/sys/fs/cgroup/memory").join(self.ns.cgroup_root.trim_start_matches('/'));
        let mut stack = vec![base];
        while let Some(dir) = stack.pop() {
            if dir.file_name().is_some_and(|n| n == container_id) {
                let procs = std::fs::read_to_string(dir.join("cgroup.procs")).ok()?;
                return procs.lines().next()?.trim().parse().ok();
            }
            if let Ok(entries) = std::fs::read_dir(&dir) {
                stack.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
            }
        }
        None
    }

    /// Runs `ctr` against the node's containerd in the `k8s.io` namespace (the CRI's), with an
    /// optional trailing path argument.
    pub fn ctr(&self, args: &[&str], path: Option<&Path>) -> Result<String> {
        let mut cmd = Command::new(self.bins.packages.join("usr/bin/ctr"));
        cmd.args(["--address", CONTAINERD_SOCKET, "--namespace", "k8s.io"])
            .args(args);
        if let Some(p) = path {
            cmd.arg(p);
        }
        self.bins.apply_env(&mut cmd);
        let out = run_checked(&mut cmd)?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Stops kube-proxy and the kubelet, kills every container process (everything in the pods'
    /// cgroups, then containerd's shims), and stops containerd. Idempotent.
    pub fn stop(&mut self) {
        for p in [
            self.coredns.take(),
            self.netpol_agent.take(),
            self.kube_proxy.take(),
            self.kubelet.take(),
        ]
        .into_iter()
        .flatten()
        {
            let mut p = p;
            p.stop();
        }
        kill_cgroup_tree(&self.ns.cgroup_root);
        kill_shims();
        if let Some(mut c) = self.containerd.take() {
            c.stop();
        }
    }
}

impl Drop for RealNode {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The NetworkPolicy agent's user name and certificate subject.
const NETPOL_AGENT_USER: &str = "system:streamjob-e2e:netpol-agent";
const NETPOL_AGENT_USER_SUBJECT: &str = "/CN=system:streamjob-e2e:netpol-agent";

/// Lets `user` get, list and watch `resources` (API group, names) cluster-wide: a ClusterRole and
/// its binding, both named after the user, applied server-side.
pub(crate) async fn grant_cluster_read(
    client: &kube::Client,
    user: &str,
    resources: &[(&str, &[&str])],
) -> Result<()> {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use kube::api::{Patch, PatchParams};
    let rules: Vec<serde_json::Value> = resources
        .iter()
        .map(|(group, names)| {
            serde_json::json!({"apiGroups": [group], "resources": names, "verbs": ["get", "list", "watch"]})
        })
        .collect();
    let role = serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": user}, "rules": rules,
    });
    let binding = serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    });
    let pp = PatchParams::apply("streamjob-e2e").force();
    Api::<ClusterRole>::all(client.clone())
        .patch(user, &pp, &Patch::Apply(&role))
        .await?;
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(user, &pp, &Patch::Apply(&binding))
        .await?;
    Ok(())
}

/// A client certificate for `subject` signed by the cluster CA and a kubeconfig using it,
/// `<dir>/<name>.kubeconfig`.
fn identity_kubeconfig(
    plane: &ControlPlane,
    dir: &Path,
    name: &str,
    subject: &str,
) -> Result<PathBuf> {
    let cert = plane.pki.client_cert(name, subject)?;
    let path = dir.join(format!("{name}.kubeconfig"));
    write_kubeconfig(
        &path,
        &plane.server,
        &plane.pki.ca.cert,
        name,
        KubeconfigAuth::Cert(&cert),
        None,
    )?;
    Ok(path)
}

/// SIGKILLs every process in the memory-hierarchy cgroup `root` and below.
fn kill_cgroup_tree(root: &str) {
    let base = Path::new("/sys/fs/cgroup/memory").join(root.trim_start_matches('/'));
    let mut stack = vec![base];
    while let Some(dir) = stack.pop() {
        if let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) {
            for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        if let Ok(entries) = std::fs::read_dir(&dir) {
            stack.extend(
                entries
                    .flatten()
                    .filter(|e| e.path().is_dir())
                    .map(|e| e.path()),
            );
        }
    }
}

/// SIGKILLs containerd's runc shims of this namespace (they outlive containerd by design).
fn kill_shims() {
    let Ok(own_net) = std::fs::read_link("/proc/self/ns/net") else {
        return;
    };
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let is_shim = std::fs::read_link(e.path().join("exe"))
            .is_ok_and(|exe| exe.to_string_lossy().contains("containerd-shim"));
        let same_net = std::fs::read_link(e.path().join("ns/net")).is_ok_and(|n| n == own_net);
        if is_shim && same_net {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}
