//! No transition in flight: keep the deployed version running, notice spec changes and start
//! the right transition (first deploy, plan, suspend).

use super::*;

impl Ctx<'_> {
    /// No transition in flight (or only a terminal record): keep the deployed job healthy,
    /// observe it, and start whatever the spec asks for.
    pub(super) fn steady(&mut self, sp: SpPoll) {
        let Some(dep) = self.st.deployment.clone() else {
            self.first_deploy();
            return;
        };
        let active = dep.workload.clone().unwrap_or_default();
        let js = self.obs.job(&active).cloned();
        let deployed = match self.keep_deployed_running(&dep) {
            Health::Running => Deployed::Running,
            Health::Finished => {
                self.ready = Some((false, "Finished".into(), "the job has finished".into()));
                Deployed::Finished
            }
            Health::NotRunning => Deployed::NotRunning,
        };
        self.deployed = Some(deployed);
        let healthy = deployed == Deployed::Running;
        if let Some(js) = &js {
            // The deployed spec is stable once it completed a checkpoint of its own.
            if js.has_own_checkpoint()
                && self.st.last_stable_spec_hash.as_deref() != Some(dep.spec_hash.as_str())
                && self.spec_hash.as_deref() == Some(dep.spec_hash.as_str())
            {
                self.set_last_stable(&dep.spec_hash, self.spec);
                self.note(
                    false,
                    "Stable",
                    format!(
                        "spec {} completed its first checkpoint; it is the rollback target",
                        dep.spec_hash
                    ),
                );
            }
        }
        // (`st.phase` is the phase as stored until the report derives the new one)
        match facts::phase(self.st.phase, None, Some(deployed), false) {
            Some(Phase::Finished) => return,
            Some(Phase::Deploying) => self.look_again_within(facts::STARTING),
            _ => {}
        }
        // Spec changes start only from a settled state.
        if sp != SpPoll::NoPending || self.st.pending_savepoint.is_some() {
            return;
        }
        let (Some(hash), None) = (self.spec_hash.clone(), self.spec_error.clone()) else {
            return;
        };
        let record = self
            .stage()
            .zip(self.st.upgrade.as_ref().map(|u| u.to.clone()));
        if self.spec.state == JobState::Suspended {
            self.begin_suspend(healthy, &active, &dep);
            return;
        }
        if hash != dep.spec_hash {
            match record {
                // An aborted upgrade (no savepoint could be taken) is tried again once the job
                // runs and a savepoint timeout has passed.
                Some((s, to))
                    if to == hash
                        && s.step == Aborted
                        && healthy
                        && self.step_age() > self.savepoint_timeout() =>
                {
                    self.begin_change(&hash, &dep, healthy)
                }
                // This very spec was blocked, aborted or rolled back: wait for another one.
                Some((_, to)) if to == hash => {}
                _ => self.begin_change(&hash, &dep, healthy),
            }
            return;
        }
        if record.is_some() {
            // The spec is back to what runs: forget the blocked/aborted/rolled-back target.
            self.move_to_idle();
        }
        if !healthy {
            return;
        }
        // Savepoints on request and on schedule.
        let nonce = self
            .spec
            .savepoints
            .as_ref()
            .map(|s| s.trigger_nonce)
            .unwrap_or(0);
        if nonce != self.st.last_handled_nonce.unwrap_or(0) {
            self.st.last_handled_nonce = Some(nonce);
            self.trigger(&active, "trigger", false, false);
            return;
        }
        if let Some(periodic) = self
            .spec
            .savepoints
            .as_ref()
            .and_then(|s| s.periodic.clone())
        {
            let every = dur("periodic", &periodic, Duration::from_secs(3600));
            let since = self
                .st
                .last_savepoint
                .as_ref()
                .and_then(|s| s.time)
                .into_iter()
                .chain(dep.started_at)
                .max();
            let elapsed = since
                .map(|t| (self.obs.now - t).to_std().unwrap_or_default())
                .unwrap_or(every);
            if elapsed >= every {
                self.trigger(&active, "periodic", false, false);
            } else {
                self.look_again_within(every - elapsed + Duration::from_secs(1));
            }
        }
    }

    pub(super) fn deployed_spec(&self) -> Option<StreamJobSpec> {
        let dep = self.st.deployment.as_ref()?;
        match self.last_stable() {
            Some((h, s)) if h == dep.spec_hash => Some(s),
            _ => {
                let up = self.upgrade_spec()?;
                (self.st.upgrade.as_ref()?.to == dep.spec_hash).then_some(up)
            }
        }
    }

    pub(super) fn first_deploy(&mut self) {
        if self.spec.state == JobState::Suspended {
            self.deployed = Some(Deployed::Suspended);
            return;
        }
        let Some(hash) = self.spec_hash.clone() else {
            self.ready = Some((
                false,
                "InvalidSpec".into(),
                self.spec_error.clone().unwrap_or_default(),
            ));
            return;
        };
        let from = self.spec.initial_savepoint.clone();
        self.deploy(&hash, &self.spec.clone(), from.clone(), self.now);
        self.deployed = Some(Deployed::Starting);
        self.note(
            false,
            "Deploying",
            format!(
                "deploying {} ({}) from {}",
                self.spec.image,
                hash,
                from.as_deref().unwrap_or("an empty state")
            ),
        );
        self.look_again_within(FAST);
    }

    pub(super) fn new_record(
        &self,
        from: Option<String>,
        to: &str,
        spec: &StreamJobSpec,
        stage: Stage,
        message: String,
    ) -> UpgradeStatus {
        UpgradeStatus {
            from,
            to: to.to_string(),
            target_spec: serde_json::to_string(spec).ok(),
            step: stage,
            started_at: self.now,
            step_started_at: Some(self.now),
            savepoint: None,
            message: Some(message),
            dropped_state: Vec::new(),
        }
    }

    pub(super) fn begin_change(&mut self, hash: &str, dep: &DeploymentStatus, _healthy: bool) {
        let deployed = self.deployed_spec();
        let change = classify(deployed.as_ref(), self.spec);
        if change == Change::Policy || change == Change::None {
            // Only how future rollouts happen changed: adopt it, the job keeps running.
            if let Some(d) = self.st.deployment.as_mut() {
                d.spec_hash = hash.to_string();
            }
            if self.st.last_stable_spec_hash.as_deref() == Some(dep.spec_hash.as_str()) {
                self.set_last_stable(hash, self.spec);
            }
            self.move_to_idle();
            self.note(
                false,
                "PolicyUpdated",
                "spec.upgrade changed; the running job is unchanged",
            );
            return;
        }
        let spec = self.spec.clone();
        let mode = spec.upgrade.mode;
        let shadow =
            spec.upgrade.strategy == UpgradeStrategy::Shadow && mode == UpgradeMode::Savepoint;
        let plan_from = if mode == UpgradeMode::Stateless {
            None
        } else {
            self.st.latest_state_path()
        };
        // refused on its face: Planning blocks it next, with no plan pod
        let refused = self.refused_restore(&spec).is_some();
        let kind = if shadow { Shadow } else { InPlace };
        let stage = if mode == UpgradeMode::Stateless {
            Stage {
                kind: InPlace,
                step: Stopped,
            }
        } else if plan_from.is_some() || refused {
            Stage {
                kind,
                step: Planning,
            }
        } else if shadow {
            Stage {
                kind: Shadow,
                step: StartingStandby,
            }
        } else if mode == UpgradeMode::Savepoint
            || (mode == UpgradeMode::LastState && self.active_running())
        {
            Stage {
                kind: InPlace,
                step: Savepointing,
            }
        } else {
            Stage {
                kind: InPlace,
                step: Stopped,
            }
        };
        let what = format!(
            "{} change {} -> {} ({:?}, mode {:?})",
            change.as_str(),
            dep.spec_hash,
            hash,
            kind,
            mode
        );
        self.begin(self.new_record(
            Some(dep.spec_hash.clone()),
            hash,
            &spec,
            stage,
            what.clone(),
        ));
        self.ensure_config(hash, &spec);
        if let (Planning, Some(from), false) = (stage.step, plan_from, refused) {
            self.create_plan(hash, &spec, &from);
        }
        let reason = if change == Change::Rescale {
            "RescaleStarted"
        } else {
            "UpgradeStarted"
        };
        self.note(false, reason, what);
    }

    pub(super) fn create_plan(&mut self, hash: &str, spec: &StreamJobSpec, from: &str) {
        if let Some(name) = self.plan_name() {
            self.actions.push(Action::CheckCompatibility {
                name,
                hash: hash.to_string(),
                spec: Box::new(spec.clone()),
                from: from.to_string(),
            });
        }
    }

    pub(super) fn begin_suspend(&mut self, healthy: bool, _active: &str, dep: &DeploymentStatus) {
        let spec = self.deployed_spec().unwrap_or_else(|| self.spec.clone());
        let stage = if healthy {
            Stage {
                kind: Suspend,
                step: Savepointing,
            }
        } else {
            // No savepoint can be taken: resume later from the latest checkpoint.
            Stage {
                kind: Suspend,
                step: Stopped,
            }
        };
        self.begin(self.new_record(
            Some(dep.spec_hash.clone()),
            &dep.spec_hash,
            &spec,
            stage,
            if healthy {
                "suspending: stop with savepoint".into()
            } else {
                "suspending: the job is not running, it will resume from its latest checkpoint"
                    .into()
            },
        ));
        self.note(false, "Suspending", "spec.state is suspended");
    }
}
