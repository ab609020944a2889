//! Counters shared between subtasks, the coordinator and the control API.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

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
#[derive(Debug, Default)]
pub struct JobMetrics {
    pub operators: Mutex<Vec<std::sync::Arc<OperatorMetrics>>>,
    pub restarts: AtomicU64,
    pub last_checkpoint_id: AtomicU64,
    /// Unix time (seconds) the latest checkpoint completed; 0 before the first.
    pub last_checkpoint_unix_seconds: AtomicU64,
    pub checkpoints_completed: AtomicU64,
    pub checkpoints_failed: AtomicU64,
    histogram: Mutex<Histogram>,
}

#[derive(Debug, Default)]
struct Histogram {
    counts: [u64; DURATION_BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl JobMetrics {
    /// Records the duration of a completed checkpoint.
    pub fn observe_checkpoint(&self, seconds: f64) {
        if let Ok(mut h) = self.histogram.lock() {
            for (i, bound) in DURATION_BUCKETS.iter().enumerate() {
                if seconds <= *bound {
                    h.counts[i] += 1;
                }
            }
            h.count += 1;
            h.sum += seconds;
        }
    }

    /// Total records read by the sources and written by the sinks.
    pub fn totals(&self) -> (u64, u64) {
        let ops = self.operators.lock().map(|o| o.clone()).unwrap_or_default();
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

    /// Prometheus text exposition. Every series carries the StreamJob's name as `streamjob`
    /// (`job` is Prometheus' own target label).
    pub fn render(&self, job: &str) -> String {
        let mut s = String::new();
        let ops = self.operators.lock().map(|o| o.clone()).unwrap_or_default();
        let counter = |s: &mut String, name: &str, help: &str| {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} counter");
        };
        counter(
            &mut s,
            "streamjob_records_in_total",
            "Records received by an operator.",
        );
        for o in &ops {
            let _ = writeln!(
                s,
                "streamjob_records_in_total{{streamjob=\"{job}\",uid=\"{}\"}} {}",
                o.uid,
                o.records_in.load(Ordering::Relaxed)
            );
        }
        counter(
            &mut s,
            "streamjob_records_out_total",
            "Records emitted by an operator.",
        );
        for o in &ops {
            let _ = writeln!(
                s,
                "streamjob_records_out_total{{streamjob=\"{job}\",uid=\"{}\"}} {}",
                o.uid,
                o.records_out.load(Ordering::Relaxed)
            );
        }
        counter(
            &mut s,
            "streamjob_bad_records_total",
            "Records an operator could not process, by onBadRecord policy.",
        );
        for o in &ops {
            for (policy, v) in [
                ("fail", &o.bad_records_failed),
                ("skip", &o.bad_records_skipped),
                ("deadLetter", &o.bad_records_dead_letter),
            ] {
                let _ = writeln!(
                    s,
                    "streamjob_bad_records_total{{streamjob=\"{job}\",uid=\"{}\",policy=\"{policy}\"}} {}",
                    o.uid,
                    v.load(Ordering::Relaxed)
                );
            }
        }
        counter(
            &mut s,
            "streamjob_late_records_dropped_total",
            "Records dropped because they arrived after their window closed.",
        );
        for o in &ops {
            let _ = writeln!(
                s,
                "streamjob_late_records_dropped_total{{streamjob=\"{job}\",uid=\"{}\"}} {}",
                o.uid,
                o.late_records_dropped.load(Ordering::Relaxed)
            );
        }
        counter(
            &mut s,
            "streamjob_sink_commit_failures_total",
            "File sink commits of a completed checkpoint's files that failed (retried; see the job's log).",
        );
        for o in &ops {
            let _ = writeln!(
                s,
                "streamjob_sink_commit_failures_total{{streamjob=\"{job}\",uid=\"{}\"}} {}",
                o.uid,
                o.commit_failures.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(
            s,
            "# HELP streamjob_kafka_consumer_lag Records between a Kafka source's position and the end of a partition.\n# TYPE streamjob_kafka_consumer_lag gauge"
        );
        for o in &ops {
            let lag = o.lag.lock().map(|l| l.clone()).unwrap_or_default();
            for (tp, v) in lag {
                let (topic, partition) = tp.rsplit_once('/').unwrap_or((tp.as_str(), ""));
                let _ = writeln!(
                    s,
                    "streamjob_kafka_consumer_lag{{streamjob=\"{job}\",uid=\"{}\",topic=\"{topic}\",partition=\"{partition}\"}} {v}",
                    o.uid
                );
            }
        }
        let _ = writeln!(
            s,
            "# HELP streamjob_source_problem 1 while a source cannot make progress (see the status' problems).\n# TYPE streamjob_source_problem gauge"
        );
        for o in &ops {
            let problem = o.problem.lock().map(|p| p.is_some()).unwrap_or(false);
            if problem || o.lag.lock().map(|l| !l.is_empty()).unwrap_or(false) {
                let _ = writeln!(
                    s,
                    "streamjob_source_problem{{streamjob=\"{job}\",uid=\"{}\"}} {}",
                    o.uid,
                    u8::from(problem)
                );
            }
        }
        counter(
            &mut s,
            "streamjob_restarts_total",
            "Job restarts after failures.",
        );
        let _ = writeln!(
            s,
            "streamjob_restarts_total{{streamjob=\"{job}\"}} {}",
            self.restarts.load(Ordering::Relaxed)
        );
        counter(
            &mut s,
            "streamjob_checkpoints_completed_total",
            "Completed checkpoints.",
        );
        let _ = writeln!(
            s,
            "streamjob_checkpoints_completed_total{{streamjob=\"{job}\"}} {}",
            self.checkpoints_completed.load(Ordering::Relaxed)
        );
        counter(
            &mut s,
            "streamjob_checkpoints_failed_total",
            "Failed or expired checkpoints.",
        );
        let _ = writeln!(
            s,
            "streamjob_checkpoints_failed_total{{streamjob=\"{job}\"}} {}",
            self.checkpoints_failed.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            s,
            "# HELP streamjob_last_checkpoint_id Id of the latest completed checkpoint.\n# TYPE streamjob_last_checkpoint_id gauge\nstreamjob_last_checkpoint_id{{streamjob=\"{job}\"}} {}",
            self.last_checkpoint_id.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            s,
            "# HELP streamjob_last_checkpoint_timestamp_seconds Unix time the latest checkpoint completed (0: none yet).\n# TYPE streamjob_last_checkpoint_timestamp_seconds gauge\nstreamjob_last_checkpoint_timestamp_seconds{{streamjob=\"{job}\"}} {}",
            self.last_checkpoint_unix_seconds.load(Ordering::Relaxed)
        );
        if let Ok(h) = self.histogram.lock() {
            let name = "streamjob_checkpoint_duration_seconds";
            let _ = writeln!(
                s,
                "# HELP {name} Time from trigger to completion of checkpoints.\n# TYPE {name} histogram"
            );
            for (i, bound) in DURATION_BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "{name}_bucket{{streamjob=\"{job}\",le=\"{bound}\"}} {}",
                    h.counts[i]
                );
            }
            let _ = writeln!(
                s,
                "{name}_bucket{{streamjob=\"{job}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(s, "{name}_sum{{streamjob=\"{job}\"}} {}", h.sum);
            let _ = writeln!(s, "{name}_count{{streamjob=\"{job}\"}} {}", h.count);
        }
        s
    }
}
