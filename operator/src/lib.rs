//! The StreamJob operator: a kube-rs controller that runs StreamJobs as runtime pods and moves
//! them between versions through savepoints (in place or by a shadow copy), with rollback.
//!
//! Observe (`engine`) → decide (`decide`, pure) → act (`controller`, through `engine`).

mod api;
pub mod clock;
pub mod control;
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
pub mod pod_security;
pub mod pod_template_policy;
pub mod resources;
pub mod workers;

/// Everything that can go wrong in the operator.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),

    /// A call to a runtime pod's control API failed.
    #[error("runtime control API: {0}")]
    Control(String),

    /// Serialising a manifest or status failed.
    #[error("cannot serialise: {0}")]
    Serialize(String),

    /// The StreamJob lacks something the operator needs (name, namespace, uid).
    #[error("StreamJob object: {0}")]
    Object(String),

    /// The job's token Secret exists but holds no usable token.
    #[error("token Secret: {0}")]
    TokenSecret(String),

    /// Adding or removing the finalizer failed.
    #[error("finalizer: {0}")]
    Finalizer(String),

    /// Serving metrics and probes failed.
    #[error("metrics server: {0}")]
    Server(String),

    /// Talking to a Flink cluster, or reading what it or the pre-check answered, failed.
    #[error(transparent)]
    Flink(#[from] engine::flink::FlinkError),

    /// The API server's clock could not be read (see [`clock`]).
    #[error("API server clock: {0}")]
    Clock(String),

    /// This replica's Lease ran out before it acted (it exits; the leader acts instead).
    #[error(
        "not the leader any more: the Lease was last renewed longer ago than the renew deadline"
    )]
    NotLeader,
}

impl Error {
    /// Short label for the `errors` metric.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Control(_) => "control",
            Error::Serialize(_) => "serialize",
            Error::Object(_) => "object",
            Error::TokenSecret(_) => "token_secret",
            Error::Finalizer(_) => "finalizer",
            Error::Server(_) => "server",
            Error::Flink(_) => "flink",
            Error::Clock(_) => "clock",
            Error::NotLeader => "not_leader",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
