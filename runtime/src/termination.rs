//! The container's termination message: what the operator reads from a terminated runtime pod
//! (`status.containerStatuses[].state.terminated.message`) when it cannot ask the control API.
//!
//! Written to `$STREAMJOB_TERMINATION_MESSAGE_PATH` if set, else to `/dev/termination-log` if that
//! file exists (the kubelet creates it; outside Kubernetes it does not exist and nothing is
//! written). At most [`MAX_BYTES`] bytes (the Kubernetes limit). Contents:
//!
//! * after stop-with-savepoint: `{"savepoint":"<path>"}`
//! * after a stop with a final checkpoint (SIGTERM in coordinator mode): `{"checkpoint":"<path>"}`
//! * `plan`: the JSON report (compact; shortened to the verdict and the refusals if too long)
//! * a fatal error: `error: <message>`
//!
//! Write errors are logged, never fatal: the message is a convenience, the job's outcome is in
//! storage.

use crate::restore::{OperatorStatus, PlanReport};

/// Environment variable naming the file (our process kubelet sets it per container).
pub use streamjob_contract::process::TERMINATION_MESSAGE_PATH_ENV as PATH_ENV;
/// Kubernetes' default `terminationMessagePath`.
pub const DEFAULT_PATH: &str = "/dev/termination-log";
/// Kubernetes truncates termination messages to 4096 bytes.
pub const MAX_BYTES: usize = 4096;

fn target() -> Option<std::path::PathBuf> {
    match std::env::var_os(PATH_ENV) {
        Some(p) if !p.is_empty() => Some(p.into()),
        _ => {
            let p = std::path::PathBuf::from(DEFAULT_PATH);
            p.exists().then_some(p)
        }
    }
}

/// Writes `message` (cut to [`MAX_BYTES`] on a character boundary) as the termination message.
pub fn write(message: &str) {
    let Some(path) = target() else {
        return;
    };
    let text = truncate(message, MAX_BYTES);
    match std::fs::write(&path, text) {
        Ok(()) => tracing::debug!(path = %path.display(), "termination message written"),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot write the termination message")
        }
    }
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `{"savepoint":"<path>"}`.
pub fn savepoint(path: &str) -> String {
    serde_json::json!({ "savepoint": path }).to_string()
}

/// `{"checkpoint":"<path>"}`.
pub fn checkpoint(path: &str) -> String {
    serde_json::json!({ "checkpoint": path }).to_string()
}

/// The plan report as compact JSON of at most [`MAX_BYTES`] bytes. When the full report is too
/// long, it keeps `compatible`, `path`, the general reasons and the operators that are not
/// restored/new (the refusals the operator shows), shortening reasons and finally dropping rows
/// (counted in `omitted`) — always valid JSON that `operator/src/decide.rs` parses.
pub fn plan_report(report: &PlanReport) -> String {
    let full = serde_json::to_string(report).unwrap_or_default();
    if full.len() <= MAX_BYTES {
        return full;
    }
    let mut short = report.clone();
    short
        .operators
        .retain(|o| !matches!(o.status, OperatorStatus::Restored | OperatorStatus::New));
    // refusals first: they are what an incompatible verdict is about
    short
        .operators
        .sort_by_key(|o| o.status != OperatorStatus::Incompatible);
    for limit in [1000usize, 300, 120] {
        for o in &mut short.operators {
            o.reason = truncate(&o.reason, limit).to_string();
        }
        for r in &mut short.reasons {
            *r = truncate(r, limit).to_string();
        }
        let text = serde_json::to_string(&short).unwrap_or_default();
        if text.len() <= MAX_BYTES {
            return text;
        }
    }
    // still too long: drop rows from the end and say how many
    let total = short.operators.len() + short.reasons.len();
    short.path = truncate(&short.path, 300).to_string();
    loop {
        short.omitted = total - short.operators.len() - short.reasons.len();
        let text = serde_json::to_string(&short).unwrap_or_default();
        if text.len() <= MAX_BYTES {
            return text;
        }
        if short.operators.pop().is_none() && short.reasons.pop().is_none() {
            return serde_json::json!({"compatible": report.compatible, "omitted": total})
                .to_string();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::restore::OperatorReport;

    fn report(n: usize, reason_len: usize) -> PlanReport {
        PlanReport {
            compatible: false,
            path: "s3://bucket/savepoints/savepoint-7".into(),
            operators: (0..n)
                .map(|i| OperatorReport {
                    uid: format!("op-{i}"),
                    status: if i % 3 == 0 {
                        OperatorStatus::Incompatible
                    } else {
                        OperatorStatus::Restored
                    },
                    reason: "é".repeat(reason_len),
                })
                .collect(),
            reasons: Vec::new(),
            omitted: 0,
        }
    }

    #[test]
    fn small_reports_are_kept_whole() {
        let r = report(3, 10);
        let text = plan_report(&r);
        assert_eq!(serde_json::from_str::<PlanReport>(&text).unwrap(), r);
        assert!(!text.contains('\n'));
    }

    #[test]
    fn long_reports_keep_the_verdict_and_the_refusals() {
        // few rows, long reasons: all refusals kept, reasons shortened
        let text = plan_report(&report(30, 400));
        assert!(text.len() <= MAX_BYTES, "{}", text.len());
        let back: PlanReport = serde_json::from_str(&text).unwrap();
        assert!(!back.compatible);
        assert_eq!(back.operators.len(), 10);
        assert!(
            back.operators
                .iter()
                .all(|o| o.status == OperatorStatus::Incompatible && !o.reason.is_empty())
        );
        // many rows: some dropped and counted
        let text = plan_report(&report(3000, 50));
        assert!(text.len() <= MAX_BYTES, "{}", text.len());
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["compatible"], false);
        assert!(v["omitted"].as_u64().unwrap() > 0);
        assert!(v["operators"].as_array().unwrap().len() > 10);
    }

    #[test]
    fn messages_are_cut_on_character_boundaries() {
        let s = "é".repeat(3000);
        let t = truncate(&s, MAX_BYTES);
        assert!(t.len() <= MAX_BYTES && t.len() >= MAX_BYTES - 1);
        assert_eq!(savepoint("a\"b"), r#"{"savepoint":"a\"b"}"#);
    }
}
