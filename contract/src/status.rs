//! `GET /v1/status`: the run state and what the job reports.

use serde::{Deserialize, Deserializer, Serialize};

/// The state of a runtime's job.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum RunState {
    /// The process is up; no job graph yet.
    Created,
    /// Started with `--standby` (or stopped to standby): the job graph is loaded, waiting for
    /// `POST /v1/start` (Shadow upgrades).
    Standby,
    Restoring,
    Running,
    Stopping,
    Finished,
    Failed,
    Restarting,
    /// `POST /v1/cancel` stopped it without committing; it waits to be deleted.
    Cancelled,
    /// Anything a newer runtime reports that this side does not know.
    #[serde(other)]
    Unknown,
}

impl RunState {
    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Created => "created",
            RunState::Standby => "standby",
            RunState::Restoring => "restoring",
            RunState::Running => "running",
            RunState::Stopping => "stopping",
            RunState::Finished => "finished",
            RunState::Failed => "failed",
            RunState::Restarting => "restarting",
            RunState::Cancelled => "cancelled",
            RunState::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the job was restored from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RestoredFrom {
    /// `checkpoint` or `savepoint`.
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub path: Option<String>,
}

/// A completed checkpoint or savepoint.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// Checkpoint or savepoint id; read from a number or a string holding one (other values:
    /// none).
    #[serde(default, deserialize_with = "lenient_id")]
    pub id: Option<u64>,
    pub path: String,
    #[serde(default)]
    pub completed_at: Option<String>,
    #[serde(default)]
    pub duration_ms: Option<u64>,
}

/// A source that cannot make progress right now, and why (brokers down, topic missing).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct SourceProblem {
    pub uid: String,
    pub message: String,
}

/// `GET /v1/status`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JobStatus {
    pub state: RunState,
    #[serde(default)]
    pub restored_from: Option<RestoredFrom>,
    #[serde(default)]
    pub latest_checkpoint: Option<Snapshot>,
    #[serde(default)]
    pub last_savepoint: Option<Snapshot>,
    #[serde(default)]
    pub records_in: u64,
    #[serde(default)]
    pub records_out: u64,
    /// JSON has no NaN: a runtime that has not measured a rate yet may send `null`.
    #[serde(default, deserialize_with = "null_as_zero")]
    pub records_in_per_second: f64,
    #[serde(default)]
    pub restarts: u64,
    #[serde(default)]
    pub failure: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<SourceProblem>,
    /// Kafka sources: records between their positions and the ends of their partitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_lag: Option<i64>,
}

impl JobStatus {
    /// A job in `state` with nothing else reported.
    pub fn new(state: RunState) -> Self {
        Self {
            state,
            restored_from: None,
            latest_checkpoint: None,
            last_savepoint: None,
            records_in: 0,
            records_out: 0,
            records_in_per_second: 0.0,
            restarts: 0,
            failure: None,
            problems: Vec::new(),
            consumer_lag: None,
        }
    }

    /// Whether the job completed a checkpoint of its own since it was (re)started: the latest
    /// checkpoint exists and is not the snapshot it restored from.
    pub fn has_own_checkpoint(&self) -> bool {
        match (&self.latest_checkpoint, &self.restored_from) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(ck), Some(from)) => Some(&ck.path) != from.path.as_ref(),
        }
    }
}

impl Default for JobStatus {
    fn default() -> Self {
        Self::new(RunState::Created)
    }
}

fn null_as_zero<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(0.0))
}

fn lenient_id<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(match serde_json::Value::deserialize(d)? {
        serde_json::Value::Number(n) => n.as_u64(),
        serde_json::Value::String(s) => s.parse().ok(),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn unknown_states_and_fields_of_a_newer_runtime_are_read() {
        let s: JobStatus = serde_json::from_str(
            r#"{"state":"rebalancing","recordsInPerSecond":null,"latestCheckpoint":{"id":"7","path":"p"},"newField":1}"#,
        )
        .unwrap();
        assert_eq!(s.state, RunState::Unknown);
        assert_eq!(s.records_in_per_second, 0.0);
        assert_eq!(s.latest_checkpoint.unwrap().id, Some(7));
    }

    #[test]
    fn what_is_written_reads_back() {
        let mut s = JobStatus::new(RunState::Running);
        s.latest_checkpoint = Some(Snapshot {
            id: Some(3),
            path: "s3://b/chk-3".into(),
            completed_at: Some("2026-12-02T00:00:00Z".into()),
            duration_ms: Some(12),
        });
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains(r#""state":"running""#), "{json}");
        assert!(!json.contains("problems"), "{json}");
        assert_eq!(serde_json::from_str::<JobStatus>(&json).unwrap(), s);
        for st in [RunState::Standby, RunState::Cancelled, RunState::Restarting] {
            let text = serde_json::to_string(&st).unwrap();
            assert_eq!(text, format!("\"{}\"", st.as_str()));
        }
    }
}
