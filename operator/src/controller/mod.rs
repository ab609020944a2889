//! The reconcile loop: observe → [`decide`] (pure) → act, with the status written by
//! server-side apply under one field manager. Observing and acting on a job's runs is the
//! job's engine adapter's part ([`crate::engine`]); this loop is the same for every engine.
//!
//! By role: this file runs the loop and one reconcile; `commit` (the order a decision is carried
//! out in: status, actions, events), `act` (actions through the engine, with
//! the status bookkeeping), `cleanup` (deletion and the finalizer), `token` (the control token
//! Secret) and `network` (the job's NetworkPolicy) hold the rest.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, ResourceRequirements, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action as Requeue, Config as ControllerConfig, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use rand::Rng;
use rand::distr::Alphanumeric;
use streamjob_crds::v1alpha1::{API_VERSION, KIND, StreamJob, StreamJobStatus};
use tracing::Instrument;

use crate::api::ignore_missing;
use crate::clock::ApiClock;
use crate::decide::{self, Action, Decision, JobRef, Observed, decide};
use crate::disposal::{self, Disposal};
use crate::engine::runtime::control::ControlApi;
use crate::engine::{Engine, Engines, FlinkEngine, JobScope, RuntimeEngine, SavepointOrder};
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::objects::{self, Owner, TOKEN_KEY};
use crate::objects::{LABEL_MANAGED, MANAGER};
use crate::{Error, Result};

/// Finalizer present only while `spec.savepoints.disposeOnDelete` is set.
pub const FINALIZER: &str = "streamjob.io/dispose-savepoints";

/// Operator settings from the command line.
#[derive(Clone, Debug)]
pub struct Settings {
    pub control_port: u16,
    pub concurrency: u16,
    /// Reconcile slots one namespace may hold at once (see [`fairness`]).
    pub namespace_concurrency: u16,
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
    /// The image with the Flink savepoint pre-check (`--flink-checker-image`).
    pub flink_checker_image: String,
    /// Some: every StreamJob gets a NetworkPolicy admitting this operator to its control port.
    pub network_policy: Option<crate::network_policy::OperatorPeer>,
    /// What `spec.podTemplate` may ask for.
    pub pod_template_policy: crate::pod_template_policy::PodTemplatePolicy,
}

/// Shared state of the reconcilers.
pub struct Context<E: Engine> {
    pub client: Client,
    /// The adapter that turns the decision's actions into objects and calls.
    pub engine: E,
    pub metrics: Metrics,
    pub recorder: Recorder,
    pub settings: Settings,
    failures: Mutex<HashMap<String, u32>>,
    /// StreamJobs (by uid) whose NetworkPolicy this process has seen or created.
    policies: Mutex<BTreeSet<String>>,
    /// Flink StreamJobs (by uid) and the Ingress this process last applied for each (`None`:
    /// made sure there is none).
    ingresses: Mutex<HashMap<String, Option<String>>>,
    /// With leader election: checked before every status write and every action.
    leadership: Option<Leadership>,
    /// The clock every status time is written and read on (the API server's, estimated).
    clock: Arc<ApiClock>,
    /// Reconciles in flight per namespace, bounded so that one tenant cannot hold every slot.
    slots: fairness::NamespaceSlots,
}

impl<C: ControlApi> Context<Engines<C>> {
    /// The operator for every engine: our runtime, driven over its control API by `control`,
    /// and Apache Flink, over each JobManager's REST API.
    pub fn new(client: Client, control: C, metrics: Metrics, settings: Settings) -> Self {
        let engine = Engines {
            runtime: RuntimeEngine::new(
                control,
                settings.control_port,
                settings.control_timeout,
                settings.runtime_resources.clone(),
            ),
            flink: FlinkEngine::new(
                settings.control_timeout,
                settings.flink_checker_image.clone(),
            ),
        };
        Self::with_engine(client, engine, metrics, settings)
    }
}

impl<E: Engine> Context<E> {
    pub fn with_engine(client: Client, engine: E, metrics: Metrics, settings: Settings) -> Self {
        let reporter = Reporter {
            controller: MANAGER.into(),
            instance: Some(settings.instance.clone()),
        };
        // with listed namespaces each has a controller and slots of its own: no limit needed
        let slots = fairness::NamespaceSlots::new(if settings.namespaces.is_empty() {
            settings.namespace_concurrency
        } else {
            settings.concurrency
        });
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            engine,
            metrics,
            settings,
            failures: Mutex::new(HashMap::new()),
            policies: Mutex::new(BTreeSet::new()),
            ingresses: Mutex::new(HashMap::new()),
            leadership: None,
            clock: Arc::new(ApiClock::default()),
            slots,
        }
    }

    /// Reads status times on `clock` (by default the local clock, offset zero).
    pub fn with_clock(mut self, clock: Arc<ApiClock>) -> Self {
        self.clock = clock;
        self
    }

    /// Acts only while `leadership` holds (several replicas elect one through a Lease).
    pub fn leading(mut self, leadership: Leadership) -> Self {
        self.leadership = Some(leadership);
        self
    }

    /// Refuses to go on once this replica's Lease has run out: a replica that was paused
    /// (SIGSTOP, a frozen cgroup) past the renew deadline must not carry out a decision it made
    /// before the pause, while the standby that took over acts on the same job.
    fn still_leading(&self) -> Result<()> {
        match &self.leadership {
            Some(l) if !l.holds_now() => Err(Error::NotLeader),
            _ => Ok(()),
        }
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.failures.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Runs the controllers (one per watched namespace, or one for all) until SIGTERM/Ctrl-C.
pub async fn run<E: Engine>(ctx: Arc<Context<E>>) {
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
        let (metrics, store, scope) = (ctx.metrics.clone(), reader.clone(), ns.clone());
        let triggers = watcher(jobs, watcher::Config::default().any_semantic())
            .default_backoff()
            .reflect(writer)
            .inspect(move |ev| {
                if let Ok(ev) = ev {
                    forget_deleted(&metrics, &store, scope.as_deref(), ev);
                }
            })
            .applied_objects()
            .predicate_filter(trigger_digest, Default::default());
        Controller::for_stream(triggers, reader)
            .owns(
                pods,
                watcher::Config::default()
                    .labels(&format!("{}={MANAGER}", LABEL_MANAGED))
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

/// A job deleted without our finalizer is never reconciled again (it is gone from the store), so
/// its phase would stay counted in `streamjob_jobs` and `StreamJobFailed` would fire for good:
/// drop it when the watch sees it go, and after a re-list drop every job of this scope it lacks.
fn forget_deleted(
    metrics: &Metrics,
    store: &kube::runtime::reflector::Store<StreamJob>,
    scope: Option<&str>,
    ev: &watcher::Event<StreamJob>,
) {
    let key = |j: &StreamJob| format!("{}/{}", j.namespace().unwrap_or_default(), j.name_any());
    match ev {
        watcher::Event::Delete(job) => metrics.forget(&key(job)),
        watcher::Event::InitDone => {
            let present: BTreeSet<String> = store.state().iter().map(|j| key(j.as_ref())).collect();
            let prefix = scope.map(|ns| format!("{ns}/"));
            metrics.retain_jobs(|k| {
                present.contains(k) || prefix.as_deref().is_some_and(|p| !k.starts_with(p))
            });
        }
        _ => {}
    }
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

fn error_policy<E: Engine>(job: Arc<StreamJob>, err: &Error, ctx: Arc<Context<E>>) -> Requeue {
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

async fn reconcile<E: Engine>(job: Arc<StreamJob>, ctx: Arc<Context<E>>) -> Result<Requeue> {
    let ns = job.namespace().ok_or(Error::MissingMetadata("namespace"))?;
    let name = job.name_any();
    let Some(_slot) = ctx.slots.try_take(&ns) else {
        // this namespace holds its share of the slots: give this one back to the others
        ctx.metrics.deferred();
        return Ok(Requeue::requeue(fairness::defer_delay()));
    };
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
            .ok_or(Error::MissingMetadata("uid"))?,
    })
}

async fn reconcile_inner<E: Engine>(
    job: &StreamJob,
    ctx: &Context<E>,
    ns: &str,
    name: &str,
) -> Result<Requeue> {
    // before the finalizer, the token Secret and the NetworkPolicy too (checked again before
    // the status write and each action, after the observation's I/O)
    ctx.still_leading()?;
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
    let change = if wants_finalizer {
        finalizer::add(job.finalizers(), FINALIZER)
    } else {
        finalizer::remove(job.finalizers(), FINALIZER)
    };
    if let Some(patch) = change {
        jobs.patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
            .map_err(Error::Finalizer)?;
    }

    // ---- observe ----
    let token = match ensure_token(ctx, &owner).await {
        Ok(t) => t,
        Err(e @ Error::TokenSecret { .. }) => {
            return token_secret_invalid(job, ctx, &jobs, &e.to_string()).await;
        }
        Err(e) => return Err(e),
    };
    if let Some(peer) = &ctx.settings.network_policy {
        network::ensure_network_policy(ctx, &owner, job.spec.engine, peer).await?;
    }
    ingress::sync_ingress(ctx, &owner, &job.spec).await?;
    let scope = JobScope {
        client: &ctx.client,
        job,
        owner: &owner,
        token: &token,
    };
    let mut observed = ctx.engine.observe(&scope).await?;
    // the times in status were written on the API server's clock, by this replica or another
    observed.now = ctx.clock.now();
    observed.refused_by_settings = credentials::refused_by_settings(ctx, job, ns).await?;
    let status = job.status.clone().unwrap_or_default();

    // ---- decide ----
    let jref = JobRef {
        name: name.to_string(),
        namespace: ns.to_string(),
    };
    let decision = decide(&jref, &job.spec, &status, &observed);
    tracing::debug!(actions = ?decision.actions.len(), stage = ?decision.status.upgrade.as_ref().map(|u| &u.step), "decided");

    // ---- act: status first (the write-ahead log), then actions, then events (see `commit`) ----
    let mut cluster = commit::Cluster {
        ctx,
        scope: &scope,
        observed: &observed,
        jobs: &jobs,
        version: job.metadata.resource_version.clone(),
    };
    let failed = match commit::carry_out(&decision, &status, &mut cluster).await? {
        commit::Carried::Stale => return Ok(stale(ctx, ns, name)),
        commit::Carried::Done => None,
        commit::Carried::ActionFailed(e) => Some(e),
    };
    record_metrics(ctx, ns, name, &decision);
    if let Some(e) = failed {
        return Err(e);
    }
    Ok(Requeue::requeue(decision.requeue_after))
}

fn record_metrics<E: Engine>(ctx: &Context<E>, ns: &str, name: &str, d: &Decision) {
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
pub(super) enum Written {
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
fn stale<E: Engine>(ctx: &Context<E>, ns: &str, name: &str) -> Requeue {
    tracing::info!(job = %name, namespace = %ns, "status write refused: the StreamJob changed meanwhile; reconciling again");
    ctx.metrics.error("stale_status");
    Requeue::requeue(Duration::from_secs(1))
}

async fn publish<E: Engine>(
    ctx: &Context<E>,
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

mod act;
mod cleanup;
mod commit;
mod credentials;
pub mod fairness;
mod finalizer;
mod ingress;
mod token;

use act::apply;
use cleanup::cleanup;
use token::{ensure_token, token_secret_invalid};
mod network;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::token::token_in;
    use super::*;

    /// Issue #38: a job deleted without the finalizer is never reconciled again; its phase
    /// gauge goes when the watch sees it go, or when a re-list no longer has it.
    #[test]
    fn deleted_jobs_leave_the_phase_gauges() {
        let job = |ns: &str, name: &str| -> StreamJob {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "streamjob.io/v1alpha1", "kind": "StreamJob",
                "metadata": {"name": name, "namespace": ns, "uid": format!("{ns}-{name}")},
                "spec": {"image": "i", "checkpoints": {"dir": "/ck"}, "pipeline": [
                    {"uid": "g", "source": {"generator": {}}}, {"uid": "o", "print": {}}]},
            }))
            .unwrap()
        };
        let failed = |m: &Metrics| {
            m.render()
                .lines()
                .find_map(|l| l.strip_prefix("streamjob_jobs{phase=\"Failed\"} "))
                .map(str::to_string)
        };
        let metrics = Metrics::default();
        for key in ["a/one", "a/two", "b/other"] {
            metrics.phase(key, "Failed");
        }
        let (store, mut writer) = kube::runtime::reflector::store::<StreamJob>();
        // deleted while watched
        let gone = watcher::Event::Delete(job("a", "one"));
        writer.apply_watcher_event(&gone);
        forget_deleted(&metrics, &store, Some("a"), &gone);
        assert_eq!(failed(&metrics).as_deref(), Some("2"));
        // deleted while the watch was down: the re-list of namespace a lacks it; b is another
        // scope's business
        for ev in [watcher::Event::Init, watcher::Event::InitDone] {
            writer.apply_watcher_event(&ev);
            forget_deleted(&metrics, &store, Some("a"), &ev);
        }
        assert_eq!(failed(&metrics).as_deref(), Some("1"));
        let kept = watcher::Event::InitApply(job("b", "other"));
        for ev in [watcher::Event::Init, kept, watcher::Event::InitDone] {
            writer.apply_watcher_event(&ev);
            forget_deleted(&metrics, &store, None, &ev);
        }
        assert_eq!(
            failed(&metrics).as_deref(),
            Some("1"),
            "b/other is still there"
        );
    }

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
}
