//! `streamjob-runtime bench`: Nexmark throughput of q0, q1, q2, q5 and q7 with checkpoints off
//! and on, next to the raw rate of the Nexmark generator measured in the same run.
//!
//! Queries (over the flattened Nexmark table, bids only):
//! * q0 — pass-through;
//! * q1 — currency conversion: `project` auction, bidder, `bid_price * 908 / 1000`, date_time;
//! * q2 — selection: `filter bid_auction % 123 = 0`, project auction and price;
//! * q5 — hot items (counting part): `keyBy bid_auction`, sliding 10s/2s window, count;
//! * q7 — highest bid (simplified): `keyBy bid_auction`, tumbling 10s window, max price.
//!
//! The sink is a discarding sink (registered in place of `fileSink`), so the numbers measure the
//! engine, not stdout.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nexmark::EventGenerator;
use streamjob_crds::v1alpha1::StreamJob;

use crate::coordinator::{RestoreFrom, RunOptions, Shared, run_job};
use crate::error::Result;
use crate::graph::build_graph;
use crate::operator::{Collector, DataBatch, Operator, OperatorContext, RestoredState};
use crate::operators::nexmark::{NexmarkBatchBuilder, nexmark_config};
use crate::registry::{OperatorPlan, Registry};

/// A sink that drops everything, registered in place of `fileSink` by the benchmarks.
pub(crate) struct Discard;

impl Operator for Discard {
    async fn initialize_state(&mut self, _: &OperatorContext, _: RestoredState) -> Result<()> {
        Ok(())
    }
    async fn process_batch(
        &mut self,
        _: &OperatorContext,
        _: DataBatch,
        _: &mut Collector,
    ) -> Result<()> {
        Ok(())
    }
}

/// The built-in operators with `fileSink` replaced by [`Discard`].
pub(crate) fn discarding_registry() -> Registry {
    let mut registry = Registry::with_builtins();
    registry.register_file_sink(|cx| {
        Ok(OperatorPlan::stateless(
            "discard",
            cx.input_schema.clone(),
            |_| Ok(Discard),
        ))
    });
    registry
}

fn query(name: &str) -> Option<&'static str> {
    Some(match name {
        "q0" => "",
        "q1" => {
            "    - uid: q1\n      project:\n        - {name: auction, expr: bid_auction}\n        - {name: bidder, expr: bid_bidder}\n        - {name: price, expr: \"bid_price * 908 / 1000\"}\n        - {name: date_time, expr: date_time}\n"
        }
        "q2" => {
            "    - uid: q2-filter\n      filter: \"bid_auction % 123 = 0\"\n    - uid: q2\n      project:\n        - {name: auction, expr: bid_auction}\n        - {name: price, expr: bid_price}\n"
        }
        "q5" => {
            "    - uid: q5\n      keyBy: [bid_auction]\n      window: {sliding: {size: 10s, slide: 2s}}\n      aggregate: {count: true}\n"
        }
        "q7" => {
            "    - uid: q7\n      keyBy: [bid_auction]\n      window: {tumbling: 10s}\n      aggregate: {max: [bid_price]}\n"
        }
        _ => return None,
    })
}

fn manifest(q: &str, parallelism: u32, interval: &str, dir: &str) -> String {
    format!(
        "apiVersion: streamjob.io/v1alpha1\nkind: StreamJob\nmetadata: {{name: bench}}\nspec:\n  image: bench\n  parallelism: {parallelism}\n  checkpoints: {{dir: {dir}, interval: {interval}}}\n  pipeline:\n    - uid: bids\n      source: {{nexmark: {{eventKinds: [bid]}}}}\n{}    - uid: sink\n      fileSink: {{path: {dir}/out, format: {{jsonLines: {{}}}}}}\n",
        query(q).unwrap_or("")
    )
}

/// Raw generator throughput (events/s on one core).
fn generator_rate(seconds: f64) -> f64 {
    let mut g = EventGenerator::new(nexmark_config());
    let start = Instant::now();
    let mut n = 0u64;
    let mut b = NexmarkBatchBuilder::new();
    while start.elapsed().as_secs_f64() < seconds {
        for _ in 0..1024 {
            if let Some(e) = g.next() {
                b.push(&e);
            }
        }
        n += 1024;
        let _ = b.finish();
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// Throughput of query `q` (events/s read by the sources) and the checkpoints completed. With
/// `workers` > 0 the subtasks run on that many workers of this process, connected to the
/// coordinator and to each other over loopback TCP exactly as worker processes are: the
/// difference to the in-process run is the cost of the network exchange (Arrow IPC framing,
/// sockets), on the same cores.
async fn measure(
    q: &str,
    parallelism: u32,
    interval: &str,
    seconds: u64,
    workers: usize,
) -> Result<(f64, u64)> {
    let dir = std::env::temp_dir().join(format!(
        "streamjob-bench-{}-{}",
        std::process::id(),
        chrono::Utc::now().timestamp_micros()
    ));
    let text = manifest(q, parallelism, interval, &dir.display().to_string());
    let job = StreamJob::from_yaml(&text)?;
    let graph = build_graph(&job, &discarding_registry()).await?;
    let mut worker_tasks = Vec::new();
    let cluster = if workers > 0 {
        let digest = crate::cluster::wire::spec_digest(&graph.spec)?;
        let w = crate::cluster::workers::Workers::listen(
            ([127, 0, 0, 1], 0).into(),
            workers,
            None,
            digest,
            Duration::from_secs(30),
        )
        .await?;
        for i in 0..workers {
            let opts = crate::cluster::worker::WorkerOptions {
                coordinator: w.local_addr().to_string(),
                data_addr: ([127, 0, 0, 1], 0).into(),
                advertise_host: None,
                token: None,
                name: format!("bench-{i}"),
                reconnect_timeout: Duration::from_secs(5),
            };
            worker_tasks.push(tokio::spawn(crate::cluster::worker::run_worker(
                graph.clone(),
                opts,
            )));
        }
        Some(w)
    } else {
        None
    };
    let (shared, rx) = Shared::new("bench");
    let s2 = shared.clone();
    let handle = tokio::spawn(async move {
        run_job(
            graph,
            RunOptions {
                restore: RestoreFrom::Empty,
                max_restarts: 0,
                standby: false,
                workers: cluster,
                epoch: None,
                resume_own: false,
            },
            s2,
            rx,
        )
        .await
    });
    // warm up (workers register and deploy first), then measure
    let warm_up = if workers > 0 { 1500 } else { 500 };
    tokio::time::sleep(Duration::from_millis(warm_up)).await;
    let read = |s: &Arc<Shared>| s.metrics.totals().0;
    let (t0, n0) = (Instant::now(), read(&shared));
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let (t1, n1) = (Instant::now(), read(&shared));
    let checkpoints = shared.metrics.checkpoints_completed.load(Ordering::Relaxed);
    handle.abort();
    let _ = handle.await;
    for t in worker_tasks {
        t.abort();
        let _ = t.await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(((n1 - n0) as f64 / (t1 - t0).as_secs_f64(), checkpoints))
}

/// Runs the benchmark and prints a table.
pub async fn run(
    seconds: u64,
    parallelism: u32,
    interval: &str,
    queries: Option<&str>,
    workers: usize,
) -> Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let qs: Vec<String> = queries
        .unwrap_or("q0,q1,q2,q5,q7")
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|q| query(q).is_some())
        .collect();
    let gen_rate = tokio::task::spawn_blocking(move || generator_rate(seconds as f64))
        .await
        .unwrap_or(0.0);
    println!(
        "nexmark generator alone (1 core, building Arrow batches): {:.0} events/s",
        gen_rate
    );
    if workers > 0 {
        return compare_workers(&qs, parallelism, interval, seconds, workers).await;
    }
    println!(
        "parallelism {parallelism}, {cores} cores, {seconds}s per run; per core = events/s / cores"
    );
    println!(
        "{:<5} {:>16} {:>12} {:>22} {:>12} {:>12}",
        "query", "ckpt off ev/s", "per core", "ckpt on ev/s", "per core", "checkpoints"
    );
    for q in qs {
        let (off, _) = measure(&q, parallelism, "1h", seconds, 0).await?;
        let (on, n) = measure(&q, parallelism, interval, seconds, 0).await?;
        println!(
            "{:<5} {:>16.0} {:>12.0} {:>22.0} {:>12.0} {:>12}",
            q,
            off,
            off / cores,
            on,
            on / cores,
            n
        );
    }
    Ok(())
}

/// The same queries with checkpoints on, in one process and over `workers` workers.
async fn compare_workers(
    qs: &[String],
    parallelism: u32,
    interval: &str,
    seconds: u64,
    workers: usize,
) -> Result<()> {
    println!(
        "parallelism {parallelism}, checkpoints every {interval}: subtasks in the coordinator vs on {workers} workers (loopback TCP, Arrow IPC)"
    );
    println!(
        "{:<5} {:>18} {:>18} {:>8} {:>12} {:>12}",
        "query", "in-process ev/s", "workers ev/s", "ratio", "ckpts local", "ckpts workers"
    );
    for q in qs {
        let (local, n_local) = measure(q, parallelism, interval, seconds, 0).await?;
        let (remote, n_remote) = measure(q, parallelism, interval, seconds, workers).await?;
        println!(
            "{:<5} {:>18.0} {:>18.0} {:>7.2}x {:>12} {:>12}",
            q,
            local,
            remote,
            remote / local.max(1.0),
            n_local,
            n_remote
        );
    }
    Ok(())
}
