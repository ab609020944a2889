//! The adapter for our own runtime: a run is a coordinator pod of the job's image (plus worker
//! pods), a version is a manifest ConfigMap, the compatibility check is a short-lived
//! `streamjob-runtime plan` pod, and savepoints, start and cancel are calls on the run's control
//! API (authenticated by the job's token).

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, ResourceRequirements};
use kube::api::{Api, DeleteParams, PostParams};
use streamjob_crds::hash::deployment_hash;
use streamjob_crds::v1alpha1::StreamJobSpec;

use super::{Engine, JobScope, SavepointOrder, check_deadline_secs, spec_of_hash};
use crate::api::{ignore_conflict, ignore_missing};
use crate::decide::{Observed, RunPlan};
use crate::objects::names::{config_name, dispose_pod_name, worker_name};
use crate::objects::{MANAGER, config_map};
use crate::{Error, Result};
use control::{ControlApi, Endpoint, SavepointRequest};
use streamjob_contract::process::{CLUSTER_PORT, DATA_PORT};

/// The ports our runtime's pods connect to each other on (coordinator's worker registry,
/// workers' data port).
pub const PEER_PORTS: [u16; 2] = [CLUSTER_PORT, DATA_PORT];

pub mod control;
mod observe;
mod pods;
mod workers;

/// Our runtime, driven over its control API.
pub struct RuntimeEngine<C: ControlApi> {
    control: C,
    /// Port of the runtime pods' control API.
    control_port: u16,
    /// Timeout of one control API call while observing.
    control_timeout: Duration,
    /// Resources of the runtime container where a StreamJob's podTemplate sets none.
    runtime_resources: Option<ResourceRequirements>,
}

impl<C: ControlApi> RuntimeEngine<C> {
    pub fn new(
        control: C,
        control_port: u16,
        control_timeout: Duration,
        runtime_resources: Option<ResourceRequirements>,
    ) -> Self {
        Self {
            control,
            control_port,
            control_timeout,
            runtime_resources,
        }
    }

    fn endpoint(&self, observed: &Observed, pod: &str, token: &str) -> Result<Endpoint> {
        let ip = observed
            .pod(pod)
            .and_then(|p| p.ip.clone())
            .ok_or_else(|| Error::NoAddress { pod: pod.into() })?;
        Ok(Endpoint::new(&ip, self.control_port, token))
    }

    async fn create_pod(&self, job: &JobScope<'_>, pod: Pod) -> Result<()> {
        let pods: Api<Pod> = Api::namespaced(job.client.clone(), &job.owner.namespace);
        let pod = pods::with_default_resources(pod, self.runtime_resources.as_ref());
        ignore_conflict(pods.create(&post_params(), &pod).await)
    }
}

fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    }
}

fn config_maps(job: &JobScope<'_>) -> Api<ConfigMap> {
    Api::namespaced(job.client.clone(), &job.owner.namespace)
}

/// The manifest ConfigMap of version `hash` exists.
async fn ensure_config(job: &JobScope<'_>, hash: &str, spec: &StreamJobSpec) -> Result<()> {
    ignore_conflict(
        config_maps(job)
            .create(&post_params(), &config_map(job.owner, hash, spec)?)
            .await,
    )
}

impl<C: ControlApi> Engine for RuntimeEngine<C> {
    async fn observe(&self, job: &JobScope<'_>) -> Result<Observed> {
        observe::observe(self, job).await
    }

    async fn prepare_version(
        &self,
        job: &JobScope<'_>,
        observed: &Observed,
        hash: &str,
        spec: &StreamJobSpec,
    ) -> Result<()> {
        if observed.config_hashes.contains(hash) {
            return Ok(());
        }
        ensure_config(job, hash, spec).await
    }

    async fn retire_version(&self, job: &JobScope<'_>, hash: &str) -> Result<()> {
        let name = config_name(&job.owner.name, hash);
        ignore_missing(
            config_maps(job)
                .delete(&name, &DeleteParams::default())
                .await,
        )
    }

    async fn deploy(&self, job: &JobScope<'_>, run: &RunPlan) -> Result<()> {
        tracing::info!(pod = %run.name, from = ?run.from_savepoint, standby = run.standby, "creating runtime pod");
        self.create_pod(job, pods::runtime_pod(job.owner, run, self.control_port))
            .await
    }

    async fn add_worker(
        &self,
        job: &JobScope<'_>,
        observed: &Observed,
        run: &str,
        index: u32,
    ) -> Result<()> {
        let Some(c) = observed.coordinators.iter().find(|c| c.name == run) else {
            return Ok(());
        };
        // the coordinator's own spec: an older one during a Shadow upgrade
        let current = deployment_hash(&job.job.spec).map_err(Error::Hash)?;
        let spec = if c.hash == current {
            job.job.spec.clone()
        } else {
            spec_of_hash(job.client, job.owner, &c.hash).await?
        };
        if let Some(pod) = workers::worker_pod(job.owner, c, index, &spec) {
            tracing::info!(worker = %worker_name(run, index), coordinator = %run, "creating worker pod");
            self.create_pod(job, pod).await?;
        }
        Ok(())
    }

    async fn remove(&self, job: &JobScope<'_>, name: &str) -> Result<()> {
        tracing::info!(pod = %name, "deleting pod");
        let pods: Api<Pod> = Api::namespaced(job.client.clone(), &job.owner.namespace);
        ignore_missing(pods.delete(name, &DeleteParams::default()).await)
    }

    async fn check_compatibility(
        &self,
        job: &JobScope<'_>,
        name: &str,
        hash: &str,
        spec: &StreamJobSpec,
        from: &str,
    ) -> Result<()> {
        let deadline = check_deadline_secs(spec);
        tracing::info!(pod = %name, %from, "creating plan pod");
        let pod = pods::plan_pod(job.owner, name, hash, spec, from, deadline);
        self.create_pod(job, pod).await
    }

    async fn take_savepoint(
        &self,
        job: &JobScope<'_>,
        observed: &Observed,
        run: &str,
        order: &SavepointOrder,
    ) -> Result<String> {
        let req = SavepointRequest {
            dir: Some(order.dir.clone()),
            stop: order.stop,
            standby: order.standby,
        };
        let ep = self.endpoint(observed, run, job.token)?;
        self.control.trigger_savepoint(&ep, &req).await
    }

    async fn start(
        &self,
        job: &JobScope<'_>,
        observed: &Observed,
        run: &str,
        from_savepoint: Option<&str>,
        epoch: u64,
    ) -> Result<()> {
        let ep = self.endpoint(observed, run, job.token)?;
        self.control.start(&ep, from_savepoint, epoch).await
    }

    async fn cancel(&self, job: &JobScope<'_>, observed: &Observed, run: &str) {
        // best effort: an unreachable pod is deleted anyway, and fencing stops it
        match self.endpoint(observed, run, job.token) {
            Ok(ep) => {
                if let Err(e) = self.control.cancel(&ep).await {
                    tracing::info!(pod = %run, error = %e, "cannot cancel before deleting; fencing by epoch still applies");
                }
            }
            Err(e) => tracing::debug!(pod = %run, error = %e, "no endpoint to cancel"),
        }
    }

    async fn dispose(&self, job: &JobScope<'_>, paths: &[String]) -> Result<String> {
        let hash = deployment_hash(&job.job.spec).map_err(Error::Hash)?;
        ensure_config(job, &hash, &job.job.spec).await?;
        let name = dispose_pod_name(&job.owner.name, paths);
        let pod = pods::dispose_pod(job.owner, &name, &hash, &job.job.spec, paths);
        self.create_pod(job, pod).await?;
        Ok(name)
    }
}
