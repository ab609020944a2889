//! The worker role: registers with the coordinator, runs the subtasks of its slot for each
//! attempt the coordinator deploys, and exchanges data with the other workers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;
use tracing::Instrument;

use super::dataplane::DataPlane;
use super::wire::{
    BarrierResolver, FromWorker, KEEPALIVE, PEER_TIMEOUT, StepCounters, ToWorker, read_first_json,
    read_json, spec_digest, write_json,
};
use crate::coordinator::{Spread, Subtasks, spawn_subtasks};
use crate::error::{Error, Result};
use crate::graph::JobGraph;
use crate::metrics::OperatorMetrics;
use crate::snapshot::LoadedSnapshot;
use crate::storage::Location;
use crate::task::{TaskCommand, TaskEvent};

/// Settings of a worker.
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    /// The coordinator's cluster address.
    pub coordinator: String,
    /// Where to listen for data connections.
    pub data_addr: SocketAddr,
    /// The host other workers use to reach this one (default: the bound IP).
    pub advertise_host: Option<String>,
    pub token: Option<String>,
    /// Name in the coordinator's logs (pod name).
    pub name: String,
    /// Give up when the coordinator cannot be reached for this long.
    pub reconnect_timeout: Duration,
}

/// How a worker ended.
#[derive(Debug, PartialEq)]
pub enum WorkerExit {
    /// The coordinator said the job is over.
    JobOver(String),
}

/// The attempt this worker currently runs.
struct Running {
    attempt: u64,
    subtasks: Subtasks,
}

/// Runs the worker until the coordinator ends the job, refuses the worker, or stays unreachable
/// for `reconnect_timeout`.
pub async fn run_worker(graph: JobGraph, opts: WorkerOptions) -> Result<WorkerExit> {
    let digest = spec_digest(&graph.spec)?;
    let plane = DataPlane::bind(
        opts.data_addr,
        opts.token.clone(),
        digest.clone(),
        graph.spec.storage.clone(),
    )
    .await?;
    let bound = plane.local_addr();
    let advertised = match &opts.advertise_host {
        Some(h) => format!("{h}:{}", bound.port()),
        None => bound.to_string(),
    };
    tracing::info!(%bound, %advertised, "data plane listening");
    // one set of counters for the worker's life: the coordinator sums the workers' reports
    let metrics: Vec<Arc<OperatorMetrics>> = graph
        .steps
        .iter()
        .map(|s| Arc::new(OperatorMetrics::new(&s.uid)))
        .collect();
    let mut last_contact = Instant::now();
    loop {
        let stream = match TcpStream::connect(&opts.coordinator).await {
            Ok(s) => s,
            Err(e) => {
                if last_contact.elapsed() > opts.reconnect_timeout {
                    return Err(Error::Cluster(format!(
                        "the coordinator at {} was unreachable for {:?}: {e}",
                        opts.coordinator, opts.reconnect_timeout
                    )));
                }
                tracing::debug!(error = %e, "coordinator not reachable yet");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let span = tracing::info_span!("session", coordinator = %opts.coordinator);
        let ended = session(
            stream,
            &graph,
            &opts,
            &digest,
            &advertised,
            &plane,
            &metrics,
        )
        .instrument(span)
        .await;
        last_contact = Instant::now();
        match ended {
            Ok(Some(exit)) => return Ok(exit),
            Ok(None) => {
                tracing::warn!("lost the coordinator: cancelled the running attempt, reconnecting")
            }
            Err(Error::Cluster(reason)) if reason.starts_with("refused:") => {
                return Err(Error::Cluster(reason));
            }
            Err(e) => {
                tracing::warn!(error = %e, "coordinator session failed: reconnecting")
            }
        }
    }
}

/// One connection to the coordinator. `Ok(None)`: the connection was lost (reconnect).
async fn session(
    stream: TcpStream,
    graph: &JobGraph,
    opts: &WorkerOptions,
    digest: &str,
    advertised: &str,
    plane: &Arc<DataPlane>,
    metrics: &[Arc<OperatorMetrics>],
) -> Result<Option<WorkerExit>> {
    stream.set_nodelay(true)?;
    let (read, write) = stream.into_split();
    let mut read = BufReader::new(read);
    let mut write = BufWriter::new(write);
    send(
        &mut write,
        &FromWorker::Hello {
            name: opts.name.clone(),
            token: opts.token.clone(),
            spec_digest: digest.to_string(),
            runtime_version: env!("CARGO_PKG_VERSION").to_string(),
            data_addr: advertised.to_string(),
        },
    )
    .await?;
    let slot = match read_first_json::<_, ToWorker>(&mut read).await? {
        Some(ToWorker::Welcome { slot, workers }) => {
            tracing::info!(slot, workers, "registered with the coordinator");
            slot
        }
        Some(ToWorker::Refused { reason }) => {
            return Err(Error::Cluster(format!("refused: {reason}")));
        }
        Some(other) => {
            return Err(Error::Cluster(format!(
                "expected welcome or refusal, got {other:?}"
            )));
        }
        None => return Ok(None),
    };
    // reading is not cancel-safe inside select!: a reader task hands over whole messages
    let (msg_tx, mut messages) = tokio::sync::mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        loop {
            let m = match tokio::time::timeout(PEER_TIMEOUT, read_json::<_, ToWorker>(&mut read))
                .await
            {
                Ok(m) => m,
                Err(_) => Err(Error::Cluster(format!(
                    "the coordinator sent nothing for {PEER_TIMEOUT:?}"
                ))),
            };
            let stop = !matches!(m, Ok(Some(_)));
            if msg_tx.send(m).is_err() || stop {
                return;
            }
        }
    });
    let _reader = AbortOnDrop(reader);
    let mut barriers = BarrierResolver::new(graph.spec.storage.clone());
    let mut running: Option<Running> = None;
    // an attempt being deployed (its snapshot loads in the background, so keep-alives go on),
    // with the commands that arrived for it meanwhile
    let mut deploying: Option<Deploying> = None;
    let mut report = tokio::time::interval(KEEPALIVE);
    report.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            m = messages.recv() => {
                let msg = match m {
                    Some(Ok(Some(msg))) => msg,
                    Some(Ok(None)) | None => return Ok(None),
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "coordinator connection broke");
                        return Ok(None);
                    }
                };
                match msg {
                    ToWorker::Deploy { attempt, restore, peers } => {
                        // the old attempt's subtasks stop before the new ones start
                        running = None;
                        plane.retire_before(attempt);
                        let (graph, plane, metrics) = (graph.clone(), plane.clone(), metrics.to_vec());
                        let task = tokio::spawn(async move {
                            deploy(&graph, slot, attempt, restore.as_deref(), &peers, &plane, &metrics).await
                        });
                        deploying = Some(Deploying { attempt, task: AbortOnDrop(task), early: Vec::new() });
                    }
                    ToWorker::Command { attempt, step, subtask, command } => {
                        let cmd = command.resolve(&mut barriers)?;
                        if let Some(d) = deploying.as_mut().filter(|d| d.attempt == attempt) {
                            d.early.push((step, subtask, cmd));
                        } else if let Some(r) = running.as_ref().filter(|r| r.attempt == attempt) {
                            r.deliver(step, subtask, cmd);
                        }
                    }
                    ToWorker::Cancel { attempt } => {
                        if running.as_ref().is_some_and(|r| r.attempt == attempt)
                            || deploying.as_ref().is_some_and(|d| d.attempt == attempt)
                        {
                            tracing::info!(attempt, "attempt cancelled");
                            running = None;
                            deploying = None;
                        }
                    }
                    ToWorker::Exit { reason } => {
                        tracing::info!(%reason, "the coordinator ended the job");
                        return Ok(Some(WorkerExit::JobOver(reason)));
                    }
                    ToWorker::Ping => {}
                    ToWorker::Welcome { .. } | ToWorker::Refused { .. } => {
                        tracing::warn!("ignoring a second welcome");
                    }
                }
            }
            done = deployed(&mut deploying) => {
                let Some(d) = deploying.take() else { continue };
                match done {
                    Ok(subtasks) => {
                        tracing::info!(attempt = d.attempt, subtasks = subtasks.count, "attempt deployed");
                        let r = Running { attempt: d.attempt, subtasks };
                        for (step, subtask, cmd) in d.early {
                            r.deliver(step, subtask, cmd);
                        }
                        running = Some(r);
                    }
                    Err(e) => {
                        tracing::warn!(attempt = d.attempt, error = %e, "cannot deploy");
                        send(&mut write, &FromWorker::DeployFailed { attempt: d.attempt, error: e.to_string() }).await?;
                    }
                }
            }
            ev = next_event(&mut running) => {
                if let Some((attempt, event)) = ev {
                    send(&mut write, &FromWorker::Event { attempt, event }).await?;
                }
            }
            _ = report.tick() => {
                send(&mut write, &FromWorker::Metrics { steps: counters(metrics) }).await?;
            }
        }
    }
}

struct Deploying {
    attempt: u64,
    task: AbortOnDrop<Result<Subtasks>>,
    early: Vec<(usize, usize, TaskCommand)>,
}

/// The result of the deploy under way (pending forever when none is).
async fn deployed(deploying: &mut Option<Deploying>) -> Result<Subtasks> {
    match deploying {
        Some(d) => match (&mut d.task.0).await {
            Ok(r) => r,
            Err(e) => Err(Error::Cluster(format!("the deploy task ended: {e}"))),
        },
        None => std::future::pending().await,
    }
}

impl Running {
    fn deliver(&self, step: usize, subtask: usize, cmd: TaskCommand) {
        match self
            .subtasks
            .commands
            .get(step)
            .and_then(|s| s.get(subtask))
        {
            Some(Some(tx)) => {
                let _ = tx.send(cmd);
            }
            _ => tracing::warn!(step, subtask, "a command for a subtask that is not here"),
        }
    }
}

async fn send(w: &mut BufWriter<OwnedWriteHalf>, msg: &FromWorker) -> Result<()> {
    write_json(w, msg).await?;
    w.flush().await?;
    Ok(())
}

/// The next event of the running attempt (pending forever when nothing runs).
async fn next_event(running: &mut Option<Running>) -> Option<(u64, TaskEvent)> {
    match running {
        Some(r) => {
            let ev = r.subtasks.events.recv().await?;
            Some((r.attempt, ev))
        }
        None => std::future::pending().await,
    }
}

async fn deploy(
    graph: &JobGraph,
    slot: usize,
    attempt: u64,
    restore: Option<&str>,
    peers: &[String],
    plane: &Arc<DataPlane>,
    metrics: &[Arc<OperatorMetrics>],
) -> Result<Subtasks> {
    if slot >= peers.len() {
        return Err(Error::Cluster(format!(
            "slot {slot} is outside the {} deployed slots",
            peers.len()
        )));
    }
    let snapshot = match restore {
        Some(p) => {
            let loc = Location::parse(p, graph.spec.storage.as_ref())?;
            Some(LoadedSnapshot::load(&loc).await?)
        }
        None => None,
    };
    let spread = Spread {
        attempt,
        slot,
        peers,
        plane,
    };
    spawn_subtasks(graph, snapshot.as_ref(), metrics, Some(&spread))
}

fn counters(metrics: &[Arc<OperatorMetrics>]) -> Vec<StepCounters> {
    metrics.iter().map(|m| StepCounters::read(m)).collect()
}

struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
