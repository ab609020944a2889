//! Running one query on each engine: Streamjob (`streamjob-runtime run MANIFEST`) and Apache
//! Flink (`bench/flink/run.sh`), each as a measured child process, then reading its output back.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::checksum::{OutputSummary, summarize_dir};
use crate::error::{Error, Result};
use crate::measure::{Job, Measured, percentile, run_measured};
use crate::query::Query;

/// How a run went.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "state", content = "error", rename_all = "lowercase")]
pub enum Status {
    /// Ran to the end.
    Ok,
    /// The runtime refused the manifest (exit code 2: unsupported feature, plan or manifest
    /// error); the exact error it printed.
    Unsupported(String),
    /// Failed while running (or timed out); the exact error.
    Failed(String),
}

impl Status {
    /// Ran to the end.
    pub fn is_ok(&self) -> bool {
        matches!(self, Status::Ok)
    }
}

/// One engine's run of one query.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineRun {
    pub status: Status,
    /// Data lines of the input file.
    pub events: u64,
    /// Seconds the throughput is computed from.
    pub seconds: f64,
    /// What `seconds` covers.
    pub seconds_basis: String,
    /// Wall time of the whole child process (JVM / runtime start-up included).
    pub process_seconds: f64,
    /// `events / seconds / P`.
    pub events_per_second_per_core: f64,
    pub checkpoint_durations_ms: Vec<u64>,
    pub checkpoint_p99_ms: Option<u64>,
    pub peak_rss_mib: f64,
    /// What was read back from the output directory.
    pub output: Option<OutputSummary>,
    /// The engine's own result line (Flink's JSON), when it prints one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reported: Option<FlinkResult>,
    pub stderr_log: String,
}

/// The JSON line `bench/flink/run.sh` prints.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FlinkResult {
    pub query: String,
    pub parallelism: u32,
    pub events: u64,
    pub seconds: f64,
    #[serde(default)]
    pub events_per_second: f64,
    #[serde(default)]
    pub end_of_input_seconds: f64,
    #[serde(default)]
    pub job_running_seconds: f64,
    #[serde(default)]
    pub checkpoint_durations_ms: Vec<u64>,
    #[serde(default)]
    pub output_files: u64,
    pub output_records: u64,
    #[serde(default)]
    pub output_sum_column: String,
    #[serde(default)]
    pub output_sum: i64,
    #[serde(default)]
    pub column_sums: BTreeMap<String, i64>,
}

/// Common settings of the runs.
#[derive(Clone, Debug)]
pub struct RunContext<'a> {
    /// This binary (the measuring wrapper).
    pub exe: &'a Path,
    /// Repository root.
    pub repo: &'a Path,
    pub checkpoint_interval_ms: u64,
    pub timeout: Duration,
}

fn tail(text: &str, lines: usize) -> String {
    let v: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    v[v.len().saturating_sub(lines)..].join(" | ")
}

/// The error the runtime CLI printed (`error: …` up to the end of stderr), else the last lines.
pub fn runtime_error(stderr: &str) -> String {
    match stderr
        .rfind("\nerror: ")
        .map(|i| i + 1)
        .or_else(|| stderr.starts_with("error: ").then_some(0))
    {
        Some(i) => stderr[i..].trim().replace('\n', " "),
        None => tail(stderr, 3),
    }
}

/// Checkpoint durations (ms) from the runtime's log lines `checkpoint N completed …
/// duration_ms=D` (savepoints excluded), in order.
pub fn runtime_checkpoint_durations(stderr: &str) -> Vec<u64> {
    stderr
        .lines()
        .filter(|l| {
            l.contains("checkpoint ") && l.contains(" completed") && !l.contains("savepoint ")
        })
        .filter_map(|l| {
            let rest = &l[l.find("duration_ms=")? + "duration_ms=".len()..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect()
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| Error::io(path, e))
}

/// Runs `manifest` with the runtime binary.
pub fn run_ours(
    cx: &RunContext<'_>,
    runtime_bin: &Path,
    manifest: &Path,
    output_dir: Option<&Path>,
    events: u64,
    parallelism: u32,
    log_prefix: &Path,
) -> Result<EngineRun> {
    let stdout = log_prefix.with_extension("stdout");
    let stderr = log_prefix.with_extension("stderr");
    let report = log_prefix.with_extension("measure.json");
    let measured = run_measured(
        cx.exe,
        &report,
        &Job {
            program: runtime_bin.as_os_str(),
            args: vec![OsString::from("run"), manifest.as_os_str().to_owned()],
            env: vec![("RUST_LOG", "info"), ("NO_COLOR", "1")],
            stdout: &stdout,
            stderr: &stderr,
            timeout: cx.timeout,
        },
    )?;
    let log = read(&stderr)?;
    let durations = runtime_checkpoint_durations(&log);
    let status = if measured.success() {
        Status::Ok
    } else if measured.exit_code == Some(2) {
        Status::Unsupported(runtime_error(&log))
    } else {
        Status::Failed(format!(
            "{}: {}",
            measured.describe_exit(),
            runtime_error(&log)
        ))
    };
    let output = match output_dir {
        Some(dir) if status.is_ok() => Some(summarize_dir(dir)?),
        _ => None,
    };
    Ok(finish(
        status,
        events,
        measured.wall_seconds,
        "process wall time (runtime start-up included)",
        &measured,
        parallelism,
        durations,
        output,
        None,
        &stderr,
    ))
}

#[allow(clippy::too_many_arguments)]
fn finish(
    status: Status,
    events: u64,
    seconds: f64,
    basis: &str,
    measured: &Measured,
    parallelism: u32,
    durations: Vec<u64>,
    output: Option<OutputSummary>,
    reported: Option<FlinkResult>,
    stderr: &Path,
) -> EngineRun {
    let per_core = if status.is_ok() && seconds > 0.0 {
        events as f64 / seconds / f64::from(parallelism.max(1))
    } else {
        0.0
    };
    EngineRun {
        status,
        events,
        seconds,
        seconds_basis: basis.to_string(),
        process_seconds: measured.wall_seconds,
        events_per_second_per_core: per_core,
        checkpoint_p99_ms: percentile(&durations, 0.99),
        checkpoint_durations_ms: durations,
        peak_rss_mib: measured.peak_rss_mib(),
        output,
        reported,
        stderr_log: stderr.display().to_string(),
    }
}

/// Runs `query` on Flink (`bench/flink/run.sh`).
pub fn run_flink(
    cx: &RunContext<'_>,
    query: Query,
    input_dir: &Path,
    output_dir: &Path,
    events: u64,
    parallelism: u32,
    log_prefix: &Path,
) -> Result<EngineRun> {
    let stdout = log_prefix.with_extension("stdout");
    let stderr = log_prefix.with_extension("stderr");
    let report = log_prefix.with_extension("measure.json");
    let script = cx.repo.join("bench/flink/run.sh");
    let measured = run_measured(
        cx.exe,
        &report,
        &Job {
            program: script.as_os_str(),
            args: vec![
                OsString::from(query.name()),
                input_dir.as_os_str().to_owned(),
                output_dir.as_os_str().to_owned(),
                OsString::from(parallelism.to_string()),
                OsString::from(cx.checkpoint_interval_ms.to_string()),
            ],
            env: vec![],
            stdout: &stdout,
            stderr: &stderr,
            timeout: cx.timeout,
        },
    )?;
    let out = read(&stdout)?;
    let log = read(&stderr)?;
    let line = out.lines().rev().find(|l| l.trim_start().starts_with('{'));
    let parsed: Option<FlinkResult> = line.and_then(|l| serde_json::from_str(l).ok());
    let status = match (&parsed, measured.success()) {
        (Some(_), true) => Status::Ok,
        (None, true) => Status::Failed(format!("run.sh printed no result line: {}", tail(&out, 2))),
        (_, false) => Status::Failed(format!("{}: {}", measured.describe_exit(), tail(&log, 3))),
    };
    let output = if status.is_ok() {
        Some(summarize_dir(output_dir)?)
    } else {
        None
    };
    let (seconds, durations, ev) = match &parsed {
        Some(r) => (r.seconds, r.checkpoint_durations_ms.clone(), r.events),
        None => (measured.wall_seconds, vec![], events),
    };
    Ok(finish(
        status,
        ev,
        seconds,
        "Flink job submission → job result (JVM warm-up included, MiniCluster start excluded)",
        &measured,
        parallelism,
        durations,
        output,
        parsed,
        &stderr,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_runtime_log() {
        let log = "2026-11-29T21:00:00.1Z  INFO streamjob_runtime::coordinator: triggering checkpoint=1\n\
                   2026-11-29T21:00:00.2Z  INFO checkpoint{id=1}: streamjob_runtime::coordinator: checkpoint 1 completed checkpoint=1 path=/x/chk-1 duration_ms=12\n\
                   2026-11-29T21:00:01.2Z  INFO streamjob_runtime::coordinator: savepoint 2 completed checkpoint=2 path=/s duration_ms=99\n\
                   2026-11-29T21:00:02.2Z  INFO checkpoint{id=3}: streamjob_runtime::coordinator: checkpoint 3 completed checkpoint=3 path=/x/chk-3 duration_ms=7\n";
        assert_eq!(runtime_checkpoint_durations(log), vec![12, 7]);
    }

    #[test]
    fn finds_the_cli_error() {
        let log = "2026 INFO x\nerror: step \"sink\": fileSink is not available\n";
        assert_eq!(
            runtime_error(log),
            "error: step \"sink\": fileSink is not available"
        );
        assert_eq!(runtime_error("error: a\n  - b\n"), "error: a   - b");
        assert_eq!(runtime_error("boom\n\nbang\n"), "boom | bang");
    }

    #[test]
    fn parses_flink_line() {
        let l = r#"{"query":"q2","parallelism":1,"checkpointIntervalMs":10000,"events":100,"seconds":1.5,"eventsPerSecond":66.7,"checkpointDurationsMs":[3,4],"checkpointP99Ms":4,"outputFiles":1,"outputRecords":2,"outputSumColumn":"price","outputSum":5,"columnSums":{"auction":246,"price":5}}"#;
        let r: FlinkResult = serde_json::from_str(l).expect("parse");
        assert_eq!(r.output_records, 2);
        assert_eq!(r.column_sums.get("price"), Some(&5));
    }
}
