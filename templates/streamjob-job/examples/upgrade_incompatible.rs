//! Revision 3 of the template job: an incompatible upgrade. The window state keeps its name but
//! its sum became a float, so revision 2's savepoint cannot be read: the operator's pre-check
//! refuses the image bump before the running job is touched (`UpgradeBlocked`, naming the step
//! and the state `windows`). To make such a change, declare the new state under a new name (it
//! starts empty) or give the step a new uid with `allowNonRestoredState`.

use serde::{Deserialize, Serialize};
use streamjob_job_template::{NAME, Reading, WindowTotal};
use streamjob_runtime::registry::Registry;
use streamjob_runtime::sdk::{Context, KeyedFunction, MapState, Setup, Timer};
use streamjob_runtime::{Error, Result};

/// `sum` changed from i64 to f64: a new state type.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
struct Totals {
    count: i64,
    sum: f64,
}

struct WindowTotalsV3 {
    size: i64,
    windows: MapState<i64, Totals>,
}

impl KeyedFunction for WindowTotalsV3 {
    type In = Reading;
    type Out = WindowTotal;

    fn process(&mut self, reading: Reading, cx: &mut Context<'_, WindowTotal>) -> Result<()> {
        let ts = cx.timestamp();
        let start = ts - ts.rem_euclid(self.size);
        let mut totals = self.windows.get(cx, &start)?.cloned().unwrap_or_default();
        totals.count += 1;
        totals.sum += reading.value as f64;
        self.windows.put(cx, start, totals)?;
        cx.register_event_time_timer(start + self.size - 1)
    }

    fn on_timer(&mut self, timer: Timer, cx: &mut Context<'_, WindowTotal>) -> Result<()> {
        let start = timer.timestamp + 1 - self.size;
        if let Some(totals) = self.windows.get(cx, &start)?.cloned() {
            self.windows.remove(cx, &start)?;
            cx.emit(WindowTotal {
                key: cx.key_as()?,
                window_start: start,
                count: totals.count,
                sum_value: totals.sum as i64,
            });
        }
        Ok(())
    }
}

fn setup(setup: &mut Setup<'_>) -> Result<WindowTotalsV3> {
    let size = setup
        .config_duration("windowSize")?
        .map_or(10_000, |d| d.as_millis() as i64);
    if size <= 0 {
        return Err(Error::plan(
            setup.uid(),
            "custom.config.windowSize must be at least 1ms",
        ));
    }
    let key = setup.config("keyColumn").unwrap_or("key").to_string();
    setup.key_by(&[&key]);
    setup.timers();
    setup.timestamp_column("window_start");
    Ok(WindowTotalsV3 {
        size,
        windows: setup.map_state("windows")?,
    })
}

fn main() -> std::process::ExitCode {
    let mut registry = Registry::with_builtins();
    registry.register_keyed(NAME, setup);
    streamjob_runtime::cli::main_with_registry(registry)
}
