//! Apache Flink through the operator (issue #17): a StreamJob with `engine: flink` applied with
//! kubectl runs as a standalone application cluster the operator owns — the JobManager and a
//! TaskManager as separate pods of the test job's Flink image (the process kubelet runs them as
//! JVMs from the pinned jars of Flink 1.20.0 and 2.3.0) in a namespace enforcing the `restricted`
//! Pod Security Standard. One job per version goes through everything a Flink user does to a job:
//! a savepoint by nonce, suspend and resume, an image bump upgraded in place while the operator
//! is SIGKILLed at every step, a parallelism change, a broken build rolled back, pre-check refusals with the running job
//! untouched (a removed stateful uid, a changed max parallelism, a state retyped, a state
//! renamed, a downgrade, a state whose class the new image no longer has), a removed uid let through by
//! allowNonRestoredState, then the job runs to its end and
//! every number is in exactly one committed line with each key's running counts exactly
//! 1..=N (no state lost or replayed across the six runs).

use streamjob_e2e::flink::{
    TEST_JOB_CLASS, TEST_JOB_IMAGE, TEST_JOB_V2_IMAGE, check_counting_output, counting_job_args,
};
use streamjob_operator::engine::flink::metrics::FLINK_METRICS;
use streamjob_operator::engine::flink::plan::job_id;
use streamjob_operator::engine::flink::precheck::operator_id;
use streamjob_operator::engine::flink::rest::FlinkRest;

use super::*;

const RECORDS: u64 = 40_000;
const KEYS: u64 = 8;
/// Records per second per source subtask while the job is changed (0 at the end: run out).
const RATE: u32 = 60;
const FLINK_TIMEOUT: Duration = Duration::from_secs(150);

/// What the test changes in the job's manifest.
#[derive(Clone)]
struct FlinkJob {
    name: String,
    ns: String,
    dir: std::path::PathBuf,
    version: String,
    /// The image's repository: the test job, or its next version without the `AuditTally` class.
    image: &'static str,
    /// Appended to the image tag (`-r2`: a new image of the same job).
    tag: String,
    parallelism: u32,
    revision: String,
    rate: u32,
    audit: bool,
    /// The audit's state: an `AuditTally` POJO (`tally`) or a Long.
    audit_type: &'static str,
    max_parallelism: Option<u32>,
    allow_non_restored_state: bool,
    /// A broken build: every record fails the job (`--fail true`).
    fail: bool,
    /// The counter's state: `long` (as saved), `string` (retyped) or `renamed`.
    count_state: &'static str,
    suspended: bool,
    nonce: Option<i64>,
}

impl FlinkJob {
    fn out(&self) -> std::path::PathBuf {
        self.dir.join("out")
    }

    fn manifest(&self) -> String {
        let mut extra: Vec<String> = Vec::new();
        if self.audit {
            extra.extend([
                "--audit-uid".into(),
                "audit".into(),
                "--audit-type".into(),
                self.audit_type.into(),
            ]);
        }
        if self.fail {
            extra.extend(["--fail".into(), "true".into()]);
        }
        if self.count_state != "long" {
            extra.extend(["--count-state".into(), self.count_state.into()]);
        }
        if let Some(m) = self.max_parallelism {
            extra.extend(["--max-parallelism".into(), m.to_string()]);
        }
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let args = counting_job_args(
            &format!("file://{}", self.out().display()),
            RECORDS,
            KEYS,
            self.rate,
            &self.revision,
            &extra,
        );
        let doc = serde_json::json!({
            "apiVersion": "streamjob.io/v1alpha1",
            "kind": "StreamJob",
            "metadata": {"name": self.name, "namespace": self.ns},
            "spec": {
                "engine": "flink",
                "image": format!("{}:{}{}", self.image, self.version, self.tag),
                "parallelism": self.parallelism,
                "state": if self.suspended { "suspended" } else { "running" },
                "checkpoints": {"dir": format!("file://{}/checkpoints", self.dir.display()), "interval": "2s", "retained": 5},
                "savepoints": {
                    "dir": format!("file://{}/savepoints", self.dir.display()),
                    "triggerNonce": self.nonce.unwrap_or(0),
                    "history": {"maxCount": 2},
                },
                // credentials from a Secret (the job's files are local here: only their delivery
                // is checked, and that the canary value leaks nowhere)
                "storage": {"s3": {
                    "endpoint": "http://127.0.0.1:9",
                    "allowHttp": true,
                    "credentialsSecret": {"name": CANARY_SECRET},
                }},
                "upgrade": {
                    "mode": "savepoint",
                    "readinessTimeout": "2m",
                    "allowNonRestoredState": self.allow_non_restored_state,
                },
                "flink": {
                    "version": self.version,
                    "job": {
                        "entryClass": TEST_JOB_CLASS,
                        "args": args,
                    },
                    "jobManager": {"resources": {"memory": "1024Mi", "cpu": "250m"}},
                    "flinkConfiguration": odd_configuration(),
                    "ingress": {"host": format!("{}.flink.example.com", self.name),
                                "className": "nginx", "tlsSecretName": "flink-tls"},
                    "taskManager": {"replicas": 1, "taskSlots": 3, "resources": {"memory": "1280Mi", "cpu": "250m"}},
                },
            },
        });
        serde_yaml_ng::to_string(&doc).expect("manifest YAML")
    }

    fn apply(&self, env: &TestEnv) {
        env.kubectl_ok(&["apply", "-f", "-"], Some(&self.manifest()))
            .expect("kubectl apply StreamJob");
    }

    /// The scenario's bookkeeping job for [`Ctx`] (only its name and namespace are used).
    fn ctx_job(&self) -> Job {
        Job::new(&self.name, &self.ns, "unused")
    }
}

/// The Secret holding the job's store credentials, and the value that must reach the Flink
/// processes and nothing else (ConfigMaps, status, events, logs).
const CANARY_SECRET: &str = "flink-store-credentials";
const CANARY: &str = "canary-4f0c2e9d7b1a";

fn canary_secret(ns: &str) -> String {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": CANARY_SECRET, "namespace": ns},
        "stringData": {"AWS_ACCESS_KEY_ID": "flink-e2e", "AWS_SECRET_ACCESS_KEY": CANARY},
    })
    .to_string()
}

/// Files under `dir` (recursively) whose content holds `needle`.
fn files_containing(dir: &std::path::Path, needle: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file()
                && std::fs::read(&path)
                    .is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
            {
                found.push(path);
            }
        }
    }
    found
}

/// Values the official image's `FLINK_PROPERTIES` would mangle (blanks removed, quotes kept):
/// the JobManager must report each exactly as written.
fn odd_configuration() -> serde_json::Value {
    serde_json::json!({
        "streamjob.test.blanks": "-XX:+UseG1GC -Xss2m",
        "streamjob.test.quoted": "say \"hi\": it's # not a comment",
        "streamjob.test.yaml-ish": "[a, b] {c: d} &x *y !z",
        "streamjob.test.dollar": "$(POD_IP) ${HOME}",
    })
}

/// Every Prometheus text Flink's reporters serve on this host: each pod's reporter takes a port
/// of 9249-9299 here (the stand-in's range; on a cluster each pod has 9249 to itself).
async fn flink_metrics() -> Vec<String> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .expect("client");
    let mut texts = Vec::new();
    for port in 9249..=9299 {
        if let Ok(r) = http
            .get(format!("http://127.0.0.1:{port}/metrics"))
            .send()
            .await
            && let Ok(text) = r.text().await
            && text.contains("flink_")
        {
            texts.push(text);
        }
    }
    texts
}

/// The names of [`FLINK_METRICS`] with no sample in `texts`.
fn unscraped(texts: &[String]) -> Vec<&'static str> {
    FLINK_METRICS
        .iter()
        .copied()
        .filter(|m| {
            !texts.iter().flat_map(|t| t.lines()).any(|l| {
                l.strip_prefix(m)
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            })
        })
        .collect()
}

/// The sum of the samples of `metric` (any labels) in Prometheus texts.
fn metric_sum(texts: &[String], metric: &str) -> Option<f64> {
    let values: Vec<f64> = texts
        .iter()
        .flat_map(|t| t.lines())
        .filter(|l| l.starts_with(&format!("{metric}{{")) || l.starts_with(&format!("{metric} ")))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// The configuration the running JobManager reports (`GET /jobmanager/config`).
async fn job_manager_config(jm: &Pod) -> std::collections::BTreeMap<String, String> {
    let ip = jm
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .expect("JobManager pod IP");
    let entries: Vec<serde_json::Value> =
        reqwest::get(format!("http://{ip}:8081/jobmanager/config"))
            .await
            .expect("GET /jobmanager/config")
            .json()
            .await
            .expect("configuration JSON");
    entries
        .iter()
        .filter_map(|e| {
            Some((
                e["key"].as_str()?.to_string(),
                e["value"].as_str()?.to_string(),
            ))
        })
        .collect()
}

fn step(o: &DynamicObject) -> String {
    status(o)["upgrade"]["step"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The JobManager pod running the job (uid), or panics.
/// Flink's REST API on the JobManager `jm`.
fn flink_rest(jm: &Pod) -> FlinkRest {
    let ip = jm
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .expect("JobManager pod IP");
    FlinkRest::new(format!("http://{ip}:8081"))
}

async fn job_manager(ctx: &Ctx) -> Pod {
    let pods = ctx.runtime_pods().await;
    assert_eq!(pods.len(), 1, "one JobManager: {pods:?}");
    pods.into_iter().next().unwrap()
}

/// Applies `job` and waits for its refusal: the upgrade is Blocked with a message containing
/// `needle`, and the running JobManager (`before`) is the same pod, its job still RUNNING.
async fn refused(ctx: &Ctx, job: &FlinkJob, needle: &str, before: &Pod) {
    let o = ctx.get().await;
    let hash_before = deployed_hash(&o);
    // the previous refusal's record stays until this change replaces it
    let refused_before = status(&o)["upgrade"]["to"].clone();
    job.apply(ctx.env);
    let o = ctx
        .wait("pre-check refused the change", FLINK_TIMEOUT, |o| {
            step(o).ends_with("/Blocked")
                && status(o)["upgrade"]["to"] != refused_before
                && condition_true(o, "UpgradeBlocked")
                && phase(o) == "Running"
        })
        .await;
    let message = status(&o)["upgrade"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    ctx.log(&format!("blocked: {message}"));
    assert!(message.contains(needle), "{needle:?} not in {message:?}");
    assert_eq!(deployed_hash(&o), hash_before, "the running version stays");
    let jm = job_manager(ctx).await;
    assert_eq!(
        jm.metadata.uid, before.metadata.uid,
        "the JobManager was not touched"
    );
    assert!(
        ctx.pods_with_role("plan").await.is_empty(),
        "the check pod is gone"
    );
}

/// SIGKILLs process `pid` (`what` names it in a failure).
fn sigkill(pid: u32, what: &str) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("a pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL)
        .unwrap_or_else(|e| panic!("SIGKILL {what}: {e}"));
}

/// SIGKILLs the operator's process (its Deployment's kubelet starts it again).
async fn kill_operator(ctx: &Ctx, when: &str) {
    let (pod, pid) = operator_process(ctx.env).await;
    sigkill(pid, "operator");
    ctx.log(&format!("killed operator {pod} (pid {pid}) {when}"));
}

/// How an upgrade went.
struct Upgraded {
    /// Seconds from `kubectl apply` to promotion (the new version's first checkpoint).
    total: f64,
    /// Seconds from the stop-with-savepoint's request to promotion: no output is committed in
    /// between (the old job stopped, the new one commits at its first checkpoint).
    stall: f64,
    /// The steps the operator was SIGKILLed at.
    killed: Vec<String>,
}

/// Applies `job` (a changed spec of the running one) and waits until it is promoted; with
/// `kill`, SIGKILLs the operator once at every upgrade step it sees.
async fn upgraded(ctx: &Ctx, job: &FlinkJob, kill: bool) -> Upgraded {
    let before = ctx.get().await;
    let old = deployed_hash(&before);
    // a refusal or rollback recorded before this change stays until the change replaces it
    let record_before = status(&before)["upgrade"]["to"].clone();
    let started = Instant::now();
    job.apply(ctx.env);
    let mut killed: Vec<String> = Vec::new();
    let mut stopping: Option<Instant> = None;
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let o = ctx.get().await;
        if promoted(&o, &old) {
            break;
        }
        let s = step(&o);
        if s.ends_with("/Savepointing") {
            stopping.get_or_insert_with(Instant::now);
        }
        let stale = status(&o)["upgrade"]["to"] == record_before;
        assert!(
            stale || !(s.ends_with("/Blocked") || s.starts_with("Rollback")),
            "upgrade not made: {s}: {}; seen {:?}; status {}",
            status(&o)["upgrade"]["message"],
            ctx.seen(),
            status(&o)
        );
        assert!(
            Instant::now() < deadline,
            "not promoted; seen {:?}, killed at {killed:?}",
            ctx.seen()
        );
        if kill && !s.is_empty() && !stale && !killed.contains(&s) {
            kill_operator(ctx, &format!("at {s}")).await;
            killed.push(s);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let total = started.elapsed().as_secs_f64();
    let stall = stopping.map(|t| t.elapsed().as_secs_f64()).unwrap_or(total);
    let o = ctx.get().await;
    assert_started_from_recorded_savepoint(&o);
    Upgraded {
        total,
        stall,
        killed,
    }
}

/// The operator process's resident memory (VmRSS), in MiB.
async fn operator_rss_mib(env: &'static TestEnv) -> f64 {
    let (_, pid) = operator_process(env).await;
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

async fn flink_job_through_the_operator(version: &str, other_version: &str, other_refusal: &str) {
    let env = env().await;
    operator(env).await;
    let ns = env.restricted_namespace("flink").await.expect("namespace");
    let dir = env.run_dir.join(format!("flink-operator-{version}"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut job = FlinkJob {
        name: format!("counts-{}", version.replace('.', "")),
        ns,
        dir,
        version: version.into(),
        image: TEST_JOB_IMAGE,
        tag: String::new(),
        parallelism: 2,
        revision: "1".into(),
        rate: RATE,
        audit: true,
        audit_type: "tally",
        count_state: "long",
        max_parallelism: None,
        allow_non_restored_state: false,
        fail: false,
        suspended: false,
        nonce: None,
    };
    let ctx = Ctx::new(env, job.ctx_job()).await;
    env.kubectl_ok(&["apply", "-f", "-"], Some(&canary_secret(&job.ns)))
        .expect("credentials Secret");
    let rss_idle = operator_rss_mib(env).await;

    // kubectl apply → RUNNING with a checkpoint
    let t = Instant::now();
    job.apply(env);
    ctx.wait("Running with a completed checkpoint", FLINK_TIMEOUT, |o| {
        phase(o) == "Running" && status(o)["lastCheckpoint"]["id"].is_u64()
    })
    .await;
    let to_running = t.elapsed().as_secs_f64();
    assert_eq!(
        ctx.pods_with_role("worker").await.len(),
        1,
        "one TaskManager pod"
    );
    let rss_running = operator_rss_mib(env).await;

    // spec.flink.ingress: the Ingress routes the host to the job's REST Service, which keeps
    // its name across upgrades (no ingress controller here: the object is what is checked)
    let ingresses: Api<k8s_openapi::api::networking::v1::Ingress> =
        Api::namespaced(env.client().await.unwrap(), &job.ns);
    let ingress = ingresses
        .get(&format!("{}-rest", job.name))
        .await
        .expect("the job's Ingress");
    let rule = &ingress.spec.as_ref().unwrap().rules.as_ref().unwrap()[0];
    assert_eq!(
        rule.host.as_deref(),
        Some(format!("{}.flink.example.com", job.name).as_str())
    );
    let backend = rule.http.as_ref().unwrap().paths[0]
        .backend
        .service
        .as_ref()
        .unwrap();
    assert_eq!(backend.name, format!("{}-rest", job.name));
    assert_eq!(backend.port.as_ref().unwrap().number, Some(8081));

    // the configuration reached Flink exactly as written (a file, not FLINK_PROPERTIES)
    let reported = job_manager_config(&job_manager(&ctx).await).await;
    for (key, value) in odd_configuration().as_object().unwrap() {
        assert_eq!(
            reported.get(key).map(String::as_str),
            value.as_str(),
            "{key} as the JobManager reports it"
        );
    }
    assert_eq!(reported["jobmanager.memory.process.size"], "1024m");
    assert_eq!(reported["taskmanager.data.port"], "6121");
    assert_eq!(
        reported["s3.endpoint"], "http://127.0.0.1:9",
        "from spec.storage.s3"
    );

    // Flink's metrics for Prometheus, from the JobManager and the TaskManager
    let metrics = poll_until(
        "Flink metrics with records",
        TIMEOUT,
        Duration::from_millis(500),
        || async {
            let texts = flink_metrics().await;
            let records =
                metric_sum(&texts, "flink_taskmanager_job_task_numRecordsOut").unwrap_or(0.0);
            let task_managers =
                metric_sum(&texts, "flink_jobmanager_numRegisteredTaskManagers").unwrap_or(0.0);
            Ok((records > 0.0 && task_managers >= 1.0).then_some((records, task_managers)))
        },
    )
    .await
    .expect("Flink's Prometheus reporters");
    ctx.log(&format!(
        "Flink metrics: {} records out, {} TaskManagers registered",
        metrics.0, metrics.1
    ));
    // every Flink metric the chart's dashboard and alerts read, named by Flink as they expect
    let all_there = poll_until(
        "every Flink metric the dashboard reads",
        TIMEOUT,
        Duration::from_millis(500),
        || async { Ok(unscraped(&flink_metrics().await).is_empty().then_some(())) },
    )
    .await;
    if all_there.is_err() {
        let missing = unscraped(&flink_metrics().await);
        panic!("Flink metrics the dashboard reads, not scraped: {missing:?}");
    }

    // the store credentials reach the Flink processes from the Secret, and nothing else
    let jm = job_manager(&ctx).await;
    let pid = container_pid(&jm).expect("JobManager process");
    let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("JobManager environment");
    assert!(
        environ
            .split(|b| *b == 0)
            .any(|kv| kv == format!("AWS_SECRET_ACCESS_KEY={CANARY}").as_bytes()),
        "the JobManager got the Secret's value"
    );
    let leaked = files_containing(&env.kubelet_config.run_dir, CANARY);
    assert!(
        leaked.is_empty(),
        "the canary secret in pod files or logs: {leaked:?}"
    );
    for kind in ["configmaps", "streamjobs", "events", "pods"] {
        let yaml = env
            .kubectl_ok(&["get", kind, "-n", &job.ns, "-o", "yaml"], None)
            .expect("kubectl get");
        assert!(!yaml.contains(CANARY), "the canary secret in {kind}");
    }

    // the web UI's Service: one per job, kept across runs
    let ui_service = || {
        env.kubectl_ok(
            &[
                "get",
                "service",
                &format!("{}-rest", job.name),
                "-n",
                &job.ns,
                "-o",
                "jsonpath={.metadata.uid}",
            ],
            None,
        )
        .expect("the job's rest Service")
    };
    let ui_uid = ui_service();

    // a TaskManager killed (as by the OOM killer), then the operator: its pod fails, the operator
    // (back) replaces it, the new TaskManager registers and Flink restarts the job from its latest checkpoint; output
    // stays exactly once (checked at the end)
    let tms = ctx.pods_with_role("worker").await;
    let tm_pid = container_pid(&tms[0]).expect("TaskManager process");
    let checkpoint_before = status(&ctx.get().await)["lastCheckpoint"]["id"]
        .as_u64()
        .unwrap_or(0);
    let killed_at = Instant::now();
    sigkill(tm_pid, "TaskManager");
    // the operator lost during the recovery too: the one that comes back finds the failed pod
    kill_operator(&ctx, "after the TaskManager").await;
    ctx.wait(
        "a checkpoint after the TaskManager's replacement",
        FLINK_TIMEOUT,
        |o| {
            status(o)["lastCheckpoint"]["id"].as_u64().unwrap_or(0) > checkpoint_before + 1
                && phase(o) == "Running"
        },
    )
    .await;
    let tm_recovery = killed_at.elapsed().as_secs_f64();
    let tms_after = ctx.pods_with_role("worker").await;
    assert_eq!(tms_after.len(), 1, "one TaskManager pod");
    assert_ne!(
        tms_after[0].metadata.uid, tms[0].metadata.uid,
        "the dead TaskManager was replaced by a new pod"
    );
    ctx.log(&format!(
        "TaskManager SIGKILLed: a new checkpoint {tm_recovery:.1}s later"
    ));

    // the JobManager lost (its JVM SIGKILLed, as by the OOM killer), then the operator: its pod
    // fails, the operator (back) makes it again under the same run, and the new JobManager resumes from the newest
    // checkpoint Flink completed — not the older one the operator last wrote into status, whose
    // output since would be written again (and which retention may have deleted); new
    // TaskManagers register with it; output stays exactly once (checked at the end)
    let jm = job_manager(&ctx).await;
    let jid = job_id(jm.metadata.name.as_deref().expect("JobManager name"));
    let (newest, recorded) = poll_until(
        "Flink completed a checkpoint newer than the one in status",
        FLINK_TIMEOUT,
        Duration::from_millis(200),
        || async {
            let recorded = status(&ctx.get().await)["lastCheckpoint"]["id"]
                .as_u64()
                .unwrap_or(0);
            let newest = flink_rest(&jm)
                .checkpoints(&jid)
                .await
                .ok()
                .and_then(|c| c.latest_completed)
                .map_or(0, |c| c.id);
            Ok((newest > recorded).then_some((newest, recorded)))
        },
    )
    .await
    .expect("Flink's checkpoints");
    let jm_pid = container_pid(&jm).expect("JobManager process");
    let killed_at = Instant::now();
    sigkill(jm_pid, "JobManager");
    kill_operator(&ctx, "after the JobManager").await;
    ctx.wait(
        "a checkpoint of the JobManager made again",
        FLINK_TIMEOUT,
        |o| {
            status(o)["lastCheckpoint"]["id"].as_u64().unwrap_or(0) > newest
                && phase(o) == "Running"
        },
    )
    .await;
    let jm_recovery = killed_at.elapsed().as_secs_f64();
    let jm_after = job_manager(&ctx).await;
    assert_ne!(
        jm_after.metadata.uid, jm.metadata.uid,
        "the lost JobManager was made again as a new pod"
    );
    let restored = flink_rest(&jm_after)
        .checkpoints(&jid)
        .await
        .expect("the new JobManager's checkpoints")
        .restored
        .expect("the new JobManager restored a checkpoint");
    assert!(
        restored.id >= newest,
        "the new JobManager restored checkpoint {} ({:?}); Flink had completed {newest} before the \
         loss and status recorded {recorded}",
        restored.id,
        restored.external_path
    );
    ctx.log(&format!(
        "JobManager SIGKILLed: restored checkpoint {} (Flink's newest {newest}, status {recorded}); \
         a new checkpoint {jm_recovery:.1}s later",
        restored.id
    ));

    // the engine cannot be switched by dropping the field (absent means runtime)
    let out = env
        .kubectl(
            &[
                "patch",
                "sj",
                &job.name,
                "-n",
                &job.ns,
                "--type=json",
                "-p",
                r#"[{"op":"remove","path":"/spec/engine"}]"#,
            ],
            None,
        )
        .expect("kubectl patch");
    let refusal = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && refusal.contains("spec.engine is immutable (absent means runtime)"),
        "engine switch refused by the API server: {refusal}"
    );

    // the job's NetworkPolicy admits Flink's own ports between its pods
    let policy: serde_json::Value = serde_json::from_str(
        &env.kubectl_ok(
            &[
                "get",
                "networkpolicy",
                &format!("{}-streamjob", job.name),
                "-n",
                &job.ns,
                "-o",
                "json",
            ],
            None,
        )
        .expect("the job's NetworkPolicy"),
    )
    .unwrap();
    let peer_ports: Vec<u64> = policy["spec"]["ingress"][1]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["port"].as_u64())
        .collect();
    assert_eq!(peer_ports, [6123, 6124, 6122, 6121], "{policy}");

    // a savepoint by nonce, the job untouched
    let jm = job_manager(&ctx).await;
    job.nonce = Some(1);
    job.apply(env);
    let o = ctx
        .wait("savepoint for nonce 1", FLINK_TIMEOUT, |o| {
            status(o)["lastHandledNonce"] == 1
                && status(o)["pendingSavepoint"].is_null()
                && status(o)["lastSavepoint"]["path"].is_string()
        })
        .await;
    let sp = status(&o)["lastSavepoint"]["path"]
        .as_str()
        .unwrap()
        .to_string();
    let local = sp.strip_prefix("file:").unwrap().trim_start_matches("//");
    assert!(
        std::path::Path::new(local).join("_metadata").is_file(),
        "savepoint {sp} written"
    );
    assert_eq!(job_manager(&ctx).await.metadata.uid, jm.metadata.uid);

    // suspend (stop-with-savepoint, the cluster goes) and resume from it
    job.suspended = true;
    job.apply(env);
    ctx.wait("Suspended", FLINK_TIMEOUT, |o| phase(o) == "Suspended")
        .await;
    poll_until(
        "no Flink pods",
        TIMEOUT,
        Duration::from_millis(200),
        || async {
            let left = ctx.runtime_pods().await.len() + ctx.pods_with_role("worker").await.len();
            Ok((left == 0).then_some(()))
        },
    )
    .await
    .expect("JobManager and TaskManager gone");
    let suspended_at = status(&ctx.get().await)["lastSavepoint"]["path"]
        .as_str()
        .unwrap()
        .to_string();
    job.suspended = false;
    job.apply(env);
    let o = ctx
        .wait("resumed", FLINK_TIMEOUT, |o| {
            phase(o) == "Running" && status(o)["upgrade"].is_null()
        })
        .await;
    assert_eq!(status(&o)["deployment"]["path"], suspended_at.as_str());

    // an image bump in place, the operator SIGKILLed at every step it sees
    job.tag = "-r2".into();
    job.revision = "2".into();
    let bump = upgraded(&ctx, &job, true).await;
    assert!(
        !bump.killed.is_empty(),
        "the operator was killed during the upgrade"
    );
    assert_eq!(
        ui_service(),
        ui_uid,
        "the same UI Service after the upgrade"
    );
    ctx.log(&format!(
        "image bump promoted in {:.1}s, operator killed at {:?}",
        bump.total, bump.killed
    ));

    // a parallelism change
    job.parallelism = 3;
    let rescale = upgraded(&ctx, &job, false).await;
    ctx.log(&format!(
        "parallelism 2 -> 3 promoted in {:.1}s (output stall {:.1}s)",
        rescale.total, rescale.stall
    ));
    assert_eq!(status(&ctx.get().await)["deployment"]["parallelism"], 3);

    // a broken build (every record fails it before its first checkpoint) is rolled back to the
    // last stable spec from the same savepoint; nothing it wrote is committed
    let stable = deployed_hash(&ctx.get().await);
    let mut broken = job.clone();
    broken.revision = "broken".into();
    broken.fail = true;
    let t = Instant::now();
    broken.apply(env);
    let o = ctx
        .wait(
            "the broken build rolled back",
            Duration::from_secs(240),
            |o| {
                step(o) == "Rollback/RolledBack"
                    && phase(o) == "Running"
                    && deployed_hash(o) == stable
            },
        )
        .await;
    let rollback_secs = t.elapsed().as_secs_f64();
    assert_eq!(
        status(&o)["deployment"]["startedFrom"],
        "savepoint",
        "the stable spec restored the upgrade's savepoint"
    );
    ctx.log(&format!("broken build rolled back in {rollback_secs:.1}s"));

    // refusals, the running job untouched
    let running = job_manager(&ctx).await;
    let mut change = job.clone();
    change.audit = false;
    let audit = if version.starts_with("1.") {
        // Flink 1.x savepoints record operator ids only
        operator_id("audit")
    } else {
        "\"audit\"".to_string()
    };
    refused(&ctx, &change, &audit, &running).await;
    let mut change = job.clone();
    change.max_parallelism = Some(256);
    refused(&ctx, &change, "max parallelism", &running).await;
    // the count's state retyped Long -> String: Flink's restore would refuse the new serializer
    // (StateMigrationException, measured in flink/state-matrix); the pre-check restores the
    // saved state and lets the new operator register its own, as Flink does
    let mut change = job.clone();
    change.count_state = "string";
    refused(
        &ctx,
        &change,
        "operator uid \"counter\": state \"count\" (VALUE): StateMigrationException",
        &running,
    )
    .await;
    // renamed: Flink would restore and drop the old count without a word; refused, naming it
    let mut change = job.clone();
    change.count_state = "renamed";
    refused(
        &ctx,
        &change,
        "state \"count\" (VALUE) is in the savepoint, but the new operator does not register it",
        &running,
    )
    .await;
    let mut change = job.clone();
    change.version = other_version.into();
    refused(&ctx, &change, other_refusal, &running).await;
    // the next image deleted the audit state's class (its state now a Long): Flink would fail
    // the restore with ClassNotFoundException (measured), the pre-check reads the savepoint's
    // serializer snapshots with the new image's classes
    let mut change = job.clone();
    change.image = TEST_JOB_V2_IMAGE;
    change.audit_type = "long";
    refused(
        &ctx,
        &change,
        "operator uid \"audit\": its state's serializers cannot be read with the new job's classes",
        &running,
    )
    .await;

    // the stateful uid dropped with allowNonRestoredState; the job then runs to its end
    job.audit = false;
    job.allow_non_restored_state = true;
    job.revision = "3".into();
    job.rate = 0;
    let last = upgraded(&ctx, &job, false).await;
    // what the restore dropped is named in status (by uid; a 1.x savepoint by operator id)
    let o = ctx.get().await;
    let dropped = status(&o)["deployment"]["droppedState"].to_string();
    let audit_row = if version.starts_with("1.") {
        format!(
            "uid {}: no operator of the new job restores it",
            operator_id("audit")
        )
    } else {
        "uid audit: no operator of the new job restores it".to_string()
    };
    assert!(
        dropped.contains(&audit_row),
        "status.deployment.droppedState names the audit operator: {dropped}"
    );
    ctx.wait("Finished", Duration::from_secs(240), |o| {
        phase(o) == "Finished"
    })
    .await;
    let revisions = check_counting_output(&job.out(), RECORDS, KEYS).expect("exactly once");
    // Five savepoints were taken (nonce, suspend, three upgrades); the history keeps two and the
    // others were deleted by dispose pods of the job's image (`flink-check --dispose`).
    let on_disk = || -> std::collections::BTreeSet<String> {
        std::fs::read_dir(job.dir.join("savepoints"))
            .map(|d| {
                d.filter_map(|e| Some(e.ok()?.path().display().to_string()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let kept = poll_until(
        "savepoints beyond the history disposed",
        TIMEOUT,
        Duration::from_millis(500),
        || async {
            let o = ctx.get().await;
            let history: std::collections::BTreeSet<String> = status(&o)["savepointHistory"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s["path"].as_str())
                .map(|p| format!("/{}", p.trim_start_matches("file:").trim_start_matches('/')))
                .collect();
            let disk = on_disk();
            Ok((history.len() <= 2 && !history.is_empty() && disk == history).then_some(disk))
        },
    )
    .await
    .expect("savepoint history on disk");
    ctx.log(&format!("savepoints kept after disposal: {kept:?}"));
    for r in ["1", "2", "3"] {
        assert!(
            revisions.contains_key(r),
            "revision {r} wrote lines: {revisions:?}"
        );
    }
    assert!(
        !revisions.contains_key("broken"),
        "the rolled-back build committed nothing: {revisions:?}"
    );
    let rss_end = operator_rss_mib(env).await;
    ctx.log(&format!(
        "FIGURES Flink {version}: apply -> RUNNING with a checkpoint {to_running:.1}s; TaskManager \
         killed -> next checkpoint {tm_recovery:.1}s; JobManager killed -> next checkpoint \
         {jm_recovery:.1}s; image bump \
         (operator killed {} times) {:.1}s; parallelism 2 -> 3 {:.1}s (output stall {:.1}s); \
         broken build rolled back {rollback_secs:.1}s; \
         uid dropped with allowNonRestoredState {:.1}s (output stall {:.1}s); operator RSS \
         {rss_idle:.0} MiB idle, {rss_running:.0} MiB with the job running, {rss_end:.0} MiB at \
         the end; lines per revision {revisions:?}",
        bump.killed.len(),
        bump.total,
        rescale.total,
        rescale.stall,
        last.total,
        last.stall
    ));
    ctx.log(&format!("phases: {:?}", ctx.seen()));
    env.kubectl_ok(
        &["delete", "sj", &job.name, "-n", &job.ns, "--wait=true"],
        None,
    )
    .expect("delete");
}

/// v. Flink 1.20: the whole lifecycle through the operator; a 1.20 savepoint is refused for 2.3
/// (its FileSink committer's state fails to restore there, measured in `e2e/tests/flink.rs`).
/// Full suite only: every run drives 2.3 through the operator (`w`), both versions directly
/// (`e2e/tests/flink.rs`) and 2.3 on the real node (`e2e/tests/node/flink.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full suite: cargo xtask e2e --full"]
async fn v_flink_1_20_job_through_the_operator() {
    flink_job_through_the_operator("1.20.0", "2.3.0", "committer").await;
}

/// w. Flink 2.3: the same; a downgrade to 1.20 is refused before any pre-check pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn w_flink_2_3_job_through_the_operator() {
    flink_job_through_the_operator("2.3.0", "1.20.0", "is older than the running job's 2.3.0")
        .await;
}

/// Cases of `flink/state-matrix` CI runs (the full suite runs all 15 on both versions): no
/// change, a value state and the key retyped, a state renamed, broadcast state retyped.
const QUICK_STATE_CASES: &str = "base:base count-int:count-int key-string:key-string \
    count-renamed:count-renamed broadcast-string:broadcast-string";

/// The pre-check against Flink's own restore (`flink/state-matrix/run-matrix.sh`): a savepoint
/// of a stateful job (keyed value, map and list state, a POJO, a window, operator and broadcast
/// state), then for every changed version the checker's verdict and Flink's real restore of the
/// same savepoint (a local MiniCluster, until the first checkpoint or the job's failure). They
/// must agree on every case, the checker's reason holding Flink's own exception text; a renamed
/// state, which Flink restores and drops, the checker refuses on purpose (counted as "restores").
async fn state_matrix(version: &str, cases: Option<&str>) {
    let env = env().await;
    let runs = env.run_dir.join("state-matrix");
    std::fs::create_dir_all(&runs).unwrap();
    let root = streamjob_e2e::fixtures::repo_root();
    let mut run = std::process::Command::new("bash");
    run.arg(root.join("flink/state-matrix/run-matrix.sh"))
        .arg(version)
        .env("RUNS_DIR", &runs);
    if let Some(cases) = cases {
        run.env("CASES", cases);
    }
    let status = run.status().expect("run-matrix.sh");
    assert!(status.success(), "run-matrix.sh {version}: {status}");
    let out = std::process::Command::new("python3")
        .arg(root.join("flink/state-matrix/agreement.py"))
        .arg(runs.join(version))
        .output()
        .expect("agreement.py");
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    println!("{table}");
    let summary = table
        .lines()
        .find(|l| l.starts_with("outcome agreement "))
        .unwrap_or_else(|| panic!("no summary in {table}"));
    // "outcome agreement 5/5, identical exception (or both OK) 5/5"
    let fractions: Vec<(u32, u32)> = summary
        .split(' ')
        .filter_map(|w| {
            let (a, b) = w.trim_end_matches(',').split_once('/')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .collect();
    assert_eq!(fractions.len(), 2, "{summary}");
    assert!(fractions[0].1 >= 5, "too few cases ran: {summary}");
    for (agree, all) in fractions {
        assert_eq!(
            agree, all,
            "the pre-check and Flink's restore disagree: {summary}\n{table}"
        );
    }
}

/// wm. The state matrix on Flink 2.3 (five cases in CI, every case with the full suite).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wm_flink_2_3_state_matrix_agrees_with_flinks_restore() {
    let full = std::env::args().any(|a| a == "--include-ignored" || a == "--ignored");
    state_matrix("2.3.0", (!full).then_some(QUICK_STATE_CASES)).await;
}

/// vm. The state matrix on Flink 1.20, every case (full suite).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full suite"]
async fn vm_flink_1_20_state_matrix_agrees_with_flinks_restore() {
    state_matrix("1.20.0", None).await;
}
