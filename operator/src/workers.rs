//! Worker pods (`spec.workers`): each live coordinator pod gets its own workers, which register
//! with it at its pod IP; workers of a coordinator that is gone, terminating or finished are
//! deleted.
//!
//! [`crate::decide`] turns [`plan_workers`] into actions of the same decision (`AddWorker`,
//! `Remove`), outside the upgrade stages on purpose: the stages move coordinator pods between
//! versions, and every coordinator pod brings its workers along. A shadow upgrade's
//! standby coordinator gets its workers while the old one keeps its own, so the old version stays
//! warm, workers included, for an instant rollback.
//!
//! Worker pods restart always (`restartPolicy: Always`): a worker holds no state, a restarted one
//! registers again and the coordinator restarts the job from its latest checkpoint.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, ContainerPort, ContainerStatus, EnvVar, Pod};
use streamjob_crds::v1alpha1::StreamJobSpec;

use crate::decide::{LABEL_HASH, LABEL_ROLE, token_secret_name};
use crate::resources::{CONTAINER, MANIFEST_ENV, Owner, TOKEN_ENV, TOKEN_KEY, main_container};

/// Role label value of worker pods (the upgrade state machine never sees them).
pub const ROLE_WORKER: &str = "worker";
/// Label of a worker pod: the name of its coordinator pod.
pub const LABEL_COORDINATOR: &str = "streamjob.io/coordinator";
/// Annotation of a worker pod: the uid of its coordinator pod (a recreated coordinator of the
/// same name is another coordinator).
pub const ANNOTATION_COORDINATOR_UID: &str = "streamjob.io/coordinator-uid";
/// Annotation of a coordinator pod of another engine (a Flink JobManager): the workers it
/// expects (our runtime passes `--workers`).
pub const ANNOTATION_WORKERS: &str = "streamjob.io/workers";
/// Where coordinators accept workers (`--cluster-addr 0.0.0.0:6123`).
pub const CLUSTER_PORT: u16 = 6123;
/// Where workers accept data from each other.
pub const DATA_PORT: u16 = 6121;

/// A runtime (coordinator) pod as the worker planning sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct CoordinatorObs {
    pub name: String,
    pub uid: String,
    pub hash: String,
    pub ip: Option<String>,
    /// Workers it expects (from its spec).
    pub workers: u32,
    /// Running (or starting) and not terminating: it may need workers.
    pub live: bool,
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

/// A worker pod.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerObs {
    pub name: String,
    pub coordinator: String,
    pub coordinator_uid: String,
    pub terminating: bool,
    /// The pod ended (`Failed` or `Succeeded`: evicted, or a container that may not restart), or
    /// its killed container is held back by the kubelet ([`killed_and_held_back`]): it is
    /// replaced.
    pub ended: bool,
}

/// What to do about worker pods.
#[derive(Clone, Debug, PartialEq)]
pub enum WorkerAction {
    /// Create worker `index` of coordinator `coordinator`.
    Create {
        coordinator: String,
        index: u32,
    },
    Delete {
        name: String,
    },
}

/// Name of worker `index` of a coordinator pod.
pub fn worker_name(coordinator: &str, index: u32) -> String {
    format!("{coordinator}-w{index}")
}

fn index_of(worker: &str, coordinator: &str) -> Option<u32> {
    worker
        .strip_prefix(coordinator)?
        .strip_prefix("-w")?
        .parse()
        .ok()
}

/// Pure: the worker pods to create and delete.
pub fn plan_workers(coordinators: &[CoordinatorObs], workers: &[WorkerObs]) -> Vec<WorkerAction> {
    let mut actions = Vec::new();
    for w in workers.iter().filter(|w| !w.terminating) {
        let keep = !w.ended
            && coordinators.iter().any(|c| {
                c.name == w.coordinator
                    && c.uid == w.coordinator_uid
                    && c.live
                    && index_of(&w.name, &c.name).is_some_and(|i| i < c.workers)
            });
        if !keep {
            actions.push(WorkerAction::Delete {
                name: w.name.clone(),
            });
        }
    }
    for c in coordinators.iter().filter(|c| c.live && c.ip.is_some()) {
        for index in 0..c.workers {
            let name = worker_name(&c.name, index);
            // a terminating worker of the same name goes first (names are unique)
            if !workers.iter().any(|w| w.name == name) {
                actions.push(WorkerAction::Create {
                    coordinator: c.name.clone(),
                    index,
                });
            }
        }
    }
    actions
}

/// Reads the worker planning's view of the job's pods.
pub fn observe(pods: &[Pod]) -> (Vec<CoordinatorObs>, Vec<WorkerObs>) {
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
                ended: matches!(
                    pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Failed") | Some("Succeeded")
                ) || main_container(pod).is_some_and(killed_and_held_back),
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

/// The number of workers a coordinator pod was started with (its `--workers` argument, or the
/// annotation another engine's coordinator carries).
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
        .and_then(|s| s.containers.iter().find(|c| c.name == CONTAINER))
        .and_then(|c| c.args.as_ref());
    args.and_then(|a| {
        a.iter()
            .position(|x| x == "--workers")
            .and_then(|i| a.get(i + 1))
            .and_then(|n| n.parse().ok())
    })
    .unwrap_or(0)
}

/// Worker `index` of `coordinator`: the coordinator's image and spec (by its hash), connecting to
/// the coordinator's pod IP.
pub fn worker_pod(
    owner: &Owner,
    coordinator: &CoordinatorObs,
    index: u32,
    spec: &StreamJobSpec,
) -> Option<Pod> {
    let ip = coordinator.ip.as_ref()?;
    let args = vec![
        "worker".to_string(),
        format!("env:{MANIFEST_ENV}"),
        "--coordinator".into(),
        format!("{ip}:{CLUSTER_PORT}"),
        "--data-addr".into(),
        format!("0.0.0.0:{DATA_PORT}"),
        "--advertise-host".into(),
        "$(POD_IP)".into(),
    ];
    let mut env = crate::resources::common_env(owner, &coordinator.hash, spec);
    env.push(crate::resources::secret_env(
        TOKEN_ENV,
        &token_secret_name(&owner.name),
        TOKEN_KEY,
    ));
    env.push(EnvVar {
        name: "STREAMJOB_COORDINATOR".into(),
        value: Some(coordinator.name.clone()),
        ..Default::default()
    });
    let container = Container {
        name: CONTAINER.into(),
        image: Some(spec.image.clone()),
        image_pull_policy: spec.image_pull_policy.clone(),
        args: Some(args),
        env: Some(env),
        ports: Some(vec![ContainerPort {
            name: Some("data".into()),
            container_port: i32::from(DATA_PORT),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    };
    let mut pod = crate::resources::pod_from_template(
        owner,
        &worker_name(&coordinator.name, index),
        None,
        &coordinator.hash,
        spec,
        container,
        "Always",
    );
    let labels: &mut BTreeMap<String, String> = pod.metadata.labels.get_or_insert_default();
    labels.insert(LABEL_ROLE.into(), ROLE_WORKER.into());
    labels.insert(LABEL_COORDINATOR.into(), coordinator.name.clone());
    pod.metadata
        .annotations
        .get_or_insert_default()
        .insert(ANNOTATION_COORDINATOR_UID.into(), coordinator.uid.clone());
    Some(pod)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coord(name: &str, workers: u32, live: bool) -> CoordinatorObs {
        CoordinatorObs {
            name: name.into(),
            uid: format!("uid-{name}"),
            hash: "h1".into(),
            ip: Some("10.0.0.7".into()),
            workers,
            live,
        }
    }

    fn worker(coordinator: &str, index: u32) -> WorkerObs {
        WorkerObs {
            name: worker_name(coordinator, index),
            coordinator: coordinator.into(),
            coordinator_uid: format!("uid-{coordinator}"),
            terminating: false,
            ended: false,
        }
    }

    #[test]
    fn a_live_coordinator_gets_its_missing_workers() {
        let a = plan_workers(&[coord("j-1", 3, true)], &[worker("j-1", 1)]);
        assert_eq!(
            a,
            vec![
                WorkerAction::Create {
                    coordinator: "j-1".into(),
                    index: 0
                },
                WorkerAction::Create {
                    coordinator: "j-1".into(),
                    index: 2
                },
            ]
        );
        // complete: nothing to do
        let all: Vec<_> = (0..3).map(|i| worker("j-1", i)).collect();
        assert!(plan_workers(&[coord("j-1", 3, true)], &all).is_empty());
    }

    /// An evicted worker, or a Flink TaskManager whose pod failed, is deleted and then made
    /// again (a name is reused only once the old pod is gone).
    #[test]
    fn an_ended_worker_is_replaced() {
        let mut failed = worker("j-1", 0);
        failed.ended = true;
        assert_eq!(
            plan_workers(&[coord("j-1", 1, true)], &[failed.clone()]),
            vec![WorkerAction::Delete {
                name: "j-1-w0".into()
            }]
        );
        failed.terminating = true;
        assert!(plan_workers(&[coord("j-1", 1, true)], &[failed]).is_empty());
        assert_eq!(
            plan_workers(&[coord("j-1", 1, true)], &[]),
            vec![WorkerAction::Create {
                coordinator: "j-1".into(),
                index: 0
            }]
        );
    }

    /// A container killed from outside and held back by the kubelet for 10 s or more: replace
    /// the pod. A short back-off, an OOM kill or a crash of its own: leave it to the kubelet.
    #[test]
    fn a_killed_container_held_back_by_the_kubelet_is_replaced() {
        let pod = |exit: i32, reason: &str, message: &str| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "j-1-w0"},
                "status": {"phase": "Running", "containerStatuses": [{
                    "name": CONTAINER, "image": "i", "imageID": "", "ready": false,
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

    #[test]
    fn a_coordinator_without_ip_or_workers_gets_none() {
        let mut c = coord("j-1", 2, true);
        c.ip = None;
        assert!(plan_workers(&[c], &[]).is_empty());
        assert!(plan_workers(&[coord("j-1", 0, true)], &[]).is_empty());
    }

    #[test]
    fn workers_of_a_gone_finished_or_replaced_coordinator_are_deleted() {
        let delete = |n: &str| WorkerAction::Delete { name: n.into() };
        // gone
        assert_eq!(
            plan_workers(&[], &[worker("j-1", 0)]),
            vec![delete("j-1-w0")]
        );
        // terminating or finished
        assert_eq!(
            plan_workers(&[coord("j-1", 1, false)], &[worker("j-1", 0)]),
            vec![delete("j-1-w0")]
        );
        // a coordinator of the same name but another uid: delete, then recreate once gone
        let mut stale = worker("j-1", 0);
        stale.coordinator_uid = "uid-old".into();
        assert_eq!(
            plan_workers(&[coord("j-1", 1, true)], &[stale]),
            vec![delete("j-1-w0")]
        );
        // beyond the coordinator's count
        assert_eq!(
            plan_workers(
                &[coord("j-1", 1, true)],
                &[worker("j-1", 0), worker("j-1", 1)]
            ),
            vec![delete("j-1-w1")]
        );
    }

    #[test]
    fn terminating_workers_are_waited_for_not_duplicated() {
        let mut w = worker("j-1", 0);
        w.terminating = true;
        assert!(plan_workers(&[coord("j-1", 1, true)], &[w.clone()]).is_empty());
        assert!(plan_workers(&[], &[w]).is_empty());
    }

    #[test]
    fn a_worker_pod_reaches_its_coordinator_and_restarts_always() {
        let spec = streamjob_crds::v1alpha1::StreamJob::from_yaml(
            "apiVersion: streamjob.io/v1alpha1\nkind: StreamJob\nmetadata: {name: clicks}\nspec:\n  image: runtime:2\n  parallelism: 2\n  workers: 2\n  checkpoints: {dir: s3://b/ck}\n  pipeline:\n    - uid: gen\n      source: {generator: {}}\n    - uid: out\n      print: {}\n",
        )
        .unwrap()
        .spec;
        let owner = Owner {
            name: "clicks".into(),
            namespace: "ns".into(),
            uid: "u".into(),
        };
        let pod = worker_pod(&owner, &coord("clicks-1", 2, true), 1, &spec).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("clicks-1-w1"));
        let labels = pod.metadata.labels.clone().unwrap();
        assert_eq!(labels[LABEL_ROLE], ROLE_WORKER);
        assert_eq!(labels[LABEL_COORDINATOR], "clicks-1");
        assert_eq!(labels[LABEL_HASH], "h1");
        assert_eq!(
            pod.metadata.annotations.as_ref().unwrap()[ANNOTATION_COORDINATOR_UID],
            "uid-clicks-1"
        );
        let pod_spec = pod.spec.clone().unwrap();
        assert_eq!(pod_spec.restart_policy.as_deref(), Some("Always"));
        let c = &pod_spec.containers[0];
        assert_eq!(c.image.as_deref(), Some("runtime:2"));
        assert_eq!(
            c.args.clone().unwrap(),
            [
                "worker",
                "env:STREAMJOB_MANIFEST",
                "--coordinator",
                "10.0.0.7:6123",
                "--data-addr",
                "0.0.0.0:6121",
                "--advertise-host",
                "$(POD_IP)"
            ]
        );
        let env: Vec<String> = c.env.clone().unwrap().into_iter().map(|e| e.name).collect();
        assert!(env.iter().any(|e| e == TOKEN_ENV), "{env:?}");
        assert!(env.iter().any(|e| e == MANIFEST_ENV), "{env:?}");
        // the worker planning reads a coordinator's count back from its arguments
        let mut coordinator = pod.clone();
        coordinator.metadata.labels = Some(BTreeMap::from([(
            LABEL_ROLE.to_string(),
            "runtime".to_string(),
        )]));
        if let Some(s) = coordinator.spec.as_mut() {
            s.containers[0].args = Some(vec!["coordinator".into(), "--workers".into(), "2".into()]);
        }
        let (cs, ws) = observe(&[coordinator]);
        assert_eq!((cs.len(), cs[0].workers, ws.len()), (1, 2, 0));
    }

    #[test]
    fn shadow_upgrade_keeps_both_sets() {
        let old = coord("j-a", 2, true);
        let new = coord("j-b", 2, true);
        let ws: Vec<_> = (0..2)
            .map(|i| worker("j-a", i))
            .chain((0..2).map(|i| worker("j-b", i)))
            .collect();
        assert!(plan_workers(&[old, new], &ws).is_empty());
    }
}
