//! The library's error type.

use std::path::PathBuf;
use std::time::Duration;

/// Everything that can go wrong while setting up or driving the e2e environment.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A pinned binary built by `e2e/scripts/install.sh` is missing.
    #[error(
        "e2e binary `{name}` not found ({detail}); run `bash e2e/scripts/install.sh` first \
         (it builds the pinned Kubernetes, etcd, helm and MinIO binaries and writes \
         $STREAMJOB_CACHE/e2e-env.sh)"
    )]
    MissingBinary { name: String, detail: String },
    /// An I/O operation failed.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// An external command exited unsuccessfully.
    #[error("command `{command}` failed with {status}:\n{stderr}")]
    Command {
        command: String,
        status: String,
        stderr: String,
    },
    /// A polled condition did not become true before its deadline.
    #[error("timed out after {timeout:?} waiting for {what}{last}")]
    Timeout {
        what: String,
        timeout: Duration,
        last: String,
    },
    /// A child process exited while we were waiting for it to become ready.
    #[error("process `{name}` exited early with {status}; log: {log}")]
    ProcessExited {
        name: String,
        status: String,
        log: PathBuf,
    },
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A kubeconfig could not be read or used.
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    /// An HTTP request failed.
    #[error("http: {0}")]
    Http(#[from] reqwest::Error),
    /// An object store operation failed.
    #[error("object store: {0}")]
    ObjectStore(#[from] object_store::Error),
    /// JSON (de)serialisation failed.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// YAML (de)serialisation failed.
    #[error("yaml: {0}")]
    Yaml(#[from] serde_yaml_ng::Error),
    /// A Flink cluster or the savepoint pre-check answered with an error.
    #[error(transparent)]
    Flink(#[from] streamjob_operator::engine::flink::FlinkError),
    /// Anything else, with a message.
    #[error("{0}")]
    Other(String),
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Adds context to `std::io::Error`s.
pub trait IoContext<T> {
    /// Wraps the error with a description of what was being done.
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for std::result::Result<T, std::io::Error> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| Error::Io {
            context: context(),
            source,
        })
    }
}
