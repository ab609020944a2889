//! The storage layer's error type.

use std::time::Duration;

/// Everything that can go wrong talking to a store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A URL or the manifest's `spec.storage` is inconsistent or unsupported.
    #[error("invalid storage configuration: {0}")]
    Config(String),

    /// A manifest duration or size could not be parsed.
    #[error(transparent)]
    Units(#[from] streamjob_crds::Error),

    /// An object store request failed.
    #[error("store {op} {path}: {source}")]
    Store {
        op: &'static str,
        path: String,
        /// The client already retried it for the whole retry budget (S3 through object_store).
        retried: bool,
        #[source]
        source: object_store::Error,
    },

    /// A local file system operation failed.
    #[error("file system {op} {path}: {source}")]
    Io {
        op: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },

    /// An HDFS call failed.
    #[error("hdfs {op} {path}: {message}")]
    Hdfs {
        op: &'static str,
        path: String,
        /// I/O and data transfer errors (retryable).
        transient: bool,
        message: String,
    },

    /// The object or file does not exist (HDFS; S3 and local files report it through their own
    /// variants, see [`Error::is_not_found`]).
    #[error("{op} {path}: not found")]
    NotFound { op: &'static str, path: String },

    /// The store does not offer this operation (for example multipart uploads on a local disk).
    #[error("store {store} does not support {op}")]
    Unsupported { store: String, op: &'static str },

    /// No connection slot became free within the configured timeout.
    #[error("timed out after {timeout:?} waiting for a free {kind} connection")]
    ConnectionTimeout {
        timeout: Duration,
        kind: &'static str,
    },

    /// Data that a completed checkpoint covers is gone: the store lost it or the state is stale.
    #[error("data loss: {0}")]
    DataLoss(String),

    /// A store answered something its protocol does not allow, or was driven against its
    /// contract.
    #[error("store state: {0}")]
    State(String),
}

/// Result with the crate's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether retrying the same request may succeed (5xx, timeouts, connection errors).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Store { source, .. } => !matches!(
                source,
                object_store::Error::NotFound { .. }
                    | object_store::Error::AlreadyExists { .. }
                    | object_store::Error::Precondition { .. }
                    | object_store::Error::NotSupported { .. }
                    | object_store::Error::NotImplemented { .. }
                    | object_store::Error::InvalidPath { .. }
                    | object_store::Error::PermissionDenied { .. }
                    | object_store::Error::Unauthenticated { .. }
                    | object_store::Error::UnknownConfigurationKey { .. }
            ),
            Error::Io { source, .. } => matches!(
                source.kind(),
                std::io::ErrorKind::Interrupted
                    | std::io::ErrorKind::TimedOut
                    | std::io::ErrorKind::WouldBlock
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::ConnectionRefused
            ),
            Error::ConnectionTimeout { .. } => true,
            Error::Hdfs { transient, .. } => *transient,
            _ => false,
        }
    }

    /// Whether the object (or file) the call needed does not exist.
    pub fn is_not_found(&self) -> bool {
        match self {
            Error::Store { source, .. } => matches!(source, object_store::Error::NotFound { .. }),
            Error::Io { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
            Error::NotFound { .. } => true,
            _ => false,
        }
    }

    /// Whether [`crate::retry::retry`] should try again: transient, and not already retried by
    /// the store's client (retries in one place, never nested).
    pub fn retry_here(&self) -> bool {
        self.is_transient() && !matches!(self, Error::Store { retried: true, .. })
    }
}
