//! Counters shared between subtasks, the coordinator and the control API, and their
//! OpenMetrics exposition (by the `prometheus-client` crate): subtasks count in plain atomics on
//! the hot path; a collector reads them at each scrape.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The content type of the OpenMetrics text format the runtime serves.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Counters of one operator (all its subtasks).
#[derive(Debug, Default)]
pub struct OperatorMetrics {
    pub uid: String,
    pub records_in: AtomicU64,
    pub records_out: AtomicU64,
    pub bad_records_skipped: AtomicU64,
    pub bad_records_dead_letter: AtomicU64,
    pub bad_records_failed: AtomicU64,
    pub late_records_dropped: AtomicU64,
    /// File sinks: commits (of a checkpoint's files) that failed.
    pub commit_failures: AtomicU64,
    /// Sources: why the source cannot make progress right now (brokers unreachable, topic
    /// missing), shown in status and metrics; `None` when it reads normally.
    pub problem: Mutex<Option<String>>,
    /// Kafka sources: records behind the end of each partition (`topic/partition` → lag).
    pub lag: Mutex<std::collections::BTreeMap<String, i64>>,
}

impl OperatorMetrics {
    /// Counters for the operator `uid`.
    pub fn new(uid: &str) -> Self {
        Self {
            uid: uid.to_string(),
            ..Default::default()
        }
    }
}

/// Upper bounds (seconds) of the checkpoint duration histogram.
pub const DURATION_BUCKETS: [f64; 10] = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0];

/// Job-level metrics.
#[derive(Debug)]
pub struct JobMetrics {
    pub operators: Mutex<Vec<Arc<OperatorMetrics>>>,
    pub restarts: AtomicU64,
    pub last_checkpoint_id: AtomicU64,
    /// Unix time (seconds) the latest checkpoint completed; 0 before the first.
    pub last_checkpoint_unix_seconds: AtomicU64,
    pub checkpoints_completed: AtomicU64,
    pub checkpoints_failed: AtomicU64,
    checkpoint_seconds: Histogram,
}

impl Default for JobMetrics {
    fn default() -> Self {
        Self {
            operators: Mutex::default(),
            restarts: AtomicU64::default(),
            last_checkpoint_id: AtomicU64::default(),
            last_checkpoint_unix_seconds: AtomicU64::default(),
            checkpoints_completed: AtomicU64::default(),
            checkpoints_failed: AtomicU64::default(),
            checkpoint_seconds: Histogram::new(DURATION_BUCKETS),
        }
    }
}

impl JobMetrics {
    /// Records the duration of a completed checkpoint.
    pub fn observe_checkpoint(&self, seconds: f64) {
        self.checkpoint_seconds.observe(seconds);
    }

    /// Total records read by the sources and written by the sinks.
    pub fn totals(&self) -> (u64, u64) {
        let ops = self.operators();
        let first = ops
            .first()
            .map(|o| o.records_out.load(Ordering::Relaxed))
            .unwrap_or(0);
        let last = ops
            .last()
            .map(|o| o.records_in.load(Ordering::Relaxed))
            .unwrap_or(0);
        (first, last)
    }

    fn operators(&self) -> Vec<Arc<OperatorMetrics>> {
        self.operators.lock().map(|o| o.clone()).unwrap_or_default()
    }

    /// OpenMetrics text ([`OPENMETRICS`]). Every series carries the StreamJob's name as
    /// `streamjob` (`job` is Prometheus' own target label).
    pub fn render(self: &Arc<Self>, job: &str) -> String {
        let mut registry = Registry::with_labels(std::iter::once((
            Cow::Borrowed("streamjob"),
            Cow::Owned(job.to_string()),
        )));
        registry.register_collector(Box::new(JobCollector(Arc::clone(self))));
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
            tracing::warn!(error = %e, "cannot encode metrics");
        }
        out
    }
}

/// Reads a job's counters at each scrape.
#[derive(Debug)]
struct JobCollector(Arc<JobMetrics>);

/// One series per operator of a counter or gauge, labelled by the operator's `uid`.
fn per_operator(
    encoder: &mut DescriptorEncoder<'_>,
    (name, help, kind): (&str, &str, MetricType),
    ops: &[Arc<OperatorMetrics>],
    value: impl Fn(&OperatorMetrics) -> Option<i64>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, kind)?;
    for o in ops {
        let Some(v) = value(o) else { continue };
        let labels = [("uid", o.uid.as_str())];
        let series = family.encode_family(&labels)?;
        match kind {
            MetricType::Counter => {
                ConstCounter::new(u64::try_from(v).unwrap_or(0)).encode(series)?
            }
            _ => ConstGauge::new(v).encode(series)?,
        }
    }
    Ok(())
}

fn load(a: &AtomicU64) -> i64 {
    i64::try_from(a.load(Ordering::Relaxed)).unwrap_or(i64::MAX)
}

impl Collector for JobCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        use MetricType::{Counter, Gauge};
        let m = &self.0;
        let ops = m.operators();
        let e = &mut encoder;
        // counter names leave out `_total`: the encoder adds it
        per_operator(
            e,
            (
                "streamjob_records_in",
                "Records received by an operator",
                Counter,
            ),
            &ops,
            |o| Some(load(&o.records_in)),
        )?;
        per_operator(
            e,
            (
                "streamjob_records_out",
                "Records emitted by an operator",
                Counter,
            ),
            &ops,
            |o| Some(load(&o.records_out)),
        )?;
        {
            let mut family = e.encode_descriptor(
                "streamjob_bad_records",
                "Records an operator could not process, by onBadRecord policy",
                None,
                Counter,
            )?;
            for o in &ops {
                for (policy, v) in [
                    ("fail", &o.bad_records_failed),
                    ("skip", &o.bad_records_skipped),
                    ("deadLetter", &o.bad_records_dead_letter),
                ] {
                    let labels = [("uid", o.uid.as_str()), ("policy", policy)];
                    ConstCounter::new(v.load(Ordering::Relaxed))
                        .encode(family.encode_family(&labels)?)?;
                }
            }
        }
        per_operator(
            e,
            (
                "streamjob_late_records_dropped",
                "Records dropped because they arrived after their window closed",
                Counter,
            ),
            &ops,
            |o| Some(load(&o.late_records_dropped)),
        )?;
        per_operator(
            e,
            (
                "streamjob_sink_commit_failures",
                "File sink commits of a completed checkpoint's files that failed (retried; see the job's log)",
                Counter,
            ),
            &ops,
            |o| Some(load(&o.commit_failures)),
        )?;
        {
            let mut family = e.encode_descriptor(
                "streamjob_kafka_consumer_lag",
                "Records between a Kafka source's position and the end of a partition",
                None,
                Gauge,
            )?;
            for o in &ops {
                let lag = o.lag.lock().map(|l| l.clone()).unwrap_or_default();
                for (tp, v) in lag {
                    let (topic, partition) = tp.rsplit_once('/').unwrap_or((tp.as_str(), ""));
                    let labels = [
                        ("uid", o.uid.as_str()),
                        ("topic", topic),
                        ("partition", partition),
                    ];
                    ConstGauge::new(v).encode(family.encode_family(&labels)?)?;
                }
            }
        }
        // only for sources: a problem, or a lag (a Kafka source reading normally)
        per_operator(
            e,
            (
                "streamjob_source_problem",
                "1 while a source cannot make progress (see the status' problems)",
                Gauge,
            ),
            &ops,
            |o| {
                let problem = o.problem.lock().map(|p| p.is_some()).unwrap_or(false);
                let lagging = o.lag.lock().map(|l| !l.is_empty()).unwrap_or(false);
                (problem || lagging).then_some(i64::from(problem))
            },
        )?;
        for (name, help, v) in [
            (
                "streamjob_restarts",
                "Job restarts after failures",
                &m.restarts,
            ),
            (
                "streamjob_checkpoints_completed",
                "Completed checkpoints",
                &m.checkpoints_completed,
            ),
            (
                "streamjob_checkpoints_failed",
                "Failed or expired checkpoints",
                &m.checkpoints_failed,
            ),
        ] {
            let counter = ConstCounter::new(v.load(Ordering::Relaxed));
            counter.encode(e.encode_descriptor(name, help, None, counter.metric_type())?)?;
        }
        for (name, help, v) in [
            (
                "streamjob_last_checkpoint_id",
                "Id of the latest completed checkpoint",
                &m.last_checkpoint_id,
            ),
            (
                "streamjob_last_checkpoint_timestamp_seconds",
                "Unix time the latest checkpoint completed (0: none yet)",
                &m.last_checkpoint_unix_seconds,
            ),
        ] {
            let gauge = ConstGauge::new(load(v));
            gauge.encode(e.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        let h = &m.checkpoint_seconds;
        h.encode(e.encode_descriptor(
            "streamjob_checkpoint_duration_seconds",
            "Time from trigger to completion of checkpoints",
            None,
            h.metric_type(),
        )?)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn renders_openmetrics_with_the_streamjob_label() {
        let m = Arc::new(JobMetrics::default());
        let op = Arc::new(OperatorMetrics::new("src"));
        op.records_out.store(7, Ordering::Relaxed);
        op.bad_records_skipped.store(2, Ordering::Relaxed);
        op.lag.lock().unwrap().insert("clicks/3".into(), 11);
        *m.operators.lock().unwrap() = vec![op, Arc::new(OperatorMetrics::new("sink"))];
        m.restarts.store(1, Ordering::Relaxed);
        m.last_checkpoint_unix_seconds
            .store(1_733_000_000, Ordering::Relaxed);
        m.observe_checkpoint(0.3);
        let text = m.render("clicks");
        for needle in [
            "# TYPE streamjob_records_out counter\n",
            "streamjob_records_out_total{streamjob=\"clicks\",uid=\"src\"} 7\n",
            "streamjob_records_in_total{streamjob=\"clicks\",uid=\"sink\"} 0\n",
            "streamjob_bad_records_total{streamjob=\"clicks\",uid=\"src\",policy=\"skip\"} 2\n",
            "streamjob_kafka_consumer_lag{streamjob=\"clicks\",uid=\"src\",topic=\"clicks\",partition=\"3\"} 11\n",
            "streamjob_source_problem{streamjob=\"clicks\",uid=\"src\"} 0\n",
            "streamjob_restarts_total{streamjob=\"clicks\"} 1\n",
            "streamjob_last_checkpoint_timestamp_seconds{streamjob=\"clicks\"} 1733000000\n",
            "streamjob_checkpoint_duration_seconds_bucket{streamjob=\"clicks\",le=\"0.25\"} 0\n",
            "streamjob_checkpoint_duration_seconds_bucket{streamjob=\"clicks\",le=\"0.5\"} 1\n",
            "streamjob_checkpoint_duration_seconds_count{streamjob=\"clicks\"} 1\n",
        ] {
            assert!(text.contains(needle), "{needle} in\n{text}");
        }
        // the sink has no lag and no problem: no source series
        assert!(
            !text.contains("streamjob_source_problem{streamjob=\"clicks\",uid=\"sink\"}"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
