//! g. A Flink job on the real node, from images built as a Flink user builds them: the test job
//! FROM our Flink 2.3.0 base image (laid out and started like the official `flink:` image), a
//! JobManager and 2 TaskManagers (parallelism 2, the keyed count across them), state and output
//! on MinIO through Flink's own S3 plugin (`ENABLE_BUILT_IN_PLUGINS`, as users enable it), the
//! operator's NetworkPolicy enforced by the node. A savepoint by nonce; a change of the max
//! parallelism refused by the pre-check with the job untouched; then an image bump in place: the
//! check pod's init container copies the checker from the flink-checker image and the checker
//! reads the S3 savepoint with the job's plugins. Before it, the JobManager pod is deleted and
//! the one made again resumes from the newest checkpoint on MinIO. Every number in exactly one committed
//! line, each key's running count exactly 1..=N across both images.

use std::collections::BTreeMap;

use streamjob_e2e::flink::{TEST_JOB_CLASS, check_counting_output, counting_job_args};
use streamjob_operator::engine::flink::plan::job_id;

use super::*;

const VERSION: &str = "2.3.0";
const RECORDS: u64 = 32_000;
const KEYS: u64 = 8;
const FLINK_TIMEOUT: Duration = Duration::from_secs(180);

/// The StreamJob: `tag` of the test job's image, `revision` written into every line, `rate`
/// records per second per source subtask (0: run out), `nonce` a savepoint request, `extra` more
/// arguments of the test job.
fn manifest(
    job: &Job,
    (tag, revision): (&str, &str),
    rate: u32,
    nonce: i64,
    s3: &str,
    extra: &[&str],
) -> String {
    let root = format!("s3://{}/flink", job.bucket);
    let args = counting_job_args(&format!("{root}/out"), RECORDS, KEYS, rate, revision, extra);
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
            "upgrade": {"mode": "savepoint", "readinessTimeout": "3m"},
            // the official images' way to enable an optional plugin of opt/
            "podTemplate": {"spec": {"containers": [{
                "name": "flink-main-container",
                "env": [{"name": "ENABLE_BUILT_IN_PLUGINS",
                         "value": format!("flink-s3-fs-hadoop-{VERSION}.jar")}],
            }]}},
            "flink": {
                "version": VERSION,
                "job": {"entryClass": TEST_JOB_CLASS, "args": args},
                "jobManager": {"resources": {"memory": "1024Mi", "cpu": "250m"}},
                "taskManager": {"replicas": 2, "taskSlots": 1,
                                "resources": {"memory": "1280Mi", "cpu": "250m"}},
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

/// Every committed object under `flink/out/` of the bucket, downloaded into `dir` (Flink's S3
/// writer makes an object visible only when a checkpoint commits it).
async fn download_output(env: &TestEnv, job: &Job, dir: &std::path::Path) -> usize {
    let objects = env.s3().list(&job.bucket, "flink/out").await.unwrap();
    for o in &objects {
        let path = dir.join(&o.key);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, env.s3().read(&job.bucket, &o.key).await.unwrap()).unwrap();
    }
    objects.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g_flink_job_on_the_flink_image_upgraded_in_place_on_s3() {
    let env = env().await;
    operator(env).await;
    let job = new_job(env, "flink").await;
    let s3 = env.s3().url.clone();
    let apply_with = |tag: &str, revision: &str, rate: u32, nonce: i64, extra: &[&str]| {
        env.kubectl_ok(
            &["apply", "-f", "-"],
            Some(&manifest(&job, (tag, revision), rate, nonce, &s3, extra)),
        )
        .expect("kubectl apply StreamJob");
    };
    let apply = |tag: &str, revision: &str, rate: u32, nonce: i64| {
        apply_with(tag, revision, rate, nonce, &[]);
    };
    let t0 = Instant::now();
    apply(VERSION, "1", 80, 0);
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
    apply(VERSION, "1", 80, 1);
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
    apply_with(VERSION, "1", 80, 1, &["--max-parallelism", "256"]);
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

    // the JobManager pod deleted: the operator makes it again under the same run, and its
    // flink-jobmanager resumes from the newest checkpoint on MinIO — not the older one status
    // recorded, whose output since would be written again — with new TaskManagers; output stays
    // exactly once (checked at the end)
    let jm = pods_with_role(env, &job, "runtime").await;
    let jm_name = jm[0].metadata.name.clone().expect("JobManager name");
    let checkpoints = format!("flink/checkpoints/{}/", job_id(&jm_name));
    let (newest, recorded) = poll_until(
        "a checkpoint on MinIO newer than the one in status",
        FLINK_TIMEOUT,
        Duration::from_millis(250),
        || async {
            let o = sj_api(env.client().await?, &job.ns).get(&job.name).await?;
            let recorded = status(&o)["lastCheckpoint"]["id"].as_u64().unwrap_or(0);
            let newest = env
                .s3()
                .list(&job.bucket, &checkpoints)
                .await?
                .iter()
                .filter_map(|o| checkpoint_number(&o.key))
                .max()
                .unwrap_or(0);
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
    // the S3 savepoint, then the job moves to the new image and runs out
    let t_bump = Instant::now();
    apply(&format!("{VERSION}-r2"), "2", 200, 1);
    let checked = std::sync::atomic::AtomicBool::new(false);
    poll_until(
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
            Ok(promoted(&o, &first).then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", dump(env, &job.ns)));
    eprintln!("image bump promoted {:?} after apply", t_bump.elapsed());
    assert!(
        checked.load(std::sync::atomic::Ordering::Relaxed),
        "a check pod whose init container copied the checker in was seen"
    );
    wait_finished(env, &job).await;

    let dir = env.run_dir.join("flink-output").join(&job.ns);
    let objects = download_output(env, &job, &dir).await;
    let revisions: BTreeMap<String, usize> =
        check_counting_output(&dir, RECORDS, KEYS).expect("every number once, counts 1..=N");
    eprintln!("exactly-once: {objects} committed objects, lines per revision {revisions:?}");
    for r in ["1", "2"] {
        assert!(
            revisions.contains_key(r),
            "revision {r} wrote lines: {revisions:?}"
        );
    }
}
