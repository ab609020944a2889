//! The declared machine enforced at run time: a decision that moves the upgrade stage in a way
//! [`TRANSITIONS`] does not declare is refused whole and reported.

use super::*;

/// The state machine checked in every build, not only in tests: a decision that moves the upgrade
/// stage along a transition [`TRANSITIONS`] does not declare is a bug. It is refused whole —
/// nothing is written, created or deleted — and reported in status and as an Event, so the job
/// stays where it was instead of taking a step nobody reasoned about.
pub(super) fn guard_transition(
    old: &StreamJobStatus,
    decision: Decision,
    observed: &Observed,
) -> Decision {
    let stage = |s: &StreamJobStatus| super::stored_stage(s).ok();
    let (Some(from), Some(to)) = (stage(old), stage(&decision.status)) else {
        return decision; // an unreadable stored stage is reported by the decision itself
    };
    if legal(from, to) {
        return decision;
    }
    refuse(
        old,
        &format!(
            "refused an undeclared upgrade transition {} -> {}",
            show_stage(from),
            show_stage(to)
        ),
        observed,
    )
}

pub(super) fn show_stage(s: Option<Stage>) -> String {
    s.map_or("none".to_string(), |s| s.to_string())
}

/// The decision that changes nothing but says why: status as it was plus `Degraded`
/// (`IllegalTransition`), a Warning Event, no action.
pub(super) fn refuse(old: &StreamJobStatus, what: &str, observed: &Observed) -> Decision {
    let message = format!(
        "{what}: nothing was changed; this is an operator bug, please report it with this message"
    );
    tracing::error!(%message, "illegal transition");
    let mut status = old.clone();
    set_condition(
        &mut status.conditions,
        "Degraded",
        true,
        "IllegalTransition",
        &message,
        observed.generation,
        observed.now,
    );
    status.message = Some(message.clone());
    Decision {
        actions: Vec::new(),
        status,
        events: vec![Note {
            warning: true,
            reason: "IllegalTransition".into(),
            message,
        }],
        requeue_after: Duration::from_secs(30),
        outcome: None,
        savepoints_completed: Vec::new(),
    }
}
