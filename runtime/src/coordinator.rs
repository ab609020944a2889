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
    pub metrics: JobMetrics,
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
                metrics: JobMetrics::default(),
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

struct Pending {
    barrier: Barrier,
    started: Instant,
    deadline: tokio::time::Instant,
    acks: BTreeMap<(usize, usize), Option<(String, u64)>>,
    request: Option<String>,
    /// A stop-with-savepoint that stands by afterwards.
    standby: bool,
    /// A final checkpoint asked for by a stop (not the end of bounded input).
    stop_checkpoint: bool,
}

struct Attempt {
    commands: Vec<Vec<mpsc::UnboundedSender<TaskCommand>>>,
    events: mpsc::UnboundedReceiver<TaskEvent>,
    tasks: JoinSet<()>,
    subtasks: usize,
}

fn spawn_attempt(
    graph: &JobGraph,
    snapshot: Option<&LoadedSnapshot>,
    metrics: &[Arc<OperatorMetrics>],
) -> Result<Attempt> {
    spawn_subtasks(graph, snapshot, metrics, None).map(Attempt::from)
}

impl From<Subtasks> for Attempt {
    /// An attempt whose every subtask takes commands (here, or forwarded to its worker).
    fn from(s: Subtasks) -> Self {
        Attempt {
            commands: s
                .commands
                .into_iter()
                .map(|step| step.into_iter().flatten().collect())
                .collect(),
            events: s.events,
            tasks: s.tasks,
            subtasks: s.count,
        }
    }
}

/// Where the subtasks of an attempt run when they are spread over worker processes: subtask `j`
/// of every step runs on slot `j % peers.len()`, so forward chains stay in one process and only
/// repartitioning (`keyBy`, rebalance) crosses the network.
pub struct Spread<'a> {
    pub attempt: u64,
    /// This process's slot.
    pub slot: usize,
    /// Data plane address of each slot.
    pub peers: &'a [String],
    pub plane: &'a Arc<crate::cluster::dataplane::DataPlane>,
}

/// The slot that runs subtask `subtask` among `workers` workers.
pub fn slot_of(subtask: usize, workers: usize) -> usize {
    subtask % workers.max(1)
}

/// The subtasks this process runs.
pub struct Subtasks {
    /// `commands[step][subtask]`, `None` for subtasks elsewhere.
    pub commands: Vec<Vec<Option<mpsc::UnboundedSender<TaskCommand>>>>,
    pub events: mpsc::UnboundedReceiver<TaskEvent>,
    /// The subtasks and the network channels of this attempt (aborted when dropped).
    pub tasks: JoinSet<()>,
    pub count: usize,
}

/// Spawns the subtasks of `graph` placed on this process (all of them without `spread`), wired
/// by bounded channels, and by network channels to the subtasks elsewhere.
pub fn spawn_subtasks(
    graph: &JobGraph,
    snapshot: Option<&LoadedSnapshot>,
    metrics: &[Arc<OperatorMetrics>],
    spread: Option<&Spread<'_>>,
) -> Result<Subtasks> {
    let (ev_tx, ev_rx) = mpsc::unbounded_channel();
    let mp = graph.max_parallelism;
    let steps = &graph.steps;
    let here = |j: usize| spread.is_none_or(|s| slot_of(j, s.peers.len()) == s.slot);
    let mut tasks = JoinSet::new();
    // senders[k][i] = targets of subtask i of step k (indexed by target subtask);
    // receivers[k][j] = inputs of subtask j
    let mut senders: Vec<Vec<Vec<mpsc::Sender<Element>>>> = steps
        .iter()
        .map(|s| vec![Vec::new(); s.parallelism])
        .collect();
    let mut receivers: Vec<Vec<Vec<mpsc::Receiver<Element>>>> = steps
        .iter()
        .map(|s| (0..s.parallelism).map(|_| Vec::new()).collect())
        .collect();
    #[allow(clippy::needless_range_loop)]
    for k in 1..steps.len() {
        let forward = steps[k].partition == Partition::Forward
            && steps[k].parallelism == steps[k - 1].parallelism;
        for i in 0..steps[k - 1].parallelism {
            for j in 0..steps[k].parallelism {
                if forward && i != j {
                    continue;
                }
                match (here(i), here(j), spread) {
                    (true, true, _) | (_, _, None) => {
                        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
                        senders[k - 1][i].push(tx);
                        receivers[k][j].push(rx);
                    }
                    (true, false, Some(s)) => {
                        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
                        senders[k - 1][i].push(tx);
                        let key = crate::cluster::wire::ChannelKey {
                            attempt: s.attempt,
                            step: k,
                            from: i,
                            to: j,
                        };
                        let addr = s.peers[slot_of(j, s.peers.len())].clone();
                        let plane = s.plane.clone();
                        let events = ev_tx.clone();
                        let uid = steps[k - 1].uid.clone();
                        tasks.spawn(async move {
                            if let Err(e) = plane.send(key, addr, rx).await {
                                let _ = events.send(TaskEvent::Failed {
                                    step: k - 1,
                                    subtask: i,
                                    error: format!("{uid}[{i}]: {e}"),
                                });
                            }
                        });
                    }
                    (false, true, Some(s)) => {
                        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
                        receivers[k][j].push(rx);
                        let key = crate::cluster::wire::ChannelKey {
                            attempt: s.attempt,
                            step: k,
                            from: i,
                            to: j,
                        };
                        if let Some(forward) = s.plane.expect(key, tx)? {
                            tasks.spawn(forward);
                        }
                    }
                    (false, false, Some(_)) => {}
                }
            }
        }
    }
    let dead_letter = graph
        .spec
        .dead_letter_path
        .as_ref()
        .map(|p| Location::parse(p, graph.spec.storage.as_ref()))
        .transpose()?;
    let mut commands = Vec::new();
    let mut count = 0;
    for (k, step) in steps.iter().enumerate() {
        let mut step_cmds = Vec::new();
        let hash = match steps.get(k + 1).map(|s| &s.partition) {
            Some(Partition::Hash(cols)) => Some(cols.clone()),
            _ => None,
        };
        for j in 0..step.parallelism {
            if !here(j) {
                step_cmds.push(None);
                continue;
            }
            let range = key_group_range(mp, step.parallelism as u32, j as u32);
            let restored = snapshot
                .map(|s| s.restored_for(&step.uid, j, step.parallelism, &range))
                .unwrap_or_default();
            let ctx = OperatorContext {
                uid: step.uid.clone(),
                subtask: j,
                parallelism: step.parallelism,
                max_parallelism: mp,
                key_groups: range,
                bad_record_policy: step.bad_record_policy,
                input_schema: step.input_schema.clone(),
                metrics: metrics[k].clone(),
            };
            let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
            step_cmds.push(Some(cmd_tx));
            let setup = TaskSetup {
                ctx: ctx.clone(),
                step: k,
                restored,
                output: Output::new(std::mem::take(&mut senders[k][j]), hash.clone(), mp),
                commands: cmd_rx,
                events: ev_tx.clone(),
                dead_letter: dead_letter.clone(),
            };
            let events = ev_tx.clone();
            let uid = step.uid.clone();
            match &step.node {
                Node::Source(build) => {
                    let src = build(&ctx)?;
                    tasks.spawn(async move {
                        if let Err(e) = run_source(setup, src).await {
                            let _ = events.send(TaskEvent::Failed {
                                step: k,
                                subtask: j,
                                error: format!("{uid}[{j}]: {e}"),
                            });
                        }
                    });
                }
                Node::Operator(build) => {
                    let op = build(&ctx)?;
                    let inputs = std::mem::take(&mut receivers[k][j]);
                    tasks.spawn(async move {
                        if let Err(e) = run_operator(setup, op, inputs).await {
                            let _ = events.send(TaskEvent::Failed {
                                step: k,
                                subtask: j,
                                error: format!("{uid}[{j}]: {e}"),
                            });
                        }
                    });
                }
            }
            count += 1;
        }
        commands.push(step_cmds);
    }
    Ok(Subtasks {
        commands,
        events: ev_rx,
        tasks,
        count,
    })
}

fn metadata_for(
    graph: &JobGraph,
    barrier: &Barrier,
    acks: &BTreeMap<(usize, usize), Option<(String, u64)>>,
    lineage: &[String],
    commit_seq: u64,
) -> SnapshotMetadata {
    let operators = graph
        .steps
        .iter()
        .enumerate()
        .map(|(k, s)| OperatorMeta {
            uid: s.uid.clone(),
            kind: s.kind.clone(),
            parallelism: s.parallelism as u32,
            state: s.state.clone(),
            subtasks: acks
                .iter()
                .filter(|((step, _), f)| *step == k && f.is_some())
                .filter_map(|((_, j), f)| {
                    f.as_ref().map(|(file, bytes)| SubtaskMeta {
                        subtask: *j as u32,
                        file: file.clone(),
                        bytes: *bytes,
                    })
                })
                .collect(),
        })
        .collect();
    SnapshotMetadata {
        format_version: FORMAT_VERSION,
        kind: match barrier.kind {
            BarrierKind::Checkpoint { .. } => SnapshotKind::Checkpoint,
            BarrierKind::Savepoint { .. } => SnapshotKind::Savepoint,
        },
        checkpoint_id: barrier.id,
        job_name: graph.name.clone(),
        created_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        runtime_version: env!("CARGO_PKG_VERSION").to_string(),
        max_parallelism: graph.max_parallelism,
        parallelism: graph.spec.parallelism,
        operators,
        lineage: lineage.to_vec(),
        commit_seq: Some(commit_seq),
    }
}

/// Loads and checks the snapshot a run starts from.
pub async fn resolve_restore(
    graph: &JobGraph,
    restore: &RestoreFrom,
) -> Result<Option<(LoadedSnapshot, Location)>> {
    let storage = graph.spec.storage.as_ref();
    let loc = match restore {
        RestoreFrom::Empty => return Ok(None),
        RestoreFrom::Path(p) => Location::parse(p, storage)?,
        RestoreFrom::LatestCheckpoint => {
            let dir = Location::parse(&graph.spec.checkpoints.dir, storage)?;
            match latest_checkpoint(&dir).await? {
                Some((_, loc)) => loc,
                None => {
                    tracing::info!(dir = %dir.display(), "no completed checkpoint to resume from: starting empty");
                    return Ok(None);
                }
            }
        }
        RestoreFrom::ResumeAfter(p) => {
            let sp_loc = Location::parse(p, storage)?;
            let sp = SnapshotMetadata::read(&sp_loc).await?;
            let dir = Location::parse(&graph.spec.checkpoints.dir, storage)?;
            let mut checkpoints = Vec::new();
            for (id, complete) in list_checkpoints(&dir).await? {
                if !complete {
                    continue;
                }
                let loc = dir.child(&format!("chk-{id}"));
                match SnapshotMetadata::read(&loc).await {
                    Ok(m) => checkpoints.push((id, m)),
                    // an unreadable checkpoint cannot be proven to be ours: never restore it
                    Err(e) => {
                        tracing::warn!(checkpoint = %loc.display(), error = %e, "ignoring an unreadable checkpoint")
                    }
                }
            }
            match choose_resume(&sp, &checkpoints) {
                ResumeChoice::Checkpoint { id, reason } => {
                    let loc = dir.child(&format!("chk-{id}"));
                    tracing::info!(chosen = %loc.display(), savepoint = %sp_loc.display(), %reason, "resuming from a checkpoint taken after the savepoint");
                    loc
                }
                ResumeChoice::Savepoint { reason } => {
                    tracing::info!(chosen = %sp_loc.display(), %reason, "resuming from the savepoint");
                    sp_loc
                }
            }
        }
    };
    let snap = LoadedSnapshot::load(&loc).await?;
    let report = check_restore(
        &snap.metadata,
        loc.display(),
        &graph.graph_operators(),
        graph.max_parallelism,
        graph.spec.upgrade.allow_non_restored_state,
    );
    if !report.compatible {
        return Err(Error::Incompatible {
            path: loc.display().to_string(),
            reasons: report.refusals(),
        });
    }
    Ok(Some((snap, loc)))
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

/// A run's place in the fencing commit sequence: its next commit is `base + 1`.
struct Commits<'a> {
    fence: &'a Fence,
    base: u64,
}

/// How a session runs: fencing, restarts, where its subtasks run.
struct SessionSettings<'a> {
    fencing: Fencing,
    max_restarts: u32,
    workers: Option<&'a Arc<crate::cluster::workers::Workers>>,
}

/// A run's fencing settings (see [`RunOptions`]).
#[derive(Clone, Copy, Debug)]
struct Fencing {
    epoch: Option<u64>,
    resume_own: bool,
}

/// What a run restores, decided with the fencing directory: its own latest commit when a
/// container restarted in place, the newest commit for "latest", else `restore`; then checked
/// against commits made after that state ([`check_start`]).
async fn restore_point(
    graph: &JobGraph,
    restore: &RestoreFrom,
    fencing: Fencing,
    fence: &Fence,
    tip_at_start: Option<u64>,
) -> Result<(Option<(LoadedSnapshot, Location)>, u64)> {
    let own = if fencing.resume_own {
        fence.latest_of_own_epoch().await?
    } else {
        None
    };
    let restore = match (own, restore) {
        (Some(c), _) => {
            tracing::info!(path = %c.path, seq = c.seq, epoch = c.epoch, "resuming this run's own latest commit (the container restarted)");
            RestoreFrom::Path(c.path)
        }
        (None, RestoreFrom::LatestCheckpoint) => match fence.tip().await? {
            // the newest commit may be a stop with savepoint, newer than any checkpoint
            Some(c) if restorable(graph, &c.path).await => RestoreFrom::Path(c.path),
            _ => RestoreFrom::LatestCheckpoint,
        },
        (None, r) => r.clone(),
    };
    let resolved = resolve_restore(graph, &restore).await?;
    let state_seq = resolved.as_ref().and_then(|(s, _)| s.metadata.commit_seq);
    let tip = fence.listing().await?.tip();
    match check_start(state_seq, tip, tip_at_start) {
        StartCheck::Proceed { base } => Ok((resolved, base)),
        StartCheck::Refuse { reason } => Err(Error::Rewind {
            path: resolved
                .map(|(_, l)| l.display().to_string())
                .unwrap_or_default(),
            reason,
        }),
        StartCheck::Adopt { seq } => {
            let adopted = adopt(graph, fence, seq, resolved.as_ref().map(|(s, _)| s)).await?;
            Ok((Some(adopted), seq))
        }
    }
}

async fn restorable(graph: &JobGraph, path: &str) -> bool {
    match Location::parse(path, graph.spec.storage.as_ref()) {
        Ok(l) => l.exists(METADATA_FILE).await.unwrap_or(false),
        Err(_) => false,
    }
}

/// Continues from commit `seq`, made by another run from the same state as `from` (a zombie of
/// the run before this one), so that its output is neither lost nor written again. Refused when
/// that commit does not continue `from` or this job graph cannot restore it.
async fn adopt(
    graph: &JobGraph,
    fence: &Fence,
    seq: u64,
    from: Option<&LoadedSnapshot>,
) -> Result<(LoadedSnapshot, Location)> {
    let Some(commit) = fence.read(seq).await? else {
        return Err(Error::Other(format!(
            "fencing: commit {seq} vanished while this run adopted it"
        )));
    };
    let refuse = |reason: String| Error::Rewind {
        path: from.map(|s| s.path.clone()).unwrap_or_default(),
        reason,
    };
    let (snap, loc) = resolve_restore(graph, &RestoreFrom::Path(commit.path.clone()))
        .await
        .map_err(|e| {
            refuse(format!(
                "commit {seq} by epoch {} ({}) continued this state meanwhile and cannot be restored by this job: {e}",
                commit.epoch, commit.path
            ))
        })?
        .ok_or_else(|| refuse(format!("commit {seq} names no snapshot")))?;
    if let Some(from) = from
        && !snap.metadata.continues(&from.metadata)
    {
        return Err(refuse(format!(
            "commit {seq} by epoch {} ({}) does not continue this state",
            commit.epoch, commit.path
        )));
    }
    tracing::warn!(seq, epoch = commit.epoch, path = %commit.path, "another run committed this state's continuation first: continuing from its commit, so its output is neither lost nor written twice");
    Ok((snap, loc))
}

/// One run of the job graph from `restore`, with restarts from its own latest checkpoint.
async fn run_session(
    graph: &JobGraph,
    restore: &RestoreFrom,
    settings: SessionSettings<'_>,
    shared: &Arc<Shared>,
    requests: &mut mpsc::UnboundedReceiver<ControlRequest>,
    next_id: &mut u64,
) -> Result<Outcome> {
    let spec = graph.spec.clone();
    let storage = spec.storage.as_ref();
    let ckpt_dir = Location::parse(&spec.checkpoints.dir, storage)?;
    let interval =
        streamjob_crds::units::parse_duration("checkpoints.interval", &spec.checkpoints.interval)?;
    let timeout =
        streamjob_crds::units::parse_duration("checkpoints.timeout", &spec.checkpoints.timeout)?;
    let retained = spec.checkpoints.retained.max(1) as usize;

    shared.set_state(RunState::Restoring);
    // a run from standby reports only its own progress (the operator promotes a new version at
    // its first checkpoint that is not the one it restored)
    shared.update(|s| {
        s.restored_from = None;
        s.latest_checkpoint = None;
        s.failure = None;
    });
    let (fence, tip_at_start) = Fence::open(&ckpt_dir, settings.fencing.epoch).await?;
    let SessionSettings {
        fencing,
        max_restarts,
        workers,
    } = settings;
    let (resolved, base) = restore_point(graph, restore, fencing, &fence, tip_at_start).await?;
    let mut commits = Commits {
        fence: &fence,
        base,
    };
    // checkpoints of this run record what their state descends from
    let mut lineage = resolved
        .as_ref()
        .map(|(s, _)| s.metadata.lineage_of_descendants())
        .unwrap_or_default();
    // where a failed attempt restarts from: the latest checkpoint completed by this run, else
    // the snapshot the run started from (never an older run's checkpoint)
    let mut restart_point: Option<Location> = resolved.as_ref().map(|(_, l)| l.clone());
    let mut snapshot = resolved.map(|(s, _)| s);
    shared.update(|s| {
        s.restored_from = Some(match &snapshot {
            Some(sn) => RestoredFrom {
                kind: match sn.metadata.kind {
                    SnapshotKind::Checkpoint => "checkpoint".into(),
                    SnapshotKind::Savepoint => "savepoint".into(),
                },
                path: Some(sn.path.clone()),
            },
            None => RestoredFrom {
                kind: "empty".into(),
                path: None,
            },
        })
    });
    let existing = list_checkpoints(&ckpt_dir).await?;
    *next_id = (*next_id).max(existing.keys().next_back().copied().unwrap_or(0) + 1);
    if let Some(s) = &snapshot {
        *next_id = (*next_id).max(s.metadata.checkpoint_id + 1);
        tracing::info!(path = %s.path, checkpoint = s.metadata.checkpoint_id, "restoring");
    }
    let metrics: Vec<Arc<OperatorMetrics>> = graph
        .steps
        .iter()
        .map(|s| Arc::new(OperatorMetrics::new(&s.uid)))
        .collect();
    if let Ok(mut m) = shared.metrics.operators.lock() {
        *m = metrics.clone();
    }
    let mut restarts = Restarts::new(RestartPolicy::exponential(max_restarts));
    let mut queued: Vec<ControlRequest> = Vec::new();
    // a restarted attempt's restart point, still to be read
    let mut reload: Option<Location> = None;
    loop {
        let started = std::time::Instant::now();
        let loaded = match reload.take() {
            Some(loc) => match LoadedSnapshot::load(&loc).await {
                Ok(s) => {
                    snapshot = Some(s);
                    Ok(())
                }
                Err(e) => {
                    reload = Some(loc);
                    Err(e)
                }
            },
            None => Ok(()),
        };
        let attempt = match (loaded, workers) {
            (Err(e), _) => Err(e),
            (Ok(()), None) => spawn_attempt(graph, snapshot.as_ref(), &metrics),
            (Ok(()), Some(w)) => w
                .deploy(graph, snapshot.as_ref().map(|s| s.path.as_str()), &metrics)
                .await
                .map(Attempt::from),
        };
        let result = match attempt {
            Ok(attempt) => {
                shared.set_state(RunState::Running);
                tracing::info!(subtasks = attempt.subtasks, "job running");
                run_attempt(
                    graph,
                    attempt,
                    shared,
                    requests,
                    &mut queued,
                    &ckpt_dir,
                    next_id,
                    interval,
                    timeout,
                    retained,
                    restart_point.clone(),
                    &lineage,
                    &mut commits,
                )
                .await
            }
            // e.g. too few workers registered: counts as a failed attempt
            Err(e) => Err((e, None)),
        };
        if let (Some(w), Err(_)) = (workers, &result) {
            w.cancel_attempt();
        }
        match result {
            Ok((outcome, _)) => {
                shared.set_state(match outcome {
                    Outcome::StoppedToStandby { .. } => RunState::Standby,
                    Outcome::Cancelled => RunState::Cancelled,
                    _ => RunState::Finished,
                });
                return Ok(outcome);
            }
            Err((e @ (Error::Superseded { .. } | Error::Rewind { .. }), _)) => {
                shared.update(|s| s.failure = Some(e.to_string()));
                shared.set_state(RunState::Failed);
                return Err(e);
            }
            Err((e, latest)) => {
                shared.update(|s| s.failure = Some(e.to_string()));
                // a run a newer epoch superseded while this attempt ran (a paused zombie whose
                // files its successor cleaned up) stops here instead of restarting from
                // checkpoints its successor may have retired
                if let Err(fenced @ Error::Superseded { .. }) = fence.ensure_current().await {
                    tracing::warn!(error = %e, "attempt failed after the run was superseded");
                    shared.update(|s| s.failure = Some(fenced.to_string()));
                    shared.set_state(RunState::Failed);
                    return Err(fenced);
                }
                let decision = restarts.on_failure(started.elapsed(), rand::random::<f64>());
                let (delay, restart) = match decision {
                    // a process asked to shut down does not restart: the next one resumes
                    RestartDecision::Restart { delay, restart }
                        if !shared.shutdown.load(Ordering::SeqCst) =>
                    {
                        (delay, restart)
                    }
                    RestartDecision::Restart { restart, .. } => {
                        return Err(gave_up(shared, restart - 1, &e));
                    }
                    RestartDecision::GiveUp { restarts } => {
                        return Err(gave_up(shared, restarts, &e));
                    }
                };
                shared.metrics.restarts.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, ?decision, "job failed: restarting from the latest completed checkpoint");
                shared.set_state(RunState::Restarting);
                // requests that arrive while waiting go to the next attempt; a shutdown ends
                // the wait (and the run)
                let wake = tokio::time::Instant::now() + delay;
                loop {
                    tokio::select! {
                        () = tokio::time::sleep_until(wake) => break,
                        r = requests.recv() => match r {
                            Some(r) => queued.push(r),
                            None => break,
                        },
                    }
                    if shared.shutdown.load(Ordering::SeqCst) {
                        // the restarts before this one happened; this one will not
                        return Err(gave_up(shared, restart - 1, &e));
                    }
                }
                if latest.is_some() {
                    restart_point = latest;
                }
                if let Error::LostCommit { seq, .. } = e {
                    snapshot = match &restart_point {
                        Some(loc) => Some(LoadedSnapshot::load(loc).await?),
                        None => None,
                    };
                    // this attempt's output is uncommitted and goes; the winner's stays
                    match &snapshot {
                        // a run started empty (stateless) starts empty again after it
                        None => commits.base = seq,
                        Some(current) => {
                            let (snap, loc) = adopt(graph, &fence, seq, Some(current)).await?;
                            lineage = snap.metadata.lineage_of_descendants();
                            restart_point = Some(loc);
                            snapshot = Some(snap);
                            commits.base = seq;
                        }
                    }
                } else {
                    // read at the next attempt's start: a store that is still away fails that
                    // attempt (and restarts again with backoff), not the run
                    reload = restart_point.clone();
                    if reload.is_none() {
                        snapshot = None;
                    }
                }
            }
        }
    }
}

/// The run fails for good after `restarts` restarts in a row; `last` is the last failure.
fn gave_up(shared: &Shared, restarts: u32, last: &Error) -> Error {
    shared.set_state(RunState::Failed);
    Error::TooManyRestarts {
        restarts,
        last: last.to_string(),
    }
}

#[allow(clippy::too_many_arguments)]
async fn run_attempt(
    graph: &JobGraph,
    mut attempt: Attempt,
    shared: &Arc<Shared>,
    requests: &mut mpsc::UnboundedReceiver<ControlRequest>,
    queued: &mut Vec<ControlRequest>,
    ckpt_dir: &Location,
    next_id: &mut u64,
    interval: Duration,
    timeout: Duration,
    retained: usize,
    restart_point: Option<Location>,
    lineage: &[String],
    commits: &mut Commits<'_>,
) -> std::result::Result<(Outcome, Option<Location>), (Error, Option<Location>)> {
    // the latest completed checkpoint (restart point) known so far
    let mut latest: Option<Location> = restart_point;
    let sources = attempt.commands.first().map(Vec::len).unwrap_or(0);
    let mut exhausted = 0usize;
    let mut pending: Option<Pending> = None;
    let mut ending: Option<(u64, Option<String>)> = None; // (id, savepoint path)
    let mut ended_with: Option<Outcome> = None;
    let mut finished = 0usize;
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    let mut rate = tokio::time::interval(Duration::from_secs(1));
    let mut last_in = (Instant::now(), shared.metrics.totals().0);
    let storage = graph.spec.storage.clone();
    // unique per attempt: state files of two runs never share a name (see `Barrier`)
    let state_prefix = format!("e{}-{:08x}/", commits.fence.epoch(), rand::random::<u32>());

    let trigger = |kind: BarrierKind,
                   target: Location,
                   request: Option<String>,
                   id: u64,
                   commands: &Vec<Vec<mpsc::UnboundedSender<TaskCommand>>>|
     -> Pending {
        let barrier = Barrier {
            id,
            kind,
            target,
            state_prefix: state_prefix.clone(),
        };
        tracing::info!(checkpoint = id, kind = ?kind, "triggering");
        if let Some(srcs) = commands.first() {
            for c in srcs {
                let _ = c.send(TaskCommand::TriggerBarrier(barrier.clone()));
            }
        }
        Pending {
            barrier,
            started: Instant::now(),
            deadline: tokio::time::Instant::now() + timeout,
            acks: BTreeMap::new(),
            request,
            standby: false,
            stop_checkpoint: false,
        }
    };

    loop {
        // start what is due
        if pending.is_none() && ending.is_none() {
            let next = (!queued.is_empty()).then(|| queued.remove(0));
            if let Some(ControlRequest::StopWithCheckpoint) = next {
                let id = *next_id;
                *next_id += 1;
                shared.set_state(RunState::Stopping);
                tracing::info!(
                    checkpoint = id,
                    "stopping with a final checkpoint (--resume restores it)"
                );
                let mut p = trigger(
                    BarrierKind::Checkpoint { last: true },
                    ckpt_dir.child(&format!("chk-{id}")),
                    None,
                    id,
                    &attempt.commands,
                );
                p.stop_checkpoint = true;
                pending = Some(p);
            } else if let Some(ControlRequest::Savepoint {
                id: req,
                dir,
                stop,
                standby,
            }) = next
            {
                let dir = dir.unwrap_or_else(|| graph.spec.savepoint_dir());
                let id = *next_id;
                *next_id += 1;
                let name = format!(
                    "savepoint-{id}-{}",
                    chrono::Utc::now().format("%Y%m%dT%H%M%S")
                );
                match Location::parse(&dir, storage.as_ref()) {
                    Ok(loc) => {
                        if stop {
                            shared.set_state(RunState::Stopping);
                        }
                        let mut p = trigger(
                            BarrierKind::Savepoint { stop },
                            loc.child(&name),
                            Some(req),
                            id,
                            &attempt.commands,
                        );
                        p.standby = stop && standby;
                        pending = Some(p);
                    }
                    Err(e) => shared.finish_request(&req, Err(e.to_string())),
                }
            } else if sources > 0 && exhausted == sources {
                let id = *next_id;
                *next_id += 1;
                pending = Some(trigger(
                    BarrierKind::Checkpoint { last: true },
                    ckpt_dir.child(&format!("chk-{id}")),
                    None,
                    id,
                    &attempt.commands,
                ));
            }
        }
        let deadline = pending
            .as_ref()
            .map(|p| p.deadline)
            .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            ev = attempt.events.recv() => {
                let Some(ev) = ev else {
                    return Err((Error::Cancelled("all subtasks are gone".into()), latest));
                };
                match ev {
                    TaskEvent::Failed { error, .. } => {
                        if let Some(p) = pending.take()
                            && let Some(r) = p.request {
                                shared.finish_request(&r, Err(format!("job failed: {error}")));
                            }
                        return Err((Error::Other(error), latest));
                    }
                    TaskEvent::SourceExhausted { .. } => exhausted += 1,
                    TaskEvent::Finished { .. } => {
                        finished += 1;
                        if finished == attempt.subtasks {
                            if let Some(o) = ended_with.take() {
                                return Ok((o, latest));
                            }
                            return Err((Error::Other("subtasks ended unexpectedly".into()), latest));
                        }
                    }
                    TaskEvent::Ack { checkpoint_id, step, subtask, file } => {
                        let Some(p) = pending.as_mut() else { continue };
                        if p.barrier.id != checkpoint_id {
                            continue;
                        }
                        p.acks.insert((step, subtask), file);
                        if p.acks.len() < attempt.subtasks {
                            continue;
                        }
                        let Some(p) = pending.take() else { continue };
                        let span = tracing::info_span!("checkpoint", id = p.barrier.id);
                        let done = complete(graph, &p, shared, (ckpt_dir, retained), lineage, commits).instrument(span).await;
                        match done {
                            Ok(path) => {
                                let notify = match p.barrier.kind {
                                    BarrierKind::Checkpoint { .. } => {
                                        latest = Some(p.barrier.target.clone());
                                        true
                                    }
                                    BarrierKind::Savepoint { stop } => stop,
                                };
                                if p.barrier.ends_stream() {
                                    ending = Some((p.barrier.id, Some(path.clone())));
                                    ended_with = Some(match p.barrier.kind {
                                        BarrierKind::Savepoint { .. } if p.standby => Outcome::StoppedToStandby { savepoint: path.clone() },
                                        BarrierKind::Savepoint { .. } => Outcome::Stopped { savepoint: path.clone() },
                                        BarrierKind::Checkpoint { .. } if p.stop_checkpoint => Outcome::Checkpointed { checkpoint: path.clone() },
                                        BarrierKind::Checkpoint { .. } => Outcome::Finished,
                                    });
                                }
                                if notify {
                                    for step_cmds in &attempt.commands {
                                        for c in step_cmds {
                                            let _ = c.send(TaskCommand::NotifyComplete(p.barrier.id));
                                        }
                                    }
                                }
                                if let Some(r) = &p.request {
                                    shared.finish_request(r, Ok(path));
                                }
                            }
                            Err(e) => {
                                shared.metrics.checkpoints_failed.fetch_add(1, Ordering::Relaxed);
                                tracing::warn!(checkpoint = p.barrier.id, error = %e, "checkpoint failed");
                                if let Some(r) = &p.request {
                                    shared.finish_request(r, Err(e.to_string()));
                                }
                                // fenced: this attempt must not go on producing output
                                let fenced = matches!(e, Error::Superseded { .. } | Error::LostCommit { .. });
                                if fenced || p.barrier.ends_stream() {
                                    return Err((e, latest));
                                }
                            }
                        }
                    }
                }
            }
            req = requests.recv() => {
                match req {
                    Some(ControlRequest::Start { reply, .. }) => {
                        let _ = reply.send(Err("the job is running, not in standby".into()));
                    }
                    Some(ControlRequest::Savepoint { id, .. }) if ending.is_some() => {
                        shared.finish_request(&id, Err("the job is ending".into()));
                    }
                    // the job ends anyway
                    Some(ControlRequest::StopWithCheckpoint) if ending.is_some() => {}
                    Some(ControlRequest::Cancel) => {
                        if let Some(r) = pending.take().and_then(|p| p.request) {
                            shared.finish_request(&r, Err("the job was cancelled".into()));
                        }
                        tracing::warn!("cancel requested: stopping without a checkpoint or any commit");
                        return Ok((Outcome::Cancelled, latest));
                    }
                    Some(req) => queued.push(req),
                    None => {}
                }
            }
            _ = ticker.tick(), if pending.is_none() && ending.is_none() && queued.is_empty() => {
                let id = *next_id;
                *next_id += 1;
                pending = Some(trigger(
                    BarrierKind::Checkpoint { last: false },
                    ckpt_dir.child(&format!("chk-{id}")),
                    None,
                    id,
                    &attempt.commands,
                ));
            }
            _ = tokio::time::sleep_until(deadline), if pending.is_some() => {
                if let Some(p) = pending.take() {
                    shared.metrics.checkpoints_failed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(checkpoint = p.barrier.id, "checkpoint expired before completing");
                    if let Some(r) = &p.request {
                        shared.finish_request(r, Err(format!("savepoint timed out after {timeout:?}")));
                    }
                    if p.barrier.ends_stream() {
                        return Err((Error::Other("stop/final checkpoint timed out".into()), latest));
                    }
                }
            }
            _ = rate.tick() => {
                let now = (Instant::now(), shared.metrics.totals().0);
                let secs = now.0.duration_since(last_in.0).as_secs_f64();
                if secs > 0.0 {
                    let r = (now.1.saturating_sub(last_in.1)) as f64 / secs;
                    shared.update(|s| s.records_in_per_second = (r * 10.0).round() / 10.0);
                }
                last_in = now;
            }
            j = attempt.tasks.join_next(), if !attempt.tasks.is_empty() => {
                if let Some(Err(e)) = j
                    && e.is_panic() {
                        return Err((Error::Other(format!("a subtask panicked: {e}")), latest));
                    }
            }
        }
    }
}

async fn complete(
    graph: &JobGraph,
    p: &Pending,
    shared: &Arc<Shared>,
    (ckpt_dir, retained): (&Location, usize),
    lineage: &[String],
    commits: &mut Commits<'_>,
) -> Result<String> {
    let fence = commits.fence;
    // checkpoints and stops with savepoint commit output; other savepoints do not
    let commit = match p.barrier.kind {
        BarrierKind::Checkpoint { .. } => true,
        BarrierKind::Savepoint { stop } => stop,
    };
    let seq = if commit {
        commits.base + 1
    } else {
        commits.base
    };
    // a run fenced off by a newer epoch stops here, before it writes anything that commits
    let listing = if commit {
        Some(fence.ensure_current().await?)
    } else {
        None
    };
    let meta = metadata_for(graph, &p.barrier, &p.acks, lineage, seq);
    // create-only: a run fenced off meanwhile may take a checkpoint of the same number, and
    // must neither replace nor (below) delete another run's metadata
    if !p
        .barrier
        .target
        .put_new(METADATA_FILE, meta.to_json()?)
        .await?
    {
        return Err(Error::Other(format!(
            "{} was completed by another run of this job",
            p.barrier.target.display()
        )));
    }
    if let Some(listing) = &listing {
        match fence
            .commit(listing, seq, p.barrier.target.display(), p.barrier.id)
            .await
        {
            Ok(()) => commits.base = seq,
            Err(e @ (Error::Superseded { .. } | Error::LostCommit { .. })) => {
                // never a completed snapshot: nobody may restore it and commit its output
                if let Err(d) = p.barrier.target.delete(METADATA_FILE).await {
                    tracing::warn!(error = %d, "cannot delete the metadata of a fenced checkpoint");
                }
                return Err(e);
            }
            // e.g. the store is down: the commit object may or may not exist; the metadata
            // stays so that either way the snapshot it names can be restored
            Err(e) => return Err(e),
        }
    }
    let duration = p.started.elapsed();
    let info = Snapshot {
        id: Some(p.barrier.id),
        path: p.barrier.target.display().to_string(),
        completed_at: Some(meta.created_at.clone()),
        duration_ms: Some(duration.as_millis() as u64),
    };
    shared.metrics.observe_checkpoint(duration.as_secs_f64());
    match p.barrier.kind {
        BarrierKind::Checkpoint { .. } => {
            shared
                .metrics
                .last_checkpoint_id
                .store(p.barrier.id, Ordering::Relaxed);
            shared.metrics.last_checkpoint_unix_seconds.store(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
                Ordering::Relaxed,
            );
            shared
                .metrics
                .checkpoints_completed
                .fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                checkpoint = p.barrier.id,
                path = %info.path,
                duration_ms = duration.as_millis() as u64,
                "checkpoint {} completed",
                p.barrier.id
            );
            shared.update(|s| s.latest_checkpoint = Some(info.clone()));
            // retention: keep the newest `retained` complete checkpoints; drop older leftovers
            let all = list_checkpoints(ckpt_dir).await?;
            let complete: Vec<u64> = all.iter().filter(|(_, c)| **c).map(|(id, _)| *id).collect();
            let keep_from = complete
                .len()
                .checked_sub(retained)
                .and_then(|i| complete.get(i))
                .copied()
                .unwrap_or(0);
            for (id, _) in all.iter().filter(|(id, _)| **id < keep_from) {
                ckpt_dir.delete_dir(&format!("chk-{id}")).await?;
            }
        }
        BarrierKind::Savepoint { .. } => {
            tracing::info!(checkpoint = p.barrier.id, path = %info.path, "savepoint {} completed", p.barrier.id);
            shared.update(|s| s.last_savepoint = Some(info.clone()));
        }
    }
    Ok(info.path)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex as StdMutex;
    use std::sync::atomic::AtomicBool;

    use arrow::array::AsArray;
    use arrow::datatypes::{Int64Type, TimestampMillisecondType};

    use super::*;
    use crate::graph::build_graph;
    use crate::operator::{Collector, DataBatch, Operator, RestoredState};
    use crate::operators::generator::{DEFAULT_START_MS, generator_record, generator_ts};
    use crate::registry::{OperatorPlan, Registry};

    /// Fails once, after `after` records, then passes everything through.
    struct FailOnce {
        seen: u64,
        after: u64,
        failed: Arc<AtomicBool>,
    }

    impl Operator for FailOnce {
        async fn initialize_state(&mut self, _: &OperatorContext, _: RestoredState) -> Result<()> {
            Ok(())
        }
        async fn process_batch(
            &mut self,
            ctx: &OperatorContext,
            b: DataBatch,
            out: &mut Collector,
        ) -> Result<()> {
            self.seen += b.num_rows() as u64;
            if self.seen > self.after && !self.failed.swap(true, Ordering::SeqCst) {
                return Err(Error::operator(&ctx.uid, ctx.subtask, "injected failure"));
            }
            out.emit(b);
            Ok(())
        }
    }

    type Rows = Arc<StdMutex<Vec<(String, i64, i64, i64)>>>;

    /// Records window results (key, window start, count, sum).
    struct Capture(Rows);

    impl Operator for Capture {
        async fn initialize_state(&mut self, _: &OperatorContext, _: RestoredState) -> Result<()> {
            Ok(())
        }
        async fn process_batch(
            &mut self,
            _: &OperatorContext,
            b: DataBatch,
            _: &mut Collector,
        ) -> Result<()> {
            let r = &b.records;
            let keys = r.column(0).as_string::<i32>();
            let starts = r.column(1).as_primitive::<TimestampMillisecondType>();
            let counts = r.column(3).as_primitive::<Int64Type>();
            let sums = r.column(4).as_primitive::<Int64Type>();
            let mut rows = self.0.lock().map_err(|_| Error::Other("poisoned".into()))?;
            for i in 0..r.num_rows() {
                rows.push((
                    keys.value(i).to_string(),
                    starts.value(i),
                    counts.value(i),
                    sums.value(i),
                ));
            }
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_failing_subtask_restarts_the_job_from_the_latest_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let count = 40_000u64;
        let yaml = format!(
            "apiVersion: streamjob.io/v1alpha1\nkind: StreamJob\nmetadata: {{name: restart}}\nspec:\n  image: x\n  parallelism: 2\n  checkpoints: {{dir: {}, interval: 100ms}}\n  pipeline:\n    - uid: gen\n      source: {{generator: {{count: {count}, keys: 4, seed: 9, ratePerSecond: 40000}}}}\n    - uid: flaky\n      custom: {{name: fail-once}}\n    - uid: agg\n      keyBy: [key]\n      window: {{tumbling: 1s}}\n      aggregate: {{count: true, sum: [value]}}\n    - uid: out\n      fileSink: {{path: {}, format: {{jsonLines: {{}}}}}}\n",
            dir.path().join("ck").display(),
            dir.path().join("out").display()
        );
        let failed = Arc::new(AtomicBool::new(false));
        let rows: Rows = Arc::default();
        let mut registry = Registry::with_builtins();
        let f2 = failed.clone();
        registry.register("fail-once", move |cx| {
            let f3 = f2.clone();
            Ok(OperatorPlan::stateless(
                "custom:fail-once",
                cx.input_schema.clone(),
                move |_| {
                    Ok(FailOnce {
                        seen: 0,
                        after: 15_000,
                        failed: f3.clone(),
                    })
                },
            ))
        });
        let r2 = rows.clone();
        registry.register_file_sink(move |cx| {
            let r3 = r2.clone();
            Ok(OperatorPlan::stateless(
                "capture",
                cx.input_schema.clone(),
                move |_| Ok(Capture(r3.clone())),
            ))
        });
        let job = streamjob_crds::v1alpha1::StreamJob::from_yaml(&yaml).unwrap();
        let graph = build_graph(&job, &registry).await.unwrap();
        let (shared, rx) = Shared::new("restart");
        let outcome = run_job(
            graph,
            RunOptions {
                restore: RestoreFrom::Empty,
                max_restarts: 3,
                standby: false,
                workers: None,
                epoch: None,
                resume_own: false,
            },
            shared.clone(),
            rx,
        )
        .await
        .unwrap();
        assert_eq!(outcome, Outcome::Finished);
        assert!(failed.load(Ordering::SeqCst));
        assert_eq!(shared.metrics.restarts.load(Ordering::Relaxed), 1);
        assert!(
            shared
                .status()
                .failure
                .unwrap()
                .contains("injected failure")
        );
        // expected aggregates, computed from the generator definition
        let mut want: BTreeMap<(String, i64), (i64, i64)> = BTreeMap::new();
        for id in 0..count {
            let (k, v) = generator_record(9, 4, id);
            let ts = generator_ts(DEFAULT_START_MS, 1, id);
            let e = want
                .entry((format!("key-{k}"), ts - ts.rem_euclid(1000)))
                .or_default();
            e.0 += 1;
            e.1 += v;
        }
        // the capture sink is not transactional: windows fired after the last checkpoint before
        // the failure are emitted again, with identical values (no double counting)
        let mut got: BTreeMap<(String, i64), (i64, i64)> = BTreeMap::new();
        for (k, s, c, sum) in rows.lock().unwrap().iter() {
            if let Some(prev) = got.insert((k.clone(), *s), (*c, *sum)) {
                assert_eq!(prev, (*c, *sum));
            }
        }
        assert_eq!(got, want);
    }

    #[tokio::test]
    async fn failing_for_good_stops_after_max_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let yaml = format!(
            "apiVersion: streamjob.io/v1alpha1\nkind: StreamJob\nmetadata: {{name: broken}}\nspec:\n  image: x\n  checkpoints: {{dir: {}, interval: 1s}}\n  pipeline:\n    - uid: gen\n      source: {{generator: {{count: 100}}}}\n    - uid: bad\n      project: [{{name: x, expr: \"arrow_cast(key, 'Int64')\"}}]\n    - uid: out\n      print: {{}}\n",
            dir.path().join("ck").display()
        );
        let job = streamjob_crds::v1alpha1::StreamJob::from_yaml(&yaml).unwrap();
        let graph = build_graph(&job, &Registry::with_builtins()).await.unwrap();
        let (shared, rx) = Shared::new("broken");
        let err = run_job(
            graph,
            RunOptions {
                restore: RestoreFrom::Empty,
                max_restarts: 2,
                standby: false,
                workers: None,
                epoch: None,
                resume_own: false,
            },
            shared.clone(),
            rx,
        )
        .await
        .unwrap_err();
        assert!(
            matches!(err, Error::TooManyRestarts { restarts: 2, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("bad record"), "{err}");
        assert_eq!(shared.status().state, RunState::Failed);
        assert_eq!(shared.metrics.restarts.load(Ordering::Relaxed), 2);
    }
}
