//! Property tests and time-bounded fuzz targets of what the operator reads from outside: the
//! runtime's control API answers, termination messages, and the decision function fed
//! arbitrary, stale and concurrent statuses and observations.
//!
//! `cargo test` runs a modest number of cases per target; with `STREAMJOB_FUZZ_SECONDS=N` (what
//! `cargo xtask fuzz` sets) each target runs batches of cases for N seconds. A failure prints
//! the shrunk input.
#![allow(clippy::unwrap_used)]

use std::fmt::Debug;

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::TestCaseError;

use crate::fuzz_loop::fuzz;
use crate::objects::PodRole;
use streamjob_crds::hash::deployment_hash;
use streamjob_crds::v1alpha1::{
    CheckpointInfo, DeploymentStatus, JobState, PendingSavepoint, Phase, SavepointInfo,
    StartedFrom, StreamJobSpec, StreamJobStatus, UpgradeStatus, UpgradeStrategy,
};

use crate::decide::{
    Action, Decision, JobRef, Kind, Observed, PlanResult, PodObs, PodPhase, RuntimeObs, Stage,
    Step, decide, legal, plan_result, savepoint_from_message,
};
use crate::decide::{JobStatus, RestoredFrom, RunState, SavepointState, Snapshot, SourceProblem};

// ---------------------------------------------------------------------------------------------
// The loop and byte mutations (the loop itself: fuzz_loop.rs, shared by every crate)
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Edit {
    Flip(Index, u8),
    Insert(Index, u8),
    Delete(Index),
    Truncate(Index),
    Special(Index, u8),
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    const SPECIAL: &[u8] = b"\"{}[],:\\0-.e\n";
    let edit = prop_oneof![
        (any::<Index>(), 0u8..8).prop_map(|(i, b)| Edit::Flip(i, b)),
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Edit::Insert(i, b)),
        any::<Index>().prop_map(Edit::Delete),
        any::<Index>().prop_map(Edit::Truncate),
        (any::<Index>(), proptest::sample::select(SPECIAL)).prop_map(|(i, b)| Edit::Special(i, b)),
    ];
    proptest::collection::vec(edit, 1..5)
}

fn apply(mut bytes: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        let n = bytes.len();
        match e {
            Edit::Flip(i, bit) if n > 0 => bytes[i.index(n)] ^= 1 << bit,
            Edit::Insert(i, b) => bytes.insert(i.index(n + 1), *b),
            Edit::Delete(i) if n > 0 => {
                bytes.remove(i.index(n));
            }
            Edit::Truncate(i) => bytes.truncate(i.index(n + 1)),
            Edit::Special(i, b) if n > 0 => bytes[i.index(n)] = *b,
            _ => {}
        }
    }
    bytes
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![3 => "[a-z0-9/_.:-]{0,16}", 1 => "\\PC{0,24}"]
}

// ---------------------------------------------------------------------------------------------
// Control API answers
// ---------------------------------------------------------------------------------------------

fn run_state() -> impl Strategy<Value = RunState> {
    proptest::sample::select(vec![
        RunState::Created,
        RunState::Standby,
        RunState::Restoring,
        RunState::Running,
        RunState::Stopping,
        RunState::Finished,
        RunState::Failed,
        RunState::Restarting,
        RunState::Cancelled,
        RunState::Unknown,
    ])
}

fn snapshot(paths: Vec<String>) -> impl Strategy<Value = Snapshot> {
    (
        proptest::option::of(any::<u64>()),
        proptest::sample::select(paths),
        proptest::option::of(text()),
        proptest::option::of(any::<u64>()),
    )
        .prop_map(|(id, path, completed_at, duration_ms)| Snapshot {
            id,
            path,
            completed_at,
            duration_ms,
        })
}

fn job_status() -> impl Strategy<Value = JobStatus> {
    let paths = vec![
        "s3://b/ck/clicks/5".to_string(),
        "s3://b/ck/clicks/6".to_string(),
        "s3://b/sp/clicks/savepoint-7".to_string(),
        String::new(),
    ];
    (
        run_state(),
        proptest::option::of((
            text(),
            proptest::option::of(proptest::sample::select(paths.clone())),
        )),
        proptest::option::of(snapshot(paths.clone())),
        proptest::option::of(snapshot(paths)),
        (any::<u64>(), any::<u64>(), any::<i32>(), any::<u64>()),
        proptest::option::of(text()),
        proptest::collection::vec((text(), text()), 0..3),
        proptest::option::of(any::<i64>()),
    )
        .prop_map(
            |(
                state,
                restored,
                latest,
                last_sp,
                (rin, rout, rate, restarts),
                failure,
                problems,
                lag,
            )| {
                JobStatus {
                    state,
                    restored_from: restored.map(|(kind, path)| RestoredFrom { kind, path }),
                    latest_checkpoint: latest,
                    last_savepoint: last_sp,
                    records_in: rin,
                    records_out: rout,
                    // exact in binary: JSON carries it unchanged
                    records_in_per_second: f64::from(rate) / 4.0,
                    restarts,
                    failure,
                    problems: problems
                        .into_iter()
                        .map(|(uid, message)| SourceProblem { uid, message })
                        .collect(),
                    consumer_lag: lag,
                }
            },
        )
}

/// `GET /v1/status` answers: what a runtime sends reads back equal; mutated answers read or are
/// refused, never a panic.
#[test]
fn fuzz_control_status() {
    fuzz(
        "control_status",
        256,
        (job_status(), edits()),
        |(js, edits)| {
            let bytes = serde_json::to_vec(&js).unwrap();
            let back: JobStatus = serde_json::from_slice(&bytes).unwrap();
            prop_assert_eq!(&back, &js);
            let _ = serde_json::from_slice::<JobStatus>(&apply(bytes, &edits));
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------
// Termination messages
// ---------------------------------------------------------------------------------------------

/// Log lines that are not a savepoint message.
fn noise() -> impl Strategy<Value = Vec<String>> {
    proptest::collection::vec(
        prop_oneof![
            "[a-zA-Z0-9 :=.,]{0,40}",
            Just("{\"level\":\"INFO\",\"fields\":{\"message\":\"stopped\"}}".to_string()),
            Just("error: the store is unreachable".to_string()),
        ],
        0..3,
    )
}

/// The runtime's plan report (`runtime/src/termination.rs`) as it writes it.
fn plan_report(ops: &[(String, u8)]) -> String {
    let statuses = ["restored", "new", "dropped", "incompatible"];
    serde_json::json!({
        "compatible": false,
        "path": "s3://b/sp/clicks/savepoint-7",
        "operators": ops.iter().map(|(uid, s)| serde_json::json!({
            "uid": uid, "status": statuses[usize::from(*s % 4)], "reason": "state type changed"
        })).collect::<Vec<_>>(),
    })
    .to_string()
}

/// Termination messages: the savepoint path written by a runtime (JSON, or the `savepoint:` line
/// of its output) is read back exactly, after any log lines; an incompatible plan names every
/// refused uid; any message yields a plan result, never a panic.
#[test]
fn fuzz_termination_messages() {
    let ops = proptest::collection::vec(("[a-z0-9-]{1,12}", any::<u8>()), 0..6);
    let inputs = ("\\PC{1,40}", noise(), ops, "\\PC{0,200}", any::<i32>());
    fuzz(
        "termination_messages",
        512,
        inputs,
        |(path, before, ops, garbage, code)| {
            let json = serde_json::json!({ "savepoint": path }).to_string();
            let message = [before.clone(), vec![json]].concat().join("\n");
            prop_assert_eq!(savepoint_from_message(&message), Some(path.clone()));
            if !path.contains(['\n', '\r']) && !path.trim().is_empty() {
                let line = [before.clone(), vec![format!("savepoint: {path}")]]
                    .concat()
                    .join("\n");
                prop_assert_eq!(savepoint_from_message(&line), Some(path.trim().to_string()));
            }
            let _ = savepoint_from_message(&garbage);

            let mut pod = PodObs::new("clicks-plan", PodRole::Plan, PodPhase::Failed);
            pod.exit_code = Some(3);
            pod.message = Some(plan_report(&ops));
            match plan_result(&pod) {
                PlanResult::Incompatible(why) => {
                    for (uid, _) in ops.iter().filter(|(_, s)| s % 4 == 3) {
                        prop_assert!(
                            why.contains(&format!("uid {uid}: incompatible")),
                            "{} not named: {}",
                            uid,
                            why
                        );
                    }
                }
                other => prop_assert!(false, "exit 3 read as {:?}", other),
            }
            for message in [Some(garbage), None] {
                for phase in [PodPhase::Failed, PodPhase::Succeeded, PodPhase::Running] {
                    let mut pod = PodObs::new("clicks-plan", PodRole::Plan, phase);
                    pod.exit_code = Some(code);
                    pod.message = message.clone();
                    let _ = plan_result(&pod);
                }
            }
            Ok(())
        },
    );
}

/// As the controller reads a plan pod without a termination message: its log tail, where JSON
/// log lines may follow the report.
#[test]
fn fuzz_plan_report_in_a_log_tail() {
    let ops = proptest::collection::vec(("[a-z0-9-]{1,12}", Just(3u8)), 1..4);
    fuzz(
        "plan_report_in_a_log_tail",
        64,
        (noise(), ops, noise()),
        |(before, ops, after)| {
            let mut pod = PodObs::new("clicks-plan", PodRole::Plan, PodPhase::Failed);
            pod.exit_code = Some(3);
            pod.message = Some([before, vec![plan_report(&ops)], after].concat().join("\n"));
            match plan_result(&pod) {
                PlanResult::Incompatible(why) => {
                    for (uid, _) in &ops {
                        prop_assert!(
                            why.contains(&format!("uid {uid}: incompatible")),
                            "{} not named: {}",
                            uid,
                            why
                        );
                    }
                }
                other => prop_assert!(false, "exit 3 read as {:?}", other),
            }
            Ok(())
        },
    );
}

mod decision;
