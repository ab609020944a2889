//! The library's single error type.

/// Everything that can go wrong in the runtime library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The manifest could not be read or is invalid.
    #[error(transparent)]
    Manifest(#[from] streamjob_crds::Error),

    /// The pipeline cannot be turned into a job graph (unknown column, bad expression, ...).
    #[error("pipeline step {uid:?}: {message}")]
    Plan { uid: String, message: String },

    /// A feature the manifest asks for is not supported by this runtime version.
    #[error("not supported yet: {0}")]
    Unsupported(String),

    /// The snapshot cannot be restored into this job graph; every reason is listed.
    #[error("cannot restore {path}:\n  - {}", .reasons.join("\n  - "))]
    Incompatible { path: String, reasons: Vec<String> },

    /// Reading or writing checkpoint, savepoint or data files failed.
    #[error("storage error at {path}: {source}")]
    Storage {
        path: String,
        /// Boxed: the storage layer's error is large, and this one is returned everywhere.
        #[source]
        source: Box<streamjob_storage::Error>,
    },

    /// A storage URL or path could not be understood.
    #[error("invalid storage location {0:?}: {1}")]
    Location(String, String),

    /// A snapshot file is corrupt or of an unknown format.
    #[error("corrupt snapshot {path}: {message}")]
    Corrupt { path: String, message: String },

    /// Arrow compute or IO failed.
    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),

    /// Expression planning or evaluation failed.
    #[error("expression: {0}")]
    Expr(#[from] datafusion::error::DataFusionError),

    /// Parquet reading failed.
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),

    /// JSON (de)serialisation failed.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),

    /// Local IO failed.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),

    /// A record could not be processed and the operator's policy is `fail`.
    #[error("operator {uid:?}: bad record: {message}")]
    BadRecord { uid: String, message: String },

    /// An operator failed.
    #[error("operator {uid:?} subtask {subtask}: {message}")]
    Operator {
        uid: String,
        subtask: usize,
        message: String,
    },

    /// The job was cancelled or a channel closed underneath a task.
    #[error("job cancelled: {0}")]
    Cancelled(String),

    /// The job failed more often than the restart strategy allows.
    #[error("job failed after {restarts} restarts: {last}")]
    TooManyRestarts { restarts: u32, last: String },

    /// The coordinator–worker protocol: a peer refused, vanished or spoke out of turn.
    #[error("cluster: {0}")]
    Cluster(String),

    /// A newer run of this job started (its epoch marker is in the checkpoint directory): this
    /// run must not commit anything and stops without a final checkpoint (DESIGN §8).
    #[error(
        "fenced: run epoch {mine} is superseded by epoch {newer} (written to {dir}); stopping without committing"
    )]
    Superseded { mine: u64, newer: u64, dir: String },

    /// Another run committed checkpoint number `seq` first, from the same state this attempt
    /// continues; this attempt's uncommitted output is discarded and it restarts from that
    /// checkpoint (see [`crate::fence`]).
    #[error("commit {seq} was taken by epoch {epoch} ({path}) before this attempt's")]
    LostCommit { seq: u64, epoch: u64, path: String },

    /// Restoring the snapshot would write output that a later commit already made visible.
    #[error("refusing to restore {path}: {reason}")]
    Rewind { path: String, reason: String },

    /// The store under the checkpoint directory does not honour create-only writes
    /// (`If-None-Match: *`), which fencing relies on: the job refuses to run there.
    #[error(
        "{dir}: {what}, so this store ignores conditional writes (If-None-Match: *); fencing relies on them (two runs of the job could both commit output), so the job does not run here: use a store that honours them (AWS S3, MinIO, GCS, Azure, HDFS, a local disk)"
    )]
    NoConditionalWrites { dir: String, what: String },

    /// Anything else, with a message that says what to do.
    #[error("{0}")]
    Other(String),
}

impl Error {
    /// Shorthand for an operator failure.
    pub fn operator(uid: &str, subtask: usize, message: impl Into<String>) -> Self {
        Error::Operator {
            uid: uid.to_string(),
            subtask,
            message: message.into(),
        }
    }

    /// Shorthand for a planning failure.
    pub fn plan(uid: &str, message: impl Into<String>) -> Self {
        Error::Plan {
            uid: uid.to_string(),
            message: message.into(),
        }
    }
}

/// Result with the library's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
