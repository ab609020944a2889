//! `_SUCCESS` markers: a bucket that no part file can enter any more (its time passed, plus the
//! allowed lateness) gets an empty `_SUCCESS` object once everything in it is committed, as
//! Hive-style readers expect.

use std::collections::BTreeSet;

use bytes::Bytes;

use super::{FileSink, join_key};
use crate::error::Result;

/// Name of the marker written into a closed bucket.
pub const SUCCESS_MARKER: &str = "_SUCCESS";

pub(super) struct SuccessConfig {
    pub(super) lateness_ms: i64,
}

impl FileSink {
    pub(super) async fn write_success_markers(&mut self) -> Result<()> {
        if self.success.is_none() {
            return Ok(());
        }
        let busy: BTreeSet<&str> = self
            .parts
            .keys()
            .map(String::as_str)
            .chain(self.pending_current.iter().map(|p| p.bucket.as_str()))
            .chain(self.pending.values().flatten().map(|p| p.bucket.as_str()))
            .collect();
        let done: Vec<String> = self
            .closed_buckets
            .iter()
            .filter(|b| !busy.contains(b.as_str()))
            .cloned()
            .collect();
        for b in done {
            self.store
                .put(&join_key(&b, SUCCESS_MARKER), Bytes::new())
                .await?;
            self.closed_buckets.remove(&b);
            self.open_buckets.remove(&b);
        }
        Ok(())
    }
}
