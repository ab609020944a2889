//! Under `podTemplatePolicy: restricted`, the Secrets a job hands to its pods (`spec.storage`,
//! Kafka sources) must be labelled for it; this reads whether they are (dereference), and
//! [`PodTemplatePolicy::refuses`] decides (pure).

use std::collections::BTreeMap;

use super::*;
use crate::pod_template_policy::{CREDENTIALS_LABEL, PodTemplatePolicy, credential_secrets};

/// Why the operator's settings refuse `job`'s spec, naming each field; `None`: allowed. Reads the
/// labels (metadata only, never the values) of the Secrets the spec names, under `restricted`.
/// A refused job is looked at again every 30 s (the operator does not watch Secrets), so
/// labelling the Secret lets it start.
pub(super) async fn refused_by_settings<E: Engine>(
    ctx: &Context<E>,
    job: &StreamJob,
    ns: &str,
) -> Result<Option<String>> {
    let policy = ctx.settings.pod_template_policy;
    let mut labelled: BTreeMap<String, Option<bool>> = BTreeMap::new();
    if policy == PodTemplatePolicy::Restricted {
        let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
        for (_, name) in credential_secrets(&job.spec) {
            if labelled.contains_key(&name) {
                continue;
            }
            let meta = secrets.get_metadata_opt(&name).await?;
            let ok = meta.map(|m| {
                m.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(CREDENTIALS_LABEL))
                    .is_some_and(|v| v == "true")
            });
            labelled.insert(name, ok);
        }
    }
    Ok(policy.refuses(&job.spec, |name| labelled.get(name).copied().flatten()))
}
