//! Apache Flink as an engine (issue #17): [`FlinkEngine`] runs each run of a job as a standalone
//! application cluster it owns and drives it over Flink's REST API, built from:
//!
//! - [`rest`]: Flink's REST API as the operator drives it: job state, checkpoints, savepoints
//!   triggered under a caller-chosen trigger id (kept in status, so a restarted operator polls
//!   the savepoint it asked for instead of taking another), stop-with-savepoint, disposal.
//! - [`precheck`]: the verdict of our savepoint pre-check (`flink/checker`, Java, compiled per
//!   supported Flink version and run with the *target* version's jars) and how it becomes an
//!   `UpgradeBlocked` reason naming the operator's uid.
//! - [`version`]: the supported Flink versions and the savepoint format each can read.
//! - [`plan`]: `spec.flink` → the cluster of a run, the check pod and the dispose pod (pure).
//! - `observe`: JobManagers' REST answers → the engine-neutral status the decision reads.
//! - the configuration keys the operator owns are refused by validation
//!   ([`streamjob_crds::flink::owned_keys`]).
//! - [`cluster`]: the objects of one standalone application cluster (ConfigMap, JobManager and
//!   TaskManager pods, rest Service), pure.
//!
//! `e2e/tests/flink.rs` drives real Flink 1.20 and 2.3 JVMs through these parts;
//! `e2e/tests/operator/flink_cluster.rs` runs StreamJobs with `engine: flink` through the operator.

mod adapter;
pub mod cluster;
pub mod conf;
pub mod ingress;
pub mod metrics;
mod observe;
pub mod plan;
pub mod precheck;
pub mod rest;
pub mod version;

pub use adapter::FlinkEngine;

/// What can go wrong talking to Flink or reading its answers.
#[derive(Debug, thiserror::Error)]
pub enum FlinkError {
    /// The REST call did not get an answer (the causes spelled out: "operation timed out").
    #[error("Flink REST {method} {url}: {}", crate::http::describe(.source))]
    Request {
        method: &'static str,
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// Flink answered with an error status.
    #[error("Flink REST {method} {url}: HTTP {status}: {body}")]
    Status {
        method: &'static str,
        url: String,
        status: u16,
        body: String,
    },
    /// Flink's answer is not what its REST API documents.
    #[error("Flink REST {url}: unexpected answer: {detail}")]
    Answer { url: String, detail: String },
    /// The pre-check printed no verdict.
    #[error("savepoint pre-check: {0}")]
    Verdict(String),
    /// A savepoint's `_metadata` is not one.
    #[error("savepoint metadata: {0}")]
    Metadata(String),
    /// A Flink version the engine does not run.
    #[error("{0}")]
    Version(String),
    /// Asked to start a standby run: Flink jobs upgrade in place, a cluster never waits.
    #[error("run {run}: a Flink cluster has no standby to start (Flink jobs upgrade InPlace)")]
    NoStandby { run: String },
}
