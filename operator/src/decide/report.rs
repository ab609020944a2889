//! The report: phase, requeue, message and conditions derived from what the steps recorded.

use super::*;

impl Ctx<'_> {
    pub(super) fn finish(mut self) -> Decision {
        self.retention();
        self.stuck_pods();
        self.pending_pods();
        self.gc();
        self.workers();
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
