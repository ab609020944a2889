//! Restore rules: can this job graph restore that snapshot?
//!
//! Following Flink's rules for upgrading applications: state is matched by operator uid; an
//! unmodified job always restores; state whose uid is gone fails the restore unless
//! `allowNonRestoredState`; a new stateful operator starts empty; a changed state type, operator
//! kind or key type is incompatible; a changed maxParallelism is incompatible for keyed state
//! (keys would land in other key groups); parallelism may change (key groups are re-divided).

use crate::operator::StateDescriptor;
use crate::snapshot::{FORMAT_VERSION, SnapshotMetadata};

/// One operator of the job graph as far as restoring is concerned.
#[derive(Clone, Debug, PartialEq)]
pub struct GraphOperator {
    pub uid: String,
    pub kind: String,
    pub parallelism: u32,
    pub state: StateDescriptor,
}

pub use streamjob_contract::plan::{OperatorReport, OperatorStatus, PlanReport};

/// Decides whether `graph` (with `max_parallelism`) can restore `meta`.
pub fn check_restore(
    meta: &SnapshotMetadata,
    path: &str,
    graph: &[GraphOperator],
    max_parallelism: u32,
    allow_non_restored_state: bool,
) -> PlanReport {
    let mut reasons = Vec::new();
    if meta.format_version > FORMAT_VERSION {
        reasons.push(format!(
            "snapshot format version {} is newer than this runtime supports ({FORMAT_VERSION})",
            meta.format_version
        ));
    }
    let mut operators = Vec::new();
    for op in graph {
        let Some(old) = meta.operator(&op.uid) else {
            operators.push(OperatorReport {
                uid: op.uid.clone(),
                status: OperatorStatus::New,
                reason: if op.state.is_stateful() {
                    "not in the snapshot: starts with empty state".into()
                } else {
                    "not in the snapshot (stateless)".into()
                },
            });
            continue;
        };
        let old_has_state = old.state.is_stateful();
        let (status, reason) = if !old_has_state && !op.state.is_stateful() {
            (OperatorStatus::Restored, "stateless".to_string())
        } else if !old_has_state {
            (
                OperatorStatus::New,
                "had no state in the snapshot: starts with empty state".to_string(),
            )
        } else if !op.state.is_stateful() {
            if allow_non_restored_state {
                (
                    OperatorStatus::Dropped,
                    format!(
                        "the {} operator is now stateless ({}): its state is dropped (allowNonRestoredState)",
                        old.kind, op.kind
                    ),
                )
            } else {
                (
                    OperatorStatus::Incompatible,
                    format!(
                        "the snapshot has {} state for this uid but the operator is now a stateless {}: set spec.upgrade.allowNonRestoredState to drop it",
                        old.kind, op.kind
                    ),
                )
            }
        } else if old.kind != op.kind {
            (
                OperatorStatus::Incompatible,
                format!(
                    "operator kind changed from {} to {}: its state cannot be restored; use a new uid (and allowNonRestoredState) to start it empty",
                    old.kind, op.kind
                ),
            )
        } else if old.state.key_type != op.state.key_type {
            (
                OperatorStatus::Incompatible,
                format!(
                    "key type changed from {} to {}: keyed state cannot be restored; use a new uid to start it empty",
                    old.state.key_type.as_deref().unwrap_or("none"),
                    op.state.key_type.as_deref().unwrap_or("none")
                ),
            )
        } else if let Err(why) = fields_readable(&old.state, &op.state) {
            (OperatorStatus::Incompatible, why)
        } else if old.state.key_type.is_some() && meta.max_parallelism != max_parallelism {
            (
                OperatorStatus::Incompatible,
                format!(
                    "maxParallelism changed from {} to {}: keyed state is partitioned into maxParallelism key groups and cannot be re-partitioned; keep maxParallelism {}",
                    meta.max_parallelism, max_parallelism, meta.max_parallelism
                ),
            )
        } else if old.parallelism != op.parallelism {
            (
                OperatorStatus::Restored,
                format!(
                    "rescaled from parallelism {} to {}",
                    old.parallelism, op.parallelism
                ),
            )
        } else {
            (OperatorStatus::Restored, "state restored".to_string())
        };
        operators.push(OperatorReport {
            uid: op.uid.clone(),
            status,
            reason,
        });
    }
    for old in &meta.operators {
        if graph.iter().any(|g| g.uid == old.uid) {
            continue;
        }
        let (status, reason) = if !old.state.is_stateful() {
            (
                OperatorStatus::Dropped,
                "removed (stateless, nothing to restore)".to_string(),
            )
        } else if allow_non_restored_state {
            (
                OperatorStatus::Dropped,
                format!(
                    "removed {} operator: its state is dropped (allowNonRestoredState)",
                    old.kind
                ),
            )
        } else {
            (
                OperatorStatus::Incompatible,
                format!(
                    "the snapshot has {} state for uid {:?} which the pipeline no longer has: restore it under the same uid, or set spec.upgrade.allowNonRestoredState: true to drop it",
                    old.kind, old.uid
                ),
            )
        };
        operators.push(OperatorReport {
            uid: old.uid.clone(),
            status,
            reason,
        });
    }
    let compatible = reasons.is_empty()
        && operators
            .iter()
            .all(|o| o.status != OperatorStatus::Incompatible);
    PlanReport {
        compatible,
        path: path.to_string(),
        operators,
        reasons,
        omitted: 0,
    }
}

/// Whether state written as `old` can be read by an operator declaring `new`, and if not, which
/// state is in the way. Every old state must still be declared under its name, with the same
/// type or a versioned type (`Name/vN`) whose reader is at the same or a newer version (a newer
/// reader reads older layouts; never the reverse). State declared only by `new` starts empty.
fn fields_readable(old: &StateDescriptor, new: &StateDescriptor) -> Result<(), String> {
    fn versioned(t: &str) -> Option<(&str, u32)> {
        let (name, v) = t.rsplit_once("/v")?;
        Some((name, v.parse().ok()?))
    }
    for o in &old.fields {
        let Some(n) = new.fields.iter().find(|n| n.name == o.name) else {
            return Err(format!(
                "state {:?} ({}) is no longer declared: its data would be lost; keep declaring it, or use a new uid (and allowNonRestoredState) to start the operator empty",
                o.name, o.type_name
            ));
        };
        let readable = o.type_name == n.type_name
            || matches!(
                (versioned(&o.type_name), versioned(&n.type_name)),
                (Some((a, va)), Some((b, vb))) if a == b && vb >= va
            );
        if !readable {
            return Err(format!(
                "state {:?} changed type from {} to {}: the snapshot's values cannot be read as the new type; keep the type, or declare the new one under a new state name",
                o.name, o.type_name, n.type_name
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{OperatorMeta, SnapshotKind};

    fn keyed(fields: &[(&str, &str)], key: &str) -> StateDescriptor {
        let mut s = StateDescriptor::stateless().keyed(key);
        for (n, t) in fields {
            s = s.field(n, *t);
        }
        s
    }

    fn meta(ops: Vec<OperatorMeta>) -> SnapshotMetadata {
        SnapshotMetadata {
            format_version: FORMAT_VERSION,
            kind: SnapshotKind::Savepoint,
            checkpoint_id: 1,
            job_name: "j".into(),
            created_at: "2026-01-01T00:00:00Z".into(),
            runtime_version: "0.1.0".into(),
            max_parallelism: 128,
            parallelism: 2,
            operators: ops,
            lineage: Vec::new(),
            commit_seq: None,
        }
    }

    fn old(uid: &str, kind: &str, state: StateDescriptor) -> OperatorMeta {
        OperatorMeta {
            uid: uid.into(),
            kind: kind.into(),
            parallelism: 2,
            state,
            subtasks: vec![],
        }
    }

    fn new(uid: &str, kind: &str, p: u32, state: StateDescriptor) -> GraphOperator {
        GraphOperator {
            uid: uid.into(),
            kind: kind.into(),
            parallelism: p,
            state,
        }
    }

    fn base() -> (SnapshotMetadata, Vec<GraphOperator>) {
        let w = keyed(&[("count", "Int64")], "Utf8");
        let m = meta(vec![
            old("src", "source", keyed(&[("position", "u64")], "split")),
            old("f", "filter", StateDescriptor::stateless()),
            old("agg", "windowAggregate", w.clone()),
            old("out", "print", StateDescriptor::stateless()),
        ]);
        let g = vec![
            new("src", "source", 2, keyed(&[("position", "u64")], "split")),
            new("f", "filter", 2, StateDescriptor::stateless()),
            new("agg", "windowAggregate", 2, w),
            new("out", "print", 2, StateDescriptor::stateless()),
        ];
        (m, g)
    }

    fn status(r: &PlanReport, uid: &str) -> OperatorStatus {
        r.operators.iter().find(|o| o.uid == uid).unwrap().status
    }

    #[test]
    fn unmodified_job_restores() {
        let (m, g) = base();
        let r = check_restore(&m, "p", &g, 128, false);
        assert!(r.compatible, "{}", r.to_text());
        assert_eq!(status(&r, "agg"), OperatorStatus::Restored);
        assert_eq!(status(&r, "f"), OperatorStatus::Restored);
    }

    #[test]
    fn added_and_removed_stateless_operators_are_fine() {
        let (m, mut g) = base();
        g.remove(1); // filter removed
        g.insert(1, new("p2", "project", 2, StateDescriptor::stateless()));
        let r = check_restore(&m, "p", &g, 128, false);
        assert!(r.compatible, "{}", r.to_text());
        assert_eq!(status(&r, "p2"), OperatorStatus::New);
        assert_eq!(status(&r, "f"), OperatorStatus::Dropped);
    }

    #[test]
    fn new_stateful_operator_starts_empty() {
        let (m, mut g) = base();
        g.insert(
            3,
            new("dd", "dedup", 2, keyed(&[("seen", "Int64")], "Utf8")),
        );
        let r = check_restore(&m, "p", &g, 128, false);
        assert!(r.compatible);
        assert_eq!(status(&r, "dd"), OperatorStatus::New);
        assert!(r.operators[3].reason.contains("empty"));
    }

    #[test]
    fn removed_stateful_uid_needs_allow_non_restored_state() {
        let (m, mut g) = base();
        g.remove(2);
        let r = check_restore(&m, "p", &g, 128, false);
        assert!(!r.compatible);
        assert_eq!(status(&r, "agg"), OperatorStatus::Incompatible);
        assert!(r.refusals()[0].starts_with("agg: "));
        assert!(r.refusals()[0].contains("allowNonRestoredState"));
        let r = check_restore(&m, "p", &g, 128, true);
        assert!(r.compatible, "{}", r.to_text());
        assert_eq!(status(&r, "agg"), OperatorStatus::Dropped);
    }

    #[test]
    fn a_newer_layout_reader_restores_older_state_but_not_the_reverse() {
        let (mut m, mut g) = base();
        let sink = |v: u32| {
            StateDescriptor::stateless().field("sinkState", format!("SinkSubtaskState/v{v}"))
        };
        m.operators.push(old("sink", "fileSink", sink(1)));
        g.push(new("sink", "fileSink", 2, sink(2)));
        let r = check_restore(&m, "p", &g, 128, false);
        assert!(r.compatible, "{}", r.to_text());
        assert_eq!(status(&r, "sink"), OperatorStatus::Restored);
        // downgrade: state written by v2 cannot be read by a v1 sink, refused before the restore
        let last = m.operators.len() - 1;
        m.operators[last].state = sink(2);
        let last = g.len() - 1;
        g[last].state = sink(1);
        let r = check_restore(&m, "p", &g, 128, true);
        assert!(!r.compatible);
        assert!(
            r.refusals()[0].contains("SinkSubtaskState/v2"),
            "{:?}",
            r.refusals()
        );
    }

    #[test]
    fn changed_state_type_is_incompatible_and_named() {
        let (m, mut g) = base();
        g[2].state = keyed(&[("count", "Utf8")], "Utf8");
        let r = check_restore(&m, "p", &g, 128, true);
        assert!(!r.compatible);
        assert!(
            r.refusals()[0].contains("state \"count\" changed type from Int64 to Utf8"),
            "{:?}",
            r.refusals()
        );
    }

    #[test]
    fn added_state_starts_empty_and_removed_state_is_refused() {
        let (m, mut g) = base();
        g[2].state = keyed(&[("sum_value", "Int64"), ("count", "Int64")], "Utf8");
        let r = check_restore(&m, "p", &g, 128, false);
        assert!(r.compatible, "{:?}", r.refusals());
        g[2].state = keyed(&[("sum_value", "Int64")], "Utf8");
        let r = check_restore(&m, "p", &g, 128, true);
        assert!(!r.compatible);
        assert!(
            r.refusals()[0].contains("state \"count\" (Int64) is no longer declared"),
            "{:?}",
            r.refusals()
        );
    }

    #[test]
    fn changed_key_type_is_incompatible() {
        let (m, mut g) = base();
        g[2].state = keyed(&[("count", "Int64")], "Int64");
        let r = check_restore(&m, "p", &g, 128, true);
        assert!(!r.compatible);
        assert!(r.refusals()[0].contains("key type changed from Utf8 to Int64"));
    }

    #[test]
    fn changed_operator_kind_is_incompatible() {
        let (m, mut g) = base();
        g[2] = new("agg", "dedup", 2, keyed(&[("count", "Int64")], "Utf8"));
        let r = check_restore(&m, "p", &g, 128, true);
        assert!(!r.compatible);
        assert!(r.refusals()[0].contains("kind changed"));
    }

    #[test]
    fn changed_max_parallelism_is_incompatible() {
        let (m, g) = base();
        let r = check_restore(&m, "p", &g, 256, true);
        assert!(!r.compatible);
        assert!(
            r.refusals()
                .iter()
                .any(|x| x.starts_with("agg: maxParallelism changed from 128 to 256"))
        );
    }

    #[test]
    fn changed_parallelism_is_fine() {
        let (m, mut g) = base();
        for op in &mut g {
            op.parallelism = 3;
        }
        let r = check_restore(&m, "p", &g, 128, false);
        assert!(r.compatible);
        assert!(
            r.operators[2]
                .reason
                .contains("rescaled from parallelism 2 to 3")
        );
    }

    #[test]
    fn stateful_uid_reused_by_stateless_operator_drops_state_only_when_allowed() {
        let (m, mut g) = base();
        g[2] = new("agg", "filter", 2, StateDescriptor::stateless());
        assert!(!check_restore(&m, "p", &g, 128, false).compatible);
        assert!(check_restore(&m, "p", &g, 128, true).compatible);
    }

    #[test]
    fn report_json_shape() {
        let (m, g) = base();
        let r = check_restore(&m, "p", &g, 128, false);
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["compatible"], true);
        assert_eq!(v["operators"][2]["uid"], "agg");
        assert_eq!(v["operators"][2]["status"], "restored");
        assert!(v["operators"][2]["reason"].is_string());
    }
}
