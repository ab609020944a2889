//! `window-totals`: for every key and tumbling event-time window, the number of records and the
//! sum of their `value`s — written with the job SDK (keyed map state and event-time timers),
//! the engine doing snapshots, restores and rescaling.
//!
//! Manifest step:
//! ```yaml
//! - uid: per-key                # the state is matched by this uid across upgrades
//!   custom:
//!     name: window-totals
//!     stateful: true
//!     config: {windowSize: 10s, keyColumn: key}
//! ```
//! Input: columns `key` (string, or the column `keyColumn` names) and `value` (integer), event
//! time from the source. Output: `key`, `window_start` (UTC timestamp), `count`, `sum_value` —
//! the same records as the built-in `window: {tumbling: ...}` with `aggregate: {count: true,
//! sum: [value]}`, so swapping one for the other is easy to check.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use streamjob_runtime::registry::Registry;
use streamjob_runtime::sdk::{Context, KeyedFunction, MapState, Setup, Timer};
use streamjob_runtime::{Error, Result};

/// The name the manifest refers to (`custom.name`).
pub const NAME: &str = "window-totals";

/// What the function reads of each input record (other columns are not decoded).
#[derive(Deserialize, Serialize, Debug, Clone)]
pub struct Reading {
    pub value: i64,
}

/// The state of one open window. Its shape is recorded in savepoints: changing a field's type
/// makes the upgrade pre-check refuse the new image (see `examples/upgrade_incompatible.rs`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Totals {
    pub count: i64,
    pub sum: i64,
}

/// One closed window.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct WindowTotal {
    pub key: String,
    /// Milliseconds since the epoch; written as a UTC timestamp column.
    pub window_start: i64,
    pub count: i64,
    pub sum_value: i64,
}

/// The keyed function: one instance per subtask, its state managed by the engine.
pub struct WindowTotals {
    /// Window size in ms.
    pub size: i64,
    /// Open windows of the current key, by window start.
    pub windows: MapState<i64, Totals>,
}

impl WindowTotals {
    /// The factory: reads the config, declares key, state and timers.
    pub fn setup(setup: &mut Setup<'_>) -> Result<Self> {
        let size = setup
            .config_duration("windowSize")?
            .unwrap_or(Duration::from_secs(10));
        let size = i64::try_from(size.as_millis())
            .ok()
            .filter(|ms| *ms > 0)
            .ok_or_else(|| {
                Error::plan(setup.uid(), "custom.config.windowSize must be at least 1ms")
            })?;
        let key = setup.config("keyColumn").unwrap_or("key").to_string();
        setup.key_by(&[&key]);
        setup.timers();
        setup.timestamp_column("window_start");
        Ok(Self {
            size,
            windows: setup.map_state("windows")?,
        })
    }

    /// The window `timestamp` falls in: its start and its last millisecond.
    pub fn window_of(&self, timestamp: i64) -> (i64, i64) {
        let start = timestamp - timestamp.rem_euclid(self.size);
        (start, start + self.size - 1)
    }
}

impl KeyedFunction for WindowTotals {
    type In = Reading;
    type Out = WindowTotal;

    fn process(&mut self, reading: Reading, cx: &mut Context<'_, WindowTotal>) -> Result<()> {
        let (start, end) = self.window_of(cx.timestamp());
        if let Some(watermark) = cx.current_watermark().filter(|wm| end <= *wm) {
            // its window was emitted already: the step's onBadRecord policy decides
            cx.reject(format!(
                "late record: its window [{start}, {end}] closed at watermark {watermark}"
            ));
            return Ok(());
        }
        let mut totals = self.windows.get(cx, &start)?.cloned().unwrap_or_default();
        totals.count += 1;
        totals.sum += reading.value;
        self.windows.put(cx, start, totals)?;
        // fires once the watermark passes the window (registering it again is a no-op)
        cx.register_event_time_timer(end)
    }

    fn on_timer(&mut self, timer: Timer, cx: &mut Context<'_, WindowTotal>) -> Result<()> {
        let start = timer.timestamp + 1 - self.size;
        if let Some(totals) = self.windows.get(cx, &start)?.cloned() {
            self.windows.remove(cx, &start)?;
            cx.emit(WindowTotal {
                key: cx.key_as()?,
                window_start: start,
                count: totals.count,
                sum_value: totals.sum,
            });
        }
        Ok(())
    }
}

/// Adds this crate's operators to `registry`.
pub fn register(registry: &mut Registry) {
    registry.register_keyed(NAME, WindowTotals::setup);
}
