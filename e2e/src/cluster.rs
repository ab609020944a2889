//! The control plane: etcd, kube-apiserver, kube-controller-manager and kube-scheduler on
//! loopback ports, started from the binaries install.sh built.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::binaries::Binaries;
use crate::certs::{KubeconfigAuth, Pki, write_kubeconfig};
use crate::error::{Error, IoContext, Result};
use crate::process::{ManagedProcess, Watchdog, free_port};
use crate::wait::poll_until;

/// Service CIDR of the cluster (the `kubernetes` service gets 10.0.0.1).
pub const SERVICE_CIDR: &str = "10.0.0.0/24";

const READY_TIMEOUT: Duration = Duration::from_secs(90);
const POLL: Duration = Duration::from_millis(100);

/// A running control plane. Dropping it stops every process (scheduler, controller-manager,
/// apiserver, etcd, in that order).
#[derive(Debug)]
pub struct ControlPlane {
    // Field order is drop order: stop clients before the apiserver, the apiserver before etcd.
    scheduler: ManagedProcess,
    controller_manager: ManagedProcess,
    /// Program and arguments of the scheduler and the controller-manager, to start them again.
    scheduler_cmd: (PathBuf, Vec<std::ffi::OsString>),
    controller_manager_cmd: (PathBuf, Vec<std::ffi::OsString>),
    /// How often [`ControlPlane::revive`] started one of them again.
    revivals: u32,
    apiserver: ManagedProcess,
    apiserver_program: PathBuf,
    apiserver_args: Vec<std::ffi::OsString>,
    apiserver_restarts: u32,
    etcd: ManagedProcess,
    /// `https://127.0.0.1:<port>`.
    pub server: String,
    /// The apiserver's port.
    pub apiserver_port: u16,
    /// kubeconfig with the `admin` client certificate (group `system:masters`).
    pub admin_kubeconfig: PathBuf,
    /// Certificates and keys.
    pub pki: Pki,
    /// The folder with logs, data and certificates.
    pub dir: PathBuf,
    /// How long [`ControlPlane::start`] took.
    pub start_duration: Duration,
}

/// Inside `e2e/scripts/node-netns.sh` (a real node's namespace)?
pub fn in_node_namespace() -> bool {
    crate::node::Namespace::current().is_some()
}

/// The address servers of the environment (API server, MinIO, Kafka) are reached at: the real
/// node's address inside its namespace (pods reach it through their bridge), else 127.0.0.1.
pub fn host_address() -> String {
    crate::node::Namespace::current()
        .map_or_else(|| "127.0.0.1".to_string(), |ns| ns.node_ip.to_string())
}

/// The address those servers listen on: every address inside the node's namespace (loopback
/// for the test's own clients, the node address for pods), else 127.0.0.1.
pub fn listen_address() -> &'static str {
    if in_node_namespace() {
        "0.0.0.0"
    } else {
        "127.0.0.1"
    }
}

impl ControlPlane {
    /// Starts the control plane in `dir` (created if needed) and waits until it is ready:
    /// etcd `/health`, apiserver `/readyz`, controller-manager and scheduler `/healthz`.
    pub async fn start(bins: &Binaries, dir: &Path, watchdog: Option<&Watchdog>) -> Result<Self> {
        let t0 = Instant::now();
        std::fs::create_dir_all(dir).ctx(|| format!("create {}", dir.display()))?;
        let pki = Pki::generate(&dir.join("pki"))?;
        tracing::info!(elapsed = ?t0.elapsed(), "certificates generated");

        // etcd
        let etcd_client = free_port()?;
        let etcd_peer = free_port()?;
        let etcd_url = format!("http://127.0.0.1:{etcd_client}");
        let peer_url = format!("http://127.0.0.1:{etcd_peer}");
        let mut cmd = Command::new(&bins.etcd);
        cmd.arg("--name=e2e")
            .arg(format!("--data-dir={}", dir.join("etcd-data").display()))
            .arg(format!("--listen-client-urls={etcd_url}"))
            .arg(format!("--advertise-client-urls={etcd_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=e2e={peer_url}"))
            .arg("--unsafe-no-fsync=true")
            .arg("--quota-backend-bytes=2147483648")
            .arg("--log-level=warn");
        let etcd = ManagedProcess::spawn("etcd", cmd, dir, watchdog)?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()?;
        {
            let url = format!("{etcd_url}/health");
            poll_until("etcd /health", READY_TIMEOUT, POLL, || async {
                etcd.check_running()?;
                let r = http.get(&url).send().await?;
                let body = r.text().await?;
                Ok(body.contains("\"health\":\"true\"").then_some(()))
            })
            .await?;
        }
        tracing::info!(elapsed = ?t0.elapsed(), "etcd ready");

        // kube-apiserver
        let apiserver_port = free_port()?;
        let server = format!("https://127.0.0.1:{apiserver_port}");
        let mut cmd = Command::new(&bins.kube_apiserver);
        cmd.arg(format!("--etcd-servers={etcd_url}"))
            .arg(format!("--bind-address={}", listen_address()))
            .arg(format!("--advertise-address={}", host_address()))
            .arg(format!("--secure-port={apiserver_port}"))
            .arg(format!(
                "--cert-dir={}",
                dir.join("apiserver-certs").display()
            ))
            .arg(format!("--tls-cert-file={}", pki.apiserver.cert.display()))
            .arg(format!(
                "--tls-private-key-file={}",
                pki.apiserver.key.display()
            ))
            .arg(format!("--client-ca-file={}", pki.ca.cert.display()))
            .arg("--service-account-issuer=https://kubernetes.default.svc.cluster.local")
            .arg(format!(
                "--service-account-key-file={}",
                pki.sa_pub.display()
            ))
            .arg(format!(
                "--service-account-signing-key-file={}",
                pki.sa_key.display()
            ))
            .arg(format!("--service-cluster-ip-range={SERVICE_CIDR}"))
            .arg("--authorization-mode=Node,RBAC")
            .arg("--allow-privileged=true")
            // the `kubernetes` Service's endpoint (pods reach the API through it) only where
            // pods can reach the advertised address: a real node
            .arg(if in_node_namespace() {
                "--endpoint-reconciler-type=lease"
            } else {
                "--endpoint-reconciler-type=none"
            })
            // logs, exec and port-forward: the kubelet's address, not its host name (no DNS for
            // node names here), with a client certificate the kubelet's webhook authorises
            .arg("--kubelet-preferred-address-types=InternalIP,Hostname")
            .arg(format!(
                "--kubelet-client-certificate={}",
                pki.kubelet_client.cert.display()
            ))
            .arg(format!(
                "--kubelet-client-key={}",
                pki.kubelet_client.key.display()
            ))
            .arg("--profiling=false")
            .arg("--v=1");
        let apiserver_args: Vec<std::ffi::OsString> = cmd.get_args().map(Into::into).collect();
        let apiserver = ManagedProcess::spawn("kube-apiserver", cmd, dir, watchdog)?
            .with_grace(Duration::from_secs(60));
        wait_ready(&apiserver, &pki, &server).await?;
        tracing::info!(elapsed = ?t0.elapsed(), "kube-apiserver ready");

        let admin_kubeconfig = dir.join("admin.kubeconfig");
        write_kubeconfig(
            &admin_kubeconfig,
            &server,
            &pki.ca.cert,
            "admin",
            KubeconfigAuth::Cert(&pki.admin),
            None,
        )?;
        let kcm_kubeconfig = dir.join("controller-manager.kubeconfig");
        write_kubeconfig(
            &kcm_kubeconfig,
            &server,
            &pki.ca.cert,
            "system:kube-controller-manager",
            KubeconfigAuth::Cert(&pki.controller_manager),
            None,
        )?;
        let sched_kubeconfig = dir.join("scheduler.kubeconfig");
        write_kubeconfig(
            &sched_kubeconfig,
            &server,
            &pki.ca.cert,
            "system:kube-scheduler",
            KubeconfigAuth::Cert(&pki.scheduler),
            None,
        )?;

        // kube-controller-manager
        let kcm_port = free_port()?;
        let mut cmd = Command::new(&bins.kube_controller_manager);
        let kcm_kc = kcm_kubeconfig.display().to_string();
        cmd.arg(format!("--kubeconfig={kcm_kc}"))
            .arg(format!("--authentication-kubeconfig={kcm_kc}"))
            .arg(format!("--authorization-kubeconfig={kcm_kc}"))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={kcm_port}"))
            .arg("--leader-elect=false")
            .arg("--use-service-account-credentials=true")
            .arg(format!(
                "--service-account-private-key-file={}",
                pki.sa_key.display()
            ))
            .arg(format!("--root-ca-file={}", pki.ca.cert.display()))
            .arg(format!(
                "--cluster-signing-cert-file={}",
                pki.ca.cert.display()
            ))
            .arg(format!(
                "--cluster-signing-key-file={}",
                pki.ca.key.display()
            ))
            .arg(format!("--service-cluster-ip-range={SERVICE_CIDR}"))
            .arg("--profiling=false")
            .arg("--v=1");
        let controller_manager_cmd = (
            bins.kube_controller_manager.clone(),
            cmd.get_args().map(Into::into).collect(),
        );
        let controller_manager =
            ManagedProcess::spawn("kube-controller-manager", cmd, dir, watchdog)?;

        // kube-scheduler
        let sched_port = free_port()?;
        let mut cmd = Command::new(&bins.kube_scheduler);
        let sched_kc = sched_kubeconfig.display().to_string();
        cmd.arg(format!("--kubeconfig={sched_kc}"))
            .arg(format!("--authentication-kubeconfig={sched_kc}"))
            .arg(format!("--authorization-kubeconfig={sched_kc}"))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--secure-port={sched_port}"))
            .arg("--leader-elect=false")
            .arg("--profiling=false")
            .arg("--v=1");
        let scheduler_cmd = (
            bins.kube_scheduler.clone(),
            cmd.get_args().map(Into::into).collect(),
        );
        let scheduler = ManagedProcess::spawn("kube-scheduler", cmd, dir, watchdog)?;

        let insecure = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .timeout(Duration::from_secs(5))
            .build()?;
        for (name, port) in [
            ("kube-controller-manager", kcm_port),
            ("kube-scheduler", sched_port),
        ] {
            let url = format!("https://127.0.0.1:{port}/healthz");
            poll_until(&format!("{name} /healthz"), READY_TIMEOUT, POLL, || async {
                controller_manager.check_running()?;
                scheduler.check_running()?;
                let r = insecure.get(&url).send().await?;
                Ok(r.status().is_success().then_some(()))
            })
            .await?;
            tracing::info!(elapsed = ?t0.elapsed(), "{name} healthy");
        }

        let start_duration = t0.elapsed();
        tracing::info!(?start_duration, server, "control plane ready");
        Ok(Self {
            scheduler,
            controller_manager,
            scheduler_cmd,
            controller_manager_cmd,
            revivals: 0,
            apiserver,
            apiserver_program: bins.kube_apiserver.clone(),
            apiserver_args,
            apiserver_restarts: 0,
            etcd,
            server,
            apiserver_port,
            admin_kubeconfig,
            pki,
            dir: dir.to_path_buf(),
            start_duration,
        })
    }

    /// A new kube client with the admin identity. Make one per tokio runtime.
    pub async fn client(&self) -> Result<kube::Client> {
        client_from_kubeconfig(&self.admin_kubeconfig).await
    }

    /// `(name, pid)` of each control-plane process.
    pub fn pids(&self) -> Vec<(&str, u32)> {
        [
            &self.etcd,
            &self.apiserver,
            &self.controller_manager,
            &self.scheduler,
        ]
        .iter()
        .map(|p| (p.name(), p.pid()))
        .collect()
    }

    /// Fails if any control-plane process has exited.
    pub fn check_running(&self) -> Result<()> {
        self.etcd.check_running()?;
        self.apiserver.check_running()?;
        self.controller_manager.check_running()?;
        self.scheduler.check_running()
    }

    /// Stops kube-apiserver (SIGTERM, SIGKILL 5 s later) and starts
    /// it again with the same flags on the same port; returns once `/readyz` answers, with how
    /// long it was away. Clients see refused connections and broken watches meanwhile.
    pub async fn restart_apiserver(&mut self, watchdog: Option<&Watchdog>) -> Result<Duration> {
        let t0 = Instant::now();
        // it drains open watches for as long as it may: SIGKILL after 5 s, as a crash would
        self.apiserver.set_grace(Duration::from_secs(5));
        self.apiserver.stop();
        self.apiserver_restarts += 1;
        let mut cmd = Command::new(&self.apiserver_program);
        cmd.args(&self.apiserver_args);
        self.apiserver = ManagedProcess::spawn(
            &format!("kube-apiserver.{}", self.apiserver_restarts),
            cmd,
            &self.dir,
            watchdog,
        )?
        .with_grace(Duration::from_secs(60));
        wait_ready(&self.apiserver, &self.pki, &self.server).await?;
        Ok(t0.elapsed())
    }

    /// Starts the scheduler or the controller-manager again if it exited, as the kubelet does
    /// for a static pod or systemd for a unit: kube-scheduler exits on purpose when it finds its
    /// cache inconsistent ("Scheduler cache is corrupted"), which an API server restart can cause,
    /// and a cluster then runs it again. Returns what was restarted and how it had exited.
    pub fn revive(&mut self, watchdog: Option<&Watchdog>) -> Result<Vec<String>> {
        let mut revived = Vec::new();
        for which in [Component::Scheduler, Component::ControllerManager] {
            let (process, (program, args)) = match which {
                Component::Scheduler => (&mut self.scheduler, &self.scheduler_cmd),
                Component::ControllerManager => {
                    (&mut self.controller_manager, &self.controller_manager_cmd)
                }
            };
            let Err(exited) = process.check_running() else {
                continue;
            };
            process.stop();
            self.revivals += 1;
            let base = process
                .name()
                .split('.')
                .next()
                .unwrap_or_default()
                .to_string();
            let mut cmd = Command::new(program);
            cmd.args(args);
            *process = ManagedProcess::spawn(
                &format!("{base}.{}", self.revivals),
                cmd,
                &self.dir,
                watchdog,
            )?;
            tracing::warn!(%exited, "control-plane process restarted");
            revived.push(format!("{base} ({exited})"));
        }
        Ok(revived)
    }

    /// Stops everything now (also done on drop).
    pub fn stop(&mut self) {
        self.scheduler.stop();
        self.controller_manager.stop();
        self.apiserver.stop();
        self.etcd.stop();
    }
}

/// The control-plane processes [`ControlPlane::revive`] restarts.
#[derive(Clone, Copy)]
enum Component {
    Scheduler,
    ControllerManager,
}

/// Waits for the apiserver's `/readyz`.
async fn wait_ready(apiserver: &ManagedProcess, pki: &Pki, server: &str) -> Result<()> {
    let ca_pem = std::fs::read(&pki.ca.cert).ctx(|| "read CA".to_string())?;
    let ca = reqwest::Certificate::from_pem(&ca_pem)?;
    let https = reqwest::Client::builder()
        .add_root_certificate(ca)
        .timeout(Duration::from_secs(5))
        .build()?;
    let url = format!("{server}/readyz");
    poll_until("kube-apiserver /readyz", READY_TIMEOUT, POLL, || async {
        apiserver.check_running()?;
        let r = https.get(&url).send().await?;
        Ok(r.status().is_success().then_some(()))
    })
    .await
}

/// A kube client for a kubeconfig file.
pub async fn client_from_kubeconfig(path: &Path) -> Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(path)
        .map_err(|e| Error::Kubeconfig(format!("{}: {e}", path.display())))?;
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| Error::Kubeconfig(format!("{}: {e}", path.display())))?;
    Ok(kube::Client::try_from(config)?)
}

/// Resident set size of a process in KiB, from `/proc/<pid>/status` (`VmRSS`), and its peak
/// (`VmHWM`).
pub fn rss_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}
