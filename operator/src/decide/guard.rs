//! The declared machine enforced at run time: a decision that moves the upgrade stage in a way
//! [`TRANSITIONS`] does not declare, or removes a running run before its state is recorded
//! ([`STATE_RECORDED_AT`]), is refused whole and reported.

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
    let (from, to) = (
        super::stored_stage(old),
        super::stored_stage(&decision.status),
    );
    if !legal(from, to) {
        return refuse(
            old,
            &format!(
                "refused an undeclared upgrade transition {} -> {}",
                show_stage(from),
                show_stage(to)
            ),
            observed,
        );
    }
    if let Some(run) = unrecorded_removal(old, from, &decision, observed) {
        return refuse(
            old,
            &format!(
                "refused removing {run}, whose job is running, at stage {} before its state is recorded (write-ahead rule)",
                show_stage(from)
            ),
            observed,
        );
    }
    decision
}

/// The deployed run (the one the persisted status names as the deployment's workload: it holds
/// the job's state) if the decision removes it while its job is observed running and the
/// persisted stage has not recorded its state ([`may_remove_running_run`]). Other runs (a
/// leftover of another version) are fenced by epoch and hold no state of record.
fn unrecorded_removal(
    old: &StreamJobStatus,
    persisted: Option<Stage>,
    decision: &Decision,
    observed: &Observed,
) -> Option<String> {
    if may_remove_running_run(persisted) {
        return None;
    }
    let deployed = old.deployment.as_ref()?.workload.as_deref()?;
    decision.actions.iter().find_map(|a| {
        let (Action::Remove { name } | Action::ForceRemove { name }) = a else {
            return None;
        };
        if name != deployed {
            return None;
        }
        let pod = observed.pod(name)?;
        let running = observed
            .job(name)
            .is_some_and(|j| j.state == RunState::Running);
        // a pod that ended (Failed, Succeeded) holds nothing, whatever its last answer said
        let live = pod.phase == PodPhase::Running && !pod.terminating;
        (pod.role == PodRole::Runtime && live && running).then(|| name.clone())
    })
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
