//! `StartingStandby` (Shadow): the new version warm beside the running one; aborts.

use super::*;

impl Ctx<'_> {
    pub(super) fn starting_standby(&mut self) {
        let Some(up) = self.st.upgrade.clone() else {
            return;
        };
        let Some(name) = self.standby_name() else {
            return;
        };
        self.keep_old_version_running();
        let target = self.upgrade_spec().unwrap_or_else(|| self.spec.clone());
        match self.obs.pod(&name) {
            None => {
                self.ensure_config(&up.to, &target);
                self.actions.push(Action::Deploy(Box::new(RunPlan {
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
                    self.move_to(Stage {
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

    pub(super) fn abort(&mut self, kind: Kind, why: String) {
        self.move_to(Stage {
            kind,
            step: Aborted,
        });
        if let Some(u) = self.st.upgrade.as_mut() {
            u.message = Some(why.clone());
        }
        self.say(format!(
            "upgrade aborted, the old version keeps running: {why}"
        ));
        self.note(true, "UpgradeAborted", why);
        self.outcome = Some(Outcome::Aborted);
    }
}
