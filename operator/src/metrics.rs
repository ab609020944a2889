//! The operator's Prometheus metrics (OpenMetrics text, by the `prometheus-client` crate) and the
//! `/metrics`, `/healthz`, `/readyz` server.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::{Error, Result};

/// The content type of the OpenMetrics text format `prometheus-client` writes.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

const BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

fn histogram() -> Histogram {
    Histogram::new(BUCKETS.iter().copied())
}

/// One label, e.g. `("phase", "Running")`.
type Label = Vec<(&'static str, String)>;

fn label(key: &'static str, value: &str) -> Label {
    vec![(key, value.to_string())]
}

/// The operator's metrics. Cheap to clone. Counter names leave out `_total`: the OpenMetrics
/// encoder adds it (`streamjob_reconciles` is scraped as `streamjob_reconciles_total`).
#[derive(Clone, Debug)]
pub struct Metrics {
    registry: Arc<Registry>,
    reconciles: Counter,
    deferred: Counter,
    errors: Family<Label, Counter>,
    reconcile_seconds: Histogram,
    phase_seconds: Family<Label, Counter<f64, AtomicU64>>,
    jobs_by_phase: Family<Label, Gauge>,
    savepoint_seconds: Family<Label, Histogram, fn() -> Histogram>,
    upgrades: Family<Label, Counter>,
    events: Family<Label, Counter>,
    leader: Gauge,
    ready: Arc<AtomicBool>,
    /// Per job: current phase and since when, for time-per-phase and jobs-by-phase.
    jobs: Arc<Mutex<BTreeMap<String, (String, Instant)>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut r = Registry::default();
        let m = Self {
            registry: Arc::default(),
            reconciles: Counter::default(),
            deferred: Counter::default(),
            errors: Family::default(),
            reconcile_seconds: histogram(),
            phase_seconds: Family::default(),
            jobs_by_phase: Family::default(),
            savepoint_seconds: Family::new_with_constructor(histogram),
            upgrades: Family::default(),
            events: Family::default(),
            leader: Gauge::default(),
            ready: Arc::default(),
            jobs: Arc::default(),
        };
        r.register(
            "streamjob_reconciles",
            "Reconciliations run",
            m.reconciles.clone(),
        );
        r.register(
            "streamjob_reconciles_deferred",
            "Reconciles put back because their namespace held its share of the reconcile slots",
            m.deferred.clone(),
        );
        r.register(
            "streamjob_reconcile_errors",
            "Reconciliations that failed, by error kind",
            m.errors.clone(),
        );
        r.register(
            "streamjob_reconcile_duration_seconds",
            "Time per reconciliation",
            m.reconcile_seconds.clone(),
        );
        r.register(
            "streamjob_phase_seconds",
            "Time StreamJobs spent in each phase",
            m.phase_seconds.clone(),
        );
        r.register(
            "streamjob_jobs",
            "StreamJobs by phase",
            m.jobs_by_phase.clone(),
        );
        r.register(
            "streamjob_savepoint_duration_seconds",
            "Time from savepoint request to completion, by reason",
            m.savepoint_seconds.clone(),
        );
        r.register(
            "streamjob_upgrades",
            "Upgrades by outcome",
            m.upgrades.clone(),
        );
        r.register(
            "streamjob_events",
            "Events recorded, by reason",
            m.events.clone(),
        );
        r.register(
            "streamjob_leader",
            "Whether this replica leads",
            m.leader.clone(),
        );
        Self {
            registry: Arc::new(r),
            ..m
        }
    }
}

impl Metrics {
    fn jobs(&self) -> MutexGuard<'_, BTreeMap<String, (String, Instant)>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn reconciled(&self, took: Duration) {
        self.reconciles.inc();
        self.reconcile_seconds.observe(took.as_secs_f64());
    }

    /// A reconcile put back for fairness (`--namespace-concurrency`).
    pub fn deferred(&self) {
        self.deferred.inc();
    }

    pub fn error(&self, kind: &str) {
        self.errors.get_or_create(&label("kind", kind)).inc();
    }

    /// Records that `job` is in `phase` now; time since the previous call goes to its old phase.
    pub fn phase(&self, job: &str, phase: &str) {
        let now = Instant::now();
        let old = self
            .jobs()
            .insert(job.to_string(), (phase.to_string(), now));
        if let Some((old, since)) = old {
            self.phase_seconds
                .get_or_create(&label("phase", &old))
                .inc_by(now.duration_since(since).as_secs_f64());
            self.jobs_by_phase
                .get_or_create(&label("phase", &old))
                .dec();
        }
        self.jobs_by_phase
            .get_or_create(&label("phase", phase))
            .inc();
    }

    pub fn forget(&self, job: &str) {
        let old = self.jobs().remove(job);
        if let Some((old, _)) = old {
            self.jobs_by_phase
                .get_or_create(&label("phase", &old))
                .dec();
        }
    }

    /// Forgets every job that `keep` refuses (a re-list found it gone).
    pub fn retain_jobs(&self, keep: impl Fn(&str) -> bool) {
        let gone: Vec<String> = self.jobs().keys().filter(|k| !keep(k)).cloned().collect();
        for job in gone {
            self.forget(&job);
        }
    }

    pub fn savepoint(&self, reason: &str, seconds: f64) {
        self.savepoint_seconds
            .get_or_create(&label("reason", reason))
            .observe(seconds);
    }

    pub fn upgrade(&self, outcome: &str) {
        self.upgrades
            .get_or_create(&label("outcome", outcome))
            .inc();
    }

    pub fn event(&self, reason: &str) {
        self.events.get_or_create(&label("reason", reason)).inc();
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// OpenMetrics text ([`OPENMETRICS`]).
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!(error = %e, "cannot encode metrics");
        }
        out
    }
}

async fn metrics(State(m): State<Metrics>) -> impl IntoResponse {
    ([("content-type", OPENMETRICS)], m.render())
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
        .map_err(|source| Error::Server { addr, source })?;
    axum::serve(listener, router(m))
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|source| Error::Server { addr, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_openmetrics_text() {
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
            "# TYPE streamjob_reconciles counter\n",
            "streamjob_reconciles_total 1\n",
            "streamjob_reconcile_errors_total{kind=\"kube\"} 1\n",
            "streamjob_reconcile_duration_seconds_bucket{le=\"0.05\"} 1\n",
            "streamjob_reconcile_duration_seconds_bucket{le=\"0.025\"} 0\n",
            "streamjob_reconcile_duration_seconds_count 1\n",
            "streamjob_phase_seconds_total{phase=\"Running\"} ",
            "streamjob_jobs{phase=\"Upgrading\"} 1\n",
            "streamjob_jobs{phase=\"Running\"} 0\n",
            "streamjob_savepoint_duration_seconds_bucket{le=\"5.0\",reason=\"upgrade\"} 1\n",
            "streamjob_savepoint_duration_seconds_bucket{le=\"2.5\",reason=\"upgrade\"} 0\n",
            "streamjob_savepoint_duration_seconds_count{reason=\"upgrade\"} 1\n",
            "streamjob_upgrades_total{outcome=\"promoted\"} 1\n",
            "streamjob_events_total{reason=\"Promoted\"} 1\n",
            "streamjob_leader 0\n",
        ] {
            assert!(text.contains(needle), "{needle} in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
        m.set_leader(true);
        m.phase("other/b", "Upgrading");
        m.retain_jobs(|k| k != "other/b");
        assert!(
            m.render()
                .contains("streamjob_jobs{phase=\"Upgrading\"} 1\n")
        );
        m.forget("ns/a");
        let text = m.render();
        assert!(text.contains("streamjob_leader 1\n"), "{text}");
        assert!(
            text.contains("streamjob_jobs{phase=\"Upgrading\"} 0\n"),
            "{text}"
        );
    }
}
