//! The Flink metrics the chart's dashboard and alerts read, as Flink's Prometheus reporter names
//! them (the reporter the operator configures on every JobManager and TaskManager, port
//! `metrics`). `cargo xtask lint` refuses a dashboard or alert expression naming a Flink metric not
//! listed here, and the Flink e2e scrapes a running job and finds every one of them — so a rename
//! in a new Flink version fails a test, not a dashboard.
//!
//! The StreamJob's name reaches them as the `streamjob` label from the chart's PodMonitor, which
//! copies the pod label `streamjob.io/job` onto every series it scrapes: Flink's own reporter
//! would rewrite the name (`-` becomes `_`), and the label then comes from the operator's pod, not
//! from a tenant's process.

/// Flink metrics of a running job (JobManager: `flink_jobmanager_…`, TaskManager tasks:
/// `flink_taskmanager_job_task_…`), present on Flink 1.20 and 2.3.
pub const FLINK_METRICS: &[&str] = &[
    "flink_jobmanager_numRegisteredTaskManagers",
    "flink_jobmanager_job_uptime",
    "flink_jobmanager_job_numRestarts",
    "flink_jobmanager_job_numberOfCompletedCheckpoints",
    "flink_jobmanager_job_numberOfFailedCheckpoints",
    "flink_jobmanager_job_lastCheckpointDuration",
    "flink_jobmanager_job_lastCheckpointSize",
    "flink_taskmanager_job_task_numRecordsInPerSecond",
    "flink_taskmanager_job_task_numRecordsOutPerSecond",
    "flink_taskmanager_job_task_backPressuredTimeMsPerSecond",
    "flink_taskmanager_job_task_busyTimeMsPerSecond",
];
