//! The reconcile loop: observe (API + runtime control API) → [`decide`] (pure) → act, with the
//! status written by server-side apply under one field manager.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, ResourceRequirements, Secret};
use kube::api::{Api, DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action as Requeue, Config as ControllerConfig, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use rand::Rng;
use rand::distr::Alphanumeric;
use streamjob_crds::hash::deployment_hash;
use streamjob_crds::units::parse_duration;
use streamjob_crds::v1alpha1::{API_VERSION, KIND, StreamJob, StreamJobStatus};
use tracing::Instrument;

use crate::control::{ControlApi, Endpoint, SavepointRequest, SavepointState};
use crate::decide::{
    self, Action, Decision, JobRef, LABEL_HASH, LABEL_ROLE, MANAGER, Observed, PodObs, PodPhase,
    PodRole, RuntimeObs, decide,
};
use crate::disposal::{self, Disposal};
use crate::metrics::Metrics;
use crate::resources::{self, Owner, TOKEN_KEY};
use crate::workers;
use crate::{Error, Result};

/// Finalizer present only while `spec.savepoints.disposeOnDelete` is set.
pub const FINALIZER: &str = "streamjob.io/dispose-savepoints";

/// Operator settings from the command line.
#[derive(Clone, Debug)]
pub struct Settings {
    pub control_port: u16,
    pub concurrency: u16,
    /// Empty: all namespaces.
    pub namespaces: Vec<String>,
    /// Events' reporting instance (the pod name).
    pub instance: String,
    /// The operator pod's namespace (`POD_NAMESPACE`): Events about StreamJobs whose own namespace
    /// is being deleted are recorded on the operator pod there, where they outlive that namespace.
    pub home_namespace: Option<String>,
    /// Timeout of one control API call.
    pub control_timeout: Duration,
    /// Resources of the runtime container where a StreamJob's podTemplate sets none.
    pub runtime_resources: Option<ResourceRequirements>,
}

/// Shared state of the reconcilers.
pub struct Context<C: ControlApi> {
    pub client: Client,
    pub control: C,
    pub metrics: Metrics,
    pub recorder: Recorder,
    pub settings: Settings,
    failures: Mutex<HashMap<String, u32>>,
}

impl<C: ControlApi> Context<C> {
    pub fn new(client: Client, control: C, metrics: Metrics, settings: Settings) -> Self {
        let reporter = Reporter {
            controller: MANAGER.into(),
            instance: Some(settings.instance.clone()),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            control,
            metrics,
            settings,
            failures: Mutex::new(HashMap::new()),
        }
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.failures.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Runs the controllers (one per watched namespace, or one for all) until SIGTERM/Ctrl-C.
pub async fn run<C: ControlApi>(ctx: Arc<Context<C>>) {
    let client = ctx.client.clone();
    let scopes: Vec<Option<String>> = if ctx.settings.namespaces.is_empty() {
        vec![None]
    } else {
        ctx.settings.namespaces.iter().cloned().map(Some).collect()
    };
    let runs = scopes.into_iter().map(|ns| {
        let (jobs, pods): (Api<StreamJob>, Api<Pod>) = match &ns {
            Some(ns) => (
                Api::namespaced(client.clone(), ns),
                Api::namespaced(client.clone(), ns),
            ),
            None => (Api::all(client.clone()), Api::all(client.clone())),
        };
        let config = ControllerConfig::default()
            .concurrency(ctx.settings.concurrency.max(1))
            .debounce(Duration::from_millis(500));
        // Our own progress writes (lastCheckpoint, conditions, message) do not trigger another
        // reconcile; spec, metadata and upgrade-moving status changes do (see `trigger_digest`).
        let (reader, writer) = kube::runtime::reflector::store();
        let triggers = watcher(jobs, watcher::Config::default().any_semantic())
            .default_backoff()
            .reflect(writer)
            .applied_objects()
            .predicate_filter(trigger_digest, Default::default());
        Controller::for_stream(triggers, reader)
            .owns(
                pods,
                watcher::Config::default()
                    .labels(&format!("{}={MANAGER}", decide::LABEL_MANAGED))
                    .any_semantic(),
            )
            .with_config(config)
            .shutdown_on_signal()
            .run(reconcile, error_policy, ctx.clone())
            .for_each(|res| async move {
                match res {
                    Ok((obj, _)) => tracing::trace!(job = %obj, "reconciled"),
                    Err(e) => tracing::warn!(error = %e, "reconcile failed"),
                }
            })
    });
    futures::future::join_all(runs).await;
}

/// What a StreamJob change must touch to be worth a reconcile: the spec (generation), the
/// metadata the operator reads (annotations, finalizers, deletion), and the status fields that move
/// an upgrade or a savepoint along. Everything else in the status is the operator's own report.
fn trigger_digest(job: &StreamJob) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    job.metadata.generation.hash(&mut h);
    job.metadata.deletion_timestamp.is_some().hash(&mut h);
    job.finalizers().hash(&mut h);
    job.annotations().hash(&mut h);
    // no status yet and a status without these fields hash alike: the first status write of a
    // job that needs nothing else does not trigger another reconcile
    let s = job.status.as_ref();
    serde_json::to_string(&(
        s.and_then(|s| s.upgrade.as_ref()),
        s.and_then(|s| s.pending_savepoint.as_ref()),
        s.and_then(|s| s.deployment.as_ref()),
    ))
    .unwrap_or_default()
    .hash(&mut h);
    Some(h.finish())
}

fn error_policy<C: ControlApi>(job: Arc<StreamJob>, err: &Error, ctx: Arc<Context<C>>) -> Requeue {
    let key = format!("{}/{}", job.namespace().unwrap_or_default(), job.name_any());
    ctx.metrics.error(err.kind());
    let n = {
        let mut f = ctx.failures();
        let n = f.entry(key.clone()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    };
    let backoff = Duration::from_secs(2u64.saturating_pow(n.min(8))).min(Duration::from_secs(300));
    tracing::warn!(job = %key, error = %err, attempt = n, ?backoff, "reconcile error; retrying");
    Requeue::requeue(backoff)
}

async fn reconcile<C: ControlApi>(job: Arc<StreamJob>, ctx: Arc<Context<C>>) -> Result<Requeue> {
    let ns = job
        .namespace()
        .ok_or_else(|| Error::Object("StreamJob without namespace".into()))?;
    let name = job.name_any();
    let span = tracing::info_span!("reconcile", namespace = %ns, job = %name, generation = ?job.metadata.generation);
    let started = Instant::now();
    let result = reconcile_inner(&job, &ctx, &ns, &name)
        .instrument(span)
        .await;
    ctx.metrics.reconciled(started.elapsed());
    if result.is_ok() {
        ctx.failures().remove(&format!("{ns}/{name}"));
    }
    result
}

fn owner_of(job: &StreamJob, ns: &str, name: &str) -> Result<Owner> {
    Ok(Owner {
        name: name.to_string(),
        namespace: ns.to_string(),
        uid: job
            .metadata
            .uid
            .clone()
            .ok_or_else(|| Error::Object("StreamJob without uid".into()))?,
    })
}

async fn reconcile_inner<C: ControlApi>(
    job: &StreamJob,
    ctx: &Context<C>,
    ns: &str,
    name: &str,
) -> Result<Requeue> {
    let owner = owner_of(job, ns, name)?;
    let jobs: Api<StreamJob> = Api::namespaced(ctx.client.clone(), ns);
    let wants_finalizer = job
        .spec
        .savepoints
        .as_ref()
        .is_some_and(|s| s.dispose_on_delete);
    let has_finalizer = job.finalizers().iter().any(|f| f == FINALIZER);

    if job.metadata.deletion_timestamp.is_some() {
        ctx.metrics.forget(&format!("{ns}/{name}"));
        if has_finalizer {
            return cleanup(job, ctx, &owner).await;
        }
        return Ok(Requeue::await_change());
    }
    if wants_finalizer != has_finalizer {
        let mut list: Vec<String> = job
            .finalizers()
            .iter()
            .filter(|f| *f != FINALIZER)
            .cloned()
            .collect();
        if wants_finalizer {
            list.push(FINALIZER.into());
        }
        jobs.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"finalizers": list}})),
        )
        .await?;
    }

    // ---- observe ----
    let token = match ensure_token(ctx, &owner).await {
        Ok(t) => t,
        Err(Error::TokenSecret(why)) => return token_secret_invalid(job, ctx, &jobs, &why).await,
        Err(e) => return Err(e),
    };
    let (observed, pods) = observe(job, ctx, &owner, &token).await?;
    let status = job.status.clone().unwrap_or_default();

    // ---- decide ----
    let jref = JobRef {
        name: name.to_string(),
        namespace: ns.to_string(),
    };
    let decision = decide(&jref, &job.spec, &status, &observed);
    tracing::debug!(actions = ?decision.actions.len(), stage = ?decision.status.upgrade.as_ref().map(|u| &u.step), "decided");

    // ---- act: status first (the write-ahead log), then actions ----
    // Every write names the resourceVersion it was computed from: a decision made on a stale cache
    // (another operator replica, a slow watch) is refused (409) instead of overwriting newer status.
    let mut version = job.metadata.resource_version.clone();
    let mut new_status = decision.status.clone();
    if new_status != status {
        match write_status(&jobs, name, version.as_deref(), &new_status).await? {
            Written::Now(v) => version = v,
            Written::Stale => return Ok(stale(ctx, ns, name)),
        }
    }
    let mut status_dirty = false;
    let mut first_error = None;
    for action in &decision.actions {
        match apply(action, job, ctx, &owner, &observed, &token, &mut new_status).await {
            Ok(dirty) => status_dirty |= dirty,
            Err(e) => {
                tracing::warn!(error = %e, ?action, "action failed");
                publish(
                    ctx,
                    job,
                    true,
                    "ActionFailed",
                    &format!("{}: {e}", action_name(action)),
                )
                .await;
                first_error = Some(e);
                break;
            }
        }
    }
    if status_dirty
        && write_status(&jobs, name, version.as_deref(), &new_status).await? == Written::Stale
    {
        return Ok(stale(ctx, ns, name));
    }
    // workers follow the coordinator pods as observed; new coordinators get theirs next time
    if first_error.is_none()
        && let Err(e) = sync_workers(job, ctx, &owner, &pods).await
    {
        tracing::warn!(error = %e, "cannot reconcile worker pods");
        first_error = Some(e);
    }
    for note in &decision.events {
        publish(ctx, job, note.warning, &note.reason, &note.message).await;
    }
    record_metrics(ctx, ns, name, &decision);
    if let Some(e) = first_error {
        return Err(e);
    }
    Ok(Requeue::requeue(decision.requeue_after))
}

fn record_metrics<C: ControlApi>(ctx: &Context<C>, ns: &str, name: &str, d: &Decision) {
    if let Some(p) = d.status.phase {
        ctx.metrics
            .phase(&format!("{ns}/{name}"), &format!("{p:?}"));
    }
    for (reason, secs) in &d.savepoints_completed {
        ctx.metrics.savepoint(reason, *secs);
    }
    if let Some(o) = d.outcome {
        ctx.metrics.upgrade(o.as_str());
    }
}

/// The outcome of a status write with a resourceVersion precondition.
#[derive(Debug, PartialEq, Eq)]
enum Written {
    /// Written; the object's new resourceVersion.
    Now(Option<String>),
    /// Refused: the StreamJob changed since this reconcile read it.
    Stale,
}

async fn write_status(
    api: &Api<StreamJob>,
    name: &str,
    resource_version: Option<&str>,
    status: &StreamJobStatus,
) -> Result<Written> {
    let patch = serde_json::json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "resourceVersion": resource_version},
        "status": status,
    });
    match api
        .patch_status(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
    {
        Ok(job) => Ok(Written::Now(job.metadata.resource_version)),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(Written::Stale),
        Err(e) => Err(e.into()),
    }
}

/// A status write lost to a newer version of the StreamJob: nothing else is done on this stale
/// view; the watch brings the newer one and the job is reconciled again.
fn stale<C: ControlApi>(ctx: &Context<C>, ns: &str, name: &str) -> Requeue {
    tracing::info!(job = %name, namespace = %ns, "status write refused: the StreamJob changed meanwhile; reconciling again");
    ctx.metrics.error("stale_status");
    Requeue::requeue(Duration::from_secs(1))
}

async fn publish<C: ControlApi>(
    ctx: &Context<C>,
    job: &StreamJob,
    warning: bool,
    reason: &str,
    note: &str,
) {
    ctx.metrics.event(reason);
    let ev = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.to_string(),
        note: Some(note.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, &job.object_ref(&())).await {
        tracing::debug!(error = %e, "cannot record event");
    }
}

fn action_name(a: &Action) -> &'static str {
    match a {
        Action::EnsureConfig { .. } => "EnsureConfig",
        Action::DeleteConfig { .. } => "DeleteConfig",
        Action::CreatePod(_) => "CreatePod",
        Action::DeletePod { .. } => "DeletePod",
        Action::CreatePlanPod { .. } => "CreatePlanPod",
        Action::TriggerSavepoint { .. } => "TriggerSavepoint",
        Action::Start { .. } => "Start",
        Action::Cancel { .. } => "Cancel",
        Action::DisposeSavepoints { .. } => "DisposeSavepoints",
    }
}

fn ignore_conflict<T>(r: std::result::Result<T, kube::Error>) -> Result<()> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn ignore_missing<T>(r: std::result::Result<T, kube::Error>) -> Result<()> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn endpoint(observed: &Observed, pod: &str, port: u16, token: &str) -> Result<Endpoint> {
    let ip = observed
        .pod(pod)
        .and_then(|p| p.ip.clone())
        .ok_or_else(|| Error::Control(format!("pod {pod} has no IP")))?;
    Ok(Endpoint::new(&ip, port, token))
}

/// Carries out one action. Returns whether it changed `status` (to be written again).
async fn apply<C: ControlApi>(
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

async fn create_dispose_pod<C: ControlApi>(
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

/// Deletion with `disposeOnDelete`: dispose every savepoint the operator recorded, then let go —
/// also when the disposal cannot run (see `disposal`), with a Warning Event naming what remains.
async fn cleanup<C: ControlApi>(
    job: &StreamJob,
    ctx: &Context<C>,
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
            let name = decide::dispose_pod_name(&owner.name, &paths);
            if let Err(e) = ignore_missing(pods.delete(&name, &DeleteParams::default()).await) {
                tracing::debug!(pod = %name, error = %e, "cannot delete the disposal pod");
            }
        }
    }
    let jobs: Api<StreamJob> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let list: Vec<String> = job
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    jobs.patch(
        &owner.name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": list}})),
    )
    .await
    .map_err(|e| Error::Finalizer(e.to_string()))?;
    Ok(Requeue::await_change())
}

/// The Event about savepoints left behind, on the operator's own pod: the StreamJob's namespace,
/// and every Event in it, is about to disappear.
async fn publish_at_home<C: ControlApi>(
    ctx: &Context<C>,
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
async fn dispose_step<C: ControlApi>(
    job: &StreamJob,
    ctx: &Context<C>,
    owner: &Owner,
    paths: &[String],
) -> Result<Disposal> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let name = decide::dispose_pod_name(&owner.name, paths);
    let pod = pods.get_opt(&name).await?;
    let deletion = job
        .metadata
        .deletion_timestamp
        .as_ref()
        .map(|t| t.0.as_second());
    let verdict = disposal::verdict(pod.as_ref(), deletion, Utc::now().timestamp());
    if verdict != Disposal::Create {
        return Ok(verdict);
    }
    match create_dispose_pod(ctx, job, owner, paths).await {
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

/// The most the operator reads of a pod's log (a plan report, a savepoint path): one tenant's
/// pod must not make the operator that serves every namespace hold its whole log.
const LOG_LIMIT_BYTES: i64 = 64 << 10;

/// The token a job's token Secret holds: its `token` key, non-empty. Anything else is refused
/// loudly — an empty token would talk to runtime pods that accept anyone.
fn token_in(secret: &Secret, name: &str) -> Result<String> {
    let token = secret
        .data
        .as_ref()
        .and_then(|d| d.get(TOKEN_KEY))
        .map(|t| String::from_utf8_lossy(&t.0).trim().to_string())
        .unwrap_or_default();
    if token.is_empty() {
        return Err(Error::TokenSecret(format!(
            "Secret {name} has no non-empty `{TOKEN_KEY}` key: delete the Secret and the operator creates a new token (pods read it when they start)"
        )));
    }
    Ok(token)
}

/// The job's token Secret is unusable: nothing is created or contacted without a token; the
/// StreamJob says why (`Ready`/`Stalled` conditions, a Warning Event) until someone fixes it.
async fn token_secret_invalid<C: ControlApi>(
    job: &StreamJob,
    ctx: &Context<C>,
    jobs: &Api<StreamJob>,
    why: &str,
) -> Result<Requeue> {
    ctx.metrics.error("token_secret");
    tracing::warn!(job = %job.name_any(), %why, "token Secret unusable");
    let mut status = job.status.clone().unwrap_or_default();
    let before = status.clone();
    let now = Utc::now();
    let generation = job.metadata.generation;
    for (type_, ok) in [("Ready", false), ("Stalled", true)] {
        decide::set_condition(
            &mut status.conditions,
            type_,
            ok,
            "TokenSecretInvalid",
            why,
            generation,
            now,
        );
    }
    status.message = Some(why.to_string());
    if status != before {
        publish(ctx, job, true, "TokenSecretInvalid", why).await;
        let version = job.metadata.resource_version.as_deref();
        write_status(jobs, &job.name_any(), version, &status).await?;
    }
    // The operator does not watch Secrets: look again soon.
    Ok(Requeue::requeue(Duration::from_secs(30)))
}

/// The job's control token: read from its Secret, created with a random token if missing.
async fn ensure_token<C: ControlApi>(ctx: &Context<C>, owner: &Owner) -> Result<String> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let name = decide::token_secret_name(&owner.name);
    if let Some(s) = secrets.get_opt(&name).await? {
        return token_in(&s, &name);
    }
    let token: String = rand::rng()
        .sample_iter(&Alphanumeric)
        .take(40)
        .map(char::from)
        .collect();
    let pp = PostParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    };
    match secrets
        .create(&pp, &resources::token_secret(owner, &token))
        .await
    {
        Ok(_) => Ok(token),
        Err(kube::Error::Api(e)) if e.code == 409 => token_in(&secrets.get(&name).await?, &name),
        Err(e) => Err(e.into()),
    }
}

/// A pod as the decision sees it.
pub fn observe_pod(pod: &Pod) -> Option<PodObs> {
    let labels = pod.metadata.labels.as_ref()?;
    let role = PodRole::parse(labels.get(LABEL_ROLE)?)?;
    let status = pod.status.as_ref();
    let phase = match status.and_then(|s| s.phase.as_deref()) {
        Some("Pending") | None => PodPhase::Pending,
        Some("Running") => PodPhase::Running,
        Some("Succeeded") => PodPhase::Succeeded,
        Some("Failed") => PodPhase::Failed,
        Some(_) => PodPhase::Unknown,
    };
    let container = status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.name == resources::CONTAINER)
                .or_else(|| cs.first())
        });
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    let terminated = container.and_then(|c| {
        c.state
            .as_ref()
            .and_then(|s| s.terminated.clone())
            .or_else(|| c.last_state.as_ref().and_then(|s| s.terminated.clone()))
    });
    let final_state = matches!(phase, PodPhase::Succeeded | PodPhase::Failed);
    Some(PodObs {
        name: pod.metadata.name.clone()?,
        role,
        spec_hash: labels.get(LABEL_HASH).cloned(),
        phase,
        ready,
        terminating: pod.metadata.deletion_timestamp.is_some(),
        restarts: container.map(|c| c.restart_count).unwrap_or(0),
        waiting_reason: container
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.waiting.as_ref())
            .and_then(|w| w.reason.clone()),
        exit_code: terminated
            .as_ref()
            .filter(|_| final_state)
            .map(|t| t.exit_code),
        message: terminated
            .as_ref()
            .and_then(|t| t.message.clone())
            .or_else(|| status.and_then(|s| s.message.clone())),
        ip: status
            .and_then(|s| s.pod_ip.clone())
            .filter(|ip| !ip.is_empty()),
    })
}

async fn observe<C: ControlApi>(
    job: &StreamJob,
    ctx: &Context<C>,
    owner: &Owner,
    token: &str,
) -> Result<(Observed, Vec<Pod>)> {
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let lp = ListParams::default().labels(&resources::selector(&owner.name));
    let pod_list = pods_api.list(&lp).await?;
    let mut obs = Observed::new(Utc::now());
    obs.generation = job.metadata.generation;
    for pod in &pod_list.items {
        if let Some(mut p) = observe_pod(pod) {
            // A finished plan pod whose result has no message: try its log (real kubelets).
            if p.role == PodRole::Plan
                && matches!(p.phase, PodPhase::Succeeded | PodPhase::Failed)
                && p.message.is_none()
            {
                let params = LogParams {
                    tail_lines: Some(50),
                    limit_bytes: Some(LOG_LIMIT_BYTES),
                    ..Default::default()
                };
                if let Ok(log) = pods_api.logs(&p.name, &params).await {
                    p.message = Some(log);
                }
            }
            obs.pods.push(p);
        }
    }
    obs.recovered_savepoint = job
        .annotations()
        .get(decide::ANNOTATION_RECOVERED_SAVEPOINT)
        .cloned()
        .filter(|p| !p.is_empty());
    // A runtime that exited after stop-with-savepoint printed the path: read its log.
    let status = job.status.clone().unwrap_or_default();
    if status.pending_savepoint.as_ref().is_some_and(|p| p.stop)
        && let Some(active) = status.deployment.as_ref().and_then(|d| d.workload.clone())
        && let Some(p) = obs
            .pods
            .iter_mut()
            .find(|p| p.name == active && p.phase == PodPhase::Succeeded && p.message.is_none())
    {
        let params = LogParams {
            tail_lines: Some(50),
            limit_bytes: Some(LOG_LIMIT_BYTES),
            ..Default::default()
        };
        if let Ok(log) = pods_api.logs(&p.name, &params).await {
            p.message = Some(log);
        }
    }
    obs.config_hashes = cms
        .list(&lp)
        .await?
        .items
        .iter()
        .filter_map(|c| c.metadata.labels.as_ref()?.get(LABEL_HASH).cloned())
        .collect();
    // Control API of the runtime pods, concurrently.
    let port = ctx.settings.control_port;
    let timeout = ctx.settings.control_timeout;
    let targets: Vec<(String, String)> = obs
        .pods
        .iter()
        .filter(|p| p.role == PodRole::Runtime && !p.terminating && p.phase == PodPhase::Running)
        .filter_map(|p| Some((p.name.clone(), p.ip.clone()?)))
        .collect();
    let calls = targets.into_iter().map(|(name, ip)| async move {
        let ep = Endpoint::new(&ip, port, token);
        let r = match tokio::time::timeout(timeout, ctx.control.status(&ep)).await {
            Ok(Ok(s)) => RuntimeObs::Status(Box::new(s)),
            Ok(Err(e)) => RuntimeObs::Unreachable(e.to_string()),
            Err(_) => RuntimeObs::Unreachable(format!("no answer within {timeout:?}")),
        };
        (name, r)
    });
    obs.runtime = futures::future::join_all(calls).await;
    tracing::debug!(pods = obs.pods.len(), runtime = ?obs.runtime, "observed");
    // The savepoint in flight, asked of the pod it was requested from.
    if let (Some(p), Some(active)) = (
        status.pending_savepoint.as_ref(),
        status.deployment.as_ref().and_then(|d| d.workload.clone()),
    ) && !p.request_id.is_empty()
        && let Some(ip) = obs.pod(&active).and_then(|p| p.ip.clone())
    {
        let ep = Endpoint::new(&ip, port, token);
        match tokio::time::timeout(timeout, ctx.control.savepoint(&ep, &p.request_id)).await {
            Ok(Ok(s)) => obs.savepoint = Some(s),
            Ok(Err(e)) => tracing::debug!(error = %e, "cannot poll savepoint"),
            Err(_) => tracing::debug!("savepoint poll timed out"),
        }
    }
    if let Some(SavepointState::Completed { path }) = &obs.savepoint {
        tracing::info!(%path, "savepoint completed");
    }
    Ok((obs, pod_list.items))
}

/// Creates and deletes worker pods so every live coordinator pod has its `spec.workers`
/// workers (see [`crate::workers`]). `pods` is what this reconcile observed.
async fn sync_workers<C: ControlApi>(
    job: &StreamJob,
    ctx: &Context<C>,
    owner: &Owner,
    pods: &[Pod],
) -> Result<()> {
    let (coordinators, workers) = workers::observe(pods);
    let actions = workers::plan_workers(&coordinators, &workers);
    if actions.is_empty() {
        return Ok(());
    }
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let pp = PostParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    };
    let current = deployment_hash(&job.spec).map_err(|e| Error::Serialize(e.to_string()))?;
    // specs of older deployments, read once per hash (a coordinator needs N workers)
    let mut specs: HashMap<String, streamjob_crds::v1alpha1::StreamJobSpec> = HashMap::new();
    specs.insert(current, job.spec.clone());
    for action in actions {
        match action {
            workers::WorkerAction::Create { coordinator, index } => {
                let Some(c) = coordinators.iter().find(|c| c.name == coordinator) else {
                    continue;
                };
                // the coordinator's own spec: an older one during a shadow upgrade
                if !specs.contains_key(&c.hash) {
                    let spec = spec_of_hash(ctx, owner, &c.hash).await?;
                    specs.insert(c.hash.clone(), spec);
                }
                let Some(pod) = specs
                    .get(&c.hash)
                    .and_then(|spec| workers::worker_pod(owner, c, index, spec))
                else {
                    continue;
                };
                tracing::info!(worker = %workers::worker_name(&coordinator, index), %coordinator, "creating worker pod");
                let pod =
                    resources::with_default_resources(pod, ctx.settings.runtime_resources.as_ref());
                ignore_conflict(api.create(&pp, &pod).await)?;
            }
            workers::WorkerAction::Delete { name } => {
                tracing::info!(worker = %name, "deleting worker pod");
                ignore_missing(api.delete(&name, &DeleteParams::default()).await)?;
            }
        }
    }
    Ok(())
}

/// The spec a deployed hash was created from (its manifest ConfigMap).
async fn spec_of_hash<C: ControlApi>(
    ctx: &Context<C>,
    owner: &Owner,
    hash: &str,
) -> Result<streamjob_crds::v1alpha1::StreamJobSpec> {
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let cm = cms.get(&decide::config_name(&owner.name, hash)).await?;
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get(resources::MANIFEST_KEY))
        .ok_or_else(|| {
            Error::Object(format!(
                "ConfigMap {} has no {}",
                decide::config_name(&owner.name, hash),
                resources::MANIFEST_KEY
            ))
        })?;
    StreamJob::from_yaml(text)
        .map(|j| j.spec)
        .map_err(|e| Error::Object(format!("manifest of deployment {hash}: {e}")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_spec_metadata_and_upgrade_progress_trigger_a_reconcile() {
        let job = |status: serde_json::Value, annotations: serde_json::Value| -> StreamJob {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "streamjob.io/v1alpha1", "kind": "StreamJob",
                "metadata": {"name": "j", "generation": 3, "annotations": annotations},
                "spec": {"image": "i", "checkpoints": {"dir": "/ck"}, "pipeline": [
                    {"uid": "g", "source": {"generator": {}}}, {"uid": "o", "print": {}}]},
                "status": status,
            }))
            .unwrap()
        };
        let fresh = trigger_digest(&job(serde_json::Value::Null, serde_json::json!({})));
        // the operator's own report: phase, checkpoint, message
        let reported = job(
            serde_json::json!({"phase": "Suspended", "observedGeneration": 3,
                "lastCheckpoint": {"id": 7, "path": "/ck/chk-7", "time": "2026-01-01T00:00:00Z"},
                "message": "suspended"}),
            serde_json::json!({}),
        );
        assert_eq!(trigger_digest(&reported), fresh);
        // an upgrade moving on, a recovery annotation, a new generation: reconcile
        let moving = job(
            serde_json::json!({"upgrade": {"from": "a", "to": "b", "step": "InPlace/Savepointing", "startedAt": "2026-01-01T00:00:00Z"}}),
            serde_json::json!({}),
        );
        assert_ne!(trigger_digest(&moving), fresh);
        let annotated = job(
            serde_json::Value::Null,
            serde_json::json!({"streamjob.io/recovered-savepoint": "/sp/1"}),
        );
        assert_ne!(trigger_digest(&annotated), fresh);
        let mut newer = job(serde_json::Value::Null, serde_json::json!({}));
        newer.metadata.generation = Some(4);
        assert_ne!(trigger_digest(&newer), fresh);
    }

    #[test]
    fn a_token_secret_without_a_token_is_refused() {
        let secret = |data: serde_json::Value| -> Secret {
            serde_json::from_value(
                serde_json::json!({"metadata": {"name": "j-control-token"}, "data": data}),
            )
            .unwrap()
        };
        // base64 of "abc" and of "  "
        assert_eq!(
            token_in(&secret(serde_json::json!({"token": "YWJj"})), "s").unwrap(),
            "abc"
        );
        for data in [
            serde_json::json!({}),
            serde_json::json!({"token": ""}),
            serde_json::json!({"token": "ICA="}),
            serde_json::json!({"other": "YWJj"}),
        ] {
            let e = token_in(&secret(data.clone()), "j-control-token").unwrap_err();
            assert!(
                e.to_string()
                    .contains("Secret j-control-token has no non-empty `token` key"),
                "{data}: {e}"
            );
        }
    }

    #[test]
    fn pods_are_observed() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "clicks-1", "labels": {"streamjob.io/role": "runtime", "streamjob.io/spec-hash": "h"}},
            "status": {
                "phase": "Running", "podIP": "127.0.1.5",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{
                    "name": "runtime", "ready": true, "restartCount": 2, "image": "i", "imageID": "",
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": {"exitCode": 1, "message": "boom"}}
                }]
            }
        }))
        .unwrap();
        let p = observe_pod(&pod).unwrap();
        assert_eq!(p.role, PodRole::Runtime);
        assert_eq!(p.spec_hash.as_deref(), Some("h"));
        assert_eq!(p.phase, PodPhase::Running);
        assert!(p.ready);
        assert_eq!(p.restarts, 2);
        assert!(p.crash_looping());
        assert_eq!(p.exit_code, None);
        assert_eq!(p.message.as_deref(), Some("boom"));
        assert_eq!(p.ip.as_deref(), Some("127.0.1.5"));

        let plan: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "clicks-plan-1", "labels": {"streamjob.io/role": "plan"}},
            "status": {"phase": "Failed", "containerStatuses": [{
                "name": "runtime", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
                "state": {"terminated": {"exitCode": 3, "message": "{\"operators\":[]}"}}
            }]}
        }))
        .unwrap();
        let p = observe_pod(&plan).unwrap();
        assert_eq!((p.phase, p.exit_code), (PodPhase::Failed, Some(3)));
        let unlabelled: Pod =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "x"}})).unwrap();
        assert!(observe_pod(&unlabelled).is_none());
    }
}
