//! Operator benchmark (issue #6), on the e2e environment (real control plane, MinIO, process
//! kubelet) with the operator installed from the chart:
//!
//! 1. **Upgrade gap**: a StreamJob (generator at 1,000 records/s → keyed 1 s tumbling count →
//!    JSON file sink, 1 s checkpoints, parts rolled on checkpoint) is upgraded v1 → v2 once with
//!    `strategy: InPlace` and once (a second job, afterwards) with `strategy: Shadow`. MinIO is
//!    polled every 150 ms for finished parts; per sample the newest committed window end is
//!    recorded. Reported: the longest wall-clock interval without newly committed output across
//!    the upgrade, the largest event-time hole between committed windows, exactly-once (every
//!    aggregate once, right value), and how long the `Upgrading` condition was true.
//! 2. **Scale**: `--jobs N` (1,000; `--quick`: 200) suspended StreamJobs (no pods) created in one
//!    namespace, after a baseline of 10: time until every one has status for its generation
//!    (phase `Suspended`, `observedGeneration` = `metadata.generation`), the operator process's
//!    peak RSS (VmHWM, reset before each round via `clear_refs`), and the reconcile-duration
//!    histogram from its `/metrics` (difference over the round: count, mean, p99 bucket).
//! 3. **Flink jobs**: the operator's memory with `--flink-jobs N` (20; `--quick`: 2) real Flink
//!    clusters running (`flink.rs`).
//!
//! Prints a markdown table and writes it to `target/bench/operator.txt`.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DynamicObject, ListParams, PostParams};
use streamjob_e2e::fixtures::{EnvOptions, TestEnv, repo_root};
use streamjob_e2e::scenario::{
    self, Job, OutputTracker, SECRET, WINDOW_MS, check_exactly_once, condition_true, container_pid,
    deployed_hash, phase, pid_alive, promoted, sj_api, status,
};

mod flink;

const POLL: Duration = Duration::from_millis(150);
const METRICS_PORT: u16 = 9090;
const BASELINE_JOBS: usize = 10;

#[derive(Parser, Debug)]
#[command(about = "Operator benchmark: output gap across InPlace/Shadow upgrades, scale to N jobs")]
struct Args {
    /// Suspended StreamJobs to create in the scale round (default 1000; 200 with --quick).
    #[arg(long)]
    jobs: Option<usize>,
    /// Flink StreamJobs (real Flink 2.3 clusters) in the Flink round (default 20; 2 with
    /// --quick; 0 skips it).
    #[arg(long)]
    flink_jobs: Option<usize>,
    /// Only the Flink round.
    #[arg(long)]
    only_flink: bool,
    /// A shorter run: 200 jobs, shorter upgrade jobs, 2 Flink jobs.
    #[arg(long)]
    quick: bool,
    /// Where to write the table (default `target/bench/operator.txt`).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    streamjob_e2e::fixtures::init_process_tracing("warn");
    let args = Args::parse();
    let jobs = args.jobs.unwrap_or(if args.quick { 200 } else { 1000 });
    let records: u64 = if args.quick { 45_000 } else { 60_000 };

    let exe = std::env::current_exe().context("current_exe")?;
    let dir = exe.parent().context("exe has no folder")?;
    let mut opts = EnvOptions::new(
        &dir.join("process-kubelet").display().to_string(),
        &dir.join("e2e-echo-server").display().to_string(),
    );
    opts.images.extend(streamjob_e2e::flink::kubelet_images());
    let flink_jobs = args.flink_jobs.unwrap_or(if args.quick { 2 } else { 20 });
    let t0 = Instant::now();
    let env = TestEnv::start(opts).await?;
    log(
        t0,
        &format!("environment up, run dir {}", env.run_dir.display()),
    );
    let op_ns = env.namespace("operator").await?;
    scenario::install_operator(
        &env,
        &op_ns,
        &["logFormat=text", "logLevel=info"],
        Duration::from_secs(120),
    )
    .await?;
    log(t0, "operator available");

    let mut upgrades = Vec::new();
    let strategies: &[&'static str] = if args.only_flink {
        &[]
    } else {
        &["InPlace", "Shadow"]
    };
    for &strategy in strategies {
        let r = upgrade_round(&env, strategy, records, t0).await?;
        log(t0, &format!("{strategy}: {r:?}"));
        upgrades.push(r);
    }

    let mut scale = Vec::new();
    let rounds: &[usize] = if args.only_flink {
        &[]
    } else {
        &[BASELINE_JOBS, jobs]
    };
    for &n in rounds {
        let r = scale_round(&env, &op_ns, n, t0).await?;
        log(t0, &format!("{n} jobs: {r:?}"));
        scale.push(r);
    }

    let mut table = if args.only_flink {
        String::new()
    } else {
        render(&upgrades, &scale, records)
    };
    if flink_jobs > 0 {
        let r = flink::flink_round(&env, &op_ns, flink_jobs, t0).await?;
        log(t0, &format!("Flink: {r:?}"));
        table.push_str(&flink::render(&r));
    }
    println!("{table}");
    let out = args.out.unwrap_or_else(|| {
        repo_root()
            .join("target")
            .join("bench")
            .join("operator.txt")
    });
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("create {}", parent.display()))?;
    }
    std::fs::write(&out, &table).with_context(|| format!("write {}", out.display()))?;
    eprintln!("written to {}", out.display());
    let bad: Vec<_> = upgrades
        .iter()
        .filter_map(|u| u.exactly_once.as_ref().err().map(|e| (u.strategy, e)))
        .collect();
    if !bad.is_empty() {
        bail!("exactly-once violated: {bad:?}");
    }
    Ok(())
}

fn log(t0: Instant, what: &str) {
    eprintln!("[{:>6.1}s] {what}", t0.elapsed().as_secs_f64());
}

// ---------------------------------------------------------------------------------------------
// 1. Upgrade gap
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
struct UpgradeResult {
    strategy: &'static str,
    /// Longest wall-clock interval without newly committed output, from the last commit before
    /// the new spec was applied until the job had committed twice on the new version.
    stall: Duration,
    /// The same before the upgrade (steady state: about the checkpoint interval).
    steady: Duration,
    /// `Upgrading` condition true → false, as sampled.
    upgrading: Duration,
    /// New spec applied → promoted on it.
    apply_to_promoted: Duration,
    /// Largest event-time hole between consecutive committed windows (0: none missing).
    window_hole_ms: i64,
    /// `Ok(aggregates)` or what is wrong.
    exactly_once: std::result::Result<usize, String>,
}

async fn upgrade_round(
    env: &TestEnv,
    strategy: &'static str,
    records: u64,
    t0: Instant,
) -> Result<UpgradeResult> {
    let ns = env.namespace("bench").await?;
    let bucket = format!("b-{}", ns.trim_start_matches("bench-"));
    env.bucket_with_secret(&ns, &bucket, SECRET).await?;
    let mut job = Job::new(&format!("up-{}", strategy.to_lowercase()), &ns, &bucket);
    job.count = records;
    job.rate = 1000;
    job.strategy = strategy;
    let api = sj_api(env.client().await?, &ns);
    job.apply(env)?;
    let get = || async {
        api.get(&job.name)
            .await
            .with_context(|| format!("get StreamJob {ns}/{}", job.name))
    };

    // Running and committing: a completed checkpoint, and output committed twice.
    let mut out = OutputTracker::default();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(180);
    let before = loop {
        out.sample(env.s3(), &job.bucket, &job.name).await?;
        let o = get().await?;
        if phase(&o) == "Running"
            && status(&o)["lastCheckpoint"]["id"].is_u64()
            && out.advances.len() >= 3
        {
            break o;
        }
        if Instant::now() > deadline {
            bail!(
                "{strategy}: not running and committing after 180 s: {}",
                status(&o)
            );
        }
        tokio::time::sleep(POLL).await;
    };
    log(t0, &format!("{strategy}: running and committing"));

    let old = deployed_hash(&before);
    job.image = "streamjob/runtime:v2".into();
    let applied = Instant::now();
    job.apply(env)?;
    let mut upgrading_since: Option<Instant> = None;
    let mut upgrading_until: Option<Instant> = None;
    let mut promoted_at: Option<Instant> = None;
    let deadline = applied + Duration::from_secs(240);
    loop {
        out.sample(env.s3(), &job.bucket, &job.name).await?;
        let o = get().await?;
        let now = Instant::now();
        let up = condition_true(&o, "Upgrading");
        if up && upgrading_since.is_none() {
            upgrading_since = Some(now);
        }
        if !up && upgrading_since.is_some() && upgrading_until.is_none() {
            upgrading_until = Some(now);
        }
        if promoted_at.is_none() && promoted(&o, &old) {
            promoted_at = Some(now);
            log(t0, &format!("{strategy}: promoted"));
        }
        if let Some(p) = promoted_at
            && upgrading_until.is_some()
            && out.advances_since(p) >= 2
        {
            break;
        }
        if phase(&o) == "Finished" || phase(&o) == "Failed" {
            bail!(
                "{strategy}: job ended ({}) before the upgrade was measured; raise the record count",
                phase(&o)
            );
        }
        if now > deadline {
            bail!(
                "{strategy}: upgrade not promoted and committing after 240 s: {}",
                status(&o)
            );
        }
        tokio::time::sleep(POLL).await;
    }
    let end = Instant::now();
    let (Some(since), Some(until), Some(promoted_at)) =
        (upgrading_since, upgrading_until, promoted_at)
    else {
        bail!("{strategy}: Upgrading never seen true");
    };
    let stall = out.max_gap(applied, end);
    let steady = out.max_gap(started, applied);

    // Finished: every aggregate exactly once, no event-time hole.
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let o = get().await?;
        if phase(&o) == "Finished" {
            break;
        }
        if Instant::now() > deadline {
            bail!("{strategy}: not Finished after 240 s: {}", status(&o));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    log(t0, &format!("{strategy}: finished"));
    let got = scenario::read_output(env, &job.bucket, &job.name).await?;
    let starts: BTreeSet<i64> = got.keys().map(|(_, s)| *s).collect();
    let window_hole_ms = starts
        .iter()
        .zip(starts.iter().skip(1))
        .map(|(a, b)| b - a - WINDOW_MS)
        .max()
        .unwrap_or(0);
    let exactly_once = check_exactly_once(&got, &job.expected());
    // The job is done; its namespace goes so the scale rounds see only their own jobs.
    env.kubectl_ok(&["delete", "namespace", &ns, "--wait=false"], None)?;
    Ok(UpgradeResult {
        strategy,
        stall,
        steady,
        upgrading: until - since,
        apply_to_promoted: promoted_at - applied,
        window_hole_ms,
        exactly_once,
    })
}

// ---------------------------------------------------------------------------------------------
// 2. Scale
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
struct ScaleResult {
    jobs: usize,
    /// First create → last create returned.
    create: Duration,
    /// First create → every job reconciled for its generation.
    reconciled: Duration,
    /// VmHWM over the round (KiB); `hwm_reset` false when it could not be reset.
    peak_rss_kib: u64,
    hwm_reset: bool,
    /// VmRSS before the round and once all were reconciled (KiB).
    rss_before_kib: u64,
    rss_after_kib: u64,
    hist: Hist,
    errors: u64,
}

/// The reconcile-duration histogram: cumulative bucket counts by upper bound, sum, count.
#[derive(Debug, Default, Clone)]
struct Hist {
    buckets: Vec<(f64, u64)>,
    sum: f64,
    count: u64,
}

impl Hist {
    fn minus(&self, earlier: &Hist) -> Hist {
        Hist {
            buckets: self
                .buckets
                .iter()
                .map(|(le, c)| {
                    let e = earlier
                        .buckets
                        .iter()
                        .find(|(l, _)| l == le)
                        .map_or(0, |(_, c)| *c);
                    (*le, c.saturating_sub(e))
                })
                .collect(),
            sum: self.sum - earlier.sum,
            count: self.count.saturating_sub(earlier.count),
        }
    }

    fn mean_ms(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum / self.count as f64 * 1000.0
        }
    }

    /// Upper bound of the first bucket holding at least `q` of the observations.
    fn quantile_bucket(&self, q: f64) -> f64 {
        let want = (q * self.count as f64).ceil() as u64;
        self.buckets
            .iter()
            .find(|(_, c)| *c >= want)
            .map_or(f64::INFINITY, |(le, _)| *le)
    }
}

struct Scrape {
    hist: Hist,
    errors: u64,
}

fn parse_metrics(text: &str) -> Scrape {
    const H: &str = "streamjob_reconcile_duration_seconds";
    let mut hist = Hist::default();
    let mut errors = 0;
    for line in text.lines() {
        let Some((name, value)) = line.rsplit_once(' ') else {
            continue;
        };
        if let Some(rest) = name.strip_prefix(&format!("{H}_bucket{{le=\"")) {
            let le = rest.trim_end_matches("\"}");
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap_or(f64::NAN)
            };
            hist.buckets.push((le, value.parse().unwrap_or(0)));
        } else if name == format!("{H}_sum") {
            hist.sum = value.parse().unwrap_or(0.0);
        } else if name == format!("{H}_count") {
            hist.count = value.parse().unwrap_or(0);
        } else if name.starts_with("streamjob_reconcile_errors_total{") {
            errors += value.parse::<u64>().unwrap_or(0);
        }
    }
    Scrape { hist, errors }
}

/// The operator's pid and pod IP (its container running).
async fn operator_process(env: &TestEnv, op_ns: &str) -> Result<(u32, String)> {
    let pods: Api<Pod> = Api::namespaced(env.client().await?, op_ns);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let list = pods.list(&ListParams::default()).await?;
        let found = list.items.iter().find_map(|p| {
            let pid = container_pid(p)?;
            let ip = p.status.as_ref()?.pod_ip.clone()?;
            pid_alive(pid).then_some((pid, ip))
        });
        if let Some(f) = found {
            return Ok(f);
        }
        if Instant::now() > deadline {
            bail!("no running operator pod in {op_ns}");
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn scrape(ip: &str) -> Result<Scrape> {
    let text = reqwest::get(format!("http://{ip}:{METRICS_PORT}/metrics"))
        .await?
        .error_for_status()?
        .text()
        .await?;
    let s = parse_metrics(&text);
    if s.hist.buckets.is_empty() {
        bail!("no streamjob_reconcile_duration_seconds histogram at {ip}:{METRICS_PORT}");
    }
    Ok(s)
}

/// `VmHWM` and `VmRSS` of `pid`, KiB.
fn memory_kib(pid: u32) -> Result<(u64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("read /proc/{pid}/status"))?;
    let field = |name: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .ok_or_else(|| anyhow!("{name} missing in /proc/{pid}/status"))
    };
    Ok((field("VmHWM:")?, field("VmRSS:")?))
}

async fn scale_round(env: &TestEnv, op_ns: &str, n: usize, t0: Instant) -> Result<ScaleResult> {
    let ns = env.namespace("scale").await?;
    let api = sj_api(env.client().await?, &ns);
    let (pid, ip) = operator_process(env, op_ns).await?;
    let before = scrape(&ip).await?;
    // Resets the peak RSS to the current RSS (Linux ≥ 4.0).
    let hwm_reset = std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok();
    let (_, rss_before_kib) = memory_kib(pid)?;
    let s3 = env.s3().url.clone();
    let objects = (0..n)
        .map(|i| {
            let mut job = Job::new(&format!("sj-{i:05}"), &ns, "scale-unused");
            job.state = "suspended";
            let obj: DynamicObject = serde_yaml_ng::from_str(&job.manifest(&s3))?;
            Ok(obj)
        })
        .collect::<Result<Vec<_>>>()?;

    let started = Instant::now();
    futures::stream::iter(objects.iter().map(|o| {
        let api = api.clone();
        async move { api.create(&PostParams::default(), o).await }
    }))
    .buffer_unordered(8)
    .try_collect::<Vec<_>>()
    .await
    .context("create StreamJobs")?;
    let create = started.elapsed();
    log(t0, &format!("{n} StreamJobs created in {create:?}"));

    let deadline = started + Duration::from_secs(900);
    let mut last_log = Instant::now();
    let reconciled = loop {
        let list = api.list(&ListParams::default()).await?;
        let done = list
            .items
            .iter()
            .filter(|o| {
                phase(o) == "Suspended"
                    && status(o)["observedGeneration"].as_i64() == o.metadata.generation
            })
            .count();
        if done == n {
            break started.elapsed();
        }
        if Instant::now() > deadline {
            bail!("{done}/{n} StreamJobs reconciled after 900 s");
        }
        if last_log.elapsed() > Duration::from_secs(10) {
            log(t0, &format!("{done}/{n} reconciled"));
            last_log = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let after = scrape(&ip).await?;
    let (peak_rss_kib, rss_after_kib) = memory_kib(pid)?;
    let (pid_now, _) = operator_process(env, op_ns).await?;
    if pid_now != pid {
        bail!("the operator restarted during the round (pid {pid} → {pid_now})");
    }
    Ok(ScaleResult {
        jobs: n,
        create,
        reconciled,
        peak_rss_kib,
        hwm_reset,
        rss_before_kib,
        rss_after_kib,
        hist: after.hist.minus(&before.hist),
        errors: after.errors.saturating_sub(before.errors),
    })
}

// ---------------------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------------------

fn secs(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64())
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}×", a / b)
    } else {
        "–".into()
    }
}

fn render(up: &[UpgradeResult], scale: &[ScaleResult], records: u64) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "## Operator: committed-output gap across a v1 → v2 upgrade\n\n\
         Generator {records} records at 1,000/s → keyed 1 s tumbling count → JSON file sink on MinIO \
         (1 s checkpoints, parts rolled on checkpoint); MinIO polled every {} ms.\n",
        POLL.as_millis()
    );
    let _ = writeln!(
        s,
        "| strategy | output stall across upgrade (s) | steady-state max interval (s) | Upgrading true (s) | apply → promoted (s) | event-time hole (ms) | exactly-once |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---|");
    for u in up {
        let eo = match &u.exactly_once {
            Ok(n) => format!("yes ({n} aggregates)"),
            Err(e) => format!("NO: {}", e.chars().take(120).collect::<String>()),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            u.strategy,
            secs(u.stall),
            secs(u.steady),
            secs(u.upgrading),
            secs(u.apply_to_promoted),
            u.window_hole_ms,
            eo
        );
    }
    if let [inplace, shadow] = up {
        let _ = writeln!(
            s,
            "| shadow / in-place | {} | | {} | {} | | |",
            ratio(shadow.stall.as_secs_f64(), inplace.stall.as_secs_f64()),
            ratio(
                shadow.upgrading.as_secs_f64(),
                inplace.upgrading.as_secs_f64()
            ),
            ratio(
                shadow.apply_to_promoted.as_secs_f64(),
                inplace.apply_to_promoted.as_secs_f64()
            ),
        );
    }
    let _ = writeln!(
        s,
        "\n## Operator: suspended StreamJobs in one namespace\n\n\
         Reconciled: phase Suspended and status.observedGeneration = metadata.generation for every job. \
         Reconcile figures: the operator's streamjob_reconcile_duration_seconds histogram, difference over the round.\n"
    );
    let _ = writeln!(
        s,
        "| jobs | create calls (s) | first create → all reconciled (s) | operator peak RSS (MiB) | RSS before → after (MiB) | reconciles | mean (ms) | p99 bucket (≤ s) | errors |"
    );
    let _ = writeln!(s, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mib = |k: u64| format!("{:.1}", k as f64 / 1024.0);
    for r in scale {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {}{} | {} → {} | {} | {:.2} | {} | {} |",
            r.jobs,
            secs(r.create),
            secs(r.reconciled),
            mib(r.peak_rss_kib),
            if r.hwm_reset { "" } else { " (since start)" },
            mib(r.rss_before_kib),
            mib(r.rss_after_kib),
            r.hist.count,
            r.hist.mean_ms(),
            r.hist.quantile_bucket(0.99),
            r.errors
        );
    }
    if let [base, big] = scale {
        let _ = writeln!(
            s,
            "| ratio {}/{} | {} | {} | {} | | {} | {} | | |",
            big.jobs,
            base.jobs,
            ratio(big.create.as_secs_f64(), base.create.as_secs_f64()),
            ratio(big.reconciled.as_secs_f64(), base.reconciled.as_secs_f64()),
            ratio(big.peak_rss_kib as f64, base.peak_rss_kib as f64),
            ratio(big.hist.count as f64, base.hist.count as f64),
            ratio(big.hist.mean_ms(), base.hist.mean_ms()),
        );
    }
    s
}
