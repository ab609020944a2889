//! Operator e2e tests (issue #6): upgrade scenarios of a StreamJob, each checked for
//! exactly-once output in MinIO. One shared environment; run with `--test-threads=1`.
//!
//! Every job is `generator` (bounded, rate-limited so that it runs long enough to be upgraded
//! mid-stream) → keyed tumbling window (count, sum) → file sink (JSON lines) in a bucket. When it
//! has finished, every finished part file is read and each (key, window) aggregate must be there
//! exactly once with the value computed from the generator's definition.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event as CoreEvent, Namespace, Pod};
use kube::api::{DynamicObject, ListParams};
use kube::{Api, ResourceExt};
use streamjob_e2e::fixtures::{self, EnvOptions, TestEnv, wait_deleted};
use streamjob_e2e::kafka::Kafka;
use streamjob_e2e::kubelet::ImageMapping;
use streamjob_e2e::process::Watchdog;
use streamjob_e2e::proxy::FaultProxy;
use streamjob_e2e::scenario::{
    Job, KafkaInput, SECRET, START_MS, UploadMarker, WINDOW_MS, check_exactly_once, condition,
    condition_true, container_pid, deployed_hash, finished_parts, generator_json, generator_ts,
    install_operator, phase, pid_alive, promoted, read_output, sj_api, status, upload_markers,
};
use streamjob_e2e::wait::poll_until;

#[path = "operator/failover.rs"]
mod failover;
#[path = "operator/fairness.rs"]
mod fairness;
#[path = "operator/flink_cluster.rs"]
mod flink_cluster;
#[path = "operator/slow_api.rs"]
mod slow_api;
#[path = "operator/user_images.rs"]
mod user_images;

const TIMEOUT: Duration = Duration::from_secs(90);

async fn env() -> &'static TestEnv {
    fixtures::init_test_tracing();
    match fixtures::shared(|| {
        let mut opts = EnvOptions::new(
            env!("CARGO_BIN_EXE_process-kubelet"),
            env!("CARGO_BIN_EXE_e2e-echo-server"),
        );
        opts.images.push(broken_image());
        opts.images.extend(user_images::template_images());
        opts.images.extend(streamjob_e2e::flink::kubelet_images());
        opts
    })
    .await
    {
        Ok(env) => {
            eprintln!(
                "e2e environment: run dir {}, ready in {:?}",
                env.run_dir.display(),
                env.start_duration
            );
            env
        }
        Err(e) => panic!("e2e environment failed to start: {e}"),
    }
}

/// `streamjob/broken:*`: a "new version" that plans fine (the real `plan` and `dispose`) but
/// exits 1 at start, as a build that crashes at startup would.
fn broken_image() -> ImageMapping {
    let runtime = std::path::Path::new(env!("CARGO_BIN_EXE_process-kubelet"))
        .with_file_name("streamjob-runtime");
    let script =
        std::env::temp_dir().join(format!("streamjob-e2e-broken-{}.sh", std::process::id()));
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncase \"$1\" in plan|dispose) exec '{}' \"$@\";; esac\necho 'broken build: refusing to start' >&2\nexit 1\n",
            runtime.display()
        ),
    )
    .expect("write broken runtime script");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
        .expect("chmod broken runtime script");
    ImageMapping {
        image: "streamjob/broken:*".into(),
        binary: script,
        env: Default::default(),
        aliases: vec![],
    }
}

/// Installs the chart once per test binary (operator watching every namespace); returns its
/// namespace once the operator Deployment is available.
async fn operator(env: &'static TestEnv) -> &'static str {
    static NS: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
    NS.get_or_init(|| async {
        let ns = env
            .restricted_namespace("operator")
            .await
            .expect("namespace");
        let mut set = vec!["logFormat=text".to_string(), "logLevel=info".to_string()];
        // e.g. 16: the fairness test (y) against an operator without a per-namespace limit
        if let Ok(n) = std::env::var("STREAMJOB_E2E_NAMESPACE_CONCURRENCY") {
            set.push(format!("namespaceConcurrency={n}"));
        }
        let set: Vec<&str> = set.iter().map(String::as_str).collect();
        install_operator(env, &ns, &set, TIMEOUT)
            .await
            .expect("operator installed and available");
        ns
    })
    .await
}

/// Restarts of the pod's first container (0 before it has a status).
fn restarts(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .map_or(0, |c| c.restart_count)
}

/// A job in a fresh namespace with its bucket and credentials (operator installed).
async fn new_job(env: &'static TestEnv, name: &str) -> Job {
    operator(env).await;
    let ns = env.restricted_namespace("op").await.expect("namespace");
    let bucket = format!("b-{}", &ns[3..]);
    env.bucket_with_secret(&ns, &bucket, SECRET)
        .await
        .expect("bucket + secret");
    Job::new(name, &ns, &bucket)
}

/// What a test sees of a job while it waits.
struct Ctx {
    env: &'static TestEnv,
    job: Job,
    api: Api<DynamicObject>,
    pods: Api<Pod>,
    /// Every (phase, upgrade step) the poller saw, in order, without repeats.
    seen: Arc<Mutex<Vec<String>>>,
    poller: tokio::task::JoinHandle<()>,
    t0: Instant,
}

impl Drop for Ctx {
    fn drop(&mut self) {
        self.poller.abort();
    }
}

impl Ctx {
    async fn new(env: &'static TestEnv, job: Job) -> Self {
        let client = env.client().await.expect("client");
        let api = sj_api(client.clone(), &job.ns);
        let pods = Api::namespaced(client, &job.ns);
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let poller = {
            let api = api.clone();
            let seen = seen.clone();
            let name = job.name.clone();
            tokio::spawn(async move {
                loop {
                    if let Ok(Some(o)) = api.get_opt(&name).await {
                        // phase, upgrade step and what Argo CD would show for this very status
                        let s = format!(
                            "{}{} [{}]",
                            phase(&o),
                            status(&o)["upgrade"]["step"]
                                .as_str()
                                .map(|s| format!(" {s}"))
                                .unwrap_or_default(),
                            argocd_health(&o).0
                        );
                        let mut v = seen.lock().unwrap();
                        if v.last() != Some(&s) {
                            v.push(s);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(150)).await;
                }
            })
        };
        Self {
            env,
            job,
            api,
            pods,
            seen,
            poller,
            t0: Instant::now(),
        }
    }

    fn log(&self, what: &str) {
        eprintln!(
            "[{:>6.1}s] {}: {what}",
            self.t0.elapsed().as_secs_f64(),
            self.job.name
        );
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }

    async fn get(&self) -> DynamicObject {
        self.api.get(&self.job.name).await.expect("get StreamJob")
    }

    /// Waits until `pred` holds for the StreamJob; on timeout dumps the job and its pods.
    async fn wait(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&DynamicObject) -> bool,
    ) -> DynamicObject {
        let res = poll_until(what, timeout, Duration::from_millis(200), || async {
            Ok(self.api.get_opt(&self.job.name).await?.filter(|o| pred(o)))
        })
        .await;
        match res {
            Ok(o) => {
                self.log(what);
                o
            }
            Err(e) => {
                let dump = self
                    .env
                    .kubectl(&["get", "sj,pods", "-n", &self.job.ns, "-o", "yaml"], None)
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_default();
                panic!(
                    "{e}\nseen: {:?}\n{dump}\npod logs under {}",
                    self.seen(),
                    self.env.kubelet_config.run_dir.display()
                );
            }
        }
    }

    fn apply(&self) {
        self.job.apply(self.env).expect("kubectl apply StreamJob");
    }

    async fn running_with_checkpoint(&self) -> DynamicObject {
        self.wait(
            "Running with a completed checkpoint",
            Duration::from_secs(120),
            |o| phase(o) == "Running" && status(o)["lastCheckpoint"]["id"].is_u64(),
        )
        .await
    }

    async fn finished(&self) -> DynamicObject {
        self.wait("phase Finished", Duration::from_secs(180), |o| {
            phase(o) == "Finished"
        })
        .await
    }

    /// Runtime pods of the job (not plan or dispose pods), not terminating.
    async fn runtime_pods(&self) -> Vec<Pod> {
        self.pods_with_role("runtime").await
    }

    /// Pods of the job with role label `role`, not terminating.
    async fn pods_with_role(&self, role: &str) -> Vec<Pod> {
        let lp = ListParams::default().labels(&format!(
            "streamjob.io/job={},streamjob.io/role={role}",
            self.job.name
        ));
        self.pods
            .list(&lp)
            .await
            .expect("list pods")
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect()
    }

    /// Reads every finished part file and checks the aggregates against the generator.
    async fn assert_exactly_once(&self) {
        let got = read_output(self.env, &self.job.bucket, &self.job.name)
            .await
            .expect("read output");
        let want = self.job.expected();
        if let Err(e) = check_exactly_once(&got, &want) {
            panic!("{e}");
        }
        self.log(&format!("exactly-once: {} aggregates", want.len()));
    }
}

/// The chart's Argo CD health check (`resource.customizations.health`).
const ARGOCD_HEALTH: &str = include_str!("../../charts/streamjob-operator/argocd/health.lua");

/// (health status, message) Argo CD derives from the StreamJob `o` as the API server holds it,
/// computed by a Lua 5.4 interpreter as Argo CD does.
fn argocd_health(o: &DynamicObject) -> (String, String) {
    use mlua::LuaSerdeExt;
    let lua = mlua::Lua::new();
    let obj = serde_json::json!({
        "metadata": {"generation": o.metadata.generation},
        "status": o.data.get("status"),
    });
    let options = mlua::SerializeOptions::new()
        .serialize_none_to_null(false)
        .serialize_unit_to_null(false);
    lua.globals()
        .set("obj", lua.to_value_with(&obj, options).unwrap())
        .unwrap();
    let hs: mlua::Table = lua.load(ARGOCD_HEALTH).eval().unwrap();
    (hs.get("status").unwrap(), hs.get("message").unwrap())
}

/// Asserts the poller saw a status whose phase/step starts with `state` and that Argo CD calls
/// `health`.
fn assert_health_seen(ctx: &Ctx, state: &str, health: &str) {
    let seen = ctx.seen();
    assert!(
        seen.iter()
            .any(|s| s.starts_with(state) && s.ends_with(&format!("[{health}]"))),
        "no {state:?} status that Argo CD calls {health}: {seen:?}"
    );
}

/// The process kubelet's folder of `pod` (logs, exit codes).
fn pod_dir(env: &TestEnv, pod: &Pod) -> std::path::PathBuf {
    env.kubelet_config.run_dir.join(format!(
        "{}_{}_{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.uid.as_deref().unwrap_or_default()
    ))
}

/// What the runtime container of `pod` wrote to stderr so far.
fn runtime_log(env: &TestEnv, pod: &Pod) -> String {
    std::fs::read_to_string(pod_dir(env, pod).join("runtime.stderr.log")).unwrap_or_default()
}

/// The id of the newest checkpoint the runtime pod's log reports completed (0: none).
fn latest_checkpoint_in_log(env: &TestEnv, pod: &Pod) -> u64 {
    runtime_log(env, pod)
        .lines()
        .filter_map(|l| {
            let rest = &l[l.find("checkpoint ")? + "checkpoint ".len()..];
            let (n, tail) = rest.split_once(' ')?;
            tail.starts_with("completed").then(|| n.parse().ok())?
        })
        .max()
        .unwrap_or(0)
}

/// Fencing: the version running in `after` was started with a larger epoch than the one in
/// `before` (status.epoch records the newest run's).
fn assert_newer_epoch(before: &DynamicObject, after: &DynamicObject) {
    let epoch = |o: &DynamicObject| status(o)["epoch"].as_u64().unwrap_or(0);
    assert!(epoch(before) > 0, "no status.epoch: {}", status(before));
    assert!(
        epoch(after) > epoch(before),
        "status.epoch did not grow: {} → {}",
        epoch(before),
        epoch(after)
    );
}

/// Shared tail of the upgrade scenarios: the job ran on a savepoint that status records.
fn assert_started_from_recorded_savepoint(o: &DynamicObject) {
    let st = status(o);
    let path = st["deployment"]["path"]
        .as_str()
        .expect("deployment.path: the savepoint the new version started from");
    let history: Vec<&str> = st["savepointHistory"]
        .as_array()
        .map(|a| a.iter().filter_map(|s| s["path"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        history.contains(&path),
        "savepoint {path} is not in status.savepointHistory {history:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------

/// Applies the changed spec of `ctx.job` to a running job and waits until it is promoted through
/// an upgrade; checks the savepoint is recorded and the phase went through Upgrading.
async fn upgrade(ctx: &Ctx) -> DynamicObject {
    let before = ctx.running_with_checkpoint().await;
    let old = deployed_hash(&before);
    ctx.apply();
    let o = ctx
        .wait("promoted on the new spec", Duration::from_secs(120), |o| {
            promoted(o, &old)
        })
        .await;
    assert_started_from_recorded_savepoint(&o);
    assert_newer_epoch(&before, &o);
    let seen = ctx.seen();
    assert!(
        seen.iter().any(|s| s.starts_with("Upgrading")),
        "phase Upgrading never seen: {seen:?}"
    );
    o
}

/// a. `spec.image` v1 → v2 in place: Upgrading, promoted on the new image from a savepoint that
/// status records, output exactly-once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_image_bump_in_place() {
    let env = env().await;
    let mut ctx = Ctx::new(env, new_job(env, "bump").await).await;
    ctx.apply();
    ctx.job.image = "streamjob/runtime:v2".into();
    let o = upgrade(&ctx).await;
    assert_eq!(status(&o)["deployment"]["image"], "streamjob/runtime:v2");
    let o = ctx.finished().await;
    assert_eq!(status(&o)["deployment"]["image"], "streamjob/runtime:v2");
    // Argo CD on the real statuses: healthy running, progressing while upgrading, healthy done
    assert_health_seen(&ctx, "Running", "Healthy");
    assert_health_seen(&ctx, "Upgrading", "Progressing");
    assert_eq!(argocd_health(&o).0, "Healthy", "Argo CD on a finished job");
    ctx.assert_exactly_once().await;
    ctx.log(&format!("phases: {:?}", ctx.seen()));
}

/// b. parallelism 1 → 2 by `kubectl scale sj/<name> --replicas=2` (the scale subresource on
/// spec.parallelism): a rescale through a savepoint; the scale subresource reports the deployed
/// parallelism and the pods' selector; the runtime's metrics answer a plain GET without the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b_kubectl_scale_rescales() {
    let env = env().await;
    let mut ctx = Ctx::new(env, new_job(env, "rescale").await).await;
    ctx.apply();
    let before = ctx.running_with_checkpoint().await;
    let old = deployed_hash(&before);

    // metrics on the runtime pod's metrics port, no token (what a PodMonitor scrapes)
    let pod = ctx.coordinator(&before).await;
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .expect("pod IP");
    let metrics = reqwest::get(format!("http://{ip}:9249/metrics"))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .unwrap();
    let series = format!(
        "streamjob_checkpoints_completed_total{{streamjob=\"{}\"}} ",
        ctx.job.name
    );
    let completed: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .unwrap_or_else(|| panic!("no {series} in:\n{metrics}"))
        .parse()
        .unwrap();
    assert!(
        completed >= 1,
        "the status saw a checkpoint, the metrics {completed}"
    );

    // the job's NetworkPolicy (chart default): its pods, ingress only on the job's ports
    let policy: serde_json::Value = serde_json::from_str(
        &env.kubectl_ok(
            &[
                "get",
                "networkpolicy",
                &format!("{}-streamjob", ctx.job.name),
                "-n",
                &ctx.job.ns,
                "-o",
                "json",
            ],
            None,
        )
        .expect("the job's NetworkPolicy"),
    )
    .unwrap();
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"]["streamjob.io/job"],
        ctx.job.name.as_str(),
        "{policy}"
    );
    let ports: Vec<u64> = policy["spec"]["ingress"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            r["ports"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["port"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(ports, [8081, 6123, 6121, 9249], "{policy}");

    let target = format!("sj/{}", ctx.job.name);
    env.kubectl_ok(&["scale", &target, "-n", &ctx.job.ns, "--replicas=2"], None)
        .expect("kubectl scale");
    ctx.job.parallelism = 2; // what the cluster now holds
    let o = ctx
        .wait("promoted on parallelism 2", Duration::from_secs(120), |o| {
            promoted(o, &old)
        })
        .await;
    assert_started_from_recorded_savepoint(&o);
    assert_newer_epoch(&before, &o);
    assert_eq!(status(&o)["deployment"]["parallelism"], 2);
    let scale: serde_json::Value = serde_json::from_str(
        &env.kubectl_ok(
            &[
                "get",
                &target,
                "-n",
                &ctx.job.ns,
                "--subresource=scale",
                "-o",
                "json",
            ],
            None,
        )
        .expect("get scale"),
    )
    .unwrap();
    assert_eq!(scale["spec"]["replicas"], 2, "{scale}");
    assert_eq!(scale["status"]["replicas"], 2, "{scale}");
    let selector = scale["status"]["selector"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let pods = env
        .kubectl_ok(
            &[
                "get",
                "pods",
                "-n",
                &ctx.job.ns,
                "-l",
                &selector,
                "-o",
                "name",
            ],
            None,
        )
        .expect("pods by the scale selector");
    assert!(
        pods.lines().any(|l| l.ends_with(
            &status(&o)["deployment"]["workload"]
                .as_str()
                .unwrap()
                .to_string()
        )),
        "the scale selector {selector:?} does not select the runtime pod: {pods}"
    );
    ctx.finished().await;
    ctx.assert_exactly_once().await;
    ctx.log(&format!("phases: {:?}", ctx.seen()));
}

/// c. a new stateless operator (filter `pass`, passes everything) in the pipeline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_pipeline_gains_a_stateless_operator() {
    let env = env().await;
    let mut ctx = Ctx::new(env, new_job(env, "addop").await).await;
    ctx.apply();
    ctx.job.filter = true;
    upgrade(&ctx).await;
    ctx.finished().await;
    ctx.assert_exactly_once().await;
    ctx.log(&format!("phases: {:?}", ctx.seen()));
}

/// d. removing the stateful window uid without allowNonRestoredState is refused: UpgradeBlocked
/// naming the uid, the old pod untouched and still checkpointing; reverting the spec clears it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d_incompatible_change_is_blocked() {
    let env = env().await;
    let mut ctx = Ctx::new(env, new_job(env, "blocked").await).await;
    ctx.apply();
    let before = ctx.running_with_checkpoint().await;
    let pods = ctx.runtime_pods().await;
    assert_eq!(pods.len(), 1, "one runtime pod");
    let uid = pods[0].metadata.uid.clone();
    let pid = container_pid(&pods[0]).expect("runtime pid");
    ctx.job.window = false;
    ctx.apply();
    let o = ctx
        .wait("UpgradeBlocked", Duration::from_secs(90), |o| {
            condition_true(o, "UpgradeBlocked")
        })
        .await;
    let msg = condition(&o, "UpgradeBlocked").unwrap()["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(msg.contains("per-key"), "message names the uid: {msg:?}");
    assert_eq!(
        argocd_health(&o).0,
        "Degraded",
        "Argo CD on a blocked upgrade"
    );
    assert_eq!(
        deployed_hash(&o),
        deployed_hash(&before),
        "old version deployed"
    );
    // The operator writes checkpoints into status only every so often: read the runtime's log.
    let ck = latest_checkpoint_in_log(env, &pods[0]);
    poll_until(
        "the blocked job keeps checkpointing",
        TIMEOUT,
        Duration::from_millis(200),
        || async { Ok((latest_checkpoint_in_log(env, &pods[0]) >= ck + 2).then_some(())) },
    )
    .await
    .expect("checkpoints continue");
    let pods = ctx.runtime_pods().await;
    assert_eq!(pods.len(), 1, "still one runtime pod");
    assert_eq!(pods[0].metadata.uid, uid, "same pod");
    assert_eq!(container_pid(&pods[0]), Some(pid), "same process");
    assert!(pid_alive(pid), "old runtime process {pid} runs");
    ctx.log(&format!("blocked: {msg}"));
    // Reverted: the block is lifted and the old job runs to the end.
    ctx.job.window = true;
    ctx.apply();
    ctx.wait("block lifted", TIMEOUT, |o| {
        !condition_true(o, "UpgradeBlocked") && status(o)["upgrade"].is_null()
    })
    .await;
    let o = ctx.finished().await;
    assert_eq!(
        deployed_hash(&o),
        deployed_hash(&before),
        "never redeployed"
    );
    ctx.assert_exactly_once().await;
    ctx.log(&format!("phases: {:?}", ctx.seen()));
}

/// e. the new version crashes at start: rolled back to the old spec from the same savepoint,
/// `RolledBack`, output exactly-once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e_crashing_version_is_rolled_back() {
    let env = env().await;
    let mut ctx = Ctx::new(env, new_job(env, "rollback").await).await;
    ctx.apply();
    let before = ctx.running_with_checkpoint().await;
    let old = deployed_hash(&before);
    ctx.job.image = "streamjob/broken:v2".into();
    ctx.apply();
    let o = ctx
        .wait(
            "RolledBack, running the old spec",
            Duration::from_secs(150),
            |o| {
                condition_true(o, "RolledBack")
                    && phase(o) == "Running"
                    && deployed_hash(o) == old
                    && status(o)["deployment"]["startedFrom"] == "savepoint"
            },
        )
        .await;
    assert_started_from_recorded_savepoint(&o);
    assert_newer_epoch(&before, &o);
    assert_eq!(status(&o)["deployment"]["image"], "streamjob/runtime:v1");
    let seen = ctx.seen();
    assert!(
        seen.iter().any(|s| s.contains("Rollback/")),
        "no Rollback step seen: {seen:?}"
    );
    // Argo CD: progressing while it upgrades and rolls back, degraded once rolled back
    assert_health_seen(&ctx, "Upgrading", "Progressing");
    assert_eq!(argocd_health(&o).0, "Degraded", "Argo CD once rolled back");
    ctx.finished().await;
    ctx.assert_exactly_once().await;
    ctx.log(&format!("phases: {:?}", ctx.seen()));
}

/// How the new version of [`rolled_back_after_output`] fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LateFailure {
    /// A filter divides by zero on the first record past a point ten seconds of input after
    /// what the old version had committed (fixed when the new spec is applied, so the new
    /// version always reaches it with output behind it): it crashes mid-stream and restarts on
    /// the same record until the operator rolls it back.
    Crash,
    /// It runs and writes output but never completes a checkpoint: its store is behind a proxy
    /// that delays every chunk by 200 ms, its `checkpoints.timeout` is 100 ms, so every
    /// checkpoint expires and `readinessTimeout` (20 s) rolls it back.
    NoCheckpoint,
}

/// Rollback after output (issue #19): a new version restores the savepoint, processes records,
/// uploads parts of in-progress and pending files, and then fails before its first checkpoint
/// ([`LateFailure`]). The old spec restores the same savepoint and finishes. Nothing the failed
/// version wrote may become visible and every upload it started must be aborted: every
/// aggregate once, no upload left open.
async fn rolled_back_after_output(mut ctx: Ctx, failure: LateFailure) {
    let env = ctx.env;
    let strategy = ctx.job.strategy;
    ctx.job.count = 80_000;
    ctx.job.rate = 2000;
    ctx.job.keys = 20;
    // small parts: the new version rolls (and uploads) several before it reaches the poison
    ctx.job.rolling = "{default: {maxPartSize: 1KiB}}";
    ctx.apply();
    let before = ctx.running_with_checkpoint().await;
    let old = deployed_hash(&before);
    let (bucket, name) = (ctx.job.bucket.clone(), ctx.job.name.clone());

    // The old version's sink instances (one per sink subtask, stable while its run lasts), so
    // that any other instance seen while the new version restores is the new version's.
    let subtasks = ctx.job.parallelism as usize;
    let old_instances = poll_until(
        "an upload of every sink subtask of the old version",
        TIMEOUT,
        Duration::from_millis(100),
        || async {
            let seen: std::collections::BTreeSet<String> = upload_markers(env, &bucket, &name)
                .await?
                .into_iter()
                .map(|m| m.instance)
                .collect();
            Ok((seen.len() >= subtasks).then_some(seen))
        },
    )
    .await
    .expect("the old version uploads parts");
    let committed_to = read_output(env, &bucket, &name)
        .await
        .expect("read output")
        .keys()
        .map(|(_, start)| start + WINDOW_MS)
        .max()
        .expect("the old version committed windows");
    // ten seconds of input (1 ms of event time per record) past what is committed: far beyond
    // where the savepoint the upgrade is about to take can be
    let poison = u64::try_from(committed_to - START_MS).unwrap() + 10 * ctx.job.rate;
    ctx.log(&format!(
        "committed up to record {}",
        committed_to - START_MS
    ));
    ctx.job.image = "streamjob/runtime:v2".into();
    // kept until the end: the failed version's pods talk to it
    let mut slow_store = None;
    match failure {
        LateFailure::Crash => {
            ctx.log(&format!("poison at record {}", poison + 1));
            ctx.job.filter = true;
            ctx.job.filter_sql = format!(
                "CASE WHEN id > {poison} THEN 10 / (CAST(id AS BIGINT) - CAST(id AS BIGINT)) ELSE 1 END > 0"
            );
            // no checkpoint of the new version before it reaches the poison
            ctx.job.checkpoint_interval = "30s";
            ctx.job.readiness_timeout = "40s";
        }
        LateFailure::NoCheckpoint => {
            let upstream = env
                .s3()
                .url
                .trim_start_matches("http://")
                .parse()
                .expect("MinIO address");
            let proxy = FaultProxy::start(upstream).expect("proxy");
            proxy.set_delay(Duration::from_millis(200));
            ctx.job.s3_endpoint = Some(proxy.url());
            ctx.job.checkpoint_timeout = Some("100ms");
            ctx.job.readiness_timeout = "20s";
            slow_store = Some(proxy);
        }
    }
    ctx.log(&format!("new version fails by {failure:?}"));
    ctx.apply();

    let restoring = format!("{strategy}/Restoring");
    let mut new_version: Vec<UploadMarker> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(150);
    let rolled_back = loop {
        // list first, then read status: uploads listed while status still says the new
        // version is restoring were started by it (the old spec's new run starts only after
        // status moved on to the rollback)
        let markers = upload_markers(env, &bucket, &name)
            .await
            .expect("list markers");
        let o = ctx.get().await;
        if status(&o)["upgrade"]["step"] == restoring.as_str() {
            for m in markers {
                if !old_instances.contains(&m.instance) && !new_version.contains(&m) {
                    new_version.push(m);
                }
            }
        }
        if condition_true(&o, "RolledBack")
            && phase(&o) == "Running"
            && deployed_hash(&o) == old
            && status(&o)["deployment"]["startedFrom"] == "savepoint"
        {
            break o;
        }
        assert!(
            Instant::now() < deadline,
            "not rolled back after 150 s: {}\nseen: {:?}",
            status(&o),
            ctx.seen()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    ctx.log(&format!(
        "rolled back: {}; the failed version had {} uploads in flight",
        condition(&rolled_back, "RolledBack").unwrap()["message"],
        new_version.len()
    ));
    if failure == LateFailure::NoCheckpoint {
        let why = condition(&rolled_back, "RolledBack").unwrap()["message"].to_string();
        assert!(
            why.contains("no checkpoint completed within readinessTimeout"),
            "rolled back for another reason than its missing checkpoint: {why}"
        );
    }
    assert_started_from_recorded_savepoint(&rolled_back);
    assert_eq!(
        status(&rolled_back)["deployment"]["image"],
        "streamjob/runtime:v1"
    );
    assert!(
        !new_version.is_empty(),
        "the new version uploaded no part before it failed: the scenario did not test rollback after output"
    );
    ctx.finished().await;
    ctx.assert_exactly_once().await;
    // its uploads were aborted and its staging objects deleted (never committed: exactly-once
    // above), and their markers dropped
    for m in &new_version {
        let left = match &m.upload_id {
            Some(id) => env.s3().upload_open(&bucket, &m.key, id).await.unwrap(),
            None => env.s3().read(&bucket, &m.key).await.is_ok(),
        };
        assert!(
            !left,
            "{} by the failed version ({:?}) is still there",
            m.key, m.upload_id
        );
    }
    let left = upload_markers(env, &bucket, &name).await.unwrap();
    assert!(left.is_empty(), "upload markers left: {left:?}");
    drop(slow_store);
    ctx.log(&format!("phases: {:?}", ctx.seen()));
}

/// o. Rollback after output, in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn o_version_failing_after_output_is_rolled_back_in_place() {
    let env = env().await;
    let ctx = Ctx::new(env, new_job(env, "fail-late").await).await;
    rolled_back_after_output(ctx, LateFailure::Crash).await;
}

/// p. Rollback after output with `strategy: Shadow` and `spec.workers: 2` (the failing version
/// runs on its own two workers; the warm old coordinator restores at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p_version_failing_after_output_is_rolled_back_from_shadow_with_workers() {
    let env = env().await;
    let mut job = new_job(env, "fail-late-shadow").await;
    job.strategy = "Shadow";
    job.parallelism = 2;
    job.workers = 2;
    let ctx = Ctx::new(env, job).await;
    rolled_back_after_output(ctx, LateFailure::Crash).await;
}

/// r. Rollback after output of a version that runs but never completes a checkpoint, with
/// `strategy: Shadow` (the warm old pod restores the savepoint at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full suite: cargo xtask e2e --full"]
async fn r_version_never_checkpointing_is_rolled_back_from_shadow() {
    let env = env().await;
    let mut job = new_job(env, "no-checkpoint").await;
    job.strategy = "Shadow";
    job.parallelism = 2;
    let ctx = Ctx::new(env, job).await;
    rolled_back_after_output(ctx, LateFailure::NoCheckpoint).await;
}

/// q. A zombie of the old version cannot commit (issue #19, DESIGN §8). The node of the runtime
/// pod is cut off (the process kubelet stops acting on the pod, as behind a network partition)
/// and its process is frozen with SIGSTOP. A `last-state` image bump cannot take a savepoint,
/// deletes the old pod — which stays Terminating, its node does not answer — and, once the pod
/// has stayed so `readinessTimeout` past its grace period, force-deletes it itself (issue #38:
/// no human) and starts the new version from the latest checkpoint with a newer epoch.
/// When the new version has committed checkpoints of its own, the old process is resumed: it
/// must stop at its next commit (exit code 4, superseded) without committing anything, and the
/// output stays exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q_zombie_of_an_old_version_cannot_commit() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let env = env().await;
    let mut job = new_job(env, "zombie").await;
    job.mode = "last-state";
    // how long a pod may stay Terminating past its grace period (30 s) before it is force-deleted
    job.readiness_timeout = "20s";
    job.count = 60_000;
    job.keys = 10;
    let mut ctx = Ctx::new(env, job).await;
    ctx.apply();
    let before = ctx.running_with_checkpoint().await;
    let old_hash = deployed_hash(&before);
    let old = ctx.runtime_pods().await.pop().expect("the runtime pod");
    let old_name = old.name_any();
    let pid = container_pid(&old).expect("the runtime process");
    let dir = pod_dir(env, &old);
    env.kubectl_ok(
        &[
            "annotate",
            "pod",
            "-n",
            &ctx.job.ns,
            &old_name,
            &format!("{}=true", streamjob_e2e::kubelet::pod::PARTITIONED),
        ],
        None,
    )
    .expect("annotate the pod");
    poll_until(
        "the kubelet lets go of the pod",
        TIMEOUT,
        Duration::from_millis(100),
        || async { Ok(dir.join("partitioned").exists().then_some(())) },
    )
    .await
    .unwrap();
    let zombie = Pid::from_raw(i32::try_from(pid).unwrap());
    kill(zombie, Signal::SIGSTOP).expect("SIGSTOP");
    ctx.log(&format!("{old_name} (pid {pid}) cut off and frozen"));

    ctx.job.image = "streamjob/runtime:v2".into();
    ctx.apply();
    // the old pod is deleted but its node does not answer: an admin force-deletes it
    let pods = ctx.pods.clone();
    poll_until(
        "the old pod deleted and stuck terminating",
        TIMEOUT,
        Duration::from_millis(200),
        || async {
            let p = pods.get_opt(&old_name).await?;
            Ok(p.is_some_and(|p| p.metadata.deletion_timestamp.is_some())
                .then_some(()))
        },
    )
    .await
    .unwrap();
    assert!(
        pid_alive(pid),
        "the cut-off process was stopped by its deletion"
    );
    let stuck = ctx.get().await;
    assert_eq!(
        status(&stuck)["upgrade"]["step"],
        "InPlace/Stopped",
        "the new version must wait for the old pod: {}",
        status(&stuck)
    );
    // readinessTimeout after its deletion was due, the operator force-deletes it (no human):
    // the frozen process is fenced by the new run's epoch
    let deleted_at = Instant::now();
    poll_until(
        "the operator force-deletes the stuck pod",
        Duration::from_secs(30 + 20 + 60),
        Duration::from_millis(200),
        || async { Ok(pods.get_opt(&old_name).await?.is_none().then_some(())) },
    )
    .await
    .unwrap();
    let events: Api<CoreEvent> = Api::namespaced(env.client().await.unwrap(), &ctx.job.ns);
    let forced = events
        .list(&ListParams::default().fields("reason=PodsForceDeleted"))
        .await
        .unwrap();
    assert!(
        forced
            .items
            .iter()
            .any(|e| e.message.as_deref().is_some_and(|m| m.contains(&old_name))),
        "no PodsForceDeleted event naming {old_name}: {:?}",
        forced.items
    );
    ctx.log(&format!(
        "old pod force-deleted by the operator {:?} after it was seen stuck; its process still runs (frozen)",
        deleted_at.elapsed()
    ));

    // the new version runs from the latest checkpoint and commits checkpoints of its own
    let after = ctx
        .wait("the new version committed", TIMEOUT, |o| {
            phase(o) == "Running"
                && status(o)["upgrade"].is_null()
                && deployed_hash(o) != old_hash
                && status(o)["lastStableSpecHash"] == status(o)["deployment"]["specHash"]
        })
        .await;
    assert_newer_epoch(&before, &after);
    assert_eq!(status(&after)["deployment"]["startedFrom"], "checkpoint");
    let new = ctx.runtime_pods().await.pop().expect("the new runtime pod");
    let committed = latest_checkpoint_in_log(env, &new);
    assert!(committed > 0, "the new version completed no checkpoint");
    assert!(pid_alive(pid), "the zombie is gone before it was resumed");

    // resumed: it must notice the newer epoch at its next commit and stop without committing
    kill(zombie, Signal::SIGCONT).expect("SIGCONT");
    let code = poll_until(
        "the zombie stops",
        TIMEOUT,
        Duration::from_millis(200),
        || async { Ok(std::fs::read_to_string(dir.join("runtime.exit")).ok()) },
    )
    .await
    .unwrap();
    let log = std::fs::read_to_string(dir.join("runtime.stderr.log")).unwrap_or_default();
    let last = log
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    ctx.log(&format!("zombie exited with {code}: {last}"));
    assert_eq!(
        code.trim(),
        "4",
        "the zombie must stop as superseded: {last}"
    );
    assert!(
        log.contains("superseded"),
        "the zombie's log does not say it was superseded:\n{last}"
    );
    ctx.finished().await;
    ctx.assert_exactly_once().await;
    ctx.log(&format!("phases: {:?}", ctx.seen()));
}

/// f. suspend (stop with a savepoint, no pods) and resume from that savepoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f_suspend_and_resume() {
    let env = env().await;
    let mut ctx = Ctx::new(env, new_job(env, "suspend").await).await;
    ctx.apply();
    ctx.running_with_checkpoint().await;
    ctx.job.state = "suspended";
    ctx.apply();
    ctx.wait("Suspended", TIMEOUT, |o| phase(o) == "Suspended")
        .await;
    poll_until(
        "no runtime pods",
        TIMEOUT,
        Duration::from_millis(200),
        || async { Ok(ctx.runtime_pods().await.is_empty().then_some(())) },
    )
    .await
    .expect("runtime pods gone");
    let o = ctx.get().await;
    let sp = status(&o)["lastSavepoint"]["path"]
        .as_str()
        .expect("suspend savepoint recorded")
        .to_string();
    ctx.job.state = "running";
    ctx.apply();
    let o = ctx
        .wait("resumed", TIMEOUT, |o| {
            phase(o) == "Running" && status(o)["upgrade"].is_null()
        })
        .await;
    assert_eq!(
        status(&o)["deployment"]["path"],
        sp.as_str(),
        "resumed from it"
    );
    ctx.finished().await;
    ctx.assert_exactly_once().await;
    ctx.log(&format!("phases: {:?}", ctx.seen()));
}

/// g. a new `triggerNonce` takes a savepoint without stopping the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g_trigger_nonce_takes_a_savepoint() {
    let env = env().await;
    let mut ctx = Ctx::new(env, new_job(env, "nonce").await).await;
    ctx.apply();
    ctx.running_with_checkpoint().await;
    let pods = ctx.runtime_pods().await;
    let uid = pods[0].metadata.uid.clone();
    ctx.job.trigger_nonce = Some(1);
    ctx.apply();
    let o = ctx
        .wait("savepoint for nonce 1", TIMEOUT, |o| {
            status(o)["lastHandledNonce"] == 1
                && status(o)["pendingSavepoint"].is_null()
                && status(o)["lastSavepoint"]["path"].is_string()
        })
        .await;
    let sp = status(&o)["lastSavepoint"]["path"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(phase(&o), "Running");
    let pods = ctx.runtime_pods().await;
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0].metadata.uid, uid, "the job was not restarted");
    let prefix = sp
        .strip_prefix(&format!("s3://{}/", ctx.job.bucket))
        .expect("savepoint in the job's bucket");
    let objs = env.s3().list(&ctx.job.bucket, prefix).await.expect("list");
    assert!(!objs.is_empty(), "savepoint {sp} has objects");
    ctx.finished().await;
    ctx.assert_exactly_once().await;
}

/// h. deleting a job disposes its savepoints with `disposeOnDelete`, keeps them without.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_delete_with_and_without_dispose() {
    let env = env().await;
    for dispose in [true, false] {
        let mut job = new_job(env, if dispose { "dispose" } else { "keep" }).await;
        job.dispose_on_delete = dispose;
        job.count = 1_000_000;
        let mut ctx = Ctx::new(env, job).await;
        ctx.apply();
        ctx.running_with_checkpoint().await;
        ctx.job.trigger_nonce = Some(1);
        ctx.apply();
        ctx.wait("savepoint taken", TIMEOUT, |o| {
            status(o)["lastHandledNonce"] == 1 && status(o)["lastSavepoint"]["path"].is_string()
        })
        .await;
        let prefix = format!("savepoints/{}", ctx.job.name);
        let s3 = env.s3();
        assert!(!s3.list(&ctx.job.bucket, &prefix).await.unwrap().is_empty());
        env.kubectl_ok(
            &[
                "delete",
                "sj",
                &ctx.job.name,
                "-n",
                &ctx.job.ns,
                "--wait=false",
            ],
            None,
        )
        .expect("delete");
        wait_deleted(&ctx.api, &ctx.job.name, TIMEOUT)
            .await
            .expect("StreamJob gone");
        poll_until(
            "runtime pods gone",
            TIMEOUT,
            Duration::from_millis(200),
            || async { Ok(ctx.runtime_pods().await.is_empty().then_some(())) },
        )
        .await
        .expect("pods gone");
        let left = s3.list(&ctx.job.bucket, &prefix).await.unwrap();
        if dispose {
            assert!(
                left.is_empty(),
                "savepoints disposed, left: {:?}",
                left.iter().map(|o| &o.key).collect::<Vec<_>>()
            );
        } else {
            assert!(!left.is_empty(), "savepoints kept");
        }
        ctx.log(&format!("deleted; {} savepoint objects left", left.len()));
    }
}

/// s. deleting a job whose savepoints cannot be disposed completes in bounded time, with a Warning
/// Event naming what was left: (1) the disposal pod cannot pull its image, (2) the namespace is
/// being deleted (nothing can be created in it; the Event goes to the operator's pod).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s_delete_lets_go_when_disposal_cannot_run() {
    let env = env().await;
    // The operator's grace for a disposal pod that cannot start (operator/src/disposal.rs), plus
    // room for the kubelet, the watch and the requeue.
    let bound = Duration::from_secs(60 + 60);

    // 1. The disposal pod's image cannot be pulled.
    let mut job = new_job(env, "nopull").await;
    job.dispose_on_delete = true;
    job.count = 1_000_000;
    let mut ctx = Ctx::new(env, job).await;
    ctx.apply();
    ctx.running_with_checkpoint().await;
    ctx.job.state = "suspended";
    ctx.apply();
    let o = ctx
        .wait("suspended with a savepoint", TIMEOUT, |o| {
            phase(o) == "Suspended" && status(o)["lastSavepoint"]["path"].is_string()
        })
        .await;
    let sp = status(&o)["lastSavepoint"]["path"]
        .as_str()
        .expect("savepoint")
        .to_string();
    // A suspended job does not move on a spec change: only the disposal pod uses this image.
    ctx.job.image = "streamjob/not-pullable:v0".into();
    ctx.apply();
    let t = Instant::now();
    env.kubectl_ok(
        &[
            "delete",
            "sj",
            &ctx.job.name,
            "-n",
            &ctx.job.ns,
            "--wait=false",
        ],
        None,
    )
    .expect("delete");
    wait_deleted(&ctx.api, &ctx.job.name, bound)
        .await
        .expect("StreamJob gone although its disposal pod cannot start");
    let took = t.elapsed();
    let note = left_behind_event(env, &ctx.job.ns, &ctx.job.name).await;
    assert!(note.contains("ErrImagePull"), "{note}");
    assert!(note.contains(&sp), "names the savepoint {sp}: {note}");
    let prefix = format!("savepoints/{}", ctx.job.name);
    let left = env.s3().list(&ctx.job.bucket, &prefix).await.expect("list");
    assert!(
        !left.is_empty(),
        "the savepoint was left, as the Event says"
    );
    ctx.log(&format!("deleted after {took:?} without disposal: {note}"));

    // 2. The job's namespace is deleted.
    let mut job = new_job(env, "nsgone").await;
    job.dispose_on_delete = true;
    job.count = 1_000_000;
    let mut ctx = Ctx::new(env, job).await;
    ctx.apply();
    ctx.running_with_checkpoint().await;
    ctx.job.trigger_nonce = Some(1);
    ctx.apply();
    let o = ctx
        .wait("savepoint taken", TIMEOUT, |o| {
            status(o)["lastHandledNonce"] == 1 && status(o)["lastSavepoint"]["path"].is_string()
        })
        .await;
    let sp = status(&o)["lastSavepoint"]["path"]
        .as_str()
        .expect("savepoint")
        .to_string();
    let t = Instant::now();
    env.kubectl_ok(&["delete", "namespace", &ctx.job.ns, "--wait=false"], None)
        .expect("delete namespace");
    let namespaces: Api<Namespace> = Api::all(env.client().await.expect("client"));
    wait_deleted(&namespaces, &ctx.job.ns, bound)
        .await
        .expect("namespace gone although the StreamJob in it has a finalizer");
    let took = t.elapsed();
    let home = operator(env).await;
    let note = left_behind_event(env, home, &format!("{}/{}", ctx.job.ns, ctx.job.name)).await;
    assert!(note.contains("namespace is being deleted"), "{note}");
    assert!(note.contains(&sp), "names the savepoint {sp}: {note}");
    ctx.log(&format!("namespace deleted after {took:?}: {note}"));
}

/// The note of the `SavepointsLeftBehind` Event in `ns` that mentions `what`.
async fn left_behind_event(env: &'static TestEnv, ns: &str, what: &str) -> String {
    let events: Api<CoreEvent> = Api::namespaced(env.client().await.expect("client"), ns);
    let lp = ListParams::default().fields("reason=SavepointsLeftBehind");
    let list = events.list(&lp).await.expect("events");
    list.items
        .iter()
        .filter_map(|e| e.message.clone())
        .find(|m| m.contains(what))
        .unwrap_or_else(|| panic!("no SavepointsLeftBehind event in {ns} about {what}: {list:?}"))
}

/// The operator's pod and its container's pid.
async fn operator_process(env: &'static TestEnv) -> (String, u32) {
    let ns = operator(env).await;
    let pods: Api<Pod> = Api::namespaced(env.client().await.expect("client"), ns);
    poll_until(
        "operator container running",
        TIMEOUT,
        Duration::from_millis(100),
        || async {
            let list = pods.list(&ListParams::default()).await?;
            Ok(list.items.iter().find_map(|p| {
                let running = p
                    .status
                    .as_ref()?
                    .container_statuses
                    .as_ref()?
                    .first()?
                    .state
                    .as_ref()?
                    .running
                    .is_some();
                let pid = container_pid(p)?;
                (running && pid_alive(pid))
                    .then(|| (p.metadata.name.clone().unwrap_or_default(), pid))
            }))
        },
    )
    .await
    .expect("operator process")
}

/// Applies the changed spec of a running job and SIGKILLs the operator once at every upgrade step
/// it sees, until the job is promoted; returns the steps it was killed at.
async fn upgrade_killing_operator(ctx: &Ctx) -> Vec<String> {
    let before = ctx.running_with_checkpoint().await;
    let old = deployed_hash(&before);
    ctx.apply();
    let mut killed: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let o = ctx.get().await;
        if promoted(&o, &old) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not promoted; seen {:?}, killed at {killed:?}",
            ctx.seen()
        );
        if let Some(step) = status(&o)["upgrade"]["step"].as_str()
            && !killed.iter().any(|k| k == step)
        {
            let (pod, pid) = operator_process(ctx.env).await;
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
                nix::sys::signal::Signal::SIGKILL,
            )
            .expect("SIGKILL operator");
            ctx.log(&format!("killed operator {pod} (pid {pid}) at {step}"));
            killed.push(step.to_string());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let o = ctx.get().await;
    assert_started_from_recorded_savepoint(&o);
    assert_eq!(status(&o)["deployment"]["image"], "streamjob/runtime:v2");
    killed
}

/// i. the operator is SIGKILLed at every step of an in-place upgrade it sees; each restarted
/// operator resumes from the status it wrote, and the job ends on the new version, exactly-once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i_operator_killed_at_every_upgrade_step() {
    let env = env().await;
    let mut ctx = Ctx::new(env, new_job(env, "opkill").await).await;
    // long enough that the job still runs after four operator restarts
    ctx.job.count = 70_000;
    ctx.apply();
    ctx.job.image = "streamjob/runtime:v2".into();
    let killed = upgrade_killing_operator(&ctx).await;
    for step in ["InPlace/Savepointing", "InPlace/Restoring"] {
        assert!(
            killed.iter().any(|k| k == step),
            "never killed at {step}: {killed:?}"
        );
    }
    ctx.finished().await;
    ctx.assert_exactly_once().await;
    ctx.log(&format!("killed at {killed:?}; phases: {:?}", ctx.seen()));
}

/// k. the same for a shadow upgrade: killed while the standby starts, while the old job stops
/// with a savepoint and while the new one restores; it ends on the new version with the old pod
/// gone, exactly-once. Full suite only: every run kills the operator at every in-place step
/// (`i`), upgrades by shadow (`j`) and kills the operator during shadow upgrades in the soak.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full suite: cargo xtask e2e --full"]
async fn k_operator_killed_at_every_shadow_step() {
    let env = env().await;
    let mut job = new_job(env, "opkill-shadow").await;
    job.strategy = "Shadow";
    // each kill costs an operator restart, and a shadow upgrade has one step more than in place:
    // the job must still run when the savepoint is asked for
    job.count = 90_000;
    let mut ctx = Ctx::new(env, job).await;
    ctx.apply();
    ctx.job.image = "streamjob/runtime:v2".into();
    let killed = upgrade_killing_operator(&ctx).await;
    for step in ["Shadow/StartingStandby", "Shadow/Restoring"] {
        assert!(
            killed.iter().any(|k| k == step),
            "never killed at {step}: {killed:?}"
        );
    }
    let o = ctx.get().await;
    only_the_promoted_pod_left(&ctx, &o).await;
    ctx.finished().await;
    ctx.assert_exactly_once().await;
    ctx.log(&format!("killed at {killed:?}; phases: {:?}", ctx.seen()));
}

/// Waits until the promoted pod is the job's only runtime pod (the old one went after promotion).
async fn only_the_promoted_pod_left(ctx: &Ctx, promoted: &DynamicObject) {
    let workload = status(promoted)["deployment"]["workload"]
        .as_str()
        .unwrap()
        .to_string();
    poll_until(
        "old pod gone",
        TIMEOUT,
        Duration::from_millis(200),
        || async {
            let pods = ctx.runtime_pods().await;
            Ok(
                (pods.len() == 1 && pods[0].metadata.name.as_deref() == Some(workload.as_str()))
                    .then_some(()),
            )
        },
    )
    .await
    .expect("only the new pod");
}

/// j. shadow upgrade: the new version's pod starts beside the old one in standby, takes over
/// from the old job's savepoint, and the old pod goes once the new one is promoted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn j_shadow_upgrade() {
    let env = env().await;
    let mut job = new_job(env, "shadow").await;
    job.strategy = "Shadow";
    let mut ctx = Ctx::new(env, job).await;
    ctx.apply();
    ctx.job.image = "streamjob/runtime:v2".into();
    let o = upgrade(&ctx).await;
    assert_eq!(status(&o)["deployment"]["image"], "streamjob/runtime:v2");
    let seen = ctx.seen();
    assert!(
        seen.iter().any(|s| s.contains("Shadow/StartingStandby")),
        "no standby step: {seen:?}"
    );
    only_the_promoted_pod_left(&ctx, &o).await;
    // The promoted pod was created as a standby: its container, restarted after a SIGKILL,
    // comes back waiting for a start (found by the soak, where the job then stayed stopped for
    // good). The operator replaces it and the job goes on from its latest checkpoint.
    let promoted = ctx.coordinator(&o).await;
    let pid = container_pid(&promoted).expect("pid of the promoted pod");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("SIGKILL");
    ctx.log(&format!(
        "SIGKILL to the promoted pod {}",
        promoted.name_any()
    ));
    // the replacement keeps the name (it is the same deployment), not the uid
    let (pods, name, uid) = (ctx.pods.clone(), promoted.name_any(), promoted.uid());
    poll_until(
        "the promoted pod replaced",
        TIMEOUT,
        Duration::from_millis(200),
        || async {
            let p = pods.get_opt(&name).await?;
            Ok(p.filter(|p| p.uid() != uid && container_pid(p).is_some())
                .map(|_| ()))
        },
    )
    .await
    .unwrap();
    ctx.log("replaced; it resumes from the latest checkpoint");
    let done = ctx.finished().await;
    assert_eq!(status(&done)["deployment"]["image"], "streamjob/runtime:v2");
    ctx.assert_exactly_once().await;
    ctx.log(&format!("phases: {:?}", ctx.seen()));
}

impl Ctx {
    /// Worker pods of the job (not terminating).
    async fn worker_pods(&self) -> Vec<Pod> {
        self.pods_with_role("worker").await
    }

    /// Waits until the running workers are exactly `count` pods of coordinator `coordinator`.
    async fn workers_of(&self, coordinator: &str, count: usize) -> Vec<Pod> {
        poll_until(
            &format!("{count} running workers of {coordinator}"),
            TIMEOUT,
            Duration::from_millis(200),
            || async {
                let pods = self.worker_pods().await;
                let ok = pods.len() == count
                    && pods.iter().all(|p| {
                        p.labels()
                            .get("streamjob.io/coordinator")
                            .map(String::as_str)
                            == Some(coordinator)
                            && container_pid(p).is_some()
                    });
                Ok(ok.then_some(pods))
            },
        )
        .await
        .expect("worker pods")
    }

    /// The active runtime (coordinator) pod recorded in status.
    async fn coordinator(&self, o: &DynamicObject) -> Pod {
        let name = status(o)["deployment"]["workload"].as_str().unwrap();
        self.pods.get(name).await.expect("coordinator pod")
    }
}

/// l. `spec.workers: 2`: the coordinator pod runs no subtask, two worker pods run them and
/// exchange the keyBy data over the network. A SIGKILLed worker is restarted by the kubelet and
/// the job restarts from its latest checkpoint; an in-place upgrade brings a new coordinator with
/// new workers and the old workers go; output exactly-once; no worker is left at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l_workers_survive_a_killed_worker_and_an_upgrade() {
    let env = env().await;
    let mut job = new_job(env, "workers").await;
    job.parallelism = 2;
    job.workers = 2;
    job.count = 40_000;
    let mut ctx = Ctx::new(env, job).await;
    ctx.apply();
    let o = ctx.running_with_checkpoint().await;
    let coordinator = ctx.coordinator(&o).await;
    let coordinator_name = coordinator.name_any();
    let workers = ctx.workers_of(&coordinator_name, 2).await;
    let log = runtime_log(env, &coordinator);
    assert!(
        log.contains("deploying on workers"),
        "the coordinator did not deploy on workers:\n{log}"
    );

    // SIGKILL one worker: the kubelet restarts it, it registers again, the job restarts
    let victim = &workers[1];
    let pid = container_pid(victim).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("SIGKILL worker");
    ctx.log(&format!("killed worker {} (pid {pid})", victim.name_any()));
    poll_until(
        "the job restarted on the restarted worker",
        TIMEOUT,
        Duration::from_millis(200),
        || async {
            let log = runtime_log(env, &coordinator);
            // "worker lost" when the registry notices first, "worker left" when a broken data
            // channel already failed the attempt: either way the job must restart (attempt 2)
            let gone = log.contains("worker lost") || log.contains("worker left");
            Ok((gone && log.contains("attempt=2")).then_some(()))
        },
    )
    .await
    .expect("restart after the worker was lost");
    let at_restart = latest_checkpoint_in_log(env, &coordinator);
    poll_until(
        "a checkpoint across the workers after the restart",
        TIMEOUT,
        Duration::from_millis(200),
        || async { Ok((latest_checkpoint_in_log(env, &coordinator) > at_restart).then_some(())) },
    )
    .await
    .expect("checkpoint after the restart");

    // in-place upgrade: new coordinator, new workers, the old workers are deleted
    ctx.job.image = "streamjob/runtime:v2".into();
    let o = upgrade(&ctx).await;
    let new_coordinator = status(&o)["deployment"]["workload"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(new_coordinator, coordinator_name);
    let new_workers = ctx.workers_of(&new_coordinator, 2).await;
    for w in &new_workers {
        let image = w.spec.as_ref().unwrap().containers[0].image.clone();
        assert_eq!(image.as_deref(), Some("streamjob/runtime:v2"));
    }
    ctx.finished().await;
    ctx.assert_exactly_once().await;
    poll_until(
        "no worker pods left",
        TIMEOUT,
        Duration::from_millis(200),
        || async { Ok(ctx.worker_pods().await.is_empty().then_some(())) },
    )
    .await
    .expect("workers deleted after the job finished");
    ctx.log(&format!("phases: {:?}", ctx.seen()));
}

/// m. `spec.workers: 2` with a Shadow upgrade: the standby coordinator gets its own two workers
/// beside the old coordinator and its workers, takes over from the savepoint, and the old
/// coordinator's workers go with it; output exactly-once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full suite: cargo xtask e2e --full"]
async fn m_workers_shadow_upgrade() {
    let env = env().await;
    let mut job = new_job(env, "wshadow").await;
    job.parallelism = 2;
    job.workers = 2;
    job.strategy = "Shadow";
    let mut ctx = Ctx::new(env, job).await;
    ctx.apply();
    let o = ctx.running_with_checkpoint().await;
    let old = ctx.coordinator(&o).await.name_any();
    ctx.workers_of(&old, 2).await;
    ctx.job.image = "streamjob/runtime:v2".into();
    let o = upgrade(&ctx).await;
    let seen = ctx.seen();
    assert!(
        seen.iter().any(|s| s.contains("Shadow/StartingStandby")),
        "no standby step: {seen:?}"
    );
    let new = ctx.coordinator(&o).await;
    assert_ne!(new.name_any(), old);
    ctx.workers_of(&new.name_any(), 2).await;
    // the new coordinator registered its workers while standing by, before it was started
    let log = runtime_log(env, &new);
    let registered = log.find("worker registered").expect("workers registered");
    let started = log.find("start requested").expect("started from standby");
    assert!(registered < started, "workers registered after the start");
    ctx.finished().await;
    ctx.assert_exactly_once().await;
    ctx.log(&format!("phases: {:?}", ctx.seen()));
}

/// The longest gap between consecutive committed part files of the job written between `from`
/// and `to` (wall clock), and how many parts that window holds: the output stall of an upgrade.
async fn output_stall(
    ctx: &Ctx,
    from: chrono::DateTime<chrono::Utc>,
    to: chrono::DateTime<chrono::Utc>,
) -> (Duration, usize) {
    let prefix = format!("output/{}", ctx.job.name);
    let keys: std::collections::BTreeSet<String> =
        finished_parts(ctx.env, &ctx.job.bucket, &ctx.job.name)
            .await
            .expect("list parts")
            .into_iter()
            .collect();
    let mut times: Vec<_> = ctx
        .env
        .s3()
        .list(&ctx.job.bucket, &prefix)
        .await
        .expect("list parts")
        .into_iter()
        .filter(|o| keys.contains(&o.key) && o.last_modified >= from && o.last_modified <= to)
        .map(|o| o.last_modified)
        .collect();
    times.sort();
    let mut edges = vec![from];
    edges.extend(times.iter().copied());
    edges.push(to);
    let gap = edges
        .windows(2)
        .map(|w| (w[1] - w[0]).to_std().unwrap_or_default())
        .max()
        .unwrap_or_default();
    (gap, times.len())
}

/// n. A Kafka job (unbounded: it reads until stopped) while a producer keeps writing the
/// generator's records to a 3-partition topic: an image bump in place, then a Shadow upgrade.
/// Once everything is produced, a few records far ahead in event time close every window; each
/// (key, window) aggregate must then be in the bucket exactly once. The output stall of each
/// upgrade (longest gap between committed part files around it) is printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_kafka_job_upgraded_in_place_and_by_shadow_while_producing() {
    use rdkafka::producer::{BaseRecord, Producer};
    let env = env().await;
    let dir = env.run_dir.join("kafka-n");
    std::fs::create_dir_all(&dir).unwrap();
    let watchdog = Watchdog::start(&dir).unwrap();
    let kafka = Kafka::start(&dir, Some(&watchdog)).expect("kafka broker");
    kafka.create_topic("clicks", 3).unwrap();
    let mut job = new_job(env, "kafka").await;
    job.parallelism = 2;
    job.kafka = Some(KafkaInput {
        bootstrap: kafka.bootstrap.clone(),
        topic: "clicks".into(),
        bounded: false,
    });
    let (seed, keys, count) = (job.seed, job.keys, job.count);
    // the producer: the generator's records in id order, round robin over the partitions, at
    // 600 records/s so that both upgrades happen while it writes
    let producer = kafka.producer().unwrap();
    let produced = std::thread::spawn(move || {
        let t0 = Instant::now();
        for id in 0..count {
            let value = generator_json(seed, keys, id);
            let key = format!("k{id}");
            let record = BaseRecord::to("clicks")
                .partition((id % 3) as i32)
                .key(&key)
                .payload(&value);
            producer.send(record).map_err(|(e, _)| e).unwrap();
            if id % 60 == 59 {
                let due = Duration::from_millis((id + 1) * 1000 / 600);
                if let Some(wait) = due.checked_sub(t0.elapsed()) {
                    std::thread::sleep(wait); // pacing the producer, not synchronisation
                }
            }
        }
        producer.flush(Duration::from_secs(30)).unwrap();
        producer
    });
    let mut ctx = Ctx::new(env, job).await;
    ctx.apply();
    ctx.running_with_checkpoint().await;
    // in place
    let t1 = chrono::Utc::now();
    ctx.job.image = "streamjob/runtime:v2".into();
    let o = upgrade(&ctx).await;
    let t2 = chrono::Utc::now();
    assert_eq!(status(&o)["deployment"]["image"], "streamjob/runtime:v2");
    // shadow
    ctx.job.strategy = "Shadow";
    ctx.job.image = "streamjob/runtime:v3".into();
    let t3 = chrono::Utc::now();
    let o = upgrade(&ctx).await;
    let t4 = chrono::Utc::now();
    assert_eq!(status(&o)["deployment"]["image"], "streamjob/runtime:v3");
    only_the_promoted_pod_left(&ctx, &o).await;
    let producer = produced.join().unwrap();
    ctx.log(&format!("all {count} records produced"));
    // close every window: one record an hour ahead in each partition
    for p in 0..3 {
        let value = format!(
            r#"{{"id":-1,"key":"flush","value":0,"ts":{}}}"#,
            generator_ts(count) + 3_600_000
        );
        producer
            .send(
                BaseRecord::to("clicks")
                    .partition(p)
                    .key("flush")
                    .payload(&value),
            )
            .map_err(|(e, _)| e)
            .unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let want = ctx.job.expected();
    let res = poll_until(
        "every window committed exactly once",
        Duration::from_secs(120),
        Duration::from_millis(500),
        || async {
            let got = read_output(ctx.env, &ctx.job.bucket, &ctx.job.name).await?;
            Ok(check_exactly_once(&got, &want).ok())
        },
    )
    .await;
    if res.is_err() {
        let got = read_output(env, &ctx.job.bucket, &ctx.job.name)
            .await
            .expect("read output");
        panic!("{}", check_exactly_once(&got, &want).unwrap_err());
    }
    let (in_place, n1) = output_stall(&ctx, t1, t2 + chrono::Duration::seconds(3)).await;
    let (shadow, n2) = output_stall(&ctx, t3, t4 + chrono::Duration::seconds(3)).await;
    ctx.log(&format!(
        "exactly-once: {} aggregates of {count} Kafka records; output stall across the in-place \
         upgrade {in_place:?} ({n1} parts in the window), across the shadow upgrade {shadow:?} \
         ({n2} parts)",
        want.len()
    ));
    ctx.log(&format!("phases: {:?}", ctx.seen()));
    drop(kafka);
}
