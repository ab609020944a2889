//! Deletion: dispose the recorded savepoints, then release the finalizer — never forever.

use super::*;

/// Deletion with `disposeOnDelete`: dispose every savepoint the operator recorded, then let go —
/// also when the disposal cannot run (see `disposal`), with a Warning Event naming what remains.
pub(super) async fn cleanup<E: Engine>(
    job: &StreamJob,
    ctx: &Context<E>,
    owner: &Owner,
) -> Result<Requeue> {
    let status = job.status.clone().unwrap_or_default();
    let mut paths: BTreeSet<String> = status
        .savepoint_history
        .iter()
        .map(|s| s.path.clone())
        .collect();
    paths.extend(status.last_savepoint.map(|s| s.path));
    paths.extend(status.upgrade.and_then(|u| u.savepoint));
    let paths: Vec<String> = paths.into_iter().collect();
    let verdict = if paths.is_empty() {
        Disposal::Disposed
    } else {
        dispose_step(job, ctx, owner, &paths).await?
    };
    match verdict {
        Disposal::Create | Disposal::Wait => return Ok(Requeue::requeue(Duration::from_secs(3))),
        Disposal::Disposed if !paths.is_empty() => {
            publish(ctx, job, false, "SavepointsDisposed", &paths.join(", ")).await;
        }
        Disposal::Disposed => {}
        Disposal::LeftBehind(why) => {
            tracing::warn!(job = %owner.name, namespace = %owner.namespace, %why, left = ?paths,
                "deleting without disposing savepoints");
            publish(
                ctx,
                job,
                true,
                "SavepointsLeftBehind",
                &format!(
                    "{why}; the StreamJob is deleted and these savepoints remain: {}",
                    paths.join(", ")
                ),
            )
            .await;
            if why.contains("namespace is being deleted") {
                publish_at_home(ctx, owner, &why, &paths).await;
            }
            let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &owner.namespace);
            let name = crate::objects::names::dispose_pod_name(&owner.name, &paths);
            if let Err(e) = ignore_missing(pods.delete(&name, &DeleteParams::default()).await) {
                tracing::debug!(pod = %name, error = %e, "cannot delete the disposal pod");
            }
        }
    }
    let jobs: Api<StreamJob> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    if let Some(patch) = super::finalizer::remove(job.finalizers(), FINALIZER) {
        jobs.patch(
            &owner.name,
            &PatchParams::default(),
            &Patch::Json::<()>(patch),
        )
        .await
        .map_err(Error::Finalizer)?;
    }
    Ok(Requeue::await_change())
}

/// The Event about savepoints left behind, on the operator's own pod: the StreamJob's namespace,
/// and every Event in it, is about to disappear.
pub(super) async fn publish_at_home<E: Engine>(
    ctx: &Context<E>,
    owner: &Owner,
    why: &str,
    paths: &[String],
) {
    let Some(home) = ctx.settings.home_namespace.clone() else {
        return;
    };
    let me = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(ctx.settings.instance.clone()),
        namespace: Some(home),
        ..Default::default()
    };
    let ev = Event {
        type_: EventType::Warning,
        reason: "SavepointsLeftBehind".into(),
        note: Some(
            format!(
                "StreamJob {}/{}: {why}; these savepoints remain: {}",
                owner.namespace,
                owner.name,
                paths.join(", ")
            )
            .chars()
            .take(1000)
            .collect(),
        ),
        action: "Cleanup".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, &me).await {
        tracing::debug!(error = %e, "cannot record event on the operator pod");
    }
}

/// One look at the disposal pod: create it, wait for it, or give up on it.
pub(super) async fn dispose_step<E: Engine>(
    job: &StreamJob,
    ctx: &Context<E>,
    owner: &Owner,
    paths: &[String],
) -> Result<Disposal> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let name = crate::objects::names::dispose_pod_name(&owner.name, paths);
    let pod = pods.get_opt(&name).await?;
    let deletion = job
        .metadata
        .deletion_timestamp
        .as_ref()
        .map(|t| t.0.as_second());
    let verdict = disposal::verdict(pod.as_ref(), deletion, ctx.clock.now().timestamp());
    if verdict != Disposal::Create {
        return Ok(verdict);
    }
    let scope = JobScope {
        client: &ctx.client,
        job,
        owner,
        // deletion makes no control calls
        token: "",
    };
    match ctx.engine.dispose(&scope, paths).await {
        Ok(_) => {
            publish(
                ctx,
                job,
                false,
                "DisposingSavepoints",
                &format!("disposing {} savepoint(s) before deletion", paths.len()),
            )
            .await;
            Ok(Disposal::Wait)
        }
        Err(Error::Kube(e)) if disposal::namespace_terminating(&e) => Ok(Disposal::LeftBehind(
            "the namespace is being deleted, so no disposal pod can run in it".into(),
        )),
        Err(e) => Err(e),
    }
}
