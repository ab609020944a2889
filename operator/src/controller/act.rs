//! Act: carry out what the decision asked for (pods, ConfigMaps, control API calls).

use super::*;

pub(super) fn endpoint(observed: &Observed, pod: &str, port: u16, token: &str) -> Result<Endpoint> {
    let ip = observed
        .pod(pod)
        .and_then(|p| p.ip.clone())
        .ok_or_else(|| Error::Control(format!("pod {pod} has no IP")))?;
    Ok(Endpoint::new(&ip, port, token))
}

/// Carries out one action. Returns whether it changed `status` (to be written again).
pub(super) async fn apply<C: ControlApi>(
    action: &Action,
    job: &StreamJob,
    ctx: &Context<C>,
    owner: &Owner,
    observed: &Observed,
    token: &str,
    status: &mut StreamJobStatus,
) -> Result<bool> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let pp = PostParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    };
    match action {
        Action::EnsureConfig { hash, spec } => {
            if !observed.config_hashes.contains(hash) {
                ignore_conflict(
                    cms.create(&pp, &resources::config_map(owner, hash, spec)?)
                        .await,
                )?;
            }
        }
        Action::DeleteConfig { hash } => {
            ignore_missing(
                cms.delete(
                    &decide::config_name(&owner.name, hash),
                    &DeleteParams::default(),
                )
                .await,
            )?;
        }
        Action::CreatePod(plan) => {
            tracing::info!(pod = %plan.name, from = ?plan.from_savepoint, standby = plan.standby, "creating runtime pod");
            ignore_conflict(
                pods.create(
                    &pp,
                    &resources::with_default_resources(
                        resources::runtime_pod(owner, plan, ctx.settings.control_port),
                        ctx.settings.runtime_resources.as_ref(),
                    ),
                )
                .await,
            )?;
        }
        Action::CreateWorker { coordinator, index } => {
            let Some(c) = observed
                .coordinators
                .iter()
                .find(|c| &c.name == coordinator)
            else {
                return Ok(false);
            };
            // the coordinator's own spec: an older one during a Shadow upgrade
            let current =
                deployment_hash(&job.spec).map_err(|e| Error::Serialize(e.to_string()))?;
            let spec = if c.hash == current {
                job.spec.clone()
            } else {
                spec_of_hash(ctx, owner, &c.hash).await?
            };
            if let Some(pod) = workers::worker_pod(owner, c, *index, &spec) {
                tracing::info!(worker = %workers::worker_name(coordinator, *index), %coordinator, "creating worker pod");
                let pod =
                    resources::with_default_resources(pod, ctx.settings.runtime_resources.as_ref());
                ignore_conflict(pods.create(&pp, &pod).await)?;
            }
        }
        Action::DeletePod { name } => {
            tracing::info!(pod = %name, "deleting pod");
            ignore_missing(pods.delete(name, &DeleteParams::default()).await)?;
        }
        Action::CreatePlanPod {
            name,
            hash,
            spec,
            from,
        } => {
            let deadline = parse_duration("readinessTimeout", &spec.upgrade.readiness_timeout)
                .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
                .unwrap_or(300);
            tracing::info!(pod = %name, %from, "creating plan pod");
            ignore_conflict(
                pods.create(
                    &pp,
                    &resources::with_default_resources(
                        resources::plan_pod(owner, name, hash, spec, from, deadline),
                        ctx.settings.runtime_resources.as_ref(),
                    ),
                )
                .await,
            )?;
        }
        Action::TriggerSavepoint {
            pod,
            dir,
            stop,
            standby,
        } => {
            let req = SavepointRequest {
                dir: Some(dir.clone()),
                stop: *stop,
                standby: *standby,
            };
            let result = match endpoint(observed, pod, ctx.settings.control_port, token) {
                Ok(ep) => ctx.control.trigger_savepoint(&ep, &req).await,
                Err(e) => Err(e),
            };
            match result {
                Ok(id) => {
                    tracing::info!(%pod, %id, stop, "savepoint triggered");
                    if let Some(p) = status.pending_savepoint.as_mut() {
                        p.request_id = id;
                    }
                }
                Err(e) => {
                    // Not taken: forget it; the next decision asks again or gives up.
                    tracing::warn!(%pod, error = %e, "cannot trigger savepoint");
                    if status
                        .pending_savepoint
                        .as_ref()
                        .is_some_and(|p| p.reason == "trigger")
                    {
                        // The nonce was not served: try again on the next reconcile.
                        status.last_handled_nonce =
                            job.status.as_ref().and_then(|s| s.last_handled_nonce);
                    }
                    status.pending_savepoint = None;
                    status.message = Some(format!("cannot trigger a savepoint on {pod}: {e}"));
                    publish(
                        ctx,
                        job,
                        true,
                        "SavepointFailed",
                        &format!("cannot trigger a savepoint on {pod}: {e}"),
                    )
                    .await;
                }
            }
            return Ok(true);
        }
        Action::Start {
            pod,
            from_savepoint,
            epoch,
        } => {
            let ep = endpoint(observed, pod, ctx.settings.control_port, token)?;
            ctx.control
                .start(&ep, from_savepoint.as_deref(), *epoch)
                .await?;
        }
        Action::Cancel { pod } => {
            // best effort: an unreachable pod is deleted anyway, and fencing stops it
            match endpoint(observed, pod, ctx.settings.control_port, token) {
                Ok(ep) => {
                    if let Err(e) = ctx.control.cancel(&ep).await {
                        tracing::info!(%pod, error = %e, "cannot cancel before deleting; fencing by epoch still applies");
                    }
                }
                Err(e) => tracing::debug!(%pod, error = %e, "no endpoint to cancel"),
            }
        }
        Action::DisposeSavepoints { paths } => {
            create_dispose_pod(ctx, job, owner, paths).await?;
        }
    }
    Ok(false)
}

pub(super) async fn create_dispose_pod<C: ControlApi>(
    ctx: &Context<C>,
    job: &StreamJob,
    owner: &Owner,
    paths: &[String],
) -> Result<String> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let hash = deployment_hash(&job.spec).map_err(|e| Error::Serialize(e.to_string()))?;
    let pp = PostParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    };
    ignore_conflict(
        cms.create(&pp, &resources::config_map(owner, &hash, &job.spec)?)
            .await,
    )?;
    let name = decide::dispose_pod_name(&owner.name, paths);
    ignore_conflict(
        pods.create(
            &pp,
            &resources::with_default_resources(
                resources::dispose_pod(owner, &name, &hash, &job.spec, paths),
                ctx.settings.runtime_resources.as_ref(),
            ),
        )
        .await,
    )?;
    Ok(name)
}
