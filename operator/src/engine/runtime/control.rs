//! Client of the runtime's control API (HTTP+JSON on the coordinator, port 8081, bearer token).
//!
//! The decision logic never sees HTTP: it reads [`JobStatus`] and [`SavepointState`] values that
//! the controller fetched through the [`ControlApi`] trait, and asks for calls through actions.

use std::future::Future;
use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use streamjob_contract::requests::StartRequest;

use crate::Result;
use crate::http::{self, QUOTE_CHARS, sanitize_remote};

/// The most the operator reads of one control API answer. A status is a few KiB; a runtime that
/// sends more is broken or hostile, and one operator serves every job of the cluster.
pub use crate::http::MAX_ANSWER_BYTES;

/// What went wrong talking to a runtime pod. Texts that come from the pod (its refusal, what
/// was wrong with its answer) are sanitised and length-capped: the pod runs a tenant's image.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("cannot build HTTP client: {}", http::describe(.0))]
    Client(#[source] reqwest::Error),
    /// No answer (the causes spelled out: "operation timed out").
    #[error("request failed: {}", http::describe(.0))]
    Request(#[source] reqwest::Error),
    /// The runtime answered with an error status (or a redirect, never followed).
    #[error("runtime answered {status}: {body}")]
    Refused {
        status: reqwest::StatusCode,
        body: String,
    },
    /// The answer could not be read (too large, cut off).
    #[error("{0}")]
    Body(#[source] http::BodyError),
    /// The answer is not what the contract says (serde's message, sanitised: it can quote the
    /// answer).
    #[error("bad {what} body: {detail}")]
    Decode { what: String, detail: String },
    #[error("savepoint reported completed without a path")]
    CompletedWithoutPath,
}

/// The JSON body of `resp` (at most [`MAX_ANSWER_BYTES`]); `what` names the call in errors.
async fn read_json<T: DeserializeOwned>(resp: reqwest::Response, what: &str) -> Result<T> {
    let body = http::read_capped(resp, MAX_ANSWER_BYTES)
        .await
        .map_err(ControlError::Body)?;
    serde_json::from_slice(&body).map_err(|e| {
        ControlError::Decode {
            what: what.to_string(),
            detail: sanitize_remote(&e.to_string(), QUOTE_CHARS),
        }
        .into()
    })
}

/// The contract's types (`streamjob-contract`), under the names the decision uses.
pub use streamjob_contract::requests::{SavepointProgress as SavepointState, SavepointRequest};
pub use streamjob_contract::status::{JobStatus, RestoredFrom, RunState, Snapshot, SourceProblem};

/// A savepoint answer the decision can use: `completed` must name where; a failure's reason is
/// the runtime's text, quoted in status.
fn checked(progress: SavepointState) -> Result<SavepointState> {
    match progress {
        SavepointState::Completed { path } if path.is_empty() => {
            Err(ControlError::CompletedWithoutPath.into())
        }
        SavepointState::Failed { error } => Ok(SavepointState::Failed {
            error: sanitize_remote(&error, QUOTE_CHARS),
        }),
        other => Ok(other),
    }
}

/// A status whose texts (the failure, the sources' problems) are fit to quote in status and
/// events: the runtime runs the tenant's image.
fn sanitized(mut status: JobStatus) -> JobStatus {
    status.failure = status.failure.map(|f| sanitize_remote(&f, QUOTE_CHARS));
    for p in &mut status.problems {
        p.uid = sanitize_remote(&p.uid, QUOTE_CHARS);
        p.message = sanitize_remote(&p.message, QUOTE_CHARS);
    }
    status
}

/// A runtime pod's control endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// `http://<podIP>:<port>` (no cluster DNS: pods are reached by IP).
    pub base_url: String,
    /// Bearer token from the job's Secret.
    pub token: String,
}

impl Endpoint {
    pub fn new(ip: &str, port: u16, token: &str) -> Self {
        let host = if ip.contains(':') {
            format!("[{ip}]")
        } else {
            ip.to_string()
        };
        Self {
            base_url: format!("http://{host}:{port}"),
            token: token.to_string(),
        }
    }
}

/// The calls the operator makes to a runtime pod.
pub trait ControlApi: Send + Sync + 'static {
    fn status(&self, ep: &Endpoint) -> impl Future<Output = Result<JobStatus>> + Send;
    /// Returns the savepoint request id.
    fn trigger_savepoint(
        &self,
        ep: &Endpoint,
        req: &SavepointRequest,
    ) -> impl Future<Output = Result<String>> + Send;
    fn savepoint(
        &self,
        ep: &Endpoint,
        id: &str,
    ) -> impl Future<Output = Result<SavepointState>> + Send;
    /// `POST /v1/start {"fromSavepoint": path}`: a standby job restores and runs (shadow upgrades).
    /// `epoch`: the new run's epoch (status.epoch), so the run fences older ones.
    fn start(
        &self,
        ep: &Endpoint,
        from_savepoint: Option<&str>,
        epoch: u64,
    ) -> impl Future<Output = Result<()>> + Send;
    /// `POST /v1/cancel`: the job stops without a checkpoint or any commit (a version whose
    /// output must not become visible, before its pod is deleted).
    fn cancel(&self, ep: &Endpoint) -> impl Future<Output = Result<()>> + Send;
}

/// [`ControlApi`] over HTTP with reqwest.
#[derive(Clone, Debug)]
pub struct HttpControl {
    client: reqwest::Client,
}

impl HttpControl {
    /// `timeout` bounds connecting and each whole call, the answer included.
    pub fn new(timeout: Duration) -> Result<Self> {
        let client = http::client(timeout, timeout).map_err(ControlError::Client)?;
        Ok(Self { client })
    }

    /// Sends `req`; anything but a 2xx is an error (a redirect is not followed).
    async fn send(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Response> {
        let resp = req.send().await.map_err(ControlError::Request)?;
        let status = resp.status();
        if status.is_success() {
            Ok(resp)
        } else {
            let body = sanitize_remote(&http::refusal(resp).await, QUOTE_CHARS);
            Err(ControlError::Refused { status, body }.into())
        }
    }
}

impl ControlApi for HttpControl {
    async fn status(&self, ep: &Endpoint) -> Result<JobStatus> {
        let resp = self
            .send(
                self.client
                    .get(format!("{}/v1/status", ep.base_url))
                    .bearer_auth(&ep.token),
            )
            .await?;
        read_json(resp, "/v1/status").await.map(sanitized)
    }

    async fn trigger_savepoint(&self, ep: &Endpoint, req: &SavepointRequest) -> Result<String> {
        #[derive(Deserialize)]
        struct Accepted {
            id: serde_json::Value,
        }
        let resp = self
            .send(
                self.client
                    .post(format!("{}/v1/savepoints", ep.base_url))
                    .bearer_auth(&ep.token)
                    .json(req),
            )
            .await?;
        let accepted: Accepted = read_json(resp, "/v1/savepoints").await?;
        Ok(match accepted.id {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        })
    }

    async fn savepoint(&self, ep: &Endpoint, id: &str) -> Result<SavepointState> {
        let resp = self
            .send(
                self.client
                    .get(format!("{}/v1/savepoints/{id}", ep.base_url))
                    .bearer_auth(&ep.token),
            )
            .await?;
        checked(read_json(resp, &format!("/v1/savepoints/{id}")).await?)
    }

    async fn start(&self, ep: &Endpoint, from_savepoint: Option<&str>, epoch: u64) -> Result<()> {
        self.send(
            self.client
                .post(format!("{}/v1/start", ep.base_url))
                .bearer_auth(&ep.token)
                .json(&StartRequest {
                    from_savepoint: from_savepoint.map(str::to_string),
                    epoch: Some(epoch),
                }),
        )
        .await?;
        Ok(())
    }

    async fn cancel(&self, ep: &Endpoint) -> Result<()> {
        self.send(
            self.client
                .post(format!("{}/v1/cancel", ep.base_url))
                .bearer_auth(&ep.token),
        )
        .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_status_contract() {
        let js: JobStatus = serde_json::from_str(
            r#"{"state":"running","restoredFrom":{"kind":"savepoint","path":"s3://b/sp/1"},
                "latestCheckpoint":{"id":7,"path":"s3://b/ck/7","completedAt":"2026-01-01T00:00:00Z","durationMs":12},
                "lastSavepoint":null,"recordsIn":10,"recordsOut":9,"recordsInPerSecond":1.5,"restarts":0,"failure":null}"#,
        )
        .unwrap();
        assert_eq!(js.state, RunState::Running);
        assert!(js.has_own_checkpoint());
        let unknown: JobStatus = serde_json::from_str(r#"{"state":"warming"}"#).unwrap();
        assert_eq!(unknown.state, RunState::Unknown);
        let lenient: JobStatus = serde_json::from_str(
            r#"{"state":"running","lastSavepoint":{"id":"4","path":"p","completedAt":""},
                "latestCheckpoint":{"id":"ck-x","path":"c"},"extra":1}"#,
        )
        .unwrap();
        assert_eq!(lenient.last_savepoint.unwrap().id, Some(4));
        assert_eq!(lenient.latest_checkpoint.unwrap().id, None);
        let no_rate: JobStatus =
            serde_json::from_str(r#"{"state":"running","recordsInPerSecond":null}"#).unwrap();
        assert_eq!(no_rate.records_in_per_second, 0.0);
    }

    #[test]
    fn own_checkpoint_excludes_the_restored_one() {
        let mut js = JobStatus::new(RunState::Running);
        js.restored_from = Some(RestoredFrom {
            kind: "checkpoint".into(),
            path: Some("ck/3".into()),
        });
        js.latest_checkpoint = Some(Snapshot {
            path: "ck/3".into(),
            ..Default::default()
        });
        assert!(!js.has_own_checkpoint());
    }

    #[test]
    fn savepoint_states() {
        let parse = |s: &str| {
            serde_json::from_str::<SavepointState>(s)
                .map_err(|e| {
                    crate::Error::from(ControlError::Decode {
                        what: "savepoint".into(),
                        detail: e.to_string(),
                    })
                })
                .and_then(checked)
        };
        assert_eq!(
            parse(r#"{"state":"pending"}"#).unwrap(),
            SavepointState::Pending
        );
        assert_eq!(
            parse(r#"{"state":"completed","path":"p"}"#).unwrap(),
            SavepointState::Completed { path: "p".into() }
        );
        assert!(parse(r#"{"state":"completed"}"#).is_err());
        assert!(parse(r#"{"state":"completed","path":""}"#).is_err());
        assert_eq!(
            parse(r#"{"state":"failed","error":"x"}"#).unwrap(),
            SavepointState::Failed { error: "x".into() }
        );
        // the runtime's reason reaches status as one clean line
        assert_eq!(
            parse(r#"{"state":"failed","error":"\u001b[31mno space\n\tat x"}"#).unwrap(),
            SavepointState::Failed {
                error: "no space at x".into()
            }
        );
    }

    #[test]
    fn status_texts_are_sanitised() {
        let mut js = JobStatus::new(RunState::Failed);
        js.failure = Some(format!("boom\r\n\u{1b}[2J{}", "x".repeat(5000)));
        js.problems = vec![SourceProblem {
            uid: "src\u{202e}".into(),
            message: "lag\n\n too high\u{7}".into(),
        }];
        let js = sanitized(js);
        let failure = js.failure.unwrap();
        assert!(
            failure.starts_with("boom xxx") && failure.ends_with('…'),
            "{failure}"
        );
        assert_eq!(failure.chars().count(), QUOTE_CHARS);
        assert_eq!(js.problems[0].uid, "src");
        assert_eq!(js.problems[0].message, "lag too high");
    }

    #[test]
    fn request_body() {
        let body = serde_json::to_value(SavepointRequest {
            dir: Some("d".into()),
            stop: true,
            standby: false,
        })
        .unwrap();
        assert_eq!(body, serde_json::json!({"dir": "d", "stop": true}));
        assert_eq!(
            Endpoint::new("10.0.0.1", 8081, "t").base_url,
            "http://10.0.0.1:8081"
        );
    }
}
