//! Unknown fields in a manifest a user wrote: `paralelism: 4` is refused with its path and the
//! closest known name, as the API server's strict field validation does, instead of running the
//! job at parallelism 1.
//!
//! The known fields are read from the CRD's own schema (so the rule cannot drift from the types);
//! objects the schema keeps as written (`x-kubernetes-preserve-unknown-fields`, maps,
//! `metadata`) are not checked. Manifests the operator writes for its pods are read leniently
//! ([`StreamJob::from_yaml`]), so an older runtime image still reads a newer operator's manifest.

use serde_json::Value;

use crate::v1alpha1::StreamJob;
use crate::{Error, Result};

impl StreamJob {
    /// [`StreamJob::from_yaml`] that also refuses unknown fields, naming each with its path and
    /// the closest known field.
    pub fn from_yaml_strict(text: &str) -> Result<StreamJob> {
        let job = StreamJob::from_yaml(text)?;
        let value: Value = serde_yaml_ng::from_str(text)?;
        let crd = serde_json::to_value(crate::crd::crd())?;
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let mut unknown = Vec::new();
        unknown_fields(&value, schema, "", &mut unknown);
        if unknown.is_empty() {
            Ok(job)
        } else {
            Err(Error::Invalid(unknown))
        }
    }
}

/// Pushes `<path>: unknown field …` for every key of `value` that `schema` does not know.
fn unknown_fields(value: &Value, schema: &Value, path: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if schema["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true) {
                return;
            }
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (key, v) in map {
                    // the CRD's root schema lists only spec and status; every object has these
                    if path.is_empty() && matches!(key.as_str(), "apiVersion" | "kind" | "metadata")
                    {
                        continue;
                    }
                    let at = if path.is_empty() {
                        key.clone()
                    } else {
                        format!("{path}.{key}")
                    };
                    match properties.get(key) {
                        Some(s) => unknown_fields(v, s, &at, out),
                        None => out.push(format!(
                            "{at}: unknown field{}",
                            closest(key, properties.keys())
                                .map(|k| format!(", did you mean {k:?}?"))
                                .unwrap_or_default()
                        )),
                    }
                }
            } else if let Some(values) = schema.get("additionalProperties") {
                for (key, v) in map {
                    unknown_fields(v, values, &format!("{path}.{key}"), out);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    unknown_fields(v, item, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

/// The known name closest to `key`, if it is close enough to be a typo.
fn closest<'a>(key: &str, known: impl Iterator<Item = &'a String>) -> Option<&'a String> {
    known
        .map(|k| {
            (
                strsim::jaro_winkler(&key.to_lowercase(), &k.to_lowercase()),
                k,
            )
        })
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const JOB: &str = "apiVersion: streamjob.io/v1alpha1\nkind: StreamJob\nmetadata: {name: a, labels: {x: y}}\nspec:\n  image: i\n  paralelism: 4\n  checkpoints: {dir: /tmp/ck, intervall: 1s}\n  podTemplate: {spec: {volumes: [{name: v, emptyDir: {}}]}}\n  pipeline:\n    - uid: in\n      source: {generator: {count: 10}}\n    - uid: out\n      print: {}\n      keyby: [a]\n";

    #[test]
    fn typos_are_named_with_the_closest_field() {
        let e = StreamJob::from_yaml_strict(JOB).unwrap_err().to_string();
        assert!(
            e.contains("spec.paralelism: unknown field, did you mean \"parallelism\"?"),
            "{e}"
        );
        assert!(
            e.contains("spec.checkpoints.intervall: unknown field, did you mean \"interval\"?"),
            "{e}"
        );
        assert!(
            e.contains("spec.pipeline[1].keyby: unknown field, did you mean \"keyBy\"?"),
            "{e}"
        );
        // metadata and the pod template keep what they are given
        assert!(!e.contains("labels") && !e.contains("volumes"), "{e}");
        // the lenient reader (manifests the operator writes) ignores them
        assert_eq!(StreamJob::from_yaml(JOB).unwrap().spec.parallelism, 1);
    }

    #[test]
    fn a_field_nothing_resembles_is_named_without_a_guess() {
        let text = JOB
            .replace("  paralelism: 4\n", "  zzz: 1\n")
            .replace("intervall", "interval")
            .replace("      keyby: [a]\n", "");
        let e = StreamJob::from_yaml_strict(&text).unwrap_err().to_string();
        assert!(
            e.contains("spec.zzz: unknown field") && !e.contains("did you mean"),
            "{e}"
        );
    }
}
