//! Carrying out a decision, in the order that makes it safe to stop at any point:
//!
//! 1. the status first, when it changed: it is the write-ahead log, so nothing is created or
//!    deleted that the stored status does not already account for;
//! 2. then the actions, in the decision's order, each after checking that this replica still
//!    leads; the first that fails stops the rest (an `ActionFailed` event says which);
//! 3. the status again if an action changed it (a savepoint's request id);
//! 4. the decision's events last, so that they describe what was done.
//!
//! Every status write names the resourceVersion the decision was made on: a write refused as
//! stale (another replica, a slow watch) ends the reconcile before any action.
//!
//! The order lives here, apart from the API server and the engine ([`Outlet`]), so the unit
//! tests pin it with a fake cluster that records each call.

use std::future::Future;

use super::*;

/// Where a decision lands: the StreamJob's status and events on the API server, its actions
/// through the job's engine.
pub(super) trait Outlet {
    /// `Err(NotLeader)` once this replica's Lease has run out.
    fn still_leading(&self) -> Result<()>;

    /// Writes the whole status, on the resourceVersion of the last write (or of the read).
    fn write_status(
        &mut self,
        status: &StreamJobStatus,
    ) -> impl Future<Output = Result<Written>> + Send;

    /// Carries out one action; returns whether it changed `status`.
    fn act(
        &mut self,
        action: &Action,
        status: &mut StreamJobStatus,
    ) -> impl Future<Output = Result<bool>> + Send;

    fn publish(
        &mut self,
        warning: bool,
        reason: &str,
        message: &str,
    ) -> impl Future<Output = ()> + Send;
}

/// How far a decision got (an error: the API server or the Lease stopped it midway).
#[derive(Debug)]
pub(super) enum Carried {
    /// Everything was carried out.
    Done,
    /// The status was recorded and an action failed: the actions after it were left, the
    /// decision's events published.
    ActionFailed(Error),
    /// A status write was refused as stale: the rest was left for the next reconcile.
    Stale,
}

/// Carries out `decision`, made on `stored` (the status as read), in the order above.
pub(super) async fn carry_out<O: Outlet + Send>(
    decision: &Decision,
    stored: &StreamJobStatus,
    outlet: &mut O,
) -> Result<Carried> {
    let mut status = decision.status.clone();
    outlet.still_leading()?;
    if status != *stored && outlet.write_status(&status).await? == Written::Stale {
        return Ok(Carried::Stale);
    }
    let mut status_dirty = false;
    let mut first_error = None;
    for action in &decision.actions {
        outlet.still_leading()?;
        match outlet.act(action, &mut status).await {
            Ok(dirty) => status_dirty |= dirty,
            Err(e) => {
                tracing::warn!(error = %e, ?action, "action failed");
                let message = format!("{}: {e}", action_name(action));
                outlet.publish(true, "ActionFailed", &message).await;
                first_error = Some(e);
                break;
            }
        }
    }
    if status_dirty {
        outlet.still_leading()?;
        if outlet.write_status(&status).await? == Written::Stale {
            return Ok(Carried::Stale);
        }
    }
    for note in &decision.events {
        outlet
            .publish(note.warning, &note.reason, &note.message)
            .await;
    }
    Ok(first_error.map_or(Carried::Done, Carried::ActionFailed))
}

/// The real outlet: the API server for status and events, the job's engine for actions.
pub(super) struct Cluster<'a, E: Engine> {
    pub ctx: &'a Context<E>,
    pub scope: &'a JobScope<'a>,
    pub observed: &'a Observed,
    pub jobs: &'a Api<StreamJob>,
    /// The resourceVersion the next status write is made on.
    pub version: Option<String>,
}

impl<E: Engine> Outlet for Cluster<'_, E> {
    fn still_leading(&self) -> Result<()> {
        self.ctx.still_leading()
    }

    async fn write_status(&mut self, status: &StreamJobStatus) -> Result<Written> {
        let name = &self.scope.owner.name;
        let written = write_status(self.jobs, name, self.version.as_deref(), status).await?;
        if let Written::Now(v) = &written {
            self.version.clone_from(v);
        }
        Ok(written)
    }

    async fn act(&mut self, action: &Action, status: &mut StreamJobStatus) -> Result<bool> {
        apply(action, self.ctx, self.scope, self.observed, status).await
    }

    async fn publish(&mut self, warning: bool, reason: &str, message: &str) {
        publish(self.ctx, self.scope.job, warning, reason, message).await
    }
}

/// The action's name in events and logs.
fn action_name(a: &Action) -> &'static str {
    match a {
        Action::PrepareVersion { .. } => "PrepareVersion",
        Action::RetireVersion { .. } => "RetireVersion",
        Action::Deploy(_) => "Deploy",
        Action::Remove { .. } => "Remove",
        Action::ForceRemove { .. } => "ForceRemove",
        Action::AddWorker { .. } => "AddWorker",
        Action::CheckCompatibility { .. } => "CheckCompatibility",
        Action::TakeSavepoint { .. } => "TakeSavepoint",
        Action::Start { .. } => "Start",
        Action::Cancel { .. } => "Cancel",
        Action::Dispose { .. } => "Dispose",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::VecDeque;

    use streamjob_crds::v1alpha1::Phase;

    use super::*;
    use crate::decide::Note;

    /// A cluster that records every call, answers status writes and actions from scripts, and
    /// loses the Lease after a given number of leadership checks.
    #[derive(Default)]
    struct FakeCluster {
        calls: Vec<String>,
        writes: VecDeque<Written>,
        failing: Option<&'static str>,
        dirtying: Option<&'static str>,
        checks_left: Option<usize>,
    }

    impl Outlet for FakeCluster {
        fn still_leading(&self) -> Result<()> {
            match self.checks_left {
                Some(0) => Err(Error::NotLeader),
                _ => Ok(()),
            }
        }

        async fn write_status(&mut self, status: &StreamJobStatus) -> Result<Written> {
            self.calls.push(format!("status {:?}", status.message));
            self.tick();
            Ok(self.writes.pop_front().unwrap_or(Written::Now(None)))
        }

        async fn act(&mut self, action: &Action, status: &mut StreamJobStatus) -> Result<bool> {
            let name = action_name(action);
            self.calls.push(name.to_string());
            self.tick();
            if self.failing == Some(name) {
                return Err(Error::MissingMetadata("uid"));
            }
            if self.dirtying == Some(name) {
                status.message = Some("request id".into());
                return Ok(true);
            }
            Ok(false)
        }

        async fn publish(&mut self, _warning: bool, reason: &str, _message: &str) {
            self.calls.push(format!("event {reason}"));
        }
    }

    impl FakeCluster {
        /// Every call counts as a leadership check passed.
        fn tick(&mut self) {
            if let Some(n) = self.checks_left.as_mut() {
                *n = n.saturating_sub(1);
            }
        }
    }

    fn decision(actions: Vec<Action>) -> Decision {
        Decision {
            actions,
            status: StreamJobStatus {
                phase: Some(Phase::Upgrading),
                message: Some("decided".into()),
                ..StreamJobStatus::default()
            },
            events: vec![Note {
                warning: false,
                reason: "Transition".into(),
                message: "InPlace/Stopped -> InPlace/Restoring".into(),
            }],
            requeue_after: Duration::from_secs(1),
            outcome: None,
            savepoints_completed: Vec::new(),
        }
    }

    fn remove(name: &str) -> Action {
        Action::Remove { name: name.into() }
    }

    fn run(d: &Decision, stored: &StreamJobStatus, fake: &mut FakeCluster) -> Result<Carried> {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(carry_out(d, stored, fake))
    }

    #[test]
    fn the_status_is_written_before_any_action_and_events_come_last() {
        let d = decision(vec![remove("a"), Action::Cancel { run: "b".into() }]);
        let mut fake = FakeCluster::default();
        let carried = run(&d, &StreamJobStatus::default(), &mut fake).unwrap();
        assert!(matches!(carried, Carried::Done), "{carried:?}");
        assert_eq!(
            fake.calls,
            [
                "status Some(\"decided\")",
                "Remove",
                "Cancel",
                "event Transition"
            ]
        );
        // an unchanged status is not written again
        let mut fake = FakeCluster::default();
        run(&d, &d.status, &mut fake).unwrap();
        assert_eq!(fake.calls, ["Remove", "Cancel", "event Transition"]);
    }

    #[test]
    fn a_stale_status_write_carries_out_nothing() {
        let d = decision(vec![remove("a")]);
        let mut fake = FakeCluster {
            writes: VecDeque::from([Written::Stale]),
            ..FakeCluster::default()
        };
        let carried = run(&d, &StreamJobStatus::default(), &mut fake).unwrap();
        assert!(matches!(carried, Carried::Stale), "{carried:?}");
        assert_eq!(fake.calls, ["status Some(\"decided\")"]);
    }

    #[test]
    fn the_first_failing_action_stops_the_rest_and_is_reported() {
        let d = decision(vec![
            remove("a"),
            Action::Cancel { run: "b".into() },
            remove("c"),
        ]);
        let mut fake = FakeCluster {
            failing: Some("Cancel"),
            ..FakeCluster::default()
        };
        let carried = run(&d, &StreamJobStatus::default(), &mut fake).unwrap();
        assert!(
            matches!(carried, Carried::ActionFailed(Error::MissingMetadata(_))),
            "{carried:?}"
        );
        assert_eq!(
            fake.calls,
            [
                "status Some(\"decided\")",
                "Remove",
                "Cancel",
                "event ActionFailed",
                "event Transition"
            ]
        );
    }

    #[test]
    fn a_status_an_action_changed_is_written_after_the_actions() {
        let d = decision(vec![
            Action::TakeSavepoint {
                run: "a".into(),
                dir: "/sp".into(),
                stop: true,
                standby: false,
            },
            remove("b"),
        ]);
        let mut fake = FakeCluster {
            dirtying: Some("TakeSavepoint"),
            ..FakeCluster::default()
        };
        run(&d, &StreamJobStatus::default(), &mut fake).unwrap();
        assert_eq!(
            fake.calls,
            [
                "status Some(\"decided\")",
                "TakeSavepoint",
                "Remove",
                "status Some(\"request id\")",
                "event Transition"
            ]
        );
        // refused as stale: the events of a decision not fully recorded are not published
        let mut fake = FakeCluster {
            dirtying: Some("TakeSavepoint"),
            writes: VecDeque::from([Written::Now(None), Written::Stale]),
            ..FakeCluster::default()
        };
        let carried = run(&d, &StreamJobStatus::default(), &mut fake).unwrap();
        assert!(matches!(carried, Carried::Stale), "{carried:?}");
        assert_eq!(
            fake.calls.last().map(String::as_str),
            Some("status Some(\"request id\")")
        );
    }

    #[test]
    fn a_replica_that_lost_its_lease_stops_before_the_next_call() {
        let d = decision(vec![remove("a"), remove("b")]);
        for (checks, calls) in [
            (0, vec![]),
            (1, vec!["status Some(\"decided\")"]),
            (2, vec!["status Some(\"decided\")", "Remove"]),
        ] {
            let mut fake = FakeCluster {
                checks_left: Some(checks),
                ..FakeCluster::default()
            };
            let e = run(&d, &StreamJobStatus::default(), &mut fake).unwrap_err();
            assert!(matches!(e, Error::NotLeader), "{e}");
            assert_eq!(fake.calls, calls, "lease lost after {checks} calls");
        }
    }
}
