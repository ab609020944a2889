//! The plan report: whether a new job can restore a snapshot, per operator uid. The runtime's
//! `plan` prints it (`--json`) and writes it as its termination message; the operator reads it
//! from there (or from the pod's log tail) when a plan pod exits 3.

use serde::{Deserialize, Serialize};

/// Per-uid outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OperatorStatus {
    /// State restored from the snapshot (or a stateless operator present in both).
    Restored,
    /// Not in the snapshot: starts empty.
    New,
    /// In the snapshot but not in the job graph: its state is dropped.
    Dropped,
    /// Cannot be restored.
    Incompatible,
    /// Anything a newer runtime reports that this side does not know (read as a refusal).
    #[serde(other)]
    Unknown,
}

impl OperatorStatus {
    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            OperatorStatus::Restored => "restored",
            OperatorStatus::New => "new",
            OperatorStatus::Dropped => "dropped",
            OperatorStatus::Incompatible => "incompatible",
            OperatorStatus::Unknown => "unknown",
        }
    }

    /// Whether this row stands in the way of the restore.
    pub fn refuses(self) -> bool {
        matches!(self, OperatorStatus::Incompatible | OperatorStatus::Unknown)
    }
}

/// One row of the report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OperatorReport {
    pub uid: String,
    pub status: OperatorStatus,
    #[serde(default)]
    pub reason: String,
}

/// The outcome of `plan`.
///
/// `compatible` is required when reading: a plan pod's log tail holds other JSON lines (log
/// records), and none of them may pass for the report and hide the uids it refuses.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanReport {
    pub compatible: bool,
    /// Path of the snapshot checked.
    #[serde(default)]
    pub path: String,
    #[serde(default)]
    pub operators: Vec<OperatorReport>,
    /// Problems not tied to one operator (format version).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    /// Rows left out to fit the termination message (4 KiB); 0 when complete.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl PlanReport {
    /// Every refusal: the general reasons, then `uid: reason` per refusing operator.
    pub fn refusals(&self) -> Vec<String> {
        let mut out = self.reasons.clone();
        out.extend(
            self.operators
                .iter()
                .filter(|o| o.status.refuses())
                .map(|o| format!("{}: {}", o.uid, o.reason)),
        );
        out
    }

    /// What the restore drops (rows `dropped`: in the snapshot, not used by the new job), one
    /// line each: `uid: reason`, or the uid alone.
    pub fn dropped(&self) -> Vec<String> {
        self.operators
            .iter()
            .filter(|o| o.status == OperatorStatus::Dropped)
            .map(|o| {
                if o.reason.is_empty() {
                    format!("uid {}", o.uid)
                } else {
                    format!("uid {}: {}", o.uid, o.reason)
                }
            })
            .collect()
    }

    /// The last line of `text` (a termination message or a log tail) that is a plan report.
    pub fn find_in(text: &str) -> Option<Self> {
        text.lines()
            .rev()
            .find_map(|l| serde_json::from_str(l.trim()).ok())
            .or_else(|| serde_json::from_str(text.trim()).ok())
    }

    /// Human-readable table.
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "{} {}\n",
            if self.compatible {
                "compatible:"
            } else {
                "INCOMPATIBLE:"
            },
            self.path
        );
        for r in &self.reasons {
            s.push_str(&format!("  - {r}\n"));
        }
        for o in &self.operators {
            s.push_str(&format!(
                "  {:<24} {:<13} {}\n",
                o.uid,
                o.status.as_str(),
                o.reason
            ));
        }
        if self.omitted > 0 {
            s.push_str(&format!("  … {} more rows omitted\n", self.omitted));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_log_record_is_not_a_report_and_the_last_report_wins() {
        let tail = concat!(
            "{\"level\":\"INFO\",\"operators\":[],\"message\":\"planning\"}\n",
            "{\"compatible\":false,\"path\":\"s3://b/sp\",\"operators\":[{\"uid\":\"agg\",\"status\":\"incompatible\",\"reason\":\"gone\"},{\"uid\":\"src\",\"status\":\"restored\",\"reason\":\"\"}],\"omitted\":2}\n",
            "{\"level\":\"INFO\",\"message\":\"exit 3\"}\n",
        );
        let r = PlanReport::find_in(tail).unwrap();
        assert!(!r.compatible);
        assert_eq!(r.refusals(), ["agg: gone"]);
        assert_eq!(r.omitted, 2);
        assert!(PlanReport::find_in("{\"operators\":[]}").is_none());
    }

    #[test]
    fn an_unknown_status_from_a_newer_runtime_refuses() {
        let r: PlanReport = serde_json::from_str(
            r#"{"compatible":false,"operators":[{"uid":"x","status":"rewound","reason":"r"}]}"#,
        )
        .unwrap();
        assert_eq!(r.operators[0].status, OperatorStatus::Unknown);
        assert_eq!(r.refusals(), ["x: r"]);
    }
}
