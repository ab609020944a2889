//! The deployed run kept running: what the steady state does, and what every step before the
//! old version is stopped does too (planning, the warm standby, the savepoint).

use super::*;

/// How the deployed run is doing, after [`Ctx::keep_deployed_running`] acted on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Health {
    /// Its job runs.
    Running,
    /// Its job (or its pod) finished.
    Finished,
    /// Anything else: being replaced, recreated, restarting, starting or unreachable.
    NotRunning,
}

impl Ctx<'_> {
    /// Until an upgrade stops it, the old version is kept running as in a steady state: planning,
    /// the warm standby and a savepoint step waiting for the job to run call this.
    pub(super) fn keep_old_version_running(&mut self) {
        if let Some(dep) = self.st.deployment.clone() {
            self.keep_deployed_running(&dep);
        }
    }

    /// Replace or recreate the deployed run's pod when it cannot get its job running by itself
    /// (missing, failed, killed and held back, fenced, restarted into standby, job failed).
    /// Nothing else would: before the old version is stopped, an upgrade waits for its job to
    /// run to take the savepoint, and a run left in standby never runs again (found by the soak:
    /// a killed promoted shadow restarted into standby during an upgrade's savepoint step, and
    /// the output stalled until the savepoint timeout aborted the upgrade).
    pub(super) fn keep_deployed_running(&mut self, dep: &DeploymentStatus) -> Health {
        let active = dep.workload.clone().unwrap_or_default();
        let pod = self.obs.pod(&active).cloned();
        let js = self.obs.job(&active).cloned();
        let mut health = Health::NotRunning;
        match &pod {
            None => {
                if self.st.phase != Some(Phase::Finished) {
                    // The job's own checkpoints are newer than what it started from: resume
                    // from the latest one; otherwise from its savepoint again.
                    let checkpointed_since = self
                        .st
                        .last_checkpoint
                        .as_ref()
                        .and_then(|c| c.time)
                        .zip(dep.started_at)
                        .is_some_and(|(ck, start)| ck > start);
                    let from = match dep.started_from {
                        StartedFrom::Savepoint if !checkpointed_since => dep.path.clone(),
                        _ => None,
                    };
                    let spec = self.deployed_spec().unwrap_or_else(|| self.spec.clone());
                    self.ensure_config(&dep.spec_hash, &spec);
                    self.actions.push(Action::Deploy(Box::new(RunPlan {
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
                    self.look_again_within(FAST);
                }
            }
            Some(p) if p.terminating => {
                self.degraded = Some((
                    "PodTerminating".into(),
                    format!("runtime pod {active} is terminating; it will be recreated"),
                ));
                self.look_again_within(FAST);
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
                self.look_again_within(FAST);
            }
            // Killed from outside, and the kubelet's back-off (up to 5 min) would hold the job's
            // output for longer than replacing the pod takes. Only for an engine that fences its
            // runs (our runtime): a Flink JobManager's pod is left to the kubelet and Flink's own
            // recovery.
            Some(p) if p.killed_and_held_back && self.obs.runs_fenced => {
                self.delete_pod(&active);
                let msg = format!(
                    "runtime pod {active} was killed and the kubelet holds its restart back; replacing it (it resumes from the latest checkpoint at once)"
                );
                self.note(true, "PodKilled", msg.clone());
                self.degraded = Some(("PodKilled".into(), msg));
                self.look_again_within(FAST);
            }
            // Its container restarted with the epoch of the pod's arguments, older than the one a
            // warm start gave it (the old version of a rolled-back Shadow upgrade): it is fenced
            // for good and would crash-loop. Replace the pod: the new one resumes from the
            // latest checkpoint under a new epoch (found by the soak).
            Some(p) if p.fenced_by_own_epoch(js.as_ref()) => {
                self.delete_pod(&active);
                let msg = format!(
                    "runtime pod {active} restarted under an older epoch and is fenced; replacing it (it resumes from the latest checkpoint)"
                );
                self.note(true, "PodFenced", msg.clone());
                self.degraded = Some(("PodFenced".into(), msg));
                self.look_again_within(FAST);
            }
            Some(p) if p.phase == PodPhase::Succeeded => health = Health::Finished,
            Some(p) => {
                if p.crash_looping() {
                    self.degraded = Some((
                        "CrashLooping".into(),
                        format!(
                            "runtime pod {active} restarted {} times{}",
                            p.restarts,
                            p.waiting_reason
                                .as_deref()
                                .map(|r| match p.message.as_deref() {
                                    // a pull failure's message names the image
                                    Some(m) if CANNOT_START.contains(&r) => {
                                        format!(" ({r}: {})", super::world::short(m))
                                    }
                                    _ => format!(" ({r})"),
                                })
                                .unwrap_or_default()
                        ),
                    ));
                }
                match &js {
                    Some(js) => match js.state {
                        RunState::Running => health = Health::Running,
                        RunState::Finished => health = Health::Finished,
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
                            self.look_again_within(FAST);
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
        health
    }
}
