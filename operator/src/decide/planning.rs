//! `Planning`: the pre-check pod of the new version against the latest state; `Blocked`.

use super::*;

impl Ctx<'_> {
    pub(super) fn planning(&mut self, s: Stage) {
        let Some(up) = self.st.upgrade.clone() else {
            return;
        };
        // Nothing has been touched yet: a newer spec (or a suspend) replaces this plan.
        let superseded = self.spec.state == JobState::Suspended
            || self.spec_hash.as_deref() != Some(up.to.as_str());
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
                self.move_to_idle();
                self.steady(SpPoll::NoPending);
            }
            return;
        }
        // a change no pre-check can make restorable (a Flink downgrade) is refused before the
        // plan pod, like an incompatible one
        let target = self.upgrade_spec().unwrap_or_else(|| self.spec.clone());
        if let Some(why) = self.refused_restore(&target) {
            self.block(s, "CannotRestore", why);
            return;
        }
        // (a Resume plans while nothing runs)
        if s.kind != Resume {
            self.keep_old_version_running();
        }
        self.ensure_config(&up.to, &target);
        // a plan pod on its way out is waited for (a retry creates one of the same name)
        if self.obs.pod(&plan).is_some_and(|p| p.terminating) {
            return;
        }
        let result = self.obs.pod(&plan).map(plan_result);
        match result {
            None => {
                let from = up.savepoint.clone().or_else(|| self.st.latest_state_path());
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
            Some(PlanResult::Compatible(dropped)) => {
                self.delete_pod(&plan);
                if dropped.is_empty() {
                    self.note(
                        false,
                        "PlanCompatible",
                        format!("spec {} can restore the job's state", up.to),
                    );
                } else {
                    // allowed, but said loudly: Flink drops such state without a word
                    self.note(
                        true,
                        "StateDropped",
                        format!(
                            "spec {} can restore the job's state and drops what it no longer uses (allowNonRestoredState): {}",
                            up.to,
                            dropped.join("; ")
                        ),
                    );
                }
                if let Some(u) = self.st.upgrade.as_mut() {
                    u.dropped_state = dropped;
                }
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

    /// Why `target` cannot restore the job's state at all (an engine's rule, such as a Flink
    /// downgrade), known without a pre-check; `None` for a stateless change.
    pub(super) fn refused_restore(&self, target: &StreamJobSpec) -> Option<String> {
        if target.upgrade.mode == UpgradeMode::Stateless {
            return None;
        }
        // the running version, or the suspended one a Resume starts again
        let old = self
            .deployed_spec()
            .or_else(|| self.last_stable().map(|(_, s)| s))?;
        target.cannot_restore_state_of(&old)
    }

    pub(super) fn block(&mut self, s: Stage, reason: &str, why: String) {
        self.move_to(Stage {
            kind: s.kind,
            step: Blocked,
        });
        if let Some(u) = self.st.upgrade.as_mut() {
            u.message = Some(format!("{reason}: {why}"));
        }
        self.say(format!("upgrade blocked: {why}"));
        self.note(true, "UpgradeBlocked", format!("{reason}: {why}"));
        self.outcome = Some(Outcome::Blocked);
    }

    pub(super) fn after_plan(&mut self, s: Stage) {
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
        self.move_to(Stage {
            kind: s.kind,
            step: next,
        });
    }

    pub(super) fn active_running(&self) -> bool {
        self.active()
            .and_then(|a| self.obs.job(&a))
            .is_some_and(|j| j.state == RunState::Running)
    }

    pub(super) fn last_state(&self) -> bool {
        self.upgrade_spec()
            .unwrap_or_else(|| self.spec.clone())
            .upgrade
            .mode
            == UpgradeMode::LastState
    }
}
