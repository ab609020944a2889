//! Savepoints as the decision sees them: the one in flight polled (answer, exit message,
//! recovered path, timeout), a new one triggered, a completed one recorded; and the active run's
//! latest checkpoint copied into status.

use super::*;

/// Result of looking at `status.pendingSavepoint`.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum SpPoll {
    NoPending,
    InFlight,
    Done(String),
    Failed(String),
}

impl Ctx<'_> {
    pub(super) fn record_savepoint(
        &mut self,
        path: &str,
        reason: &str,
        started_at: Option<DateTime<Utc>>,
    ) {
        let info = SavepointInfo {
            path: path.to_string(),
            time: Some(self.now),
            reason: Some(reason.to_string()),
            spec_hash: self.st.deployment.as_ref().map(|d| d.spec_hash.clone()),
        };
        if !self.st.savepoint_history.iter().any(|s| s.path == path) {
            self.st.savepoint_history.push(info.clone());
        }
        self.st.last_savepoint = Some(info);
        let secs = started_at
            .map(|t| (self.obs.now - t).num_milliseconds().max(0) as f64 / 1000.0)
            .unwrap_or(0.0);
        self.sp_done.push((reason.to_string(), secs));
        self.note(
            false,
            "SavepointCompleted",
            format!("{reason} savepoint completed: {path}"),
        );
    }

    pub(super) fn observe_active(&mut self) {
        let Some(active) = self.active() else { return };
        if let Some(js) = self.obs.job(&active)
            && let Some(ck) = &js.latest_checkpoint
        {
            let (id, path) = (ck.id.unwrap_or(0), Some(ck.path.clone()));
            let known = self
                .st
                .last_checkpoint
                .as_ref()
                .is_some_and(|c| c.id == id && c.path == path);
            if !known {
                // Stamped when first seen, on the operator's clock (the API server's), not with
                // the pod's completion time: every time in status then reads on one clock, and
                // "checkpointed since it was deployed" or "newer than that savepoint" never
                // compares a job pod's clock with the operator's.
                self.st.last_checkpoint = Some(CheckpointInfo {
                    id,
                    path,
                    time: Some(self.now),
                });
            }
        }
    }

    pub(super) fn poll_savepoint(&mut self) -> SpPoll {
        let Some(p) = self.st.pending_savepoint.clone() else {
            return SpPoll::NoPending;
        };
        // Recorded but never sent (the operator stopped between writing the status and the
        // request): the job still runs normally after a grace period, so ask again.
        let started = Some(p.started_at);
        let age = started
            .map(|t| (self.obs.now - t).to_std().unwrap_or_default())
            .unwrap_or_default();
        if p.request_id.is_empty()
            && age > UNSENT_GRACE
            && self
                .active()
                .and_then(|a| self.obs.job(&a))
                .is_some_and(|j| {
                    j.state == RunState::Running
                        && !is_pending(&p, j.last_savepoint.as_ref(), started)
                })
        {
            self.st.pending_savepoint = None;
            return SpPoll::NoPending;
        }
        let result = match &self.obs.savepoint {
            Some(SavepointState::Completed { path }) => Some(Ok(path.clone())),
            Some(SavepointState::Failed { error }) => Some(Err(error.clone())),
            Some(SavepointState::Pending) => None,
            None => {
                // The pod may have exited after stop-with-savepoint: its termination message.
                let from_exit = self
                    .active()
                    .and_then(|a| self.obs.pod(&a))
                    .filter(|pod| pod.phase == PodPhase::Succeeded)
                    .and_then(|pod| pod.message.as_deref())
                    .and_then(savepoint_from_message);
                // A path handed over by annotation counts once: not one already recorded.
                let recovered = self.obs.recovered_savepoint.clone().filter(|r| {
                    !self.st.savepoint_history.iter().any(|s| &s.path == r)
                        && self.st.last_savepoint.as_ref().is_none_or(|s| &s.path != r)
                });
                let from_exit = from_exit.or(recovered);
                let from_status = self.active().and_then(|a| {
                    let sp = self.obs.job(&a)?.last_savepoint.as_ref()?;
                    is_pending(&p, Some(sp), started).then(|| sp.path.clone())
                });
                from_exit.or(from_status).map(Ok)
            }
        };
        match result {
            Some(Ok(path)) => {
                self.st.pending_savepoint = None;
                self.record_savepoint(&path, &p.reason, Some(p.started_at));
                SpPoll::Done(path)
            }
            Some(Err(error)) => {
                self.st.pending_savepoint = None;
                self.note(
                    true,
                    "SavepointFailed",
                    format!("{} savepoint failed: {error}", p.reason),
                );
                self.say(format!("{} savepoint failed: {error}", p.reason));
                SpPoll::Failed(error)
            }
            None => {
                let exited = p.stop
                    && self
                        .active()
                        .and_then(|a| self.obs.pod(&a))
                        .is_some_and(|pod| pod.phase == PodPhase::Succeeded);
                if exited {
                    // The job stopped with a savepoint we cannot see: never give up on it (the
                    // old job is gone), ask for the path instead.
                    let dir = self
                        .upgrade_spec()
                        .unwrap_or_else(|| self.spec.clone())
                        .savepoint_dir();
                    let msg = format!(
                        "the job stopped with its {} savepoint but exited before the operator could read the path; find the newest savepoint under {dir} and set the annotation {ANNOTATION_RECOVERED_SAVEPOINT}=<path> to continue",
                        p.reason
                    );
                    self.degraded = Some(("SavepointPathUnknown".into(), msg.clone()));
                    self.say(msg);
                    SpPoll::InFlight
                } else if age > self.savepoint_timeout() {
                    self.st.pending_savepoint = None;
                    let msg = format!(
                        "{} savepoint did not complete within {}",
                        p.reason, self.spec.upgrade.savepoint_timeout
                    );
                    self.note(true, "SavepointFailed", msg.clone());
                    self.say(msg.clone());
                    SpPoll::Failed(msg)
                } else {
                    self.look_again_within(FAST);
                    SpPoll::InFlight
                }
            }
        }
    }

    pub(super) fn trigger(&mut self, pod: &str, reason: &str, stop: bool, standby: bool) {
        let dir = self
            .upgrade_spec()
            .unwrap_or_else(|| self.spec.clone())
            .savepoint_dir();
        self.actions.push(Action::TakeSavepoint {
            run: pod.to_string(),
            dir,
            stop,
            standby,
        });
        let previous = self.obs.job(pod).map(|j| {
            j.last_savepoint
                .as_ref()
                .map(|s| s.path.clone())
                .unwrap_or_default()
        });
        self.st.pending_savepoint = Some(PendingSavepoint {
            request_id: String::new(),
            reason: reason.to_string(),
            stop,
            started_at: self.now,
            previous,
        });
        self.note(
            false,
            "SavepointTriggered",
            format!(
                "{reason} savepoint requested from {pod}{}",
                if stop { " (stop)" } else { "" }
            ),
        );
        self.look_again_within(FAST);
    }
}

/// Whether `reported`, the last savepoint a job reports, is the `pending` one (its request's
/// answer lost). The job reports only savepoints taken since its process started, and only the
/// operator asks for them, one at a time: a path other than the one reported when it was asked
/// is this one. No clock is read, so a job pod's clock ahead of the operator's cannot pass an
/// older savepoint off as this one, nor one behind it hide this one until the savepoint times
/// out. A request recorded without `previous` (by an older operator, or when the job's status
/// could not be read) falls back to the completion time on the pod's clock.
fn is_pending(
    pending: &PendingSavepoint,
    reported: Option<&Snapshot>,
    requested: Option<DateTime<Utc>>,
) -> bool {
    let Some(sp) = reported else { return false };
    match &pending.previous {
        Some(previous) => sp.path != *previous,
        None => parse_time(sp.completed_at.as_deref())
            .zip(requested)
            .is_some_and(|(done, requested)| done >= requested),
    }
}
