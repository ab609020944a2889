//! The Flink round: the operator's memory while it runs `--flink-jobs N` real Flink clusters
//! (Flink 2.3 JVMs on the process kubelet: a JobManager and one TaskManager each, at the least
//! memory Flink's default memory model starts with: 768Mi and 1024Mi), each running the test
//! job slowly with a checkpoint every 5 s, so the operator polls every job's REST API, records
//! checkpoints into status and keeps its TaskManagers. Reported: the operator's RSS before (no Flink job), once every job is Running
//! with a checkpoint, and after a further minute of steady polling, with the peak (VmHWM) over
//! the round; apply → Running with a checkpoint per job (median and slowest).

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use kube::api::ListParams;
use streamjob_e2e::fixtures::TestEnv;
use streamjob_e2e::flink::{TEST_JOB_CLASS, TEST_JOB_IMAGE, counting_job_args};
use streamjob_e2e::scenario::{phase, sj_api, status};

use super::{log, memory_kib, operator_process};

/// How long the round watches the running jobs after every one checkpointed.
const STEADY: Duration = Duration::from_secs(60);

#[derive(Debug)]
pub struct FlinkResult {
    pub jobs: usize,
    pub rss_before_kib: u64,
    pub rss_running_kib: u64,
    pub rss_steady_kib: u64,
    pub peak_rss_kib: u64,
    pub hwm_reset: bool,
    /// Apply → Running with a checkpoint: median and slowest over the jobs.
    pub running_median: Duration,
    pub running_max: Duration,
    /// Checkpoints the operator recorded per job during the steady minute (median).
    pub checkpoints_recorded: u64,
}

fn manifest(name: &str, ns: &str, dir: &std::path::Path) -> String {
    let args = counting_job_args(
        &format!("file://{}/out", dir.display()),
        1_000_000_000,
        4,
        5,
        "1",
        &[],
    );
    serde_json::json!({
        "apiVersion": "streamjob.io/v1alpha1",
        "kind": "StreamJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "engine": "flink",
            "image": format!("{TEST_JOB_IMAGE}:2.3.0"),
            "parallelism": 1,
            "checkpoints": {"dir": format!("file://{}/checkpoints", dir.display()),
                            "interval": "5s", "retained": 2},
            "savepoints": {"dir": format!("file://{}/savepoints", dir.display())},
            "flink": {
                "version": "2.3.0",
                "job": {"entryClass": TEST_JOB_CLASS, "args": args},
                "jobManager": {"resources": {"memory": "768Mi", "cpu": "100m"}},
                "taskManager": {"replicas": 1, "taskSlots": 1,
                                "resources": {"memory": "1024Mi", "cpu": "100m"}},
            },
        },
    })
    .to_string()
}

pub async fn flink_round(env: &TestEnv, op_ns: &str, n: usize, t0: Instant) -> Result<FlinkResult> {
    let ns = env.namespace("flink-scale").await?;
    let api = sj_api(env.client().await?, &ns);
    let (pid, _) = operator_process(env, op_ns).await?;
    let hwm_reset = std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok();
    let (_, rss_before_kib) = memory_kib(pid)?;
    let mut applied = Vec::new();
    for i in 0..n {
        let name = format!("flink-{i:02}");
        let dir = env.run_dir.join("flink-scale").join(&name);
        std::fs::create_dir_all(&dir)?;
        env.kubectl_ok(&["apply", "-f", "-"], Some(&manifest(&name, &ns, &dir)))?;
        applied.push((name, Instant::now()));
    }
    log(t0, &format!("{n} Flink StreamJobs applied"));

    // apply → Running with a checkpoint, per job
    let deadline = Instant::now() + Duration::from_secs(60 * n as u64 + 300);
    let mut running: Vec<Option<Duration>> = vec![None; n];
    let mut last_log = Instant::now();
    while running.iter().any(Option::is_none) {
        let list = api.list(&ListParams::default()).await?;
        for o in &list.items {
            let name = o.metadata.name.as_deref().unwrap_or_default();
            if phase(o) == "Failed" {
                bail!("{name} failed: {}", status(o));
            }
            if let Some(i) = applied.iter().position(|(n, _)| n == name)
                && running[i].is_none()
                && phase(o) == "Running"
                && status(o)["lastCheckpoint"]["id"].is_u64()
            {
                running[i] = Some(applied[i].1.elapsed());
            }
        }
        if Instant::now() > deadline {
            let done = running.iter().flatten().count();
            bail!("{done}/{n} Flink jobs Running with a checkpoint before the deadline");
        }
        if last_log.elapsed() > Duration::from_secs(15) {
            let done = running.iter().flatten().count();
            log(
                t0,
                &format!("{done}/{n} Flink jobs Running with a checkpoint"),
            );
            last_log = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (_, rss_running_kib) = memory_kib(pid)?;
    log(t0, "every Flink job Running with a checkpoint");

    let checkpoint_ids = |list: &[kube::api::DynamicObject]| -> Vec<u64> {
        list.iter()
            .map(|o| status(o)["lastCheckpoint"]["id"].as_u64().unwrap_or(0))
            .collect()
    };
    let first = checkpoint_ids(&api.list(&ListParams::default()).await?.items);
    tokio::time::sleep(STEADY).await;
    let list = api.list(&ListParams::default()).await?.items;
    let (peak_rss_kib, rss_steady_kib) = memory_kib(pid)?;
    let (pid_now, _) = operator_process(env, op_ns).await?;
    if pid_now != pid {
        bail!("the operator restarted during the round (pid {pid} → {pid_now})");
    }
    let mut recorded: Vec<u64> = checkpoint_ids(&list)
        .iter()
        .zip(&first)
        .map(|(b, a)| b.saturating_sub(*a))
        .collect();
    recorded.sort_unstable();
    let mut times: Vec<Duration> = running.into_iter().flatten().collect();
    times.sort_unstable();
    // the clusters go with their StreamJobs (owned), before the next round or the end
    env.kubectl_ok(&["delete", "namespace", &ns, "--wait=false"], None)?;
    Ok(FlinkResult {
        jobs: n,
        rss_before_kib,
        rss_running_kib,
        rss_steady_kib,
        peak_rss_kib,
        hwm_reset,
        running_median: times[times.len() / 2],
        running_max: times[times.len() - 1],
        checkpoints_recorded: recorded[recorded.len() / 2],
    })
}

/// The round as a markdown table.
pub fn render(r: &FlinkResult) -> String {
    let mib = |k: u64| format!("{:.1}", k as f64 / 1024.0);
    let per_job = (r.rss_steady_kib as f64 - r.rss_before_kib as f64) / 1024.0 / r.jobs as f64;
    format!(
        "## Operator: memory with {n} Flink jobs\n\n\
         {n} Flink 2.3 clusters on the process kubelet (a JobManager of 768Mi and one TaskManager \
         of 1024Mi each), the test job at 5 records/s, a checkpoint every 5 s. Operator RSS in MiB.\n\n\
         | before (no Flink job) | all Running with a checkpoint | after {steady} s more | peak (VmHWM{reset}) | per job (after − before) |\n\
         |---:|---:|---:|---:|---:|\n\
         | {} | {} | {} | {} | {per_job:.2} |\n\n\
         Apply → Running with a checkpoint: median {:.1} s, slowest {:.1} s (all {n} applied at once \
         on 2 cores). Checkpoints recorded into status per job during the {steady} s (median): {}.\n",
        mib(r.rss_before_kib),
        mib(r.rss_running_kib),
        mib(r.rss_steady_kib),
        mib(r.peak_rss_kib),
        r.running_median.as_secs_f64(),
        r.running_max.as_secs_f64(),
        r.checkpoints_recorded,
        n = r.jobs,
        steady = STEADY.as_secs(),
        reset = if r.hwm_reset {
            ""
        } else {
            ", not reset: since start"
        },
    )
}
