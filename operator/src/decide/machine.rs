//! The upgrade state machine: stages (`Kind/Step`) and the declared moves between them.

use super::*;

pub use streamjob_crds::stage::{Kind, Stage, Step};

pub(super) const fn st(kind: Kind, step: Step) -> Option<Stage> {
    Some(Stage { kind, step })
}

/// Stages a new transition can start in (from idle, from a terminal record of an upgrade, or by
/// abandoning a plan that has not touched anything yet).
pub const START_STAGES: &[Option<Stage>] = &[
    st(InPlace, Planning),
    st(InPlace, Savepointing),
    st(InPlace, Stopped),
    st(Shadow, Planning),
    st(Shadow, StartingStandby),
    st(Suspend, Savepointing),
    st(Suspend, Stopped),
];

/// Every legal move besides staying put and the start moves of [`START_STAGES`] (from `None`,
/// from the terminal records `Blocked`, `Aborted`, `RolledBack` of upgrades, and from
/// `Planning`). `None` is "no transition in flight".
pub const TRANSITIONS: &[(Option<Stage>, Option<Stage>)] = &[
    // Pre-check (a plan is dropped when the spec returns to what runs).
    (st(InPlace, Planning), None),
    (st(Shadow, Planning), None),
    (st(InPlace, Planning), st(InPlace, Blocked)),
    (st(Shadow, Planning), st(Shadow, Blocked)),
    (st(Resume, Planning), st(Resume, Blocked)),
    (st(Resume, Planning), st(Resume, Restoring)),
    (st(Resume, Planning), st(Suspend, Suspended)),
    // Shadow copy.
    (st(Shadow, StartingStandby), st(Shadow, Savepointing)),
    (st(Shadow, StartingStandby), st(Shadow, Aborted)),
    (st(Shadow, Savepointing), st(Shadow, Stopped)),
    (st(Shadow, Savepointing), st(Shadow, Aborted)),
    (st(Shadow, Stopped), st(Shadow, Restoring)),
    (st(Shadow, Restoring), None),
    (st(Shadow, Restoring), st(Rollback, Restoring)),
    (st(Shadow, Restoring), st(Rollback, Stopped)),
    // In place.
    (st(InPlace, Savepointing), st(InPlace, Stopped)),
    (st(InPlace, Savepointing), st(InPlace, Aborted)),
    (st(InPlace, Stopped), st(InPlace, Restoring)),
    (st(InPlace, Restoring), None),
    (st(InPlace, Restoring), st(Rollback, Stopped)),
    // Rollback.
    (st(Rollback, Stopped), st(Rollback, Restoring)),
    (st(Rollback, Restoring), st(Rollback, RolledBack)),
    // Suspend and resume.
    (st(Suspend, Savepointing), st(Suspend, Stopped)),
    (st(Suspend, Stopped), st(Suspend, Suspended)),
    (st(Suspend, Suspended), st(Resume, Planning)),
    (st(Suspend, Suspended), st(Resume, Restoring)),
    (st(Resume, Blocked), st(Resume, Planning)),
    (st(Resume, Blocked), st(Resume, Restoring)),
    (st(Resume, Blocked), st(Suspend, Suspended)),
    (st(Resume, Restoring), None),
    (st(Resume, Restoring), st(Rollback, Stopped)),
    // A terminal record is cleared when the spec returns to what runs.
    (st(InPlace, Blocked), None),
    (st(Shadow, Blocked), None),
    (st(InPlace, Aborted), None),
    (st(Shadow, Aborted), None),
    (st(Rollback, RolledBack), None),
];

/// The write-ahead rule, declared beside the moves: the deployed run (status.deployment's
/// workload), while its job runs, holds the only copy of what it did since its state was last
/// recorded. A decision may remove it only when
/// the *persisted* status (the one the decision started from, not the one it writes) is at one of
/// these steps: an earlier decision recorded where the job continues from (`upgrade.savepoint`, or
/// for a last-state or stateless upgrade the decision to start from the latest checkpoint or
/// empty) and that status was written before this decision. Enforced on every decision like
/// [`TRANSITIONS`] (`guard.rs`): a decision breaking it is refused whole.
pub const STATE_RECORDED_AT: &[Step] = &[Stopped, Restoring, RolledBack, Suspended];

/// Whether a decision made on the persisted stage `at` may remove a run whose job is running.
pub fn may_remove_running_run(at: Option<Stage>) -> bool {
    at.is_some_and(|s| STATE_RECORDED_AT.contains(&s.step))
}

/// Whether the state machine allows moving from `from` to `to`.
pub fn legal(from: Option<Stage>, to: Option<Stage>) -> bool {
    if from == to {
        return true;
    }
    let can_start = match from {
        None => true,
        Some(s) => {
            s.step == Planning
                || (s.step.is_terminal() && matches!(s.kind, InPlace | Shadow | Rollback))
        }
    };
    (can_start && START_STAGES.contains(&to)) || TRANSITIONS.contains(&(from, to))
}

/// The declared machine as a Mermaid state diagram (`docs/upgrades.md` carries it verbatim; a
/// test fails when the two differ). `Idle` is "no transition in flight".
pub fn mermaid() -> String {
    fn id(s: Option<Stage>) -> String {
        s.map_or("Idle".to_string(), |s| format!("{:?}_{:?}", s.kind, s.step))
    }
    let mut stages: Vec<Stage> = START_STAGES
        .iter()
        .chain(TRANSITIONS.iter().flat_map(|(a, b)| [a, b]))
        .flatten()
        .copied()
        .collect();
    stages.sort_by_key(|s| s.to_string());
    stages.dedup();
    let mut out = String::from("```mermaid\nstateDiagram-v2\n    [*] --> Idle\n");
    for s in &stages {
        out.push_str(&format!("    state \"{s}\" as {}\n", id(Some(*s))));
    }
    for to in START_STAGES {
        out.push_str(&format!("    Idle --> {}: start\n", id(*to)));
    }
    for (from, to) in TRANSITIONS {
        out.push_str(&format!("    {} --> {}\n", id(*from), id(*to)));
    }
    out.push_str("```\n");
    out
}
