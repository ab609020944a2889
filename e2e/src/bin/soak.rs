//! Soak (issue #19): one StreamJob on the e2e environment (real control plane, process kubelet,
//! the operator installed from the chart, MinIO behind a fault-injecting proxy that every pod of
//! the job talks to) while faults are injected one after another at random moments:
//!
//! - SIGKILL of the runtime (coordinator) pod's process, of a worker's, of the operator's (also
//!   while an upgrade is in flight: nothing waits for upgrades to settle);
//! - SIGSTOP of the runtime process for 1–4 s (a stuck process or node), then SIGCONT;
//! - an image bump (an upgrade, strategy alternating InPlace / Shadow);
//! - a failing version: an upgrade whose new filter divides by zero on a record ten seconds of
//!   input past what is committed, so it processes records, uploads parts and is rolled back;
//! - an S3 outage of 0.5–8 s (connections cut and refused) and an S3 slowdown (20–200 ms per
//!   chunk for 2–8 s);
//! - a restart of kube-apiserver (the operator's and the kubelet's watches break).
//!
//! Upgrades are not stacked: one is applied only when none is in flight. The job is the
//! generator (2 subtasks on 2 workers, 20 keys, 1,000 records/s) → keyed 1 s tumbling count and
//! sum → JSON file sink on S3. When the faults are done, the job runs to its end; every
//! (key, window) aggregate must then be committed exactly once with the right value.
//!
//! Prints faults injected by kind, records and aggregates expected, read, missing, duplicated
//! and wrong, the longest output stall (wall time without newly committed windows), and the five
//! longest stalls with the faults in each and the recovery their own durations do not explain;
//! writes the table to `target/soak/soak.txt`; exits non-zero unless the output is exactly once.
//!
//! `--real-node` runs it all on the real node instead (containerd and the kubelet, the
//! operator and the job from their images; `cargo xtask soak --real-node`): kills and pauses hit
//! the containers' processes, a bump tags the runtime image anew in the node's containerd, and
//! restarts go through the real kubelet's CrashLoopBackOff. `--kafka` feeds the job from a
//! Kafka topic instead of the generator (a producer of the soak writes the generator's records
//! at its rate) and adds broker restarts (SIGKILL, then the same data and ports) to the faults;
//! the job then never finishes, and the soak waits for every window of the input instead.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use clap::Parser;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::Api;
use kube::api::{DynamicObject, ListParams};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use streamjob_e2e::fixtures::{EnvOptions, TestEnv, repo_root};
use streamjob_e2e::kafka::{Kafka, produce_to};
use streamjob_e2e::node::images;
use streamjob_e2e::process::Watchdog;
use streamjob_e2e::proxy::FaultProxy;
use streamjob_e2e::scenario::{
    self, Job, KafkaInput, OutputTracker, SECRET, START_MS, WINDOW_MS, container_pid,
    generator_json, generator_ts, phase, sj_api, status,
};

/// The key of the records that close the last windows of a Kafka input (not input themselves).
const FLUSH_KEY: &str = "flush";

const RATE: u64 = 1000;

#[derive(Parser, Debug)]
#[command(about = "Soak: a StreamJob under random faults, checked exactly-once")]
struct Args {
    /// Faults to inject (default 220; 16 with --quick).
    #[arg(long)]
    faults: Option<usize>,
    /// A short run (what CI runs).
    #[arg(long)]
    quick: bool,
    /// Seed of the fault schedule (default: random; printed, so a run can be repeated).
    #[arg(long)]
    seed: Option<u64>,
    /// Where to write the table (default `target/soak/soak.txt`).
    #[arg(long)]
    out: Option<PathBuf>,
    /// On the real node (containerd, runc, the kubelet; the project's images) instead of the
    /// process kubelet. Only inside `e2e/scripts/node-netns.sh` (`cargo xtask soak --real-node`
    /// does both, with the images built first).
    #[arg(long)]
    real_node: bool,
    /// Read the input from a Kafka topic (2 partitions, fed at 1,000 records/s by a producer of
    /// the soak) instead of the generator, and restart the broker among the faults.
    #[arg(long)]
    kafka: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    KillRuntime,
    KillWorker,
    KillOperator,
    PauseRuntime,
    ImageBump,
    FailingVersion,
    StoreOutage,
    StoreSlowdown,
    ApiServerRestart,
    /// The Kafka broker SIGKILLed and started again (`--kafka` only).
    KafkaRestart,
    /// Not drawn: the good spec applied when the faults are done (an upgrade, if the last one
    /// applied was another), kept in the timeline because it can stall the output too.
    FinalGoodSpec,
}

/// A fault in the timeline: when it started and how long it lasted by itself (a pause, an
/// outage, a slowdown, the API server away; zero for a kill or an applied spec).
#[derive(Clone, Copy, Debug)]
struct Injected {
    at: Instant,
    fault: Fault,
    lasted: Duration,
}

/// Each kind with its weight in the random choice.
const KINDS: [(Fault, u32); 9] = [
    (Fault::KillRuntime, 3),
    (Fault::KillWorker, 3),
    (Fault::KillOperator, 2),
    (Fault::PauseRuntime, 2),
    (Fault::ImageBump, 2),
    (Fault::FailingVersion, 1),
    (Fault::StoreOutage, 3),
    (Fault::StoreSlowdown, 2),
    (Fault::ApiServerRestart, 1),
];

/// A fault kind at random, by weight; broker restarts only with a Kafka input.
fn pick(rng: &mut StdRng, kafka: bool) -> Fault {
    let kinds: Vec<(Fault, u32)> = KINDS
        .into_iter()
        .chain(kafka.then_some((Fault::KafkaRestart, 2)))
        .collect();
    let total: u32 = kinds.iter().map(|(_, w)| w).sum();
    let mut n = rng.random_range(0..total);
    for (kind, w) in kinds {
        if n < w {
            return kind;
        }
        n -= w;
    }
    Fault::KillRuntime
}

/// The environment, the job and what the soak has done to it.
struct Soak {
    env: TestEnv,
    proxy: FaultProxy,
    op_ns: String,
    job: Job,
    api: Api<DynamicObject>,
    pods: Api<Pod>,
    /// Image versions used so far (each bump takes the next).
    version: u32,
    t0: Instant,
    /// Control-plane processes that exited and were started again (see [`Soak::supervise`]).
    revived: Vec<String>,
    /// The Kafka input (`--kafka`).
    feed: Option<Feed>,
}

/// The Kafka input of `--kafka`: the broker and the producer feeding its topic with the
/// generator's records (so the expected aggregates are the generator job's).
struct Feed {
    broker: Kafka,
    /// Kills the broker if the soak dies (dropped after it).
    watchdog: Watchdog,
    /// Records written, once everything is produced.
    producer: Option<std::thread::JoinHandle<streamjob_e2e::error::Result<usize>>>,
}

const TOPIC: &str = "soak-in";

/// The chart's leader-election Lease (the operator's `--lease-name` default).
const LEASE: &str = "streamjob-operator";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let wanted = args.faults.unwrap_or(if args.quick { 16 } else { 220 });
    let seed = args.seed.unwrap_or_else(rand::random);
    let mut rng = StdRng::seed_from_u64(seed);
    let t0 = Instant::now();
    let mut soak = Soak::start(wanted, t0, args.real_node, args.kafka).await?;
    soak.log(&format!(
        "seed {seed}: {wanted} faults, {} records",
        soak.job.count
    ));

    // the output tracker samples the committed output in the background
    let tracker = std::sync::Arc::new(tokio::sync::Mutex::new(OutputTracker::default()));
    let sampler = {
        let tracker = tracker.clone();
        let env_s3 = soak.env.s3().clone();
        let (bucket, name) = (soak.job.bucket.clone(), soak.job.name.clone());
        tokio::spawn(async move {
            loop {
                {
                    let mut t = tracker.lock().await;
                    if let Err(e) = t.sample(&env_s3, &bucket, &name).await {
                        tracing::warn!(error = %e, "sampling the output failed");
                    }
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };

    let started = soak.running_with_checkpoint().await?;
    soak.log(&format!(
        "running: {}",
        status(&started)["deployment"]["workload"]
    ));
    let mut injected: BTreeMap<Fault, usize> = BTreeMap::new();
    let mut timeline: Vec<Injected> = Vec::new();
    let mut skipped = 0usize;
    let stop_at = START_MS + (soak.job.count as i64) - 15 * RATE as i64;
    while injected.values().sum::<usize>() < wanted {
        let committed = tracker.lock().await.max_end;
        if committed.is_some_and(|c| c >= stop_at) {
            soak.log("the input is nearly read: no more faults");
            break;
        }
        // a random moment: the gap between faults is the schedule, not synchronisation
        tokio::time::sleep(Duration::from_millis(rng.random_range(500..2500))).await;
        soak.supervise();
        let fault = pick(&mut rng, args.kafka);
        let at = Instant::now();
        match soak.inject(fault, &mut rng, committed).await {
            Ok(Some(lasted)) => {
                *injected.entry(fault).or_default() += 1;
                timeline.push(Injected { at, fault, lasted });
            }
            Ok(None) => skipped += 1,
            Err(e) => {
                soak.log(&format!("{fault:?} could not be injected: {e:#}"));
                skipped += 1;
            }
        }
    }
    soak.proxy.end_outage();
    soak.proxy.set_delay(Duration::ZERO);
    let faults_done = Instant::now();
    // whatever was applied last, the job ends on a good spec
    soak.job.filter = false;
    soak.job.checkpoint_interval = "1s";
    soak.job.readiness_timeout = "60s";
    timeline.push(Injected {
        at: Instant::now(),
        fault: Fault::FinalGoodSpec,
        lasted: Duration::ZERO,
    });
    soak.apply()?;
    soak.log("faults done; the last spec applied is a good one");
    let want = soak.job.expected();
    let end_timeout = Duration::from_secs(if args.quick { 400 } else { 1800 });
    let finished = if args.kafka {
        let last_end = want
            .keys()
            .map(|(_, start)| start + WINDOW_MS)
            .max()
            .unwrap_or(0);
        soak.wait_fed_and_committed(end_timeout, last_end, &tracker)
            .await
    } else {
        soak.wait_finished(end_timeout).await.map(|_| ())
    };
    sampler.abort();
    let finished_at = Instant::now();
    let mut t = tracker.lock().await;
    t.sample(soak.env.s3(), &soak.job.bucket, &soak.job.name)
        .await?;
    let stall = t.max_gap(t0, finished_at);
    let stalls = blame(&t.gaps(t0, finished_at), &timeline);
    let mut got = scenario::read_output(&soak.env, &soak.job.bucket, &soak.job.name).await?;
    // the records that closed the last windows are not input
    got.retain(|(key, _), _| key != FLUSH_KEY);
    let report = Report::new(&want, &got);
    let setting = format!(
        "{}, {}",
        if args.real_node {
            "real node (containerd, the kubelet, the project's images)"
        } else {
            "process kubelet"
        },
        if args.kafka {
            "input from a Kafka topic (2 partitions)"
        } else {
            "input from the generator"
        }
    );
    let table = render(
        &setting,
        seed,
        &injected,
        skipped,
        &report,
        soak.job.count,
        stall,
        faults_done - t0,
        finished_at - t0,
    );
    let table = format!("{table}\n{}", render_stalls(&stalls, t0));
    // what the operator did about the faults (from the job's events)
    let mut blocked = 0;
    let mut table = format!("{table}\n| operator events | count |\n|---|---:|\n");
    for reason in [
        "UpgradeStarted",
        "Promoted",
        "RolledBack",
        "UpgradeAborted",
        "UpgradeBlocked",
        "PlanRetried",
        "JobFailed",
        "StandbyRestarted",
        "PodRecreated",
        "WorkerReplaced",
        "PodFenced",
        "PodKilled",
        "PodsPending",
    ] {
        let n = soak.events(reason).await.unwrap_or(0);
        if reason == "UpgradeBlocked" {
            blocked = n;
        }
        let _ = writeln!(table, "| {reason} | {n} |");
    }
    let _ = writeln!(
        table,
        "\ncontrol-plane processes that exited and were restarted: {}{}",
        soak.revived.len(),
        if soak.revived.is_empty() {
            String::new()
        } else {
            format!(" ({})", soak.revived.join("; "))
        }
    );
    println!("{table}");
    let out = args
        .out
        .unwrap_or_else(|| repo_root().join("target").join("soak").join("soak.txt"));
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("create {}", parent.display()))?;
    }
    std::fs::write(&out, &table).with_context(|| format!("write {}", out.display()))?;
    eprintln!(
        "written to {}; logs under {}",
        out.display(),
        soak.env.run_dir.display()
    );
    if let Err(e) = finished {
        bail!("the job did not finish: {e:#}");
    }
    if !report.exactly_once() {
        bail!("not exactly once: {report:?}");
    }
    if let Some(worst) = stalls.iter().find(|s| s.quiet > QUIET_BOUND) {
        bail!(
            "the output stalled {:.1} s with no fault in progress (stall from {:.1} s; bound {} s)",
            worst.quiet.as_secs_f64(),
            (worst.from - t0).as_secs_f64(),
            QUIET_BOUND.as_secs()
        );
    }
    if blocked > 0 {
        bail!(
            "{blocked} upgrades were blocked, but every version the soak applies can restore the job's state"
        );
    }
    if injected.values().sum::<usize>() < wanted {
        bail!(
            "only {} of {wanted} faults injected before the input ended",
            injected.values().sum::<usize>()
        );
    }
    Ok(())
}

impl Soak {
    async fn start(wanted: usize, t0: Instant, real_node: bool, kafka: bool) -> Result<Self> {
        let exe = std::env::current_exe().context("current_exe")?;
        let dir = exe.parent().context("exe has no folder")?;
        let mut opts = EnvOptions::new(
            &dir.join("process-kubelet").display().to_string(),
            &dir.join("e2e-echo-server").display().to_string(),
        );
        let mut chart = vec!["logFormat=text".to_string(), "logLevel=info".to_string()];
        if real_node {
            opts.real_node_images = Some(images::archives(false)?);
            chart.extend([
                format!("image.repository={}", images::OPERATOR.0),
                format!("image.tag={}", images::OPERATOR.1),
                // a real kubelet holds a container killed again and again for up to 5 min: a
                // single replica killed by the soak every few minutes was away 88 s at a time
                // (seed 20261204); as on a cluster that must survive that, a standby takes over
                "replicaCount=2".to_string(),
            ]);
        }
        let env = TestEnv::start(opts).await?;
        let op_ns = env.namespace("operator").await?;
        let chart: Vec<&str> = chart.iter().map(String::as_str).collect();
        scenario::install_operator(&env, &op_ns, &chart, Duration::from_secs(120)).await?;
        let ns = env.namespace("soak").await?;
        let bucket = format!("b-{}", ns.trim_start_matches("soak-"));
        env.bucket_with_secret(&ns, &bucket, SECRET).await?;
        let upstream: SocketAddr = env
            .s3()
            .url
            .trim_start_matches("http://")
            .parse()
            .with_context(|| format!("MinIO address {}", env.s3().url))?;
        let proxy = FaultProxy::start(upstream)?;
        let mut job = Job::new("soak", &ns, &bucket);
        if real_node {
            job.image = format!("{}:{}", images::RUNTIME.0, images::RUNTIME.1);
        }
        job.parallelism = 2;
        job.workers = 2;
        job.keys = 20;
        job.rate = RATE;
        // about 6 s of input per fault (a fault takes 3–4 s on average, an apiserver restart
        // about 10): the faults end before the input does
        job.count = RATE * 6 * wanted as u64 + 30 * RATE;
        let feed = if kafka {
            let dir = env.run_dir.join("kafka");
            std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
            let watchdog = Watchdog::start(&dir)?;
            let broker = Kafka::start(&dir, Some(&watchdog))?;
            broker.create_topic(TOPIC, 2)?;
            job.kafka = Some(KafkaInput {
                bootstrap: broker.bootstrap.clone(),
                topic: TOPIC.into(),
                bounded: false,
            });
            Some(Feed {
                broker,
                watchdog,
                producer: None,
            })
        } else {
            None
        };
        let client = env.client().await?;
        let api = sj_api(client.clone(), &ns);
        let pods = Api::namespaced(client, &ns);
        let mut soak = Self {
            env,
            proxy,
            op_ns,
            job,
            api,
            pods,
            version: 1,
            t0,
            revived: Vec::new(),
            feed,
        };
        soak.apply()?;
        soak.start_feed();
        Ok(soak)
    }

    /// `--kafka`: a producer writes the generator's records to the topic in id order, round
    /// robin over its 2 partitions, at the generator's rate, while the job reads them.
    fn start_feed(&mut self) {
        let Some(feed) = &mut self.feed else { return };
        let bootstrap = feed.broker.bootstrap.clone();
        let (seed, keys, count) = (self.job.seed, self.job.keys, self.job.count);
        feed.producer = Some(std::thread::spawn(move || {
            let records = (0..count).map(move |id| {
                let partition = i32::from(id % 2 == 1);
                let value = generator_json(seed, keys, id).into_bytes();
                (partition, format!("k{id}"), value)
            });
            produce_to(&bootstrap, TOPIC, records, Some(RATE))
        }));
    }

    /// `--kafka`: the input never ends, so the job never finishes. Once every record is
    /// produced, one record an hour ahead in event time per partition closes every window;
    /// then every window of the input must be committed (`want`'s last end in the output).
    async fn wait_fed_and_committed(
        &mut self,
        timeout: Duration,
        last_end: i64,
        tracker: &tokio::sync::Mutex<OutputTracker>,
    ) -> Result<()> {
        if let Some(feed) = &mut self.feed
            && let Some(producer) = feed.producer.take()
        {
            let written = tokio::task::block_in_place(|| producer.join())
                .map_err(|_| anyhow!("the producer panicked"))??;
            let flush = (0..2).map(|partition| {
                let ts = generator_ts(self.job.count) + 3_600_000;
                let value = format!(r#"{{"id":-1,"key":"{FLUSH_KEY}","value":0,"ts":{ts}}}"#);
                (partition, FLUSH_KEY.to_string(), value.into_bytes())
            });
            feed.broker.produce(TOPIC, &flush.collect::<Vec<_>>())?;
            self.log(&format!(
                "all {written} records produced; every window closed"
            ));
        }
        let what = format!("every window of the input committed (the last ends at {last_end})");
        self.poll(&what, timeout, async |_: &Soak| {
            let end = tracker.lock().await.max_end;
            match end {
                Some(e) if e >= last_end => Ok(()),
                _ => Err(format!("committed up to {end:?}")),
            }
        })
        .await
    }

    /// What a cluster's supervisor does (the kubelet for static pods, systemd): a scheduler or
    /// controller-manager that exited is started again. Called between faults and while
    /// waiting; each restart is logged and counted in the report.
    fn supervise(&mut self) {
        match self.env.revive_control_plane() {
            Ok(revived) => {
                for what in revived {
                    self.log(&format!("restarted {what}"));
                    self.revived.push(what);
                }
            }
            Err(e) => self.log(&format!("restarting the control plane failed: {e:#}")),
        }
    }

    fn log(&self, what: &str) {
        eprintln!("[{:>7.1}s] {what}", self.t0.elapsed().as_secs_f64());
    }

    /// `kubectl apply` of the job with its storage behind the proxy.
    fn apply(&self) -> Result<()> {
        self.env.kubectl_ok(
            &["apply", "-n", &self.job.ns, "-f", "-"],
            Some(&self.job.manifest(&self.proxy.url())),
        )?;
        Ok(())
    }

    async fn get(&self) -> Result<DynamicObject> {
        Ok(self.api.get(&self.job.name).await?)
    }

    /// Polls the StreamJob until `done` holds (errors, as while the apiserver restarts, are
    /// remembered and reported at the deadline).
    async fn wait(
        &mut self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&DynamicObject) -> bool,
    ) -> Result<DynamicObject> {
        self.poll(what, timeout, async |soak: &Soak| match soak.get().await {
            Ok(o) if done(&o) => Ok(o),
            Ok(o) => Err(status(&o).to_string()),
            Err(e) => Err(format!("{e:#}")),
        })
        .await
    }

    /// Polls `check` every half second, supervising the control plane in between, until it
    /// answers `Ok`; its last `Err` (what it saw instead) is reported at the deadline.
    async fn poll<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        check: impl AsyncFn(&Soak) -> std::result::Result<T, String>,
    ) -> Result<T> {
        let deadline = Instant::now() + timeout;
        loop {
            self.supervise();
            let last = match check(self).await {
                Ok(t) => {
                    self.log(what);
                    return Ok(t);
                }
                Err(last) => last,
            };
            if Instant::now() > deadline {
                bail!("not {what} after {timeout:?}: {last}");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    async fn running_with_checkpoint(&mut self) -> Result<DynamicObject> {
        self.wait("running with a checkpoint", Duration::from_secs(180), |o| {
            phase(o) == "Running" && status(o)["lastCheckpoint"]["id"].is_u64()
        })
        .await
    }

    async fn wait_finished(&mut self, timeout: Duration) -> Result<DynamicObject> {
        self.wait("finished", timeout, |o| phase(o) == "Finished")
            .await
    }

    /// The process of a pod's first container: the process kubelet's child, or on the real node
    /// the first process of the container's cgroup.
    fn pid_of(&self, pod: &Pod) -> Option<u32> {
        match &self.env.real_node {
            None => container_pid(pod),
            Some(node) => {
                let id = pod
                    .status
                    .as_ref()?
                    .container_statuses
                    .as_ref()?
                    .first()?
                    .container_id
                    .clone()?;
                node.container_pid(id.strip_prefix("containerd://")?)
            }
        }
    }

    /// A new image tag for the next version: any tag on the process kubelet; on the real node,
    /// the runtime image tagged again in the node's containerd (`ctr images tag`), so the kubelet
    /// finds it without a registry.
    fn next_image(&mut self) -> Result<String> {
        self.version += 1;
        let Some(node) = &self.env.real_node else {
            return Ok(format!("streamjob/runtime:v{}", self.version));
        };
        let image = format!("{}:v{}", images::RUNTIME.0, self.version);
        let full = |i: &str| format!("docker.io/{i}");
        let source = full(&format!("{}:{}", images::RUNTIME.0, images::RUNTIME.1));
        node.ctr(&["images", "tag", "--force", &source, &full(&image)], None)?;
        Ok(image)
    }

    /// Pods of the job with `role`, not terminating, with a running process.
    async fn pids(&self, role: &str) -> Result<Vec<(String, u32)>> {
        let lp = ListParams::default().labels(&format!(
            "streamjob.io/job={},streamjob.io/role={role}",
            self.job.name
        ));
        Ok(self
            .pods
            .list(&lp)
            .await?
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| Some((p.metadata.name.clone()?, self.pid_of(&p)?)))
            // a container that restarted moments ago still shows its old pid: not applicable now
            .filter(|(_, pid)| scenario::pid_alive(*pid))
            .collect())
    }

    /// The process of the deployed runtime (coordinator) pod.
    async fn coordinator(&self) -> Result<Option<(String, u32)>> {
        let o = self.get().await?;
        let workload = status(&o)["deployment"]["workload"]
            .as_str()
            .map(str::to_string);
        Ok(self
            .pids("runtime")
            .await?
            .into_iter()
            .find(|(n, _)| Some(n) == workload.as_ref()))
    }

    /// The operator replica to kill: the Lease's holder (the leader) when there are two, else the
    /// only one.
    async fn operator_pid(&self) -> Result<Option<(String, u32)>> {
        let client = self.env.client().await?;
        let leases: Api<Lease> = Api::namespaced(client.clone(), &self.op_ns);
        let leader = leases
            .get_opt(LEASE)
            .await?
            .and_then(|l| l.spec?.holder_identity);
        let pods: Api<Pod> = Api::namespaced(client, &self.op_ns);
        let mut live: Vec<(String, u32)> = pods
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| Some((p.metadata.name.clone()?, self.pid_of(&p)?)))
            .filter(|(_, pid)| scenario::pid_alive(*pid))
            .collect();
        live.sort_by_key(|(name, _)| Some(name) != leader.as_ref());
        Ok(live.into_iter().next())
    }

    /// Whether an upgrade, rollback or resume is in flight (one that ended — rolled back,
    /// aborted or blocked — waits for a new spec, which the next bump is).
    async fn upgrading(&self) -> Result<bool> {
        let o = self.get().await?;
        let step = status(&o)["upgrade"]["step"].as_str().unwrap_or("");
        Ok(!step.is_empty()
            && !["/RolledBack", "/Aborted", "/Blocked"]
                .iter()
                .any(|end| step.ends_with(end)))
    }

    /// The job's events with `reason`, counted (a repeated event counts each time).
    async fn events(&self, reason: &str) -> Result<usize> {
        let events: Api<Event> = Api::namespaced(self.env.client().await?, &self.job.ns);
        let lp = ListParams::default().fields(&format!(
            "involvedObject.name={},reason={reason}",
            self.job.name
        ));
        Ok(events
            .list(&lp)
            .await?
            .items
            .iter()
            .map(|e| usize::try_from(e.count.unwrap_or(1).max(1)).unwrap_or(1))
            .sum())
    }

    /// Injects one fault: how long it lasted by itself, or `None` when it does not apply now (no
    /// such process, an upgrade in flight).
    async fn inject(
        &mut self,
        fault: Fault,
        rng: &mut StdRng,
        committed: Option<i64>,
    ) -> Result<Option<Duration>> {
        let mut lasted = Duration::ZERO;
        match fault {
            Fault::KillRuntime | Fault::KillWorker | Fault::KillOperator => {
                let target = match fault {
                    Fault::KillRuntime => self.coordinator().await?,
                    Fault::KillWorker => {
                        let mut workers = self.pids("worker").await?;
                        if workers.is_empty() {
                            None
                        } else {
                            let i = rng.random_range(0..workers.len());
                            Some(workers.swap_remove(i))
                        }
                    }
                    _ => self.operator_pid().await?,
                };
                let Some((pod, pid)) = target else {
                    return Ok(None);
                };
                signal(pid, Signal::SIGKILL)?;
                self.log(&format!("{fault:?}: {pod} (pid {pid})"));
            }
            Fault::PauseRuntime => {
                let Some((pod, pid)) = self.coordinator().await? else {
                    return Ok(None);
                };
                let pause = Duration::from_millis(rng.random_range(1000..4000));
                lasted = pause;
                signal(pid, Signal::SIGSTOP)?;
                tokio::time::sleep(pause).await;
                // gone meanwhile (deleted by an upgrade) is fine
                let _ = signal(pid, Signal::SIGCONT);
                self.log(&format!("{fault:?}: {pod} (pid {pid}) for {pause:?}"));
            }
            Fault::ImageBump | Fault::FailingVersion => {
                if self.upgrading().await? {
                    return Ok(None);
                }
                self.job.image = self.next_image()?;
                self.job.strategy = if self.version.is_multiple_of(2) {
                    "Shadow"
                } else {
                    "InPlace"
                };
                if fault == Fault::FailingVersion {
                    let Some(end) = committed else {
                        return Ok(None);
                    };
                    let poison = u64::try_from(end - START_MS)? + 10 * RATE;
                    self.job.filter = true;
                    self.job.filter_sql = format!(
                        "CASE WHEN id > {poison} THEN 10 / (CAST(id AS BIGINT) - CAST(id AS BIGINT)) ELSE 1 END > 0"
                    );
                    self.job.checkpoint_interval = "30s";
                    self.job.readiness_timeout = "40s";
                    self.apply()?;
                    self.log(&format!(
                        "{fault:?}: {} ({}) failing at record {}",
                        self.job.image,
                        self.job.strategy,
                        poison + 1
                    ));
                    // the next spec is a good one again
                    self.job.filter = false;
                    self.job.checkpoint_interval = "1s";
                    self.job.readiness_timeout = "60s";
                } else {
                    self.apply()?;
                    self.log(&format!(
                        "{fault:?}: {} ({})",
                        self.job.image, self.job.strategy
                    ));
                }
            }
            Fault::StoreOutage => {
                let outage = Duration::from_millis(rng.random_range(500..8000));
                lasted = outage;
                self.proxy.start_outage();
                tokio::time::sleep(outage).await;
                self.proxy.end_outage();
                self.log(&format!("{fault:?}: {outage:?}"));
            }
            Fault::ApiServerRestart => {
                let away = self.env.restart_apiserver().await?;
                lasted = away;
                self.log(&format!("{fault:?}: away {away:?}"));
            }
            Fault::StoreSlowdown => {
                let delay = Duration::from_millis(rng.random_range(20..200));
                let lasting = Duration::from_millis(rng.random_range(2000..8000));
                lasted = lasting;
                self.proxy.set_delay(delay);
                tokio::time::sleep(lasting).await;
                self.proxy.set_delay(Duration::ZERO);
                self.log(&format!("{fault:?}: {delay:?} per chunk for {lasting:?}"));
            }
            Fault::KafkaRestart => {
                let Some(feed) = &mut self.feed else {
                    return Ok(None);
                };
                let away = tokio::task::block_in_place(|| {
                    feed.broker.crash_and_restart(Some(&feed.watchdog))
                })?;
                lasted = away;
                self.log(&format!("{fault:?}: away {away:?}"));
            }
            Fault::FinalGoodSpec => return Ok(None),
        }
        Ok(Some(lasted))
    }
}

fn signal(pid: u32, sig: Signal) -> Result<()> {
    let pid = i32::try_from(pid).map_err(|_| anyhow!("pid {pid}"))?;
    kill(Pid::from_raw(pid), sig).with_context(|| format!("{sig:?} to {pid}"))
}

/// What the output holds against what the generator's definition says it must.
#[derive(Debug, Default)]
struct Report {
    aggregates: usize,
    read: usize,
    missing: usize,
    duplicated: usize,
    wrong: usize,
    extra: usize,
    records_expected: i64,
    /// Records counted in the output (duplicates included).
    records_read: i64,
}

impl Report {
    fn new(want: &scenario::Aggregates, got: &scenario::Output) -> Self {
        let mut r = Report {
            aggregates: want.len(),
            read: got.len(),
            records_expected: want.values().map(|(c, _)| c).sum(),
            records_read: got.values().map(|((c, _), n)| c * *n as i64).sum(),
            ..Default::default()
        };
        for (k, v) in want {
            match got.get(k) {
                None => r.missing += 1,
                Some((g, n)) => {
                    if g != v {
                        r.wrong += 1;
                    }
                    r.duplicated += n.saturating_sub(1);
                }
            }
        }
        r.extra = got.keys().filter(|k| !want.contains_key(*k)).count();
        r
    }

    fn exactly_once(&self) -> bool {
        self.missing == 0
            && self.duplicated == 0
            && self.wrong == 0
            && self.extra == 0
            && self.records_read == self.records_expected
    }
}

/// An output stall and the faults behind it.
#[derive(Debug)]
struct Stall {
    from: Instant,
    to: Instant,
    /// Faults started from 1 s before the stall to its end (an advance already in flight when
    /// a fault hit still lands): the first is the likely cause.
    faults: Vec<Injected>,
    /// From the end of the last of those faults to the output's next advance: the recovery the
    /// faults' own durations do not explain (the whole stall when no fault was in it).
    beyond: Duration,
    /// The longest stretch of the stall with no fault in progress: the slowest recovery from
    /// one fault before the next hit (faults every few seconds chain stalls far longer than any
    /// one of them causes). The bound [`QUIET_BOUND`] applies to it.
    quiet: Duration,
}

/// No fault may stop the output longer than this beyond its own duration (issue #38).
const QUIET_BOUND: Duration = Duration::from_secs(30);

/// The stalls (longest first) with the faults of `timeline` in each.
fn blame(gaps: &[(Instant, Instant)], timeline: &[Injected]) -> Vec<Stall> {
    gaps.iter()
        .map(|&(from, to)| {
            let faults: Vec<Injected> = timeline
                .iter()
                .filter(|f| f.at + Duration::from_secs(1) >= from && f.at < to)
                .copied()
                .collect();
            let quiet_from = faults
                .iter()
                .map(|f| (f.at + f.lasted).max(from))
                .max()
                .unwrap_or(from);
            let mut quiet = Duration::ZERO;
            let mut cursor = from;
            for f in &faults {
                quiet = quiet.max(f.at.max(from).saturating_duration_since(cursor));
                cursor = cursor.max(f.at + f.lasted);
            }
            quiet = quiet.max(to.saturating_duration_since(cursor));
            Stall {
                from,
                to,
                faults,
                beyond: to.saturating_duration_since(quiet_from),
                quiet,
            }
        })
        .collect()
}

/// The five longest stalls, and the longest recovery beyond the faults' own durations.
fn render_stalls(stalls: &[Stall], t0: Instant) -> String {
    let mut t = String::from(
        "| output stall | from (s) | faults in it (s after start, own duration) | beyond the faults | longest with no fault in progress |\n|---:|---:|---|---:|---:|\n",
    );
    for s in stalls.iter().take(5) {
        let faults: Vec<String> = s
            .faults
            .iter()
            .map(|f| {
                format!(
                    "{:?} at {:.1} ({:.1} s)",
                    f.fault,
                    (f.at - t0).as_secs_f64(),
                    f.lasted.as_secs_f64()
                )
            })
            .collect();
        let _ = writeln!(
            t,
            "| {:.1} s | {:.1} | {} | {:.1} s | {:.1} s |",
            (s.to - s.from).as_secs_f64(),
            (s.from - t0).as_secs_f64(),
            if faults.is_empty() {
                "none".to_string()
            } else {
                faults.join(", ")
            },
            s.beyond.as_secs_f64(),
            s.quiet.as_secs_f64()
        );
    }
    if let Some(worst) = stalls.iter().max_by_key(|s| s.beyond) {
        let cause = worst
            .faults
            .first()
            .map_or("no fault".to_string(), |f| format!("{:?}", f.fault));
        let _ = writeln!(
            t,
            "\nlongest recovery beyond the faults' own durations: {:.1} s (stall from {:.1} s, first fault {cause})",
            worst.beyond.as_secs_f64(),
            (worst.from - t0).as_secs_f64()
        );
    }
    if let Some(worst) = stalls.iter().max_by_key(|s| s.quiet) {
        let _ = writeln!(
            t,
            "longest output stall with no fault in progress: {:.1} s (stall from {:.1} s; bound {} s)",
            worst.quiet.as_secs_f64(),
            (worst.from - t0).as_secs_f64(),
            QUIET_BOUND.as_secs()
        );
    }
    t
}

#[allow(clippy::too_many_arguments)]
fn render(
    setting: &str,
    seed: u64,
    injected: &BTreeMap<Fault, usize>,
    skipped: usize,
    r: &Report,
    count: u64,
    stall: Duration,
    faults_for: Duration,
    total: Duration,
) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "## Soak (seed {seed}; {setting})\n");
    let _ = writeln!(t, "| fault | injected |\n|---|---:|");
    for (kind, n) in injected {
        let _ = writeln!(t, "| {kind:?} | {n} |");
    }
    let total_faults: usize = injected.values().sum();
    let _ = writeln!(
        t,
        "| **all** | **{total_faults}** (over {:.0} s; {skipped} not applicable when drawn) |\n",
        faults_for.as_secs_f64()
    );
    let _ = writeln!(t, "| output | value |\n|---|---:|");
    let _ = writeln!(t, "| records generated | {count} |");
    let _ = writeln!(
        t,
        "| records expected in aggregates | {} |",
        r.records_expected
    );
    let _ = writeln!(
        t,
        "| records in committed aggregates | {} |",
        r.records_read
    );
    let _ = writeln!(t, "| aggregates expected | {} |", r.aggregates);
    let _ = writeln!(t, "| aggregates read | {} |", r.read);
    let _ = writeln!(t, "| missing | {} |", r.missing);
    let _ = writeln!(t, "| duplicated | {} |", r.duplicated);
    let _ = writeln!(t, "| wrong value | {} |", r.wrong);
    let _ = writeln!(t, "| not expected | {} |", r.extra);
    let _ = writeln!(t, "| longest output stall | {:.1} s |", stall.as_secs_f64());
    let _ = writeln!(t, "| run time | {:.0} s |", total.as_secs_f64());
    let _ = writeln!(
        t,
        "\nresult: {}",
        if r.exactly_once() {
            "PASS (exactly once)"
        } else {
            "FAIL"
        }
    );
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stall_is_blamed_on_the_faults_in_it_and_measured_past_their_end() {
        let t0 = Instant::now();
        let s = |secs: f64| t0 + Duration::from_secs_f64(secs);
        let timeline = [
            Injected {
                at: s(10.0),
                fault: Fault::KillRuntime,
                lasted: Duration::ZERO,
            },
            Injected {
                at: s(20.0),
                fault: Fault::StoreOutage,
                lasted: Duration::from_secs(5),
            },
            Injected {
                at: s(45.0),
                fault: Fault::KillWorker,
                lasted: Duration::ZERO,
            },
        ];
        let stalls = blame(&[(s(10.5), s(40.0)), (s(50.0), s(52.0))], &timeline);
        // the kill half a second before the last advance still counts; the outage ended at 25 s
        let kinds: Vec<Fault> = stalls[0].faults.iter().map(|f| f.fault).collect();
        assert_eq!(kinds, [Fault::KillRuntime, Fault::StoreOutage]);
        assert_eq!(stalls[0].beyond, Duration::from_secs(15));
        // no fault in it: the whole stall is unexplained
        assert!(stalls[1].faults.is_empty());
        assert_eq!(stalls[1].beyond, Duration::from_secs(2));
        assert_eq!(stalls[0].quiet, Duration::from_secs(15));
        assert_eq!(stalls[1].quiet, Duration::from_secs(2));
        let table = render_stalls(&stalls, t0);
        assert!(
            table.contains("longest recovery beyond the faults' own durations: 15.0 s"),
            "{table}"
        );
        assert!(
            table.contains("longest output stall with no fault in progress: 15.0 s"),
            "{table}"
        );
        // a quiet stretch between two faults counts as much as the one after the last
        let outages = [
            timeline[1],
            Injected {
                at: s(40.0),
                fault: Fault::StoreOutage,
                lasted: Duration::from_secs(5),
            },
        ];
        for (to, beyond) in [(60.0, 15), (50.0, 5)] {
            let chained = blame(&[(s(19.0), s(to))], &outages);
            assert_eq!(chained[0].beyond, Duration::from_secs(beyond));
            assert_eq!(chained[0].quiet, Duration::from_secs(15));
        }
    }
}
