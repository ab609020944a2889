//! The control API's calls besides status: savepoints, start, cancel.
//!
//! | method | path | body → answer |
//! |---|---|---|
//! | POST | `/v1/savepoints` | [`SavepointRequest`] → 202 [`Accepted`] (409 unless a job runs) |
//! | GET | `/v1/savepoints/{id}` | → [`SavepointProgress`] |
//! | POST | `/v1/start` | [`StartRequest`] → 202 `{"state": "restoring"}` (409 unless in standby) |
//! | POST | `/v1/cancel` | → 202 `{"state": "cancelled"}`: stop now, no checkpoint, no commit |

use serde::{Deserialize, Serialize};

/// Body of `POST /v1/savepoints`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SavepointRequest {
    /// Where to write it (one of the job's stores); the job's `savepoints.dir` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
    /// Stop with the savepoint: nothing is emitted after it.
    #[serde(default)]
    pub stop: bool,
    /// With `stop`: keep the process up afterwards, waiting for `POST /v1/start` (Shadow
    /// upgrades).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub standby: bool,
}

/// The answer to `POST /v1/savepoints`: the request id to poll.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    pub id: String,
}

/// `GET /v1/savepoints/{id}`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum SavepointProgress {
    Pending,
    Completed {
        path: String,
    },
    Failed {
        #[serde(default = "no_reason")]
        error: String,
    },
}

fn no_reason() -> String {
    "no reason given".into()
}

/// Body of `POST /v1/start`: a standby job restores `from_savepoint` (or its own latest state)
/// and runs under `epoch`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct StartRequest {
    #[serde(default)]
    pub from_savepoint: Option<String>,
    /// The new run's epoch: runs with smaller epochs are fenced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn savepoint_progress_on_the_wire() {
        let done = SavepointProgress::Completed {
            path: "s3://b/sp".into(),
        };
        let json = serde_json::to_string(&done).unwrap();
        assert_eq!(json, r#"{"state":"completed","path":"s3://b/sp"}"#);
        assert_eq!(
            serde_json::from_str::<SavepointProgress>(&json).unwrap(),
            done
        );
        assert_eq!(
            serde_json::from_str::<SavepointProgress>(r#"{"state":"failed"}"#).unwrap(),
            SavepointProgress::Failed {
                error: "no reason given".into()
            }
        );
        assert!(serde_json::from_str::<SavepointProgress>(r#"{"state":"completed"}"#).is_err());
        assert!(serde_json::from_str::<SavepointProgress>(r#"{"state":"weird"}"#).is_err());
    }

    #[test]
    fn requests_leave_out_what_is_not_set() {
        let r = SavepointRequest {
            dir: None,
            stop: true,
            standby: false,
        };
        assert_eq!(serde_json::to_string(&r).unwrap(), r#"{"stop":true}"#);
        let s: StartRequest = serde_json::from_str(r#"{"fromSavepoint":null}"#).unwrap();
        assert_eq!(s, StartRequest::default());
    }
}
