//! Prometheus metrics (text exposition format) and the `/metrics`, `/healthz`, `/readyz` server.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::{Error, Result};

const BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

#[derive(Default, Clone, Debug)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, v: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS.len()];
        }
        for (i, b) in BUCKETS.iter().enumerate() {
            if v <= *b {
                self.counts[i] += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }
}

#[derive(Default, Debug)]
struct Inner {
    reconciles: u64,
    errors: BTreeMap<String, u64>,
    reconcile_seconds: Histogram,
    phase_seconds: BTreeMap<String, f64>,
    savepoint_seconds: BTreeMap<String, Histogram>,
    upgrades: BTreeMap<String, u64>,
    events: BTreeMap<String, u64>,
    /// Per job: current phase and when it was last seen, for time-per-phase.
    jobs: BTreeMap<String, (String, Instant)>,
}

/// The operator's metrics. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    inner: Arc<Mutex<Inner>>,
    ready: Arc<AtomicBool>,
    leader: Arc<AtomicBool>,
}

impl Metrics {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn reconciled(&self, took: Duration) {
        let mut m = self.lock();
        m.reconciles += 1;
        m.reconcile_seconds.observe(took.as_secs_f64());
    }

    pub fn error(&self, kind: &str) {
        *self.lock().errors.entry(kind.to_string()).or_default() += 1;
    }

    /// Records that `job` is in `phase` now; time since the previous call goes to its old phase.
    pub fn phase(&self, job: &str, phase: &str) {
        let mut m = self.lock();
        let now = Instant::now();
        if let Some((old, since)) = m.jobs.insert(job.to_string(), (phase.to_string(), now)) {
            *m.phase_seconds.entry(old).or_default() += now.duration_since(since).as_secs_f64();
        }
    }

    pub fn forget(&self, job: &str) {
        self.lock().jobs.remove(job);
    }

    pub fn savepoint(&self, reason: &str, seconds: f64) {
        self.lock()
            .savepoint_seconds
            .entry(reason.to_string())
            .or_default()
            .observe(seconds);
    }

    pub fn upgrade(&self, outcome: &str) {
        *self.lock().upgrades.entry(outcome.to_string()).or_default() += 1;
    }

    pub fn event(&self, reason: &str) {
        *self.lock().events.entry(reason.to_string()).or_default() += 1;
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.store(leader, Ordering::SeqCst);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// Prometheus text format.
    pub fn render(&self) -> String {
        let m = self.lock();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP streamjob_reconciles_total Reconciliations run.\n# TYPE streamjob_reconciles_total counter\nstreamjob_reconciles_total {}",
            m.reconciles
        );
        let _ = writeln!(
            out,
            "# HELP streamjob_reconcile_errors_total Reconciliations that failed, by error kind.\n# TYPE streamjob_reconcile_errors_total counter"
        );
        for (k, v) in &m.errors {
            let _ = writeln!(out, "streamjob_reconcile_errors_total{{kind=\"{k}\"}} {v}");
        }
        let _ = writeln!(
            out,
            "# HELP streamjob_reconcile_duration_seconds Time per reconciliation.\n# TYPE streamjob_reconcile_duration_seconds histogram"
        );
        write_hist(
            &mut out,
            "streamjob_reconcile_duration_seconds",
            "",
            &m.reconcile_seconds,
        );
        let _ = writeln!(
            out,
            "# HELP streamjob_phase_seconds_total Time StreamJobs spent in each phase.\n# TYPE streamjob_phase_seconds_total counter"
        );
        for (k, v) in &m.phase_seconds {
            let _ = writeln!(out, "streamjob_phase_seconds_total{{phase=\"{k}\"}} {v}");
        }
        let mut per_phase: BTreeMap<&str, u64> = BTreeMap::new();
        for (phase, _) in m.jobs.values() {
            *per_phase.entry(phase.as_str()).or_default() += 1;
        }
        let _ = writeln!(
            out,
            "# HELP streamjob_jobs StreamJobs by phase.\n# TYPE streamjob_jobs gauge"
        );
        for (k, v) in per_phase {
            let _ = writeln!(out, "streamjob_jobs{{phase=\"{k}\"}} {v}");
        }
        let _ = writeln!(
            out,
            "# HELP streamjob_savepoint_duration_seconds Time from savepoint request to completion, by reason.\n# TYPE streamjob_savepoint_duration_seconds histogram"
        );
        for (reason, h) in &m.savepoint_seconds {
            write_hist(
                &mut out,
                "streamjob_savepoint_duration_seconds",
                &format!("reason=\"{reason}\""),
                h,
            );
        }
        let _ = writeln!(
            out,
            "# HELP streamjob_upgrades_total Upgrades by outcome.\n# TYPE streamjob_upgrades_total counter"
        );
        for (k, v) in &m.upgrades {
            let _ = writeln!(out, "streamjob_upgrades_total{{outcome=\"{k}\"}} {v}");
        }
        let _ = writeln!(
            out,
            "# HELP streamjob_events_total Events recorded, by reason.\n# TYPE streamjob_events_total counter"
        );
        for (k, v) in &m.events {
            let _ = writeln!(out, "streamjob_events_total{{reason=\"{k}\"}} {v}");
        }
        let _ = writeln!(
            out,
            "# HELP streamjob_leader Whether this replica leads.\n# TYPE streamjob_leader gauge\nstreamjob_leader {}",
            u8::from(self.leader.load(Ordering::SeqCst))
        );
        out
    }
}

fn write_hist(out: &mut String, name: &str, labels: &str, h: &Histogram) {
    let sep = if labels.is_empty() { "" } else { "," };
    for (i, b) in BUCKETS.iter().enumerate() {
        let c = h.counts.get(i).copied().unwrap_or(0);
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {c}");
    }
    let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}", h.count);
    let braces = if labels.is_empty() {
        String::new()
    } else {
        format!("{{{labels}}}")
    };
    let _ = writeln!(out, "{name}_sum{braces} {}", h.sum);
    let _ = writeln!(out, "{name}_count{braces} {}", h.count);
}

async fn metrics(State(m): State<Metrics>) -> impl IntoResponse {
    (
        [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
        m.render(),
    )
}

async fn readyz(State(m): State<Metrics>) -> impl IntoResponse {
    if m.is_ready() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

/// The router serving `/metrics`, `/healthz`, `/readyz`.
pub fn router(m: Metrics) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(m)
}

/// Serves the router on `addr` until `shutdown` resolves.
pub async fn serve(
    addr: std::net::SocketAddr,
    m: Metrics,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::Server(format!("bind {addr}: {e}")))?;
    axum::serve(listener, router(m))
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|e| Error::Server(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::default();
        m.reconciled(Duration::from_millis(30));
        m.error("kube");
        m.phase("ns/a", "Running");
        m.phase("ns/a", "Upgrading");
        m.savepoint("upgrade", 3.0);
        m.upgrade("promoted");
        m.event("Promoted");
        let text = m.render();
        for needle in [
            "streamjob_reconciles_total 1",
            "streamjob_reconcile_errors_total{kind=\"kube\"} 1",
            "streamjob_reconcile_duration_seconds_bucket{le=\"0.05\"} 1",
            "streamjob_reconcile_duration_seconds_count 1",
            "streamjob_phase_seconds_total{phase=\"Running\"}",
            "streamjob_jobs{phase=\"Upgrading\"} 1",
            "streamjob_savepoint_duration_seconds_bucket{reason=\"upgrade\",le=\"5\"} 1",
            "streamjob_savepoint_duration_seconds_count{reason=\"upgrade\"} 1",
            "streamjob_upgrades_total{outcome=\"promoted\"} 1",
            "streamjob_leader 0",
        ] {
            assert!(text.contains(needle), "{needle} in\n{text}");
        }
    }
}
