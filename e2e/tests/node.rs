//! e2e on a **real node** (issue #36): containerd + runc + the kubelet run the project's images
//! as containers, built offline by `e2e/scripts/build-images.sh`. Runs only inside
//! `e2e/scripts/node-netns.sh` (`cargo xtask node-test` does both); elsewhere every test here
//! fails at once, saying so.
//!
//! One environment per test binary (control plane, MinIO, the node); run with `--test-threads=1`.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::DynamicObject;
use kube::api::ListParams;
use streamjob_e2e::fixtures::{self, EnvOptions, TestEnv};
use streamjob_e2e::node::images;
use streamjob_e2e::scenario::{
    Job, SECRET, check_exactly_once, condition, condition_true, deployed_hash, install_operator,
    phase, read_output, sj_api, status,
};
use streamjob_e2e::wait::poll_until;

const TIMEOUT: Duration = Duration::from_secs(120);

async fn env() -> &'static TestEnv {
    fixtures::init_test_tracing();
    match fixtures::shared(|| {
        let mut opts = EnvOptions::new(
            env!("CARGO_BIN_EXE_process-kubelet"),
            env!("CARGO_BIN_EXE_e2e-echo-server"),
        );
        opts.real_node_images = Some(images::archives().expect("image archives"));
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
    job.apply(env).unwrap();
    let o = wait_job(
        env,
        &job,
        "running with a checkpoint",
        TIMEOUT,
        running_with_checkpoint,
    )
    .await;
    let v1 = deployed_hash(&o);
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
