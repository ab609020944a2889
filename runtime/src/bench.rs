//! `streamjob-runtime bench`: Nexmark throughput.

use crate::error::Result;

/// Runs the benchmark.
pub async fn run(_seconds: u64, _parallelism: u32, _interval: &str, _queries: Option<&str>) -> Result<()> {
    Err(crate::error::Error::Unsupported("bench".into()))
}
