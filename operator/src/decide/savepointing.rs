//! `Savepointing`: the savepoint (or stop-with-savepoint) the new version will restore.

use super::*;

impl Ctx<'_> {
    pub(super) fn savepointing(&mut self, s: Stage, sp: SpPoll) {
        let active = self.active().unwrap_or_default();
        match sp {
            SpPoll::Done(path) => {
                // WAL: the savepoint is recorded now; pods are touched from the next decision on.
                if let Some(u) = self.st.upgrade.as_mut() {
                    u.savepoint = Some(path.clone());
                }
                self.move_to(Stage {
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
                        // A run that cannot get its job running by itself is replaced now.
                        self.keep_old_version_running();
                        self.say(format!(
                            "waiting for the job to run to take a savepoint (state {other:?}); set spec.upgrade.mode to last-state to upgrade from the latest checkpoint"
                        ));
                    }
                }
            }
        }
    }

    pub(super) fn savepoint_impossible(&mut self, s: Stage, why: String) {
        match s.kind {
            InPlace if self.last_state() => {
                self.move_to(Stage {
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
                self.move_to(Stage {
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
}
