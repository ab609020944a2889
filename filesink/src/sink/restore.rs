//! Restore: a sink subtask started from the states of a checkpoint or savepoint commits what
//! they left pending, takes its in-progress parts over (and their markers), and aborts what a
//! dead instance started after them.

use std::collections::{BTreeSet, HashMap};

use tracing::Instrument;

use super::markers::{drop_markers, marker_id};
use super::{FileSink, OpenPart, STATE_VERSION, SinkSubtaskState, max_next_counter};
use crate::bucket::BucketAssigner;
use crate::error::{Error, Result};
use crate::part::{PartStream, commit_detached};

impl FileSink {
    /// Starts the subtask from the states of *all* old subtasks of this sink (the union; empty on
    /// a fresh start): takes its share (old subtask `i` → new subtask `i % parallelism`, as
    /// [`redistribute`]) and the counter floor ([`max_next_counter`]) itself. The simplest correct
    /// call for a runtime that can hand every subtask the same list.
    pub async fn initialize_union(&mut self, all: Vec<SinkSubtaskState>) -> Result<()> {
        let floor = max_next_counter(&all);
        let p = self.names.parallelism.max(1);
        let mine = all
            .into_iter()
            .filter(|s| s.subtask_index % p == self.names.subtask_index)
            .collect();
        self.initialize(mine, floor).await
    }

    /// Starts the subtask. `restored`: the states handed to this subtask (empty on a fresh start;
    /// several after a rescale, see [`redistribute`]). `counter_floor`: [`max_next_counter`] over
    /// the states of *all* old subtasks, so that part names never repeat.
    ///
    /// Commits every pending file of the restored states (the checkpoint they belong to
    /// completed), resumes one in-progress file per bucket and commits any other one right away
    /// (its data is covered by the completed checkpoint). Fails when the store is unreachable;
    /// the runtime retries the restore.
    pub async fn initialize(
        &mut self,
        restored: Vec<SinkSubtaskState>,
        counter_floor: u64,
    ) -> Result<()> {
        let span = tracing::info_span!(
            "filesink_initialize",
            subtask = self.names.subtask_index,
            states = restored.len()
        );
        async move {
            if self.initialized {
                return Err(Error::State("initialize called twice".into()));
            }
            self.names.next_counter = counter_floor.max(max_next_counter(&restored));
            let restored_empty = restored.is_empty();
            let mut restored_buckets: BTreeSet<String> = restored
                .iter()
                .flat_map(|s| {
                    s.in_progress
                        .iter()
                        .map(|f| f.bucket.clone())
                        .chain(s.pending.iter().map(|p| p.bucket.clone()))
                        .chain(s.open_buckets.keys().cloned())
                })
                .collect();
            if matches!(self.assigner, BucketAssigner::BasePath) {
                restored_buckets.insert(String::new());
            }
            let store = self.store.clone();
            // markers of earlier instances, by upload id (temporary key on rename stores):
            // whoever takes an upload or a temporary file over drops them
            let mut old_markers: HashMap<String, Vec<String>> = HashMap::new();
            if !restored.is_empty() {
                for o in store.list(self.marker_dir()).await? {
                    if let Some(id) = marker_id(&store.get(&o.key).await?) {
                        old_markers.entry(id).or_default().push(o.key);
                    }
                }
            }
            for st in &restored {
                if st.version > STATE_VERSION {
                    return Err(Error::State(format!(
                        "state version {} is newer than this sink ({STATE_VERSION})",
                        st.version
                    )));
                }
                for p in &st.pending {
                    commit_detached(store.clone(), p.final_key.clone(), p.committable.clone())
                        .await?;
                    self.metrics.files_committed += 1;
                    drop_markers(store.as_ref(), old_markers.remove(p.committable.id())).await?;
                }
                for (b, t) in &st.open_buckets {
                    let e = self.success.open.entry(b.clone()).or_insert(*t);
                    *e = (*e).min(*t);
                }
            }
            for st in restored {
                for f in st.in_progress {
                    let Some(stream) = PartStream::resume(
                        store.as_ref(),
                        &f.final_key,
                        &f.recoverable,
                        self.part_size,
                    )
                    .await?
                    else {
                        if let Some(id) = f.recoverable.id() {
                            drop_markers(store.as_ref(), old_markers.remove(id)).await?;
                        }
                        continue;
                    };
                    if self.parts.contains_key(&f.bucket) || self.format.is_bulk() {
                        let c = self.close_stream(&f.final_key, stream, Vec::new()).await?;
                        commit_detached(store.clone(), f.final_key.clone(), c.clone()).await?;
                        self.forget_marker(c.id()).await;
                        self.metrics.files_committed += 1;
                        drop_markers(store.as_ref(), old_markers.remove(c.id())).await?;
                        continue;
                    }
                    if let Some(id) = stream.upload_id().map(str::to_string) {
                        self.register_upload(&f.final_key, &id).await?;
                        drop_markers(store.as_ref(), old_markers.remove(&id)).await?;
                    } else if let Some(temp) = stream.temp_key().map(str::to_string) {
                        self.register_temp(&temp).await?;
                        drop_markers(store.as_ref(), old_markers.remove(&temp)).await?;
                    }
                    let encoder = self
                        .format
                        .encoder(&self.schema, !f.recoverable.is_empty())?;
                    self.parts.insert(
                        f.bucket.clone(),
                        OpenPart {
                            final_key: f.final_key,
                            counter: f.counter,
                            stream,
                            encoder,
                            created_at: f.created_at,
                            last_write_at: f.last_write_at,
                        },
                    );
                }
            }
            if store.supports_multipart() && (!restored_empty || self.names.next_counter > 0) {
                self.abort_unrecorded_orphans(self.names.next_counter, restored_buckets)
                    .await;
            }
            self.initialized = true;
            Ok(())
        }
        .instrument(span)
        .await
    }
}
