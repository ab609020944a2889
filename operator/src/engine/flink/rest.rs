//! Flink's REST API (the same paths in 1.20 and 2.3), as the operator drives a JobManager.
//!
//! Savepoints are triggered with a caller-chosen trigger id ([`trigger_id`]): the id is derived
//! from what the savepoint is for and kept in `StreamJob.status`, so a retry or a restarted
//! operator asks Flink about the same operation (Flink answers a repeated trigger id with the
//! operation it already has) instead of taking a second savepoint.

use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::FlinkError;
use crate::http::{
    self, BodyError, MAX_ANSWER_BYTES, MAX_ERROR_BYTES, QUOTE_CHARS, sanitize_remote,
};

/// How long connecting to a JobManager may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one REST exchange may take, the answer's body included.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The most read of `/jobs/:id/exceptions`: its history holds up to 16 failures (Flink's
/// `web.exception-history-size`), each with whole stack traces, larger than any other answer.
const MAX_EXCEPTIONS_BYTES: usize = 4 * MAX_ANSWER_BYTES;

/// A JobManager's REST endpoint. The JobManager runs the tenant's image, so its answers are
/// read as [`crate::http`] reads a hostile pod's: no redirects, capped bodies, sanitised text.
#[derive(Clone, Debug)]
pub struct FlinkRest {
    base: String,
    /// The client, or why it could not be built (then every call fails, naming it: a client
    /// with reqwest's defaults would follow redirects).
    http: Result<reqwest::Client, String>,
}

/// A job as `/jobs/overview` lists it.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct JobOverview {
    pub jid: String,
    pub name: String,
    /// CREATED, INITIALIZING, RUNNING, FAILING, FAILED, CANCELLING, CANCELED, FINISHED,
    /// RESTARTING, SUSPENDED, RECONCILING.
    pub state: String,
    #[serde(rename = "start-time")]
    pub start_time: i64,
    /// Tasks per state (`running`, `initializing`, …).
    #[serde(default)]
    pub tasks: std::collections::BTreeMap<String, u64>,
}

impl JobOverview {
    /// The job runs and every task of it is running or already finished (not scheduled or
    /// initializing). A task finishes early when it has no input: a source subtask without a
    /// split after a rescale to more subtasks than the savepoint's splits (found by the e2e
    /// parallelism change); Flink checkpoints with finished tasks.
    pub fn fully_running(&self) -> bool {
        let count = |state: &str| self.tasks.get(state).copied().unwrap_or(0);
        let total = count("total");
        self.state == "RUNNING"
            && count("running") > 0
            && count("running") + count("finished") == total
    }
}

/// One checkpoint or savepoint as `/jobs/:id/checkpoints` reports it.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct CheckpointRef {
    pub id: u64,
    #[serde(default)]
    pub external_path: Option<String>,
    #[serde(default)]
    pub is_savepoint: Option<bool>,
    /// When the last task acknowledged it (completed ones), epoch milliseconds.
    #[serde(default)]
    pub latest_ack_timestamp: Option<i64>,
    /// When the job restored it (`latest.restored`), epoch milliseconds.
    #[serde(default)]
    pub restore_timestamp: Option<i64>,
    #[serde(default)]
    pub end_to_end_duration: Option<u64>,
}

/// Checkpoint counts and the latest ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckpointSummary {
    pub completed: u64,
    pub failed: u64,
    pub in_progress: u64,
    pub latest_completed: Option<CheckpointRef>,
    pub latest_savepoint: Option<CheckpointRef>,
    /// What the job was restored from, if anything.
    pub restored: Option<CheckpointRef>,
}

/// Where an asynchronous operation (savepoint, stop, disposal) stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operation {
    InProgress,
    /// Completed; the savepoint's location (none for a disposal).
    Completed(Option<String>),
    /// Failed, with Flink's cause.
    Failed(String),
}

/// A trigger id (32 hex digits, as Flink's `TriggerId`) derived from what the operation is for,
/// e.g. `"<job uid>/savepoint/<nonce>"`: the same purpose gives the same id on every retry.
pub fn trigger_id(purpose: &str) -> String {
    let digest = Sha256::digest(purpose.as_bytes());
    hex::encode(&digest[..16])
}

impl FlinkRest {
    /// `base` is `http://<host>:<rest port>`.
    pub fn new(base: impl Into<String>) -> Self {
        Self::with_timeouts(base, CONNECT_TIMEOUT, TIMEOUT)
    }

    /// [`new`](Self::new) with other timeouts: `connect` for the connection, `total` for a
    /// whole exchange.
    pub fn with_timeouts(base: impl Into<String>, connect: Duration, total: Duration) -> Self {
        Self {
            base: base.into().trim_end_matches('/').to_string(),
            http: http::client(connect, total).map_err(|e| http::describe(&e)),
        }
    }

    /// The endpoint's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The cluster's Flink version (`/config`).
    pub async fn flink_version(&self) -> Result<String, FlinkError> {
        let config: Value = self.get("/config").await?;
        string_at(&config, "flink-version", &self.url("/config"))
    }

    /// Every job the JobManager knows.
    pub async fn jobs(&self) -> Result<Vec<JobOverview>, FlinkError> {
        #[derive(Deserialize)]
        struct Jobs {
            jobs: Vec<JobOverview>,
        }
        let jobs: Jobs = self.get("/jobs/overview").await?;
        Ok(jobs.jobs)
    }

    /// Checkpoint counts and the latest checkpoint, savepoint and restore of job `jid`.
    pub async fn checkpoints(&self, jid: &str) -> Result<CheckpointSummary, FlinkError> {
        #[derive(Deserialize)]
        struct Counts {
            completed: u64,
            failed: u64,
            in_progress: u64,
        }
        #[derive(Deserialize)]
        struct Latest {
            completed: Option<CheckpointRef>,
            savepoint: Option<CheckpointRef>,
            restored: Option<CheckpointRef>,
        }
        #[derive(Deserialize)]
        struct Checkpoints {
            counts: Counts,
            latest: Latest,
        }
        let c: Checkpoints = self.get(&format!("/jobs/{jid}/checkpoints")).await?;
        Ok(CheckpointSummary {
            completed: c.counts.completed,
            failed: c.counts.failed,
            in_progress: c.counts.in_progress,
            latest_completed: c.latest.completed,
            latest_savepoint: c.latest.savepoint,
            restored: c.latest.restored,
        })
    }

    /// Triggers a savepoint of job `jid` into `dir` under `trigger_id` (repeating the call with
    /// the same id does not take another). Flink's canonical format: portable across state
    /// backends and Flink versions.
    pub async fn trigger_savepoint(
        &self,
        jid: &str,
        trigger_id: &str,
        dir: &str,
    ) -> Result<(), FlinkError> {
        self.savepoint_request(jid, trigger_id, dir, false).await
    }

    /// Stop-with-savepoint of job `jid` (no drain: timers and windows stay in the savepoint).
    pub async fn stop_with_savepoint(
        &self,
        jid: &str,
        trigger_id: &str,
        dir: &str,
    ) -> Result<(), FlinkError> {
        self.savepoint_request(jid, trigger_id, dir, true).await
    }

    async fn savepoint_request(
        &self,
        jid: &str,
        trigger_id: &str,
        dir: &str,
        stop: bool,
    ) -> Result<(), FlinkError> {
        // The two endpoints spell their fields differently.
        let (path, body) = if stop {
            (
                format!("/jobs/{jid}/stop"),
                json!({ "targetDirectory": dir, "drain": false }),
            )
        } else {
            (
                format!("/jobs/{jid}/savepoints"),
                json!({ "target-directory": dir, "cancel-job": false }),
            )
        };
        let mut body = body;
        body["triggerId"] = json!(trigger_id);
        body["formatType"] = json!("CANONICAL");
        self.trigger(&path, &body, trigger_id).await
    }

    /// Where the savepoint (or stop) triggered under `trigger_id` stands.
    pub async fn savepoint(&self, jid: &str, trigger_id: &str) -> Result<Operation, FlinkError> {
        let path = format!("/jobs/{jid}/savepoints/{trigger_id}");
        let answer: Value = self.get(&path).await?;
        operation(&answer, &self.url(&path))
    }

    /// Disposes of a savepoint through the cluster (it knows the store's credentials); returns
    /// the trigger id to poll with [`disposal`](Self::disposal).
    pub async fn dispose_savepoint(&self, location: &str) -> Result<String, FlinkError> {
        let url = self.url("/savepoint-disposal");
        let answer: Value = self
            .post(
                "/savepoint-disposal",
                &json!({ "savepoint-path": location }),
            )
            .await?;
        string_at(&answer, "request-id", &url)
    }

    /// Where a disposal stands.
    pub async fn disposal(&self, trigger_id: &str) -> Result<Operation, FlinkError> {
        let path = format!("/savepoint-disposal/{trigger_id}");
        let answer: Value = self.get(&path).await?;
        operation(&answer, &self.url(&path))
    }

    /// The newest failure of job `jid`, first line (what a condition message can show).
    pub async fn latest_exception(&self, jid: &str) -> Result<Option<String>, FlinkError> {
        let answer: Value = self
            .get_capped(&format!("/jobs/{jid}/exceptions"), MAX_EXCEPTIONS_BYTES)
            .await?;
        Ok(latest_failure(&answer))
    }

    async fn trigger(&self, path: &str, body: &Value, trigger_id: &str) -> Result<(), FlinkError> {
        let url = self.url(path);
        let answer: Value = self.post(path, body).await?;
        let id = string_at(&answer, "request-id", &url)?;
        if id == trigger_id {
            Ok(())
        } else {
            Err(FlinkError::Answer {
                url,
                detail: format!(
                    "asked for trigger id {trigger_id}, Flink answered {}",
                    sanitize_remote(&id, 100)
                ),
            })
        }
    }

    /// How often job `jid` restarted since it was submitted (its `numRestarts` metric; `None`
    /// before the metric is reported).
    pub async fn restarts(&self, jid: &str) -> Result<Option<u64>, FlinkError> {
        #[derive(Deserialize)]
        struct Metric {
            id: String,
            value: String,
        }
        let metrics: Vec<Metric> = self
            .get(&format!("/jobs/{jid}/metrics?get=numRestarts"))
            .await?;
        Ok(metrics
            .iter()
            .find(|m| m.id == "numRestarts")
            .and_then(|m| m.value.parse().ok()))
    }

    /// Cancels job `jid` (no savepoint): what it has not committed is never committed.
    pub async fn cancel(&self, jid: &str) -> Result<(), FlinkError> {
        let url = self.url(&format!("/jobs/{jid}?mode=cancel"));
        let request = self.client(&url)?.patch(&url);
        // 202 with an empty JSON object
        self.exchange::<Value>("PATCH", url, request, MAX_ANSWER_BYTES)
            .await
            .map(|_| ())
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn client(&self, url: &str) -> Result<&reqwest::Client, FlinkError> {
        self.http.as_ref().map_err(|e| FlinkError::Answer {
            url: url.to_string(),
            detail: format!("no HTTP client: {e}"),
        })
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, FlinkError> {
        self.get_capped(path, MAX_ANSWER_BYTES).await
    }

    async fn get_capped<T: DeserializeOwned>(
        &self,
        path: &str,
        max: usize,
    ) -> Result<T, FlinkError> {
        let url = self.url(path);
        let request = self.client(&url)?.get(&url);
        self.exchange("GET", url, request, max).await
    }

    async fn post<T: DeserializeOwned>(&self, path: &str, body: &Value) -> Result<T, FlinkError> {
        let url = self.url(path);
        let request = self.client(&url)?.post(&url).json(body);
        self.exchange("POST", url, request, MAX_ANSWER_BYTES).await
    }

    /// Sends `request` and reads its JSON answer (at most `max` bytes). Anything but a 2xx is an
    /// error: a redirect is not followed, an error body is quoted by its first lines, sanitised.
    async fn exchange<T: DeserializeOwned>(
        &self,
        method: &'static str,
        url: String,
        request: reqwest::RequestBuilder,
        max: usize,
    ) -> Result<T, FlinkError> {
        let failed = |source| FlinkError::Request {
            method,
            url: url.clone(),
            source,
        };
        let response = request.send().await.map_err(failed)?;
        let status = response.status();
        if !status.is_success() {
            return Err(FlinkError::Status {
                method,
                url,
                status: status.as_u16(),
                body: errors_of(&http::refusal(response).await),
            });
        }
        let body = http::read_capped(response, max)
            .await
            .map_err(|e| match e {
                BodyError::Read(source) => failed(source),
                too_large @ BodyError::TooLarge { .. } => FlinkError::Answer {
                    url: url.clone(),
                    detail: too_large.to_string(),
                },
            })?;
        // serde's message can quote the answer too; a start of the answer is enough to quote
        serde_json::from_slice(&body).map_err(|e| {
            let start = String::from_utf8_lossy(&body[..body.len().min(MAX_ERROR_BYTES)]);
            FlinkError::Answer {
                detail: sanitize_remote(&format!("{e}: {start}"), 300),
                url,
            }
        })
    }
}

/// `{"status":{"id":"COMPLETED"},"operation":{"location":…} | {"failure-cause":{…}}}`
fn operation(answer: &Value, url: &str) -> Result<Operation, FlinkError> {
    let status = answer
        .pointer("/status/id")
        .and_then(Value::as_str)
        .ok_or_else(|| FlinkError::Answer {
            url: url.to_string(),
            detail: format!(
                "no status.id in {}",
                sanitize_remote(&answer.to_string(), 300)
            ),
        })?;
    if status == "IN_PROGRESS" {
        return Ok(Operation::InProgress);
    }
    if let Some(cause) = answer.pointer("/operation/failure-cause") {
        // the cause becomes the savepoint's error in status
        let text = match cause.get("stack-trace").and_then(Value::as_str) {
            Some(trace) => first_line(trace),
            None => sanitize_remote(&cause.to_string(), QUOTE_CHARS),
        };
        return Ok(Operation::Failed(text));
    }
    let location = answer
        .pointer("/operation/location")
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok(Operation::Completed(location))
}

fn string_at(value: &Value, key: &str, url: &str) -> Result<String, FlinkError> {
    value
        .get(key)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| FlinkError::Answer {
            url: url.to_string(),
            detail: format!(
                "no \"{key}\" in {}",
                sanitize_remote(&value.to_string(), 300)
            ),
        })
}

/// The newest failure in a `/jobs/:id/exceptions` answer, first line (it becomes the run's
/// failure in status).
fn latest_failure(answer: &Value) -> Option<String> {
    answer
        .pointer("/exceptionHistory/entries/0/stacktrace")
        .or_else(|| answer.get("root-exception"))
        .and_then(Value::as_str)
        .map(root_cause_first)
}

/// The deepest `Caused by:` of a stack trace, then the exception Flink reported, fit to quote:
/// a record failing in a chained operator surfaces as "Could not forward element to next
/// operator", and only its cause says what went wrong.
fn root_cause_first(trace: &str) -> String {
    let reported = trace.lines().next().unwrap_or_default();
    match trace
        .lines()
        .rev()
        .find_map(|l| l.trim_start().strip_prefix("Caused by: "))
    {
        Some(cause) if cause != reported => {
            sanitize_remote(&format!("{cause} (reported as {reported})"), QUOTE_CHARS)
        }
        _ => first_line(trace),
    }
}

/// The first line of a stack trace (the exception and its message), fit to quote.
fn first_line(trace: &str) -> String {
    sanitize_remote(trace.lines().next().unwrap_or_default(), QUOTE_CHARS)
}

/// Flink's error body is `{"errors":["…", "<stack trace>"]}`: keep the first lines.
fn errors_of(body: &str) -> String {
    let first = serde_json::from_str::<Value>(body).ok().and_then(|v| {
        v.get("errors")?.as_array().map(|errors| {
            errors
                .iter()
                .filter_map(Value::as_str)
                .map(|e| e.lines().next().unwrap_or_default())
                .collect::<Vec<_>>()
                .join("; ")
        })
    });
    sanitize_remote(first.as_deref().unwrap_or(body), QUOTE_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_ids_are_stable_per_purpose() {
        let a = trigger_id("uid-1/savepoint/3");
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(a, trigger_id("uid-1/savepoint/3"));
        assert_ne!(a, trigger_id("uid-1/savepoint/4"));
    }

    #[test]
    fn operations_are_read_as_flink_writes_them() {
        let done =
            json!({"status":{"id":"COMPLETED"},"operation":{"location":"file:/sp/savepoint-1"}});
        assert_eq!(
            operation(&done, "u").unwrap(),
            Operation::Completed(Some("file:/sp/savepoint-1".into()))
        );
        let busy = json!({"status":{"id":"IN_PROGRESS"}});
        assert_eq!(operation(&busy, "u").unwrap(), Operation::InProgress);
        let failed = json!({"status":{"id":"COMPLETED"},"operation":{"failure-cause":{"class":"x","stack-trace":"java.util.concurrent.CompletionException: boom\n\tat x"}}});
        assert_eq!(
            operation(&failed, "u").unwrap(),
            Operation::Failed("java.util.concurrent.CompletionException: boom".into())
        );
        let disposed = json!({"status":{"id":"COMPLETED"},"operation":{}});
        assert_eq!(
            operation(&disposed, "u").unwrap(),
            Operation::Completed(None)
        );
        assert!(operation(&json!({}), "u").is_err());
        assert_eq!(
            errors_of(r#"{"errors":["Job not found\n at x", "trace"]}"#),
            "Job not found; trace"
        );
    }

    /// What a JobManager says about failures reaches status and events: one line, no escapes,
    /// capped, however it was sent.
    #[test]
    fn remote_failure_text_is_sanitised_and_capped() {
        let hostile = format!(
            "\u{1b}[2J\u{1b}]0;owned\u{7}java.lang.Exception:\tboom\u{0}\u{202e} {}\nat x",
            "y".repeat(10_000)
        );
        let clean = |text: &str| {
            assert!(text.chars().count() <= QUOTE_CHARS, "{} chars", text.len());
            assert!(text.starts_with("java.lang.Exception: boom y"), "{text}");
            assert!(text.ends_with('…'), "{text}");
            assert!(!text.contains(|c: char| c.is_control() || c == '\u{202e}'));
        };
        let failed = json!({"status":{"id":"COMPLETED"},"operation":{"failure-cause":{"stack-trace": hostile}}});
        match operation(&failed, "u").unwrap() {
            Operation::Failed(text) => clean(&text),
            other => panic!("{other:?}"),
        }
        let no_trace =
            json!({"status":{"id":"COMPLETED"},"operation":{"failure-cause":{"class": hostile}}});
        match operation(&no_trace, "u").unwrap() {
            Operation::Failed(text) => assert!(text.chars().count() <= QUOTE_CHARS, "{text}"),
            other => panic!("{other:?}"),
        }
        let history = json!({"exceptionHistory":{"entries":[{"stacktrace": hostile}]}});
        clean(&latest_failure(&history).unwrap());
        let legacy = json!({"root-exception": hostile});
        clean(&latest_failure(&legacy).unwrap());
        assert_eq!(
            latest_failure(&json!({"exceptionHistory":{"entries":[]}})),
            None
        );
        // a record failing in a chained operator: the cause that names it comes first
        let chained = "org.apache.flink.streaming.runtime.tasks.ExceptionInChainedOperatorException: \
            Could not forward element to next operator\n\tat x.y(Z.java:1)\nCaused by: \
            java.lang.RuntimeException: wrapped\n\tat a\nCaused by: java.lang.IllegalStateException: \
            poison-file /tmp/p exists: record 7 fails\n\t... 12 more";
        let quoted =
            latest_failure(&json!({"exceptionHistory":{"entries":[{"stacktrace": chained}]}}))
                .unwrap();
        assert!(
            quoted.starts_with(
                "java.lang.IllegalStateException: poison-file /tmp/p exists: record 7 fails \
                 (reported as org.apache.flink.streaming.runtime.tasks.ExceptionInChainedOperatorException"
            ),
            "{quoted}"
        );
        let body = json!({ "errors": [hostile, "trace"] }).to_string();
        let quoted = errors_of(&body);
        assert!(quoted.chars().count() <= QUOTE_CHARS, "{quoted}");
        assert!(!quoted.contains(|c: char| c.is_control()), "{quoted}");
        let unexpected = string_at(&json!({ "x": hostile }), "request-id", "u").unwrap_err();
        assert!(unexpected.to_string().chars().count() < 400, "{unexpected}");
        assert!(!unexpected.to_string().contains('\u{1b}'), "{unexpected}");
    }
}
