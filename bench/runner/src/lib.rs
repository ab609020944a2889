//! Side-by-side benchmark of Streamjob and Apache Flink (issue 7): the same pre-generated CSV
//! input, the same pipelines (`bench/README.md`), the same parallelism, checkpoint interval and
//! output format, run back to back in one invocation; a ratio is reported only when both engines'
//! outputs are equal (record count and per-column checksums, read back from the Parquet files).
//!
//! * [`query`] — the queries and input tables; [`manifest`] — the StreamJob manifests;
//! * [`engine`] — running each engine as a measured child; [`measure`] — wall time and peak RSS;
//! * [`checksum`] — reading the outputs back; [`plainwrite`] — the plain CSV→Parquet limit;
//! * [`report`] — verdicts and tables.

pub mod checksum;
pub mod engine;
pub mod error;
pub mod manifest;
pub mod measure;
pub mod plainwrite;
pub mod query;
pub mod report;

pub use error::{Error, Result};
