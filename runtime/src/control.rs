//! The coordinator's control API (HTTP + JSON, bearer token).
//!
//! | method | path                   | body / answer |
//! |--------|------------------------|---------------|
//! | GET    | `/healthz` (no auth)   | 200 while the job graph is running or in standby, 503 otherwise |
//! | GET    | `/v1/status`           | [`streamjob_contract::status::JobStatus`] |
//! | POST   | `/v1/savepoints`       | `{"dir"?: string, "stop": bool, "standby"?: bool}` → 202 `{"id"}` (409 unless a job runs) |
//! | GET    | `/v1/savepoints/{id}`  | `{"state": "pending"\|"completed"\|"failed", "path"?, "error"?}` |
//! | POST   | `/v1/start`            | `{"fromSavepoint"?: string\|null, "epoch"?: int}` → 202 `{"state": "restoring"}` (409 unless in standby) |
//! | POST   | `/v1/cancel`           | → 202 `{"state": "cancelled"}`: stop now, no checkpoint, no commit |
//!
//! Prometheus metrics are served apart, without the token: [`serve_metrics`] (`GET /metrics` on
//! [`streamjob_contract::process::METRICS_PORT`] in pods).
//!
//! `stop` with `standby`: after the savepoint the process stays up in state `standby` and a later
//! `POST /v1/start {"fromSavepoint": P}` runs the job again from P in the same process.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Json;
use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use streamjob_contract::requests::{Accepted, SavepointRequest, StartRequest};

use crate::coordinator::{RunState, Shared};
use crate::error::Result;

#[derive(Clone)]
struct AppState {
    shared: Arc<Shared>,
    token: Option<Arc<String>>,
    stores: Arc<JobStores>,
}

/// The stores (scheme and bucket, or host) a job's savepoints may go to and come from through
/// the control API: those of its checkpoint and savepoint directories and initial savepoint. A
/// caller with the token still cannot point the job's credentials at another bucket.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobStores(Vec<String>);

impl JobStores {
    pub fn of(spec: &streamjob_crds::v1alpha1::StreamJobSpec) -> Self {
        let mut stores: Vec<String> = [
            Some(spec.checkpoints.dir.clone()),
            Some(spec.savepoint_dir()),
        ]
        .into_iter()
        .chain([spec.initial_savepoint.clone()])
        .flatten()
        .map(|p| store_of(&p))
        .collect();
        stores.sort();
        stores.dedup();
        Self(stores)
    }

    /// `Err` with a message naming the store when `path` is on none of the job's.
    pub fn check(&self, field: &str, path: &str) -> std::result::Result<(), String> {
        let store = store_of(path);
        if self.0.contains(&store) {
            Ok(())
        } else {
            Err(format!(
                "{field} {path:?} is on {store}, not on one of the job's stores ({}): savepoints go to and come from the job's checkpoint or savepoint stores",
                self.0.join(", ")
            ))
        }
    }
}

/// `scheme://authority` of a path (`file://` for a local path).
fn store_of(path: &str) -> String {
    match path.split_once("://") {
        Some((scheme, rest)) => format!(
            "{}://{}",
            scheme.to_ascii_lowercase(),
            rest.split('/').next().unwrap_or("").to_ascii_lowercase()
        ),
        None => "file://".to_string(),
    }
}

fn bad_request(message: String) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(serde_json::json!({"error": message})),
    )
        .into_response()
}

fn conflict(message: String) -> Response {
    (
        StatusCode::CONFLICT,
        Json(serde_json::json!({"error": message})),
    )
        .into_response()
}

/// Requests the control API serves at once (authenticated or not); more get 503 at once. The
/// operator sends a handful at a time; a flood must not starve the job of memory or the operator
/// of answers.
pub const MAX_IN_FLIGHT: usize = 32;

async fn in_flight(
    State(limit): State<Arc<tokio::sync::Semaphore>>,
    req: Request,
    next: Next,
) -> Response {
    match limit.try_acquire() {
        Ok(_permit) => next.run(req).await,
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("more than {MAX_IN_FLIGHT} control requests at once; try again"),
        )
            .into_response(),
    }
}

async fn auth(State(st): State<AppState>, req: Request, next: Next) -> Response {
    if let Some(token) = &st.token {
        let ok = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|t| crate::cluster::wire::token_matches(Some(t.trim()), Some(token)));
        if !ok {
            return (
                StatusCode::UNAUTHORIZED,
                Json(serde_json::json!({"error": "missing or wrong bearer token"})),
            )
                .into_response();
        }
    }
    next.run(req).await
}

async fn healthz(State(st): State<AppState>) -> Response {
    let s = st.shared.status();
    // a standby process is ready: it waits for `POST /v1/start` (shadow upgrades wait for it)
    if matches!(s.state, RunState::Running | RunState::Standby) {
        (StatusCode::OK, "ok").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, s.state.as_str()).into_response()
    }
}

async fn status(State(st): State<AppState>) -> Response {
    Json(st.shared.status()).into_response()
}

async fn trigger(State(st): State<AppState>, body: Option<Json<SavepointRequest>>) -> Response {
    let body = body.map(|b| b.0).unwrap_or_default();
    if let Some(dir) = &body.dir
        && let Err(e) = st.stores.check("dir", dir)
    {
        return bad_request(e);
    }
    let state = st.shared.status().state;
    // nothing runs in these states: a queued request would wait for a later run
    if matches!(
        state,
        RunState::Finished | RunState::Failed | RunState::Standby
    ) || st.shared.awaiting_start.load(Ordering::SeqCst)
    {
        return conflict(format!("the job is {state}: no savepoint can be taken"));
    }
    let id = st
        .shared
        .request_savepoint(body.dir, body.stop, body.standby);
    (StatusCode::ACCEPTED, Json(Accepted { id })).into_response()
}

async fn start(State(st): State<AppState>, body: Option<Json<StartRequest>>) -> Response {
    let body = body.map(|b| b.0).unwrap_or_default();
    if !st.shared.awaiting_start.load(Ordering::SeqCst) {
        let state = st.shared.status().state;
        return conflict(format!(
            "the job is {state}, not in standby: only a coordinator in standby (--standby, or after a stop with standby) can be started"
        ));
    }
    let from = body.from_savepoint.filter(|p| !p.is_empty());
    if let Some(path) = &from
        && let Err(e) = st.stores.check("fromSavepoint", path)
    {
        return bad_request(e);
    }
    let reply = st.shared.request_start(from.clone(), body.epoch);
    match tokio::time::timeout(std::time::Duration::from_secs(10), reply).await {
        Ok(Ok(Ok(()))) => (
            StatusCode::ACCEPTED,
            Json(serde_json::json!({"state": "restoring", "fromSavepoint": from})),
        )
            .into_response(),
        Ok(Ok(Err(e))) => conflict(e),
        Ok(Err(_)) | Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"error": "the coordinator did not answer the start request"})),
        )
            .into_response(),
    }
}

/// Stops the job without committing anything more: the operator calls it before deleting a
/// version whose output must not become visible (a rollback, an aborted upgrade).
async fn cancel(State(st): State<AppState>) -> Response {
    st.shared.request_cancel();
    (
        StatusCode::ACCEPTED,
        Json(serde_json::json!({"state": "cancelled"})),
    )
        .into_response()
}

async fn savepoint(State(st): State<AppState>, Path(id): Path<String>) -> Response {
    let s = st
        .shared
        .savepoints
        .lock()
        .ok()
        .and_then(|m| m.get(&id).cloned());
    match s {
        Some(s) => Json(s).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(serde_json::json!({"error": format!("no savepoint request {id}")})),
        )
            .into_response(),
    }
}

async fn metrics(State(st): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, crate::metrics::OPENMETRICS)],
        st.shared.metrics.render(&st.shared.job_name),
    )
        .into_response()
}

/// The router (exposed for tests).
pub fn router(shared: Arc<Shared>, token: Option<String>, stores: JobStores) -> Router {
    let st = AppState {
        shared,
        token: token.map(Arc::new),
        stores: Arc::new(stores),
    };
    let api = Router::new()
        .route("/v1/status", get(status))
        .route("/v1/savepoints", post(trigger))
        .route("/v1/savepoints/{id}", get(savepoint))
        .route("/v1/start", post(start))
        .route("/v1/cancel", post(cancel))
        .layer(middleware::from_fn_with_state(st.clone(), auth))
        .layer(middleware::from_fn_with_state(
            Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
            in_flight,
        ));
    Router::new()
        .route("/healthz", get(healthz))
        .merge(api)
        .with_state(st)
}

/// Binds `GET /metrics` (Prometheus text, no token) on `addr` and serves it in the background,
/// apart from the authenticated control API; returns the bound address.
pub async fn serve_metrics(shared: Arc<Shared>, addr: SocketAddr) -> Result<SocketAddr> {
    let st = AppState {
        shared,
        token: None,
        stores: Arc::new(JobStores::default()),
    };
    let app = Router::new()
        .route("/metrics", get(metrics))
        .layer(middleware::from_fn_with_state(
            Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
            in_flight,
        ))
        .with_state(st);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "metrics endpoint stopped");
        }
    });
    tracing::info!(%bound, "metrics listening");
    Ok(bound)
}

/// Binds the API on `addr` and serves it in the background; returns the bound address.
pub async fn serve(
    shared: Arc<Shared>,
    addr: SocketAddr,
    token: Option<String>,
    stores: JobStores,
) -> Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = router(shared, token, stores);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "control API stopped");
        }
    });
    tracing::info!(%bound, "control API listening");
    Ok(bound)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Requests beyond the in-flight limit are answered 503 at once, not queued; the limit frees
    /// as requests finish.
    #[tokio::test]
    async fn requests_beyond_the_in_flight_limit_get_503() {
        let (entered_tx, mut entered) = tokio::sync::watch::channel(0usize);
        let release = Arc::new(tokio::sync::Notify::new());
        let handler = {
            let release = release.clone();
            move || {
                let release = release.clone();
                let entered_tx = entered_tx.clone();
                async move {
                    // registered before it counts as entered, so no release is missed
                    let released = release.notified();
                    tokio::pin!(released);
                    released.as_mut().enable();
                    entered_tx.send_modify(|n| *n += 1);
                    released.await;
                    "done"
                }
            }
        };
        let app = Router::new()
            .route("/slow", get(handler))
            .layer(middleware::from_fn_with_state(
                Arc::new(tokio::sync::Semaphore::new(2)),
                in_flight,
            ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/slow", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let client = reqwest::Client::new();
        let held: Vec<_> = (0..2)
            .map(|_| tokio::spawn(client.get(&url).send()))
            .collect();
        entered.wait_for(|n| *n == 2).await.unwrap();
        let third =
            tokio::time::timeout(std::time::Duration::from_secs(10), client.get(&url).send())
                .await
                .expect("the request over the limit is answered at once, not queued")
                .unwrap();
        assert_eq!(third.status(), reqwest::StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            *entered.borrow(),
            2,
            "the third request never reached the handler"
        );
        release.notify_waiters();
        for h in held {
            assert_eq!(h.await.unwrap().unwrap().status(), reqwest::StatusCode::OK);
        }
        let fourth = tokio::spawn(client.get(&url).send());
        entered.wait_for(|n| *n == 3).await.unwrap();
        release.notify_waiters();
        assert_eq!(
            fourth.await.unwrap().unwrap().status(),
            reqwest::StatusCode::OK
        );
    }

    /// A job spec with the given store lines (indented under `spec:`).
    fn spec_with(stores: &str) -> streamjob_crds::v1alpha1::StreamJobSpec {
        let yaml = format!(
            "apiVersion: streamjob.io/v1alpha1\nkind: StreamJob\nmetadata: {{name: j}}\nspec:\n  image: i\n{stores}  pipeline:\n    - {{uid: g, source: {{generator: {{}}}}}}\n    - {{uid: o, print: {{}}}}\n"
        );
        streamjob_crds::v1alpha1::StreamJob::from_yaml(&yaml)
            .unwrap()
            .spec
    }

    #[test]
    fn savepoints_stay_on_the_jobs_stores() {
        let stores = JobStores::of(&spec_with(
            "  checkpoints: {dir: s3://ck-bucket/ck/j}\n  savepoints: {dir: s3://sp-bucket/sp/j}\n  initialSavepoint: hdfs://nn:8020/old/sp-1\n",
        ));
        for ok in [
            "s3://ck-bucket/elsewhere",
            "s3://sp-bucket/sp/j/savepoint-3",
            "S3://SP-BUCKET/x",
            "hdfs://nn:8020/other",
        ] {
            assert!(stores.check("dir", ok).is_ok(), "{ok}");
        }
        for bad in [
            "s3://other-bucket/sp",
            "gs://sp-bucket/sp",
            "/tmp/sp",
            "file:///etc",
        ] {
            let e = stores.check("fromSavepoint", bad).unwrap_err();
            assert!(
                e.starts_with(&format!("fromSavepoint {bad:?} is on "))
                    && e.contains("s3://sp-bucket"),
                "{e}"
            );
        }
        let stores = JobStores::of(&spec_with("  checkpoints: {dir: /var/ck}\n"));
        assert!(stores.check("dir", "/tmp/sp").is_ok());
        assert!(stores.check("dir", "file:///tmp/sp").is_ok());
        assert!(stores.check("dir", "s3://b/sp").is_err());
    }
}
