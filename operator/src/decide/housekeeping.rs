//! Savepoint retention, garbage collection of what no stage needs any more, and worker pods.

use super::*;

/// What `status.savepointHistory` may take of the object (at most 1.5 MiB with its spec).
pub(crate) const HISTORY_BUDGET_BYTES: usize = 256 * 1024;

/// About what one history entry takes in the stored object: its strings and JSON's keys and
/// quotes.
fn status_bytes(sp: &SavepointInfo) -> usize {
    let text = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    // a time is written `2026-12-07T16:57:21Z`
    let time = sp.time.map_or(0, |_| 20);
    64 + sp.path.len() + time + text(&sp.reason) + text(&sp.spec_hash)
}

impl Ctx<'_> {
    /// Worker pods (`spec.workers`) follow the coordinator pods as observed: each live one gets
    /// its workers, those of a coordinator that is gone, finished or replaced go (see
    /// [`plan_workers`]). Outside the upgrade stages on purpose: every coordinator pod, old or
    /// standby, brings its own workers along.
    pub(super) fn workers(&mut self) {
        for w in plan_workers(&self.obs.coordinators, &self.obs.workers) {
            let action = match w {
                WorkerAction::Create { coordinator, index } => Action::AddWorker {
                    run: coordinator,
                    index,
                },
                WorkerAction::Delete { name, ended } => {
                    if let Some(why) = ended {
                        self.note(
                            true,
                            "WorkerReplaced",
                            format!("worker pod {name} ended ({why}); a new one replaces it"),
                        );
                    }
                    Action::Remove { name }
                }
            };
            self.actions.push(action);
        }
    }

    /// Savepoints beyond `spec.savepoints.history` are disposed and leave the status. Without
    /// `spec.savepoints` the default policy applies (10, no age limit, as with `savepoints: {}`):
    /// every upgrade, trigger and suspend adds one, and a history without bound would in the
    /// end push the status past what the API server stores. The count alone does not bound it
    /// (1,000 paths of 2 KiB are more than the 1.5 MiB an object may hold), so the oldest ones
    /// also go once the history passes [`HISTORY_BUDGET_BYTES`].
    pub(super) fn retention(&mut self) {
        let policy = self
            .spec
            .savepoints
            .as_ref()
            .map(|s| s.history.clone())
            .unwrap_or_default();
        let mut protected: BTreeSet<String> = BTreeSet::new();
        if let Some(p) = self.st.deployment.as_ref().and_then(|d| d.path.clone()) {
            protected.insert(p);
        }
        if let Some(p) = self.st.upgrade.as_ref().and_then(|u| u.savepoint.clone()) {
            protected.insert(p);
        }
        if let Some(l) = &self.st.last_savepoint {
            protected.insert(l.path.clone());
        }
        let max_age = policy
            .max_age
            .as_deref()
            .map(|a| dur("maxAge", a, Duration::MAX));
        let keep_count = policy.max_count.max(1) as usize;
        let n = self.st.savepoint_history.len();
        // bytes of each entry and all newer ones, newest last
        let mut newer_bytes = vec![0usize; n + 1];
        for (i, sp) in self.st.savepoint_history.iter().enumerate().rev() {
            newer_bytes[i] = newer_bytes[i + 1] + status_bytes(sp);
        }
        let mut dispose = Vec::new();
        let mut kept = Vec::new();
        for (i, sp) in self.st.savepoint_history.iter().enumerate() {
            let too_many = n - i > keep_count || newer_bytes[i] > HISTORY_BUDGET_BYTES;
            let too_old = match (max_age, sp.time) {
                (Some(age), Some(t)) => (self.obs.now - t).to_std().unwrap_or_default() > age,
                _ => false,
            };
            if (too_many || too_old) && !protected.contains(&sp.path) {
                dispose.push(sp.path.clone());
            } else {
                kept.push(sp.clone());
            }
        }
        if !dispose.is_empty() {
            self.st.savepoint_history = kept;
            self.note(
                false,
                "SavepointsDisposed",
                format!(
                    "disposing {} savepoint(s) beyond the history policy: {}",
                    dispose.len(),
                    dispose.join(", ")
                ),
            );
            self.actions.push(Action::Dispose { paths: dispose });
        }
    }

    /// Pods still Terminating `readinessTimeout` after their deletion was due: their node does
    /// not answer (lost, partitioned), and only its kubelet could confirm the deletion, so they
    /// would stay for good and every stage waiting for them with them. Our runtime's pods are
    /// force-deleted: whatever may still run there is fenced by the newer epoch of the run that
    /// replaces it and cannot commit (`operator` e2e q). A Flink cluster has no such fence, so
    /// its pods are named in Degraded and a warning event, for a human who knows the node is down.
    pub(super) fn stuck_pods(&mut self) {
        let wait = Self::readiness_timeout(self.spec);
        let stuck: Vec<String> = overdue(self.obs, wait, |p| p.deletion_due)
            .map(|p| p.name.clone())
            .collect();
        if stuck.is_empty() {
            return;
        }
        let names = stuck.join(", ");
        if self.obs.runs_fenced {
            for name in stuck {
                self.actions.push(Action::ForceRemove { name });
            }
            self.note(
                true,
                "PodsForceDeleted",
                format!(
                    "{names}: still Terminating {wait:?} after their deletion was due (their node does not answer); force-deleted, as what may still run there is fenced by a newer run's epoch"
                ),
            );
        } else {
            let msg = format!(
                "{names}: still Terminating {wait:?} after their deletion was due (their node does not answer); nothing fences this engine's runs against what may still run there, so they are left to you: once the node is known down, `kubectl delete pod --force --grace-period=0`"
            );
            self.note(true, "PodsStuckTerminating", msg.clone());
            // more precise than the steady state's "terminating; it will be recreated"
            self.degrade_over(&["PodTerminating"], "PodsStuckTerminating", msg);
        }
    }

    /// Pods still Pending `readinessTimeout` after they were created: not scheduled (no node
    /// fits, or no scheduler runs: the soak saw kube-scheduler exit after an API server restart
    /// and a job's only pod wait 20 minutes, reported healthy) or not started by their node. A
    /// replacement would wait the same, so they are named in Degraded (`PodsPending`) and a
    /// warning event, with the scheduler's or the kubelet's reason when there is one.
    pub(super) fn pending_pods(&mut self) {
        let wait = Self::readiness_timeout(self.spec);
        let pending: Vec<String> = overdue(self.obs, wait, |p| {
            p.created
                .filter(|_| p.phase == PodPhase::Pending && !p.terminating)
        })
        .map(|p| match &p.message {
            Some(why) => format!("{} ({})", p.name, short(why)),
            None => p.name.clone(),
        })
        .collect();
        if pending.is_empty() {
            return;
        }
        let msg = format!(
            "{}: still Pending {wait:?} after they were created (not scheduled, or not started by their node)",
            pending.join(", ")
        );
        self.note(true, "PodsPending", msg.clone());
        // more precise than "no pod IP yet" or a crash loop's count; a reason of its own stays
        self.degrade_over(
            &["PodTerminating", "CrashLooping", "PodMissing"],
            "PodsPending",
            msg,
        );
    }

    /// Degraded for `reason` unless a more specific reason than one of `general` is set.
    fn degrade_over(&mut self, general: &[&str], reason: &str, msg: String) {
        if self
            .degraded
            .as_ref()
            .is_none_or(|(r, _)| general.contains(&r.as_str()))
        {
            self.degraded = Some((reason.into(), msg));
        }
    }

    pub(super) fn gc(&mut self) {
        let stage = self.stage();
        let mut keep_pods: BTreeSet<String> = BTreeSet::new();
        if let Some(a) = self.active() {
            keep_pods.insert(a);
        }
        if let Some(s) = stage {
            if s.kind == Shadow
                && matches!(s.step, StartingStandby | Savepointing | Stopped | Restoring)
                && let Some(n) = self.standby_name()
            {
                keep_pods.insert(n);
            }
            if s.step == Planning
                && let Some(n) = self.plan_name()
            {
                keep_pods.insert(n);
            }
        }
        for a in &self.actions {
            if let Action::Deploy(p) = a {
                keep_pods.insert(p.name.clone());
            }
        }
        let mut doomed = Vec::new();
        for p in &self.obs.pods {
            if p.terminating || keep_pods.contains(&p.name) {
                continue;
            }
            let stale = match p.role {
                PodRole::Runtime | PodRole::Plan => true,
                PodRole::Dispose => matches!(p.phase, PodPhase::Succeeded | PodPhase::Failed),
            };
            if stale {
                doomed.push(p.name.clone());
            }
        }
        // Never delete the old pods of an in-place transition before its WAL step says so.
        let protected_old = match stage {
            Some(s)
                if matches!(s.kind, InPlace | Suspend | Rollback)
                    && matches!(s.step, Planning | Savepointing) =>
            {
                self.old
                    .deployment
                    .as_ref()
                    .and_then(|d| d.workload.clone())
            }
            _ => None,
        };
        for d in doomed {
            if Some(&d) == protected_old.as_ref() {
                continue;
            }
            if self.obs.pod(&d).is_some_and(|p| p.role == PodRole::Runtime) {
                // not the deployed version: whatever it is, it must not commit again
                self.cancel_and_delete(&d);
            } else {
                self.delete_pod(&d);
            }
        }
        let mut keep_hashes: BTreeSet<String> = BTreeSet::new();
        keep_hashes.extend(self.obs.pods.iter().filter_map(|p| p.spec_hash.clone()));
        keep_hashes.extend(self.st.deployment.as_ref().map(|d| d.spec_hash.clone()));
        keep_hashes.extend(self.st.last_stable_spec_hash.clone());
        if let Some(u) = &self.st.upgrade {
            keep_hashes.insert(u.to.clone());
            keep_hashes.extend(u.from.clone());
        }
        for a in &self.actions {
            if let Action::PrepareVersion { hash, .. } = a {
                keep_hashes.insert(hash.clone());
            }
        }
        let stale: Vec<String> = self
            .obs
            .config_hashes
            .iter()
            .filter(|h| !keep_hashes.contains(*h))
            .cloned()
            .collect();
        for hash in stale {
            self.actions.push(Action::RetireVersion { hash });
        }
    }
}

/// The pods of `obs` for which more than `wait` has passed since `since` (their creation, their
/// deletion's due time; `None`: not counted), on the API server's clock.
fn overdue<'o>(
    obs: &'o Observed,
    wait: Duration,
    since: impl Fn(&PodObs) -> Option<DateTime<Utc>> + 'o,
) -> impl Iterator<Item = &'o PodObs> + 'o {
    obs.pods.iter().filter(move |p| {
        since(p)
            .and_then(|t| (obs.now - t).to_std().ok())
            .is_some_and(|age| age > wait)
    })
}
