//! `_SUCCESS` markers: a bucket that no part file can enter any more (its time passed, plus the
//! allowed lateness) gets an empty `_SUCCESS` object once everything in it is committed, as
//! Hive-style readers expect.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use super::{FileSink, join_key};
use crate::error::Result;

/// Name of the marker written into a closed bucket.
pub const SUCCESS_MARKER: &str = "_SUCCESS";

pub(super) struct SuccessConfig {
    pub(super) lateness_ms: i64,
}

/// The buckets a subtask wrote to, and which of them are closed (no part file can enter them
/// any more) and wait for their files' commit to get a marker.
pub(super) struct SuccessMarkers {
    /// `None`: the spec asks for no markers.
    config: Option<SuccessConfig>,
    /// Buckets written to, with the earliest time written into each (kept in the sink's state).
    pub(super) open: BTreeMap<String, i64>,
    /// Closed buckets not yet marked.
    pub(super) closed: BTreeSet<String>,
}

impl SuccessMarkers {
    pub(super) fn new(config: Option<SuccessConfig>) -> Self {
        Self {
            config,
            open: BTreeMap::new(),
            closed: BTreeSet::new(),
        }
    }

    /// `bucket` was written to at `time`: it is open (again).
    pub(super) fn written(&mut self, bucket: &str, time: i64) {
        if self.config.is_none() {
            return;
        }
        let first = self.open.entry(bucket.to_string()).or_insert(time);
        *first = (*first).min(time);
        self.closed.remove(bucket);
    }

    /// The time before which no record can still arrive at `time` (the allowed lateness back).
    pub(super) fn horizon(&self, time: i64) -> Option<i64> {
        Some(time.saturating_sub(self.config.as_ref()?.lateness_ms))
    }

    /// Open buckets that `horizon` has passed, other than `current` (the one it falls in).
    pub(super) fn closing(&self, horizon: i64, current: &str) -> Vec<String> {
        self.open
            .iter()
            .filter(|(b, first)| b.as_str() != current && horizon > **first)
            .filter(|(b, _)| !self.closed.contains(*b))
            .map(|(b, _)| b.clone())
            .collect()
    }

    /// At the end of the input every bucket is closed.
    pub(super) fn close_all(&mut self) {
        if self.config.is_some() {
            self.closed.extend(self.open.keys().cloned());
        }
    }
}

impl FileSink {
    pub(super) async fn write_success_markers(&mut self) -> Result<()> {
        if self.success.config.is_none() {
            return Ok(());
        }
        let busy: BTreeSet<&str> = self
            .parts
            .keys()
            .map(String::as_str)
            .chain(self.pending.current.iter().map(|p| p.bucket.as_str()))
            .chain(
                self.pending
                    .by_checkpoint
                    .values()
                    .flatten()
                    .map(|p| p.bucket.as_str()),
            )
            .collect();
        let done: Vec<String> = self
            .success
            .closed
            .iter()
            .filter(|b| !busy.contains(b.as_str()))
            .cloned()
            .collect();
        for b in done {
            self.store
                .put(&join_key(&b, SUCCESS_MARKER), Bytes::new())
                .await?;
            self.success.closed.remove(&b);
            self.success.open.remove(&b);
        }
        Ok(())
    }
}
