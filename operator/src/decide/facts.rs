//! What the steps record, and the rules that turn it into the phase and the requeue interval.
//!
//! A step says what it saw or did ("the deployed run is running", "a transition moved", "look
//! again within 5 s for the periodic savepoint", "upgrade blocked: …" for the message); it never
//! writes `status.phase` or `status.message` or picks the requeue interval itself. [`Ctx::finish`](super::Ctx) (report.rs) derives both here, with the
//! conditions and the message, from these facts and the stage the decision ends in, so the
//! rules can be read (and changed) in one place:
//!
//! | the decision ends …                         | phase                    | look again   |
//! |---------------------------------------------|--------------------------|--------------|
//! | with a run that cannot be restored (failed) | `Failed`                 | 10 s         |
//! | in a transition that moved in it            | `Upgrading`, `RollingBack` or `Deploying` (Resume) | 1 s |
//! | in a transition that did not move           | as above                 | 2 s (`FAST`) |
//! | right after a transition ended              | from what the run does   | 2 s          |
//! | with nothing in flight                      | from what the run does   | 30 s (`SLOW`)|
//! | suspended or finished, nothing to do        | `Suspended`, `Finished`  | 5 min (`IDLE`)|
//!
//! A fact asking to look again sooner (a pod being replaced, a savepoint in flight, a version
//! starting, a periodic savepoint due) shortens the interval, whatever the row.

use super::*;

/// What the decision saw of the deployed version (or did to it), for the phase once nothing is
/// in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Deployed {
    /// Its job runs (or was just promoted).
    Running,
    /// Its job finished.
    Finished,
    /// It was just created (a first deployment).
    Starting,
    /// Anything else (being replaced, restarting, unreachable): the phase stays as it was.
    NotRunning,
    /// No version runs, by the spec's wish.
    Suspended,
}

/// A run failing to restore with no version to roll back to: the runtime keeps retrying from its
/// checkpoints, the operator looks less often.
const RETRY: Duration = Duration::from_secs(10);
/// A transition moved: its next step can usually be taken at once.
const MOVED: Duration = Duration::from_secs(1);
/// A version deploying: how often to look for its job running.
pub(super) const STARTING: Duration = Duration::from_secs(5);

/// The phase: a transition in flight names it; otherwise what the deployed version does, or the
/// phase as it was while that says nothing new.
pub(super) fn phase(
    previous: Option<Phase>,
    in_flight: Option<Kind>,
    deployed: Option<Deployed>,
    failed: bool,
) -> Option<Phase> {
    if failed {
        return Some(Phase::Failed);
    }
    match (in_flight, deployed) {
        (Some(Rollback), _) => Some(Phase::RollingBack),
        (Some(InPlace | Shadow | Suspend), _) => Some(Phase::Upgrading),
        (Some(Resume), _) => Some(Phase::Deploying),
        (None, Some(Deployed::Running)) => Some(Phase::Running),
        (None, Some(Deployed::Finished)) => Some(Phase::Finished),
        (None, Some(Deployed::Suspended)) => Some(Phase::Suspended),
        (None, Some(Deployed::Starting)) => Some(Phase::Deploying),
        (None, Some(Deployed::NotRunning)) => previous.or(Some(Phase::Deploying)),
        (None, None) => previous,
    }
}

/// What the decision ends in, for the requeue interval.
pub(super) struct Ending {
    /// The stage recorded at the end (terminal ones included).
    pub stage: Option<Stage>,
    /// The stage changed in this decision.
    pub moved: bool,
    pub phase: Option<Phase>,
    pub failed: bool,
    /// The decision asked for nothing to be done.
    pub no_actions: bool,
}

/// When to look at the job again (the table above), or sooner if a fact `asked` for it.
pub(super) fn requeue(end: &Ending, asked: Option<Duration>) -> Duration {
    let in_flight = end.stage.is_some_and(|s| !s.step.is_terminal());
    let base = if end.failed {
        RETRY
    } else if in_flight && end.moved {
        MOVED
    } else if in_flight || end.moved && end.stage.is_none() {
        FAST
    } else if end.no_actions && matches!(end.phase, Some(Phase::Suspended | Phase::Finished)) {
        IDLE
    } else {
        SLOW
    };
    asked.map_or(base, |a| a.min(base))
}

impl Ctx<'_> {
    /// Records what the job's status message says (the last step to say something wins; with
    /// none, the report says how a transition ended or what is wrong).
    pub(super) fn say(&mut self, message: impl Into<String>) {
        self.said = Some(message.into());
    }

    /// Records that something this decision started or waits for is worth looking at again
    /// within `d` (the soonest of these wins).
    pub(super) fn look_again_within(&mut self, d: Duration) {
        self.asked = Some(self.asked.map_or(d, |a| a.min(d)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ending(stage: Option<&str>, moved: bool) -> Ending {
        Ending {
            stage: stage.map(|s| s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))),
            moved,
            phase: Some(Phase::Running),
            failed: false,
            no_actions: false,
        }
    }

    #[test]
    fn requeue_follows_the_table() {
        assert_eq!(requeue(&ending(Some("InPlace/Stopped"), true), None), MOVED);
        assert_eq!(requeue(&ending(Some("InPlace/Stopped"), false), None), FAST);
        assert_eq!(requeue(&ending(None, true), None), FAST);
        assert_eq!(requeue(&ending(None, false), None), SLOW);
        // moved into a stage that waits on the user
        assert_eq!(requeue(&ending(Some("InPlace/Blocked"), true), None), SLOW);
        let idle = Ending {
            phase: Some(Phase::Suspended),
            no_actions: true,
            ..ending(Some("Suspend/Suspended"), true)
        };
        assert_eq!(requeue(&idle, None), IDLE);
        let failing = Ending {
            failed: true,
            ..ending(Some("Rollback/Restoring"), false)
        };
        assert_eq!(requeue(&failing, None), RETRY);
        // a fact asks sooner, never later
        assert_eq!(requeue(&ending(None, false), Some(STARTING)), STARTING);
        assert_eq!(
            requeue(&ending(Some("InPlace/Stopped"), true), Some(FAST)),
            MOVED
        );
    }

    #[test]
    fn the_phase_is_the_transition_s_then_the_deployed_version_s() {
        use Deployed::*;
        let running = Some(Phase::Running);
        assert_eq!(
            phase(running, Some(Rollback), Some(Running), false),
            Some(Phase::RollingBack)
        );
        assert_eq!(
            phase(running, Some(Shadow), None, false),
            Some(Phase::Upgrading)
        );
        assert_eq!(
            phase(running, Some(Resume), None, false),
            Some(Phase::Deploying)
        );
        assert_eq!(
            phase(running, Some(InPlace), None, true),
            Some(Phase::Failed)
        );
        assert_eq!(
            phase(None, None, Some(Starting), false),
            Some(Phase::Deploying)
        );
        assert_eq!(
            phase(Some(Phase::Failed), None, Some(Running), false),
            running
        );
        // a run being repaired keeps the phase it had; a first look says Deploying
        assert_eq!(phase(running, None, Some(NotRunning), false), running);
        assert_eq!(
            phase(None, None, Some(NotRunning), false),
            Some(Phase::Deploying)
        );
        assert_eq!(
            phase(Some(Phase::Finished), None, None, false),
            Some(Phase::Finished)
        );
    }
}
