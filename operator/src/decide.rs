//! Observe → **decide** → act: the decision as a pure function of (spec, status, observed world).
//!
//! `status.upgrade` is the write-ahead log of a transition. Its `step` names a [`Stage`]
//! (`Kind/Step`, for example `InPlace/Savepointing`); the legal moves between stages are declared
//! in [`TRANSITIONS`] and every decision is checked against them in the tests. A decision never
//! asks to delete a pod whose state is not yet recorded in the *persisted* status: the savepoint
//! is written into `status.upgrade.savepoint` by one decision (step `Stopped`) and the old pods
//! are deleted by the next one, so an operator restarted at any moment resumes the transition.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde::Deserialize;
use streamjob_crds::hash::deployment_hash;
use streamjob_crds::units::parse_duration;
use streamjob_crds::v1alpha1::{
    CheckpointInfo, DeploymentStatus, JobState, PendingSavepoint, Phase, SavepointInfo,
    StartedFrom, StreamJobSpec, StreamJobStatus, ThroughputStatus, UpgradeMode, UpgradeStatus,
    UpgradeStrategy,
};

use crate::control::{JobStatus, RunState, SavepointState};

// ---------------------------------------------------------------------------------------------
// The state machine
// ---------------------------------------------------------------------------------------------

/// What a transition does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Upgrade or rescale: stop the old version, start the new one.
    InPlace,
    /// Upgrade through a shadow copy started beside the old version.
    Shadow,
    /// Stop with a savepoint and keep nothing running.
    Suspend,
    /// Start a suspended job again.
    Resume,
    /// Return to the last stable spec from the upgrade's savepoint.
    Rollback,
}

/// Where a transition is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Step {
    /// A plan pod of the new image checks the new spec against the latest state.
    Planning,
    /// Terminal: the plan said the new spec cannot restore the state; the old job runs on.
    Blocked,
    /// Shadow: the new version's pod is started in standby beside the old one.
    StartingStandby,
    /// Stop-with-savepoint requested from the running job.
    Savepointing,
    /// The state to restore is recorded (`upgrade.savepoint`); old pods may go.
    Stopped,
    /// The new version restores and must complete its first checkpoint.
    Restoring,
    /// Terminal: the new version failed and the job runs the last stable spec again.
    RolledBack,
    /// Terminal: the upgrade was given up before anything was stopped; the old job runs on.
    Aborted,
    /// Terminal: the job is suspended; `upgrade.savepoint` is where it resumes from.
    Suspended,
}

impl Step {
    /// Terminal steps are records, not work in flight.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Step::Blocked | Step::RolledBack | Step::Aborted | Step::Suspended
        )
    }
}

/// A point of the state machine, written to `status.upgrade.step` as `Kind/Step`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Stage {
    pub kind: Kind,
    pub step: Step,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}/{:?}", self.kind, self.step)
    }
}

impl FromStr for Stage {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (k, st) = s
            .split_once('/')
            .ok_or_else(|| format!("bad upgrade step {s:?}"))?;
        let kind = match k {
            "InPlace" => Kind::InPlace,
            "Shadow" => Kind::Shadow,
            "Suspend" => Kind::Suspend,
            "Resume" => Kind::Resume,
            "Rollback" => Kind::Rollback,
            _ => return Err(format!("bad upgrade kind {k:?}")),
        };
        let step = match st {
            "Planning" => Step::Planning,
            "Blocked" => Step::Blocked,
            "StartingStandby" => Step::StartingStandby,
            "Savepointing" => Step::Savepointing,
            "Stopped" => Step::Stopped,
            "Restoring" => Step::Restoring,
            "RolledBack" => Step::RolledBack,
            "Aborted" => Step::Aborted,
            "Suspended" => Step::Suspended,
            _ => return Err(format!("bad upgrade step {st:?}")),
        };
        Ok(Stage { kind, step })
    }
}

const fn st(kind: Kind, step: Step) -> Option<Stage> {
    Some(Stage { kind, step })
}

use Kind::{InPlace, Resume, Rollback, Shadow, Suspend};
use Step::{
    Aborted, Blocked, Planning, Restoring, RolledBack, Savepointing, StartingStandby, Stopped,
    Suspended,
};

/// Stages a new transition can start in (from idle, from a terminal record of an upgrade, or by
/// abandoning a plan that has not touched anything yet).
pub const START_STAGES: &[Option<Stage>] = &[
    st(InPlace, Planning),
    st(InPlace, Savepointing),
    st(InPlace, Stopped),
    st(Shadow, Planning),
    st(Shadow, StartingStandby),
    st(Suspend, Savepointing),
    st(Suspend, Stopped),
];

/// Every legal move besides staying put and the start moves of [`START_STAGES`] (from `None`,
/// from the terminal records `Blocked`, `Aborted`, `RolledBack` of upgrades, and from
/// `Planning`). `None` is "no transition in flight".
pub const TRANSITIONS: &[(Option<Stage>, Option<Stage>)] = &[
    // Pre-check (a plan is dropped when the spec returns to what runs).
    (st(InPlace, Planning), None),
    (st(Shadow, Planning), None),
    (st(InPlace, Planning), st(InPlace, Blocked)),
    (st(Shadow, Planning), st(Shadow, Blocked)),
    (st(Resume, Planning), st(Resume, Blocked)),
    (st(Resume, Planning), st(Resume, Restoring)),
    (st(Resume, Planning), st(Suspend, Suspended)),
    // Shadow copy.
    (st(Shadow, StartingStandby), st(Shadow, Savepointing)),
    (st(Shadow, StartingStandby), st(Shadow, Aborted)),
    (st(Shadow, Savepointing), st(Shadow, Stopped)),
    (st(Shadow, Savepointing), st(Shadow, Aborted)),
    (st(Shadow, Stopped), st(Shadow, Restoring)),
    (st(Shadow, Restoring), None),
    (st(Shadow, Restoring), st(Rollback, Restoring)),
    (st(Shadow, Restoring), st(Rollback, Stopped)),
    // In place.
    (st(InPlace, Savepointing), st(InPlace, Stopped)),
    (st(InPlace, Savepointing), st(InPlace, Aborted)),
    (st(InPlace, Stopped), st(InPlace, Restoring)),
    (st(InPlace, Restoring), None),
    (st(InPlace, Restoring), st(Rollback, Stopped)),
    // Rollback.
    (st(Rollback, Stopped), st(Rollback, Restoring)),
    (st(Rollback, Restoring), st(Rollback, RolledBack)),
    // Suspend and resume.
    (st(Suspend, Savepointing), st(Suspend, Stopped)),
    (st(Suspend, Stopped), st(Suspend, Suspended)),
    (st(Suspend, Suspended), st(Resume, Planning)),
    (st(Suspend, Suspended), st(Resume, Restoring)),
    (st(Resume, Blocked), st(Resume, Planning)),
    (st(Resume, Blocked), st(Resume, Restoring)),
    (st(Resume, Blocked), st(Suspend, Suspended)),
    (st(Resume, Restoring), None),
    (st(Resume, Restoring), st(Rollback, Stopped)),
    // A terminal record is cleared when the spec returns to what runs.
    (st(InPlace, Blocked), None),
    (st(Shadow, Blocked), None),
    (st(InPlace, Aborted), None),
    (st(Shadow, Aborted), None),
    (st(Rollback, RolledBack), None),
];

/// Whether the state machine allows moving from `from` to `to`.
pub fn legal(from: Option<Stage>, to: Option<Stage>) -> bool {
    if from == to {
        return true;
    }
    let can_start = match from {
        None => true,
        Some(s) => {
            s.step == Planning
                || (s.step.is_terminal() && matches!(s.kind, InPlace | Shadow | Rollback))
        }
    };
    (can_start && START_STAGES.contains(&to)) || TRANSITIONS.contains(&(from, to))
}

// ---------------------------------------------------------------------------------------------
// Observations
// ---------------------------------------------------------------------------------------------

/// Labels on everything the operator creates.
pub const LABEL_JOB: &str = "streamjob.io/job";
pub const LABEL_HASH: &str = "streamjob.io/spec-hash";
pub const LABEL_ROLE: &str = "streamjob.io/role";
pub const LABEL_MANAGED: &str = "app.kubernetes.io/managed-by";
pub const MANAGER: &str = "streamjob-operator";

/// What an operator-created pod is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodRole {
    Runtime,
    Plan,
    Dispose,
}

impl PodRole {
    pub fn as_str(self) -> &'static str {
        match self {
            PodRole::Runtime => "runtime",
            PodRole::Plan => "plan",
            PodRole::Dispose => "dispose",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "runtime" => Some(PodRole::Runtime),
            "plan" => Some(PodRole::Plan),
            "dispose" => Some(PodRole::Dispose),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

/// One pod as seen in the API.
#[derive(Clone, Debug, PartialEq)]
pub struct PodObs {
    pub name: String,
    pub role: PodRole,
    pub spec_hash: Option<String>,
    pub phase: PodPhase,
    pub ready: bool,
    pub terminating: bool,
    pub restarts: i32,
    /// Waiting reason of the container, e.g. CrashLoopBackOff, ImagePullBackOff.
    pub waiting_reason: Option<String>,
    /// Exit code of the terminated container (pod phase Succeeded/Failed).
    pub exit_code: Option<i32>,
    /// Termination message (or the log tail the controller could read instead).
    pub message: Option<String>,
    pub ip: Option<String>,
}

impl PodObs {
    pub fn new(name: &str, role: PodRole, phase: PodPhase) -> Self {
        Self {
            name: name.to_string(),
            role,
            spec_hash: None,
            phase,
            ready: phase == PodPhase::Running,
            terminating: false,
            restarts: 0,
            waiting_reason: None,
            exit_code: None,
            message: None,
            ip: None,
        }
    }

    /// Restarts this often (or a back-off reason) mean the version does not run.
    pub fn crash_looping(&self) -> bool {
        let reason = self.waiting_reason.as_deref();
        self.restarts >= CRASH_LOOP_RESTARTS
            || (reason == Some("CrashLoopBackOff") && self.restarts >= 1)
            || matches!(
                reason,
                Some(
                    "ImagePullBackOff"
                        | "ErrImagePull"
                        | "InvalidImageName"
                        | "CreateContainerConfigError"
                )
            )
    }
}

/// Container restarts after which a version counts as crash-looping.
pub const CRASH_LOOP_RESTARTS: i32 = 3;
/// Longest Degraded message built from source problems (one tenant cannot bloat status).
const MAX_PROBLEM_MESSAGE: usize = 1024;

/// The control API of one runtime pod.
#[derive(Clone, Debug, PartialEq)]
pub enum RuntimeObs {
    Unreachable(String),
    Status(Box<JobStatus>),
}

/// Everything the controller observed for one StreamJob.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    pub now: DateTime<Utc>,
    pub generation: Option<i64>,
    /// Pods labelled with the job (runtime, plan, dispose).
    pub pods: Vec<PodObs>,
    /// Control API status of runtime pods that have an IP, by pod name.
    pub runtime: Vec<(String, RuntimeObs)>,
    /// Result of `GET /v1/savepoints/{status.pendingSavepoint.requestId}`, if it could be asked.
    pub savepoint: Option<SavepointState>,
    /// Spec hashes of the manifest ConfigMaps that exist.
    pub config_hashes: BTreeSet<String>,
    /// The `streamjob.io/recovered-savepoint` annotation, if set.
    pub recovered_savepoint: Option<String>,
}

impl Observed {
    pub fn new(now: DateTime<Utc>) -> Self {
        Self {
            now,
            generation: None,
            pods: Vec::new(),
            runtime: Vec::new(),
            savepoint: None,
            config_hashes: BTreeSet::new(),
            recovered_savepoint: None,
        }
    }
    pub fn pod(&self, name: &str) -> Option<&PodObs> {
        self.pods.iter().find(|p| p.name == name)
    }
    pub fn job(&self, pod: &str) -> Option<&JobStatus> {
        self.runtime.iter().find_map(|(n, r)| match r {
            RuntimeObs::Status(s) if n == pod => Some(s.as_ref()),
            _ => None,
        })
    }
    pub fn unreachable(&self, pod: &str) -> Option<&str> {
        self.runtime.iter().find_map(|(n, r)| match r {
            RuntimeObs::Unreachable(e) if n == pod => Some(e.as_str()),
            _ => None,
        })
    }
}

/// Outcome of a plan pod, read from its exit code and termination message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanResult {
    Running,
    Compatible,
    Incompatible(String),
    /// The new spec itself is wrong (exit 2: manifest, unsupported, a rewind): retrying cannot help.
    Error(String),
    /// The plan could not be made (exit 1 or killed: a store error, a checkpoint that retention
    /// removed meanwhile): made again against the latest state until `readinessTimeout`.
    Transient(String),
}

#[derive(Deserialize)]
struct PlanReport {
    // Required: any other JSON line of a log tail (a structured log record) must not pass for the
    // report and hide the uids it refuses (found by fuzz_plan_report_in_a_log_tail).
    operators: Vec<PlanOperator>,
}

#[derive(Deserialize)]
struct PlanOperator {
    #[serde(default)]
    uid: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    reason: Option<String>,
}

/// Reads a plan pod: exit 0 compatible, 3 incompatible (reasons per uid from the JSON report in
/// its termination message or log tail), anything else an error with whatever it said.
pub fn plan_result(pod: &PodObs) -> PlanResult {
    let code = match (pod.phase, pod.exit_code) {
        (PodPhase::Succeeded, c) => c.unwrap_or(0),
        (PodPhase::Failed, Some(c)) => c,
        (PodPhase::Failed, None) => {
            return PlanResult::Error(format!(
                "plan pod {} failed without an exit code{}",
                pod.name,
                pod.message
                    .as_deref()
                    .map(|m| format!(": {}", short(m)))
                    .unwrap_or_default()
            ));
        }
        _ => return PlanResult::Running,
    };
    match code {
        0 => PlanResult::Compatible,
        3 => {
            let reasons = pod
                .message
                .as_deref()
                .and_then(parse_plan_report)
                .unwrap_or_else(|| {
                    format!(
                        "the new spec cannot restore the job's state (plan pod {} exited 3; its report could not be read{})",
                        pod.name,
                        pod.message
                            .as_deref()
                            .map(|m| format!(": {}", short(m)))
                            .unwrap_or_default()
                    )
                });
            PlanResult::Incompatible(reasons)
        }
        other => {
            let why = format!(
                "plan pod {} exited {other}{}",
                pod.name,
                pod.message
                    .as_deref()
                    .map(|m| format!(": {}", short(m)))
                    .unwrap_or_default()
            );
            if other == 2 {
                PlanResult::Error(why)
            } else {
                PlanResult::Transient(why)
            }
        }
    }
}

fn parse_plan_report(text: &str) -> Option<String> {
    // The message may be a log tail: take the last line that parses as the report.
    let report: PlanReport = text
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l.trim()).ok())
        .or_else(|| serde_json::from_str(text.trim()).ok())?;
    let bad: Vec<String> = report
        .operators
        .iter()
        .filter(|o| !matches!(o.status.as_str(), "ok" | "restored" | "new" | "compatible"))
        .map(|o| {
            format!(
                "uid {}: {}{}",
                o.uid,
                o.status,
                o.reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            )
        })
        .collect();
    if bad.is_empty() {
        Some("the plan reported the spec incompatible without naming an operator".into())
    } else {
        Some(bad.join("; "))
    }
}

fn short(s: &str) -> String {
    let s = s.trim();
    if s.chars().count() > 400 {
        let tail: String = s
            .chars()
            .rev()
            .take(400)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        format!("...{tail}")
    } else {
        s.to_string()
    }
}

/// The savepoint path a runtime that exited after stop-with-savepoint wrote into its termination
/// message as `{"savepoint": "<path>"}` (runtime requirement).
pub fn savepoint_from_message(message: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Msg {
        savepoint: String,
    }
    // `{"savepoint": "<path>"}` (termination message) or `savepoint: <path>` (what
    // `streamjob-runtime` prints on stdout when it stops with a savepoint).
    message
        .lines()
        .rev()
        .find_map(|l| {
            let l = l.trim();
            serde_json::from_str::<Msg>(l)
                .ok()
                .map(|m| m.savepoint)
                .or_else(|| l.strip_prefix("savepoint: ").map(|p| p.trim().to_string()))
        })
        .filter(|p| !p.is_empty())
}

/// Annotation through which a human hands the operator the savepoint a stopped job wrote when
/// the operator could not read it (the runtime exited before answering).
pub const ANNOTATION_RECOVERED_SAVEPOINT: &str = "streamjob.io/recovered-savepoint";

// ---------------------------------------------------------------------------------------------
// Decisions
// ---------------------------------------------------------------------------------------------

/// A runtime pod to create.
#[derive(Clone, Debug, PartialEq)]
pub struct PodPlan {
    pub name: String,
    pub hash: String,
    pub spec: StreamJobSpec,
    /// `--from-savepoint`.
    pub from_savepoint: Option<String>,
    /// `--standby`: load the job graph and wait for `POST /v1/start` (shadow upgrades).
    pub standby: bool,
    /// Start empty even if checkpoints exist (a stateless upgrade): `--fresh`.
    pub fresh: bool,
    /// The run's epoch (`--epoch`): assigned by [`decide`] from `status.epoch`, which is written
    /// before the pod exists, so every run fences all older ones (see the runtime's `fence`).
    pub epoch: u64,
}

/// What the controller must do, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// The manifest ConfigMap for `hash` and the job's token Secret exist.
    EnsureConfig {
        hash: String,
        spec: Box<StreamJobSpec>,
    },
    DeleteConfig {
        hash: String,
    },
    CreatePod(Box<PodPlan>),
    DeletePod {
        name: String,
    },
    /// Short-lived pod of the new image running `streamjob-runtime plan`.
    CreatePlanPod {
        name: String,
        hash: String,
        spec: Box<StreamJobSpec>,
        from: String,
    },
    /// `POST /v1/savepoints`; the controller writes the request id into
    /// `status.pendingSavepoint.requestId`.
    TriggerSavepoint {
        pod: String,
        dir: String,
        stop: bool,
        standby: bool,
    },
    /// `POST /v1/start` on a standby pod; `epoch` as in [`PodPlan::epoch`].
    Start {
        pod: String,
        from_savepoint: Option<String>,
        epoch: u64,
    },
    /// `POST /v1/cancel` (best effort) on a runtime pod about to be deleted whose version must
    /// not commit anything more: no final checkpoint on its SIGTERM.
    Cancel {
        pod: String,
    },
    /// Delete savepoints from storage (a short-lived pod of the job's image).
    DisposeSavepoints {
        paths: Vec<String>,
    },
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

/// Rollout of one job: all names derive from the job name.
pub fn pod_name(job: &str, hash: &str, nonce: &str) -> String {
    format!("{}-{}", trunc(job, 45), short_hash(&[job, hash, nonce]))
}

pub fn plan_pod_name(job: &str, hash: &str, nonce: &str) -> String {
    format!(
        "{}-plan-{}",
        trunc(job, 40),
        short_hash(&[job, hash, nonce])
    )
}

pub fn dispose_pod_name(job: &str, paths: &[String]) -> String {
    let joined = paths.join("\n");
    format!("{}-dispose-{}", trunc(job, 37), short_hash(&[job, &joined]))
}

pub fn config_name(job: &str, hash: &str) -> String {
    format!("{}-manifest-{}", trunc(job, 200), hash)
}

pub fn token_secret_name(job: &str) -> String {
    format!("{}-control-token", trunc(job, 200))
}

/// Value of the `streamjob.io/job` label (label values are at most 63 characters).
pub fn job_label(job: &str) -> String {
    if job.len() <= 63 {
        job.to_string()
    } else {
        format!("{}-{}", trunc(job, 52), short_hash(&[job]))
    }
}

fn trunc(s: &str, n: usize) -> &str {
    let mut end = n.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].trim_end_matches(['-', '.'])
}

fn short_hash(parts: &[&str]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0u8]);
    }
    hex::encode(&h.finalize()[..5])
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn parse_time(s: Option<&str>) -> Option<DateTime<Utc>> {
    s.and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
}

fn dur(field: &str, value: &str, fallback: Duration) -> Duration {
    parse_duration(field, value).unwrap_or(fallback)
}

const FAST: Duration = Duration::from_secs(2);
/// How long a savepoint request recorded without an id may be in flight before it is re-sent.
const UNSENT_GRACE: Duration = Duration::from_secs(30);
const SLOW: Duration = Duration::from_secs(30);
const IDLE: Duration = Duration::from_secs(300);

/// Identity of the StreamJob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRef {
    pub name: String,
    pub namespace: String,
}

struct Ctx<'a> {
    job: &'a str,
    spec: &'a StreamJobSpec,
    spec_hash: Option<String>,
    spec_error: Option<String>,
    obs: &'a Observed,
    old: &'a StreamJobStatus,
    st: StreamJobStatus,
    now: String,
    actions: Vec<Action>,
    events: Vec<Note>,
    outcome: Option<Outcome>,
    sp_done: Vec<(String, f64)>,
    requeue: Duration,
    degraded: Option<(String, String)>,
    ready: Option<(bool, String, String)>,
    failed: bool,
}

/// Result of looking at `status.pendingSavepoint`.
#[derive(Clone, Debug, PartialEq)]
enum SpPoll {
    NoPending,
    InFlight,
    Done(String),
    Failed(String),
}

/// The decision: given the spec, the persisted status and the observed world, what to do and what
/// status to write. Pure: no I/O, no clock (the time is `observed.now`).
pub fn decide(
    job: &JobRef,
    spec: &StreamJobSpec,
    status: &StreamJobStatus,
    observed: &Observed,
) -> Decision {
    let (spec_hash, spec_error) = match spec.validate() {
        Ok(()) => match deployment_hash(spec) {
            Ok(h) => (Some(h), None),
            Err(e) => (None, Some(e.to_string())),
        },
        Err(e) => (None, Some(e.to_string())),
    };
    let mut c = Ctx {
        job: &job.name,
        spec,
        spec_hash,
        spec_error,
        obs: observed,
        old: status,
        st: status.clone(),
        now: rfc3339(observed.now),
        actions: Vec::new(),
        events: Vec::new(),
        outcome: None,
        sp_done: Vec::new(),
        requeue: SLOW,
        degraded: None,
        ready: None,
        failed: false,
    };
    c.st.observed_generation = observed.generation.or(status.observed_generation);
    c.st.message = None;
    c.run();
    guard_transition(status, c.finish(), observed)
}

/// The state machine checked in every build, not only in tests: a decision that moves the upgrade
/// stage along a transition [`TRANSITIONS`] does not declare is a bug. It is refused whole —
/// nothing is written, created or deleted — and reported in status and as an Event, so the job
/// stays where it was instead of taking a step nobody reasoned about.
fn guard_transition(old: &StreamJobStatus, decision: Decision, observed: &Observed) -> Decision {
    let stage = |s: &StreamJobStatus| match &s.upgrade {
        None => Some(None),
        Some(u) => u.step.parse::<Stage>().ok().map(Some),
    };
    let (Some(from), Some(to)) = (stage(old), stage(&decision.status)) else {
        return decision; // an unreadable stored stage is reported by the decision itself
    };
    if legal(from, to) {
        return decision;
    }
    let show = |s: Option<Stage>| s.map_or("none".to_string(), |s| s.to_string());
    let message = format!(
        "refused an undeclared upgrade transition {} -> {}: nothing was changed; this is an operator bug, please report it with this message",
        show(from),
        show(to)
    );
    tracing::error!(%message, "illegal transition");
    let mut status = old.clone();
    set_condition(
        &mut status.conditions,
        "Degraded",
        true,
        "IllegalTransition",
        &message,
        observed.generation,
        observed.now,
    );
    status.message = Some(message.clone());
    Decision {
        actions: Vec::new(),
        status,
        events: vec![Note {
            warning: true,
            reason: "IllegalTransition".into(),
            message,
        }],
        requeue_after: Duration::from_secs(30),
        outcome: None,
        savepoints_completed: Vec::new(),
    }
}

impl Ctx<'_> {
    fn stage(&self) -> Result<Option<Stage>, String> {
        match &self.st.upgrade {
            None => Ok(None),
            Some(u) => u.step.parse().map(Some),
        }
    }

    fn set_stage(&mut self, stage: Stage) {
        if let Some(u) = self.st.upgrade.as_mut() {
            u.step = stage.to_string();
            u.step_started_at = Some(self.now.clone());
        }
        self.requeue = Duration::from_secs(1);
    }

    fn note(&mut self, warning: bool, reason: &str, message: impl Into<String>) {
        self.events.push(Note {
            warning,
            reason: reason.to_string(),
            message: message.into(),
        });
    }

    fn step_age(&self) -> Duration {
        let since = self
            .st
            .upgrade
            .as_ref()
            .and_then(|u| parse_time(u.step_started_at.as_deref().or(Some(&u.started_at))));
        since
            .map(|t| (self.obs.now - t).to_std().unwrap_or_default())
            .unwrap_or_default()
    }

    fn upgrade_spec(&self) -> Option<StreamJobSpec> {
        self.st
            .upgrade
            .as_ref()
            .and_then(|u| u.target_spec.as_deref())
            .and_then(|s| serde_json::from_str(s).ok())
    }

    fn last_stable(&self) -> Option<(String, StreamJobSpec)> {
        let hash = self.st.last_stable_spec_hash.clone()?;
        let spec = serde_json::from_str(self.st.last_stable_spec.as_deref()?).ok()?;
        Some((hash, spec))
    }

    fn readiness_timeout(spec: &StreamJobSpec) -> Duration {
        dur(
            "readinessTimeout",
            &spec.upgrade.readiness_timeout,
            Duration::from_secs(300),
        )
    }

    fn savepoint_timeout(&self) -> Duration {
        dur(
            "savepointTimeout",
            &self.spec.upgrade.savepoint_timeout,
            Duration::from_secs(600),
        )
    }

    fn active(&self) -> Option<String> {
        self.st.deployment.as_ref().and_then(|d| d.workload.clone())
    }

    fn standby_name(&self) -> Option<String> {
        let u = self.st.upgrade.as_ref()?;
        Some(pod_name(self.job, &u.to, &u.started_at))
    }

    fn plan_name(&self) -> Option<String> {
        let u = self.st.upgrade.as_ref()?;
        Some(plan_pod_name(self.job, &u.to, &u.started_at))
    }

    fn ensure_config(&mut self, hash: &str, spec: &StreamJobSpec) {
        let a = Action::EnsureConfig {
            hash: hash.to_string(),
            spec: Box::new(spec.clone()),
        };
        if !self.actions.contains(&a) {
            self.actions.push(a);
        }
    }

    /// Deletes a runtime pod whose version must not commit anything more (rolled back, replaced,
    /// left over): it is cancelled first, so its SIGTERM takes no final checkpoint. The cancel is
    /// best effort; fencing by epoch holds without it.
    fn cancel_and_delete(&mut self, name: &str) {
        let a = Action::Cancel {
            pod: name.to_string(),
        };
        if self.actions.contains(&a) {
            return;
        }
        // before the deletion, if one was already decided
        let at = self
            .actions
            .iter()
            .position(|b| matches!(b, Action::DeletePod { name: n } if n == name))
            .unwrap_or(self.actions.len());
        self.actions.insert(at, a);
        self.delete_pod(name);
    }

    /// Every run this decision starts gets the next epoch, and status (written before any action)
    /// records the largest: a pod never runs with an epoch that status does not cover.
    fn assign_epochs(&mut self) {
        let mut epoch = self.st.epoch.unwrap_or(0);
        let mut exhausted = false;
        for a in &mut self.actions {
            let slot = match a {
                Action::CreatePod(p) => &mut p.epoch,
                Action::Start { epoch: e, .. } => e,
                _ => continue,
            };
            // Epochs fence older runs: a run may never share one (an edited status.epoch at the
            // maximum was found by fuzz_decide_never_panics).
            match epoch.checked_add(1) {
                Some(next) => {
                    epoch = next;
                    *slot = epoch;
                }
                None => exhausted = true,
            }
        }
        if exhausted {
            self.actions
                .retain(|a| !matches!(a, Action::CreatePod(_) | Action::Start { .. }));
            self.degraded = Some((
                "EpochExhausted".into(),
                "status.epoch is at its maximum, so no run can be fenced from older ones: nothing is started (was status edited?)".into(),
            ));
        }
        if epoch > 0 {
            self.st.epoch = Some(epoch);
        }
    }

    fn delete_pod(&mut self, name: &str) {
        let a = Action::DeletePod {
            name: name.to_string(),
        };
        if !self.actions.contains(&a) {
            self.actions.push(a);
        }
    }

    /// Creates a runtime pod and records it as the deployment (before it exists: WAL).
    fn deploy(&mut self, hash: &str, spec: &StreamJobSpec, from: Option<String>, nonce: &str) {
        let name = pod_name(self.job, hash, nonce);
        self.ensure_config(hash, spec);
        self.actions.push(Action::CreatePod(Box::new(PodPlan {
            name: name.clone(),
            hash: hash.to_string(),
            spec: spec.clone(),
            from_savepoint: from.clone(),
            standby: false,
            fresh: from.is_none()
                && self.st.upgrade.is_some()
                && spec.upgrade.mode == UpgradeMode::Stateless,
            epoch: 0,
        })));
        self.st.deployment = Some(DeploymentStatus {
            spec_hash: hash.to_string(),
            image: spec.image.clone(),
            parallelism: Some(spec.parallelism),
            started_from: if from.is_some() {
                StartedFrom::Savepoint
            } else if spec.upgrade.mode == UpgradeMode::LastState {
                StartedFrom::Checkpoint
            } else {
                StartedFrom::Empty
            },
            path: from,
            workload: Some(name),
            started_at: Some(self.now.clone()),
        });
    }

    /// Starts a new run in the deployed, warm pods (a shadow rollback): the same pods, so the
    /// deployment record stays, but it now says where and when this run started.
    fn start_warm_deployment(&mut self, pod: String, from: Option<String>) {
        if let Some(d) = self
            .st
            .deployment
            .as_mut()
            .filter(|d| d.workload.as_deref() == Some(pod.as_str()))
        {
            d.started_from = if from.is_some() {
                StartedFrom::Savepoint
            } else {
                StartedFrom::Empty
            };
            d.path = from.clone();
            d.started_at = Some(self.now.clone());
        }
        self.actions.push(Action::Start {
            pod,
            from_savepoint: from,
            epoch: 0,
        });
    }

    fn record_savepoint(&mut self, path: &str, reason: &str, started_at: Option<&str>) {
        let info = SavepointInfo {
            path: path.to_string(),
            time: Some(self.now.clone()),
            reason: Some(reason.to_string()),
            spec_hash: self.st.deployment.as_ref().map(|d| d.spec_hash.clone()),
        };
        if !self.st.savepoint_history.iter().any(|s| s.path == path) {
            self.st.savepoint_history.push(info.clone());
        }
        self.st.last_savepoint = Some(info);
        let secs = parse_time(started_at)
            .map(|t| (self.obs.now - t).num_milliseconds().max(0) as f64 / 1000.0)
            .unwrap_or(0.0);
        self.sp_done.push((reason.to_string(), secs));
        self.note(
            false,
            "SavepointCompleted",
            format!("{reason} savepoint completed: {path}"),
        );
    }

    // -- observing --------------------------------------------------------------------------

    fn observe_active(&mut self) {
        let Some(active) = self.active() else { return };
        if let Some(js) = self.obs.job(&active)
            && let Some(ck) = &js.latest_checkpoint
        {
            let info = CheckpointInfo {
                id: ck.id.unwrap_or(0),
                path: Some(ck.path.clone()),
                time: ck.completed_at.clone(),
            };
            if self.st.last_checkpoint.as_ref() != Some(&info) {
                self.st.last_checkpoint = Some(info);
            }
        }
    }

    fn poll_savepoint(&mut self) -> SpPoll {
        let Some(p) = self.st.pending_savepoint.clone() else {
            return SpPoll::NoPending;
        };
        // Recorded but never sent (the operator stopped between writing the status and the
        // request): the job still runs normally after a grace period, so ask again.
        let age = parse_time(Some(&p.started_at))
            .map(|t| (self.obs.now - t).to_std().unwrap_or_default())
            .unwrap_or_default();
        if p.request_id.is_empty()
            && age > UNSENT_GRACE
            && self
                .active()
                .and_then(|a| self.obs.job(&a))
                .is_some_and(|j| {
                    j.state == RunState::Running
                        && j.last_savepoint
                            .as_ref()
                            .and_then(|s| parse_time(s.completed_at.as_deref()))
                            .is_none_or(|t| Some(t) < parse_time(Some(&p.started_at)))
                })
        {
            self.st.pending_savepoint = None;
            return SpPoll::NoPending;
        }
        let result = match &self.obs.savepoint {
            Some(SavepointState::Completed { path }) => Some(Ok(path.clone())),
            Some(SavepointState::Failed { error }) => Some(Err(error.clone())),
            Some(SavepointState::Pending) => None,
            None => {
                // The pod may have exited after stop-with-savepoint: its termination message.
                let from_exit = self
                    .active()
                    .and_then(|a| self.obs.pod(&a))
                    .filter(|pod| pod.phase == PodPhase::Succeeded)
                    .and_then(|pod| pod.message.as_deref())
                    .and_then(savepoint_from_message);
                // A path handed over by annotation counts once: not one already recorded.
                let recovered = self.obs.recovered_savepoint.clone().filter(|r| {
                    !self.st.savepoint_history.iter().any(|s| &s.path == r)
                        && self.st.last_savepoint.as_ref().is_none_or(|s| &s.path != r)
                });
                let from_exit = from_exit.or(recovered);
                let from_status = self.active().and_then(|a| {
                    let js = self.obs.job(&a)?;
                    let sp = js.last_savepoint.as_ref()?;
                    let done = parse_time(sp.completed_at.as_deref())?;
                    (done >= parse_time(Some(&p.started_at))?).then(|| sp.path.clone())
                });
                from_exit.or(from_status).map(Ok)
            }
        };
        match result {
            Some(Ok(path)) => {
                self.st.pending_savepoint = None;
                self.record_savepoint(&path, &p.reason, Some(&p.started_at));
                SpPoll::Done(path)
            }
            Some(Err(error)) => {
                self.st.pending_savepoint = None;
                self.note(
                    true,
                    "SavepointFailed",
                    format!("{} savepoint failed: {error}", p.reason),
                );
                self.st.message = Some(format!("{} savepoint failed: {error}", p.reason));
                SpPoll::Failed(error)
            }
            None => {
                let age = parse_time(Some(&p.started_at))
                    .map(|t| (self.obs.now - t).to_std().unwrap_or_default())
                    .unwrap_or_default();
                let exited = p.stop
                    && self
                        .active()
                        .and_then(|a| self.obs.pod(&a))
                        .is_some_and(|pod| pod.phase == PodPhase::Succeeded);
                if exited {
                    // The job stopped with a savepoint we cannot see: never give up on it (the
                    // old job is gone), ask for the path instead.
                    let dir = self
                        .upgrade_spec()
                        .unwrap_or_else(|| self.spec.clone())
                        .savepoint_dir();
                    let msg = format!(
                        "the job stopped with its {} savepoint but exited before the operator could read the path; find the newest savepoint under {dir} and set the annotation {ANNOTATION_RECOVERED_SAVEPOINT}=<path> to continue",
                        p.reason
                    );
                    self.degraded = Some(("SavepointPathUnknown".into(), msg.clone()));
                    self.st.message = Some(msg);
                    self.requeue = Duration::from_secs(10);
                    SpPoll::InFlight
                } else if age > self.savepoint_timeout() {
                    self.st.pending_savepoint = None;
                    let msg = format!(
                        "{} savepoint did not complete within {}",
                        p.reason, self.spec.upgrade.savepoint_timeout
                    );
                    self.note(true, "SavepointFailed", msg.clone());
                    self.st.message = Some(msg.clone());
                    SpPoll::Failed(msg)
                } else {
                    self.requeue = FAST;
                    SpPoll::InFlight
                }
            }
        }
    }

    fn trigger(&mut self, pod: &str, reason: &str, stop: bool, standby: bool) {
        let dir = self
            .upgrade_spec()
            .unwrap_or_else(|| self.spec.clone())
            .savepoint_dir();
        self.actions.push(Action::TriggerSavepoint {
            pod: pod.to_string(),
            dir,
            stop,
            standby,
        });
        self.st.pending_savepoint = Some(PendingSavepoint {
            request_id: String::new(),
            reason: reason.to_string(),
            stop,
            started_at: self.now.clone(),
        });
        self.note(
            false,
            "SavepointTriggered",
            format!(
                "{reason} savepoint requested from {pod}{}",
                if stop { " (stop)" } else { "" }
            ),
        );
        self.requeue = FAST;
    }

    // -- the machine --------------------------------------------------------------------------

    fn run(&mut self) {
        self.observe_active();
        let stage = match self.stage() {
            Ok(s) => s,
            Err(e) => {
                // An unreadable record: keep the job as it is and say so.
                self.st.message = Some(format!(
                    "status.upgrade is unreadable ({e}); clear status.upgrade to continue"
                ));
                self.degraded = Some(("UnreadableStatus".into(), e));
                return;
            }
        };
        let sp = self.poll_savepoint();
        match stage {
            None => self.steady(sp),
            Some(s) => match (s.kind, s.step) {
                (_, Planning) => self.planning(s),
                (Suspend, Suspended) | (Resume, Blocked) => self.suspended(s),
                (_, Blocked | Aborted | RolledBack) => self.steady(sp),
                (Shadow, StartingStandby) => self.starting_standby(),
                (_, Savepointing) => self.savepointing(s, sp),
                (_, Stopped) => self.stopped(s),
                (_, Restoring) => self.restoring(s),
                (_, StartingStandby | Suspended) => {
                    self.st.message = Some(format!("unexpected stage {s}; clear status.upgrade"));
                }
            },
        }
    }

    /// No transition in flight (or only a terminal record): keep the deployed job healthy,
    /// observe it, and start whatever the spec asks for.
    fn steady(&mut self, sp: SpPoll) {
        let Some(dep) = self.st.deployment.clone() else {
            self.first_deploy();
            return;
        };
        let active = dep.workload.clone().unwrap_or_default();
        let pod = self.obs.pod(&active).cloned();
        let js = self.obs.job(&active).cloned();
        let mut healthy = false;
        match &pod {
            None => {
                if self.st.phase != Some(Phase::Finished) {
                    // The job's own checkpoints are newer than what it started from: resume
                    // from the latest one; otherwise from its savepoint again.
                    let checkpointed_since = self
                        .st
                        .last_checkpoint
                        .as_ref()
                        .and_then(|c| parse_time(c.time.as_deref()))
                        .zip(parse_time(dep.started_at.as_deref()))
                        .is_some_and(|(ck, start)| ck > start);
                    let from = match dep.started_from {
                        StartedFrom::Savepoint if !checkpointed_since => dep.path.clone(),
                        _ => None,
                    };
                    let spec = self.deployed_spec().unwrap_or_else(|| self.spec.clone());
                    self.ensure_config(&dep.spec_hash, &spec);
                    self.actions.push(Action::CreatePod(Box::new(PodPlan {
                        name: active.clone(),
                        hash: dep.spec_hash.clone(),
                        spec,
                        from_savepoint: from,
                        standby: false,
                        fresh: false,
                        epoch: 0,
                    })));
                    let msg = format!(
                        "runtime pod {active} is missing; recreated it (it resumes from the latest checkpoint)"
                    );
                    self.note(true, "PodRecreated", msg.clone());
                    self.degraded = Some(("PodMissing".into(), msg));
                    self.requeue = FAST;
                }
            }
            Some(p) if p.terminating => {
                self.degraded = Some((
                    "PodTerminating".into(),
                    format!("runtime pod {active} is terminating; it will be recreated"),
                ));
                self.requeue = FAST;
            }
            Some(p) if p.phase == PodPhase::Failed => {
                self.delete_pod(&active);
                let msg = format!(
                    "runtime pod {active} failed{}; replacing it",
                    p.message
                        .as_deref()
                        .map(|m| format!(": {}", short(m)))
                        .unwrap_or_default()
                );
                self.note(true, "PodFailed", msg.clone());
                self.degraded = Some(("PodFailed".into(), msg));
                self.requeue = FAST;
            }
            Some(p) if p.phase == PodPhase::Succeeded => {
                self.st.phase = Some(Phase::Finished);
                self.ready = Some((false, "Finished".into(), "the job has finished".into()));
            }
            Some(p) => {
                if p.crash_looping() {
                    self.degraded = Some((
                        "CrashLooping".into(),
                        format!(
                            "runtime pod {active} restarted {} times{}",
                            p.restarts,
                            p.waiting_reason
                                .as_deref()
                                .map(|r| format!(" ({r})"))
                                .unwrap_or_default()
                        ),
                    ));
                }
                match &js {
                    Some(js) => match js.state {
                        RunState::Running => {
                            healthy = true;
                            self.st.phase = Some(Phase::Running);
                        }
                        RunState::Finished => {
                            self.st.phase = Some(Phase::Finished);
                            self.ready =
                                Some((false, "Finished".into(), "the job has finished".into()));
                        }
                        // A pod created as a warm standby (a promoted shadow, a warm rollback
                        // target) waits for a start whenever it is not running its job: after
                        // the job failed (a runtime started otherwise exits, and its container
                        // restarts and resumes), and after its container restarted (it comes
                        // back with `--standby`). Only an upgrade sends a start; in a steady
                        // state nothing would, and the job would stay stopped for good (found by
                        // the soak). Replace the pod: the new one resumes from the latest
                        // checkpoint.
                        RunState::Failed | RunState::Standby => {
                            let (reason, what) = if js.state == RunState::Failed {
                                (
                                    "JobFailed",
                                    format!(
                                        "the job failed after {} restarts ({})",
                                        js.restarts,
                                        short(js.failure.as_deref().unwrap_or("no reason"))
                                    ),
                                )
                            } else {
                                (
                                    "StandbyRestarted",
                                    "its container restarted into standby".to_string(),
                                )
                            };
                            let msg = format!(
                                "runtime pod {active}: {what}; replacing the pod, it resumes from the latest checkpoint"
                            );
                            self.delete_pod(&active);
                            self.note(true, reason, msg.clone());
                            self.degraded = Some((reason.into(), msg));
                            self.requeue = FAST;
                        }
                        RunState::Restarting => {
                            let why = js.failure.clone().unwrap_or_else(|| "no reason".into());
                            self.degraded = Some((
                                "JobRestarting".into(),
                                format!(
                                    "the job is {:?} after {} restarts: {why}",
                                    js.state, js.restarts
                                ),
                            ));
                        }
                        _ => {}
                    },
                    None => {
                        let why = self
                            .obs
                            .unreachable(&active)
                            .unwrap_or("no pod IP yet")
                            .to_string();
                        self.ready = Some((
                            false,
                            "RuntimeUnreachable".into(),
                            format!("control API of {active}: {why}"),
                        ));
                    }
                }
            }
        }
        if let Some(js) = &js {
            // The deployed spec is stable once it completed a checkpoint of its own.
            if js.has_own_checkpoint()
                && self.st.last_stable_spec_hash.as_deref() != Some(dep.spec_hash.as_str())
                && self.spec_hash.as_deref() == Some(dep.spec_hash.as_str())
            {
                self.st.last_stable_spec_hash = Some(dep.spec_hash.clone());
                self.st.last_stable_spec = serde_json::to_string(self.spec).ok();
                self.note(
                    false,
                    "Stable",
                    format!(
                        "spec {} completed its first checkpoint; it is the rollback target",
                        dep.spec_hash
                    ),
                );
            }
        }
        if self.st.phase == Some(Phase::Finished) {
            return;
        }
        if self.st.phase.is_none() || self.st.phase == Some(Phase::Failed) && healthy {
            self.st.phase = Some(if healthy {
                Phase::Running
            } else {
                Phase::Deploying
            });
        }
        if self.st.phase == Some(Phase::Deploying) {
            self.requeue = self.requeue.min(Duration::from_secs(5));
        }
        // Spec changes start only from a settled state.
        if sp != SpPoll::NoPending || self.st.pending_savepoint.is_some() {
            return;
        }
        let (Some(hash), None) = (self.spec_hash.clone(), self.spec_error.clone()) else {
            return;
        };
        let record = self
            .stage()
            .ok()
            .flatten()
            .zip(self.st.upgrade.as_ref().map(|u| u.to.clone()));
        if self.spec.state == JobState::Suspended {
            self.begin_suspend(healthy, &active, &dep);
            return;
        }
        if hash != dep.spec_hash {
            match record {
                // An aborted upgrade (no savepoint could be taken) is tried again once the job
                // runs and a savepoint timeout has passed.
                Some((s, to))
                    if to == hash
                        && s.step == Aborted
                        && healthy
                        && self.step_age() > self.savepoint_timeout() =>
                {
                    self.begin_change(&hash, &dep, healthy)
                }
                // This very spec was blocked, aborted or rolled back: wait for another one.
                Some((_, to)) if to == hash => {}
                _ => self.begin_change(&hash, &dep, healthy),
            }
            return;
        }
        if record.is_some() {
            // The spec is back to what runs: forget the blocked/aborted/rolled-back target.
            self.st.upgrade = None;
        }
        if !healthy {
            return;
        }
        // Savepoints on request and on schedule.
        let nonce = self
            .spec
            .savepoints
            .as_ref()
            .map(|s| s.trigger_nonce)
            .unwrap_or(0);
        if nonce != self.st.last_handled_nonce.unwrap_or(0) {
            self.st.last_handled_nonce = Some(nonce);
            self.trigger(&active, "trigger", false, false);
            return;
        }
        if let Some(periodic) = self
            .spec
            .savepoints
            .as_ref()
            .and_then(|s| s.periodic.clone())
        {
            let every = dur("periodic", &periodic, Duration::from_secs(3600));
            let since = self
                .st
                .last_savepoint
                .as_ref()
                .and_then(|s| parse_time(s.time.as_deref()))
                .into_iter()
                .chain(parse_time(dep.started_at.as_deref()))
                .max();
            let elapsed = since
                .map(|t| (self.obs.now - t).to_std().unwrap_or_default())
                .unwrap_or(every);
            if elapsed >= every {
                self.trigger(&active, "periodic", false, false);
            } else {
                self.requeue = self.requeue.min(every - elapsed + Duration::from_secs(1));
            }
        }
    }

    fn deployed_spec(&self) -> Option<StreamJobSpec> {
        let dep = self.st.deployment.as_ref()?;
        match self.last_stable() {
            Some((h, s)) if h == dep.spec_hash => Some(s),
            _ => {
                let up = self.upgrade_spec()?;
                (self.st.upgrade.as_ref()?.to == dep.spec_hash).then_some(up)
            }
        }
    }

    fn first_deploy(&mut self) {
        if self.spec.state == JobState::Suspended {
            self.st.phase = Some(Phase::Suspended);
            return;
        }
        let Some(hash) = self.spec_hash.clone() else {
            self.ready = Some((
                false,
                "InvalidSpec".into(),
                self.spec_error.clone().unwrap_or_default(),
            ));
            return;
        };
        let from = self.spec.initial_savepoint.clone();
        let nonce = self.now.clone();
        self.deploy(&hash, &self.spec.clone(), from.clone(), &nonce);
        self.st.phase = Some(Phase::Deploying);
        self.note(
            false,
            "Deploying",
            format!(
                "deploying {} ({}) from {}",
                self.spec.image,
                hash,
                from.as_deref().unwrap_or("an empty state")
            ),
        );
        self.requeue = FAST;
    }

    fn new_record(
        &self,
        from: Option<String>,
        to: &str,
        spec: &StreamJobSpec,
        stage: Stage,
        message: String,
    ) -> UpgradeStatus {
        UpgradeStatus {
            from,
            to: to.to_string(),
            target_spec: serde_json::to_string(spec).ok(),
            step: stage.to_string(),
            started_at: self.now.clone(),
            step_started_at: Some(self.now.clone()),
            savepoint: None,
            message: Some(message),
        }
    }

    fn latest_state_path(&self) -> Option<String> {
        let ck = self
            .st
            .last_checkpoint
            .as_ref()
            .and_then(|c| Some((parse_time(c.time.as_deref()), c.path.clone()?)));
        let sp = self
            .st
            .last_savepoint
            .as_ref()
            .map(|s| (parse_time(s.time.as_deref()), s.path.clone()));
        match (ck, sp) {
            (Some(c), Some(s)) => Some(if s.0 > c.0 { s.1 } else { c.1 }),
            (Some(c), None) => Some(c.1),
            (None, Some(s)) => Some(s.1),
            (None, None) => self.st.deployment.as_ref().and_then(|d| d.path.clone()),
        }
    }

    fn begin_change(&mut self, hash: &str, dep: &DeploymentStatus, _healthy: bool) {
        let deployed = self.deployed_spec();
        let change = classify(deployed.as_ref(), self.spec);
        if change == Change::Policy || change == Change::None {
            // Only how future rollouts happen changed: adopt it, the job keeps running.
            if let Some(d) = self.st.deployment.as_mut() {
                d.spec_hash = hash.to_string();
            }
            if self.st.last_stable_spec_hash.as_deref() == Some(dep.spec_hash.as_str()) {
                self.st.last_stable_spec_hash = Some(hash.to_string());
                self.st.last_stable_spec = serde_json::to_string(self.spec).ok();
            }
            self.st.upgrade = None;
            self.note(
                false,
                "PolicyUpdated",
                "spec.upgrade changed; the running job is unchanged",
            );
            return;
        }
        let spec = self.spec.clone();
        let mode = spec.upgrade.mode;
        let shadow =
            spec.upgrade.strategy == UpgradeStrategy::Shadow && mode == UpgradeMode::Savepoint;
        let plan_from = if mode == UpgradeMode::Stateless {
            None
        } else {
            self.latest_state_path()
        };
        let kind = if shadow { Shadow } else { InPlace };
        let stage = if mode == UpgradeMode::Stateless {
            Stage {
                kind: InPlace,
                step: Stopped,
            }
        } else if plan_from.is_some() {
            Stage {
                kind,
                step: Planning,
            }
        } else if shadow {
            Stage {
                kind: Shadow,
                step: StartingStandby,
            }
        } else if mode == UpgradeMode::Savepoint
            || (mode == UpgradeMode::LastState && self.active_running())
        {
            Stage {
                kind: InPlace,
                step: Savepointing,
            }
        } else {
            Stage {
                kind: InPlace,
                step: Stopped,
            }
        };
        let what = format!(
            "{} change {} -> {} ({:?}, mode {:?})",
            change.as_str(),
            dep.spec_hash,
            hash,
            kind,
            mode
        );
        self.st.upgrade = Some(self.new_record(
            Some(dep.spec_hash.clone()),
            hash,
            &spec,
            stage,
            what.clone(),
        ));
        self.ensure_config(hash, &spec);
        if let (Planning, Some(from)) = (stage.step, plan_from) {
            self.create_plan(hash, &spec, &from);
        }
        let reason = if change == Change::Rescale {
            "RescaleStarted"
        } else {
            "UpgradeStarted"
        };
        self.note(false, reason, what);
        self.requeue = Duration::from_secs(1);
    }

    fn create_plan(&mut self, hash: &str, spec: &StreamJobSpec, from: &str) {
        if let Some(name) = self.plan_name() {
            self.actions.push(Action::CreatePlanPod {
                name,
                hash: hash.to_string(),
                spec: Box::new(spec.clone()),
                from: from.to_string(),
            });
        }
    }

    fn begin_suspend(&mut self, healthy: bool, _active: &str, dep: &DeploymentStatus) {
        let spec = self.deployed_spec().unwrap_or_else(|| self.spec.clone());
        let stage = if healthy {
            Stage {
                kind: Suspend,
                step: Savepointing,
            }
        } else {
            // No savepoint can be taken: resume later from the latest checkpoint.
            Stage {
                kind: Suspend,
                step: Stopped,
            }
        };
        self.st.upgrade = Some(self.new_record(
            Some(dep.spec_hash.clone()),
            &dep.spec_hash,
            &spec,
            stage,
            if healthy {
                "suspending: stop with savepoint".into()
            } else {
                "suspending: the job is not running, it will resume from its latest checkpoint"
                    .into()
            },
        ));
        self.note(false, "Suspending", "spec.state is suspended");
        self.requeue = Duration::from_secs(1);
    }

    fn planning(&mut self, s: Stage) {
        let Some(up) = self.st.upgrade.clone() else {
            return;
        };
        // Nothing has been touched yet: a newer spec (or a suspend) replaces this plan.
        let current = self.spec_hash.clone();
        let superseded = match s.kind {
            Resume => {
                self.spec.state == JobState::Suspended || current.as_deref() != Some(up.to.as_str())
            }
            _ => {
                self.spec.state == JobState::Suspended || current.as_deref() != Some(up.to.as_str())
            }
        };
        let plan = self.plan_name().unwrap_or_default();
        if superseded && self.spec_error.is_none() {
            self.delete_pod(&plan);
            if s.kind == Resume {
                self.back_to_suspended(&up);
                self.suspended(Stage {
                    kind: Suspend,
                    step: Suspended,
                });
            } else {
                self.st.upgrade = None;
                self.steady(SpPoll::NoPending);
            }
            return;
        }
        let target = self.upgrade_spec().unwrap_or_else(|| self.spec.clone());
        self.ensure_config(&up.to, &target);
        self.requeue = FAST;
        // a plan pod on its way out is waited for (a retry creates one of the same name)
        if self.obs.pod(&plan).is_some_and(|p| p.terminating) {
            return;
        }
        let result = self.obs.pod(&plan).map(plan_result);
        match result {
            None => {
                let from = up.savepoint.clone().or_else(|| self.latest_state_path());
                match from {
                    Some(from) => self.create_plan(&up.to, &target, &from),
                    None => self.after_plan(s),
                }
            }
            Some(PlanResult::Running) => {
                if self.step_age() > Self::readiness_timeout(&target) {
                    self.delete_pod(&plan);
                    self.block(
                        s,
                        "PlanTimeout",
                        format!(
                            "the plan pod {plan} did not finish within {}; the running job is untouched (check the image and the pod's events)",
                            target.upgrade.readiness_timeout
                        ),
                    );
                }
            }
            Some(PlanResult::Compatible) => {
                self.delete_pod(&plan);
                self.note(
                    false,
                    "PlanCompatible",
                    format!("spec {} can restore the job's state", up.to),
                );
                self.after_plan(s);
            }
            Some(PlanResult::Incompatible(why)) => {
                self.delete_pod(&plan);
                self.block(s, "Incompatible", why);
            }
            Some(PlanResult::Error(why)) => {
                self.delete_pod(&plan);
                self.block(s, "PlanFailed", why);
            }
            Some(PlanResult::Transient(why))
                if self.step_age() <= Self::readiness_timeout(&target) =>
            {
                // gone, the next decision plans again against the state recorded by then
                self.delete_pod(&plan);
                self.note(true, "PlanRetried", format!("{why}; planning again"));
            }
            Some(PlanResult::Transient(why)) => {
                self.delete_pod(&plan);
                self.block(
                    s,
                    "PlanFailed",
                    format!(
                        "{why} (tried again for readinessTimeout {})",
                        target.upgrade.readiness_timeout
                    ),
                );
            }
        }
    }

    fn block(&mut self, s: Stage, reason: &str, why: String) {
        self.set_stage(Stage {
            kind: s.kind,
            step: Blocked,
        });
        if let Some(u) = self.st.upgrade.as_mut() {
            u.message = Some(format!("{reason}: {why}"));
        }
        self.st.message = Some(format!("upgrade blocked: {why}"));
        self.note(true, "UpgradeBlocked", format!("{reason}: {why}"));
        self.outcome = Some(Outcome::Blocked);
        self.requeue = SLOW;
    }

    fn after_plan(&mut self, s: Stage) {
        let target = self.upgrade_spec().unwrap_or_else(|| self.spec.clone());
        let next = match s.kind {
            Shadow => StartingStandby,
            Resume => {
                self.resume_deploy(&target);
                return;
            }
            _ if target.upgrade.mode == UpgradeMode::Savepoint => Savepointing,
            // last-state: a savepoint while the job runs (fresher, and nothing it commits on
            // the way out is lost), the latest checkpoint when it cannot take one.
            _ if target.upgrade.mode == UpgradeMode::LastState && self.active_running() => {
                Savepointing
            }
            _ => Stopped,
        };
        self.set_stage(Stage {
            kind: s.kind,
            step: next,
        });
    }

    fn active_running(&self) -> bool {
        self.active()
            .and_then(|a| self.obs.job(&a))
            .is_some_and(|j| j.state == RunState::Running)
    }

    fn last_state(&self) -> bool {
        self.upgrade_spec()
            .unwrap_or_else(|| self.spec.clone())
            .upgrade
            .mode
            == UpgradeMode::LastState
    }

    fn starting_standby(&mut self) {
        let Some(up) = self.st.upgrade.clone() else {
            return;
        };
        let Some(name) = self.standby_name() else {
            return;
        };
        let target = self.upgrade_spec().unwrap_or_else(|| self.spec.clone());
        self.requeue = FAST;
        match self.obs.pod(&name) {
            None => {
                self.ensure_config(&up.to, &target);
                self.actions.push(Action::CreatePod(Box::new(PodPlan {
                    name,
                    hash: up.to.clone(),
                    spec: target,
                    from_savepoint: None,
                    standby: true,
                    fresh: false,
                    epoch: 0,
                })));
            }
            Some(p) => {
                let js = self.obs.job(&name);
                let waiting =
                    js.is_some_and(|j| matches!(j.state, RunState::Standby | RunState::Created));
                if p.crash_looping() || matches!(p.phase, PodPhase::Failed | PodPhase::Succeeded) {
                    self.delete_pod(&name);
                    self.abort(Shadow, format!("the standby pod {name} of the new version does not run ({:?}, {} restarts)", p.phase, p.restarts));
                } else if waiting && p.ready {
                    self.set_stage(Stage {
                        kind: Shadow,
                        step: Savepointing,
                    });
                    self.note(false, "StandbyReady", format!("new version {name} is loaded and waits; stopping the old one with a savepoint"));
                } else if self.step_age() > Self::readiness_timeout(&target) {
                    self.delete_pod(&name);
                    self.abort(
                        Shadow,
                        format!(
                            "the standby pod {name} was not ready within {}",
                            target.upgrade.readiness_timeout
                        ),
                    );
                }
            }
        }
    }

    fn abort(&mut self, kind: Kind, why: String) {
        self.set_stage(Stage {
            kind,
            step: Aborted,
        });
        if let Some(u) = self.st.upgrade.as_mut() {
            u.message = Some(why.clone());
        }
        self.st.message = Some(format!(
            "upgrade aborted, the old version keeps running: {why}"
        ));
        self.note(true, "UpgradeAborted", why);
        self.outcome = Some(Outcome::Aborted);
        self.requeue = SLOW;
    }

    fn savepointing(&mut self, s: Stage, sp: SpPoll) {
        let active = self.active().unwrap_or_default();
        self.requeue = FAST;
        match sp {
            SpPoll::Done(path) => {
                // WAL: the savepoint is recorded now; pods are touched from the next decision on.
                if let Some(u) = self.st.upgrade.as_mut() {
                    u.savepoint = Some(path.clone());
                }
                self.set_stage(Stage {
                    kind: s.kind,
                    step: Stopped,
                });
                self.note(
                    false,
                    "Stopped",
                    format!("old version stopped with savepoint {path}"),
                );
            }
            SpPoll::Failed(why) => self.savepoint_impossible(s, why),
            SpPoll::InFlight => {}
            SpPoll::NoPending => {
                let js = self.obs.job(&active).cloned();
                match js.map(|j| j.state) {
                    Some(RunState::Running) => {
                        let reason = match s.kind {
                            Suspend => "suspend",
                            _ => "upgrade",
                        };
                        self.trigger(&active, reason, true, s.kind == Shadow);
                    }
                    _ if self.step_age() > self.savepoint_timeout()
                        || (s.kind == InPlace && self.last_state()) =>
                    {
                        self.savepoint_impossible(
                            s,
                            format!(
                                "the job is not running, so no savepoint can be taken (state {:?})",
                                self.obs.job(&active).map(|j| j.state)
                            ),
                        )
                    }
                    other => {
                        self.st.message = Some(format!(
                            "waiting for the job to run to take a savepoint (state {other:?}); set spec.upgrade.mode to last-state to upgrade from the latest checkpoint"
                        ));
                    }
                }
            }
        }
    }

    fn savepoint_impossible(&mut self, s: Stage, why: String) {
        match s.kind {
            InPlace if self.last_state() => {
                self.set_stage(Stage {
                    kind: InPlace,
                    step: Stopped,
                });
                self.note(
                    true,
                    "UpgradeFromCheckpoint",
                    format!("{why}; last-state: the new version starts from the latest checkpoint"),
                );
            }
            Suspend => {
                // Suspend anyway; the job resumes from its latest checkpoint.
                self.set_stage(Stage {
                    kind: Suspend,
                    step: Stopped,
                });
                self.note(
                    true,
                    "SuspendWithoutSavepoint",
                    format!("{why}; the job will resume from its latest checkpoint"),
                );
            }
            _ => {
                if s.kind == Shadow
                    && let Some(n) = self.standby_name()
                {
                    self.delete_pod(&n);
                }
                self.abort(s.kind, why);
            }
        }
    }

    fn stopped(&mut self, s: Stage) {
        let Some(up) = self.st.upgrade.clone() else {
            return;
        };
        let active = self.active();
        self.requeue = FAST;
        let target = self.upgrade_spec().unwrap_or_else(|| self.spec.clone());
        if s.kind == Shadow {
            let Some(standby) = self.standby_name() else {
                return;
            };
            let alive = self
                .obs
                .pod(&standby)
                .filter(|p| !p.terminating && p.phase == PodPhase::Running);
            let waiting = self
                .obs
                .job(&standby)
                .is_some_and(|j| matches!(j.state, RunState::Standby | RunState::Created));
            if alive.is_some() && waiting {
                self.actions.push(Action::Start {
                    pod: standby.clone(),
                    from_savepoint: up.savepoint.clone(),
                    epoch: 0,
                });
            } else {
                if let Some(p) = alive.or(self.obs.pod(&standby)) {
                    // A standby pod that cannot be started goes; a fresh one restores instead.
                    if !p.terminating {
                        self.delete_pod(&standby);
                    }
                    return;
                }
                self.ensure_config(&up.to, &target);
                self.actions.push(Action::CreatePod(Box::new(PodPlan {
                    name: standby.clone(),
                    hash: up.to.clone(),
                    spec: target,
                    from_savepoint: up.savepoint.clone(),
                    standby: false,
                    fresh: false,
                    epoch: 0,
                })));
            }
            self.set_stage(Stage {
                kind: Shadow,
                step: Restoring,
            });
            self.note(
                false,
                "Restoring",
                format!(
                    "new version {standby} restores from {}",
                    up.savepoint.as_deref().unwrap_or("the latest checkpoint")
                ),
            );
            return;
        }
        // In place, rollback, suspend: the old pods go first (their state is in the WAL).
        if let Some(a) = active.as_deref()
            && let Some(p) = self.obs.pod(a)
        {
            if !p.terminating && s.kind == Rollback {
                // the version rolled back: its output after the savepoint must not appear
                self.cancel_and_delete(a);
            } else if !p.terminating {
                self.delete_pod(a);
            }
            return;
        }
        // Also wait for any other runtime pod of this job (a shadow's leftovers) to be gone.
        let others: Vec<String> = self
            .obs
            .pods
            .iter()
            .filter(|p| p.role == PodRole::Runtime)
            .map(|p| p.name.clone())
            .collect();
        if !others.is_empty() {
            for o in others {
                if self.obs.pod(&o).is_some_and(|p| !p.terminating) {
                    self.cancel_and_delete(&o);
                }
            }
            return;
        }
        match s.kind {
            Suspend => {
                self.st.deployment = None;
                self.set_stage(Stage {
                    kind: Suspend,
                    step: Suspended,
                });
                self.st.phase = Some(Phase::Suspended);
                self.note(
                    false,
                    "Suspended",
                    format!(
                        "job suspended; it resumes from {}",
                        up.savepoint.as_deref().unwrap_or("its latest checkpoint")
                    ),
                );
                self.requeue = SLOW;
            }
            _ => {
                let nonce = self.now.clone();
                self.deploy(&up.to, &target, up.savepoint.clone(), &nonce);
                self.set_stage(Stage {
                    kind: s.kind,
                    step: Restoring,
                });
                self.note(
                    false,
                    "Restoring",
                    format!(
                        "spec {} restores from {}",
                        up.to,
                        up.savepoint.as_deref().unwrap_or(
                            if target.upgrade.mode == UpgradeMode::Stateless {
                                "an empty state"
                            } else {
                                "the latest checkpoint"
                            }
                        )
                    ),
                );
            }
        }
    }

    fn restoring(&mut self, s: Stage) {
        let Some(up) = self.st.upgrade.clone() else {
            return;
        };
        let target = self.upgrade_spec().unwrap_or_else(|| self.spec.clone());
        self.requeue = FAST;
        let watched = if s.kind == Shadow {
            self.standby_name().unwrap_or_default()
        } else {
            self.active().unwrap_or_default()
        };
        let pod = self.obs.pod(&watched).cloned();
        let js = self.obs.job(&watched).cloned();
        let done = js.as_ref().is_some_and(|j| {
            (j.state == RunState::Running && j.has_own_checkpoint())
                || j.state == RunState::Finished
        }) || pod.as_ref().is_some_and(|p| p.phase == PodPhase::Succeeded);
        if done {
            self.promote(s, &up, &target, &watched);
            return;
        }
        // A shadow rollback restarts the old, still-warm pod.
        if s.kind == Rollback
            && js.as_ref().is_some_and(|j| j.state == RunState::Standby)
            && pod.as_ref().is_some_and(|p| !p.terminating)
        {
            self.start_warm_deployment(watched.clone(), up.savepoint.clone());
            return;
        }
        let failure = match &pod {
            None if s.kind == Shadow => {
                Some(format!("the new version's pod {watched} disappeared"))
            }
            None => {
                // Recreate it: same name, same state (WAL in status.deployment).
                self.ensure_config(&up.to, &target);
                self.actions.push(Action::CreatePod(Box::new(PodPlan {
                    name: watched.clone(),
                    hash: up.to.clone(),
                    spec: target.clone(),
                    from_savepoint: up.savepoint.clone(),
                    standby: false,
                    fresh: false,
                    epoch: 0,
                })));
                None
            }
            Some(p) if p.phase == PodPhase::Failed => Some(format!("pod {watched} failed")),
            Some(p) if p.crash_looping() => Some(format!(
                "pod {watched} is crash-looping ({} restarts{})",
                p.restarts,
                p.waiting_reason
                    .as_deref()
                    .map(|r| format!(", {r}"))
                    .unwrap_or_default()
            )),
            Some(_) => match js.as_ref().map(|j| j.state) {
                Some(RunState::Failed) => Some(format!(
                    "the job failed: {}",
                    js.as_ref()
                        .and_then(|j| j.failure.clone())
                        .unwrap_or_else(|| "no reason".into())
                )),
                _ if js
                    .as_ref()
                    .is_some_and(|j| j.restarts >= CRASH_LOOP_RESTARTS as u64) =>
                {
                    Some(format!(
                        "the job restarted {} times",
                        js.as_ref().map(|j| j.restarts).unwrap_or(0)
                    ))
                }
                _ if self.step_age() > Self::readiness_timeout(&target) => Some(format!(
                    "no checkpoint completed within readinessTimeout {}",
                    target.upgrade.readiness_timeout
                )),
                _ => None,
            },
        };
        let Some(why) = failure else { return };
        self.fail_restore(s, &up, &watched, why);
    }

    fn promote(&mut self, s: Stage, up: &UpgradeStatus, target: &StreamJobSpec, watched: &str) {
        match s.kind {
            Rollback => {
                let failed = up.from.clone().unwrap_or_default();
                self.st.upgrade = Some(UpgradeStatus {
                    from: Some(up.to.clone()),
                    to: failed.clone(),
                    target_spec: None,
                    step: Stage {
                        kind: Rollback,
                        step: RolledBack,
                    }
                    .to_string(),
                    started_at: up.started_at.clone(),
                    step_started_at: Some(self.now.clone()),
                    savepoint: up.savepoint.clone(),
                    message: up.message.clone(),
                });
                self.st.phase = Some(Phase::Running);
                self.note(
                    true,
                    "RolledBack",
                    format!(
                        "spec {failed} was rolled back; running spec {} again",
                        up.to
                    ),
                );
                self.outcome = Some(Outcome::RolledBack);
            }
            _ => {
                if s.kind == Shadow {
                    let old = self.active();
                    if let Some(old) = old {
                        self.delete_pod(&old);
                    }
                    self.st.deployment = Some(DeploymentStatus {
                        spec_hash: up.to.clone(),
                        image: target.image.clone(),
                        parallelism: Some(target.parallelism),
                        started_from: if up.savepoint.is_some() {
                            StartedFrom::Savepoint
                        } else {
                            StartedFrom::Empty
                        },
                        path: up.savepoint.clone(),
                        workload: Some(watched.to_string()),
                        started_at: up.step_started_at.clone(),
                    });
                }
                self.st.last_stable_spec_hash = Some(up.to.clone());
                self.st.last_stable_spec = serde_json::to_string(target).ok();
                self.st.upgrade = None;
                self.st.phase = Some(Phase::Running);
                let reason = if s.kind == Resume {
                    "Resumed"
                } else {
                    "Promoted"
                };
                self.note(
                    false,
                    reason,
                    format!(
                        "spec {} completed its first checkpoint and is promoted",
                        up.to
                    ),
                );
                if s.kind != Resume {
                    self.outcome = Some(Outcome::Promoted);
                }
            }
        }
        self.requeue = Duration::from_secs(5);
    }

    fn fail_restore(&mut self, s: Stage, up: &UpgradeStatus, watched: &str, why: String) {
        let stable = self.last_stable().filter(|(h, _)| *h != up.to);
        match (s.kind, stable) {
            (Rollback, _) | (_, None) => {
                // Nothing to return to (or the rollback itself fails): report; the runtime
                // keeps retrying from its checkpoints.
                self.failed = true;
                self.st.message = Some(format!("{why}; no other version to roll back to"));
                self.degraded = Some(("RestoreFailing".into(), why.clone()));
                self.note(true, "RestoreFailing", why);
                self.requeue = Duration::from_secs(10);
            }
            (kind, Some((hash, spec))) => {
                self.note(
                    true,
                    "RollingBack",
                    format!("spec {} failed: {why}; rolling back to {hash}", up.to),
                );
                let mut rb = self.new_record(
                    Some(up.to.clone()),
                    &hash,
                    &spec,
                    Stage {
                        kind: Rollback,
                        step: Stopped,
                    },
                    format!("rollback: {why}"),
                );
                rb.savepoint = up.savepoint.clone();
                rb.started_at = up.started_at.clone();
                if kind == Shadow {
                    self.cancel_and_delete(watched);
                    let old = self.active().unwrap_or_default();
                    let warm = self
                        .obs
                        .pod(&old)
                        .is_some_and(|p| !p.terminating && p.phase == PodPhase::Running)
                        && self
                            .obs
                            .job(&old)
                            .is_some_and(|j| j.state == RunState::Standby);
                    if warm {
                        // The old pods restore from the same savepoint at once.
                        rb.step = Stage {
                            kind: Rollback,
                            step: Restoring,
                        }
                        .to_string();
                        self.start_warm_deployment(old, up.savepoint.clone());
                    }
                    // Otherwise Rollback/Stopped recreates the old version.
                }
                self.st.upgrade = Some(rb);
                self.st.message = Some(format!("rolling back: {why}"));
                self.requeue = Duration::from_secs(1);
            }
        }
    }

    fn back_to_suspended(&mut self, up: &UpgradeStatus) {
        let mut rec = up.clone();
        rec.to = up.from.clone().unwrap_or_else(|| up.to.clone());
        rec.step = Stage {
            kind: Suspend,
            step: Suspended,
        }
        .to_string();
        rec.step_started_at = Some(self.now.clone());
        self.st.upgrade = Some(rec);
    }

    fn suspended(&mut self, s: Stage) {
        let Some(up) = self.st.upgrade.clone() else {
            return;
        };
        self.st.phase = Some(Phase::Suspended);
        self.ready = Some((false, "Suspended".into(), "the job is suspended".into()));
        // Leftover runtime pods of a suspended job go.
        let leftovers: Vec<String> = self
            .obs
            .pods
            .iter()
            .filter(|p| p.role == PodRole::Runtime && !p.terminating)
            .map(|p| p.name.clone())
            .collect();
        for l in leftovers {
            self.delete_pod(&l);
        }
        if self.spec.state == JobState::Suspended {
            if s.kind == Resume {
                self.back_to_suspended(&up);
            }
            return;
        }
        let (Some(hash), None) = (self.spec_hash.clone(), self.spec_error.clone()) else {
            return;
        };
        let suspended_hash = match s.kind {
            Resume => up.from.clone(),
            _ => Some(up.to.clone()),
        };
        if s.kind == Resume && hash == up.to {
            return; // still blocked
        }
        let spec = self.spec.clone();
        let mut rec = self.new_record(
            suspended_hash.clone(),
            &hash,
            &spec,
            Stage {
                kind: Resume,
                step: Planning,
            },
            "resuming".into(),
        );
        rec.savepoint = up.savepoint.clone();
        self.st.upgrade = Some(rec);
        let from = up.savepoint.clone().or_else(|| self.latest_state_path());
        if suspended_hash.as_deref() == Some(hash.as_str())
            || from.is_none()
            || spec.upgrade.mode == UpgradeMode::Stateless
        {
            self.resume_deploy(&spec);
        } else if let Some(from) = from {
            self.ensure_config(&hash, &spec);
            self.create_plan(&hash, &spec, &from);
            self.note(
                false,
                "Resuming",
                format!("resuming with a changed spec {hash}: checking it against {from}"),
            );
            self.requeue = FAST;
        }
    }

    fn resume_deploy(&mut self, spec: &StreamJobSpec) {
        let Some(up) = self.st.upgrade.clone() else {
            return;
        };
        let from = if spec.upgrade.mode == UpgradeMode::Stateless {
            None
        } else {
            up.savepoint.clone()
        };
        let nonce = self.now.clone();
        self.deploy(&up.to, spec, from.clone(), &nonce);
        self.set_stage(Stage {
            kind: Resume,
            step: Restoring,
        });
        self.note(
            false,
            "Resuming",
            format!(
                "resuming spec {} from {}",
                up.to,
                from.as_deref().unwrap_or("its latest checkpoint")
            ),
        );
    }

    // -- bookkeeping --------------------------------------------------------------------------

    fn retention(&mut self) {
        let Some(policy) = self.spec.savepoints.as_ref().map(|s| s.history.clone()) else {
            return;
        };
        let mut protected: BTreeSet<String> = BTreeSet::new();
        if let Some(p) = self.st.deployment.as_ref().and_then(|d| d.path.clone()) {
            protected.insert(p);
        }
        if let Some(p) = self.st.upgrade.as_ref().and_then(|u| u.savepoint.clone()) {
            protected.insert(p);
        }
        if let Some(l) = &self.st.last_savepoint {
            protected.insert(l.path.clone());
        }
        let max_age = policy
            .max_age
            .as_deref()
            .map(|a| dur("maxAge", a, Duration::MAX));
        let keep_count = policy.max_count.max(1) as usize;
        let n = self.st.savepoint_history.len();
        let mut dispose = Vec::new();
        let mut kept = Vec::new();
        for (i, sp) in self.st.savepoint_history.iter().enumerate() {
            let too_many = n - i > keep_count;
            let too_old = match (max_age, parse_time(sp.time.as_deref())) {
                (Some(age), Some(t)) => (self.obs.now - t).to_std().unwrap_or_default() > age,
                _ => false,
            };
            if (too_many || too_old) && !protected.contains(&sp.path) {
                dispose.push(sp.path.clone());
            } else {
                kept.push(sp.clone());
            }
        }
        if !dispose.is_empty() {
            self.st.savepoint_history = kept;
            self.note(
                false,
                "SavepointsDisposed",
                format!(
                    "disposing {} savepoint(s) beyond the history policy: {}",
                    dispose.len(),
                    dispose.join(", ")
                ),
            );
            self.actions
                .push(Action::DisposeSavepoints { paths: dispose });
        }
    }

    fn gc(&mut self) {
        let stage = self.stage().ok().flatten();
        let mut keep_pods: BTreeSet<String> = BTreeSet::new();
        if let Some(a) = self.active() {
            keep_pods.insert(a);
        }
        if let Some(s) = stage {
            if s.kind == Shadow
                && matches!(s.step, StartingStandby | Savepointing | Stopped | Restoring)
                && let Some(n) = self.standby_name()
            {
                keep_pods.insert(n);
            }
            if s.step == Planning
                && let Some(n) = self.plan_name()
            {
                keep_pods.insert(n);
            }
        }
        for a in &self.actions {
            if let Action::CreatePod(p) = a {
                keep_pods.insert(p.name.clone());
            }
        }
        let mut doomed = Vec::new();
        for p in &self.obs.pods {
            if p.terminating || keep_pods.contains(&p.name) {
                continue;
            }
            let stale = match p.role {
                PodRole::Runtime | PodRole::Plan => true,
                PodRole::Dispose => matches!(p.phase, PodPhase::Succeeded | PodPhase::Failed),
            };
            if stale {
                doomed.push(p.name.clone());
            }
        }
        // Never delete the old pods of an in-place transition before its WAL step says so.
        let protected_old = match stage {
            Some(s)
                if matches!(s.kind, InPlace | Suspend | Rollback)
                    && matches!(s.step, Planning | Savepointing) =>
            {
                self.old
                    .deployment
                    .as_ref()
                    .and_then(|d| d.workload.clone())
            }
            _ => None,
        };
        for d in doomed {
            if Some(&d) == protected_old.as_ref() {
                continue;
            }
            if self.obs.pod(&d).is_some_and(|p| p.role == PodRole::Runtime) {
                // not the deployed version: whatever it is, it must not commit again
                self.cancel_and_delete(&d);
            } else {
                self.delete_pod(&d);
            }
        }
        let mut keep_hashes: BTreeSet<String> = BTreeSet::new();
        keep_hashes.extend(self.obs.pods.iter().filter_map(|p| p.spec_hash.clone()));
        keep_hashes.extend(self.st.deployment.as_ref().map(|d| d.spec_hash.clone()));
        keep_hashes.extend(self.st.last_stable_spec_hash.clone());
        if let Some(u) = &self.st.upgrade {
            keep_hashes.insert(u.to.clone());
            keep_hashes.extend(u.from.clone());
        }
        for a in &self.actions {
            if let Action::EnsureConfig { hash, .. } = a {
                keep_hashes.insert(hash.clone());
            }
        }
        let stale: Vec<String> = self
            .obs
            .config_hashes
            .iter()
            .filter(|h| !keep_hashes.contains(*h))
            .cloned()
            .collect();
        for hash in stale {
            self.actions.push(Action::DeleteConfig { hash });
        }
    }

    fn finish(mut self) -> Decision {
        self.retention();
        self.gc();
        self.assign_epochs();
        if self.degraded.is_none()
            && let Some(a) = self.active()
        {
            {
                let pod = self.obs.pod(&a);
                if let Some(j) = self
                    .obs
                    .job(&a)
                    .filter(|j| matches!(j.state, RunState::Failed | RunState::Restarting))
                {
                    self.degraded = Some((
                        "JobRestarting".into(),
                        format!(
                            "the job in {a} is {:?}: {}",
                            j.state,
                            j.failure.as_deref().unwrap_or("no reason")
                        ),
                    ));
                } else if let Some(p) = pod.filter(|p| p.crash_looping()) {
                    self.degraded = Some((
                        "CrashLooping".into(),
                        format!("pod {a} restarted {} times", p.restarts),
                    ));
                } else if let Some(j) = self.obs.job(&a).filter(|j| !j.problems.is_empty()) {
                    // a source that keeps retrying (brokers down, topic missing) says why
                    let text: Vec<String> = j
                        .problems
                        .iter()
                        .map(|p| format!("source {}: {}", p.uid, p.message))
                        .collect();
                    let mut msg = text.join("; ");
                    if msg.len() > MAX_PROBLEM_MESSAGE {
                        let mut cut = MAX_PROBLEM_MESSAGE;
                        while !msg.is_char_boundary(cut) {
                            cut -= 1;
                        }
                        msg.truncate(cut);
                        msg.push('…');
                    }
                    self.degraded = Some(("SourceProblem".into(), msg));
                }
            }
        }
        // Throughput of the active version (kubectl get sj -o wide).
        if let Some(j) = self.active().and_then(|a| self.obs.job(&a)) {
            self.st.throughput = Some(ThroughputStatus {
                records_in_per_second: (j.records_in_per_second * 10.0).round() / 10.0,
                consumer_lag: j.consumer_lag,
            });
        }
        let stage = self.stage().ok().flatten();
        let in_flight = stage.filter(|s| !s.step.is_terminal());
        // Phase.
        match in_flight.map(|s| s.kind) {
            Some(Rollback) => self.st.phase = Some(Phase::RollingBack),
            Some(InPlace | Shadow | Suspend) => self.st.phase = Some(Phase::Upgrading),
            Some(Resume) => self.st.phase = Some(Phase::Deploying),
            None => {}
        }
        if self.failed {
            self.st.phase = Some(Phase::Failed);
        }
        // Nothing runs: look again rarely (pod and spec changes trigger reconciles anyway).
        if in_flight.is_none()
            && matches!(self.st.phase, Some(Phase::Suspended | Phase::Finished))
            && self.actions.is_empty()
        {
            self.requeue = IDLE;
        }
        let generation = self.obs.generation;
        let now = self.obs.now;
        let active_state = self
            .active()
            .and_then(|a| self.obs.job(&a))
            .map(|j| j.state);
        let conds = &mut self.st.conditions;
        // SpecValid.
        match &self.spec_error {
            Some(e) => set_condition(conds, "SpecValid", false, "InvalidSpec", e, generation, now),
            None => set_condition(
                conds,
                "SpecValid",
                true,
                "Valid",
                "the spec is valid",
                generation,
                now,
            ),
        }
        // Upgrading.
        match in_flight {
            Some(s) => set_condition(
                conds,
                "Upgrading",
                true,
                &format!("{:?}{:?}", s.kind, s.step),
                self.st
                    .upgrade
                    .as_ref()
                    .and_then(|u| u.message.as_deref())
                    .unwrap_or(""),
                generation,
                now,
            ),
            None => set_condition(
                conds,
                "Upgrading",
                false,
                "Idle",
                "no transition in flight",
                generation,
                now,
            ),
        }
        // UpgradeBlocked.
        match stage {
            Some(s) if s.step == Blocked => set_condition(
                conds,
                "UpgradeBlocked",
                true,
                "Incompatible",
                self.st
                    .upgrade
                    .as_ref()
                    .and_then(|u| u.message.as_deref())
                    .unwrap_or(""),
                generation,
                now,
            ),
            _ => set_condition(
                conds,
                "UpgradeBlocked",
                false,
                "NotBlocked",
                "",
                generation,
                now,
            ),
        }
        // RolledBack.
        match stage {
            Some(s) if s.step == RolledBack => set_condition(
                conds,
                "RolledBack",
                true,
                "RolledBack",
                &format!(
                    "spec {} failed and was rolled back: {}",
                    self.st
                        .upgrade
                        .as_ref()
                        .map(|u| u.to.as_str())
                        .unwrap_or(""),
                    self.st
                        .upgrade
                        .as_ref()
                        .and_then(|u| u.message.as_deref())
                        .unwrap_or("")
                ),
                generation,
                now,
            ),
            _ => set_condition(
                conds,
                "RolledBack",
                false,
                "NotRolledBack",
                "",
                generation,
                now,
            ),
        }
        // Degraded.
        match &self.degraded {
            Some((reason, msg)) => {
                set_condition(conds, "Degraded", true, reason, msg, generation, now)
            }
            None => set_condition(conds, "Degraded", false, "Healthy", "", generation, now),
        }
        // Ready.
        // Ready: a version of the job is processing records right now.
        let (ready, reason, msg) = match self.ready.clone() {
            Some(r) => r,
            None => match (self.st.phase, active_state) {
                (Some(Phase::Failed | Phase::Finished | Phase::Suspended), _) | (None, _) => (
                    false,
                    format!("{:?}", self.st.phase.unwrap_or(Phase::Deploying)),
                    self.st.message.clone().unwrap_or_default(),
                ),
                (_, Some(RunState::Running)) => (true, "Running".into(), "the job runs".into()),
                (Some(p), s) => (
                    false,
                    format!("{p:?}"),
                    format!(
                        "the job is {}",
                        s.map(|s| format!("{s:?}").to_lowercase())
                            .unwrap_or_else(|| "not reachable".into())
                    ),
                ),
            },
        };
        set_condition(conds, "Ready", ready, &reason, &msg, generation, now);
        // kstatus (Flux, Argo CD, kstatus-aware tools): Stalled when the job cannot reach its
        // spec without the user, else Reconciling while it moves towards it.
        let upgrade_message = || {
            self.st
                .upgrade
                .as_ref()
                .and_then(|u| u.message.clone())
                .unwrap_or_default()
        };
        let stalled = match (&self.spec_error, stage.map(|s| s.step)) {
            (Some(e), _) => Some(("InvalidSpec".to_string(), e.clone())),
            (None, Some(Blocked)) => Some(("UpgradeBlocked".into(), upgrade_message())),
            (None, Some(RolledBack)) => Some(("RolledBack".into(), upgrade_message())),
            (None, Some(Aborted)) => Some(("UpgradeAborted".into(), upgrade_message())),
            _ if self.st.phase == Some(Phase::Failed) => {
                Some(("Failed".into(), self.st.message.clone().unwrap_or_default()))
            }
            _ => None,
        };
        match &stalled {
            Some((reason, msg)) => {
                set_condition(conds, "Stalled", true, reason, msg, generation, now)
            }
            None => set_condition(conds, "Stalled", false, "NotStalled", "", generation, now),
        }
        let settled = matches!(
            self.st.phase,
            Some(Phase::Running | Phase::Suspended | Phase::Finished)
        ) && (ready || self.st.phase != Some(Phase::Running));
        match (&stalled, in_flight) {
            (None, Some(s)) => set_condition(
                conds,
                "Reconciling",
                true,
                &format!("{:?}{:?}", s.kind, s.step),
                &upgrade_message(),
                generation,
                now,
            ),
            (None, None) if !settled => {
                set_condition(conds, "Reconciling", true, &reason, &msg, generation, now)
            }
            _ => set_condition(conds, "Reconciling", false, "Settled", "", generation, now),
        }
        if self.st.message.is_none()
            && let Some(s) = stage.filter(|s| s.step.is_terminal() && s.step != Suspended)
        {
            self.st.message = self
                .st
                .upgrade
                .as_ref()
                .and_then(|u| u.message.as_ref())
                .map(|m| format!("{s}: {m}"));
        }
        if self.st.message.is_none() {
            self.st.message = self
                .degraded
                .as_ref()
                .map(|(_, m)| m.clone())
                .or_else(|| self.spec_error.clone());
        }
        // A generic event for every stage change.
        let before = self
            .old
            .upgrade
            .as_ref()
            .and_then(|u| u.step.parse::<Stage>().ok());
        if before != stage {
            let from = before
                .map(|s| s.to_string())
                .unwrap_or_else(|| "Idle".into());
            let to = stage
                .map(|s| s.to_string())
                .unwrap_or_else(|| "Idle".into());
            self.events.push(Note {
                warning: false,
                reason: "Transition".into(),
                message: format!("{from} -> {to}"),
            });
        }
        Decision {
            actions: self.actions,
            status: self.st,
            events: self.events,
            requeue_after: self.requeue,
            outcome: self.outcome,
            savepoints_completed: self.sp_done,
        }
    }
}

/// Sets a condition, keeping `lastTransitionTime` while its status does not change.
pub fn set_condition(
    conds: &mut Vec<Condition>,
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: DateTime<Utc>,
) {
    let status = if ok { "True" } else { "False" };
    let now = Time(
        k8s_openapi::jiff::Timestamp::from_millisecond(now.timestamp_millis())
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    );
    let reason: String = reason
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    let reason = if reason.is_empty() {
        "Unknown".to_string()
    } else {
        reason
    };
    let message: String = message.chars().take(32_000).collect();
    match conds.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = now;
            }
            c.status = status.into();
            c.reason = reason;
            c.message = message;
            c.observed_generation = generation.or(c.observed_generation);
        }
        None => conds.push(Condition {
            type_: type_.into(),
            status: status.into(),
            reason,
            message,
            observed_generation: generation,
            last_transition_time: now,
        }),
    }
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
