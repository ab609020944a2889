//! What every engine makes for a StreamJob, named and labelled alike, whatever runs it: object
//! names ([`names`]), labels and the owner reference, the manifest ConfigMap of a version, the
//! control-token Secret, the credentials a pod gets as variables ([`env`]) and the user's
//! podTemplate merged into every pod ([`template`]). Pure builders, no I/O.
//!
//! The decision ([`crate::decide`]) names what it asks for with [`names`]; the engine adapters
//! ([`crate::engine`]) build their objects on these. This module uses neither.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, ContainerStatus, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use streamjob_crds::v1alpha1::{API_VERSION, KIND, StreamJobSpec};

use crate::{Error, Result};
use names::{config_name, job_label, token_secret_name};

pub mod env;
pub mod names;
pub mod template;

/// Labels on everything the operator creates.
pub const LABEL_JOB: &str = "streamjob.io/job";
pub const LABEL_HASH: &str = "streamjob.io/spec-hash";
pub const LABEL_ROLE: &str = "streamjob.io/role";
pub const LABEL_MANAGED: &str = "app.kubernetes.io/managed-by";
pub const MANAGER: &str = "streamjob-operator";

/// What an operator-created pod is for (the `streamjob.io/role` label). A run's coordinator is
/// `runtime` for every engine (a Flink JobManager too); its workers carry [`ROLE_WORKER`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodRole {
    Runtime,
    Plan,
    Dispose,
}

impl PodRole {
    pub fn as_str(self) -> &'static str {
        match self {
            PodRole::Runtime => "runtime",
            PodRole::Plan => "plan",
            PodRole::Dispose => "dispose",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "runtime" => Some(PodRole::Runtime),
            "plan" => Some(PodRole::Plan),
            "dispose" => Some(PodRole::Dispose),
            _ => None,
        }
    }
}

/// Role label value of worker pods (our runtime's workers, Flink's TaskManagers): the upgrade
/// state machine never sees them; the worker planning does.
pub const ROLE_WORKER: &str = "worker";
/// Label of a worker pod: the name of its coordinator pod.
pub const LABEL_COORDINATOR: &str = "streamjob.io/coordinator";
/// Annotation of a worker pod: the uid of its coordinator pod (a recreated coordinator of the
/// same name is another coordinator).
pub const ANNOTATION_COORDINATOR_UID: &str = "streamjob.io/coordinator-uid";
/// Annotation of a coordinator pod: the workers it expects.
pub const ANNOTATION_WORKERS: &str = "streamjob.io/workers";

/// Annotation through which a human hands the operator the savepoint a stopped job wrote when
/// the operator could not read it (the runtime exited before answering).
pub const ANNOTATION_RECOVERED_SAVEPOINT: &str = "streamjob.io/recovered-savepoint";

/// ConfigMap key of the manifest.
pub const MANIFEST_KEY: &str = "manifest.yaml";
/// Secret key of the control token.
pub const TOKEN_KEY: &str = "token";

/// The status of a pod's main container: our runtime's, else the first (another engine's pod).
pub fn main_container(pod: &Pod) -> Option<&ContainerStatus> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    statuses
        .iter()
        .find(|c| c.name == template::RUNTIME_CONTAINER)
        .or_else(|| statuses.first())
}

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
    serde_yaml_ng::to_string(&doc).map_err(Error::Manifest)
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
