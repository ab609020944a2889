//! `spec.podTemplate`: what users merge into every pod of a job (either engine).
//!
//! The full Kubernetes `PodTemplateSpec` schema is about 340 KB of JSON, which made the CRD too big
//! for a client-side `kubectl apply` (its last-applied annotation is capped at 256 KiB) and for
//! Argo CD's default sync. As widely used operators do, the CRD types only the fields users set
//! most and the operator reads — labels and annotations, the containers' `name`, `resources`,
//! `env` and `securityContext`, the pod's security context, service account and scheduling —
//! and preserves the rest as written.
//!
//! The Rust type keeps the template as JSON, so a value the API server let through with the
//! wrong shape (say `volumes: 3`) never breaks the operator's watch: [`PodTemplate::parse`] turns it
//! into Kubernetes types during validation, and a failure names the field
//! (`spec.podTemplate.spec.volumes: invalid type …`) in the `SpecValid` condition.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::{
    EnvVar, PodSecurityContext, PodTemplateSpec, ResourceRequirements, SecurityContext, Toleration,
};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Overrides merged into the runtime pods (a Kubernetes pod template, as written).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PodTemplate(pub serde_json::Value);

impl PodTemplate {
    /// The template as Kubernetes types; an error names the field that does not fit.
    pub fn parse(&self) -> Result<PodTemplateSpec> {
        serde_path_to_error::deserialize(&self.0).map_err(|e| {
            let path = e.path().to_string();
            Error::Invalid(vec![format!(
                "spec.podTemplate{}: {}: write it as in a Pod's spec (kubectl explain pod.spec)",
                if path == "." {
                    String::new()
                } else {
                    format!(".{path}")
                },
                e.inner()
            )])
        })
    }

    /// A template from Kubernetes types (tests, the bench runner).
    pub fn from_spec(spec: &PodTemplateSpec) -> Result<Self> {
        Ok(Self(serde_json::to_value(spec)?))
    }
}

impl JsonSchema for PodTemplate {
    fn schema_name() -> Cow<'static, str> {
        "PodTemplate".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let strings = json_schema!({
            "type": "object",
            "additionalProperties": {"type": "string"}
        });
        let resources = generator.subschema_for::<ResourceRequirements>();
        let env = generator.subschema_for::<Vec<EnvVar>>();
        let security = generator.subschema_for::<SecurityContext>();
        let pod_security = generator.subschema_for::<PodSecurityContext>();
        let tolerations = generator.subschema_for::<Vec<Toleration>>();
        json_schema!({
            "description": "Overrides merged into the runtime pods, written as a Kubernetes pod template. A container named `runtime` is merged into the operator's container (image, args, ports and probes stay the operator's; your env comes after ours); other containers are added. The fields below are validated; any other pod field is kept as written and checked when the operator reads the spec.",
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
            "properties": {
                "metadata": {
                    "description": "Labels and annotations added to the pods.",
                    "type": "object",
                    "properties": {"labels": strings, "annotations": strings}
                },
                "spec": {
                    "description": "A Pod spec (kubectl explain pod.spec).",
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true,
                    "properties": {
                        "containers": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": true,
                                "required": ["name"],
                                "properties": {
                                    "name": {"type": "string"},
                                    "resources": resources,
                                    "env": env,
                                    "securityContext": security
                                }
                            }
                        },
                        "securityContext": pod_security,
                        "serviceAccountName": {"type": "string"},
                        "automountServiceAccountToken": {"type": "boolean"},
                        "priorityClassName": {"type": "string"},
                        "nodeSelector": strings,
                        "tolerations": tolerations
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn fields_outside_the_schema_are_kept_and_parsed() {
        let t = PodTemplate(serde_json::json!({
            "metadata": {"labels": {"team": "a"}},
            "spec": {
                "volumes": [{"name": "scratch", "emptyDir": {}}],
                "containers": [{"name": "runtime", "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}]
            }
        }));
        let spec = t.parse().unwrap();
        let pod = spec.spec.unwrap();
        assert_eq!(pod.volumes.unwrap()[0].name, "scratch");
        assert_eq!(
            pod.containers[0].volume_mounts.as_ref().unwrap()[0].mount_path,
            "/scratch"
        );
    }

    #[test]
    fn a_field_of_the_wrong_shape_is_refused_naming_its_path() {
        let t = PodTemplate(serde_json::json!({"spec": {"containers": [], "volumes": 3}}));
        let e = t.parse().unwrap_err().to_string();
        assert!(e.contains("spec.podTemplate.spec.volumes"), "{e}");
    }
}
