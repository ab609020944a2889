//! `Restoring`: the new version must complete a checkpoint in time; promotion or rollback.

use super::*;

impl Ctx<'_> {
    pub(super) fn restoring(&mut self, s: Stage) {
        let Some(up) = self.st.upgrade.clone() else {
            return;
        };
        let target = self.upgrade_spec().unwrap_or_else(|| self.spec.clone());
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
        // A pod that waits in standby is started: the old, still-warm pod of a shadow rollback,
        // and a warm-started pod whose container restarted (it comes back with `--standby` and
        // would wait for good).
        if matches!(s.kind, Rollback | Shadow)
            && js.as_ref().is_some_and(|j| j.state == RunState::Standby)
            && pod.as_ref().is_some_and(|p| !p.terminating)
        {
            self.start_warm_deployment(watched.clone(), up.savepoint.clone());
            return;
        }
        // A warm-started pod (the old version of a rolled-back Shadow upgrade) whose container
        // restarted comes back under the epoch of its arguments, older than the one its start
        // gave it: fenced by its own run for good, it would crash-loop and fail the rollback
        // (found by the soak, seed 20261204). Replace it; the new pod restores from the
        // upgrade's savepoint and resumes from the latest checkpoint after it.
        if let Some(p) = pod
            .as_ref()
            .filter(|p| !p.terminating && p.fenced_by_own_epoch(js.as_ref()))
            && s.kind != Shadow
        {
            self.delete_pod(&watched);
            let msg = format!(
                "pod {watched} restarted under an older epoch and is fenced ({} restarts); replacing it (it resumes from the latest checkpoint)",
                p.restarts
            );
            self.note(true, "PodFenced", msg.clone());
            self.degraded = Some(("PodFenced".into(), msg));
            return;
        }
        let failure = match &pod {
            None if s.kind == Shadow => {
                Some(format!("the new version's pod {watched} disappeared"))
            }
            None => {
                // Recreate it: same name, same state (WAL in status.deployment).
                self.ensure_config(&up.to, &target);
                self.actions.push(Action::Deploy(Box::new(RunPlan {
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
                _ if self.restore_age(pod.as_ref()) > Self::readiness_timeout(&target) => {
                    Some(format!(
                        "no checkpoint completed within readinessTimeout {}",
                        target.upgrade.readiness_timeout
                    ))
                }
                _ => None,
            },
        };
        let Some(why) = failure else { return };
        self.fail_restore(s, &up, &watched, why);
    }

    /// How long the watched pod has had to complete a checkpoint: since the step began, or since
    /// the pod was created if that was later. An operator slowed down (an API server answering
    /// late, a full work queue) may create the pod a minute after the step began; that minute
    /// is not the new version's, and counting it rolled back healthy upgrades (e2e z).
    fn restore_age(&self, pod: Option<&PodObs>) -> Duration {
        let step = self.step_age();
        pod.and_then(|p| p.created).map_or(step, |c| {
            step.min((self.obs.now - c).to_std().unwrap_or_default())
        })
    }

    pub(super) fn promote(
        &mut self,
        s: Stage,
        up: &UpgradeStatus,
        target: &StreamJobSpec,
        watched: &str,
    ) {
        match s.kind {
            Rollback => {
                let failed = up.from.clone().unwrap_or_default();
                self.begin(UpgradeStatus {
                    from: Some(up.to.clone()),
                    to: failed.clone(),
                    target_spec: None,
                    step: Stage {
                        kind: Rollback,
                        step: RolledBack,
                    },
                    started_at: up.started_at,
                    step_started_at: Some(self.now),
                    savepoint: up.savepoint.clone(),
                    message: up.message.clone(),
                    dropped_state: Vec::new(),
                });
                self.deployed = Some(Deployed::Running);
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
                        started_at: up.step_started_at,
                        dropped_state: up.dropped_state.clone(),
                    });
                }
                self.set_last_stable(&up.to, target);
                self.move_to_idle();
                self.deployed = Some(Deployed::Running);
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
        // the promoted version's first moments
        self.look_again_within(facts::STARTING);
    }

    pub(super) fn fail_restore(
        &mut self,
        s: Stage,
        up: &UpgradeStatus,
        watched: &str,
        why: String,
    ) {
        let stable = self.last_stable().filter(|(h, _)| *h != up.to);
        match (s.kind, stable) {
            (Rollback, _) | (_, None) => {
                // Nothing to return to (or the rollback itself fails): report; the runtime
                // keeps retrying from its checkpoints.
                self.failed = true;
                self.say(format!("{why}; no other version to roll back to"));
                self.degraded = Some(("RestoreFailing".into(), why.clone()));
                self.note(true, "RestoreFailing", why);
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
                rb.started_at = up.started_at;
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
                        };
                        self.start_warm_deployment(old, up.savepoint.clone());
                    }
                    // Otherwise Rollback/Stopped recreates the old version.
                }
                self.begin(rb);
                self.say(format!("rolling back: {why}"));
            }
        }
    }
}
