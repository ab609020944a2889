//! Pure builders of the objects the operator creates for a StreamJob: the runtime pod, the plan
//! pod, the savepoint-disposal pod, the manifest ConfigMap and the control-token Secret.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapKeySelector, Container, ContainerPort, ContainerStatus, EnvVar,
    EnvVarSource, HTTPGetAction, ObjectFieldSelector, Pod, PodSpec, Probe, ResourceRequirements,
    Secret, SecretKeySelector,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use streamjob_crds::v1alpha1::{API_VERSION, KIND, StreamJobSpec};

use crate::decide::{
    LABEL_HASH, LABEL_JOB, LABEL_MANAGED, LABEL_ROLE, MANAGER, PodRole, RunPlan, config_name,
    job_label, token_secret_name,
};
use crate::{Error, Result};

pub mod template;

/// Name of the runtime container (a podTemplate container of this name is merged into it).
pub const CONTAINER: &str = "runtime";

/// The status of a pod's main container: [`CONTAINER`], else the first (another engine's pod).
pub fn main_container(pod: &Pod) -> Option<&ContainerStatus> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    statuses
        .iter()
        .find(|c| c.name == CONTAINER)
        .or_else(|| statuses.first())
}
/// ConfigMap key of the manifest.
pub const MANIFEST_KEY: &str = "manifest.yaml";
/// Secret key of the control token.
pub const TOKEN_KEY: &str = "token";
/// Env vars the runtime reads the manifest (`env:STREAMJOB_MANIFEST`) and its token from.
pub use streamjob_contract::process::{MANIFEST_ENV, TOKEN_ENV};

/// The StreamJob the objects belong to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

impl Owner {
    pub fn reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: API_VERSION.into(),
            kind: KIND.into(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    pub(crate) fn meta(&self, name: &str, role: Option<PodRole>, hash: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(self.namespace.clone()),
            labels: Some(labels(&self.name, role, hash)),
            owner_references: Some(vec![self.reference()]),
            ..Default::default()
        }
    }
}

/// Labels of operator-created objects.
pub fn labels(job: &str, role: Option<PodRole>, hash: Option<&str>) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    l.insert(LABEL_JOB.to_string(), job_label(job));
    l.insert(LABEL_MANAGED.to_string(), MANAGER.to_string());
    if let Some(r) = role {
        l.insert(LABEL_ROLE.to_string(), r.as_str().to_string());
    }
    if let Some(h) = hash {
        l.insert(LABEL_HASH.to_string(), h.to_string());
    }
    l
}

/// Label selector of everything of one job.
pub fn selector(job: &str) -> String {
    format!("{LABEL_JOB}={},{LABEL_MANAGED}={MANAGER}", job_label(job))
}

/// The manifest the runtime reads: a complete StreamJob document.
pub fn manifest_yaml(owner: &Owner, spec: &StreamJobSpec) -> Result<String> {
    let doc = serde_json::json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": owner.name, "namespace": owner.namespace},
        "spec": spec,
    });
    serde_yaml_ng::to_string(&doc).map_err(|e| Error::Serialize(e.to_string()))
}

pub fn config_map(owner: &Owner, hash: &str, spec: &StreamJobSpec) -> Result<ConfigMap> {
    let mut data = BTreeMap::new();
    data.insert(MANIFEST_KEY.to_string(), manifest_yaml(owner, spec)?);
    Ok(ConfigMap {
        metadata: owner.meta(&config_name(&owner.name, hash), None, Some(hash)),
        data: Some(data),
        ..Default::default()
    })
}

pub fn token_secret(owner: &Owner, token: &str) -> Secret {
    let mut data = BTreeMap::new();
    data.insert(TOKEN_KEY.to_string(), ByteString(token.as_bytes().to_vec()));
    Secret {
        metadata: owner.meta(&token_secret_name(&owner.name), None, None),
        data: Some(data),
        type_: Some("Opaque".into()),
        ..Default::default()
    }
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(crate) fn secret_env(name: &str, secret: &str, key: &str) -> EnvVar {
    optional_secret_env(name, secret, key, false)
}

fn optional_secret_env(name: &str, secret: &str, key: &str, optional: bool) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.into(),
                key: key.into(),
                optional: optional.then_some(true),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

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

/// The stores' credentials from `spec.storage`, as variables read from the user's Secrets (never
/// their values): every pod that reads or writes the job's files gets them, whatever its engine.
pub(crate) fn storage_env(spec: &StreamJobSpec) -> Vec<EnvVar> {
    let mut env = Vec::new();
    if let Some(creds) = spec
        .storage
        .as_ref()
        .and_then(|s| s.s3.as_ref())
        .and_then(|s| s.credentials_secret.as_ref())
    {
        env.push(secret_env(
            "AWS_ACCESS_KEY_ID",
            &creds.name,
            creds
                .access_key_id_key
                .as_deref()
                .unwrap_or("AWS_ACCESS_KEY_ID"),
        ));
        env.push(secret_env(
            "AWS_SECRET_ACCESS_KEY",
            &creds.name,
            creds
                .secret_access_key_key
                .as_deref()
                .unwrap_or("AWS_SECRET_ACCESS_KEY"),
        ));
    }
    // GCS: a service-account key (JSON), read by the storage layer from this variable
    if let Some(key) = spec
        .storage
        .as_ref()
        .and_then(|s| s.gcs.as_ref())
        .and_then(|g| g.service_account_key_secret.as_ref())
    {
        env.push(secret_env(
            "GOOGLE_SERVICE_ACCOUNT_KEY",
            &key.name,
            key.key.as_deref().unwrap_or("key.json"),
        ));
    }
    // Azure: the account key or a SAS token
    if let Some(creds) = spec
        .storage
        .as_ref()
        .and_then(|s| s.azure.as_ref())
        .and_then(|a| a.credentials_secret.as_ref())
    {
        env.push(match &creds.sas_token_key {
            Some(key) => secret_env("AZURE_STORAGE_SAS_KEY", &creds.name, key),
            None => secret_env(
                "AZURE_STORAGE_ACCOUNT_KEY",
                &creds.name,
                creds
                    .account_key_key
                    .as_deref()
                    .unwrap_or("AZURE_STORAGE_ACCOUNT_KEY"),
            ),
        });
    }
    env
}

/// A pod of the job's runtime image: `ours` as its container, the user's podTemplate merged in
/// (template::with_pod_template; the template container named [`CONTAINER`] merges into ours).
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
    template::with_pod_template(spec.pod_template.as_ref(), CONTAINER, pod)
}

/// Fills the runtime container's resources from the operator's defaults (`--runtime-resources`,
/// chart value `runtimeResources`) where the StreamJob's podTemplate set neither requests nor
/// limits.
pub fn with_default_resources(mut pod: Pod, defaults: Option<&ResourceRequirements>) -> Pod {
    if let (Some(d), Some(spec)) = (defaults, pod.spec.as_mut()) {
        for c in spec.containers.iter_mut().filter(|c| c.name == CONTAINER) {
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
        // the subtasks run on worker pods (crate::workers), which register here
        args.extend([
            "--workers".into(),
            plan.spec.workers.to_string(),
            "--cluster-addr".into(),
            format!("0.0.0.0:{}", crate::workers::CLUSTER_PORT),
        ]);
        ports.push(ContainerPort {
            name: Some("cluster".into()),
            container_port: i32::from(crate::workers::CLUSTER_PORT),
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
        name: CONTAINER.into(),
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
    let container = Container {
        name: CONTAINER.into(),
        image: Some(spec.image.clone()),
        image_pull_policy: spec.image_pull_policy.clone(),
        args: Some(vec![
            "plan".into(),
            format!("env:{MANIFEST_ENV}"),
            "--from".into(),
            from.into(),
            "--json".into(),
        ]),
        env: Some(common_env(owner, hash, spec)),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    };
    let mut pod = pod_from_template(
        owner,
        name,
        Some(PodRole::Plan),
        hash,
        spec,
        container,
        "Never",
    );
    if let Some(s) = pod.spec.as_mut() {
        s.active_deadline_seconds = Some(deadline_seconds.max(30));
    }
    pod
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
    let container = Container {
        name: CONTAINER.into(),
        image: Some(spec.image.clone()),
        image_pull_policy: spec.image_pull_policy.clone(),
        args: Some(args),
        env: Some(common_env(owner, hash, spec)),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    };
    let mut pod = pod_from_template(
        owner,
        name,
        Some(PodRole::Dispose),
        hash,
        spec,
        container,
        "Never",
    );
    if let Some(s) = pod.spec.as_mut() {
        // A disposal that hangs (a store that never answers) ends; the finalizer then lets go.
        s.active_deadline_seconds = Some(crate::disposal::DISPOSE_DEADLINE_SECONDS);
    }
    pod
}

#[cfg(test)]
mod tests;
