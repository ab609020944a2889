//! Observe what only our runtime shows: the control API of its running pods and the savepoint
//! in flight (the pods themselves are observed as for every engine, [`crate::engine::observe`]).

use super::RuntimeEngine;
use super::control::{ControlApi, Endpoint, SavepointState};
use crate::Result;
use crate::decide::{Observed, PodPhase, RuntimeObs};
use crate::engine::{JobScope, log_tail, observe_objects, running_runs};

pub(super) async fn observe<C: ControlApi>(
    engine: &RuntimeEngine<C>,
    scope: &JobScope<'_>,
) -> Result<Observed> {
    let JobScope { job, token, .. } = *scope;
    let (mut obs, pods_api) = observe_objects(scope).await?;
    // every run starts under an epoch of its own and a superseded one commits nothing more
    obs.runs_fenced = true;
    // A runtime that exited after stop-with-savepoint printed the path: read its log.
    let status = job.status.clone().unwrap_or_default();
    if status.pending_savepoint.as_ref().is_some_and(|p| p.stop)
        && let Some(active) = status.deployment.as_ref().and_then(|d| d.workload.clone())
        && let Some(p) = obs
            .pods
            .iter_mut()
            .find(|p| p.name == active && p.phase == PodPhase::Succeeded && p.message.is_none())
    {
        p.message = log_tail(&pods_api, &p.name).await;
    }
    // Control API of the runtime pods, concurrently.
    let port = engine.control_port;
    let timeout = engine.control_timeout;
    let targets = running_runs(&obs);
    let calls = targets.into_iter().map(|(name, ip)| async move {
        let ep = Endpoint::new(&ip, port, token);
        let r = match tokio::time::timeout(timeout, engine.control.status(&ep)).await {
            Ok(Ok(s)) => RuntimeObs::Status(Box::new(s)),
            Ok(Err(e)) => RuntimeObs::Unreachable(e.to_string()),
            Err(_) => RuntimeObs::Unreachable(format!("no answer within {timeout:?}")),
        };
        (name, r)
    });
    obs.runtime = futures::future::join_all(calls).await;
    tracing::debug!(pods = obs.pods.len(), runtime = ?obs.runtime, "observed");
    // The savepoint in flight, asked of the pod it was requested from.
    if let (Some(p), Some(active)) = (
        status.pending_savepoint.as_ref(),
        status.deployment.as_ref().and_then(|d| d.workload.clone()),
    ) && !p.request_id.is_empty()
        && let Some(ip) = obs.pod(&active).and_then(|p| p.ip.clone())
    {
        let ep = Endpoint::new(&ip, port, token);
        match tokio::time::timeout(timeout, engine.control.savepoint(&ep, &p.request_id)).await {
            Ok(Ok(s)) => obs.savepoint = Some(s),
            Ok(Err(e)) => tracing::debug!(error = %e, "cannot poll savepoint"),
            Err(_) => tracing::debug!("savepoint poll timed out"),
        }
    }
    if let Some(SavepointState::Completed { path }) = &obs.savepoint {
        tracing::info!(%path, "savepoint completed");
    }
    Ok(obs)
}
