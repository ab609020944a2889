//! The loop of every crate's fuzz targets (`src/fuzz.rs`), one file included by each crate's
//! `lib.rs` (a crate only for this would be one more test dependency to build).
//!
//! In `cargo test` a target runs a fixed number of cases from a deterministic seed; with
//! `STREAMJOB_FUZZ_SECONDS=N` (what `cargo xtask fuzz` sets) it runs batches of random cases for
//! N seconds and prints `fuzz <name>: <cases> cases in <secs> s, no failure`. A failure panics
//! with the shrunk input.

use std::fmt::Debug;
use std::time::Instant;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRng, TestRunner};

/// Runs `test` over `strategy`: `cases` cases (deterministic seed) in a normal test run, or
/// batches of random cases until `STREAMJOB_FUZZ_SECONDS` have passed.
pub(crate) fn fuzz<S>(
    name: &str,
    cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S: Strategy,
    S::Value: Debug,
{
    let seconds = std::env::var("STREAMJOB_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok());
    let started = Instant::now();
    let mut total = 0u64;
    loop {
        let config = Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        };
        let mut runner = match seconds {
            Some(_) => TestRunner::new(config),
            None => {
                let rng = TestRng::deterministic_rng(config.rng_algorithm);
                TestRunner::new_with_rng(config, rng)
            }
        };
        if let Err(e) = runner.run(&strategy, &test) {
            panic!("fuzz {name}: {e}");
        }
        total += u64::from(cases);
        match seconds {
            Some(s) if started.elapsed().as_secs_f64() < s => {}
            _ => break,
        }
    }
    if seconds.is_some() {
        eprintln!(
            "fuzz {name}: {total} cases in {:.1} s, no failure",
            started.elapsed().as_secs_f64()
        );
    }
}
