//! Deleting a StreamJob with `disposeOnDelete`: what to do next with its disposal pod (pure).
//!
//! The finalizer holds the StreamJob until the savepoints are disposed — but never forever. The
//! Lyft operator's worst bug was a finalizer that waited on work that could not run: a namespace
//! being deleted (nothing new may be created in it), a disposal pod whose image cannot be pulled or
//! whose Secret is missing, a pod no node will take. Each of these lets the StreamJob go after a
//! bounded time, and the caller records what was left behind in an Event.

use k8s_openapi::api::core::v1::Pod;

/// The disposal pod's `activeDeadlineSeconds`: the kubelet fails a disposal running longer.
pub const DISPOSE_DEADLINE_SECONDS: i64 = 600;

/// How long a disposal pod may fail to start (image pull, missing Secret) before the operator
/// stops waiting for it: long enough for a registry hiccup, short enough for a `kubectl delete`.
pub const START_GRACE_SECONDS: i64 = 60;

/// Past this, counted from the deletion request, the operator lets go whatever the pod says (a
/// pod no node schedules, a kubelet that never enforces the deadline).
pub const RELEASE_AFTER_SECONDS: i64 = DISPOSE_DEADLINE_SECONDS + 60;

use crate::decide::CANNOT_START;

/// What the finalizer does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposal {
    /// No disposal pod yet: create it.
    Create,
    /// The pod is on its way; look again soon.
    Wait,
    /// The savepoints are gone: remove the finalizer.
    Disposed,
    /// Remove the finalizer anyway; the savepoints remain, for this reason.
    LeftBehind(String),
}

/// The verdict for a disposal pod (`None`: none exists) of a StreamJob whose deletion was requested
/// at `deletion` (its `deletionTimestamp`); times in Unix seconds.
pub fn verdict(pod: Option<&Pod>, deletion: Option<i64>, now: i64) -> Disposal {
    let waited = deletion.map_or(0, |d| now - d);
    let Some(pod) = pod else {
        if waited > RELEASE_AFTER_SECONDS {
            return overdue(waited);
        }
        return Disposal::Create;
    };
    let status = pod.status.as_ref();
    match status.and_then(|s| s.phase.as_deref()) {
        Some("Succeeded") => return Disposal::Disposed,
        Some("Failed") => {
            let why = status
                .and_then(|s| s.message.clone().or(s.reason.clone()))
                .or_else(|| termination_message(pod))
                .unwrap_or_else(|| "no reason given".into());
            return Disposal::LeftBehind(format!("the disposal pod failed: {why}"));
        }
        _ => {}
    }
    let age = pod
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(0, |t| now - t.0.as_second());
    if let Some((reason, message)) = cannot_start(pod)
        && age >= START_GRACE_SECONDS
    {
        return Disposal::LeftBehind(format!(
            "the disposal pod cannot start after {age} s: {reason}: {message}"
        ));
    }
    if waited > RELEASE_AFTER_SECONDS {
        return overdue(waited);
    }
    Disposal::Wait
}

/// A pod or ConfigMap create refused because the namespace is being deleted (the
/// NamespaceLifecycle admission plugin answers 403 with this text).
pub fn namespace_terminating(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403 && s.message.contains("being terminated"))
}

fn overdue(waited: i64) -> Disposal {
    Disposal::LeftBehind(format!(
        "disposal did not finish within {waited} s of the deletion request (limit {RELEASE_AFTER_SECONDS} s)"
    ))
}

fn cannot_start(pod: &Pod) -> Option<(String, String)> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    statuses.iter().find_map(|c| {
        let waiting = c.state.as_ref()?.waiting.as_ref()?;
        let reason = waiting.reason.clone()?;
        CANNOT_START
            .contains(&reason.as_str())
            .then(|| (reason, waiting.message.clone().unwrap_or_default()))
    })
}

fn termination_message(pod: &Pod) -> Option<String> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    statuses.iter().find_map(|c| {
        let t = c.state.as_ref()?.terminated.as_ref()?;
        t.message.clone().or(t.reason.clone())
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateWaiting, ContainerStatus, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn pod(age_s: i64, phase: &str, waiting: Option<&str>, now: i64) -> Pod {
        let mut p = Pod::default();
        p.metadata.creation_timestamp = Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(now - age_s).unwrap(),
        ));
        p.status = Some(PodStatus {
            phase: Some(phase.into()),
            container_statuses: waiting.map(|r| {
                vec![ContainerStatus {
                    name: "runtime".into(),
                    state: Some(ContainerState {
                        waiting: Some(ContainerStateWaiting {
                            reason: Some(r.into()),
                            message: Some(format!("{r} detail")),
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        });
        p
    }

    #[test]
    fn a_pod_that_cannot_pull_its_image_is_given_up_after_the_grace() {
        let now = 1_800_000_000;
        let del = Some(now - 70);
        let young = pod(10, "Pending", Some("ErrImagePull"), now);
        assert_eq!(verdict(Some(&young), del, now), Disposal::Wait);
        let old = pod(
            START_GRACE_SECONDS,
            "Pending",
            Some("ImagePullBackOff"),
            now,
        );
        match verdict(Some(&old), del, now) {
            Disposal::LeftBehind(why) => {
                assert!(
                    why.contains("ImagePullBackOff: ImagePullBackOff detail"),
                    "{why}"
                )
            }
            v => panic!("{v:?}"),
        }
        let missing_secret = pod(90, "Pending", Some("CreateContainerConfigError"), now);
        assert!(matches!(
            verdict(Some(&missing_secret), del, now),
            Disposal::LeftBehind(_)
        ));
        // Still creating its container: waited for, however long, until the overall limit.
        let creating = pod(300, "Pending", Some("ContainerCreating"), now);
        assert_eq!(verdict(Some(&creating), del, now), Disposal::Wait);
    }

    #[test]
    fn succeeded_disposes_failed_and_overdue_leave_savepoints_behind() {
        let now = 1_800_000_000;
        let del = Some(now - 5);
        assert_eq!(
            verdict(Some(&pod(5, "Succeeded", None, now)), del, now),
            Disposal::Disposed
        );
        assert!(matches!(
            verdict(Some(&pod(5, "Failed", None, now)), del, now),
            Disposal::LeftBehind(_)
        ));
        assert_eq!(verdict(None, del, now), Disposal::Create);
        assert_eq!(
            verdict(Some(&pod(5, "Running", None, now)), del, now),
            Disposal::Wait
        );
        let late = Some(now - RELEASE_AFTER_SECONDS - 1);
        assert!(matches!(
            verdict(Some(&pod(5, "Pending", None, now)), late, now),
            Disposal::LeftBehind(_)
        ));
        assert!(matches!(verdict(None, late, now), Disposal::LeftBehind(_)));
    }

    #[test]
    fn only_the_terminating_namespace_refusal_counts() {
        let api = |code: u16, message: &str| {
            kube::Error::Api(
                kube::core::Status::failure(message, "Forbidden")
                    .with_code(code)
                    .boxed(),
            )
        };
        assert!(namespace_terminating(&api(
            403,
            "pods \"x\" is forbidden: unable to create new content in namespace n because it is being terminated"
        )));
        assert!(!namespace_terminating(&api(
            403,
            "pods \"x\" is forbidden: quota"
        )));
        assert!(!namespace_terminating(&api(409, "being terminated")));
    }
}
