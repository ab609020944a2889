//! A Flink job's Ingress (`spec.flink.ingress`, built by
//! [`rest_ingress`](crate::engine::flink::ingress::rest_ingress)): applied by server-side apply
//! when what the spec asks for changes, deleted when the field goes. Outside the upgrade
//! machine: how the UI is reached is not part of the job's version, so changing it touches no
//! pod.

use k8s_openapi::api::networking::v1::Ingress;
use streamjob_crds::v1alpha1::{EngineKind, StreamJobSpec};

use super::*;
use crate::engine::flink::ingress::{rest_ingress, rest_name};

/// Brings the job's Ingress in line with `spec`, unless this process already did for what the
/// spec asks now. Our runtime's jobs have none (nothing is asked or deleted for them).
pub(super) async fn sync_ingress<E: Engine>(
    ctx: &Context<E>,
    owner: &Owner,
    spec: &StreamJobSpec,
) -> Result<()> {
    if spec.engine != EngineKind::Flink {
        return Ok(());
    }
    let desired = spec
        .flink
        .as_ref()
        .and_then(|f| f.ingress.as_ref())
        .map(|i| rest_ingress(owner, i));
    let wanted = desired
        .as_ref()
        .map(|i| serde_json::to_string(i).unwrap_or_default());
    let done = ctx
        .ingresses
        .lock()
        .map(|m| m.get(&owner.uid) == Some(&wanted))
        .unwrap_or(false);
    if done {
        return Ok(());
    }
    let api: Api<Ingress> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let name = rest_name(&owner.name);
    match &desired {
        Some(ingress) => {
            api.patch(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(ingress),
            )
            .await?;
            tracing::info!(ingress = %name, "applied the job's Ingress");
        }
        None => ignore_missing(api.delete(&name, &DeleteParams::default()).await)?,
    }
    if let Ok(mut m) = ctx.ingresses.lock() {
        m.insert(owner.uid.clone(), wanted);
    }
    Ok(())
}
