//! The engine seam. [`decide`](crate::decide) speaks in engine-neutral actions (deploy a run,
//! take a savepoint, stop with one, start a standby, check compatibility, dispose …); an engine
//! adapter observes a job's runs for the decision and turns each action into Kubernetes objects
//! and control calls. The state machine, the status and the controller loop are the same for
//! every engine.
//!
//! ```text
//!  observe ──► Observed ──► decide (pure) ──► [Action] ──► controller::act ──► Engine::…
//!     ▲                                                     (status, events)      │
//!     └──────────────────────── Engine::observe ◄── pods, control API ◄───────────┘
//! ```
//!
//! Two adapters: our runtime ([`RuntimeEngine`]) and Apache Flink ([`FlinkEngine`], a standalone
//! application cluster per run). [`Engines`] hands each job to the one its `spec.engine` names.
//! An engine is one implementation of [`Engine`]: how a run, a worker, a compatibility check and
//! a disposal are made, how a savepoint is triggered and polled, and how the runs are seen.

use std::future::Future;

use kube::Client;
use streamjob_crds::units::parse_duration;
use streamjob_crds::v1alpha1::{StreamJob, StreamJobSpec};

use crate::Result;
use crate::decide::{Observed, RunPlan};
use crate::objects::Owner;

pub mod flink;
#[cfg(test)]
mod hostile_pods;
mod observe;
pub mod runtime;
mod select;

pub use flink::FlinkEngine;
pub use observe::{killed_and_held_back, observe_pod, observe_workers};
pub(crate) use observe::{log_tail, observe_objects, running_runs, spec_of_hash};
pub use runtime::RuntimeEngine;
pub use select::{Engines, peer_ports};

/// The StreamJob an adapter works on, with what every call needs.
pub struct JobScope<'a> {
    pub client: &'a Client,
    pub job: &'a StreamJob,
    pub owner: &'a Owner,
    /// The job's control token (from its Secret).
    pub token: &'a str,
}

/// How a savepoint is taken (see [`Action::TakeSavepoint`](crate::decide::Action::TakeSavepoint)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavepointOrder {
    pub dir: String,
    /// Stop with the savepoint: nothing is emitted after it.
    pub stop: bool,
    /// After the stop, stay loaded for an instant rollback.
    pub standby: bool,
    /// What identifies this savepoint request across operator restarts (the pending savepoint's
    /// reason and start time in status): an engine that names requests itself derives the name
    /// from it, so a repeated trigger is the same request.
    pub key: String,
}

/// One engine: what a run is made of and how it is driven. Every method is idempotent (a
/// reconcile may repeat an action whose effect it has not observed yet). `observed` is the world
/// the decision was made on.
pub trait Engine: Send + Sync + 'static {
    /// The job's runs, workers, checks and the savepoint in flight, as the decision sees them.
    fn observe(&self, job: &JobScope<'_>) -> impl Future<Output = Result<Observed>> + Send;

    /// What every run of version `hash` needs exists.
    fn prepare_version(
        &self,
        job: &JobScope<'_>,
        observed: &Observed,
        hash: &str,
        spec: &StreamJobSpec,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Version `hash` is retired: its artefacts go.
    fn retire_version(
        &self,
        job: &JobScope<'_>,
        hash: &str,
    ) -> impl Future<Output = Result<()>> + Send;

    /// A run exists as planned.
    fn deploy(&self, job: &JobScope<'_>, run: &RunPlan) -> impl Future<Output = Result<()>> + Send;

    /// Worker `index` of run `run` exists (nothing if the run is gone).
    fn add_worker(
        &self,
        job: &JobScope<'_>,
        observed: &Observed,
        run: &str,
        index: u32,
    ) -> impl Future<Output = Result<()>> + Send;

    /// A run, worker, check or disposal named `name` is gone.
    fn remove(&self, job: &JobScope<'_>, name: &str) -> impl Future<Output = Result<()>> + Send;

    /// The compatibility check `name` of version `hash` against savepoint `from` runs; its
    /// verdict is observed later.
    fn check_compatibility(
        &self,
        job: &JobScope<'_>,
        name: &str,
        hash: &str,
        spec: &StreamJobSpec,
        from: &str,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Triggers a savepoint on run `run`; returns the engine's request id, kept in status so a
    /// restarted operator polls the same savepoint instead of triggering another.
    fn take_savepoint(
        &self,
        job: &JobScope<'_>,
        observed: &Observed,
        run: &str,
        order: &SavepointOrder,
    ) -> impl Future<Output = Result<String>> + Send;

    /// Starts a standby run, from a savepoint or empty, at `epoch`.
    fn start(
        &self,
        job: &JobScope<'_>,
        observed: &Observed,
        run: &str,
        from_savepoint: Option<&str>,
        epoch: u64,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Best effort: run `run` commits nothing more (it is about to be removed).
    fn cancel(
        &self,
        job: &JobScope<'_>,
        observed: &Observed,
        run: &str,
    ) -> impl Future<Output = ()> + Send;

    /// Disposal of `paths` runs; returns the name it runs under (see [`Engine::remove`]).
    fn dispose(
        &self,
        job: &JobScope<'_>,
        paths: &[String],
    ) -> impl Future<Output = Result<String>> + Send;
}

/// How long a compatibility-check pod may run (its `activeDeadlineSeconds`): the upgrade's
/// `readinessTimeout`, so a check that hangs fails the upgrade no later than a version that never
/// becomes ready would. Validation has already refused a malformed duration; 300 s stands in.
pub(crate) fn check_deadline_secs(spec: &StreamJobSpec) -> i64 {
    parse_duration("readinessTimeout", &spec.upgrade.readiness_timeout)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(300)
}
