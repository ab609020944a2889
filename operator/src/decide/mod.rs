//! Observe → **decide** → act: the decision as a pure function of (spec, status, observed world).
//!
//! `status.upgrade` is the write-ahead log of a transition. Its `step` names a [`Stage`]
//! (`Kind/Step`, for example `InPlace/Savepointing`); the legal moves between stages are declared
//! in [`TRANSITIONS`] and every decision is checked against them in the tests. A decision never
//! asks to delete a pod whose state is not yet recorded in the *persisted* status: the savepoint
//! is written into `status.upgrade.savepoint` by one decision (step `Stopped`) and the old pods
//! are deleted by the next one, so an operator restarted at any moment resumes the transition.
//!
//! The module is split by concern: [`machine`] (stages and declared transitions), [`world`] (the
//! observed world), [`actions`] (what a decision asks for), one file per step of a transition
//! (`steady`, `planning`, `standby`, `savepointing`, `stopped`, `restoring`, `suspend`),
//! `housekeeping` (retention, GC), `facts` (what steps record, and the phase and requeue rules),
//! `report` (phase, requeue, message, conditions derived from the facts) and `guard`
//! (undeclared moves refused at run time). This file
//! holds the entry point, the context every step works on, and the helpers they share.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, SubsecRound, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde::Deserialize;
use streamjob_crds::hash::deployment_hash;
use streamjob_crds::units::parse_duration;
use streamjob_crds::v1alpha1::{
    CheckpointInfo, DeploymentStatus, JobState, PendingSavepoint, Phase, SavepointInfo,
    StartedFrom, StreamJobSpec, StreamJobStatus, ThroughputStatus, UpgradeMode, UpgradeStatus,
    UpgradeStrategy,
};

use crate::objects::names::{job_label, plan_pod_name, pod_name};
use crate::objects::{ANNOTATION_RECOVERED_SAVEPOINT, LABEL_JOB, LABEL_ROLE, PodRole, ROLE_WORKER};
use streamjob_contract::process::exit;

mod actions;
mod facts;
mod guard;
mod health;
mod housekeeping;
mod machine;
mod planning;
mod report;
mod restoring;
mod savepointing;
mod savepoints;
mod standby;
mod steady;
mod stopped;
mod suspend;
mod workers;
mod world;

use Kind::{InPlace, Resume, Rollback, Shadow, Suspend};
use Step::{
    Aborted, Blocked, Planning, Restoring, RolledBack, Savepointing, StartingStandby, Stopped,
    Suspended,
};
pub use actions::*;
use facts::Deployed;
use guard::{guard_transition, refuse, show_stage};
use health::Health;
pub use machine::*;
pub use report::set_condition;
use savepoints::SpPoll;
#[cfg(test)]
pub(crate) use workers::tests::coord as test_coordinator;
pub use workers::{CoordinatorObs, WorkerAction, WorkerObs, plan_workers};
pub use world::*;

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
    /// `st.upgrade.step`, kept in step by `move_to`, `move_to_idle` and `begin`.
    stage: Option<Stage>,
    /// `st.upgrade.targetSpec`, read once (kept in step with the record by `begin` and
    /// `move_to_idle`).
    target: Option<StreamJobSpec>,
    /// `st.lastStableSpecHash` and `st.lastStableSpec`, read once (written by `set_last_stable`).
    last_stable: Option<(String, StreamJobSpec)>,
    /// `observed.now` to the second, as status records times.
    now: DateTime<Utc>,
    actions: Vec<Action>,
    events: Vec<Note>,
    outcome: Option<Outcome>,
    sp_done: Vec<(String, f64)>,
    /// What the step says about the job, for `status.message` (see `facts`).
    said: Option<String>,
    /// The soonest look-again a fact asked for (see `facts`).
    asked: Option<Duration>,
    /// What the decision saw of the deployed version, for the phase (see `facts`).
    deployed: Option<Deployed>,
    degraded: Option<(String, String)>,
    ready: Option<(bool, String, String)>,
    failed: bool,
    /// The last stage written through [`Ctx::move_to`] and its siblings (`None`: none yet).
    moved: Option<Option<Stage>>,
    /// An undeclared move that was asked for and not made: the decision is refused.
    illegal: Option<String>,
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
        Ok(()) => match (&observed.refused_by_settings, deployment_hash(spec)) {
            (Some(why), _) => (None, Some(why.clone())),
            (None, Ok(h)) => (Some(h), None),
            (None, Err(e)) => (None, Some(e.to_string())),
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
        stage: stored_stage(status),
        target: status
            .upgrade
            .as_ref()
            .and_then(|u| spec_from_json(u.target_spec.as_deref())),
        last_stable: status
            .last_stable_spec_hash
            .clone()
            .and_then(|h| Some((h, spec_from_json(status.last_stable_spec.as_deref())?))),
        now: observed.now.trunc_subsecs(0),
        actions: Vec::new(),
        events: Vec::new(),
        outcome: None,
        sp_done: Vec::new(),
        said: None,
        asked: None,
        deployed: None,
        degraded: None,
        ready: None,
        failed: false,
        moved: None,
        illegal: None,
    };
    c.st.observed_generation = observed.generation.or(status.observed_generation);
    c.st.message = None;
    c.run();
    // Every change of stage went through move_to: the stage the record now holds is the last
    // one written there, or the stored one when nothing moved.
    let bypassed = c.moved.unwrap_or(stored_stage(status)) != stored_stage(&c.st);
    let illegal = c.illegal.take();
    let decision = c.finish();
    if let Some(moves) = illegal {
        return refuse(
            status,
            &format!("refused an undeclared upgrade transition {moves}"),
            observed,
        );
    }
    if bypassed {
        return refuse(
            status,
            "the upgrade stage was written without Ctx::move_to",
            observed,
        );
    }
    guard_transition(status, decision, observed)
}

impl Ctx<'_> {
    fn stage(&self) -> Option<Stage> {
        self.stage
    }

    /// Moves the transition in flight to `stage` (same record). With [`Ctx::move_to_idle`] and
    /// [`Ctx::begin`] the only writers of the upgrade stage: each checks the move against
    /// [`TRANSITIONS`] and makes only declared ones.
    fn move_to(&mut self, stage: Stage) {
        if self.allowed(Some(stage)) && self.st.upgrade.is_some() {
            if let Some(u) = self.st.upgrade.as_mut() {
                u.step = stage;
                u.step_started_at = Some(self.now);
            }
            self.stage = Some(stage);
            self.moved = Some(Some(stage));
        }
    }

    /// Ends the transition record (done, dropped plan, cleared terminal record).
    fn move_to_idle(&mut self) {
        if self.allowed(None) {
            self.st.upgrade = None;
            self.target = None;
            self.stage = None;
            self.moved = Some(None);
        }
    }

    /// Starts a new transition record, in the stage its `step` names.
    fn begin(&mut self, record: UpgradeStatus) {
        let stage = record.step;
        if self.allowed(Some(stage)) {
            self.target = spec_from_json(record.target_spec.as_deref());
            self.st.upgrade = Some(record);
            self.stage = Some(stage);
            self.moved = Some(Some(stage));
        }
    }

    /// Whether the machine declares the move from the current stage to `to`; an undeclared one is
    /// remembered (the decision is then refused).
    fn allowed(&mut self, to: Option<Stage>) -> bool {
        // an unreadable stored stage is replaced like no record at all
        let from = self.stage();
        if legal(from, to) {
            return true;
        }
        self.illegal
            .get_or_insert(format!("{} -> {}", show_stage(from), show_stage(to)));
        false
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
            .map(|u| u.step_started_at.unwrap_or(u.started_at));
        since
            .map(|t| (self.obs.now - t).to_std().unwrap_or_default())
            .unwrap_or_default()
    }

    /// The spec the transition in flight moves to.
    fn upgrade_spec(&self) -> Option<StreamJobSpec> {
        self.target.clone()
    }

    /// The last spec that completed a checkpoint of its own (what a rollback returns to).
    fn last_stable(&self) -> Option<(String, StreamJobSpec)> {
        self.last_stable.clone()
    }

    fn set_last_stable(&mut self, hash: &str, spec: &StreamJobSpec) {
        self.st.last_stable_spec_hash = Some(hash.to_string());
        self.st.last_stable_spec = serde_json::to_string(spec).ok();
        self.last_stable = Some((hash.to_string(), spec.clone()));
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
        Some(pod_name(self.job, &u.to, &rfc3339(u.started_at)))
    }

    fn plan_name(&self) -> Option<String> {
        let u = self.st.upgrade.as_ref()?;
        Some(plan_pod_name(self.job, &u.to, &rfc3339(u.started_at)))
    }

    fn ensure_config(&mut self, hash: &str, spec: &StreamJobSpec) {
        let a = Action::PrepareVersion {
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
            run: name.to_string(),
        };
        if self.actions.contains(&a) {
            return;
        }
        // before the deletion, if one was already decided
        let at = self
            .actions
            .iter()
            .position(|b| matches!(b, Action::Remove { name: n } if n == name))
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
                Action::Deploy(p) => &mut p.epoch,
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
                .retain(|a| !matches!(a, Action::Deploy(_) | Action::Start { .. }));
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
        let a = Action::Remove {
            name: name.to_string(),
        };
        if !self.actions.contains(&a) {
            self.actions.push(a);
        }
    }

    /// Creates a runtime pod and records it as the deployment (before it exists: WAL).
    /// (`nonce`: the time that names the run's pod, with the version's hash)
    fn deploy(
        &mut self,
        hash: &str,
        spec: &StreamJobSpec,
        from: Option<String>,
        nonce: DateTime<Utc>,
    ) {
        let name = pod_name(self.job, hash, &rfc3339(nonce));
        self.ensure_config(hash, spec);
        self.actions.push(Action::Deploy(Box::new(RunPlan {
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
            started_at: Some(self.now),
            // what the pre-check of this upgrade found it drops (none for a rollback or resume)
            dropped_state: self
                .st
                .upgrade
                .as_ref()
                .map(|u| u.dropped_state.clone())
                .unwrap_or_default(),
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
            d.started_at = Some(self.now);
        }
        self.actions.push(Action::Start {
            run: pod,
            from_savepoint: from,
            epoch: 0,
        });
    }

    // -- the machine --------------------------------------------------------------------------

    fn run(&mut self) {
        self.observe_active();
        let stage = self.stage();
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
                    self.say(format!("unexpected stage {s}; clear status.upgrade"));
                }
            },
        }
    }
}

/// The stage a status records (`status.upgrade.step`); `None`: no transition.
fn stored_stage(status: &StreamJobStatus) -> Option<Stage> {
    status.upgrade.as_ref().map(|u| u.step)
}

/// A spec as status records it (JSON); unreadable reads as none.
fn spec_from_json(json: Option<&str>) -> Option<StreamJobSpec> {
    serde_json::from_str(json?).ok()
}

#[cfg(test)]
pub(crate) mod tests;
