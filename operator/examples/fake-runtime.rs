//! A stand-in for `streamjob-runtime` that speaks the control API contract the operator uses, so
//! the operator can be exercised on a cluster before (or without) the real engine:
//!
//!   fake-runtime coordinator env:STREAMJOB_MANIFEST --control-addr IP:PORT [--resume]
//!                [--from-savepoint PATH] [--standby]
//!   fake-runtime plan env:STREAMJOB_MANIFEST --from PATH --json     (exit 0, or 3 if FAKE_INCOMPATIBLE)
//!   fake-runtime dispose env:STREAMJOB_MANIFEST PATH...            (exit 0)
//!
//! Behaviour switches (env, e.g. through the process kubelet's per-image env):
//! FAKE_CRASH=1 exits 1 at start; FAKE_NO_CHECKPOINT=1 never completes a checkpoint;
//! FAKE_CHECKPOINT_MS (default 2000) is the checkpoint interval.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};

#[derive(Default)]
struct S {
    state: String,
    restored_from: Option<(String, String)>,
    checkpoint: u64,
    checkpoint_path: Option<String>,
    checkpoint_at: String,
    savepoints: Vec<(String, Value)>,
    last_savepoint: Option<Value>,
    ck_dir: String,
    token: String,
}

type Shared = Arc<Mutex<S>>;

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn authorized(s: &Shared, h: &HeaderMap) -> bool {
    let token = s.lock().unwrap().token.clone();
    token.is_empty()
        || h.get("authorization").and_then(|v| v.to_str().ok()) == Some(&format!("Bearer {token}"))
}

async fn status(State(s): State<Shared>, h: HeaderMap) -> impl IntoResponse {
    if !authorized(&s, &h) {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": "unauthorized"})),
        );
    }
    let g = s.lock().unwrap();
    let ck = g.checkpoint_path.as_ref().map(
        |p| json!({"id": g.checkpoint, "path": p, "completedAt": g.checkpoint_at, "durationMs": 5}),
    );
    (
        StatusCode::OK,
        Json(json!({
            "state": g.state,
            "restoredFrom": g.restored_from.as_ref().map(|(k, p)| json!({"kind": k, "path": p})),
            "latestCheckpoint": ck,
            "lastSavepoint": g.last_savepoint,
            "recordsIn": g.checkpoint * 100, "recordsOut": g.checkpoint * 100,
            "recordsInPerSecond": 50.0, "restarts": 0, "failure": null
        })),
    )
}

async fn trigger(
    State(s): State<Shared>,
    h: HeaderMap,
    Json(body): Json<Value>,
) -> impl IntoResponse {
    if !authorized(&s, &h) {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": "unauthorized"})),
        );
    }
    let stop = body["stop"].as_bool().unwrap_or(false);
    let standby = body["standby"].as_bool().unwrap_or(false);
    let dir = body["dir"].as_str().map(String::from);
    let mut g = s.lock().unwrap();
    if g.state != "running" {
        return (
            StatusCode::CONFLICT,
            Json(json!({"error": format!("job is {}", g.state)})),
        );
    }
    let id = format!("{}", g.savepoints.len() + 1);
    let path = format!(
        "{}/savepoint-{}-{}",
        dir.unwrap_or_else(|| format!("{}/savepoints", g.ck_dir)),
        std::process::id(),
        id
    );
    g.savepoints.push((id.clone(), json!({"state": "pending"})));
    if stop {
        g.state = "stopping".into();
    }
    let s2 = s.clone();
    let id2 = id.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut g = s2.lock().unwrap();
        let done = json!({"state": "completed", "path": path});
        if let Some(e) = g.savepoints.iter_mut().find(|(i, _)| *i == id2) {
            e.1 = done;
        }
        g.last_savepoint =
            Some(json!({"id": id2, "path": path, "completedAt": now(), "durationMs": 500}));
        if stop {
            g.state = if standby {
                "standby".into()
            } else {
                "finished".into()
            };
            if !standby {
                let msg = json!({ "savepoint": path }).to_string();
                println!("{msg}");
                // Keep answering a little so the operator can read the result, then exit 0.
                tokio::spawn(async {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    std::process::exit(0);
                });
            }
        }
    });
    (StatusCode::ACCEPTED, Json(json!({ "id": id })))
}

async fn savepoint(
    State(s): State<Shared>,
    h: HeaderMap,
    Path(id): Path<String>,
) -> impl IntoResponse {
    if !authorized(&s, &h) {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": "unauthorized"})),
        );
    }
    let g = s.lock().unwrap();
    match g.savepoints.iter().find(|(i, _)| *i == id) {
        Some((_, v)) => (StatusCode::OK, Json(v.clone())),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({"error": "no such savepoint"})),
        ),
    }
}

async fn start(
    State(s): State<Shared>,
    h: HeaderMap,
    Json(body): Json<Value>,
) -> impl IntoResponse {
    if !authorized(&s, &h) {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": "unauthorized"})),
        );
    }
    let mut g = s.lock().unwrap();
    if g.state != "standby" && g.state != "created" {
        return (
            StatusCode::CONFLICT,
            Json(json!({"error": format!("job is {}", g.state)})),
        );
    }
    g.restored_from = body["fromSavepoint"]
        .as_str()
        .map(|p| ("savepoint".to_string(), p.to_string()));
    g.checkpoint_path = g.restored_from.as_ref().map(|(_, p)| p.clone());
    g.state = "running".into();
    (StatusCode::OK, Json(json!({"state": "running"})))
}

fn arg_after(args: &[String], flag: &str) -> Option<String> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let manifest = std::env::var("STREAMJOB_MANIFEST").unwrap_or_default();
    let ck_dir = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("dir: "))
        .unwrap_or("/tmp/ck")
        .trim_matches('"')
        .to_string();
    match args.first().map(String::as_str) {
        Some("plan") => {
            if std::env::var("FAKE_INCOMPATIBLE").is_ok() {
                println!(
                    "{}",
                    json!({"compatible": false, "operators": [{"uid": "agg", "status": "missing", "reason": "state of uid agg has no operator in the new pipeline"}]})
                );
                std::process::exit(3);
            }
            println!("{}", json!({"compatible": true, "operators": []}));
            return;
        }
        Some("dispose") => {
            println!("disposed {:?}", &args[2..]);
            return;
        }
        Some("coordinator") => {}
        other => {
            eprintln!("fake-runtime: unknown command {other:?}");
            std::process::exit(2);
        }
    }
    if std::env::var("FAKE_CRASH").is_ok() {
        eprintln!("fake-runtime: crashing as asked");
        std::process::exit(1);
    }
    let addr = arg_after(&args, "--control-addr").unwrap_or_else(|| "127.0.0.1:8081".into());
    let from = arg_after(&args, "--from-savepoint");
    let standby = args.iter().any(|a| a == "--standby");
    let st = S {
        state: if standby {
            "standby".into()
        } else {
            "running".into()
        },
        restored_from: from.clone().map(|p| ("savepoint".into(), p)),
        checkpoint_path: from,
        ck_dir: ck_dir.clone(),
        token: std::env::var("STREAMJOB_CONTROL_TOKEN").unwrap_or_default(),
        ..Default::default()
    };
    let shared: Shared = Arc::new(Mutex::new(st));
    let every = std::env::var("FAKE_CHECKPOINT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    if std::env::var("FAKE_NO_CHECKPOINT").is_err() {
        let s = shared.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(every)).await;
                let mut g = s.lock().unwrap();
                if g.state == "running" {
                    g.checkpoint += 1;
                    g.checkpoint_path = Some(format!(
                        "{}/chk-{}-{}",
                        g.ck_dir,
                        std::process::id(),
                        g.checkpoint
                    ));
                }
            }
        });
    }
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/v1/status", get(status))
        .route("/v1/savepoints", post(trigger))
        .route("/v1/savepoints/{id}", get(savepoint))
        .route("/v1/start", post(start))
        .with_state(shared);
    let listener = tokio::net::TcpListener::bind(&addr).await.unwrap();
    eprintln!("fake-runtime: serving on {addr}");
    axum::serve(listener, app).await.unwrap();
}
