//! Pure builders of our runtime's pods: a run's coordinator (the runtime pod), the compatibility
//! check (`streamjob-runtime plan`) and the savepoint disposal (`streamjob-runtime dispose`).
//! Names, labels, the manifest ConfigMap and the credentials are built as for every engine
//! ([`crate::objects`]).

use k8s_openapi::api::core::v1::{
    ConfigMapKeySelector, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction, Pod,
    PodSpec, Probe, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use streamjob_contract::process::{CLUSTER_PORT, MANIFEST_ENV, TOKEN_ENV};
use streamjob_crds::v1alpha1::StreamJobSpec;

use crate::decide::RunPlan;
use crate::objects::env::{field_env, optional_secret_env, secret_env, storage_env};
use crate::objects::names::{config_name, token_secret_name};
use crate::objects::template::{RUNTIME_CONTAINER, with_pod_template};
use crate::objects::{MANIFEST_KEY, Owner, PodRole, TOKEN_KEY};

/// Env of every pod running the job's image: pod identity, the manifest, storage credentials.
pub(crate) fn common_env(owner: &Owner, hash: &str, spec: &StreamJobSpec) -> Vec<EnvVar> {
    let mut env = vec![
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_NAMESPACE", "metadata.namespace"),
        field_env("POD_IP", "status.podIP"),
        EnvVar {
            name: MANIFEST_ENV.into(),
            value_from: Some(EnvVarSource {
                config_map_key_ref: Some(ConfigMapKeySelector {
                    name: config_name(&owner.name, hash),
                    key: MANIFEST_KEY.into(),
                    optional: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        },
    ];
    env.extend(storage_env(spec));
    // Kafka credentials: one variable per Secret key, named after the step (crds::secrets).
    for step in &spec.pipeline {
        if let Some(kafka) = step.source.as_ref().and_then(|s| s.kafka.as_ref()) {
            for e in streamjob_crds::secrets::kafka_secret_envs(&step.uid, kafka) {
                env.push(optional_secret_env(&e.env, &e.secret, &e.key, e.optional));
            }
        }
    }
    env
}

/// A pod of the job's runtime image: `ours` as its container, the user's podTemplate merged in
/// ([`with_pod_template`]; the template container named [`RUNTIME_CONTAINER`] merges into ours).
pub(crate) fn pod_from_template(
    owner: &Owner,
    name: &str,
    role: Option<PodRole>,
    hash: &str,
    spec: &StreamJobSpec,
    ours: Container,
    restart_policy: &str,
) -> Pod {
    let pod = Pod {
        metadata: owner.meta(name, role, Some(hash)),
        spec: Some(PodSpec {
            containers: vec![ours],
            restart_policy: Some(restart_policy.into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    with_pod_template(spec.pod_template.as_ref(), RUNTIME_CONTAINER, pod)
}

/// Fills the runtime container's resources from the operator's defaults (`--runtime-resources`,
/// chart value `runtimeResources`) where the StreamJob's podTemplate set neither requests nor
/// limits.
pub fn with_default_resources(mut pod: Pod, defaults: Option<&ResourceRequirements>) -> Pod {
    if let (Some(d), Some(spec)) = (defaults, pod.spec.as_mut()) {
        for c in spec
            .containers
            .iter_mut()
            .filter(|c| c.name == RUNTIME_CONTAINER)
        {
            let unset = c
                .resources
                .as_ref()
                .is_none_or(|r| r.requests.is_none() && r.limits.is_none());
            if unset {
                c.resources = Some(d.clone());
            }
        }
    }
    pod
}

/// Whether the runtime accepts `--from-savepoint P --resume` ("the latest checkpoint taken after
/// P, else P"), so a container restarted in place does not rewind to the savepoint. The runtime
/// accepts the pair (checkpoint lineage) since its commit 29c5dde.
pub const RESUME_WITH_SAVEPOINT: bool = true;

/// The runtime pod: coordinator and all subtasks in one process. `OnFailure` with `--resume`, so a
/// crashed runtime restarts in place from its latest checkpoint, and a stop-with-savepoint (exit 0)
/// is final.
pub fn runtime_pod(owner: &Owner, plan: &RunPlan, control_port: u16) -> Pod {
    let mut args = vec![
        "coordinator".to_string(),
        format!("env:{MANIFEST_ENV}"),
        // every interface of the pod: `kubectl port-forward` dials the pod's loopback
        "--control-addr".into(),
        format!("0.0.0.0:{control_port}"),
        "--metrics-addr".into(),
        format!("0.0.0.0:{}", streamjob_contract::process::METRICS_PORT),
    ];
    // every pod resumes its own run's commits when its container restarts in place (the run
    // is told apart by its epoch), whatever the upgrade mode: a stateless start is `--fresh`
    // only until its first commit
    args.extend(["--epoch".to_string(), plan.epoch.to_string()]);
    match &plan.from_savepoint {
        Some(from) => {
            args.push("--from-savepoint".into());
            args.push(from.clone());
            if RESUME_WITH_SAVEPOINT {
                args.push("--resume".into());
            }
        }
        None if !plan.fresh => args.push("--resume".into()),
        None => args.extend(["--fresh".to_string(), "--resume".to_string()]),
    }
    if plan.standby {
        args.push("--standby".into());
    }
    let mut ports = vec![
        ContainerPort {
            name: Some("control".into()),
            container_port: i32::from(control_port),
            protocol: Some("TCP".into()),
            ..Default::default()
        },
        // served without the token, for Prometheus (the chart's PodMonitor selects it by name)
        ContainerPort {
            name: Some("metrics".into()),
            container_port: i32::from(streamjob_contract::process::METRICS_PORT),
            protocol: Some("TCP".into()),
            ..Default::default()
        },
    ];
    if plan.spec.workers > 0 {
        // the subtasks run on worker pods (super::workers), which register here
        args.extend([
            "--workers".into(),
            plan.spec.workers.to_string(),
            "--cluster-addr".into(),
            format!("0.0.0.0:{}", CLUSTER_PORT),
        ]);
        ports.push(ContainerPort {
            name: Some("cluster".into()),
            container_port: i32::from(CLUSTER_PORT),
            protocol: Some("TCP".into()),
            ..Default::default()
        });
    }
    let mut env = common_env(owner, &plan.hash, &plan.spec);
    env.push(secret_env(
        TOKEN_ENV,
        &token_secret_name(&owner.name),
        TOKEN_KEY,
    ));
    env.push(EnvVar {
        name: "STREAMJOB_RUN_ID".into(),
        value: Some(plan.name.clone()),
        ..Default::default()
    });
    let container = Container {
        name: RUNTIME_CONTAINER.into(),
        image: Some(plan.spec.image.clone()),
        image_pull_policy: plan.spec.image_pull_policy.clone(),
        args: Some(args),
        env: Some(env),
        ports: Some(ports),
        readiness_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/healthz".into()),
                port: IntOrString::Int(i32::from(control_port)),
                ..Default::default()
            }),
            period_seconds: Some(2),
            failure_threshold: Some(3),
            ..Default::default()
        }),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    };
    pod_from_template(
        owner,
        &plan.name,
        Some(PodRole::Runtime),
        &plan.hash,
        &plan.spec,
        container,
        "OnFailure",
    )
}

/// Short-lived pod of the new image: `streamjob-runtime plan MANIFEST --from PATH --json`, exit 0
/// compatible, 3 incompatible, report on stdout (the termination message falls back to the log).
pub fn plan_pod(
    owner: &Owner,
    name: &str,
    hash: &str,
    spec: &StreamJobSpec,
    from: &str,
    deadline_seconds: i64,
) -> Pod {
    let args = vec![
        "plan".into(),
        format!("env:{MANIFEST_ENV}"),
        "--from".into(),
        from.into(),
        "--json".into(),
    ];
    let task = OneShot {
        role: PodRole::Plan,
        args,
        deadline_seconds: deadline_seconds.max(30),
    };
    one_shot_pod(owner, name, hash, spec, task)
}

/// Short-lived pod deleting savepoints: `streamjob-runtime dispose MANIFEST PATH...` (runtime
/// requirement).
pub fn dispose_pod(
    owner: &Owner,
    name: &str,
    hash: &str,
    spec: &StreamJobSpec,
    paths: &[String],
) -> Pod {
    let mut args = vec!["dispose".to_string(), format!("env:{MANIFEST_ENV}")];
    args.extend(paths.iter().cloned());
    // A disposal that hangs (a store that never answers) ends; the finalizer then lets go.
    let deadline_seconds = crate::disposal::DISPOSE_DEADLINE_SECONDS;
    let task = OneShot {
        role: PodRole::Dispose,
        args,
        deadline_seconds,
    };
    one_shot_pod(owner, name, hash, spec, task)
}

/// What a one-shot runtime pod runs and how long it may take.
struct OneShot {
    role: PodRole,
    args: Vec<String>,
    deadline_seconds: i64,
}

/// A runtime pod that runs once (never restarted) and is ended by its deadline if it hangs; its
/// report falls back to the log tail when it writes no termination message.
fn one_shot_pod(owner: &Owner, name: &str, hash: &str, spec: &StreamJobSpec, task: OneShot) -> Pod {
    let container = Container {
        name: RUNTIME_CONTAINER.into(),
        image: Some(spec.image.clone()),
        image_pull_policy: spec.image_pull_policy.clone(),
        args: Some(task.args),
        env: Some(common_env(owner, hash, spec)),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    };
    let mut pod = pod_from_template(owner, name, Some(task.role), hash, spec, container, "Never");
    if let Some(s) = pod.spec.as_mut() {
        s.active_deadline_seconds = Some(task.deadline_seconds);
    }
    pod
}

#[cfg(test)]
mod tests;
