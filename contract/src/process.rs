//! How a runtime process is started and how it ends.

/// The StreamJob manifest, for `streamjob-runtime … env:STREAMJOB_MANIFEST`.
pub const MANIFEST_ENV: &str = "STREAMJOB_MANIFEST";
/// The per-job control token (control API bearer token, worker and data connections).
pub const TOKEN_ENV: &str = "STREAMJOB_CONTROL_TOKEN";
/// Where the runtime writes its termination message (Kubernetes' `terminationMessagePath`).
pub const TERMINATION_MESSAGE_PATH_ENV: &str = "STREAMJOB_TERMINATION_MESSAGE_PATH";

/// The coordinator's control API (HTTP + JSON).
pub const CONTROL_PORT: u16 = 8081;
/// The coordinator's Prometheus metrics (`GET /metrics`, no token: the numbers are not secret,
/// and Prometheus must scrape them without the job's control token). Flink's Prometheus reporter
/// port.
pub const METRICS_PORT: u16 = 9249;
/// The coordinator's worker registry.
pub const CLUSTER_PORT: u16 = 6123;
/// A worker's data port (channels between subtasks on different workers).
pub const DATA_PORT: u16 = 6121;

/// Exit codes of `streamjob-runtime` that mean something to the operator.
pub mod exit {
    /// Done (a finished bounded job, a plan that is compatible, a disposal).
    pub const OK: u8 = 0;
    /// A failure worth retrying (a store that failed, a signal, a crash).
    pub const FAILED: u8 = 1;
    /// The manifest cannot run at all (invalid, unsupported, a restore that would rewind):
    /// retrying the same spec cannot help.
    pub const INVALID: u8 = 2;
    /// `plan`: the new job cannot restore the state (the report names the uids).
    pub const INCOMPATIBLE: u8 = 3;
    /// The run was fenced: a newer epoch took over; it committed nothing more.
    pub const SUPERSEDED: u8 = 4;
    /// Stopped by SIGTERM (128 + 15) after stopping cleanly.
    pub const SIGNALLED: u8 = 143;
}
