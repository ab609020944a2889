//! The file sink's error: its own failures, and the storage layer's.

/// Everything that can go wrong in the file sink.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The sink's manifest section is inconsistent or unsupported.
    #[error("invalid file sink configuration: {0}")]
    Config(String),

    /// A manifest duration or size could not be parsed.
    #[error(transparent)]
    Units(#[from] streamjob_crds::Error),

    /// A store call failed.
    #[error(transparent)]
    Storage(#[from] streamjob_storage::Error),

    /// Compressing or encoding in memory failed.
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },

    /// Encoding records failed.
    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),

    /// Writing Parquet failed.
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),

    /// Data that a completed checkpoint covers is gone: the store lost it or the state is stale.
    #[error("data loss: {0}")]
    DataLoss(String),

    /// The sink was driven against its contract or handed foreign state.
    #[error("sink state: {0}")]
    State(String),
}

/// Result with the crate's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether retrying the same request may succeed (a transient store error).
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Storage(e) if e.is_transient())
    }

    /// Whether [`streamjob_storage::retry::retry`] should try again: a store error worth
    /// retrying here.
    pub fn retry_here(&self) -> bool {
        matches!(self, Error::Storage(e) if e.retry_here())
    }

    /// Whether the object (or file) the call needed does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Storage(e) if e.is_not_found())
    }
}

impl streamjob_storage::retry::RetryHere for Error {
    fn retry_here(&self) -> bool {
        Error::retry_here(self)
    }
}
