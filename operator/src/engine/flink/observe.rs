//! Observe a Flink job: its pods (a JobManager per run, TaskManagers as the run's workers, check
//! and dispose pods), each JobManager's REST API mapped onto the engine-neutral [`JobStatus`],
//! the savepoint in flight polled by its trigger id, and the pre-check's verdict read into the
//! plan report the decision understands.

use chrono::{DateTime, SecondsFormat, Utc};
use streamjob_contract::plan::{OperatorReport, OperatorStatus, PlanReport};
use streamjob_contract::status::{RestoredFrom, RunState, Snapshot};

use super::FlinkEngine;
use super::plan::job_id;
use super::precheck::parse_verdict;
use super::rest::{CheckpointRef, FlinkRest, JobOverview, Operation};
use crate::Result;
use crate::decide::{JobStatus, SavepointState};
use crate::decide::{Observed, PodPhase, RuntimeObs};
use crate::engine::{JobScope, observe_objects, running_runs};
use crate::objects::PodRole;

pub(super) async fn observe(engine: &FlinkEngine, scope: &JobScope<'_>) -> Result<Observed> {
    let job = scope.job;
    let (mut obs, _) = observe_objects(scope).await?;
    // The pre-check's verdict, in the words of the plan report the decision reads.
    for p in obs.pods.iter_mut().filter(|p| {
        p.role == PodRole::Plan && matches!(p.phase, PodPhase::Succeeded | PodPhase::Failed)
    }) {
        p.message = p.message.as_deref().map(plan_report);
    }

    // Each JobManager's REST API, concurrently.
    let timeout = engine.timeout;
    let targets = running_runs(&obs);
    let calls = targets.into_iter().map(|(name, ip)| async move {
        let rest = engine.rest(&ip);
        let r = match tokio::time::timeout(timeout, job_status(&rest, &job_id(&name))).await {
            Ok(Ok(s)) => RuntimeObs::Status(Box::new(s)),
            Ok(Err(e)) => RuntimeObs::Unreachable(e.to_string()),
            Err(_) => RuntimeObs::Unreachable(format!("no answer within {timeout:?}")),
        };
        (name, r)
    });
    obs.runtime = futures::future::join_all(calls).await;
    tracing::debug!(pods = obs.pods.len(), runtime = ?obs.runtime, "observed Flink job");

    // The savepoint in flight, by the trigger id status holds (never triggered twice).
    let status = job.status.clone().unwrap_or_default();
    if let (Some(p), Some(active)) = (
        status.pending_savepoint.as_ref(),
        status.deployment.as_ref().and_then(|d| d.workload.clone()),
    ) && !p.request_id.is_empty()
        && let Some(ip) = obs.pod(&active).and_then(|p| p.ip.clone())
    {
        let rest = engine.rest(&ip);
        match tokio::time::timeout(timeout, rest.savepoint(&job_id(&active), &p.request_id)).await {
            Ok(Ok(op)) => obs.savepoint = Some(savepoint_state(op)),
            Ok(Err(e)) => tracing::debug!(error = %e, "cannot poll savepoint"),
            Err(_) => tracing::debug!("savepoint poll timed out"),
        }
    }
    Ok(obs)
}

/// A Flink operation as the decision reads a savepoint.
fn savepoint_state(op: Operation) -> SavepointState {
    match op {
        Operation::InProgress => SavepointState::Pending,
        Operation::Completed(Some(path)) => SavepointState::Completed { path },
        Operation::Completed(None) => SavepointState::Failed {
            error: "Flink reported the savepoint completed without a location".into(),
        },
        Operation::Failed(error) => SavepointState::Failed { error },
    }
}

/// One run's job as the decision sees a run: state, checkpoints, restore source, failure.
async fn job_status(rest: &FlinkRest, jid: &str) -> Result<JobStatus> {
    let jobs = rest.jobs().await?;
    let Some(job) = jobs.iter().find(|j| j.jid == jid) else {
        // The JobManager is up; application mode has not submitted the job yet.
        return Ok(JobStatus::new(RunState::Created));
    };
    let mut status = JobStatus::new(run_state(job));
    let checkpoints = rest.checkpoints(jid).await?;
    status.latest_checkpoint = checkpoints
        .latest_completed
        .as_ref()
        .filter(|c| c.is_savepoint != Some(true))
        .and_then(|c| snapshot(c, c.latest_ack_timestamp));
    status.last_savepoint = checkpoints
        .latest_savepoint
        .as_ref()
        .and_then(|c| snapshot(c, c.latest_ack_timestamp));
    status.restored_from = checkpoints.restored.as_ref().map(|r| RestoredFrom {
        kind: if r.is_savepoint == Some(true) {
            "savepoint".into()
        } else {
            "checkpoint".into()
        },
        path: r.external_path.clone(),
    });
    if let Ok(Some(n)) = rest.restarts(jid).await {
        status.restarts = n;
    }
    if matches!(
        status.state,
        RunState::Failed | RunState::Restarting | RunState::Unknown
    ) {
        status.failure = rest.latest_exception(jid).await.ok().flatten();
    }
    Ok(status)
}

/// Flink's job states onto the runtime's: RUNNING only once every task runs (a savepoint can
/// be taken then), scheduled or initializing tasks are still restoring.
fn run_state(job: &JobOverview) -> RunState {
    match job.state.as_str() {
        "RUNNING" if job.fully_running() => RunState::Running,
        "RUNNING" | "CREATED" | "INITIALIZING" | "RECONCILING" => RunState::Restoring,
        "FAILING" | "RESTARTING" => RunState::Restarting,
        "FAILED" => RunState::Failed,
        "CANCELLING" => RunState::Stopping,
        "CANCELED" => RunState::Cancelled,
        "FINISHED" => RunState::Finished,
        _ => RunState::Unknown,
    }
}

fn snapshot(c: &CheckpointRef, at_ms: Option<i64>) -> Option<Snapshot> {
    Some(Snapshot {
        id: Some(c.id),
        path: c.external_path.clone()?,
        completed_at: at_ms
            .and_then(DateTime::<Utc>::from_timestamp_millis)
            .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true)),
        duration_ms: c.end_to_end_duration,
    })
}

/// The pre-check's verdict line as the plan report the decision reads (`compatible`, and the
/// block reason naming each operator's uid, or its id where a Flink 1.x savepoint has no uid).
/// Anything else is passed on as it is (the decision reports it).
pub(super) fn plan_report(message: &str) -> String {
    let Ok(verdict) = parse_verdict(message) else {
        return message.to_string();
    };
    let (compatible, reasons) = match verdict.outcome(&[]) {
        Ok(()) => (true, Vec::new()),
        Err(why) => (false, vec![why]),
    };
    // what a compatible restore drops (allowNonRestoredState), named in status and an event
    let operators = if compatible {
        verdict
            .dropped()
            .into_iter()
            .map(|(uid, reason)| OperatorReport {
                uid,
                status: OperatorStatus::Dropped,
                reason,
            })
            .collect()
    } else {
        Vec::new()
    };
    let report = PlanReport {
        compatible,
        path: String::new(),
        operators,
        reasons,
        omitted: 0,
    };
    serde_json::to_string(&report).unwrap_or_else(|_| message.to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::decide::{PlanResult, PodObs, plan_result};

    #[test]
    fn flink_states_map_onto_the_decisions() {
        let job = |state: &str, running: u64| JobOverview {
            jid: "j".into(),
            name: "n".into(),
            state: state.into(),
            start_time: 0,
            tasks: [("total".to_string(), 4), ("running".to_string(), running)].into(),
        };
        assert_eq!(run_state(&job("RUNNING", 4)), RunState::Running);
        assert_eq!(run_state(&job("RUNNING", 2)), RunState::Restoring);
        let mut rescaled = job("RUNNING", 3);
        rescaled.tasks.insert("finished".into(), 1);
        assert_eq!(
            run_state(&rescaled),
            RunState::Running,
            "a source subtask without a split"
        );
        assert_eq!(run_state(&job("RESTARTING", 0)), RunState::Restarting);
        assert_eq!(run_state(&job("FINISHED", 0)), RunState::Finished);
        assert_eq!(run_state(&job("SUSPENDED", 0)), RunState::Unknown);
    }

    #[test]
    fn a_verdict_becomes_the_plan_report_the_decision_reads() {
        let refused = r#"{"verdict":"incompatible","flinkVersion":"1.20.0","formatVersion":4,"problems":[{"operatorId":"0da08f51eaa85fc298e176a139b3649a","uid":null,"kind":"unmapped-state","message":"no operator"}]}"#;
        let mut pod = PodObs::new("p", PodRole::Plan, PodPhase::Failed);
        pod.exit_code = Some(3);
        pod.message = Some(plan_report(&format!("log line\n{refused}")));
        match plan_result(&pod) {
            PlanResult::Incompatible(why) => {
                assert!(why.contains("0da08f51eaa85fc298e176a139b3649a"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        let mut ok = PodObs::new("p", PodRole::Plan, PodPhase::Succeeded);
        ok.exit_code = Some(0);
        ok.message = Some(plan_report(r#"{"verdict":"compatible"}"#));
        assert_eq!(plan_result(&ok), PlanResult::Compatible(Vec::new()));
        // allowNonRestoredState: what the restore drops is named, by uid and state
        ok.message = Some(plan_report(
            r#"{"verdict":"compatible","problems":[],"notRestored":[{"operatorId":"b864716503adbe27d91981bb81974494","uid":"audit"}],"droppedStates":[{"uid":"counter","state":"count","kind":"VALUE"}]}"#,
        ));
        match plan_result(&ok) {
            PlanResult::Compatible(dropped) => {
                assert_eq!(dropped.len(), 2, "{dropped:?}");
                assert!(
                    dropped[0].starts_with("uid audit: no operator"),
                    "{dropped:?}"
                );
                assert!(
                    dropped[1]
                        .starts_with("uid counter: state \"count\" (VALUE) is not registered"),
                    "{dropped:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        let snap = snapshot(
            &CheckpointRef {
                id: 7,
                external_path: Some("file:/ck/chk-7".into()),
                is_savepoint: Some(false),
                latest_ack_timestamp: Some(1_700_000_000_000),
                restore_timestamp: None,
                end_to_end_duration: Some(120),
            },
            Some(1_700_000_000_000),
        )
        .unwrap();
        assert_eq!(
            snap.completed_at.as_deref(),
            Some("2023-11-14T22:13:20.000Z")
        );
    }
}
