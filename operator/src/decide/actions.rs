//! What a decision asks for (actions, events, outcome) and the names of what the operator
//! creates.

use super::*;

/// One run of the job to deploy: a version (`hash`, `spec`) started from a savepoint, from its
/// own checkpoints, or empty. For our runtime this is a coordinator pod; for another engine,
/// whatever that engine runs a job on.
#[derive(Clone, Debug, PartialEq)]
pub struct RunPlan {
    pub name: String,
    pub hash: String,
    pub spec: StreamJobSpec,
    /// The savepoint to restore (runtime: `--from-savepoint`).
    pub from_savepoint: Option<String>,
    /// Load the job and wait for [`Action::Start`] (a warm standby, shadow upgrades).
    pub standby: bool,
    /// Start empty even if checkpoints exist (a stateless upgrade).
    pub fresh: bool,
    /// The run's epoch: assigned by [`decide`] from `status.epoch`, which is written before the
    /// run exists, so every run fences all older ones (see the runtime's `fence`).
    pub epoch: u64,
}

/// What the controller must do, in order. Engine-neutral: the decision never names a pod,
/// a port or an endpoint; the job's engine adapter (`crate::engine`) turns each action into
/// Kubernetes objects and control calls.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// What every run of version `hash` needs exists (runtime: the manifest ConfigMap and the
    /// job's control token Secret).
    PrepareVersion {
        hash: String,
        spec: Box<StreamJobSpec>,
    },
    /// Version `hash` is no longer deployed, kept for rollback or checked: forget its artefacts.
    RetireVersion { hash: String },
    /// Deploy a run (see [`RunPlan`]).
    Deploy(Box<RunPlan>),
    /// Remove a run, a worker, a compatibility check or a disposal by name.
    Remove { name: String },
    /// Delete pod `name` at once, without waiting for its kubelet to confirm (a pod whose node
    /// does not answer stays Terminating until then). Only where what may still run there is
    /// fenced: our runtime's pods.
    ForceRemove { name: String },
    /// Worker `index` of run `run` (`spec.workers`), made from the run's own spec (an older one
    /// while a Shadow upgrade keeps the old version warm).
    AddWorker { run: String, index: u32 },
    /// Check, with the new version's own code and before the running job is touched, that it
    /// can restore savepoint `from` (runtime: a short-lived `streamjob-runtime plan` pod).
    CheckCompatibility {
        name: String,
        hash: String,
        spec: Box<StreamJobSpec>,
        from: String,
    },
    /// Take a savepoint of run `run` into `dir`; `stop`: stop with it, nothing emitted after
    /// it; `standby`: after a stop, stay loaded for an instant rollback. The controller writes
    /// the engine's request id into `status.pendingSavepoint.requestId`.
    TakeSavepoint {
        run: String,
        dir: String,
        stop: bool,
        standby: bool,
    },
    /// Start a standby run, from a savepoint or empty; `epoch` as in [`RunPlan::epoch`].
    Start {
        run: String,
        from_savepoint: Option<String>,
        epoch: u64,
    },
    /// Best effort, before a run is removed whose version must not commit anything more: no
    /// final checkpoint on its way out.
    Cancel { run: String },
    /// Delete savepoints from storage.
    Dispose { paths: Vec<String> },
}

/// An event to record on the StreamJob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub warning: bool,
    pub reason: String,
    pub message: String,
}

/// How an upgrade ended, for metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Promoted,
    RolledBack,
    Blocked,
    Aborted,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Promoted => "promoted",
            Outcome::RolledBack => "rolled_back",
            Outcome::Blocked => "blocked",
            Outcome::Aborted => "aborted",
        }
    }
}

/// The result of [`decide`].
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub actions: Vec<Action>,
    /// The whole status to apply.
    pub status: StreamJobStatus,
    pub events: Vec<Note>,
    pub requeue_after: Duration,
    pub outcome: Option<Outcome>,
    /// (reason, seconds) of savepoints that completed in this decision.
    pub savepoints_completed: Vec<(String, f64)>,
}

/// How a spec differs from the deployed one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    None,
    /// Only `spec.upgrade` (how to roll out) changed: adopt without touching the job.
    Policy,
    Rescale,
    Image,
    Pipeline,
    Config,
}

impl Change {
    pub fn as_str(self) -> &'static str {
        match self {
            Change::None => "none",
            Change::Policy => "policy",
            Change::Rescale => "rescale",
            Change::Image => "image",
            Change::Pipeline => "pipeline",
            Change::Config => "config",
        }
    }
}

/// Classifies `new` against the deployed spec `old` (unknown old: a config upgrade).
pub fn classify(old: Option<&StreamJobSpec>, new: &StreamJobSpec) -> Change {
    let new_hash = deployment_hash(new).ok();
    let Some(old) = old else {
        return Change::Config;
    };
    if deployment_hash(old).ok() == new_hash {
        return Change::None;
    }
    let mut a = old.clone();
    a.upgrade = new.upgrade.clone();
    if deployment_hash(&a).ok() == new_hash {
        return Change::Policy;
    }
    a.parallelism = new.parallelism;
    if deployment_hash(&a).ok() == new_hash {
        return Change::Rescale;
    }
    let mut b = a.clone();
    b.image = new.image.clone();
    b.image_pull_policy = new.image_pull_policy.clone();
    if deployment_hash(&b).ok() == new_hash {
        return Change::Image;
    }
    if old.pipeline != new.pipeline {
        return Change::Pipeline;
    }
    Change::Config
}

pub(super) fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

pub(super) fn parse_time(s: Option<&str>) -> Option<DateTime<Utc>> {
    s.and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
}

pub(super) fn dur(field: &str, value: &str, fallback: Duration) -> Duration {
    parse_duration(field, value).unwrap_or(fallback)
}

pub(super) const FAST: Duration = Duration::from_secs(2);
/// How long a savepoint request recorded without an id may be in flight before it is re-sent.
pub(super) const UNSENT_GRACE: Duration = Duration::from_secs(30);
pub(super) const SLOW: Duration = Duration::from_secs(30);
pub(super) const IDLE: Duration = Duration::from_secs(300);
