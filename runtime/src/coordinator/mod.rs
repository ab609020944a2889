//! The coordinator: runs a job graph (all subtasks in this process), triggers checkpoints and
//! savepoints, completes them, restarts the job from the latest completed checkpoint on failure.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::fence::{Fence, StartCheck, check_start};
use crate::graph::{JobGraph, Node, Partition};
use crate::keygroups::key_group_range;
use crate::metrics::{JobMetrics, OperatorMetrics};
use crate::operator::OperatorContext;
use crate::restart::{RestartDecision, RestartPolicy, Restarts};
use crate::restore::check_restore;
use crate::snapshot::{
    FORMAT_VERSION, LoadedSnapshot, METADATA_FILE, OperatorMeta, ResumeChoice, SnapshotKind,
    SnapshotMetadata, SubtaskMeta, choose_resume, latest_checkpoint, list_checkpoints,
};
use crate::storage::Location;
use crate::task::{
    Barrier, BarrierKind, CHANNEL_CAPACITY, Element, Output, TaskCommand, TaskEvent, TaskSetup,
    run_operator, run_source,
};

/// Where a run starts from.
#[derive(Clone, Debug, PartialEq)]
pub enum RestoreFrom {
    /// Empty state.
    Empty,
    /// A savepoint or checkpoint directory.
    Path(String),
    /// The latest completed checkpoint in `spec.checkpoints.dir` (empty if there is none).
    LatestCheckpoint,
    /// `--from-savepoint P --resume`: the latest completed checkpoint in `spec.checkpoints.dir`
    /// taken after restoring P (by lineage, see [`crate::snapshot::choose_resume`]), else P.
    ResumeAfter(String),
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// A bounded job finished (its final checkpoint committed everything).
    Finished,
    /// Stopped with a savepoint at this path.
    Stopped { savepoint: String },
    /// Stopped with a savepoint at this path, asked to stand by for `POST /v1/start` afterwards
    /// (only seen inside [`run_job`], which then waits in state `standby`; returned as `Stopped`
    /// when the process is shutting down).
    StoppedToStandby { savepoint: String },
    /// Stopped (SIGTERM in coordinator mode) with a final checkpoint at this path, which
    /// `--resume` restores.
    Checkpointed { checkpoint: String },
    /// Cancelled by `POST /v1/cancel`: nothing was committed after the last commit (only seen
    /// inside [`run_job`], which then waits in state `cancelled`).
    Cancelled,
}

/// `/v1/status` and the savepoint answers: the contract's types (`streamjob-contract`).
pub use streamjob_contract::requests::SavepointProgress;
pub use streamjob_contract::status::{JobStatus, RestoredFrom, RunState, Snapshot, SourceProblem};

/// Requests from the control API (and signals) to the coordinator.
#[derive(Debug)]
pub enum ControlRequest {
    Savepoint {
        id: String,
        dir: Option<String>,
        stop: bool,
        /// With `stop`: wait in state `standby` afterwards instead of ending.
        standby: bool,
    },
    /// Stop with a final checkpoint into the checkpoint directory (SIGTERM in coordinator mode).
    StopWithCheckpoint,
    /// `POST /v1/start`: a job in standby restores `from_savepoint` (or starts empty) and runs.
    /// The reply says whether it was accepted.
    Start {
        from_savepoint: Option<String>,
        /// The epoch of the new run (the operator's `status.epoch`); `None` keeps the process's.
        epoch: Option<u64>,
        reply: tokio::sync::oneshot::Sender<std::result::Result<(), String>>,
    },
    /// `POST /v1/cancel`: stop at once without a checkpoint, a savepoint or any commit (a version
    /// that must not commit: rolled back, or an aborted upgrade). The process then waits in state
    /// `cancelled` until it is deleted, so a container restart cannot run it again.
    Cancel,
}

/// State shared between the coordinator and the control API.
pub struct Shared {
    pub job_name: String,
    pub status: Mutex<JobStatus>,
    pub metrics: Arc<JobMetrics>,
    pub savepoints: Mutex<HashMap<String, SavepointProgress>>,
    pub requests: mpsc::UnboundedSender<ControlRequest>,
    next_request: std::sync::atomic::AtomicU64,
    /// Whether the coordinator waits for `POST /v1/start` (standby, or failed after a start).
    pub awaiting_start: std::sync::atomic::AtomicBool,
    /// The process is shutting down (signal): no restarts, no standby after a stop.
    pub shutdown: std::sync::atomic::AtomicBool,
}

impl Shared {
    /// Shared state plus the receiving end of the request channel.
    pub fn new(job_name: &str) -> (Arc<Self>, mpsc::UnboundedReceiver<ControlRequest>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Arc::new(Self {
                job_name: job_name.to_string(),
                status: Mutex::new(JobStatus::default()),
                metrics: Arc::default(),
                savepoints: Mutex::new(HashMap::new()),
                requests: tx,
                next_request: std::sync::atomic::AtomicU64::new(1),
                awaiting_start: std::sync::atomic::AtomicBool::new(false),
                shutdown: std::sync::atomic::AtomicBool::new(false),
            }),
            rx,
        )
    }

    /// Queues a savepoint; returns the request id.
    pub fn request_savepoint(&self, dir: Option<String>, stop: bool, standby: bool) -> String {
        let n = self.next_request.fetch_add(1, Ordering::Relaxed);
        let id = format!("sp-{n}-{}", chrono::Utc::now().format("%Y%m%dT%H%M%S"));
        if let Ok(mut m) = self.savepoints.lock() {
            m.insert(id.clone(), SavepointProgress::Pending);
        }
        let _ = self.requests.send(ControlRequest::Savepoint {
            id: id.clone(),
            dir,
            stop,
            standby,
        });
        id
    }

    /// Asks the running job to stop with a final checkpoint (and not to restart or stand by).
    pub fn request_stop_checkpoint(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        let _ = self.requests.send(ControlRequest::StopWithCheckpoint);
    }

    /// Asks the job to stop without committing anything more (see [`ControlRequest::Cancel`]).
    pub fn request_cancel(&self) {
        let _ = self.requests.send(ControlRequest::Cancel);
    }

    /// Asks a job in standby to start; the receiver gets whether it was accepted.
    pub fn request_start(
        &self,
        from_savepoint: Option<String>,
        epoch: Option<u64>,
    ) -> tokio::sync::oneshot::Receiver<std::result::Result<(), String>> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        if let Err(e) = self.requests.send(ControlRequest::Start {
            from_savepoint,
            epoch,
            reply,
        }) && let ControlRequest::Start { reply, .. } = e.0
        {
            let _ = reply.send(Err("the coordinator is gone".into()));
        }
        rx
    }

    /// A snapshot of the status with current counters.
    pub fn status(&self) -> JobStatus {
        let mut s = self.status.lock().map(|s| s.clone()).unwrap_or_default();
        let (i, o) = self.metrics.totals();
        s.records_in = i;
        s.records_out = o;
        s.restarts = self.metrics.restarts.load(Ordering::Relaxed);
        let ops = self
            .metrics
            .operators
            .lock()
            .map(|o| o.clone())
            .unwrap_or_default();
        for o in &ops {
            if let Some(message) = o.problem.lock().ok().and_then(|p| p.clone()) {
                s.problems.push(SourceProblem {
                    uid: o.uid.clone(),
                    message,
                });
            }
            if let Ok(lag) = o.lag.lock()
                && !lag.is_empty()
            {
                *s.consumer_lag.get_or_insert(0) += lag.values().sum::<i64>();
            }
        }
        s
    }

    fn set_state(&self, state: RunState) {
        if let Ok(mut s) = self.status.lock() {
            s.state = state;
        }
    }

    fn update(&self, f: impl FnOnce(&mut JobStatus)) {
        if let Ok(mut s) = self.status.lock() {
            f(&mut s);
        }
    }

    fn finish_request(&self, id: &str, result: std::result::Result<String, String>) {
        if let Ok(mut m) = self.savepoints.lock() {
            m.insert(
                id.to_string(),
                match result {
                    Ok(path) => SavepointProgress::Completed { path },
                    Err(error) => SavepointProgress::Failed { error },
                },
            );
        }
    }
}

/// Settings of a run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub restore: RestoreFrom,
    /// Restarts allowed before the job fails for good.
    pub max_restarts: u32,
    /// Start in state `standby`: run nothing until `POST /v1/start` (which decides the restore;
    /// `restore` is then ignored).
    pub standby: bool,
    /// Run the subtasks on these registered workers instead of in this process.
    pub workers: Option<Arc<crate::cluster::workers::Workers>>,
    /// This run's epoch (see [`crate::fence`]); `None` for a local run without an operator.
    pub epoch: Option<u64>,
    /// `--resume` with an epoch: a run of the same epoch that already committed (this container
    /// ran before and was restarted in place) continues from its own latest commit, whatever
    /// `restore` says.
    pub resume_own: bool,
}

/// Runs the job until it finishes, is stopped (savepoint, or final checkpoint on a signal), or
/// fails for good. With `standby` (or after a stop-with-savepoint asking for it) it waits in state
/// `standby` for `POST /v1/start` and runs again in this process: a shadow upgrade's old version
/// stays warm for an instant rollback.
pub async fn run_job(
    graph: JobGraph,
    opts: RunOptions,
    shared: Arc<Shared>,
    mut requests: mpsc::UnboundedReceiver<ControlRequest>,
) -> Result<Outcome> {
    let mut standby = opts.standby;
    let mut restore = opts.restore.clone();
    let mut epoch = opts.epoch;
    let mut resume_own = opts.resume_own;
    // checkpoint ids keep growing across the runs of this process
    let mut next_id = 0u64;
    let mut failed = false;
    loop {
        if standby {
            let (from, new_epoch) = wait_for_start(&shared, &mut requests, !failed).await?;
            restore = from;
            epoch = new_epoch.or(epoch);
            // a start names its restore: the standby run has no progress of its own to resume
            resume_own = false;
        }
        let from_standby = standby;
        let span = tracing::info_span!("run", restore = ?restore, epoch = ?epoch);
        let result = run_session(
            &graph,
            &restore,
            SessionSettings {
                fencing: Fencing { epoch, resume_own },
                max_restarts: opts.max_restarts,
                workers: opts.workers.as_ref(),
            },
            &shared,
            &mut requests,
            &mut next_id,
        )
        .instrument(span)
        .await;
        let shutdown = shared.shutdown.load(Ordering::SeqCst);
        match result {
            Ok(Outcome::StoppedToStandby { savepoint }) if shutdown => {
                return Ok(Outcome::Stopped { savepoint });
            }
            Ok(Outcome::StoppedToStandby { savepoint }) => {
                tracing::info!(%savepoint, "stopped with a savepoint: standing by for POST /v1/start");
                standby = true;
                failed = false;
            }
            Ok(Outcome::Cancelled) => {
                tracing::warn!(
                    "cancelled: nothing more is committed; waiting to be deleted (or POST /v1/start)"
                );
                shared.set_state(RunState::Cancelled);
                standby = true;
                failed = true;
            }
            Err(e) => {
                shared.update(|s| {
                    s.state = RunState::Failed;
                    s.failure = Some(e.to_string());
                });
                // a job started from standby keeps the process up, so the operator reads the
                // reason and may start it again (a rollback)
                if !from_standby || shutdown || matches!(e, Error::Superseded { .. }) {
                    return Err(e);
                }
                tracing::error!(error = %e, "the job failed: waiting for POST /v1/start");
                failed = true;
            }
            Ok(other) => return Ok(other),
        }
    }
}

/// Waits for `POST /v1/start`; answers savepoint requests meanwhile (there is nothing to
/// snapshot). With `show` the state reads `standby` (else it keeps `failed`).
async fn wait_for_start(
    shared: &Arc<Shared>,
    requests: &mut mpsc::UnboundedReceiver<ControlRequest>,
    show: bool,
) -> Result<(RestoreFrom, Option<u64>)> {
    if show {
        shared.set_state(RunState::Standby);
    }
    shared.awaiting_start.store(true, Ordering::SeqCst);
    tracing::info!("standing by: waiting for POST /v1/start");
    loop {
        let Some(req) = requests.recv().await else {
            return Err(Error::Cancelled(
                "the control channel closed in standby".into(),
            ));
        };
        match req {
            ControlRequest::Start {
                from_savepoint,
                epoch,
                reply,
            } => {
                shared.awaiting_start.store(false, Ordering::SeqCst);
                // `restoring` before the reply: whoever reads the status next sees the start
                shared.set_state(RunState::Restoring);
                let _ = reply.send(Ok(()));
                tracing::info!(from_savepoint = ?from_savepoint, ?epoch, "start requested");
                let from = match from_savepoint {
                    Some(p) => RestoreFrom::Path(p),
                    None => RestoreFrom::Empty,
                };
                return Ok((from, epoch));
            }
            ControlRequest::Savepoint { id, .. } => {
                shared.finish_request(&id, Err("the job is not running (standby)".into()));
            }
            ControlRequest::StopWithCheckpoint | ControlRequest::Cancel => {}
        }
    }
}

mod attempt;
mod checkpoint;
mod session;
mod subtasks;
#[cfg(test)]
mod tests;

use attempt::*;
use checkpoint::*;
pub use session::resolve_restore;
use session::*;
use subtasks::*;
pub use subtasks::{Spread, Subtasks, slot_of, spawn_subtasks};
