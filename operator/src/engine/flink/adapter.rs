//! The Flink engine: each run of a job is a standalone application cluster the operator owns.
//!
//! | decision's action   | Flink engine                                                       |
//! |---------------------|--------------------------------------------------------------------|
//! | PrepareVersion      | the version's ConfigMap: the manifest and Flink's `config.yaml`    |
//! | Deploy              | the JobManager pod (named as the run) and its rest Service         |
//! | AddWorker           | TaskManager `i`, given the JobManager's pod IP                      |
//! | CheckCompatibility  | a check pod of the new image running our pre-check                 |
//! | TakeSavepoint       | `POST /jobs/:id/savepoints` or `/stop` under a derived trigger id  |
//! | Cancel              | `PATCH /jobs/:id?mode=cancel`                                      |
//! | Dispose             | a dispose pod of the job's image deleting the savepoints           |
//! | Remove              | the pod (and a JobManager's Service)                               |
//!
//! `Start` (a warm standby) does not exist for Flink: validation admits `InPlace` only.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use kube::api::{Api, DeleteParams, PostParams};
use streamjob_crds::hash::deployment_hash;
use streamjob_crds::v1alpha1::{StreamJobSpec, UpgradeMode};

use super::FlinkError;
use super::cluster::REST_PORT;
use super::conf::{CONFIG_KEY, LOG_CONFIG, LOG_CONFIG_KEY};
use super::plan::{self, CheckerInstall, cluster_plan, job_id};
use super::rest::{FlinkRest, trigger_id};
use crate::api::{ignore_conflict, ignore_missing};
use crate::decide::{Observed, RunPlan};
use crate::engine::{Engine, JobScope, SavepointOrder, check_deadline_secs, spec_of_hash};
use crate::objects::MANAGER;
use crate::objects::names::{config_name, dispose_pod_name};
use crate::{Error, Result};

/// Apache Flink, driven over each JobManager's REST API.
pub struct FlinkEngine {
    /// Timeout of one round of REST calls while observing.
    pub(super) timeout: Duration,
    /// The image holding the pre-check per Flink minor (the check pod's init container).
    checker_image: String,
}

impl FlinkEngine {
    pub fn new(timeout: Duration, checker_image: impl Into<String>) -> Self {
        Self {
            timeout,
            checker_image: checker_image.into(),
        }
    }

    pub(super) fn rest(&self, ip: &str) -> FlinkRest {
        FlinkRest::new(format!("http://{ip}:{REST_PORT}"))
    }

    fn rest_of(&self, observed: &Observed, run: &str) -> Result<FlinkRest> {
        let ip = observed
            .pod(run)
            .and_then(|p| p.ip.clone())
            .ok_or_else(|| Error::NoAddress { pod: run.into() })?;
        Ok(self.rest(&ip))
    }
}

fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    }
}

/// The per-run rest Service earlier operators made (now one per job,
/// [`ClusterPlan::rest_service`](super::cluster::ClusterPlan::rest_service), kept across runs):
/// removed with its run.
fn legacy_rest_service_name(run: &str) -> String {
    format!("{run}-rest")
}

async fn create_pod(job: &JobScope<'_>, pod: Pod) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(job.client.clone(), &job.owner.namespace);
    ignore_conflict(pods.create(&post_params(), &pod).await)
}

/// The spec of version `hash`: the job's own, or the one its ConfigMap recorded.
async fn spec_of(job: &JobScope<'_>, hash: &str) -> Result<StreamJobSpec> {
    let current = deployment_hash(&job.job.spec).map_err(Error::Hash)?;
    if current == hash {
        Ok(job.job.spec.clone())
    } else {
        spec_of_hash(job.client, job.owner, hash).await
    }
}

impl Engine for FlinkEngine {
    async fn observe(&self, job: &JobScope<'_>) -> Result<Observed> {
        super::observe::observe(self, job).await
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
        let mut cm = crate::objects::config_map(job.owner, hash, spec)?;
        let conf = cluster_plan(job.owner, "", hash, spec, None)?.config_yaml();
        let data = cm.data.get_or_insert_default();
        data.insert(CONFIG_KEY.to_string(), conf);
        data.insert(LOG_CONFIG_KEY.to_string(), LOG_CONFIG.to_string());
        let cms: Api<ConfigMap> = Api::namespaced(job.client.clone(), &job.owner.namespace);
        ignore_conflict(cms.create(&post_params(), &cm).await)
    }

    async fn retire_version(&self, job: &JobScope<'_>, hash: &str) -> Result<()> {
        let cms: Api<ConfigMap> = Api::namespaced(job.client.clone(), &job.owner.namespace);
        let name = config_name(&job.owner.name, hash);
        ignore_missing(cms.delete(&name, &DeleteParams::default()).await)
    }

    async fn deploy(&self, job: &JobScope<'_>, run: &RunPlan) -> Result<()> {
        // A run that keeps the job's state without a savepoint (last-state) restores the newest
        // state recorded (the checkpoint, or the savepoint the run before it started from if it
        // has not checkpointed since): a new run is a new Flink job with its own checkpoint
        // folder, so Flink would not find it by itself. `flink-jobmanager` then takes a newer
        // checkpoint of that run than status recorded, if there is one; a JobManager made again
        // under the same run looks in its own folder first.
        let from = run.from_savepoint.clone().or_else(|| {
            (!run.fresh && run.spec.upgrade.mode != UpgradeMode::Stateless)
                .then(|| job.job.status.as_ref()?.latest_state_path())
                .flatten()
        });
        tracing::info!(pod = %run.name, from = ?from, "creating Flink JobManager");
        let plan = cluster_plan(job.owner, &run.name, &run.hash, &run.spec, from)?;
        let services: Api<Service> = Api::namespaced(job.client.clone(), &job.owner.namespace);
        ignore_conflict(services.create(&post_params(), &plan.rest_service()).await)?;
        let checker = CheckerInstall::new(&self.checker_image, &run.spec)?;
        create_pod(job, plan.job_manager_pod(&checker)).await
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
        let Some(ip) = c.ip.as_deref() else {
            return Ok(());
        };
        let spec = spec_of(job, &c.hash).await?;
        let plan = cluster_plan(job.owner, run, &c.hash, &spec, None)?;
        tracing::info!(taskmanager = %plan.task_manager_name(index), jobmanager = %run, "creating Flink TaskManager");
        create_pod(job, plan.task_manager_pod(index, ip, &c.uid)).await
    }

    async fn remove(&self, job: &JobScope<'_>, name: &str) -> Result<()> {
        tracing::info!(pod = %name, "deleting pod");
        let pods: Api<Pod> = Api::namespaced(job.client.clone(), &job.owner.namespace);
        ignore_missing(pods.delete(name, &DeleteParams::default()).await)?;
        let services: Api<Service> = Api::namespaced(job.client.clone(), &job.owner.namespace);
        ignore_missing(
            services
                .delete(&legacy_rest_service_name(name), &DeleteParams::default())
                .await,
        )
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
        tracing::info!(pod = %name, %from, "creating Flink pre-check pod");
        let pod = plan::check_pod(
            job.owner,
            name,
            hash,
            spec,
            from,
            &self.checker_image,
            deadline,
        )?;
        create_pod(job, pod).await
    }

    async fn take_savepoint(
        &self,
        job: &JobScope<'_>,
        observed: &Observed,
        run: &str,
        order: &SavepointOrder,
    ) -> Result<String> {
        // The same pending savepoint always asks under the same id: Flink answers a repeated
        // trigger with the operation it already runs.
        let id = trigger_id(&format!("{}/{run}/{}", job.owner.uid, order.key));
        let rest = self.rest_of(observed, run)?;
        let jid = job_id(run);
        if order.stop {
            rest.stop_with_savepoint(&jid, &id, &order.dir).await?;
        } else {
            rest.trigger_savepoint(&jid, &id, &order.dir).await?;
        }
        Ok(id)
    }

    async fn start(
        &self,
        _job: &JobScope<'_>,
        _observed: &Observed,
        run: &str,
        _from_savepoint: Option<&str>,
        _epoch: u64,
    ) -> Result<()> {
        Err(FlinkError::NoStandby { run: run.into() }.into())
    }

    async fn cancel(&self, _job: &JobScope<'_>, observed: &Observed, run: &str) {
        match self.rest_of(observed, run) {
            Ok(rest) => {
                if let Err(e) = rest.cancel(&job_id(run)).await {
                    tracing::info!(pod = %run, error = %e, "cannot cancel the Flink job before deleting its cluster");
                }
            }
            Err(e) => tracing::debug!(pod = %run, error = %e, "no JobManager to cancel"),
        }
    }

    async fn dispose(&self, job: &JobScope<'_>, paths: &[String]) -> Result<String> {
        let hash = deployment_hash(&job.job.spec).map_err(Error::Hash)?;
        let name = dispose_pod_name(&job.owner.name, paths);
        let pod = plan::dispose_pod(
            job.owner,
            &name,
            &hash,
            &job.job.spec,
            paths,
            &self.checker_image,
        )?;
        create_pod(job, pod).await?;
        Ok(name)
    }
}
