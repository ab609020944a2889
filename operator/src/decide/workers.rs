//! Worker planning, pure and the same for every engine (our runtime's workers, Flink's
//! TaskManagers): each live coordinator pod gets its own workers, which register with it at its
//! pod IP; workers of a coordinator that is gone, terminating or finished are deleted.
//!
//! The decision turns [`plan_workers`] into actions of the same decision (`AddWorker`,
//! `Remove`), outside the upgrade stages on purpose: the stages move coordinator pods between
//! versions, and every coordinator pod brings its workers along. A shadow upgrade's
//! standby coordinator gets its workers while the old one keeps its own, so the old version stays
//! warm, workers included, for an instant rollback.
//!
//! Worker pods restart always (`restartPolicy: Always`): a worker holds no state, a restarted one
//! registers again and the coordinator restarts the job from its latest checkpoint.

use crate::objects::names::worker_name;

/// A run's coordinator pod (a runtime pod, a Flink JobManager) as the worker planning sees it.
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

/// A worker pod.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerObs {
    pub name: String,
    pub coordinator: String,
    pub coordinator_uid: String,
    pub terminating: bool,
    /// Why the pod ended, when it did (`Failed` or `Succeeded`: evicted, a container that may
    /// not restart, e.g. `OOMKilled, exit 137`), or that its killed container is held back by
    /// the kubelet ([`killed_and_held_back`](crate::engine::killed_and_held_back)): it is
    /// replaced, and the reason goes into an event.
    pub ended: Option<String>,
}

/// What to do about worker pods.
#[derive(Clone, Debug, PartialEq)]
pub enum WorkerAction {
    /// Create worker `index` of coordinator `coordinator`.
    Create { coordinator: String, index: u32 },
    Delete {
        name: String,
        /// Why the pod ended, when that is why it goes (not when its coordinator went).
        ended: Option<String>,
    },
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
        let keep = w.ended.is_none()
            && coordinators.iter().any(|c| {
                c.name == w.coordinator
                    && c.uid == w.coordinator_uid
                    && c.live
                    && index_of(&w.name, &c.name).is_some_and(|i| i < c.workers)
            });
        if !keep {
            actions.push(WorkerAction::Delete {
                name: w.name.clone(),
                ended: w.ended.clone(),
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A coordinator `name` with `workers` workers at 10.0.0.7, of version h1.
    pub(crate) fn coord(name: &str, workers: u32, live: bool) -> CoordinatorObs {
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
            ended: None,
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
        failed.ended = Some("OOMKilled, exit 137".into());
        assert_eq!(
            plan_workers(&[coord("j-1", 1, true)], &[failed.clone()]),
            vec![WorkerAction::Delete {
                name: "j-1-w0".into(),
                ended: Some("OOMKilled, exit 137".into()),
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

    #[test]
    fn a_coordinator_without_ip_or_workers_gets_none() {
        let mut c = coord("j-1", 2, true);
        c.ip = None;
        assert!(plan_workers(&[c], &[]).is_empty());
        assert!(plan_workers(&[coord("j-1", 0, true)], &[]).is_empty());
    }

    #[test]
    fn workers_of_a_gone_finished_or_replaced_coordinator_are_deleted() {
        let delete = |n: &str| WorkerAction::Delete {
            name: n.into(),
            ended: None,
        };
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
