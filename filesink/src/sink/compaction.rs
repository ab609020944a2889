//! Compaction of the small pending files one checkpoint rolled, before they enter its state.

use std::collections::{BTreeMap, BTreeSet};

use super::{FileSink, PendingFile, join_key};
use crate::error::Result;
use crate::part::Committable;

impl FileSink {
    /// Compaction: before the pending files rolled since the last checkpoint enter the state,
    /// those of a bucket smaller than the target size are merged into one new pending file and
    /// the originals dropped. They were never visible and nothing refers to them yet, so a crash
    /// anywhere here is recovered like any crash before the checkpoint: exactly once holds.
    /// Only pending files that can be read back are merged (temporary files; multipart uploads
    /// are not readable before completion and are left as they are).
    pub(super) async fn compact_pending(&mut self) -> Result<()> {
        let Some(target) = self.compaction_target else {
            return Ok(());
        };
        let mut by_bucket: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, p) in self.pending.current.iter().enumerate() {
            let readable = matches!(
                p.committable,
                Committable::Rename { .. } | Committable::Staged { .. }
            );
            if readable && p.committable.size() < target {
                by_bucket.entry(p.bucket.clone()).or_default().push(i);
            }
        }
        let mut drop_idx = BTreeSet::new();
        let mut merged_files = Vec::new();
        for (bucket, idx) in by_bucket {
            if idx.len() < 2 {
                continue;
            }
            let mut data = Vec::new();
            for i in &idx {
                match &self.pending.current[*i].committable {
                    Committable::Rename { temp_key: key, .. }
                    | Committable::Staged {
                        staging_key: key, ..
                    } => data.push(self.store.get(key).await?),
                    Committable::Multipart { .. } => {}
                }
            }
            let merged = self.format.merge(&self.schema, &data)?;
            let counter = self.names.next_counter;
            self.names.next_counter += 1;
            let name = format!(
                "{}-{}-{}{}",
                self.names.prefix, self.names.subtask_index, counter, self.names.suffix
            );
            let final_key = join_key(&bucket, &name);
            let stream = self.open_stream(&final_key).await?;
            let committable = self.close_stream(&final_key, stream, merged).await?;
            tracing::debug!(%final_key, merged = idx.len(), "compacted pending files");
            merged_files.push(PendingFile {
                checkpoint_id: 0,
                bucket,
                final_key,
                committable,
            });
            drop_idx.extend(idx);
        }
        if drop_idx.is_empty() {
            return Ok(());
        }
        let old = std::mem::take(&mut self.pending.current);
        for (i, p) in old.into_iter().enumerate() {
            if drop_idx.contains(&i) {
                crate::part::discard(self.store.as_ref(), &p.final_key, &p.committable).await?;
                self.forget_marker(p.committable.id()).await;
            } else {
                self.pending.current.push(p);
            }
        }
        self.pending.current.extend(merged_files);
        self.metrics.files_compacted += drop_idx.len() as u64;
        Ok(())
    }
}
