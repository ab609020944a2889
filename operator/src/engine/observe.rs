//! What every engine observes alike: the job's pods as the decision sees them, the worker
//! planning's view of them, the versions whose manifest ConfigMaps exist, and the manifest of a
//! version. An adapter adds what only it can see (our runtime's control API, Flink's REST API).

use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{ConfigMap, ContainerStatus, Pod};
use kube::api::{Api, ListParams, LogParams};
use kube::{Client, ResourceExt};
use streamjob_crds::v1alpha1::{StreamJob, StreamJobSpec};

use super::JobScope;
use crate::decide::{CoordinatorObs, Observed, PodObs, PodPhase, WorkerObs};
use crate::objects::names::config_name;
use crate::objects::template::RUNTIME_CONTAINER;
use crate::objects::{
    ANNOTATION_COORDINATOR_UID, ANNOTATION_RECOVERED_SAVEPOINT, ANNOTATION_WORKERS,
    LABEL_COORDINATOR, LABEL_HASH, LABEL_ROLE, MANIFEST_KEY, Owner, PodRole, ROLE_WORKER,
    main_container, selector,
};
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
    let container = main_container(pod);
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
        killed_and_held_back: container.is_some_and(killed_and_held_back),
    })
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
    let lp = ListParams::default().labels(&selector(&owner.name));
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
    (obs.coordinators, obs.workers) = observe_workers(&pod_list.items);
    obs.recovered_savepoint = job
        .annotations()
        .get(ANNOTATION_RECOVERED_SAVEPOINT)
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
    let cm = cms.get(&config_name(&owner.name, hash)).await?;
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get(MANIFEST_KEY))
        .ok_or_else(|| Error::NoVersionManifest {
            config_map: config_name(&owner.name, hash),
            key: MANIFEST_KEY,
        })?;
    StreamJob::from_yaml(text)
        .map(|j| j.spec)
        .map_err(|source| Error::BadVersionManifest {
            hash: hash.to_string(),
            source,
        })
}

/// The shortest restart delay of the kubelet for which replacing the pod is quicker: a new pod
/// is scheduled and started in a few seconds.
pub const REPLACE_AFTER_BACK_OFF: Duration = Duration::from_secs(10);

/// The pod's main container was killed from outside (SIGKILL, exit 137, and not by the kernel's OOM
/// killer) and the kubelet holds its restart in CrashLoopBackOff for at least
/// [`REPLACE_AFTER_BACK_OFF`]. A real kubelet doubles that delay for every exit within ten
/// minutes of the last, from 10 s to 5 min: a process killed a few times (a node agent, a
/// person, a test) would leave the job's output stalled for minutes after the kill itself was
/// over. Such a pod is replaced; the new one resumes from the latest checkpoint at once. An
/// OOMKilled container keeps the kubelet's back-off: it would be killed again (Degraded says so).
pub fn killed_and_held_back(c: &ContainerStatus) -> bool {
    let killed = c
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .is_some_and(|t| t.exit_code == 137 && t.reason.as_deref() != Some("OOMKilled"));
    let held_back = c
        .state
        .as_ref()
        .and_then(|s| s.waiting.as_ref())
        .filter(|w| w.reason.as_deref() == Some("CrashLoopBackOff"))
        .and_then(|w| back_off(w.message.as_deref()?))
        .is_some_and(|delay| delay >= REPLACE_AFTER_BACK_OFF);
    killed && held_back
}

/// The delay in the kubelet's message `back-off 40s restarting failed container=…` (`5m0s`).
fn back_off(message: &str) -> Option<Duration> {
    let delay = message
        .strip_prefix("back-off ")?
        .split_whitespace()
        .next()?;
    streamjob_crds::units::parse_duration("back-off", delay).ok()
}

/// The line of a container's last words (its termination message, the log's tail for Flink's
/// containers) most worth an event: the last naming an exception or error (a JVM's cause, e.g.
/// Flink refusing its memory configuration), else the last one; sanitized and capped, as it
/// comes from the tenant's image.
fn last_words(message: &str) -> Option<String> {
    let lines: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let line = lines
        .iter()
        .rev()
        .find(|l| l.contains("Exception") || l.contains("Error"))
        .or(lines.last())?;
    Some(crate::http::sanitize_remote(line, 300))
}

/// Why a worker pod ended, if it did (phase `Failed` or `Succeeded`, or its killed container
/// held back): the container's reason and exit code (`OOMKilled, exit 137`), else the pod's
/// (`Evicted`), in words short enough for an event.
fn why_ended(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref();
    let container = main_container(pod);
    if container.is_some_and(killed_and_held_back) {
        return Some("killed, and its restart held back by the kubelet".into());
    }
    if !matches!(
        status.and_then(|s| s.phase.as_deref()),
        Some("Failed") | Some("Succeeded")
    ) {
        return None;
    }
    let terminated = container
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.as_ref());
    Some(
        match (terminated, status.and_then(|s| s.reason.as_deref())) {
            (Some(t), _) => {
                let reason = t.reason.as_deref().unwrap_or("terminated");
                match t.message.as_deref().and_then(last_words) {
                    Some(words) => format!("{reason}, exit {}: {words}", t.exit_code),
                    None => format!("{reason}, exit {}", t.exit_code),
                }
            }
            (None, Some(reason)) => reason.to_string(),
            (None, None) => "ended".into(),
        },
    )
}

/// The worker planning's view of the job's pods (coordinators by their role label, workers by
/// theirs).
pub fn observe_workers(pods: &[Pod]) -> (Vec<CoordinatorObs>, Vec<WorkerObs>) {
    let mut coordinators = Vec::new();
    let mut workers = Vec::new();
    for pod in pods {
        let Some(labels) = pod.metadata.labels.as_ref() else {
            continue;
        };
        let Some(name) = pod.metadata.name.clone() else {
            continue;
        };
        let terminating = pod.metadata.deletion_timestamp.is_some();
        match labels.get(LABEL_ROLE).map(String::as_str) {
            Some("runtime") => {
                let status = pod.status.as_ref();
                let phase = status.and_then(|s| s.phase.as_deref());
                coordinators.push(CoordinatorObs {
                    name,
                    uid: pod.metadata.uid.clone().unwrap_or_default(),
                    hash: labels.get(LABEL_HASH).cloned().unwrap_or_default(),
                    ip: status
                        .and_then(|s| s.pod_ip.clone())
                        .filter(|ip| !ip.is_empty()),
                    workers: coordinator_workers(pod),
                    live: !terminating && matches!(phase, Some("Running") | Some("Pending")),
                });
            }
            Some(ROLE_WORKER) => workers.push(WorkerObs {
                ended: why_ended(pod),
                name,
                coordinator: labels.get(LABEL_COORDINATOR).cloned().unwrap_or_default(),
                coordinator_uid: pod
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(ANNOTATION_COORDINATOR_UID))
                    .cloned()
                    .unwrap_or_default(),
                terminating,
            }),
            _ => {}
        }
    }
    (coordinators, workers)
}

/// The number of workers a coordinator pod expects: its [`ANNOTATION_WORKERS`] (a Flink
/// JobManager), else the `--workers` argument of its main container (our runtime's coordinator).
fn coordinator_workers(pod: &Pod) -> u32 {
    if let Some(n) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_WORKERS))
    {
        return n.parse().unwrap_or(0);
    }
    let args = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == RUNTIME_CONTAINER))
        .and_then(|c| c.args.as_ref());
    args.and_then(|a| {
        a.iter()
            .position(|x| x == "--workers")
            .and_then(|i| a.get(i + 1))
            .and_then(|n| n.parse().ok())
    })
    .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A TaskManager that could not start is replaced with the JVM's cause in the event, not
    /// the log's last line.
    #[test]
    fn a_failed_worker_says_why() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "j-1-w0", "labels": {"streamjob.io/role": "worker"}},
            "status": {"phase": "Failed", "containerStatuses": [{
                "name": "taskmanager", "image": "i", "imageID": "", "ready": false,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 1, "reason": "Error", "message":
                    "Exception in thread \"main\" IllegalConfigurationException: TaskManager memory configuration failed\n\
                     \tat org.apache.flink.X.y(X.java:1)\n\
                     Caused by: IllegalConfigurationException: Sum of configured Framework Heap Memory exceed configured Total Flink Memory (320.000mb)\n\
                     \t... 3 more\n\
                     BashJavaUtils GET_TM_RESOURCE_PARAMS printed no memory options\n"}}
            }]}
        }))
        .unwrap();
        let why = why_ended(&pod).unwrap();
        assert_eq!(
            why,
            "Error, exit 1: Caused by: IllegalConfigurationException: Sum of configured Framework \
             Heap Memory exceed configured Total Flink Memory (320.000mb)"
        );
        let oom: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "j-1-w0", "labels": {"streamjob.io/role": "worker"}},
            "status": {"phase": "Failed", "containerStatuses": [{
                "name": "taskmanager", "image": "i", "imageID": "", "ready": false,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
            }]}
        }))
        .unwrap();
        assert_eq!(why_ended(&oom).as_deref(), Some("OOMKilled, exit 137"));
    }

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

    /// A container killed from outside and held back by the kubelet for 10 s or more: replace
    /// the pod. A short back-off, an OOM kill or a crash of its own: leave it to the kubelet.
    #[test]
    fn a_killed_container_held_back_by_the_kubelet_is_replaced() {
        let pod = |exit: i32, reason: &str, message: &str| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "j-1-w0"},
                "status": {"phase": "Running", "containerStatuses": [{
                    "name": RUNTIME_CONTAINER, "image": "i", "imageID": "", "ready": false,
                    "restartCount": 3,
                    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": message}},
                    "lastState": {"terminated": {"exitCode": exit, "reason": reason}}
                }]}
            }))
            .unwrap()
        };
        // read as the decision and the worker planning read it: the pod's main container
        let held = |p: &Pod| main_container(p).is_some_and(killed_and_held_back);
        let kubelet = |delay: &str| {
            format!("back-off {delay} restarting failed container=runtime pod=j-1-w0_ns(uid)")
        };
        assert!(held(&pod(137, "Error", &kubelet("40s"))));
        assert!(held(&pod(137, "Error", &kubelet("5m0s"))));
        assert!(held(&pod(
            137,
            "Error",
            "back-off 16s restarting failed container"
        )));
        assert!(!held(&pod(137, "Error", &kubelet("5s"))));
        assert!(!held(&pod(137, "OOMKilled", &kubelet("40s"))));
        assert!(!held(&pod(1, "Error", &kubelet("40s"))));
        assert!(!held(&pod(137, "Error", "something else")));
    }
}
