//! `Stopped`: the savepoint is recorded; the old version goes and the new one is started.

use super::*;

impl Ctx<'_> {
    pub(super) fn stopped(&mut self, s: Stage) {
        let Some(up) = self.st.upgrade.clone() else {
            return;
        };
        let active = self.active();
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
                    run: standby.clone(),
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
                self.actions.push(Action::Deploy(Box::new(RunPlan {
                    name: standby.clone(),
                    hash: up.to.clone(),
                    spec: target,
                    from_savepoint: up.savepoint.clone(),
                    standby: false,
                    fresh: false,
                    epoch: 0,
                })));
            }
            self.move_to(Stage {
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
                self.move_to(Stage {
                    kind: Suspend,
                    step: Suspended,
                });
                self.deployed = Some(Deployed::Suspended);
                self.note(
                    false,
                    "Suspended",
                    format!(
                        "job suspended; it resumes from {}",
                        up.savepoint.as_deref().unwrap_or("its latest checkpoint")
                    ),
                );
            }
            _ => {
                self.deploy(&up.to, &target, up.savepoint.clone(), self.now);
                self.move_to(Stage {
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
}
