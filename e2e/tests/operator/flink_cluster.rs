//! Apache Flink on the control plane (issue #17, part 1): the Flink engine's cluster builder
//! (`operator/src/engine/flink/cluster.rs`) and REST client drive a real Flink 1.20 and 2.3
//! standalone application cluster as pods — the JobManager and a TaskManager as separate pods of
//! the test job's Flink image (the process kubelet runs them as JVMs from the pinned jars), in a
//! namespace enforcing the `restricted` Pod Security Standard — through an in-place upgrade:
//! savepoint by trigger id, stop-with-savepoint, a new cluster at another parallelism restoring
//! it, every record exactly once. The operator's reconcile loop does not run Flink jobs yet; this
//! shows the objects it will create work as built.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{DeleteParams, PostParams};
use streamjob_e2e::flink::{
    JOB_ID, TEST_JOB_CLASS, TEST_JOB_IMAGE, VERSIONS, check_counting_output, counting_job_args,
};
use streamjob_operator::engine::flink::cluster::{ClusterPlan, PodResources, REST_PORT};
use streamjob_operator::engine::flink::rest::{FlinkRest, JobOverview, Operation, trigger_id};

use super::*;

const RECORDS: u64 = 12_000;
const KEYS: u64 = 6;
const FLINK_TIMEOUT: Duration = Duration::from_secs(150);

fn plan(ns: &str, name: &str, version: &str, dir: &std::path::Path) -> ClusterPlan {
    let out = format!("file://{}/out", dir.display());
    ClusterPlan {
        name: name.into(),
        namespace: ns.into(),
        labels: BTreeMap::from([("app".to_string(), "flink-e2e".to_string())]),
        owner: None,
        image: format!("{TEST_JOB_IMAGE}:{version}"),
        image_pull_policy: None,
        entry_class: TEST_JOB_CLASS.into(),
        args: counting_job_args(&out, RECORDS, KEYS, 400, "1", &[]),
        job_id: JOB_ID.into(),
        parallelism: 2,
        slots_per_task_manager: 2,
        task_managers: 1,
        job_manager: PodResources {
            memory_mib: 1024,
            cpu: "250m".into(),
        },
        task_manager: PodResources {
            memory_mib: 1280,
            cpu: "250m".into(),
        },
        from_savepoint: None,
        allow_non_restored_state: false,
        checkpoints_dir: format!("file://{}/checkpoints", dir.display()),
        savepoints_dir: format!("file://{}/savepoints", dir.display()),
        configuration: BTreeMap::from([(
            "execution.checkpointing.interval".to_string(),
            "1s".to_string(),
        )]),
    }
}

/// Creates the cluster's objects: ConfigMap, rest Service, JobManager pod, then TaskManager pods
/// pointed at the JobManager's pod IP. Returns the REST client at the JobManager.
async fn deploy(env: &'static TestEnv, plan: &ClusterPlan) -> FlinkRest {
    assert_eq!(plan.check_configuration(), vec![]);
    let client = env.client().await.unwrap();
    let ns = plan.namespace.as_str();
    let pp = PostParams::default();
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&pp, &plan.config_map())
        .await
        .unwrap();
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&pp, &plan.rest_service())
        .await
        .unwrap();
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    pods.create(&pp, &plan.job_manager_pod()).await.unwrap();
    let jm = plan.job_manager_name();
    let ip = poll_until(
        "JobManager pod IP",
        TIMEOUT,
        Duration::from_millis(200),
        || async {
            let pod = pods.get(&jm).await?;
            Ok(pod.status.and_then(|s| s.pod_ip))
        },
    )
    .await
    .unwrap();
    for i in 0..plan.task_managers {
        pods.create(&pp, &plan.task_manager_pod(i, &ip))
            .await
            .unwrap();
    }
    FlinkRest::new(format!("http://{ip}:{REST_PORT}"))
}

async fn wait_job(
    rest: &FlinkRest,
    what: &str,
    done: impl Fn(&JobOverview) -> bool,
) -> JobOverview {
    poll_until(what, FLINK_TIMEOUT, Duration::from_millis(250), || async {
        let jobs = rest.jobs().await?;
        let job = jobs.into_iter().find(|j| j.jid == JOB_ID);
        if let Some(j) = &job {
            assert_ne!(j.state, "FAILED", "the Flink job failed");
        }
        Ok(job.filter(|j| done(j)))
    })
    .await
    .unwrap()
}

async fn savepoint(rest: &FlinkRest, trigger: &str, stop: bool, dir: &str) -> String {
    for _ in 0..2 {
        if stop {
            rest.stop_with_savepoint(JOB_ID, trigger, dir)
                .await
                .unwrap();
        } else {
            rest.trigger_savepoint(JOB_ID, trigger, dir).await.unwrap();
        }
    }
    poll_until(
        "savepoint",
        FLINK_TIMEOUT,
        Duration::from_millis(200),
        || async {
            match rest.savepoint(JOB_ID, trigger).await? {
                Operation::InProgress => Ok(None),
                Operation::Completed(Some(location)) => Ok(Some(location)),
                other => Err(streamjob_e2e::Error::Other(format!("savepoint: {other:?}"))),
            }
        },
    )
    .await
    .unwrap()
}

/// Deletes the cluster's pods (and waits for them to be gone: their JVMs stopped).
async fn delete_pods(env: &'static TestEnv, plan: &ClusterPlan) {
    let pods = Api::<Pod>::namespaced(env.client().await.unwrap(), &plan.namespace);
    let mut names = vec![plan.job_manager_name()];
    names.extend((0..plan.task_managers).map(|i| plan.task_manager_name(i)));
    for name in &names {
        pods.delete(name, &DeleteParams::default()).await.unwrap();
    }
    for name in &names {
        wait_deleted(&pods, name, TIMEOUT).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v_flink_clusters_run_as_pods_and_upgrade_in_place() {
    let env = env().await;
    if streamjob_e2e::flink::kubelet_images().len() != VERSIONS.len() {
        panic!(
            "Flink {VERSIONS:?} are not all installed: run `bash e2e/scripts/install.sh` (it fetches \
             their jars and builds flink/)"
        );
    }
    for version in VERSIONS {
        let ns = env.restricted_namespace("flink").await.unwrap();
        let dir = env.run_dir.join(format!("flink-{version}"));
        std::fs::create_dir_all(&dir).unwrap();
        let tag = version.replace('.', "-");

        // Revision 1 at parallelism 2.
        let started = Instant::now();
        let r1 = plan(&ns, &format!("counting-{tag}-r1"), version, &dir);
        let rest = deploy(env, &r1).await;
        wait_job(&rest, "job running", JobOverview::fully_running).await;
        eprintln!(
            "figure: Flink {version} on Kubernetes: pods created → every task RUNNING: {:.1} s",
            started.elapsed().as_secs_f64()
        );
        assert_eq!(rest.flink_version().await.unwrap(), *version);
        poll_until(
            "a checkpoint",
            FLINK_TIMEOUT,
            Duration::from_millis(250),
            || async { Ok((rest.checkpoints(JOB_ID).await?.completed >= 1).then_some(())) },
        )
        .await
        .unwrap();

        // A savepoint by trigger id, then stop-with-savepoint (the upgrade's).
        let savepoints = r1.savepoints_dir.clone();
        let sp = savepoint(
            &rest,
            &trigger_id(&format!("{ns}/savepoint/1")),
            false,
            &savepoints,
        )
        .await;
        assert!(sp.contains("/savepoints/savepoint-"), "{sp}");
        let stall = Instant::now();
        let stop = savepoint(
            &rest,
            &trigger_id(&format!("{ns}/stop/2")),
            true,
            &savepoints,
        )
        .await;
        wait_job(&rest, "job stopped", |j| j.state == "FINISHED").await;
        delete_pods(env, &r1).await;

        // Revision 2 at parallelism 3 from the stop savepoint, as a new cluster.
        let mut r2 = plan(&ns, &format!("counting-{tag}-r2"), version, &dir);
        r2.args = counting_job_args(
            &format!("file://{}/out", dir.display()),
            RECORDS,
            KEYS,
            400,
            "2",
            &[],
        );
        r2.parallelism = 3;
        r2.slots_per_task_manager = 3;
        r2.from_savepoint = Some(stop.clone());
        let rest = deploy(env, &r2).await;
        wait_job(&rest, "revision 2 running", JobOverview::fully_running).await;
        eprintln!(
            "figure: Flink {version} on Kubernetes: in-place upgrade (stop-with-savepoint → every task of the new cluster RUNNING): {:.1} s",
            stall.elapsed().as_secs_f64()
        );
        wait_job(&rest, "revision 2 finished", |j| j.state == "FINISHED").await;
        let restored = rest.checkpoints(JOB_ID).await.unwrap().restored;
        assert_eq!(
            restored.and_then(|r| r.external_path).as_deref(),
            Some(stop.as_str())
        );
        delete_pods(env, &r2).await;

        let revisions = check_counting_output(&dir.join("out"), RECORDS, KEYS).unwrap();
        eprintln!(
            "Flink {version}: {RECORDS} records exactly once; lines per revision {revisions:?}"
        );
        assert!(
            revisions.get("1").is_some_and(|&n| n > 0)
                && revisions.get("2").is_some_and(|&n| n > 0)
        );
    }
}
