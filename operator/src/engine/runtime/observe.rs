//! Observe: the pods of a job, their runtimes' control API and the savepoint in flight, as the
//! decision sees them.

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, LogParams};
use kube::{Client, ResourceExt};
use streamjob_crds::v1alpha1::{StreamJob, StreamJobSpec};

use super::RuntimeEngine;
use crate::control::{ControlApi, Endpoint, SavepointState};
use crate::decide::{
    self, LABEL_HASH, LABEL_ROLE, Observed, PodObs, PodPhase, PodRole, RuntimeObs,
};
use crate::engine::JobScope;
use crate::resources::{self, Owner};
use crate::workers;
use crate::{Error, Result};

/// The most the operator reads of a pod's log (a plan report, a savepoint path): one tenant's
/// pod must not make the operator that serves every namespace hold its whole log.
const LOG_LIMIT_BYTES: i64 = 64 << 10;

/// A pod as the decision sees it.
pub fn observe_pod(pod: &Pod) -> Option<PodObs> {
    let labels = pod.metadata.labels.as_ref()?;
    let role = PodRole::parse(labels.get(LABEL_ROLE)?)?;
    let status = pod.status.as_ref();
    let phase = match status.and_then(|s| s.phase.as_deref()) {
        Some("Pending") | None => PodPhase::Pending,
        Some("Running") => PodPhase::Running,
        Some("Succeeded") => PodPhase::Succeeded,
        Some("Failed") => PodPhase::Failed,
        Some(_) => PodPhase::Unknown,
    };
    let container = resources::main_container(pod);
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    let terminated = container.and_then(|c| {
        c.state
            .as_ref()
            .and_then(|s| s.terminated.clone())
            .or_else(|| c.last_state.as_ref().and_then(|s| s.terminated.clone()))
    });
    let final_state = matches!(phase, PodPhase::Succeeded | PodPhase::Failed);
    Some(PodObs {
        name: pod.metadata.name.clone()?,
        role,
        spec_hash: labels.get(LABEL_HASH).cloned(),
        phase,
        ready,
        terminating: pod.metadata.deletion_timestamp.is_some(),
        deletion_due: pod
            .metadata
            .deletion_timestamp
            .as_ref()
            .and_then(|t| DateTime::from_timestamp_millis(t.0.as_millisecond())),
        created: pod
            .metadata
            .creation_timestamp
            .as_ref()
            .and_then(|t| DateTime::from_timestamp_millis(t.0.as_millisecond())),
        restarts: container.map(|c| c.restart_count).unwrap_or(0),
        waiting_reason: container
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.waiting.as_ref())
            .and_then(|w| w.reason.clone()),
        exit_code: terminated
            .as_ref()
            .filter(|_| final_state)
            .map(|t| t.exit_code),
        last_exit_code: terminated.as_ref().map(|t| t.exit_code),
        // what ended it, else why it waits (a pull failure names the image), else the pod's word
        message: terminated
            .as_ref()
            .and_then(|t| t.message.clone())
            .or_else(|| {
                container
                    .and_then(|c| c.state.as_ref())
                    .and_then(|s| s.waiting.as_ref())
                    .and_then(|w| w.message.clone())
            })
            .or_else(|| status.and_then(|s| s.message.clone()))
            // not scheduled: the scheduler's reason ("0/3 nodes are available: …")
            .or_else(|| {
                status
                    .and_then(|s| s.conditions.as_ref())
                    .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
                    .filter(|c| c.status == "False")
                    .and_then(|c| c.message.clone())
            }),
        ip: status
            .and_then(|s| s.pod_ip.clone())
            .filter(|ip| !ip.is_empty()),
        killed_and_held_back: container.is_some_and(crate::workers::killed_and_held_back),
    })
}

pub(super) async fn observe<C: ControlApi>(
    engine: &RuntimeEngine<C>,
    scope: &JobScope<'_>,
) -> Result<Observed> {
    let JobScope { job, token, .. } = *scope;
    let (mut obs, pods_api) = observe_objects(scope).await?;
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

/// What every engine observes alike: the job's pods as the decision sees them (a finished plan
/// pod without a termination message gets its log tail instead, as real kubelets keep none on
/// success), the worker planning's view of them, the recovered-savepoint annotation and the
/// versions whose ConfigMaps exist. Returns the pods API for further reads.
pub(crate) async fn observe_objects(scope: &JobScope<'_>) -> Result<(Observed, Api<Pod>)> {
    let JobScope {
        client, job, owner, ..
    } = *scope;
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &owner.namespace);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &owner.namespace);
    let lp = ListParams::default().labels(&resources::selector(&owner.name));
    let pod_list = pods_api.list(&lp).await?;
    let mut obs = Observed::new(Utc::now());
    obs.generation = job.metadata.generation;
    for pod in &pod_list.items {
        if let Some(mut p) = observe_pod(pod) {
            if p.role == PodRole::Plan
                && matches!(p.phase, PodPhase::Succeeded | PodPhase::Failed)
                && p.message.is_none()
            {
                p.message = log_tail(&pods_api, &p.name).await;
            }
            obs.pods.push(p);
        }
    }
    (obs.coordinators, obs.workers) = workers::observe(&pod_list.items);
    obs.recovered_savepoint = job
        .annotations()
        .get(decide::ANNOTATION_RECOVERED_SAVEPOINT)
        .cloned()
        .filter(|p| !p.is_empty());
    obs.config_hashes = cms
        .list(&lp)
        .await?
        .items
        .iter()
        .filter_map(|c| c.metadata.labels.as_ref()?.get(LABEL_HASH).cloned())
        .collect();
    Ok((obs, pods_api))
}

/// The runs whose engine can be asked how their job is: (pod name, pod IP) of running,
/// non-terminating run pods.
pub(crate) fn running_runs(obs: &Observed) -> Vec<(String, String)> {
    obs.pods
        .iter()
        .filter(|p| p.role == PodRole::Runtime && !p.terminating && p.phase == PodPhase::Running)
        .filter_map(|p| Some((p.name.clone(), p.ip.clone()?)))
        .collect()
}

/// The end of a finished pod's log, where a runtime prints its result when the kubelet keeps no
/// termination message; `None` if it cannot be read.
pub(crate) async fn log_tail(pods: &Api<Pod>, name: &str) -> Option<String> {
    let params = LogParams {
        tail_lines: Some(50),
        limit_bytes: Some(LOG_LIMIT_BYTES),
        ..Default::default()
    };
    pods.logs(name, &params).await.ok()
}

/// The spec a deployed hash was created from (its manifest ConfigMap).
pub(crate) async fn spec_of_hash(
    client: &Client,
    owner: &Owner,
    hash: &str,
) -> Result<StreamJobSpec> {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &owner.namespace);
    let cm = cms.get(&decide::config_name(&owner.name, hash)).await?;
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get(resources::MANIFEST_KEY))
        .ok_or_else(|| {
            Error::Object(format!(
                "ConfigMap {} has no {}",
                decide::config_name(&owner.name, hash),
                resources::MANIFEST_KEY
            ))
        })?;
    StreamJob::from_yaml(text)
        .map(|j| j.spec)
        .map_err(|e| Error::Object(format!("manifest of deployment {hash}: {e}")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn pods_are_observed() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "clicks-1", "labels": {"streamjob.io/role": "runtime", "streamjob.io/spec-hash": "h"}},
            "status": {
                "phase": "Running", "podIP": "127.0.1.5",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{
                    "name": "runtime", "ready": true, "restartCount": 2, "image": "i", "imageID": "",
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": {"exitCode": 1, "message": "boom"}}
                }]
            }
        }))
        .unwrap();
        let p = observe_pod(&pod).unwrap();
        assert_eq!(p.role, PodRole::Runtime);
        assert_eq!(p.spec_hash.as_deref(), Some("h"));
        assert_eq!(p.phase, PodPhase::Running);
        assert!(p.ready);
        assert_eq!(p.restarts, 2);
        assert!(p.crash_looping());
        assert_eq!(p.exit_code, None);
        assert_eq!(p.message.as_deref(), Some("boom"));
        assert_eq!(p.ip.as_deref(), Some("127.0.1.5"));

        let plan: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "clicks-plan-1", "labels": {"streamjob.io/role": "plan"}},
            "status": {"phase": "Failed", "containerStatuses": [{
                "name": "runtime", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
                "state": {"terminated": {"exitCode": 3, "message": "{\"operators\":[]}"}}
            }]}
        }))
        .unwrap();
        let p = observe_pod(&plan).unwrap();
        assert_eq!((p.phase, p.exit_code), (PodPhase::Failed, Some(3)));
        let unlabelled: Pod =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "x"}})).unwrap();
        assert!(observe_pod(&unlabelled).is_none());
    }
}
