//! The per-job NetworkPolicy, created once (its content depends on nothing that changes).

use k8s_openapi::api::networking::v1::NetworkPolicy;

use super::*;
use crate::network_policy::{OperatorPeer, network_policy, network_policy_name};
use streamjob_crds::v1alpha1::EngineKind;

/// Creates the job's NetworkPolicy unless this process already saw it. A policy someone edited
/// is left alone (the operator never overwrites it); a deleted one comes back after an operator
/// restart.
pub(super) async fn ensure_network_policy<E: Engine>(
    ctx: &Context<E>,
    owner: &Owner,
    engine: EngineKind,
    peer: &OperatorPeer,
) -> Result<()> {
    let known = |ctx: &Context<E>| {
        ctx.policies
            .lock()
            .map(|p| p.contains(&owner.uid))
            .unwrap_or(false)
    };
    if known(ctx) {
        return Ok(());
    }
    let api: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let name = network_policy_name(&owner.name);
    let peer_ports = crate::engine::peer_ports(&engine);
    if api.get_opt(&name).await?.is_none() {
        let pp = PostParams {
            field_manager: Some(MANAGER.into()),
            ..Default::default()
        };
        match api
            .create(
                &pp,
                &network_policy(owner, peer, ctx.settings.control_port, peer_ports),
            )
            .await
        {
            Ok(_) => tracing::info!(policy = %name, "created the job's NetworkPolicy"),
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    if let Ok(mut p) = ctx.policies.lock() {
        p.insert(owner.uid.clone());
    }
    Ok(())
}
