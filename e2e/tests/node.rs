//! e2e on a **real node** (issue #36): containerd + runc + the kubelet run the project's images
//! as containers, built offline by `e2e/scripts/build-images.sh`. Runs only inside
//! `e2e/scripts/node-netns.sh` (`cargo xtask node-test` does both); elsewhere every test here
//! fails at once, saying so.
//!
//! One environment per test binary (control plane, MinIO, the node with CoreDNS and the
//! NetworkPolicy agent); run with `--test-threads=1`. What each test shows:
//! a. the operator's image under `restricted`, a 3-pod job exactly once, non-root on a read-only
//!    root, `kubectl logs`/`exec`; b. a missing image reported and refused at the pre-check;
//! c. NetworkPolicy enforced both ways, Services through CoreDNS, `port-forward`;
//! d. the job template's images: a crashing image rolled back, an image bump promoted;
//! e. Shadow, suspend/resume, `kubectl scale`; f. an OOMKilled runtime container recovered;
//! g. a Flink job on the Flink base image, on S3, upgraded in place (`node/flink.rs`).

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::DynamicObject;
use kube::api::ListParams;
use streamjob_e2e::fixtures::{self, EnvOptions, TestEnv};
use streamjob_e2e::node::images;
use streamjob_e2e::scenario::{
    Job, SECRET, check_exactly_once, condition, condition_true, deployed_hash, finished_parts,
    install_operator, phase, promoted, read_output, sj_api, status,
};
use streamjob_e2e::wait::poll_until;

#[path = "node/flink.rs"]
mod flink;

const TIMEOUT: Duration = Duration::from_secs(120);

async fn env() -> &'static TestEnv {
    fixtures::init_test_tracing();
    match fixtures::shared(|| {
        let mut opts = EnvOptions::new(
            env!("CARGO_BIN_EXE_process-kubelet"),
            env!("CARGO_BIN_EXE_e2e-echo-server"),
        );
        // the Flink 1.20 images only when the run includes the full suite's tests (g on 1.20)
        let full = std::env::args().any(|a| a == "--include-ignored" || a == "--ignored");
        opts.real_node_images = Some(images::archives(full).expect("image archives"));
        opts
    })
    .await
    {
        Ok(env) => {
            let node = env.real_node.as_ref().expect("a real node");
            eprintln!(
                "real-node environment: run dir {}, ready in {:?} (node {:?}, image import {:?})",
                env.run_dir.display(),
                env.start_duration,
                node.start_duration,
                node.import_duration
            );
            env
        }
        Err(e) => panic!("real-node environment failed to start: {e}"),
    }
}

/// The operator installed by its chart from its image, in a namespace enforcing `restricted`.
async fn operator(env: &'static TestEnv) -> &'static str {
    static NS: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
    NS.get_or_init(|| async {
        let ns = env.restricted_namespace("operator").await.unwrap();
        let t0 = Instant::now();
        install_operator(
            env,
            &ns,
            &[
                "logFormat=text",
                &format!("image.repository={}", images::OPERATOR.0),
                &format!("image.tag={}", images::OPERATOR.1),
                &format!("flink.checkerImage.repository={}", images::FLINK_CHECKER.0),
                &format!("flink.checkerImage.tag={}", images::FLINK_CHECKER.1),
            ],
            TIMEOUT,
        )
        .await
        .expect("operator installed from its image and available");
        eprintln!(
            "operator pod available {:?} after helm install",
            t0.elapsed()
        );
        ns
    })
    .await
}

/// The container's main process as the node sees it: (uid, root mounted read-only).
fn container_process(env: &TestEnv, pod: &Pod) -> (u32, bool) {
    let id = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.first())
        .and_then(|c| c.container_id.clone())
        .expect("container id");
    let id = id.trim_start_matches("containerd://");
    let node = env.real_node.as_ref().unwrap();
    let pid = node.container_pid(id).expect("container pid");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid: u32 = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|u| u.parse().ok())
        .expect("effective uid");
    let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    let root_ro = mountinfo
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.get(4) == Some(&"/"))
        .is_some_and(|f| f.get(5).is_some_and(|o| o.split(',').any(|x| x == "ro")));
    (uid, root_ro)
}

/// The operator from its image under `restricted`, a job of 2 pods (a keyBy across them) from the
/// runtime image on MinIO, exactly once; the runtime as a non-root user on a read-only root file
/// system; `kubectl logs` and `exec` through the API server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_with_workers_runs_exactly_once_in_containers() {
    let env = env().await;
    let op_ns = operator(env).await;
    let ns = env.restricted_namespace("job").await.unwrap();
    let bucket = format!("b-{}", &ns[4..]);
    env.bucket_with_secret(&ns, &bucket, SECRET).await.unwrap();
    let mut job = Job::new("real", &ns, &bucket);
    job.image = format!("{}:{}", images::RUNTIME.0, images::RUNTIME.1);
    job.parallelism = 2;
    job.workers = 2;
    job.count = 20_000;
    job.rate = 2_000;
    job.apply(env).expect("apply");

    let client = env.client().await.unwrap();
    let api = sj_api(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    let t0 = Instant::now();
    let running = poll_until(
        "the coordinator and 2 worker pods Running",
        TIMEOUT,
        Duration::from_millis(250),
        || async {
            let list = pods
                .list(&ListParams::default().labels("streamjob.io/job=real"))
                .await?;
            let running: Vec<Pod> = list
                .items
                .into_iter()
                .filter(|p| {
                    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                        && p.metadata.labels.as_ref().is_some_and(|l| {
                            matches!(
                                l.get("streamjob.io/role").map(String::as_str),
                                Some("runtime" | "worker")
                            )
                        })
                })
                .collect();
            Ok((running.len() >= 3).then_some(running))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", dump(env, &ns)));
    eprintln!("3 job pods Running {:?} after apply", t0.elapsed());
    for pod in &running {
        let (uid, root_ro) = container_process(env, pod);
        assert_eq!(uid, 65532, "runtime runs as the image's non-root user");
        assert!(root_ro, "runtime's root file system is read-only");
    }

    poll_until(
        "phase Finished",
        Duration::from_secs(240),
        Duration::from_millis(500),
        || async {
            let o = api.get("real").await?;
            if phase(&o) == "Failed" {
                return Err(streamjob_e2e::error::Error::Other(format!(
                    "job failed: {}",
                    serde_json::to_string(&o.data["status"]).unwrap_or_default()
                )));
            }
            Ok((phase(&o) == "Finished").then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", dump(env, &ns)));
    let got = read_output(env, &bucket, "real").await.unwrap();
    check_exactly_once(&got, &job.expected()).unwrap();
    eprintln!("exactly-once: {} aggregates", got.len());

    // the API server reaches the kubelet: logs of the operator's container, exec in it
    let op_pod = env
        .kubectl_ok(
            &[
                "get",
                "pods",
                "-n",
                op_ns,
                "-o",
                "jsonpath={.items[0].metadata.name}",
            ],
            None,
        )
        .unwrap();
    let logs = env
        .kubectl_ok(&["logs", "-n", op_ns, &op_pod], None)
        .unwrap();
    assert!(
        logs.contains("INFO"),
        "operator logs through the kubelet:\n{logs}"
    );
    let version = env
        .kubectl_ok(
            &[
                "exec",
                "-n",
                op_ns,
                &op_pod,
                "--",
                "/usr/local/bin/streamjob-operator",
                "--version",
            ],
            None,
        )
        .unwrap();
    assert!(version.contains("streamjob"), "exec answered: {version}");
}

/// A fresh `restricted` namespace with a bucket and its Secret, and a job named `name` there.
async fn new_job(env: &'static TestEnv, name: &str) -> Job {
    operator(env).await;
    let ns = env.restricted_namespace("job").await.unwrap();
    let bucket = format!("b-{}", &ns[4..]);
    env.bucket_with_secret(&ns, &bucket, SECRET).await.unwrap();
    Job::new(name, &ns, &bucket)
}

/// Waits until `pred` holds for the job's StreamJob; on timeout panics with the namespace's
/// StreamJobs, pods and events.
async fn wait_job(
    env: &TestEnv,
    job: &Job,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&DynamicObject) -> bool,
) -> DynamicObject {
    let api = sj_api(env.client().await.unwrap(), &job.ns);
    let t0 = Instant::now();
    let o = poll_until(what, timeout, Duration::from_millis(250), || async {
        Ok(api.get_opt(&job.name).await?.filter(|o| pred(o)))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", dump(env, &job.ns)));
    eprintln!("[{}] {what} after {:?}", job.name, t0.elapsed());
    o
}

fn running_with_checkpoint(o: &DynamicObject) -> bool {
    phase(o) == "Running" && status(o)["lastCheckpoint"]["id"].is_u64()
}

/// An image the node does not have (no registry answers): a new job says so (a condition naming
/// the kubelet's reason and the image) instead of waiting silently, and an upgrade to it is
/// refused at the pre-check, the running version untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b_missing_image_is_reported_and_rolled_back() {
    let env = env().await;
    let missing = format!("{}:missing", images::RUNTIME.0);
    let says_why = |o: &DynamicObject| {
        status(o)["conditions"].as_array().is_some_and(|cs| {
            cs.iter().any(|c| {
                c["message"].as_str().is_some_and(|m| {
                    (m.contains("ErrImagePull") || m.contains("ImagePullBackOff"))
                        && m.contains("streamjob/runtime:missing")
                })
            })
        })
    };

    let mut fresh = new_job(env, "fresh-missing").await;
    fresh.image = missing.clone();
    fresh.readiness_timeout = "30s";
    fresh.apply(env).unwrap();
    let o = wait_job(
        env,
        &fresh,
        "a condition naming the pull failure",
        Duration::from_secs(60),
        says_why,
    )
    .await;
    eprintln!("new job on a missing image: {}", status(&o)["conditions"]);

    let mut job = new_job(env, "bump-missing").await;
    job.image = format!("{}:{}", images::RUNTIME.0, images::RUNTIME.1);
    job.count = 120_000;
    let v1 = start(env, &job).await;
    job.image = missing;
    job.readiness_timeout = "30s";
    job.apply(env).unwrap();
    // The pre-check pod runs the new image first: it cannot start, so the upgrade stops there,
    // the running version untouched (better than a rollback: nothing was stopped).
    let o = wait_job(
        env,
        &job,
        "upgrade to the missing image refused, the old version running",
        Duration::from_secs(60),
        |o| {
            (condition_true(o, "UpgradeBlocked") || condition_true(o, "RolledBack"))
                && phase(o) == "Running"
                && deployed_hash(o) == v1
        },
    )
    .await;
    let msg = ["UpgradeBlocked", "RolledBack"]
        .iter()
        .filter_map(|c| condition(&o, c))
        .filter(|c| c["status"] == "True")
        .map(|c| c["message"].to_string())
        .collect::<String>();
    eprintln!("refused: {msg}");
    assert!(
        (msg.contains("ErrImagePull") || msg.contains("ImagePullBackOff"))
            && msg.contains("streamjob/runtime:missing"),
        "the refusal names the kubelet's reason and the image: {msg}"
    );
}

/// Output lines written by the template's v2 (`"revision":2`, a column only v2 writes).
async fn revision_2_records(env: &TestEnv, job: &Job) -> usize {
    let mut n = 0;
    for key in finished_parts(env, &job.bucket, &job.name).await.unwrap() {
        let data = env.s3().read(&job.bucket, &key).await.unwrap();
        n += String::from_utf8_lossy(&data)
            .lines()
            .filter(|l| l.contains("\"revision\":2"))
            .count();
    }
    n
}

fn template(tag: &str) -> String {
    format!("{}:{tag}", images::JOB_TEMPLATE)
}

/// A job of the template's `v1` image (its keyed function) over 20 keys, in a fresh namespace.
async fn template_job(env: &'static TestEnv, name: &str, count: u64, rate: u64) -> Job {
    let mut job = new_job(env, name).await;
    job.image = template("v1");
    job.sdk_window = true;
    job.count = count;
    job.rate = rate;
    job.keys = 20;
    job
}

/// Applies the job and waits until it runs with a checkpoint; the deployed spec hash.
async fn start(env: &TestEnv, job: &Job) -> String {
    job.apply(env).unwrap();
    let o = wait_job(
        env,
        job,
        "running with a checkpoint",
        TIMEOUT,
        running_with_checkpoint,
    )
    .await;
    deployed_hash(&o)
}

/// d. The job template's images, built from its Dockerfile on our base as a user builds theirs:
/// `v2-crashing` (a bug shipped in the image: it fails after writing output, before any
/// checkpoint) rolled back to v1 from the savepoint; `v2` (changed code, same state) promoted in
/// place; every window once, v2's column in the output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d_template_image_bump_and_crash_rollback() {
    let env = env().await;
    let mut job = template_job(env, "tmpl", 90_000, 2_000).await;
    // small parts: the crashing version uploads several before it fails
    job.rolling = "{default: {maxPartSize: 1KiB}}";
    let v1 = start(env, &job).await;

    job.image = template("v2-crashing");
    job.checkpoint_interval = "30s";
    job.readiness_timeout = "40s";
    job.apply(env).unwrap();
    let o = wait_job(
        env,
        &job,
        "v2-crashing rolled back to v1",
        Duration::from_secs(180),
        |o| {
            condition_true(o, "RolledBack")
                && phase(o) == "Running"
                && deployed_hash(o) == v1
                && status(o)["deployment"]["startedFrom"] == "savepoint"
        },
    )
    .await;
    assert_eq!(status(&o)["deployment"]["image"], template("v1"));
    eprintln!(
        "rolled back: {}",
        condition(&o, "RolledBack").unwrap()["message"]
    );

    job.image = template("v2");
    job.checkpoint_interval = "1s";
    job.readiness_timeout = "60s";
    job.apply(env).unwrap();
    let o = wait_job(env, &job, "v2 promoted", Duration::from_secs(150), |o| {
        promoted(o, &v1) && status(o)["deployment"]["image"] == template("v2").as_str()
    })
    .await;
    assert_eq!(status(&o)["deployment"]["startedFrom"], "savepoint");
    wait_finished(env, &job).await;
    let got = read_output(env, &job.bucket, &job.name).await.unwrap();
    check_exactly_once(&got, &job.expected()).unwrap();
    let v2_lines = revision_2_records(env, &job).await;
    assert!(v2_lines > 0, "no window closed by v2");
    eprintln!(
        "exactly-once: {} aggregates, {v2_lines} closed by v2",
        got.len()
    );
}

/// e. Shadow on real images (v1 → v2 through a warm standby), then suspend with a savepoint,
/// resume from it, and `kubectl scale` to 2 subtasks; every window once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e_shadow_suspend_resume_and_scale() {
    let env = env().await;
    let mut job = template_job(env, "shadow", 150_000, 1_500).await;
    job.strategy = "Shadow";
    let v1 = start(env, &job).await;

    job.image = template("v2");
    job.apply(env).unwrap();
    let o = wait_job(
        env,
        &job,
        "v2 promoted through a standby",
        Duration::from_secs(150),
        |o| promoted(o, &v1),
    )
    .await;
    assert_eq!(status(&o)["deployment"]["image"], template("v2"));
    let v2 = deployed_hash(&o);

    job.state = "suspended";
    job.apply(env).unwrap();
    wait_job(env, &job, "Suspended with a savepoint", TIMEOUT, |o| {
        phase(o) == "Suspended" && status(o)["lastSavepoint"]["path"].is_string()
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(env.client().await.unwrap(), &job.ns);
    poll_until(
        "no runtime pod while suspended",
        TIMEOUT,
        Duration::from_millis(250),
        || async {
            let lp =
                ListParams::default().labels("streamjob.io/job=shadow,streamjob.io/role=runtime");
            Ok(pods.list(&lp).await?.items.is_empty().then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", dump(env, &job.ns)));

    job.state = "running";
    job.apply(env).unwrap();
    wait_job(env, &job, "resumed from the savepoint", TIMEOUT, |o| {
        running_with_checkpoint(o) && status(o)["deployment"]["startedFrom"] == "savepoint"
    })
    .await;

    env.kubectl_ok(&["scale", "sj/shadow", "-n", &job.ns, "--replicas=2"], None)
        .unwrap();
    job.parallelism = 2; // what Git would now say
    let o = wait_job(
        env,
        &job,
        "promoted on 2 subtasks",
        Duration::from_secs(150),
        |o| promoted(o, &v2) && status(o)["deployment"]["parallelism"] == 2,
    )
    .await;
    assert_eq!(status(&o)["deployment"]["startedFrom"], "savepoint");
    wait_finished(env, &job).await;
    let got = read_output(env, &job.bucket, &job.name).await.unwrap();
    check_exactly_once(&got, &job.expected()).unwrap();
    eprintln!("exactly-once: {} aggregates", got.len());
}

/// f. A memory spike in the job (`v2-oom`: the template's v2 allocating past 20,000 records, once
/// per pod): the runtime container killed by its memory limit (the chart's default
/// `runtimeResources`, 2Gi), restarted in its pod, resumed from its last checkpoint; every window
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f_oom_killed_runtime_recovers_exactly_once() {
    let env = env().await;
    let mut job = template_job(env, "spike", 60_000, 2_000).await;
    job.image = template("v2-oom");
    job.apply(env).unwrap();
    let pods: Api<Pod> = Api::namespaced(env.client().await.unwrap(), &job.ns);
    let t0 = Instant::now();
    let killed = poll_until(
        "the runtime container OOMKilled and restarted",
        Duration::from_secs(180),
        Duration::from_millis(250),
        || async {
            let lp =
                ListParams::default().labels("streamjob.io/job=spike,streamjob.io/role=runtime");
            let found = pods.list(&lp).await?.items.into_iter().find_map(|p| {
                let cs = p.status?.container_statuses?.into_iter().next()?;
                let last = cs.last_state?.terminated?;
                (cs.restart_count >= 1 && last.reason.as_deref() == Some("OOMKilled"))
                    .then_some((cs.restart_count, last.exit_code))
            });
            Ok(found)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", dump(env, &job.ns)));
    eprintln!(
        "OOMKilled (exit {}) and restarted {} time(s) {:?} after apply",
        killed.1,
        killed.0,
        t0.elapsed()
    );
    wait_finished(env, &job).await;
    let got = read_output(env, &job.bucket, &job.name).await.unwrap();
    check_exactly_once(&got, &job.expected()).unwrap();
    eprintln!("exactly-once after the OOM kill: {} aggregates", got.len());
}

async fn wait_finished(env: &TestEnv, job: &Job) {
    wait_job(env, job, "Finished", Duration::from_secs(300), |o| {
        assert_ne!(phase(o), "Failed", "job failed: {}", status(o));
        phase(o) == "Finished"
    })
    .await;
}

/// A probe pod (`e2e/node/probe.c`) in `ns`, Running, compliant with `restricted`.
async fn probe_pod(env: &TestEnv, ns: &str) -> String {
    let manifest = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "probe", "namespace": ns, "labels": {"app": "probe"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "probe",
                "image": format!("{}:{}", images::PROBE.0, images::PROBE.1),
                "imagePullPolicy": "Never",
                "args": ["serve"],
                "securityContext": {"allowPrivilegeEscalation": false,
                                    "readOnlyRootFilesystem": true,
                                    "capabilities": {"drop": ["ALL"]}}
            }]
        }
    });
    env.kubectl_ok(&["apply", "-f", "-"], Some(&manifest.to_string()))
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(env.client().await.unwrap(), ns);
    poll_until(
        "probe pod Running",
        TIMEOUT,
        Duration::from_millis(250),
        || async {
            let p = pods.get("probe").await?;
            Ok((p.status.and_then(|s| s.phase).as_deref() == Some("Running")).then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", dump(env, ns)));
    "probe".into()
}

/// `probe ARGS…` exec'd in the probe pod of `ns`: (exit code, stdout).
fn probe(env: &TestEnv, ns: &str, args: &[&str]) -> (i32, String) {
    let mut full = vec!["exec", "-n", ns, "probe", "--", "/probe"];
    full.extend_from_slice(args);
    let out = env.kubectl(&full, None).unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
    )
}

/// The job's NetworkPolicy enforced by the node both ways (a pod elsewhere reaches the metrics
/// port, never the control port, which the operator reaches: the job runs), Services resolved
/// through CoreDNS from a pod, and `kubectl port-forward` into a pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_network_policy_dns_and_port_forward() {
    let env = env().await;
    let op_ns = operator(env).await;
    let mut job = new_job(env, "fenced").await;
    job.image = format!("{}:{}", images::RUNTIME.0, images::RUNTIME.1);
    job.parallelism = 2;
    job.workers = 1;
    job.count = 2_000_000;
    job.rate = 500;
    // under enforcement: the operator reaches the control port and the pods each other
    start(env, &job).await;
    let pods: Api<Pod> = Api::namespaced(env.client().await.unwrap(), &job.ns);
    let runtime = pods
        .list(&ListParams::default().labels("streamjob.io/job=fenced,streamjob.io/role=runtime"))
        .await
        .unwrap()
        .items
        .into_iter()
        .next()
        .expect("the job's runtime pod");
    let ip = runtime.status.and_then(|s| s.pod_ip).expect("pod ip");
    let node = env.real_node.as_ref().unwrap();
    let chain = format!("chain in_{} {{", ip.replace('.', "_"));
    poll_until(
        "the job's policy in the node's table",
        TIMEOUT,
        Duration::from_millis(200),
        || async {
            Ok(std::fs::read_to_string(&node.netpol_applied)
                .is_ok_and(|t| t.contains(&chain))
                .then_some(()))
        },
    )
    .await
    .unwrap();

    // the control port listens (the node itself is not filtered) ...
    let control = format!("{ip}:8081");
    tokio::net::TcpStream::connect(&control)
        .await
        .unwrap_or_else(|e| panic!("control port {control} from the node: {e}"));
    // ... but a pod in another namespace gets no answer there; the metrics port is open to it
    let probe_ns = env.restricted_namespace("probe").await.unwrap();
    probe_pod(env, &probe_ns).await;
    let (rc, out) = probe(env, &probe_ns, &["connect", &ip, "9249", "3000"]);
    assert_eq!(
        (rc, out.as_str()),
        (0, "open"),
        "metrics port from another namespace"
    );
    let (rc, out) = probe(env, &probe_ns, &["connect", &ip, "8081", "3000"]);
    assert_eq!(
        (rc, out.as_str()),
        (2, "timeout"),
        "control port from another namespace"
    );
    eprintln!("NetworkPolicy: metrics open, control port dropped for a pod in {probe_ns}");

    // Services through CoreDNS: the search path and a fully qualified name, then a connection
    let (rc, out) = probe(env, &probe_ns, &["resolve", "kubernetes.default"]);
    assert_eq!(
        (rc, out.as_str()),
        (0, "10.0.0.1"),
        "kubernetes.default via the search path"
    );
    let svc = env
        .kubectl_ok(
            &["get", "svc", "-n", op_ns, "-o", "jsonpath={.items[0].metadata.name} {.items[0].spec.clusterIP} {.items[0].spec.ports[0].port}"],
            None,
        )
        .unwrap();
    let [svc_name, cluster_ip, port] = svc.split_whitespace().collect::<Vec<_>>()[..] else {
        panic!("operator Service: {svc:?}");
    };
    let fqdn = format!("{svc_name}.{op_ns}.svc.cluster.local");
    let (rc, out) = probe(env, &probe_ns, &["resolve", &fqdn]);
    assert_eq!((rc, out.as_str()), (0, cluster_ip), "{fqdn}");
    let (rc, out) = probe(env, &probe_ns, &["connect", cluster_ip, port, "3000"]);
    assert_eq!(
        (rc, out.as_str()),
        (0, "open"),
        "the operator's metrics Service"
    );
    let (rc, out) = probe(env, &probe_ns, &["resolve", "no-such-service"]);
    assert_eq!((rc, out.as_str()), (1, "not found"));
    eprintln!("DNS: kubernetes.default and {fqdn} resolved through CoreDNS");

    // port-forward through the API server, the kubelet and containerd into a pod's network
    // namespace, where it dials the pod's loopback: the probe, the runtime's metrics (it listens
    // on every interface of its pod) and the operator's readiness
    let (child, local) = port_forward(env, &probe_ns, "pod/probe", 8080);
    let mut stream = tokio::net::TcpStream::connect(format!("127.0.0.1:{local}"))
        .await
        .unwrap();
    let mut answer = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut stream, &mut answer)
        .await
        .unwrap();
    let stderr = stop_port_forward(child);
    assert_eq!(
        answer, "streamjob-e2e-probe\n",
        "through port-forward; kubectl: {stderr}"
    );
    let runtime_pod = format!("pod/{}", runtime.metadata.name.clone().unwrap());
    let (child, local) = port_forward(env, &job.ns, &runtime_pod, 9249);
    let metrics = reqwest::get(format!("http://127.0.0.1:{local}/metrics")).await;
    let stderr = stop_port_forward(child);
    let metrics = metrics.unwrap().text().await.unwrap();
    assert!(
        metrics.contains("streamjob_records_out_total"),
        "the runtime's /metrics through port-forward; kubectl: {stderr}; got: {}",
        metrics.chars().take(300).collect::<String>()
    );
    let (child, local) = port_forward(
        env,
        op_ns,
        &format!("svc/{svc_name}"),
        port.parse().unwrap(),
    );
    let ready = reqwest::get(format!("http://127.0.0.1:{local}/readyz")).await;
    let stderr = stop_port_forward(child);
    assert_eq!(
        ready.map(|r| r.status().as_u16()).ok(),
        Some(200),
        "the operator's /readyz through port-forward; kubectl: {stderr}"
    );
    eprintln!("port-forward: the probe, the runtime's /metrics and the operator's /readyz");
    // a long job: stop it so that the next tests have the node's cores
    env.kubectl_ok(
        &["delete", "sj", &job.name, "-n", &job.ns, "--wait=false"],
        None,
    )
    .unwrap();
}

/// `kubectl port-forward -n NS TARGET :PORT`: the running kubectl and its local port.
fn port_forward(env: &TestEnv, ns: &str, target: &str, port: u16) -> (std::process::Child, String) {
    let mut pf = env.kubectl_command();
    pf.args(["port-forward", "-n", ns, target, &format!(":{port}")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = pf.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let line = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("kubectl port-forward {target} printed no local port"));
    let local = line
        .strip_prefix("Forwarding from 127.0.0.1:")
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("port-forward {target} said: {line}"))
        .to_string();
    (child, local)
}

/// Ends a port-forward; its standard error, for messages.
fn stop_port_forward(mut child: std::process::Child) -> String {
    let _ = child.kill();
    child
        .wait_with_output()
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        .unwrap_or_default()
}

fn dump(env: &TestEnv, ns: &str) -> String {
    env.kubectl(&["get", "sj,pods,events", "-n", ns, "-o", "wide"], None)
        .map(|o| {
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        })
        .unwrap_or_default()
}
