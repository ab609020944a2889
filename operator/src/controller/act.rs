//! Act: carry out what the decision asked for through the job's engine, and keep the engine-
//! neutral bookkeeping (the savepoint request id in status, a failed trigger handed back).

use super::*;

/// Carries out one action. Returns whether it changed `status` (to be written again).
pub(super) async fn apply<E: Engine>(
    action: &Action,
    ctx: &Context<E>,
    scope: &JobScope<'_>,
    observed: &Observed,
    status: &mut StreamJobStatus,
) -> Result<bool> {
    let engine = &ctx.engine;
    match action {
        Action::PrepareVersion { hash, spec } => {
            engine.prepare_version(scope, observed, hash, spec).await?
        }
        Action::RetireVersion { hash } => engine.retire_version(scope, hash).await?,
        Action::Deploy(run) => engine.deploy(scope, run).await?,
        Action::AddWorker { run, index } => engine.add_worker(scope, observed, run, *index).await?,
        Action::Remove { name } => engine.remove(scope, name).await?,
        Action::ForceRemove { name } => force_delete_pod(scope, name).await?,
        Action::CheckCompatibility {
            name,
            hash,
            spec,
            from,
        } => {
            engine
                .check_compatibility(scope, name, hash, spec, from)
                .await?
        }
        Action::TakeSavepoint {
            run,
            dir,
            stop,
            standby,
        } => {
            let key = status
                .pending_savepoint
                .as_ref()
                .map(|p| format!("{}/{}", p.reason, p.started_at))
                .unwrap_or_default();
            let order = SavepointOrder {
                dir: dir.clone(),
                stop: *stop,
                standby: *standby,
                key,
            };
            match engine.take_savepoint(scope, observed, run, &order).await {
                Ok(id) => {
                    tracing::info!(%run, %id, stop, "savepoint triggered");
                    if let Some(p) = status.pending_savepoint.as_mut() {
                        p.request_id = id;
                    }
                }
                Err(e) => savepoint_not_taken(ctx, scope.job, run, &e, status).await,
            }
            return Ok(true);
        }
        Action::Start {
            run,
            from_savepoint,
            epoch,
        } => {
            engine
                .start(scope, observed, run, from_savepoint.as_deref(), *epoch)
                .await?
        }
        Action::Cancel { run } => engine.cancel(scope, observed, run).await,
        Action::Dispose { paths } => {
            engine.dispose(scope, paths).await?;
        }
    }
    Ok(false)
}

/// A savepoint the engine did not take is forgotten: the next decision asks again or gives up.
async fn savepoint_not_taken<E: Engine>(
    ctx: &Context<E>,
    job: &StreamJob,
    run: &str,
    e: &Error,
    status: &mut StreamJobStatus,
) {
    tracing::warn!(%run, error = %e, "cannot trigger savepoint");
    if status
        .pending_savepoint
        .as_ref()
        .is_some_and(|p| p.reason == "trigger")
    {
        // The nonce was not served: try again on the next reconcile.
        status.last_handled_nonce = job.status.as_ref().and_then(|s| s.last_handled_nonce);
    }
    status.pending_savepoint = None;
    let message = format!("cannot trigger a savepoint on {run}: {e}");
    status.message = Some(message.clone());
    publish(ctx, job, true, "SavepointFailed", &message).await;
}

/// Deletes pod `name` with a grace period of zero: the API server removes it at once, without
/// the kubelet's confirmation (`kubectl delete pod --force --grace-period=0`).
async fn force_delete_pod(scope: &JobScope<'_>, name: &str) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(scope.client.clone(), &scope.owner.namespace);
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    tracing::warn!(pod = %name, "force-deleting a pod stuck terminating");
    ignore_missing(pods.delete(name, &params).await)
}
