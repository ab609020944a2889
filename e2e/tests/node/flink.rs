//! g. A Flink job on the real node, from images built as a Flink user builds them: the test job
//! FROM our Flink 2.3.0 base image (1.20.0 in the full suite), laid out and started like the
//! official `flink:` image; a JobManager and 2 TaskManagers (parallelism 2, the keyed count
//! across them), state and output on MinIO through Flink's own S3 plugin
//! (`ENABLE_BUILT_IN_PLUGINS`, as users enable it), the operator's NetworkPolicy enforced by the
//! node. A savepoint by nonce; a change of the max parallelism refused by the pre-check with the
//! job untouched; a TaskManager OOM-killed by its container's memory limit (the job leaks native
//! memory on request), replaced while the operator's pod is deleted too; the JobManager pod
//! deleted (the operator's pod right after) and the one made again resuming from the newest
//! checkpoint on MinIO; then an image bump in place: the check pod's init container copies the
//! checker from the flink-checker image and the checker reads the S3 savepoint with the job's
//! plugins; then the new version hits a bad record and crash-loops (no savepoint can be taken),
//! and its fix is applied with `last-state`: an incompatible one refused by the pre-check against
//! the latest checkpoint, the good one restored from the newest checkpoint on MinIO
//! ([`last_state`]). Every number in exactly one committed line, each key's running count
//! exactly 1..=N across the three revisions.

use std::collections::BTreeMap;

use streamjob_e2e::flink::{TEST_JOB_CLASS, check_counting_output, counting_job_args};
use streamjob_operator::engine::flink::plan::job_id;

use super::*;

#[path = "flink/last_state.rs"]
mod last_state;

const RECORDS: u64 = 32_000;
const KEYS: u64 = 8;
const FLINK_TIMEOUT: Duration = Duration::from_secs(180);
/// Once this file exists in a TaskManager's container, the test job's throttle there leaks
/// native memory until the kernel kills the TaskManager (`--leak-file`).
const LEAK_FILE: &str = "/tmp/streamjob-leak";
/// Once this file exists in a TaskManager's container, every record through the test job's
/// throttle there fails (`--poison-file`): the job restarts again and again.
const POISON_FILE: &str = "/tmp/streamjob-poison";

/// The StreamJob: `tag` of the test job's image, `revision` written into every line, `rate`
/// records per second per source subtask (0: run out), `nonce` a savepoint request, `mode` its
/// upgrade mode, `extra` more arguments of the test job.
fn manifest(
    job: &Job,
    (tag, revision): (&str, &str),
    (rate, nonce, mode): (u32, i64, &str),
    s3: &str,
    extra: &[&str],
) -> String {
    // the test job's image tags are `<Flink version>` and `<Flink version>-r2`
    let version = tag.split('-').next().unwrap_or(tag);
    let root = format!("s3://{}/flink", job.bucket);
    let extra: Vec<&str> = ["--leak-file", LEAK_FILE, "--poison-file", POISON_FILE]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    let args = counting_job_args(
        &format!("{root}/out"),
        RECORDS,
        KEYS,
        rate,
        revision,
        &extra,
    );
    serde_json::json!({
        "apiVersion": "streamjob.io/v1alpha1",
        "kind": "StreamJob",
        "metadata": {"name": job.name, "namespace": job.ns},
        "spec": {
            "engine": "flink",
            "image": format!("{}:{tag}", images::FLINK_TEST_JOB),
            "imagePullPolicy": "Never",
            "parallelism": 2,
            "checkpoints": {"dir": format!("{root}/checkpoints"), "interval": "2s", "retained": 3},
            "savepoints": {
                "dir": format!("{root}/savepoints"),
                "triggerNonce": nonce,
                "history": {"maxCount": 2},
            },
            "storage": {"s3": {
                "endpoint": s3,
                "allowHttp": true,
                "credentialsSecret": {"name": SECRET},
            }},
            "upgrade": {"mode": mode, "readinessTimeout": "3m"},
            // the official images' way to enable an optional plugin of opt/
            "podTemplate": {"spec": {"containers": [{
                "name": "flink-main-container",
                "env": [{"name": "ENABLE_BUILT_IN_PLUGINS",
                         "value": format!("flink-s3-fs-hadoop-{version}.jar")}],
            }]}},
            "flink": {
                "version": version,
                "job": {"entryClass": TEST_JOB_CLASS, "args": args},
                "jobManager": {"resources": {"memory": "1024Mi", "cpu": "250m"}},
                "taskManager": {"replicas": 2, "taskSlots": 1,
                                "resources": {"memory": "1280Mi", "cpu": "250m"},
                                // a role's own template, over spec.podTemplate
                                "podTemplate": {"metadata": {"labels": {"tier": "spot"}}}},
            },
        },
    })
    .to_string()
}

/// The job's pods with `role` (`runtime`: the JobManager, `worker`: TaskManagers, `plan`).
async fn pods_with_role(env: &TestEnv, job: &Job, role: &str) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(env.client().await.unwrap(), &job.ns);
    pods.list(&ListParams::default().labels(&format!(
        "streamjob.io/job={},streamjob.io/role={role}",
        job.name
    )))
    .await
    .unwrap()
    .items
}

fn running(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// The check pod's init container `install-checker` ended with exit 0 (the checker copied in).
fn checker_installed(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_ref())
        .into_iter()
        .flatten()
        .any(|c| {
            c.name == "install-checker"
                && c.state
                    .as_ref()
                    .and_then(|s| s.terminated.as_ref())
                    .is_some_and(|t| t.exit_code == 0)
        })
}

/// `N` of an object key `…/chk-N/_metadata` (a completed checkpoint of Flink's).
fn checkpoint_number(key: &str) -> Option<u64> {
    let dir = key.strip_suffix("/_metadata")?;
    dir.rsplit('/').next()?.strip_prefix("chk-")?.parse().ok()
}

/// Every committed object under `prefix` of `bucket`, downloaded into `dir` (Flink's S3 writer
/// makes an object visible only when a checkpoint commits it).
async fn download_output(
    env: &TestEnv,
    bucket: &str,
    prefix: &str,
    dir: &std::path::Path,
) -> usize {
    let objects = env.s3().list(bucket, prefix).await.unwrap();
    for o in &objects {
        let path = dir.join(&o.key);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, env.s3().read(bucket, &o.key).await.unwrap()).unwrap();
    }
    objects.len()
}

/// The operator's pod deleted (SIGTERM: it hands its Lease back); its Deployment makes another.
async fn delete_operator_pod(env: &'static TestEnv) {
    let operator_ns = operator(env).await;
    env.kubectl_ok(
        &[
            "delete",
            "pod",
            "-n",
            operator_ns,
            "-l",
            "app.kubernetes.io/name=streamjob-operator",
            "--wait=false",
        ],
        None,
    )
    .expect("kubectl delete the operator's pod");
}

/// The newest checkpoint in the job's status.
async fn recorded_checkpoint(env: &TestEnv, job: &Job) -> u64 {
    let o = sj_api(env.client().await.unwrap(), &job.ns)
        .get(&job.name)
        .await
        .unwrap();
    status(&o)["lastCheckpoint"]["id"].as_u64().unwrap_or(0)
}

/// The newest completed checkpoint (with its `_metadata`) of the run of JobManager `jm` on
/// MinIO: Flink's own word, ahead of the status the operator copies it into.
async fn newest_checkpoint(env: &TestEnv, job: &Job, jm: &str) -> u64 {
    let checkpoints = format!("flink/checkpoints/{}/", job_id(jm));
    env.s3()
        .list(&job.bucket, &checkpoints)
        .await
        .unwrap()
        .iter()
        .filter_map(|o| checkpoint_number(&o.key))
        .max()
        .unwrap_or(0)
}

/// `file` created in a running TaskManager's container (one of the test job's triggers, which
/// its operators there look for); that TaskManager's pod.
async fn touch_in_a_task_manager(env: &TestEnv, job: &Job, file: &str) -> Pod {
    let tm = pods_with_role(env, job, "worker")
        .await
        .into_iter()
        .find(running)
        .expect("a running TaskManager");
    let tm_name = tm.metadata.name.clone().expect("TaskManager name");
    let touch = [
        "exec",
        "-n",
        &job.ns,
        &tm_name,
        "-c",
        "taskmanager",
        "--",
        "touch",
        file,
    ];
    env.kubectl_ok(&touch, None)
        .unwrap_or_else(|e| panic!("kubectl exec: touch {file} in {tm_name}: {e}"));
    tm
}

/// A TaskManager OOM-killed by its container's memory limit: the test job's throttle on it
/// allocates native memory once [`LEAK_FILE`] exists there, outside every limit the JVM knows,
/// so only the kernel stops it (`OOMKilled`, exit 137; the pod Failed, as TaskManagers never
/// restart in place). The operator replaces the pod and names the kernel's reason in a
/// `WorkerReplaced` event; its own pod is deleted right after the kill, so the one the
/// Deployment makes again finishes the recovery. Flink restarts the job from its latest
/// checkpoint on the new TaskManager (exactly once: checked at the end of the test).
async fn oom_kill_a_task_manager(env: &'static TestEnv, job: &Job) {
    let jm = pods_with_role(env, job, "runtime").await;
    let jm_name = jm[0].metadata.name.clone().expect("JobManager name");
    let t0 = Instant::now();
    let tm = touch_in_a_task_manager(env, job, LEAK_FILE).await;
    let tm_name = tm.metadata.name.clone().expect("TaskManager name");
    let pods: Api<Pod> = Api::namespaced(env.client().await.unwrap(), &job.ns);
    let exit = poll_until(
        "the TaskManager's container OOMKilled",
        TIMEOUT,
        Duration::from_millis(100),
        || async {
            let Some(pod) = pods.get_opt(&tm_name).await? else {
                return Err(streamjob_e2e::error::Error::Other(format!(
                    "TaskManager {tm_name} gone before it was seen OOMKilled"
                )));
            };
            let terminated = pod
                .status
                .and_then(|s| s.container_statuses)
                .into_iter()
                .flatten()
                .find(|c| c.name == "taskmanager")
                .and_then(|c| c.state?.terminated);
            Ok(terminated
                .filter(|t| t.reason.as_deref() == Some("OOMKilled"))
                .map(|t| t.exit_code))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", dump(env, &job.ns)));
    let killed_after = t0.elapsed();
    // at most one checkpoint in flight at the kill (Flink's default) can still complete
    // without the dead TaskManager: one past it was taken after the restart
    let recovered_at = newest_checkpoint(env, job, &jm_name).await + 2;
    delete_operator_pod(env).await;
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(env.client().await.unwrap(), &job.ns);
    let event = poll_until(
        "a WorkerReplaced event naming the OOM kill, and a checkpoint after it",
        FLINK_TIMEOUT,
        Duration::from_millis(250),
        || async {
            let replaced = events
                .list(&ListParams::default().fields("reason=WorkerReplaced"))
                .await?
                .items
                .into_iter()
                .filter_map(|e| e.message)
                .find(|m| m.contains(&tm_name) && m.contains("OOMKilled"));
            let checkpointed = recorded_checkpoint(env, job).await >= recovered_at;
            let replacement = pods_with_role(env, job, "worker")
                .await
                .iter()
                .any(|p| p.metadata.uid != tm.metadata.uid && running(p));
            Ok(replaced.filter(|_| checkpointed && replacement))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", dump(env, &job.ns)));
    eprintln!(
        "TaskManager OOMKilled (exit {exit}) {killed_after:?} after the leak began; replaced, \
         the operator's pod deleted, a new checkpoint {:?} after the kill: {event}",
        t0.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g_flink_job_on_the_flink_image_upgraded_in_place_on_s3() {
    flink_job_on_the_real_node("2.3.0").await;
}

/// g on Flink 1.20 (its own base image, test job and pre-check): the same story.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full suite: cargo xtask e2e --full"]
async fn g_flink_1_20_job_on_the_flink_image_upgraded_in_place_on_s3() {
    flink_job_on_the_real_node("1.20.0").await;
}

async fn flink_job_on_the_real_node(version: &str) {
    let env = env().await;
    operator(env).await;
    let job = new_job(env, "flink").await;
    let s3 = env.s3().url.clone();
    let apply_in = |mode: &str, (tag, revision): (&str, &str), rate: u32, extra: &[&str]| {
        env.kubectl_ok(
            &["apply", "-f", "-"],
            Some(&manifest(
                &job,
                (tag, revision),
                (rate, 1, mode),
                &s3,
                extra,
            )),
        )
        .expect("kubectl apply StreamJob");
    };
    let apply_with = |tag: &str, revision: &str, rate: u32, nonce: i64, extra: &[&str]| {
        env.kubectl_ok(
            &["apply", "-f", "-"],
            Some(&manifest(
                &job,
                (tag, revision),
                (rate, nonce, "savepoint"),
                &s3,
                extra,
            )),
        )
        .expect("kubectl apply StreamJob");
    };
    let apply = |tag: &str, revision: &str, rate: u32, nonce: i64| {
        apply_with(tag, revision, rate, nonce, &[]);
    };
    let t0 = Instant::now();
    apply(version, "1", 80, 0);
    let o = wait_job(
        env,
        &job,
        "running with a checkpoint",
        FLINK_TIMEOUT,
        running_with_checkpoint,
    )
    .await;
    let first = deployed_hash(&o);
    eprintln!(
        "Flink job running with a checkpoint {:?} after apply",
        t0.elapsed()
    );
    let jm = pods_with_role(env, &job, "runtime").await;
    let tms = pods_with_role(env, &job, "worker").await;
    assert_eq!(jm.len(), 1, "one JobManager: {}", dump(env, &job.ns));
    assert_eq!(
        tms.iter().filter(|p| running(p)).count(),
        2,
        "two TaskManagers Running: {}",
        dump(env, &job.ns)
    );
    for pod in jm.iter().chain(&tms) {
        let (uid, _) = container_process(env, pod);
        assert_eq!(uid, 9999, "Flink runs as the image's flink user");
    }
    // spec.flink.taskManager.podTemplate reached the TaskManagers only
    let tier = |p: &Pod| {
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("tier"))
            .cloned()
    };
    assert!(
        tms.iter().all(|p| tier(p).as_deref() == Some("spot")),
        "TaskManagers labelled tier=spot"
    );
    assert_eq!(
        tier(&jm[0]),
        None,
        "the JobManager has no TaskManager label"
    );

    // the operator's policy is enforced: a pod of another namespace cannot reach the
    // JobManager's RPC port, which the TaskManagers use (the job runs)
    let jm_ip = jm[0]
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .expect("JobManager pod IP");
    let probe_ns = env.restricted_namespace("probe").await.unwrap();
    probe_pod(env, &probe_ns).await;
    let (rc, out) = probe(env, &probe_ns, &["connect", &jm_ip, "6123", "3000"]);
    assert_ne!(rc, 0, "RPC port reached from another namespace: {out}");

    // a savepoint by nonce on S3, the job untouched
    apply(version, "1", 80, 1);
    let o = wait_job(env, &job, "savepoint for nonce 1", FLINK_TIMEOUT, |o| {
        status(o)["lastHandledNonce"] == 1
            && status(o)["pendingSavepoint"].is_null()
            && status(o)["lastSavepoint"]["path"].is_string()
    })
    .await;
    let savepoint = status(&o)["lastSavepoint"]["path"]
        .as_str()
        .unwrap()
        .to_string();
    let key = savepoint
        .strip_prefix(&format!("s3://{}/", job.bucket))
        .unwrap_or_else(|| panic!("savepoint {savepoint} on the job's bucket"));
    let written = env
        .s3()
        .list(&job.bucket, key.trim_end_matches('/'))
        .await
        .unwrap();
    assert!(
        written.iter().any(|o| o.key.ends_with("/_metadata")),
        "savepoint {savepoint} written to MinIO: {:?}",
        written.iter().map(|o| &o.key).collect::<Vec<_>>()
    );
    assert_eq!(
        pods_with_role(env, &job, "runtime").await[0].metadata.uid,
        jm[0].metadata.uid,
        "the JobManager stays"
    );

    // a change Flink could not restore (the max parallelism, which fixes the key groups) is
    // refused by the check pod's verdict, read from a real container, before the job is touched
    let t_refused = Instant::now();
    apply_with(version, "1", 80, 1, &["--max-parallelism", "256"]);
    let o = wait_job(env, &job, "the pre-check's refusal", FLINK_TIMEOUT, |o| {
        status(o)["upgrade"]["step"]
            .as_str()
            .is_some_and(|s| s.ends_with("/Blocked"))
            && condition_true(o, "UpgradeBlocked")
    })
    .await;
    let message = status(&o)["upgrade"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(message.contains("max parallelism"), "refusal: {message:?}");
    assert_eq!(deployed_hash(&o), first, "the running version stays");
    assert_eq!(
        pods_with_role(env, &job, "runtime").await[0].metadata.uid,
        jm[0].metadata.uid,
        "the JobManager was not touched"
    );
    poll_until(
        "the check pod deleted",
        TIMEOUT,
        Duration::from_millis(250),
        || async {
            Ok(pods_with_role(env, &job, "plan")
                .await
                .is_empty()
                .then_some(()))
        },
    )
    .await
    .unwrap();
    eprintln!(
        "refused in {:?}, the job untouched: {message}",
        t_refused.elapsed()
    );

    oom_kill_a_task_manager(env, &job).await;

    // the JobManager pod deleted, then the operator's: the operator makes it again under the
    // same run, and its
    // flink-jobmanager resumes from the newest checkpoint on MinIO — not the older one status
    // recorded, whose output since would be written again — with new TaskManagers; output stays
    // exactly once (checked at the end)
    let jm = pods_with_role(env, &job, "runtime").await;
    let jm_name = jm[0].metadata.name.clone().expect("JobManager name");
    let (newest, recorded) = poll_until(
        "a checkpoint on MinIO newer than the one in status",
        FLINK_TIMEOUT,
        Duration::from_millis(250),
        || async {
            let recorded = recorded_checkpoint(env, &job).await;
            let newest = newest_checkpoint(env, &job, &jm_name).await;
            Ok((newest > recorded).then_some((newest, recorded)))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", dump(env, &job.ns)));
    let t_jm = Instant::now();
    env.kubectl_ok(
        &["delete", "pod", &jm_name, "-n", &job.ns, "--wait=false"],
        None,
    )
    .expect("kubectl delete the JobManager pod");
    // and the operator's pod right after: the one made again recreates the JobManager
    delete_operator_pod(env).await;
    let new_jm = poll_until(
        "a checkpoint of the JobManager made again",
        FLINK_TIMEOUT,
        Duration::from_millis(250),
        || async {
            let o = sj_api(env.client().await?, &job.ns).get(&job.name).await?;
            let pods = pods_with_role(env, &job, "runtime").await;
            let made_again = pods
                .iter()
                .find(|p| p.metadata.uid != jm[0].metadata.uid && running(p))
                .cloned();
            let checkpointed = status(&o)["lastCheckpoint"]["id"].as_u64().unwrap_or(0) > newest;
            Ok(made_again.filter(|_| checkpointed && status(&o)["phase"] == "Running"))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", dump(env, &job.ns)));
    let jm_recovery = t_jm.elapsed();
    let log = env
        .kubectl_ok(&["logs", "-n", &job.ns, &jm_name], None)
        .expect("the new JobManager's log");
    let resumed = log
        .lines()
        .find_map(|l| {
            l.split("resuming from the newest checkpoint of this run, ")
                .nth(1)
        })
        .unwrap_or_else(|| panic!("flink-jobmanager named no checkpoint of the run:\n{log}"));
    let resumed_id = checkpoint_number(&format!("{}/_metadata", resumed.trim()))
        .unwrap_or_else(|| panic!("not a checkpoint: {resumed}"));
    assert!(
        resumed_id >= newest,
        "the new JobManager {:?} resumed from checkpoint {resumed_id}; MinIO held {newest} before \
         the loss and status {recorded}",
        new_jm.metadata.uid
    );
    eprintln!(
        "JobManager pod deleted: resumed from checkpoint {resumed_id} (newest on MinIO {newest}, \
         status {recorded}), a new checkpoint {jm_recovery:?} later"
    );

    // an image bump in place: the check pod (init container from the flink-checker image) reads
    // the S3 savepoint, then the job moves to the new image (at the same rate: it must not run
    // out before it is poisoned below)
    let t_bump = Instant::now();
    let r2 = format!("{version}-r2");
    apply(&r2, "2", 80, 1);
    let checked = std::sync::atomic::AtomicBool::new(false);
    let second = poll_until(
        "the image bump promoted",
        Duration::from_secs(300),
        Duration::from_millis(250),
        || async {
            if pods_with_role(env, &job, "plan")
                .await
                .iter()
                .any(checker_installed)
            {
                checked.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            let o = sj_api(env.client().await?, &job.ns).get(&job.name).await?;
            let step = status(&o)["upgrade"]["step"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if step.ends_with("/Blocked") || step.starts_with("Rollback") {
                return Err(streamjob_e2e::error::Error::Other(format!(
                    "upgrade not made: {step}: {}",
                    status(&o)["upgrade"]["message"]
                )));
            }
            Ok(promoted(&o, &first).then(|| deployed_hash(&o)))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", dump(env, &job.ns)));
    eprintln!("image bump promoted {:?} after apply", t_bump.elapsed());
    assert!(
        checked.load(std::sync::atomic::Ordering::Relaxed),
        "a check pod whose init container copied the checker in was seen"
    );
    // revision 2 crash-loops; its fix is applied with last-state and runs out
    last_state::fix_a_crash_loop(env, &job, &second, &|mode, revision, rate, extra| {
        apply_in(mode, (&r2, revision), rate, extra)
    })
    .await;
    wait_finished(env, &job).await;

    let dir = env.run_dir.join("flink-output").join(&job.ns);
    let objects = download_output(env, &job.bucket, "flink/out", &dir).await;
    let revisions: BTreeMap<String, usize> =
        check_counting_output(&dir, RECORDS, KEYS).expect("every number once, counts 1..=N");
    eprintln!("exactly-once: {objects} committed objects, lines per revision {revisions:?}");
    for r in ["1", "2", "3"] {
        assert!(
            revisions.contains_key(r),
            "revision {r} wrote lines: {revisions:?}"
        );
    }
}

/// The value of `--name` in the test job's arguments.
fn arg<'a>(args: &'a [String], name: &str) -> &'a str {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .unwrap_or_else(|| panic!("{name} in the example's job arguments: {args:?}"))
}

/// h. `examples/flink-counting.yaml` as written, on the real node: the cluster gets what its
/// comment asks for — MinIO as the Service `minio.storage.svc:9000` (a Service without selector
/// whose EndpointSlice names the MinIO the tests run, reached through kube-proxy and CoreDNS),
/// the Secret `minio-credentials` made with the comment's `kubectl create secret`, the bucket —
/// and the file is applied unchanged. The job runs to its end: every number in exactly one
/// committed line on MinIO.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_flink_example_runs_as_written() {
    let env = env().await;
    operator(env).await;
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/flink-counting.yaml"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let example =
        streamjob_crds::v1alpha1::StreamJob::from_yaml(&text).expect("the example parses");
    let name = example.metadata.name.clone().expect("the example's name");
    let args = example
        .spec
        .flink
        .as_ref()
        .expect("spec.flink")
        .job
        .args
        .clone();
    let output = arg(&args, "--output");
    let records: u64 = arg(&args, "--records").parse().unwrap();
    let keys: u64 = arg(&args, "--keys").parse().unwrap();
    let (bucket, prefix) = output
        .strip_prefix("s3://")
        .and_then(|p| p.split_once('/'))
        .expect("the example writes to s3://bucket/prefix");

    // what the example's comment asks the cluster for
    let s3 = env.s3();
    let port = s3.url.rsplit(':').next().expect("MinIO's port");
    let _ = env.kubectl(&["create", "namespace", "storage"], None);
    let minio = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "minio", "namespace": "storage"},
         "spec": {"ports": [{"name": "s3", "port": 9000, "targetPort": port.parse::<u16>().unwrap()}]}},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {"name": "minio-e2e", "namespace": "storage",
                      "labels": {"kubernetes.io/service-name": "minio"}},
         "addressType": "IPv4",
         "ports": [{"name": "s3", "port": port.parse::<u16>().unwrap(), "protocol": "TCP"}],
         "endpoints": [{"addresses": [streamjob_e2e::cluster::host_address()],
                        "conditions": {"ready": true}}]},
    ]});
    env.kubectl_ok(&["apply", "-f", "-"], Some(&minio.to_string()))
        .expect("the minio Service");
    s3.create_bucket(bucket).await.unwrap();
    let ns = env.restricted_namespace("example").await.unwrap();
    env.kubectl_ok(
        &[
            "create",
            "secret",
            "generic",
            "minio-credentials",
            "-n",
            &ns,
            &format!("--from-literal=AWS_ACCESS_KEY_ID={}", s3.access_key),
            &format!("--from-literal=AWS_SECRET_ACCESS_KEY={}", s3.secret_key),
        ],
        None,
    )
    .expect("the credentials Secret");

    let t0 = Instant::now();
    env.kubectl_ok(&["apply", "-n", &ns, "-f", path], None)
        .expect("kubectl apply -f examples/flink-counting.yaml");
    let job = Job::new(&name, &ns, bucket);
    wait_job(
        env,
        &job,
        "Running with a checkpoint",
        FLINK_TIMEOUT,
        running_with_checkpoint,
    )
    .await;
    let running_after = t0.elapsed();
    wait_finished(env, &job).await;
    let dir = env.run_dir.join("flink-example-output");
    let objects = download_output(env, bucket, prefix, &dir).await;
    let revisions =
        check_counting_output(&dir, records, keys).expect("every number once, counts 1..=N");
    eprintln!(
        "FIGURES example: apply -> Running with a checkpoint {running_after:?}, finished \
         {:?}; exactly once: {records} records in {objects} committed objects {revisions:?}",
        t0.elapsed()
    );
}
