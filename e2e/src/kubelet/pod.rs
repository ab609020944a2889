//! One pod: its containers as local processes, probes, restarts, status and deletion.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Container, Pod, Probe, ServiceAccount};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tokio::process::{Child, Command};
use tokio::sync::watch;

use super::config::KubeletConfig;
use super::env::{ConfigError, expand, resolve};
use super::node::now_rfc3339;
use super::termination;
use super::volumes;
use crate::certs::{KubeconfigAuth, write_kubeconfig};

const TICK: Duration = Duration::from_millis(250);
const BACKOFF_START: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// A pod annotated `e2e.streamjob.io/partitioned: "true"` is cut off from this kubelet, as on a
/// node behind a network partition: from then on nothing is reported, probed, restarted,
/// stopped or finalised for it, so a deletion leaves the object `Terminating` (until it is
/// force-deleted) and its processes running. The kubelet writes `partitioned` into the pod's
/// folder when it lets go, and what the processes exit with into `<container>.exit`. Tests use
/// it to make zombies of old versions.
pub const PARTITIONED: &str = "e2e.streamjob.io/partitioned";

/// Whether `pod` carries [`PARTITIONED`].
pub fn partitioned(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PARTITIONED))
        .is_some_and(|v| v == "true")
}

/// A pod annotated `e2e.streamjob.io/api-server: https://HOST:PORT` reaches the API server at
/// that address instead of the kubelet's (its kubeconfig and `KUBERNETES_SERVICE_HOST`/`PORT`):
/// tests put a slow proxy in front of the API server for one pod (the operator) while everything
/// else talks to the API server directly.
pub const API_SERVER: &str = "e2e.streamjob.io/api-server";

/// The API server `pod` is given: its [`API_SERVER`] annotation, else `default`.
fn api_server_of<'a>(pod: &'a Pod, default: &'a str) -> &'a str {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(API_SERVER))
        .map_or(default, String::as_str)
}

/// Shared state of the kubelet that pod workers use.
pub struct Shared {
    pub client: kube::Client,
    pub cfg: Arc<KubeletConfig>,
    pub http: reqwest::Client,
}

#[derive(Debug)]
struct Ctr {
    spec: Container,
    child: Option<Child>,
    pid: Option<u32>,
    started_at: Option<String>,
    started_instant: Option<Instant>,
    restart_count: i32,
    /// Set while the container is terminated (for good, or until its restart).
    terminated: Option<Value>,
    last_terminated: Option<Value>,
    waiting: Option<(String, String)>,
    ever_started: bool,
    /// When the next start may happen; `None` means "never again".
    next_start: Option<Instant>,
    backoff: Duration,
    ready: bool,
    probe_ok: i32,
    probe_fail: i32,
    next_probe: Instant,
    live_fail: i32,
    next_live: Instant,
    /// The startup probe passed (or there is none): readiness and liveness probes run only
    /// then, as on a real kubelet.
    started: bool,
    startup_fail: i32,
    next_startup: Instant,
    /// This start's termination-message file.
    message_path: Option<PathBuf>,
}

impl Ctr {
    fn new(spec: Container) -> Self {
        let now = Instant::now();
        Self {
            spec,
            child: None,
            pid: None,
            started_at: None,
            started_instant: None,
            restart_count: 0,
            terminated: None,
            last_terminated: None,
            waiting: Some(("ContainerCreating".into(), String::new())),
            ever_started: false,
            next_start: Some(now),
            backoff: BACKOFF_START,
            ready: false,
            probe_ok: 0,
            probe_fail: 0,
            next_probe: now,
            live_fail: 0,
            next_live: now,
            started: false,
            startup_fail: 0,
            next_startup: now,
            message_path: None,
        }
    }
}

/// A probe's `initialDelaySeconds` (none: no delay).
fn initial_delay(p: &Option<Probe>) -> Duration {
    Duration::from_secs(
        p.as_ref()
            .and_then(|p| p.initial_delay_seconds)
            .unwrap_or(0)
            .max(0) as u64,
    )
}

/// `state.terminated` of a container that exited with `code` (killed by `signal`), with its
/// termination message (the file, or the log tail under `FallbackToLogsOnError`).
fn terminated_state(dir: &Path, c: &Ctr, code: i32, signal: Option<i32>) -> Value {
    let content = c
        .message_path
        .as_deref()
        .map(|p| termination::read_head(p, termination::MAX_MESSAGE_BYTES))
        .unwrap_or_default();
    let fallback = c.spec.termination_message_policy.as_deref() == Some("FallbackToLogsOnError");
    let message = termination::termination_message(&content, code, fallback, || {
        // The real kubelet tails one combined log; ours keeps stdout and stderr apart, so the
        // tail is taken of stdout followed by stderr (where errors are logged).
        let budget = (termination::FALLBACK_BYTES * 2) as u64;
        let mut log = Vec::new();
        for stream in ["stdout", "stderr"] {
            let path = dir.join(format!("{}.{stream}.log", c.spec.name));
            let mut part = termination::read_tail(&path, budget);
            if !part.is_empty() && !part.ends_with(b"\n") {
                part.push(b'\n');
            }
            log.extend(part);
        }
        log
    });
    let mut term = json!({
        "exitCode": code,
        "reason": if code == 0 { "Completed" } else { "Error" },
        "startedAt": c.started_at,
        "finishedAt": now_rfc3339(),
        "containerID": c.pid.map(|p| format!("process://{p}")),
    });
    if let Some(sig) = signal {
        term["signal"] = json!(sig);
    }
    if !message.is_empty() {
        term["message"] = json!(message);
    }
    term
}

/// The runtime state of one pod on this node.
pub struct PodRuntime {
    shared: Arc<Shared>,
    key: String,
    dir: PathBuf,
    pub ip: Ipv4Addr,
    ctrs: Vec<Ctr>,
    start_time: String,
    cond_since: HashMap<String, (bool, String)>,
    last_reported: Option<Value>,
    /// A pod found in a terminal phase when this kubelet started is not run again.
    adopted_terminal: bool,
}

fn restart_wanted(policy: &str, exit_code: i32) -> bool {
    match policy {
        "Never" => false,
        "OnFailure" => exit_code != 0,
        _ => true,
    }
}

fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

impl PodRuntime {
    /// Prepares the pod's folder and state; `ip` is its loopback address.
    pub fn new(shared: Arc<Shared>, pod: &Pod, ip: Ipv4Addr) -> Self {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let dir = shared.cfg.run_dir.join(format!("{ns}_{name}_{uid}"));
        let ctrs = pod
            .spec
            .as_ref()
            .map(|s| s.containers.clone())
            .unwrap_or_default()
            .into_iter()
            .map(Ctr::new)
            .collect();
        let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
        let adopted_terminal = matches!(phase.as_deref(), Some("Succeeded" | "Failed"));
        Self {
            shared,
            key: format!("{ns}/{name}"),
            dir,
            ip,
            ctrs,
            start_time: now_rfc3339(),
            cond_since: HashMap::new(),
            last_reported: None,
            adopted_terminal,
        }
    }

    fn restart_policy(pod: &Pod) -> String {
        pod.spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone())
            .unwrap_or_else(|| "Always".into())
    }

    /// Writes a kubeconfig with a token of the pod's ServiceAccount (TokenRequest API, bound
    /// to the pod) and returns its path; `None` when the pod opts out of a token.
    async fn pod_kubeconfig(&self, pod: &Pod) -> Result<Option<PathBuf>, ConfigError> {
        let spec = pod.spec.as_ref();
        if spec.and_then(|s| s.automount_service_account_token) == Some(false) {
            return Ok(None);
        }
        let path = self.dir.join("kubeconfig");
        if path.exists() {
            return Ok(Some(path));
        }
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let sa = spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into());
        let tr: TokenRequest = serde_json::from_value(json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {
                "audiences": [],
                "expirationSeconds": 86400,
                "boundObjectRef": {
                    "apiVersion": "v1", "kind": "Pod",
                    "name": pod.metadata.name, "uid": pod.metadata.uid,
                },
            },
        }))
        .map_err(|e| ConfigError(format!("token request: {e}")))?;
        let api: Api<ServiceAccount> = Api::namespaced(self.shared.client.clone(), &ns);
        let resp = api
            .create_token_request(&sa, &PostParams::default(), &tr)
            .await
            .map_err(|e| ConfigError(format!("token for serviceaccount {ns}/{sa}: {e}")))?;
        let token = resp
            .status
            .and_then(|s| s.token)
            .ok_or_else(|| ConfigError("token request returned no token".into()))?;
        write_kubeconfig(
            &path,
            api_server_of(pod, &self.shared.cfg.api_server),
            &self.shared.cfg.ca_file,
            &format!("system:serviceaccount:{ns}:{sa}"),
            KubeconfigAuth::Token(&token),
            Some(&ns),
        )
        .map_err(|e| ConfigError(e.to_string()))?;
        Ok(Some(path))
    }

    /// Resolves image, command and environment and starts container `i`.
    async fn start(&mut self, pod: &Pod, i: usize) -> Result<(), (String, String)> {
        let cfg = self.shared.cfg.clone();
        let spec = self.ctrs[i].spec.clone();
        let image = spec.image.clone().unwrap_or_default();
        let mapping = cfg.image(&image).ok_or_else(|| {
            (
                "ErrImagePull".to_string(),
                format!(
                    "image {image:?} is not mapped to a local binary in the process kubelet config"
                ),
            )
        })?;
        let cfg_err = |e: ConfigError| ("CreateContainerConfigError".to_string(), e.0);
        std::fs::create_dir_all(self.dir.join(&spec.name))
            .map_err(|e| ("CreateContainerError".to_string(), e.to_string()))?;
        let kubeconfig = self.pod_kubeconfig(pod).await.map_err(cfg_err)?;
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let mut base: BTreeMap<String, String> = BTreeMap::from([
            (
                "PATH".to_string(),
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
            ),
            ("HOME".to_string(), self.dir.display().to_string()),
            ("HOSTNAME".to_string(), pod_name),
        ]);
        if let Some(host_port) = api_server_of(pod, &cfg.api_server)
            .strip_prefix("https://")
            .and_then(|hp| hp.rsplit_once(':'))
        {
            base.insert("KUBERNETES_SERVICE_HOST".into(), host_port.0.to_string());
            base.insert("KUBERNETES_SERVICE_PORT".into(), host_port.1.to_string());
        }
        if let Some(kc) = kubeconfig {
            base.insert("KUBECONFIG".into(), kc.display().to_string());
        }
        for name in &cfg.inherit_env {
            if let Ok(v) = std::env::var(name) {
                base.insert(name.clone(), v);
            }
        }
        base.extend(mapping.env.clone());
        // A fresh termination-message file for every start (the kubelet cannot mount
        // /dev/termination-log into a process).
        let message_path = self.dir.join(format!("{}.termination-log", spec.name));
        std::fs::write(&message_path, b"")
            .map_err(|e| ("CreateContainerError".to_string(), e.to_string()))?;
        base.insert(
            termination::ENV_VAR.into(),
            message_path.display().to_string(),
        );
        let root = self.dir.join(format!("{}.root", spec.name));
        volumes::materialise(&self.shared.client, pod, &spec, &root)
            .await
            .map_err(cfg_err)?;
        base.insert(volumes::ROOT_VAR.into(), root.display().to_string());
        let env = resolve(&self.shared.client, pod, &spec, &self.ip.to_string(), base)
            .await
            .map_err(cfg_err)?;

        let binary = mapping.binary.clone();
        let bin_name = binary
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let command: Vec<String> = spec
            .command
            .clone()
            .unwrap_or_default()
            .iter()
            .map(|c| expand(c, &env))
            .collect();
        // processes share the host's network: a wildcard listen address (`0.0.0.0:PORT`, every
        // interface of a real pod) stands for this pod's own IP, as a network namespace would
        let own_ip = format!("{}:", self.ip);
        let args: Vec<String> = spec
            .args
            .clone()
            .unwrap_or_default()
            .iter()
            .map(|a| expand(a, &env).replace("0.0.0.0:", &own_ip))
            .collect();
        let (exe, mut argv): (PathBuf, Vec<String>) = match command.split_first() {
            None => (binary, vec![]),
            Some((c0, rest)) => {
                if basename(c0) == bin_name || mapping.aliases.iter().any(|a| a == c0) {
                    (binary, rest.to_vec())
                } else if Path::new(c0).is_absolute() && Path::new(c0).exists() {
                    (PathBuf::from(c0), rest.to_vec())
                } else {
                    return Err((
                        "CreateContainerError".into(),
                        format!(
                            "command {c0:?} is neither the image's binary ({bin_name}), one of its aliases, nor an existing absolute path"
                        ),
                    ));
                }
            }
        };
        argv.extend(args);
        let open_log = |suffix: &str| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.dir.join(format!("{}.{suffix}.log", spec.name)))
                .map_err(|e| ("CreateContainerError".to_string(), e.to_string()))
        };
        let stdout = open_log("stdout")?;
        let stderr = open_log("stderr")?;
        let mut cmd = Command::new(&exe);
        cmd.args(&argv)
            .env_clear()
            .envs(&env)
            .current_dir(self.dir.join(&spec.name))
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .kill_on_drop(true);
        let child = cmd.spawn().map_err(|e| {
            (
                "StartError".to_string(),
                format!("start {}: {e}", exe.display()),
            )
        })?;
        let pid = child.id();
        tracing::info!(pod = %self.key, container = %spec.name, ?pid, exe = %exe.display(), ?argv, ip = %self.ip, "container started");
        let c = &mut self.ctrs[i];
        if c.ever_started {
            c.restart_count += 1;
            c.last_terminated = c.terminated.take();
        }
        c.terminated = None;
        c.child = Some(child);
        c.message_path = Some(message_path);
        c.pid = pid;
        c.ever_started = true;
        c.started_at = Some(now_rfc3339());
        c.started_instant = Some(Instant::now());
        c.waiting = None;
        c.ready = false;
        c.probe_ok = 0;
        c.probe_fail = 0;
        let now = Instant::now();
        c.next_probe = now + initial_delay(&c.spec.readiness_probe);
        c.next_live = now + initial_delay(&c.spec.liveness_probe);
        c.live_fail = 0;
        c.started = c.spec.startup_probe.is_none();
        c.startup_fail = 0;
        c.next_startup = now + initial_delay(&c.spec.startup_probe);
        Ok(())
    }

    async fn probe(&self, probe: &Probe, ctr: &Container) -> bool {
        let timeout = Duration::from_secs(probe.timeout_seconds.unwrap_or(1).max(1) as u64);
        let port_of = |p: &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString| match p {
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n) => Some(*n),
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(name) => ctr
                .ports
                .iter()
                .flatten()
                .find(|cp| cp.name.as_deref() == Some(name.as_str()))
                .map(|cp| cp.container_port),
        };
        if let Some(h) = &probe.http_get {
            let Some(port) = port_of(&h.port) else {
                return false;
            };
            let host = h.host.clone().unwrap_or_else(|| self.ip.to_string());
            let scheme = h
                .scheme
                .clone()
                .unwrap_or_else(|| "HTTP".into())
                .to_lowercase();
            let path = h.path.clone().unwrap_or_else(|| "/".into());
            let url = format!("{scheme}://{host}:{port}{path}");
            let mut req = self.shared.http.get(&url).timeout(timeout);
            for hd in h.http_headers.iter().flatten() {
                req = req.header(&hd.name, &hd.value);
            }
            return match req.send().await {
                Ok(r) => (200..400).contains(&r.status().as_u16()),
                Err(_) => false,
            };
        }
        if let Some(t) = &probe.tcp_socket {
            let Some(port) = port_of(&t.port) else {
                return false;
            };
            let host = t.host.clone().unwrap_or_else(|| self.ip.to_string());
            let port = u16::try_from(port).unwrap_or(0);
            return matches!(
                tokio::time::timeout(
                    timeout,
                    tokio::net::TcpStream::connect((host.as_str(), port))
                )
                .await,
                Ok(Ok(_))
            );
        }
        // exec and grpc probes are not supported: treat as success so the pod can proceed.
        true
    }

    /// One step: notice exits, (re)start containers, run probes.
    pub async fn sync(&mut self, pod: &Pod) {
        if self.adopted_terminal {
            return;
        }
        let policy = Self::restart_policy(pod);
        let now = Instant::now();
        for i in 0..self.ctrs.len() {
            // Exit?
            let exited = match self.ctrs[i].child.as_mut().map(Child::try_wait) {
                Some(Ok(Some(status))) => Some(status),
                _ => None,
            };
            if let Some(status) = exited {
                use std::os::unix::process::ExitStatusExt;
                let c = &mut self.ctrs[i];
                let code = status
                    .code()
                    .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
                let term = terminated_state(&self.dir, c, code, status.signal());
                tracing::info!(pod = %self.key, container = %c.spec.name, code, "container exited");
                c.child = None;
                c.ready = false;
                c.terminated = Some(term);
                if restart_wanted(&policy, code) {
                    // A container that ran for a while starts over with a short backoff.
                    if c.started_instant
                        .is_some_and(|t| t.elapsed() > Duration::from_secs(60))
                    {
                        c.backoff = BACKOFF_START;
                    }
                    c.next_start = Some(now + c.backoff);
                    c.waiting = Some((
                        "CrashLoopBackOff".into(),
                        format!("back-off {:?} restarting failed container", c.backoff),
                    ));
                    c.backoff = (c.backoff * 2).min(BACKOFF_MAX);
                } else {
                    c.next_start = None;
                }
            }
            // Start?
            let due =
                self.ctrs[i].child.is_none() && self.ctrs[i].next_start.is_some_and(|t| t <= now);
            if due && let Err((reason, message)) = self.start(pod, i).await {
                tracing::warn!(pod = %self.key, container = %self.ctrs[i].spec.name, %reason, %message, "cannot start container");
                let c = &mut self.ctrs[i];
                c.waiting = Some((reason, message));
                c.next_start = Some(Instant::now() + Duration::from_secs(2));
            }
            // The startup probe first: until it passes, no readiness or liveness probe.
            if self.ctrs[i].child.is_some() && !self.ctrs[i].started {
                let spec = self.ctrs[i].spec.clone();
                if let Some(p) = &spec.startup_probe
                    && Instant::now() >= self.ctrs[i].next_startup
                {
                    let ok = self.probe(p, &spec).await;
                    let c = &mut self.ctrs[i];
                    let now = Instant::now();
                    c.next_startup =
                        now + Duration::from_secs(p.period_seconds.unwrap_or(10).max(1) as u64);
                    if ok {
                        c.started = true;
                        c.next_probe = now + initial_delay(&c.spec.readiness_probe);
                        c.next_live = now + initial_delay(&c.spec.liveness_probe);
                    } else {
                        c.startup_fail += 1;
                        if c.startup_fail >= p.failure_threshold.unwrap_or(3) {
                            tracing::info!(pod = %self.key, container = %c.spec.name, "startup probe failed; killing");
                            if let Some(child) = c.child.as_mut() {
                                let _ = child.start_kill();
                            }
                            c.startup_fail = 0;
                        }
                    }
                }
            }
            // Probes.
            if self.ctrs[i].child.is_some() && self.ctrs[i].started {
                let spec = self.ctrs[i].spec.clone();
                match &spec.readiness_probe {
                    None => self.ctrs[i].ready = true,
                    Some(p) if Instant::now() >= self.ctrs[i].next_probe => {
                        let ok = self.probe(p, &spec).await;
                        let c = &mut self.ctrs[i];
                        c.next_probe = Instant::now()
                            + Duration::from_secs(p.period_seconds.unwrap_or(10).max(1) as u64);
                        if ok {
                            c.probe_ok += 1;
                            c.probe_fail = 0;
                            if c.probe_ok >= p.success_threshold.unwrap_or(1) {
                                c.ready = true;
                            }
                        } else {
                            c.probe_fail += 1;
                            c.probe_ok = 0;
                            if c.probe_fail >= p.failure_threshold.unwrap_or(3) {
                                c.ready = false;
                            }
                        }
                    }
                    Some(_) => {}
                }
                if let Some(p) = &spec.liveness_probe
                    && Instant::now() >= self.ctrs[i].next_live
                {
                    let ok = self.probe(p, &spec).await;
                    let c = &mut self.ctrs[i];
                    c.next_live = Instant::now()
                        + Duration::from_secs(p.period_seconds.unwrap_or(10).max(1) as u64);
                    c.live_fail = if ok { 0 } else { c.live_fail + 1 };
                    if c.live_fail >= p.failure_threshold.unwrap_or(3) {
                        tracing::info!(pod = %self.key, container = %c.spec.name, "liveness probe failed; killing");
                        if let Some(child) = c.child.as_mut() {
                            let _ = child.start_kill();
                        }
                        c.live_fail = 0;
                    }
                }
            }
        }
    }

    fn phase(&self, pod: &Pod) -> &'static str {
        if self.adopted_terminal {
            return match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
                Some("Succeeded") => "Succeeded",
                _ => "Failed",
            };
        }
        if self.ctrs.iter().any(|c| !c.ever_started) {
            return "Pending";
        }
        let all_done = self
            .ctrs
            .iter()
            .all(|c| c.child.is_none() && c.next_start.is_none());
        if all_done {
            let all_ok = self
                .ctrs
                .iter()
                .all(|c| c.terminated.as_ref().and_then(|t| t["exitCode"].as_i64()) == Some(0));
            if all_ok { "Succeeded" } else { "Failed" }
        } else {
            "Running"
        }
    }

    fn condition(&mut self, t: &str, ok: bool) -> Value {
        let since = match self.cond_since.get(t) {
            Some((prev, at)) if *prev == ok => at.clone(),
            _ => {
                let at = now_rfc3339();
                self.cond_since.insert(t.to_string(), (ok, at.clone()));
                at
            }
        };
        json!({"type": t, "status": if ok { "True" } else { "False" }, "lastTransitionTime": since})
    }

    /// The pod status this kubelet reports.
    pub fn status(&mut self, pod: &Pod) -> Value {
        if self.adopted_terminal {
            return pod
                .status
                .as_ref()
                .and_then(|s| serde_json::to_value(s).ok())
                .unwrap_or(Value::Null);
        }
        let host_network = pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false);
        let ip = if host_network {
            "127.0.0.1".to_string()
        } else {
            self.ip.to_string()
        };
        let phase = self.phase(pod);
        let statuses: Vec<Value> = self
            .ctrs
            .iter()
            .map(|c| {
                let state = if c.child.is_some() {
                    json!({"running": {"startedAt": c.started_at}})
                } else if let (Some(t), None) = (&c.terminated, &c.next_start) {
                    json!({ "terminated": t })
                } else if let Some((reason, message)) = &c.waiting {
                    json!({"waiting": {"reason": reason, "message": message}})
                } else {
                    json!({"waiting": {"reason": "ContainerCreating"}})
                };
                let last = c
                    .last_terminated
                    .as_ref()
                    .or(if c.next_start.is_some() {
                        c.terminated.as_ref()
                    } else {
                        None
                    })
                    .map_or_else(|| json!({}), |t| json!({ "terminated": t }));
                let image = c.spec.image.clone().unwrap_or_default();
                let binary = self
                    .shared
                    .cfg
                    .image(&image)
                    .map(|m| m.binary.display().to_string())
                    .unwrap_or_default();
                json!({
                    "name": c.spec.name,
                    "image": image,
                    "imageID": format!("process://{binary}"),
                    "containerID": c.pid.map(|p| format!("process://{p}")),
                    "ready": c.ready && c.child.is_some(),
                    "started": c.child.is_some(),
                    "restartCount": c.restart_count,
                    "state": state,
                    "lastState": last,
                })
            })
            .collect();
        let all_ready = self.ctrs.iter().all(|c| c.ready && c.child.is_some());
        let running_ready = all_ready && phase == "Running";
        let conditions = vec![
            self.condition("PodReadyToStartContainers", true),
            self.condition("Initialized", true),
            self.condition("ContainersReady", running_ready),
            self.condition("Ready", running_ready),
            self.condition("PodScheduled", true),
        ];
        json!({
            "phase": phase,
            "conditions": conditions,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": self.start_time,
            "containerStatuses": statuses,
            "qosClass": pod.status.as_ref().and_then(|s| s.qos_class.clone()).unwrap_or_else(|| "BestEffort".into()),
        })
    }

    /// Patches the pod's status if it changed since the last successful report.
    pub async fn report(&mut self, pod: &Pod) {
        let status = self.status(pod);
        // Compare without timestamps that change by themselves (none do: they are all stored).
        if self.last_reported.as_ref() == Some(&status) {
            return;
        }
        let (Some(ns), Some(name)) = (&pod.metadata.namespace, &pod.metadata.name) else {
            return;
        };
        let api: Api<Pod> = Api::namespaced(self.shared.client.clone(), ns);
        match api
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
        {
            Ok(_) => self.last_reported = Some(status),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => tracing::warn!(pod = %self.key, error = %e, "status update failed"),
        }
    }

    /// The pod is cut off ([`PARTITIONED`]): its processes run on, unmanaged, until they exit
    /// by themselves (each exit code written to `<container>.exit`) or the kubelet shuts down
    /// (then they are stopped: nothing is left running after a test).
    async fn cut_off(&mut self, shutdown: &mut watch::Receiver<bool>) {
        tracing::warn!(pod = %self.key, "partitioned: this kubelet no longer acts on the pod");
        // tests wait for this file before they delete the pod
        if let Err(e) = std::fs::write(self.dir.join("partitioned"), b"") {
            tracing::warn!(pod = %self.key, error = %e, "cannot write the partitioned marker");
        }
        loop {
            let mut alive = false;
            for c in &mut self.ctrs {
                let Some(child) = c.child.as_mut() else {
                    continue;
                };
                match child.try_wait() {
                    Ok(Some(status)) => {
                        use std::os::unix::process::ExitStatusExt;
                        let code = status
                            .code()
                            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
                        tracing::warn!(pod = %self.key, container = %c.spec.name, code, "partitioned container exited");
                        let path = self.dir.join(format!("{}.exit", c.spec.name));
                        if let Err(e) = std::fs::write(&path, code.to_string()) {
                            tracing::warn!(path = %path.display(), error = %e, "cannot record the exit code");
                        }
                        c.child = None;
                    }
                    _ => alive = true,
                }
            }
            if !alive {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep(TICK) => {}
                _ = shutdown.changed() => {
                    self.kill_all(Duration::from_secs(5)).await;
                    return;
                }
            }
        }
    }

    /// SIGTERM to every running container, SIGKILL after `grace`; waits for all to exit.
    pub async fn kill_all(&mut self, grace: Duration) {
        for c in &mut self.ctrs {
            if let (Some(pid), Some(_)) = (c.pid, &c.child) {
                let _ = kill(
                    Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX)),
                    Signal::SIGTERM,
                );
            }
            c.next_start = None;
        }
        let deadline = Instant::now() + grace;
        loop {
            let mut alive = false;
            for c in &mut self.ctrs {
                if let Some(child) = c.child.as_mut() {
                    match child.try_wait() {
                        Ok(Some(status)) => {
                            use std::os::unix::process::ExitStatusExt;
                            let code = status
                                .code()
                                .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
                            c.terminated =
                                Some(terminated_state(&self.dir, c, code, status.signal()));
                            c.child = None;
                            c.ready = false;
                        }
                        _ => alive = true,
                    }
                }
            }
            if !alive {
                return;
            }
            if Instant::now() >= deadline {
                for c in &mut self.ctrs {
                    if let Some(mut child) = c.child.take() {
                        tracing::info!(pod = %self.key, container = %c.spec.name, "SIGKILL after grace period");
                        let _ = child.kill().await;
                        c.terminated = Some(terminated_state(&self.dir, c, 137, Some(9)));
                    }
                }
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Runs one pod until it is deleted (or the kubelet shuts down).
pub async fn pod_worker(
    shared: Arc<Shared>,
    ip: Ipv4Addr,
    mut rx: watch::Receiver<Option<Pod>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let Some(first) = rx.borrow().clone() else {
        return;
    };
    let mut rt = PodRuntime::new(shared.clone(), &first, ip);
    loop {
        let current = rx.borrow_and_update().clone();
        match current {
            None => {
                // The object is gone (force deletion): just stop the processes.
                rt.kill_all(Duration::from_secs(2)).await;
                return;
            }
            Some(pod) if partitioned(&pod) => {
                rt.cut_off(&mut shutdown).await;
                return;
            }
            Some(pod) if pod.metadata.deletion_timestamp.is_some() => {
                let grace = pod
                    .metadata
                    .deletion_grace_period_seconds
                    .or_else(|| {
                        pod.spec
                            .as_ref()
                            .and_then(|s| s.termination_grace_period_seconds)
                    })
                    .unwrap_or(30)
                    .max(0);
                tracing::info!(pod = %rt.key, grace, "pod deleted; stopping containers");
                rt.kill_all(Duration::from_secs(u64::try_from(grace).unwrap_or(0)))
                    .await;
                rt.report(&pod).await;
                if let (Some(ns), Some(name)) = (&pod.metadata.namespace, &pod.metadata.name) {
                    let api: Api<Pod> = Api::namespaced(shared.client.clone(), ns);
                    let dp = DeleteParams::default()
                        .grace_period(0)
                        .preconditions(Preconditions {
                            uid: pod.metadata.uid.clone(),
                            resource_version: None,
                        });
                    match api.delete(name, &dp).await {
                        Ok(_) => tracing::info!(pod = %rt.key, "pod object released"),
                        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                        Err(e) => {
                            tracing::warn!(pod = %rt.key, error = %e, "final delete failed; retrying");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            continue;
                        }
                    }
                }
                return;
            }
            Some(pod) => {
                rt.sync(&pod).await;
                rt.report(&pod).await;
            }
        }
        tokio::select! {
            changed = rx.changed() => {
                if changed.is_err() {
                    rt.kill_all(Duration::from_secs(2)).await;
                    return;
                }
            }
            _ = tokio::time::sleep(TICK) => {}
            _ = shutdown.changed() => {
                rt.kill_all(Duration::from_secs(5)).await;
                return;
            }
        }
    }
}
