//! The observed world: what the controller saw of pods, runtimes and savepoints, and how
//! plan and disposal pods report.

use super::*;
use streamjob_contract::plan::PlanReport;
/// What a runtime reports, as the contract crate declares it (an engine adapter maps its own
/// engine's answers onto these).
pub use streamjob_contract::requests::SavepointProgress as SavepointState;
pub use streamjob_contract::status::{JobStatus, RestoredFrom, RunState, Snapshot, SourceProblem};

const EXIT_OK: i32 = exit::OK as i32;
const EXIT_INVALID: i32 = exit::INVALID as i32;
const EXIT_INCOMPATIBLE: i32 = exit::INCOMPATIBLE as i32;
pub(super) const EXIT_SUPERSEDED: i32 = exit::SUPERSEDED as i32;

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
    /// When its deletion is due, while it is terminating: `metadata.deletionTimestamp`, the
    /// request plus the grace period, on the API server's clock (as `Observed::now`).
    pub deletion_due: Option<DateTime<Utc>>,
    /// `metadata.creationTimestamp`, on the API server's clock (as `Observed::now`).
    pub created: Option<DateTime<Utc>>,
    pub restarts: i32,
    /// Waiting reason of the container, e.g. CrashLoopBackOff, ImagePullBackOff.
    pub waiting_reason: Option<String>,
    /// Exit code of the terminated container (pod phase Succeeded/Failed).
    pub exit_code: Option<i32>,
    /// Exit code of the container's last termination, also while the kubelet restarts it.
    pub last_exit_code: Option<i32>,
    /// Termination message (or the log tail the controller could read instead).
    pub message: Option<String>,
    pub ip: Option<String>,
    /// Its container was killed from outside and the kubelet holds its restart back for long
    /// (`engine::killed_and_held_back`): replacing the pod is quicker.
    pub killed_and_held_back: bool,
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
            deletion_due: None,
            created: None,
            restarts: 0,
            waiting_reason: None,
            exit_code: None,
            last_exit_code: None,
            message: None,
            ip: None,
            killed_and_held_back: false,
        }
    }

    /// Its container last exited fenced (superseded) and its job does not run now: it restarted
    /// under the epoch of its arguments, older than the one a warm start gave it, and will
    /// crash-loop for good unless the pod is replaced.
    pub fn fenced_by_own_epoch(&self, job: Option<&JobStatus>) -> bool {
        self.last_exit_code == Some(EXIT_SUPERSEDED)
            && job.is_none_or(|j| j.state != RunState::Running)
    }

    /// Restarts this often (or a back-off reason) mean the version does not run.
    pub fn crash_looping(&self) -> bool {
        let reason = self.waiting_reason.as_deref();
        self.restarts >= CRASH_LOOP_RESTARTS
            || (reason == Some("CrashLoopBackOff") && self.restarts >= 1)
            || reason.is_some_and(|r| CANNOT_START.contains(&r))
    }
}

/// Container waiting reasons that mean the container will not start without someone changing
/// something (the image, a Secret, a ConfigMap). `ErrImageNeverPull` is a real kubelet's answer
/// under `imagePullPolicy: Never` when the image is absent.
pub const CANNOT_START: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
];

/// Container restarts after which a version counts as crash-looping.
pub const CRASH_LOOP_RESTARTS: i32 = 3;
/// Longest Degraded message built from source problems (one tenant cannot bloat status).
pub(super) const MAX_PROBLEM_MESSAGE: usize = 1024;

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
    /// Runtime (coordinator) pods as the worker planning sees them (`spec.workers`).
    pub coordinators: Vec<CoordinatorObs>,
    /// Worker pods.
    pub workers: Vec<WorkerObs>,
    /// Why the operator's own settings refuse the spec (`--pod-template-policy`), if they do:
    /// reported and handled like an invalid spec.
    pub refused_by_settings: Option<String>,
    /// The engine fences its runs by epoch (our runtime): a replaced run, or one still running
    /// on a node that stopped answering, commits nothing more. Only then does the decision
    /// replace a killed run's pod at once and force-delete pods stuck on a lost node; otherwise
    /// (a Flink cluster) they are left to the kubelet, and to a human. Set by the adapter.
    pub runs_fenced: bool,
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
            coordinators: Vec::new(),
            workers: Vec::new(),
            refused_by_settings: None,
            runs_fenced: false,
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
    /// Restorable; what the restore drops under `allowNonRestoredState`, one line each.
    Compatible(Vec<String>),
    Incompatible(String),
    /// The new spec itself is wrong (exit 2: manifest, unsupported, a rewind): retrying cannot help.
    Error(String),
    /// The plan could not be made (exit 1 or killed: a store error, a checkpoint that retention
    /// removed meanwhile): made again against the latest state until `readinessTimeout`.
    Transient(String),
}

/// Reads a plan pod: exit 0 compatible, 3 incompatible (reasons per uid from the JSON report in
/// its termination message or log tail), anything else an error with whatever it said.
pub fn plan_result(pod: &PodObs) -> PlanResult {
    // an image that cannot be pulled (or a container that cannot be made) never runs the check:
    // say so now, naming what the kubelet said, instead of waiting out readinessTimeout
    if let Some(reason) = pod
        .waiting_reason
        .as_deref()
        .filter(|r| CANNOT_START.contains(r))
    {
        return PlanResult::Error(format!(
            "plan pod {} cannot start the new version: {reason}{}",
            pod.name,
            pod.message
                .as_deref()
                .map(|m| format!(" ({})", short(m)))
                .unwrap_or_default()
        ));
    }
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
        EXIT_OK => PlanResult::Compatible(
            pod.message
                .as_deref()
                .and_then(PlanReport::find_in)
                .map(|r| r.dropped())
                .unwrap_or_default(),
        ),
        EXIT_INCOMPATIBLE => {
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
            if other == EXIT_INVALID {
                PlanResult::Error(why)
            } else {
                PlanResult::Transient(why)
            }
        }
    }
}

/// What an incompatible plan report says, one `uid X: status (reason)` per refusal; `None` when
/// `text` holds no report.
pub(super) fn parse_plan_report(text: &str) -> Option<String> {
    // The message may be a log tail: the last line that is a report (it names its verdict).
    let report = PlanReport::find_in(text)?;
    let mut bad: Vec<String> = report.reasons.clone();
    bad.extend(
        report
            .operators
            .iter()
            .filter(|o| o.status.refuses())
            .map(|o| {
                let reason = if o.reason.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", o.reason)
                };
                format!("uid {}: {}{reason}", o.uid, o.status.as_str())
            }),
    );
    if report.omitted > 0 {
        bad.push(format!(
            "{} more rows left out of the plan pod's report",
            report.omitted
        ));
    }
    if bad.is_empty() {
        Some("the plan reported the spec incompatible without naming an operator".into())
    } else {
        Some(bad.join("; "))
    }
}

pub(super) fn short(s: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_container_that_cannot_start_counts_as_crash_looping_at_once() {
        for reason in CANNOT_START {
            let mut p = PodObs::new("p", PodRole::Runtime, PodPhase::Pending);
            p.waiting_reason = Some((*reason).to_string());
            assert!(p.crash_looping(), "{reason}");
        }
        let mut p = PodObs::new("p", PodRole::Runtime, PodPhase::Pending);
        p.waiting_reason = Some("ContainerCreating".into());
        assert!(!p.crash_looping(), "still starting");
    }

    #[test]
    fn a_plan_pod_whose_image_cannot_be_pulled_fails_the_plan_naming_the_image() {
        let mut p = PodObs::new("j-plan-1", PodRole::Plan, PodPhase::Pending);
        p.waiting_reason = Some("ImagePullBackOff".into());
        p.message = Some("Back-off pulling image \"r/x:missing\"".into());
        match plan_result(&p) {
            PlanResult::Error(why) => {
                assert!(
                    why.contains("ImagePullBackOff") && why.contains("r/x:missing"),
                    "{why}"
                )
            }
            other => panic!("{other:?}"),
        }
        p.waiting_reason = Some("ContainerCreating".into());
        assert!(matches!(plan_result(&p), PlanResult::Running));
    }
}
