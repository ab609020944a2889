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
        self.parse_at("spec.podTemplate")
    }

    /// [`PodTemplate::parse`] of the template at field `at` (`spec.flink.taskManager.podTemplate`).
    pub fn parse_at(&self, at: &str) -> Result<PodTemplateSpec> {
        serde_path_to_error::deserialize(&self.0).map_err(|e| {
            let path = e.path().to_string();
            Error::Invalid(vec![format!(
                "{at}{}: {}: write it as in a Pod's spec (kubectl explain pod.spec)",
                if path == "." {
                    String::new()
                } else {
                    format!(".{path}")
                },
                e.inner()
            )])
        })
    }

    /// A role's template (`spec.flink.taskManager.podTemplate`) over the job's (`spec.podTemplate`),
    /// as the Flink Kubernetes Operator merges them: objects field by field, lists of named items
    /// (containers, volumes, env, …) item by item by name, any other value the role's.
    pub fn overlaid(job: Option<&PodTemplate>, role: Option<&PodTemplate>) -> Option<PodTemplate> {
        match (job, role) {
            (Some(job), Some(role)) => Some(PodTemplate(merge_json(job.0.clone(), &role.0))),
            (job, role) => role.or(job).cloned(),
        }
    }
    /// A template from Kubernetes types (tests, the bench runner).
    pub fn from_spec(spec: &PodTemplateSpec) -> Result<Self> {
        Ok(Self(serde_json::to_value(spec)?))
    }
}

/// The schema of a Flink role's template (`spec.flink.jobManager.podTemplate`, `…taskManager…`):
/// the shape of `spec.podTemplate`, typed only down to the pod's spec. Typing it as deeply would
/// add twice what `spec.podTemplate` takes and push the CRD past what a client-side apply stores
/// (`crd_fits_a_client_side_apply…`); the operator parses it like the job's template and names
/// a field that does not fit in `SpecValid`.
pub fn role_template_schema(_: &mut SchemaGenerator) -> Schema {
    let strings = json_schema!({
        "type": "object",
        "additionalProperties": {"type": "string"}
    });
    json_schema!({
        "description": "Merged over spec.podTemplate into this role's pods only, as in a FlinkDeployment: the role's fields win, containers (`flink-main-container` is Flink's), volumes and env merge by name. A Kubernetes pod template, as written.",
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "properties": {
            "metadata": {
                "type": "object",
                "properties": {"labels": strings, "annotations": strings}
            },
            "spec": {
                "description": "A Pod spec (kubectl explain pod.spec).",
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true
            }
        }
    })
}

/// `over` merged into `base`: see [`PodTemplate::overlaid`].
fn merge_json(base: serde_json::Value, over: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    let name = |v: &Value| v.get("name").and_then(Value::as_str).map(str::to_owned);
    match (base, over) {
        (Value::Object(mut base), Value::Object(over)) => {
            for (key, value) in over {
                let merged = match base.remove(key) {
                    Some(old) => merge_json(old, value),
                    None => value.clone(),
                };
                base.insert(key.clone(), merged);
            }
            Value::Object(base)
        }
        (Value::Array(mut base), Value::Array(over))
            if base.iter().chain(over).all(|v| name(v).is_some()) =>
        {
            for item in over {
                match base.iter().position(|b| name(b) == name(item)) {
                    Some(i) => {
                        let old = base.remove(i);
                        base.insert(i, merge_json(old, item));
                    }
                    None => base.push(item.clone()),
                }
            }
            Value::Array(base)
        }
        (_, over) => over.clone(),
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
            "description": "Overrides merged into the job's pods, written as a Kubernetes pod template. A container named `runtime` (our runtime) or `flink-main-container` (Flink) is merged into the operator's container (image, args, ports and probes stay the operator's; your env comes after ours); other containers are added. The fields below are validated; any other pod field is kept as written and checked when the operator reads the spec.",
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
        let e = t
            .parse_at("spec.flink.taskManager.podTemplate")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("spec.flink.taskManager.podTemplate.spec.volumes"),
            "{e}"
        );
    }

    /// A role's template over the job's: fields and named items merged, the role's value wins,
    /// unnamed lists (tolerations) replaced.
    #[test]
    fn a_role_template_is_merged_over_the_job_template() {
        let job = PodTemplate(serde_json::json!({
            "metadata": {"labels": {"team": "a", "tier": "any"}},
            "spec": {
                "serviceAccountName": "flink",
                "tolerations": [{"key": "a", "operator": "Exists"}],
                "volumes": [{"name": "scratch", "emptyDir": {}}],
                "containers": [{"name": "flink-main-container",
                                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "1"}]}]
            }
        }));
        let role = PodTemplate(serde_json::json!({
            "metadata": {"labels": {"tier": "spot"}},
            "spec": {
                "tolerations": [{"key": "spot", "operator": "Exists"}],
                "volumes": [{"name": "cache", "emptyDir": {}}],
                "containers": [
                    {"name": "flink-main-container", "env": [{"name": "B", "value": "2"}]},
                    {"name": "sidecar", "image": "s"}
                ]
            }
        }));
        let merged = PodTemplate::overlaid(Some(&job), Some(&role))
            .unwrap()
            .parse()
            .unwrap();
        let labels = merged.metadata.unwrap().labels.unwrap();
        assert_eq!(labels["team"], "a");
        assert_eq!(labels["tier"], "spot");
        let spec = merged.spec.unwrap();
        assert_eq!(spec.service_account_name.as_deref(), Some("flink"));
        let tolerations = spec.tolerations.unwrap();
        assert_eq!(tolerations.len(), 1);
        assert_eq!(tolerations[0].key.as_deref(), Some("spot"));
        let volumes: Vec<_> = spec.volumes.unwrap().into_iter().map(|v| v.name).collect();
        assert_eq!(volumes, ["scratch", "cache"]);
        assert_eq!(spec.containers.len(), 2);
        let env: Vec<_> = spec.containers[0]
            .env
            .clone()
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.value.unwrap()))
            .collect();
        assert_eq!(env, [("A".into(), "1".into()), ("B".into(), "2".into())]);
        // either alone is itself
        assert_eq!(PodTemplate::overlaid(Some(&job), None), Some(job.clone()));
        assert_eq!(PodTemplate::overlaid(None, Some(&role)), Some(role));
        assert_eq!(PodTemplate::overlaid(None, None), None);
    }
}
