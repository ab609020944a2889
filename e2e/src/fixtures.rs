//! Test fixtures: one environment (control plane, process kubelet, MinIO) per test binary,
//! namespaces, kubectl and helm with the built binaries, waits and bucket helpers.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node, Secret, ServiceAccount};
use kube::Api;
use kube::api::PostParams;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::binaries::{Binaries, check_executable};
use crate::cluster::ControlPlane;
use crate::error::{Error, IoContext, Result};
use crate::kubelet::{ImageMapping, KubeletConfig};
use crate::node::RealNode;
use crate::process::{ManagedProcess, Watchdog};
use crate::store::{Minio, S3Endpoint, S3Server};
use crate::wait::poll_until;

/// Name of the Node the process kubelet registers.
pub const NODE_NAME: &str = "e2e-node-1";

/// What the environment needs from the test binary (whose `CARGO_BIN_EXE_*` paths only it knows).
#[derive(Debug, Clone)]
pub struct EnvOptions {
    /// The `process-kubelet` binary.
    pub kubelet_binary: PathBuf,
    /// Image mappings for the kubelet.
    pub images: Vec<ImageMapping>,
    /// Run pods on a real node ([`RealNode`]) instead of the process kubelet, with these image
    /// archives imported into its containerd (only inside `e2e/scripts/node-netns.sh`).
    pub real_node_images: Option<Vec<PathBuf>>,
}

impl EnvOptions {
    /// Options with the kubelet at `kubelet_binary` and `streamjob/e2e-echo:*` mapped to
    /// `echo_binary` (`streamjob/e2e-hang:*` too, in its hanging mode). Workspace binaries built next to the kubelet (`streamjob-runtime`,
    /// `streamjob-operator`) are mapped to `streamjob/runtime:*` and `streamjob/operator:*`
    /// when they exist.
    pub fn new(kubelet_binary: &str, echo_binary: &str) -> Self {
        let kubelet_binary = PathBuf::from(kubelet_binary);
        let mut images = vec![
            ImageMapping {
                image: "streamjob/e2e-echo:*".into(),
                binary: echo_binary.into(),
                env: Default::default(),
                aliases: vec![],
            },
            // a pod that accepts connections on its addresses and never answers
            ImageMapping {
                image: "streamjob/e2e-hang:*".into(),
                binary: echo_binary.into(),
                env: [("HANG".to_string(), "1".to_string())].into(),
                aliases: vec![],
            },
        ];
        if let Some(dir) = kubelet_binary.parent() {
            for (image, bin) in [
                ("streamjob/runtime:*", "streamjob-runtime"),
                ("streamjob/operator:*", "streamjob-operator"),
            ] {
                let path = dir.join(bin);
                if path.is_file() {
                    images.push(ImageMapping {
                        image: image.into(),
                        binary: path,
                        env: Default::default(),
                        aliases: vec![],
                    });
                }
            }
        }
        Self {
            kubelet_binary,
            images,
            real_node_images: None,
        }
    }
}

/// A running environment. Drop order stops the kubelet (and its pods) first, then MinIO, then
/// the control plane; the watchdog covers the case where drop never runs.
#[derive(Debug)]
pub struct TestEnv {
    /// The real node, when [`EnvOptions::real_node_images`] asked for one.
    pub real_node: Option<RealNode>,
    /// The process kubelet, unless the environment runs a real node.
    kubelet: Option<ManagedProcess>,
    kubelet_binary: PathBuf,
    /// The S3 server.
    pub minio: Minio,
    /// The control plane.
    pub plane: ControlPlane,
    /// External binaries.
    pub bins: Binaries,
    /// This run's folder (`target/e2e-runs/<timestamp>-<pid>/`).
    pub run_dir: PathBuf,
    /// The repository root.
    pub repo_root: PathBuf,
    /// The process kubelet's configuration (its `run_dir` holds the pods' files; unused on a
    /// real node).
    pub kubelet_config: KubeletConfig,
    /// Wall time from start to a Ready node.
    pub start_duration: Duration,
    _watchdog: Watchdog,
}

/// Logs of one of the harness's programs (`src/bin/`) to stderr: `RUST_LOG`, else `default`.
pub fn init_process_tracing(default: &str) {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default)),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// Logs of a test binary through the test harness's writer (`RUST_LOG`, default
/// `info,kube=warn`); once per process.
pub fn init_test_tracing() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube=warn")),
            )
            .with_test_writer()
            .try_init();
    });
}

static SHARED: tokio::sync::OnceCell<TestEnv> = tokio::sync::OnceCell::const_new();

/// The environment shared by every test of this test binary, started on first use.
/// Its processes are stopped by the watchdog when the test binary exits.
pub async fn shared(opts: impl FnOnce() -> EnvOptions) -> Result<&'static TestEnv> {
    SHARED.get_or_try_init(|| TestEnv::start(opts())).await
}

/// The repository root (parent of the `e2e` crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// Run folders kept under `target/e2e-runs` (besides runs whose process is still alive).
pub const KEPT_RUNS: usize = 3;

/// Deletes run folders (`[prefix]<timestamp>-<pid>`, such as `20260101T000000-42` or
/// `sink-crash-20260101T000000-42`) under `runs` but the newest `keep` of each prefix, and never
/// one whose process is still running (another test binary using the same target directory).
pub fn prune_runs(runs: &Path, keep: usize) {
    let Ok(entries) = std::fs::read_dir(runs) else {
        return;
    };
    // prefix → (timestamp, folder name, pid)
    let mut by_prefix: BTreeMap<String, Vec<(String, String, u32)>> = BTreeMap::new();
    for name in entries.filter_map(|e| e.ok()?.file_name().into_string().ok()) {
        let Some((head, pid)) = name.rsplit_once('-') else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        let Some(split) = head.len().checked_sub(15) else {
            continue;
        };
        let (prefix, stamp) = head.split_at(split);
        if chrono::NaiveDateTime::parse_from_str(stamp, "%Y%m%dT%H%M%S").is_err() {
            continue;
        }
        by_prefix.entry(prefix.to_string()).or_default().push((
            stamp.to_string(),
            name.clone(),
            pid,
        ));
    }
    for mut folders in by_prefix.into_values() {
        folders.sort();
        let old = folders.len().saturating_sub(keep);
        for (_, name, pid) in &folders[..old] {
            if Path::new(&format!("/proc/{pid}")).exists() {
                continue;
            }
            if let Err(e) = std::fs::remove_dir_all(runs.join(name)) {
                tracing::warn!(run = %name, error = %e, "cannot delete an old e2e run folder");
            }
        }
    }
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo_root().join("target"), PathBuf::from)
}

impl TestEnv {
    /// Starts control plane, MinIO and the process kubelet; waits for a Ready node and the
    /// `default` ServiceAccount.
    pub async fn start(opts: EnvOptions) -> Result<Self> {
        let t0 = Instant::now();
        let bins = Binaries::locate()?;
        check_executable("process-kubelet", &opts.kubelet_binary)?;
        let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S").to_string();
        let runs = target_dir().join("e2e-runs");
        // each run leaves its logs, pods and MinIO data (up to ~1 GB): keep the newest few
        prune_runs(&runs, KEPT_RUNS);
        let run_dir = runs.join(format!("{stamp}-{}", std::process::id()));
        std::fs::create_dir_all(&run_dir).ctx(|| format!("create {}", run_dir.display()))?;
        tracing::info!(run_dir = %run_dir.display(), "starting e2e environment");
        let watchdog = Watchdog::start(&run_dir)?;
        let cluster_dir = run_dir.join("cluster");
        let minio_dir = run_dir.join("minio");
        let (plane, minio) = tokio::try_join!(
            ControlPlane::start(&bins, &cluster_dir, Some(&watchdog)),
            Minio::start(&bins, &minio_dir, Some(&watchdog)),
        )?;

        let kubelet_config = KubeletConfig {
            node_name: NODE_NAME.into(),
            run_dir: run_dir.join("pods"),
            api_server: plane.server.clone(),
            ca_file: plane.pki.ca.cert.clone(),
            images: opts.images.clone(),
            // A random second octet keeps two runs on one machine (a developer's and CI's)
            // from handing out the same pod addresses.
            pod_ip_start: std::net::Ipv4Addr::new(127, rand::random_range(1..=254), 0, 1),
            // the fairness test runs 200 hung jobs' pods beside the others
            capacity: [("pods".to_string(), "400".to_string())].into(),
            labels: Default::default(),
            inherit_env: vec!["RUST_LOG".into(), "RUST_BACKTRACE".into()],
            heartbeat_seconds: 10,
        };
        let kubelet_cfg_path = run_dir.join("process-kubelet.yaml");
        kubelet_config.write(&kubelet_cfg_path)?;
        let client = plane.client().await?;
        let (kubelet, real_node) = match &opts.real_node_images {
            Some(images) => {
                let node = RealNode::start(
                    &plane,
                    &run_dir.join("node"),
                    images,
                    &opts.kubelet_binary.with_file_name("netpol-agent"),
                    Some(&watchdog),
                )
                .await?;
                (None, Some(node))
            }
            None => {
                let mut cmd = Command::new(&opts.kubelet_binary);
                cmd.arg("--kubeconfig")
                    .arg(&plane.admin_kubeconfig)
                    .arg("--config")
                    .arg(&kubelet_cfg_path);
                let kubelet =
                    ManagedProcess::spawn("process-kubelet", cmd, &run_dir, Some(&watchdog))?
                        .with_grace(Duration::from_secs(40));
                let nodes: Api<Node> = Api::all(client.clone());
                poll_until(
                    "node Ready without not-ready taint",
                    Duration::from_secs(60),
                    Duration::from_millis(200),
                    || async {
                        kubelet.check_running()?;
                        let Some(node) = nodes.get_opt(NODE_NAME).await? else {
                            return Ok(None);
                        };
                        Ok(node_schedulable(&node).then_some(()))
                    },
                )
                .await?;
                (Some(kubelet), None)
            }
        };
        wait_default_service_account(&client, "default").await?;
        let start_duration = t0.elapsed();
        tracing::info!(?start_duration, "e2e environment ready");
        Ok(Self {
            real_node,
            kubelet,
            kubelet_binary: opts.kubelet_binary.clone(),
            minio,
            plane,
            bins,
            run_dir,
            repo_root: repo_root(),
            kubelet_config,
            start_duration,
            _watchdog: watchdog,
        })
    }

    /// A new admin client (one per tokio runtime: each `#[tokio::test]` has its own).
    pub async fn client(&self) -> Result<kube::Client> {
        self.plane.client().await
    }

    /// The S3 endpoint.
    pub fn s3(&self) -> &S3Endpoint {
        self.minio.endpoint()
    }

    /// Creates a namespace `<prefix>-<random>` and waits for its `default` ServiceAccount.
    pub async fn namespace(&self, prefix: &str) -> Result<String> {
        self.namespace_labelled(prefix, json!({})).await
    }

    /// [`TestEnv::namespace`] enforcing the `restricted` Pod Security Standard: the API server's
    /// admission refuses every pod that does not meet it, so a test in it fails on such a pod.
    pub async fn restricted_namespace(&self, prefix: &str) -> Result<String> {
        self.namespace_labelled(
            prefix,
            json!({
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "latest"
            }),
        )
        .await
    }

    async fn namespace_labelled(&self, prefix: &str, labels: serde_json::Value) -> Result<String> {
        let client = self.client().await?;
        let name = format!("{prefix}-{:08x}", rand::random::<u32>());
        let ns: Namespace = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}
        }))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await?;
        wait_default_service_account(&client, &name).await?;
        Ok(name)
    }

    /// A `kubectl` command with the admin kubeconfig.
    pub fn kubectl_command(&self) -> Command {
        let mut cmd = Command::new(&self.bins.kubectl);
        cmd.env("KUBECONFIG", &self.plane.admin_kubeconfig);
        cmd
    }

    /// Runs kubectl with `args` and optional stdin; returns the output whatever the exit code.
    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Result<Output> {
        run_with_stdin(self.kubectl_command(), args, stdin)
    }

    /// Runs kubectl and fails unless it exits 0; returns stdout.
    pub fn kubectl_ok(&self, args: &[&str], stdin: Option<&str>) -> Result<String> {
        checked(self.kubectl(args, stdin)?, "kubectl", args)
    }

    /// Scales Deployment `ns/name` back to one replica and waits (up to 2 min) until it has
    /// rolled out: what a test that paused an operator owes the tests after it. Best effort, as
    /// it runs from `Drop`.
    pub fn resume_deployment(&self, ns: &str, name: &str) {
        let _ = self.kubectl(
            &["scale", "deployment", name, "-n", ns, "--replicas=1"],
            None,
        );
        let _ = self.kubectl(
            &[
                "rollout",
                "status",
                "deployment",
                name,
                "-n",
                ns,
                "--timeout=120s",
            ],
            None,
        );
    }

    /// Runs helm with the admin kubeconfig; fails unless it exits 0; returns stdout.
    pub fn helm_ok(&self, args: &[&str]) -> Result<String> {
        let mut cmd = Command::new(&self.bins.helm);
        let cache = self.run_dir.join("helm");
        cmd.env("KUBECONFIG", &self.plane.admin_kubeconfig)
            .env("HELM_CACHE_HOME", cache.join("cache"))
            .env("HELM_CONFIG_HOME", cache.join("config"))
            .env("HELM_DATA_HOME", cache.join("data"));
        checked(run_with_stdin(cmd, args, None)?, "helm", args)
    }

    /// `helm upgrade --install <release> charts/streamjob-operator -n <ns>` with `--set` values.
    pub fn install_operator_chart(&self, release: &str, ns: &str, set: &[&str]) -> Result<String> {
        let chart = self.repo_root.join("charts").join("streamjob-operator");
        if !chart.join("Chart.yaml").is_file() {
            return Err(Error::Other(format!(
                "chart not found at {}",
                chart.display()
            )));
        }
        let chart = chart.display().to_string();
        let mut args = vec![
            "upgrade",
            "--install",
            release,
            chart.as_str(),
            "--namespace",
            ns,
            "--create-namespace",
            // every test's pods share one node: small requests, so leftovers never starve it
            "--set",
            "runtimeResources.requests.cpu=10m",
            "--set",
            "runtimeResources.requests.memory=64Mi",
        ];
        for s in set {
            args.push("--set");
            args.push(s);
        }
        self.helm_ok(&args)
    }

    /// Creates a bucket and a Secret `<secret>` in `ns` with the credentials
    /// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL`).
    pub async fn bucket_with_secret(&self, ns: &str, bucket: &str, secret: &str) -> Result<()> {
        let s3 = self.s3();
        s3.create_bucket(bucket).await?;
        let client = self.client().await?;
        let sec: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": secret, "namespace": ns},
            "stringData": {
                "AWS_ACCESS_KEY_ID": s3.access_key,
                "AWS_SECRET_ACCESS_KEY": s3.secret_key,
                "AWS_REGION": s3.region,
                "AWS_ENDPOINT_URL": s3.url,
            },
        }))?;
        Api::<Secret>::namespaced(client, ns)
            .create(&PostParams::default(), &sec)
            .await?;
        Ok(())
    }

    /// A binary the workspace built next to the process kubelet (`streamjob-operator`,
    /// `streamjob-runtime`); fails with a message that says how to build it.
    pub fn workspace_binary(&self, name: &str) -> Result<PathBuf> {
        let dir = self
            .kubelet_binary
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        let path = dir.join(name);
        if path.is_file() {
            Ok(path)
        } else {
            Err(Error::MissingBinary {
                name: name.to_string(),
                detail: format!(
                    "{} does not exist; build it with `cargo build -p {name}` before the e2e tests",
                    path.display()
                ),
            })
        }
    }

    /// Restarts kube-apiserver (see [`ControlPlane::restart_apiserver`]); returns how long it
    /// was away.
    pub async fn restart_apiserver(&mut self) -> Result<Duration> {
        self.plane.restart_apiserver(Some(&self._watchdog)).await
    }

    /// Restarts the scheduler or controller-manager if it exited (see
    /// [`ControlPlane::revive`]); returns what was restarted.
    pub fn revive_control_plane(&mut self) -> Result<Vec<String>> {
        self.plane.revive(Some(&self._watchdog))
    }

    /// `(name, pid)` of every long-running process of the environment.
    pub fn pids(&self) -> Vec<(String, u32)> {
        let mut v: Vec<(String, u32)> = self
            .plane
            .pids()
            .into_iter()
            .map(|(n, p)| (n.to_string(), p))
            .collect();
        if let Some(k) = &self.kubelet {
            v.push(("process-kubelet".into(), k.pid()));
        }
        if let Some(node) = &self.real_node {
            v.extend(node.pids());
        }
        v.push(("minio".into(), self.minio.pid()));
        v
    }
}

fn run_with_stdin(mut cmd: Command, args: &[&str], stdin: Option<&str>) -> Result<Output> {
    cmd.args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    let mut child = cmd.spawn().ctx(|| format!("spawn {cmd:?}"))?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        use std::io::Write;
        pipe.write_all(input.as_bytes())
            .ctx(|| "write stdin".to_string())?;
    }
    child.wait_with_output().ctx(|| format!("wait {cmd:?}"))
}

fn checked(out: Output, tool: &str, args: &[&str]) -> Result<String> {
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(Error::Command {
            command: format!("{tool} {}", args.join(" ")),
            status: out.status.to_string(),
            stderr: format!(
                "{}{}",
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            ),
        })
    }
}

async fn wait_default_service_account(client: &kube::Client, ns: &str) -> Result<()> {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    poll_until(
        &format!("ServiceAccount {ns}/default"),
        Duration::from_secs(60),
        Duration::from_millis(100),
        || async { Ok(sas.get_opt("default").await?.map(|_| ())) },
    )
    .await
}

/// Polls `api.get(name)` until `pred` holds; returns the object.
pub async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&K) -> bool,
) -> Result<K>
where
    K: Clone + DeserializeOwned + Debug,
{
    poll_until(
        &format!("{name}: {what}"),
        timeout,
        Duration::from_millis(200),
        || async { Ok(api.get_opt(name).await?.filter(|o| pred(o))) },
    )
    .await
}

/// A node is Ready and carries no `node.kubernetes.io/…` taint (not-ready, unreachable, …).
pub fn node_schedulable(node: &Node) -> bool {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key.starts_with("node.kubernetes.io/")));
    ready && !tainted
}

/// Polls until `api.get(name)` is 404.
pub async fn wait_deleted<K>(api: &Api<K>, name: &str, timeout: Duration) -> Result<()>
where
    K: Clone + DeserializeOwned + Debug,
{
    poll_until(
        &format!("{name} deleted"),
        timeout,
        Duration::from_millis(200),
        || async { Ok(api.get_opt(name).await?.is_none().then_some(())) },
    )
    .await
}

/// The status of condition `type_` in `.status.conditions` of any object, if present.
pub fn condition_status<K: Serialize>(obj: &K, type_: &str) -> Option<String> {
    let v = serde_json::to_value(obj).ok()?;
    v["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str().map(str::to_string))
}

/// Polls until condition `type_` of object `name` has `status` (`"True"`, ...).
pub async fn wait_condition<K>(
    api: &Api<K>,
    name: &str,
    type_: &str,
    status: &str,
    timeout: Duration,
) -> Result<K>
where
    K: Clone + DeserializeOwned + Debug + Serialize,
{
    wait_for(
        api,
        name,
        &format!("condition {type_}={status}"),
        timeout,
        |o| condition_status(o, type_).as_deref() == Some(status),
    )
    .await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn old_runs_are_pruned_but_live_and_newest_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let dead = 4_294_967u32; // above any pid_max: no such process
        let me = std::process::id();
        let names = [
            format!("20260101T000000-{dead}"),
            format!("20260101T000001-{me}"),
            format!("20260101T000002-{dead}"),
            format!("20260101T000003-{dead}"),
            format!("20260101T000004-{dead}"),
            format!("sink-crash-20260101T000000-{dead}"),
            format!("sink-crash-20260101T000005-{dead}"),
            format!("sink-crash-20260101T000006-{dead}"),
            "notes".to_string(),
        ];
        for n in &names {
            std::fs::create_dir_all(dir.path().join(n).join("pods")).unwrap();
        }
        prune_runs(dir.path(), 2);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                format!("20260101T000001-{me}"),
                format!("20260101T000003-{dead}"),
                format!("20260101T000004-{dead}"),
                "notes".to_string(),
                format!("sink-crash-20260101T000005-{dead}"),
                format!("sink-crash-20260101T000006-{dead}"),
            ]
        );
    }
}
