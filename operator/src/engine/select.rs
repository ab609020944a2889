//! Every engine the operator runs, each job handed to the one its spec names (`spec.engine`,
//! immutable: a job never moves between engines). Actions that carry a spec (deploy, prepare,
//! check) go by that spec's engine; the others by the job's.

use streamjob_crds::v1alpha1::{EngineKind, StreamJobSpec};

use super::runtime::control::ControlApi;
use super::{Engine, FlinkEngine, JobScope, RuntimeEngine, SavepointOrder};
use crate::Result;
use crate::decide::{Observed, RunPlan};

/// Our runtime and Apache Flink.
pub struct Engines<C: ControlApi> {
    pub runtime: RuntimeEngine<C>,
    pub flink: FlinkEngine,
}

/// Runs `$call` on the engine `$kind` names.
macro_rules! on {
    ($self:ident, $kind:expr, $engine:ident => $call:expr) => {
        match $kind {
            EngineKind::Runtime => {
                let $engine = &$self.runtime;
                $call
            }
            EngineKind::Flink => {
                let $engine = &$self.flink;
                $call
            }
        }
    };
}

fn of(job: &JobScope<'_>) -> EngineKind {
    job.job.spec.engine
}

/// The ports a job's own pods connect to each other on, by engine: what the job's NetworkPolicy
/// opens between them.
pub fn peer_ports(engine: &EngineKind) -> &'static [u16] {
    match engine {
        EngineKind::Runtime => &super::runtime::PEER_PORTS,
        EngineKind::Flink => &super::flink::cluster::PEER_PORTS,
    }
}

fn of_spec(spec: &StreamJobSpec) -> EngineKind {
    spec.engine
}

impl<C: ControlApi> Engine for Engines<C> {
    async fn observe(&self, job: &JobScope<'_>) -> Result<Observed> {
        on!(self, of(job), e => e.observe(job).await)
    }

    async fn prepare_version(
        &self,
        job: &JobScope<'_>,
        observed: &Observed,
        hash: &str,
        spec: &StreamJobSpec,
    ) -> Result<()> {
        on!(self, of_spec(spec), e => e.prepare_version(job, observed, hash, spec).await)
    }

    async fn retire_version(&self, job: &JobScope<'_>, hash: &str) -> Result<()> {
        on!(self, of(job), e => e.retire_version(job, hash).await)
    }

    async fn deploy(&self, job: &JobScope<'_>, run: &RunPlan) -> Result<()> {
        on!(self, of_spec(&run.spec), e => e.deploy(job, run).await)
    }

    async fn add_worker(
        &self,
        job: &JobScope<'_>,
        observed: &Observed,
        run: &str,
        index: u32,
    ) -> Result<()> {
        on!(self, of(job), e => e.add_worker(job, observed, run, index).await)
    }

    async fn remove(&self, job: &JobScope<'_>, name: &str) -> Result<()> {
        on!(self, of(job), e => e.remove(job, name).await)
    }

    async fn check_compatibility(
        &self,
        job: &JobScope<'_>,
        name: &str,
        hash: &str,
        spec: &StreamJobSpec,
        from: &str,
    ) -> Result<()> {
        on!(self, of_spec(spec), e => e.check_compatibility(job, name, hash, spec, from).await)
    }

    async fn take_savepoint(
        &self,
        job: &JobScope<'_>,
        observed: &Observed,
        run: &str,
        order: &SavepointOrder,
    ) -> Result<String> {
        on!(self, of(job), e => e.take_savepoint(job, observed, run, order).await)
    }

    async fn start(
        &self,
        job: &JobScope<'_>,
        observed: &Observed,
        run: &str,
        from_savepoint: Option<&str>,
        epoch: u64,
    ) -> Result<()> {
        on!(self, of(job), e => e.start(job, observed, run, from_savepoint, epoch).await)
    }

    async fn cancel(&self, job: &JobScope<'_>, observed: &Observed, run: &str) {
        on!(self, of(job), e => e.cancel(job, observed, run).await)
    }

    async fn dispose(&self, job: &JobScope<'_>, paths: &[String]) -> Result<String> {
        on!(self, of(job), e => e.dispose(job, paths).await)
    }
}
