//! `spec.podTemplate` merged into a pod the operator built, the same way for every engine and
//! every pod of a job (runtime, workers, Flink JobManager and TaskManagers, check and dispose
//! pods), so a service account (web identity), Secrets as env or volumes, tolerations, node
//! selectors and pull secrets reach all of them.
//!
//! What the operator's protocol depends on wins: the main container's image, command and args,
//! ports, probes, termination message, its resources where the operator set them (Flink sizes its
//! process to the memory limit), the operator's volumes and init containers, the restart policy
//! and the deadline. The user's values fill the rest; the `restricted` Pod Security defaults
//! (crate::pod_security) then fill whatever both left unset.

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use serde::Serialize;
use serde::de::DeserializeOwned;
use streamjob_crds::pod_template::PodTemplate;

/// Our runtime's container in every pod of its image (a podTemplate container of this name is
/// merged into it).
pub const RUNTIME_CONTAINER: &str = "runtime";

/// The template container merged into the Flink containers (JobManager, TaskManager, check):
/// the name the Flink Kubernetes Operator uses, so its users' templates carry over.
pub const FLINK_MAIN_CONTAINER: &str = "flink-main-container";

/// `ours` with the user's `template` merged in: `main` names the template container merged into
/// `ours`'s first container; the template's other containers run beside it (sidecars).
pub fn with_pod_template(template: Option<&PodTemplate>, main: &str, ours: Pod) -> Pod {
    // validate() refused a template that does not parse, so nothing is dropped here
    let template = template.and_then(|t| t.parse().ok()).unwrap_or_default();
    let Pod {
        mut metadata,
        spec: our_spec,
        ..
    } = ours;
    if let Some(tm) = template.metadata {
        let mut labels = tm.labels.unwrap_or_default();
        labels.extend(metadata.labels.take().unwrap_or_default());
        metadata.labels = Some(labels);
        let mut annotations = tm.annotations.unwrap_or_default();
        annotations.extend(metadata.annotations.take().unwrap_or_default());
        metadata.annotations = (!annotations.is_empty()).then_some(annotations);
    }
    let ours = our_spec.unwrap_or_default();
    let mut spec: PodSpec = template.spec.unwrap_or_default();

    let mut user_containers = std::mem::take(&mut spec.containers);
    let user_main = user_containers
        .iter()
        .position(|c| c.name == main)
        .map(|i| user_containers.remove(i));
    let mut containers = ours.containers;
    if let (Some(first), Some(user)) = (containers.first_mut(), user_main) {
        *first = merge_container(std::mem::take(first), user);
    }
    containers.extend(user_containers);
    spec.containers = containers;

    let mut init = ours.init_containers.unwrap_or_default();
    init.extend(spec.init_containers.take().unwrap_or_default());
    spec.init_containers = (!init.is_empty()).then_some(init);

    let mut volumes = ours.volumes.unwrap_or_default();
    for user in spec.volumes.take().unwrap_or_default() {
        if !volumes.iter().any(|v| v.name == user.name) {
            volumes.push(user);
        }
    }
    spec.volumes = (!volumes.is_empty()).then_some(volumes);

    spec.security_context = overlay(ours.security_context, spec.security_context);
    spec.restart_policy = ours.restart_policy.or(spec.restart_policy);
    spec.active_deadline_seconds = ours
        .active_deadline_seconds
        .or(spec.active_deadline_seconds);
    crate::pod_security::restrict(&mut spec);
    Pod {
        metadata,
        spec: Some(spec),
        ..Default::default()
    }
}

/// The operator's container with the user's container of the same role merged in.
fn merge_container(ours: Container, mut user: Container) -> Container {
    let mut env = ours.env.unwrap_or_default();
    env.extend(user.env.take().unwrap_or_default());
    let mut mounts = ours.volume_mounts.unwrap_or_default();
    for mount in user.volume_mounts.take().unwrap_or_default() {
        if !mounts.iter().any(|m| m.mount_path == mount.mount_path) {
            mounts.push(mount);
        }
    }
    Container {
        name: ours.name,
        image: ours.image,
        image_pull_policy: ours.image_pull_policy.or(user.image_pull_policy.take()),
        command: ours.command,
        args: ours.args,
        env: (!env.is_empty()).then_some(env),
        ports: ours.ports,
        readiness_probe: ours.readiness_probe,
        liveness_probe: ours.liveness_probe.or(user.liveness_probe.take()),
        startup_probe: ours.startup_probe.or(user.startup_probe.take()),
        termination_message_policy: ours.termination_message_policy,
        resources: ours.resources.or(user.resources.take()),
        volume_mounts: (!mounts.is_empty()).then_some(mounts),
        security_context: overlay(ours.security_context, user.security_context.take()),
        ..user
    }
}

/// `user` over `ours`, field by field (a field the user set wins; the rest stays ours).
fn overlay<T: Serialize + DeserializeOwned>(ours: Option<T>, user: Option<T>) -> Option<T> {
    let (ours, user) = match (ours, user) {
        (Some(ours), Some(user)) => (ours, user),
        (ours, user) => return user.or(ours),
    };
    let (Ok(serde_json::Value::Object(mut merged)), Ok(serde_json::Value::Object(theirs))) =
        (serde_json::to_value(&ours), serde_json::to_value(&user))
    else {
        return Some(user);
    };
    merged.extend(theirs);
    Some(serde_json::from_value(serde_json::Value::Object(merged)).unwrap_or(user))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k8s_openapi::api::core::v1::{
        EnvVar, PodSecurityContext, SecurityContext, Volume, VolumeMount,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn template() -> PodTemplate {
        PodTemplate(serde_json::json!({
            "metadata": {"labels": {"team": "a", "streamjob.io/role": "spoofed"}, "annotations": {"x": "1"}},
            "spec": {
                "serviceAccountName": "flink-irsa",
                "tolerations": [{"key": "dedicated", "operator": "Exists"}],
                "securityContext": {"runAsUser": 1234},
                "volumes": [{"name": "creds", "secret": {"secretName": "s3-creds"}}],
                "containers": [
                    {"name": "flink-main-container", "image": "evil:1", "args": ["x"],
                     "env": [{"name": "USER_VAR", "value": "1"}],
                     "resources": {"limits": {"memory": "99Gi"}},
                     "securityContext": {"readOnlyRootFilesystem": true, "runAsNonRoot": true},
                     "volumeMounts": [{"name": "creds", "mountPath": "/creds"}]},
                    {"name": "sidecar", "image": "proxy:1"}
                ]
            }
        }))
    }

    fn ours() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("jm".into()),
                labels: Some([("streamjob.io/role".to_string(), "runtime".to_string())].into()),
                annotations: Some([("ours".to_string(), "2".to_string())].into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "jobmanager".into(),
                    image: Some("flink:2".into()),
                    args: Some(vec!["standalone-job".into()]),
                    env: Some(vec![EnvVar {
                        name: "FLINK_CONF_DIR".into(),
                        value: Some("/c".into()),
                        ..Default::default()
                    }]),
                    resources: Some(Default::default()),
                    security_context: Some(SecurityContext {
                        read_only_root_filesystem: Some(false),
                        ..Default::default()
                    }),
                    volume_mounts: Some(vec![VolumeMount {
                        name: "flink-conf".into(),
                        mount_path: "/c".into(),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }],
                volumes: Some(vec![Volume {
                    name: "flink-conf".into(),
                    ..Default::default()
                }]),
                restart_policy: Some("Never".into()),
                security_context: Some(PodSecurityContext {
                    run_as_user: Some(9999),
                    fs_group: Some(9999),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_users_template_fills_what_the_protocol_does_not_own() {
        let pod = with_pod_template(Some(&template()), FLINK_MAIN_CONTAINER, ours());
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["team"], "a");
        assert_eq!(labels["streamjob.io/role"], "runtime", "ours win");
        let annotations = pod.metadata.annotations.as_ref().unwrap();
        assert_eq!(
            (annotations["x"].as_str(), annotations["ours"].as_str()),
            ("1", "2")
        );
        let spec = pod.spec.unwrap();
        assert_eq!(spec.service_account_name.as_deref(), Some("flink-irsa"));
        assert_eq!(spec.tolerations.as_ref().unwrap().len(), 1);
        let psc = spec.security_context.as_ref().unwrap();
        assert_eq!((psc.run_as_user, psc.fs_group), (Some(1234), Some(9999)));
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.containers.len(), 2, "the sidecar runs beside");
        let main = &spec.containers[0];
        assert_eq!(main.name, "jobmanager");
        assert_eq!(main.image.as_deref(), Some("flink:2"));
        assert_eq!(main.args.as_ref().unwrap(), &["standalone-job"]);
        let env: Vec<&str> = main.env.iter().flatten().map(|e| e.name.as_str()).collect();
        assert_eq!(env, ["FLINK_CONF_DIR", "USER_VAR"]);
        assert_eq!(
            main.resources,
            Some(Default::default()),
            "ours sized the process"
        );
        let sc = main.security_context.as_ref().unwrap();
        assert_eq!(
            sc.read_only_root_filesystem,
            Some(true),
            "the user's choice"
        );
        assert_eq!(
            sc.allow_privilege_escalation,
            Some(false),
            "restricted fills the rest"
        );
        let mounts: Vec<&str> = main
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| m.mount_path.as_str())
            .collect();
        assert_eq!(mounts, ["/c", "/creds", "/tmp"]);
        let volumes: Vec<&str> = spec
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(volumes, ["flink-conf", "creds", "streamjob-tmp"]);
    }

    #[test]
    fn without_a_template_the_pod_is_ours_and_restricted() {
        let pod = with_pod_template(None, FLINK_MAIN_CONTAINER, ours());
        let spec = pod.spec.unwrap();
        assert_eq!(spec.containers.len(), 1);
        assert_eq!(spec.security_context.unwrap().run_as_non_root, Some(true));
        assert_eq!(pod.metadata.annotations.unwrap()["ours"], "2");
    }
}
