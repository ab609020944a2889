//! Revision 2 of the template job: a compatible upgrade. The logic changed — every window also
//! gets its average value and the revision that closed it — and the state did not (same name,
//! same `Totals` type), so an image bump from revision 1 restores revision 1's savepoint.
//!
//! `JOB_TEMPLATE_FAIL_AFTER_RECORDS=<n>` makes this build fail after processing `n` records in a
//! process: the end-to-end tests use it to stand for a bug that shows only in production (a new
//! version that crashes after it has written output), which the operator must roll back.
//!
//! `JOB_TEMPLATE_ALLOCATE_AFTER_RECORDS=<n>` makes it allocate memory after `n` records until the
//! container's memory limit kills it (OOMKilled), once per pod: a marker in `/tmp` (the pod's
//! emptyDir, which outlives the container) keeps the restarted container from doing it again.
//! The tests use it for a memory spike the job must survive exactly once.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use streamjob_job_template::{NAME, Reading, WindowTotals};
use streamjob_runtime::registry::Registry;
use streamjob_runtime::sdk::{Context, KeyedFunction, Setup, Timer};
use streamjob_runtime::{Error, Result};

/// Revision 2's output: revision 1's columns and two new ones.
#[derive(Serialize, Deserialize, Debug)]
struct WindowTotalV2 {
    key: String,
    window_start: i64,
    count: i64,
    sum_value: i64,
    avg_value: f64,
    revision: i64,
}

struct WindowTotalsV2 {
    inner: WindowTotals,
    fail_after: Option<u64>,
    allocate_after: Option<u64>,
}

/// Where the memory spike leaves its mark (see the module's documentation).
const SPIKE_MARKER: &str = "/tmp/job-template-memory-spike";
/// Past this, no memory limit is enforced: fail loudly instead of eating the node.
const SPIKE_CAP_BYTES: usize = 8 << 30;

/// Allocates and touches memory in 64 MiB blocks until the kernel kills the process; an error
/// if `SPIKE_CAP_BYTES` is reached first.
fn memory_spike() -> Result<()> {
    std::fs::write(SPIKE_MARKER, b"")
        .map_err(|e| Error::Other(format!("write {SPIKE_MARKER}: {e}")))?;
    let mut held: Vec<Vec<u8>> = Vec::new();
    while held.len() * (64 << 20) < SPIKE_CAP_BYTES {
        held.push(vec![1u8; 64 << 20]);
        std::hint::black_box(&held);
    }
    Err(Error::Other(format!(
        "allocated {} GiB and was not killed: no memory limit (JOB_TEMPLATE_ALLOCATE_AFTER_RECORDS)",
        SPIKE_CAP_BYTES >> 30
    )))
}

/// Records processed by this process (all subtasks).
static PROCESSED: AtomicU64 = AtomicU64::new(0);

impl KeyedFunction for WindowTotalsV2 {
    type In = Reading;
    type Out = WindowTotalV2;

    fn process(&mut self, reading: Reading, cx: &mut Context<'_, WindowTotalV2>) -> Result<()> {
        let n = PROCESSED.fetch_add(1, Ordering::Relaxed) + 1;
        if self.fail_after.is_some_and(|limit| n > limit) {
            return Err(Error::Other(format!(
                "revision 2 fails after {n} records (JOB_TEMPLATE_FAIL_AFTER_RECORDS)"
            )));
        }
        if self.allocate_after.is_some_and(|limit| n > limit)
            && !std::path::Path::new(SPIKE_MARKER).exists()
        {
            memory_spike()?;
        }
        let (start, end) = self.inner.window_of(cx.timestamp());
        if let Some(watermark) = cx.current_watermark().filter(|wm| end <= *wm) {
            cx.reject(format!(
                "late record: its window [{start}, {end}] closed at watermark {watermark}"
            ));
            return Ok(());
        }
        let windows = &self.inner.windows;
        let mut totals = windows.get(cx, &start)?.cloned().unwrap_or_default();
        totals.count += 1;
        totals.sum += reading.value;
        windows.put(cx, start, totals)?;
        cx.register_event_time_timer(end)
    }

    fn on_timer(&mut self, timer: Timer, cx: &mut Context<'_, WindowTotalV2>) -> Result<()> {
        let start = timer.timestamp + 1 - self.inner.size;
        if let Some(totals) = self.inner.windows.get(cx, &start)?.cloned() {
            self.inner.windows.remove(cx, &start)?;
            cx.emit(WindowTotalV2 {
                key: cx.key_as()?,
                window_start: start,
                count: totals.count,
                sum_value: totals.sum,
                avg_value: totals.sum as f64 / totals.count as f64,
                revision: 2,
            });
        }
        Ok(())
    }
}

/// A record count from the environment variable `name`, if set.
fn records_from_env(name: &str) -> Result<Option<u64>> {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .map(Some)
            .map_err(|e| Error::Other(format!("{name}={v:?}: {e}"))),
        Err(_) => Ok(None),
    }
}

fn setup(setup: &mut Setup<'_>) -> Result<WindowTotalsV2> {
    Ok(WindowTotalsV2 {
        inner: WindowTotals::setup(setup)?,
        fail_after: records_from_env("JOB_TEMPLATE_FAIL_AFTER_RECORDS")?,
        allocate_after: records_from_env("JOB_TEMPLATE_ALLOCATE_AFTER_RECORDS")?,
    })
}

fn main() -> std::process::ExitCode {
    let mut registry = Registry::with_builtins();
    registry.register_keyed(NAME, setup);
    streamjob_runtime::cli::main_with_registry(registry)
}
