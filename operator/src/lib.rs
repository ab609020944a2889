//! The StreamJob operator: a kube-rs controller that runs StreamJobs as runtime pods and moves
//! them between versions through savepoints (in place or by a shadow copy), with rollback.
//!
//! Observe (`engine`) → decide (`decide`, pure) → act (`controller`, through `engine`).

mod api;
pub mod cli;
pub mod clock;
pub mod controller;
pub mod decide;
pub mod disposal;
pub mod engine;
#[cfg(test)]
mod fuzz;
#[cfg(test)]
#[path = "../../crds/src/fuzz_loop.rs"]
mod fuzz_loop;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod network_policy;
pub mod objects;
pub mod pod_security;
pub mod pod_template_policy;
pub mod serve;

/// Everything that can go wrong in the operator.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),

    /// A call to a runtime pod's control API failed.
    #[error("runtime control API: {0}")]
    Control(#[from] engine::runtime::control::ControlError),

    /// A run's pod has no IP yet, so its engine cannot be called.
    #[error("pod {pod} has no IP")]
    NoAddress { pod: String },

    /// The spec could not be hashed into a version.
    #[error("cannot hash the spec: {0}")]
    Hash(#[source] streamjob_crds::Error),

    /// The manifest a version's pods read could not be written.
    #[error("cannot write the manifest: {0}")]
    Manifest(#[source] serde_yaml_ng::Error),

    /// The StreamJob lacks something the operator needs.
    #[error("StreamJob without {0}")]
    MissingMetadata(&'static str),

    /// A deployed version's manifest ConfigMap has no manifest.
    #[error("ConfigMap {config_map} has no {key}")]
    NoVersionManifest {
        config_map: String,
        key: &'static str,
    },

    /// A deployed version's manifest does not read back.
    #[error("manifest of deployment {hash}: {source}")]
    BadVersionManifest {
        hash: String,
        #[source]
        source: streamjob_crds::Error,
    },

    /// The job's token Secret exists but holds no usable token.
    #[error(
        "token Secret {secret} has no non-empty `{key}` key: delete the Secret and the operator creates a new token (pods read it when they start)"
    )]
    TokenSecret { secret: String, key: &'static str },

    /// Adding or removing the finalizer failed (422: the list changed since it was read; the
    /// next reconcile works on the fresh object).
    #[error("finalizer: {0}")]
    Finalizer(#[source] kube::Error),

    /// Serving metrics and probes failed.
    #[error("metrics server on {addr}: {source}")]
    Server {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },

    /// Talking to a Flink cluster, or reading what it or the pre-check answered, failed.
    #[error(transparent)]
    Flink(#[from] engine::flink::FlinkError),

    /// The API server's clock could not be read (see [`clock`]).
    #[error("API server clock: {0}")]
    Clock(#[from] clock::ClockError),

    /// This replica's Lease ran out before it acted (it exits; the leader acts instead).
    #[error(
        "not the leader any more: the Lease was last renewed longer ago than the renew deadline"
    )]
    NotLeader,

    /// A command-line flag's value cannot be used.
    #[error("{flag}: {reason}")]
    Flag { flag: &'static str, reason: String },

    /// Neither an in-cluster service account nor a KUBECONFIG configures a client.
    #[error("cannot configure a Kubernetes client (in-cluster or KUBECONFIG): {0}")]
    KubeConfig(#[source] kube::config::InferConfigError),

    /// The Lease election task ended before this replica became leader.
    #[error("leader election stopped before this replica became leader")]
    LeaderElectionStopped,

    /// Another replica holds the Lease now: this one exits so that a fresh replica takes over.
    #[error("lost the leader lease; exiting so a fresh replica takes over")]
    LeaseLost,
}

impl Error {
    /// Short label for the `errors` metric.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            // the labels predate the typed variants; dashboards count by them
            Error::Control(_) | Error::NoAddress { .. } => "control",
            Error::Hash(_) | Error::Manifest(_) => "serialize",
            Error::MissingMetadata(_)
            | Error::NoVersionManifest { .. }
            | Error::BadVersionManifest { .. } => "object",
            Error::TokenSecret { .. } => "token_secret",
            Error::Finalizer(_) => "finalizer",
            Error::Server { .. } => "server",
            Error::Flink(_) => "flink",
            Error::Clock(_) => "clock",
            Error::NotLeader | Error::LeaderElectionStopped | Error::LeaseLost => "not_leader",
            Error::Flag { .. } | Error::KubeConfig(_) => "config",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
