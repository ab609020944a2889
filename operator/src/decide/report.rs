//! The report: phase, requeue, message and conditions, derived from what the steps recorded
//! (the facts in `facts`, the problem in `degraded`, `ready`, the stage the decision ends in).

use super::*;

/// A condition as the report computes it: type, status, reason, message.
type Row = (&'static str, bool, String, String);

impl Ctx<'_> {
    pub(super) fn finish(mut self) -> Decision {
        self.retention();
        self.stuck_pods();
        self.pending_pods();
        self.gc();
        self.workers();
        self.assign_epochs();
        if self.degraded.is_none() {
            self.degraded = self.trouble_in_the_job();
        }
        // the scale subresource's selector: every pod that runs the job's subtasks
        self.st.selector = Some(format!(
            "{LABEL_JOB}={},{LABEL_ROLE} in (runtime,{})",
            job_label(self.job),
            ROLE_WORKER
        ));
        // Throughput of the active version (kubectl get sj -o wide).
        if let Some(j) = self.active().and_then(|a| self.obs.job(&a)) {
            self.st.throughput = Some(ThroughputStatus {
                records_in_per_second: (j.records_in_per_second * 10.0).round() / 10.0,
                consumer_lag: j.consumer_lag,
            });
        }
        let stage = self.stage();
        let in_flight = stage.filter(|s| !s.step.is_terminal());
        // Phase and requeue, from the facts (see `facts`).
        self.st.phase = facts::phase(
            self.st.phase,
            in_flight.map(|s| s.kind),
            self.deployed,
            self.failed,
        );
        let ending = facts::Ending {
            stage,
            moved: self.moved.is_some(),
            phase: self.st.phase,
            failed: self.failed,
            no_actions: self.actions.is_empty(),
        };
        let requeue = facts::requeue(&ending, self.asked);
        let (generation, now) = (self.obs.generation, self.obs.now);
        for (type_, ok, reason, message) in self.conditions(stage) {
            set_condition(
                &mut self.st.conditions,
                type_,
                ok,
                &reason,
                &message,
                generation,
                now,
            );
        }
        self.st.message = self.said.take().or_else(|| self.message(stage));
        self.transition_event(stage);
        Decision {
            actions: self.actions,
            status: self.st,
            events: self.events,
            requeue_after: requeue,
            outcome: self.outcome,
            savepoints_completed: self.sp_done,
        }
    }

    /// What is wrong with the active version's job while its pod looks fine (reason, message).
    fn trouble_in_the_job(&self) -> Option<(String, String)> {
        let a = self.active()?;
        let job = self.obs.job(&a);
        if let Some(j) = job.filter(|j| matches!(j.state, RunState::Failed | RunState::Restarting))
        {
            return Some((
                "JobRestarting".into(),
                format!(
                    "the job in {a} is {:?}: {}",
                    j.state,
                    j.failure.as_deref().unwrap_or("no reason")
                ),
            ));
        }
        if let Some(p) = self.obs.pod(&a).filter(|p| p.crash_looping()) {
            return Some((
                "CrashLooping".into(),
                format!("pod {a} restarted {} times", p.restarts),
            ));
        }
        // a source that keeps retrying (brokers down, topic missing) says why
        let j = job.filter(|j| !j.problems.is_empty())?;
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
        Some(("SourceProblem".into(), msg))
    }

    /// Every condition the report keeps, computed from the phase, the stage and the facts.
    fn conditions(&self, stage: Option<Stage>) -> [Row; 8] {
        let in_flight = stage.filter(|s| !s.step.is_terminal());
        let step = stage.map(|s| s.step);
        let phase = self.st.phase;
        let upgrade_message = self
            .st
            .upgrade
            .as_ref()
            .and_then(|u| u.message.clone())
            .unwrap_or_default();
        let spec_valid: Row = match &self.spec_error {
            Some(e) => ("SpecValid", false, "InvalidSpec".into(), e.clone()),
            None => (
                "SpecValid",
                true,
                "Valid".into(),
                "the spec is valid".into(),
            ),
        };
        let upgrading: Row = match in_flight {
            Some(s) => (
                "Upgrading",
                true,
                format!("{:?}{:?}", s.kind, s.step),
                upgrade_message.clone(),
            ),
            None => (
                "Upgrading",
                false,
                "Idle".into(),
                "no transition in flight".into(),
            ),
        };
        let blocked: Row = if step == Some(Blocked) {
            (
                "UpgradeBlocked",
                true,
                "Incompatible".into(),
                upgrade_message.clone(),
            )
        } else {
            ("UpgradeBlocked", false, "NotBlocked".into(), String::new())
        };
        let rolled_back: Row = if step == Some(RolledBack) {
            let to = self
                .st
                .upgrade
                .as_ref()
                .map(|u| u.to.as_str())
                .unwrap_or("");
            let msg = format!("spec {to} failed and was rolled back: {upgrade_message}");
            ("RolledBack", true, "RolledBack".into(), msg)
        } else {
            ("RolledBack", false, "NotRolledBack".into(), String::new())
        };
        let degraded: Row = match &self.degraded {
            Some((reason, msg)) => ("Degraded", true, reason.clone(), msg.clone()),
            None => ("Degraded", false, "Healthy".into(), String::new()),
        };
        // Ready: a version of the job is processing records right now.
        let active_state = self
            .active()
            .and_then(|a| self.obs.job(&a))
            .map(|j| j.state);
        let (ready, reason, msg) = match self.ready.clone() {
            Some(r) => r,
            None => match (phase, active_state) {
                (Some(Phase::Failed | Phase::Finished | Phase::Suspended), _) | (None, _) => (
                    false,
                    format!("{:?}", phase.unwrap_or(Phase::Deploying)),
                    self.said.clone().unwrap_or_default(),
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
        // kstatus (Flux, Argo CD, kstatus-aware tools): Stalled when the job cannot reach its
        // spec without the user, else Reconciling while it moves towards it.
        let stalled = match (&self.spec_error, step) {
            (Some(e), _) => Some(("InvalidSpec".to_string(), e.clone())),
            (None, Some(Blocked)) => Some(("UpgradeBlocked".into(), upgrade_message.clone())),
            (None, Some(RolledBack)) => Some(("RolledBack".into(), upgrade_message.clone())),
            (None, Some(Aborted)) => Some(("UpgradeAborted".into(), upgrade_message.clone())),
            _ if phase == Some(Phase::Failed) => {
                Some(("Failed".into(), self.said.clone().unwrap_or_default()))
            }
            _ => None,
        };
        let settled = matches!(
            phase,
            Some(Phase::Running | Phase::Suspended | Phase::Finished)
        ) && (ready || phase != Some(Phase::Running));
        let reconciling: Row = match (&stalled, in_flight) {
            (None, Some(s)) => (
                "Reconciling",
                true,
                format!("{:?}{:?}", s.kind, s.step),
                upgrade_message,
            ),
            (None, None) if !settled => ("Reconciling", true, reason.clone(), msg.clone()),
            _ => ("Reconciling", false, "Settled".into(), String::new()),
        };
        let stalled: Row = match stalled {
            Some((reason, msg)) => ("Stalled", true, reason, msg),
            None => ("Stalled", false, "NotStalled".into(), String::new()),
        };
        [
            spec_valid,
            upgrading,
            blocked,
            rolled_back,
            degraded,
            ("Ready", ready, reason, msg),
            stalled,
            reconciling,
        ]
    }

    /// The message when no step gave one: how a finished transition ended, else the problem.
    fn message(&self, stage: Option<Stage>) -> Option<String> {
        let ended = stage.filter(|s| s.step.is_terminal() && s.step != Suspended);
        ended
            .and_then(|s| {
                let m = self.st.upgrade.as_ref()?.message.as_ref()?;
                Some(format!("{s}: {m}"))
            })
            .or_else(|| self.degraded.as_ref().map(|(_, m)| m.clone()))
            .or_else(|| self.spec_error.clone())
    }

    /// A generic event for every stage change.
    fn transition_event(&mut self, stage: Option<Stage>) {
        let before = self.old.upgrade.as_ref().map(|u| u.step);
        if before != stage {
            let show = |s: Option<Stage>| s.map_or_else(|| "Idle".into(), |s| s.to_string());
            self.note(
                false,
                "Transition",
                format!("{} -> {}", show(before), show(stage)),
            );
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
