//! The file sink of one subtask. See the crate documentation for the contract.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Int64Array, UInt32Array};
use arrow::compute::take_record_batch;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use streamjob_crds::units::{parse_duration, parse_size};
use streamjob_crds::v1alpha1::{BucketTime, FileSinkSpec};
use tracing::Instrument;

use crate::bucket::{BucketAssigner, EventTime};
use crate::error::{Error, Result};
use crate::format::{Encoder, FormatKind};
use crate::part::{Committable, PartStream, commit_detached, temp_key_for};
use crate::rolling::RollingPolicy;
use crate::store::{MIN_PART_SIZE, Store};

mod compaction;
mod markers;
mod restore;
mod state;
mod success;

pub use markers::{TEMP_MARKERS, TempMarker, UPLOAD_MARKERS, UploadMarker};
pub use state::{
    InProgressFile, PendingFile, STATE_VERSION, SinkSubtaskState, max_next_counter, redistribute,
};
pub use success::SUCCESS_MARKER;
use success::SuccessConfig;

/// Counters for metrics and status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SinkMetrics {
    /// Records written.
    pub records: u64,
    /// Encoded bytes handed to the store.
    pub bytes: u64,
    /// Part files rolled (in progress → pending).
    pub files_rolled: u64,
    /// Part files committed (pending → finished).
    pub files_committed: u64,
    /// Commits that failed (retried at the next notification or restore).
    pub commit_failures: u64,
    /// Orphaned multipart uploads aborted and temporary files deleted (of crashed attempts).
    pub orphans_aborted: u64,
    /// Small pending files merged away by compaction.
    pub files_compacted: u64,
    /// Pending files waiting for a commit.
    pub pending_files: u64,
}

/// Options that do not come from the manifest.
#[derive(Clone, Debug, Default)]
pub struct FileSinkOptions {
    /// Column holding event time (for event-time date-time buckets and markers).
    pub event_time_column: Option<String>,
    /// Event times come beside each batch ([`FileSink::write_timed`]) instead of in a column,
    /// as the runtime carries them.
    pub event_times_beside_batches: bool,
    /// Multipart part size (at least and by default 5 MiB).
    pub part_size: Option<usize>,
}

struct OpenPart {
    final_key: String,
    counter: u64,
    stream: PartStream,
    encoder: Box<dyn Encoder>,
    created_at: i64,
    last_write_at: i64,
}

impl OpenPart {
    fn size(&self) -> u64 {
        self.stream.len() + self.encoder.buffered()
    }
}

/// How one subtask names its part files: `<prefix>-<subtask>-<counter><suffix>`, the counter
/// carried across checkpoints so that no name is used twice.
struct PartNames {
    prefix: String,
    suffix: String,
    subtask_index: u32,
    parallelism: u32,
    next_counter: u64,
}

/// Rolled part files not yet committed: those rolled since the last checkpoint, and those each
/// checkpoint holds until it is notified complete.
#[derive(Default)]
struct Pending {
    current: Vec<PendingFile>,
    by_checkpoint: BTreeMap<u64, Vec<PendingFile>>,
}

/// The exactly-once file sink of one subtask.
pub struct FileSink {
    store: Arc<dyn Store>,
    schema: SchemaRef,
    format: FormatKind,
    assigner: BucketAssigner,
    policy: RollingPolicy,
    /// How this subtask names its part files.
    names: PartNames,
    part_size: usize,
    /// In-progress part files, by bucket.
    parts: BTreeMap<String, OpenPart>,
    /// Rolled part files waiting for their checkpoint's commit.
    pending: Pending,
    /// When buckets are next checked for rolling and closing (ms).
    next_check: i64,
    initialized: bool,
    /// Which buckets are open and which may get a `_SUCCESS` marker.
    success: success::SuccessMarkers,
    metrics: SinkMetrics,
    /// This instance's markers and whether it cleaned up after dead ones.
    markers: markers::Markers,
    compaction_target: Option<u64>,
}

impl std::fmt::Debug for FileSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSink")
            .field("store", &self.store.describe())
            .field("subtask_index", &self.names.subtask_index)
            .field("next_counter", &self.names.next_counter)
            .field("open_parts", &self.parts.len())
            .field("metrics", &self.metrics)
            .finish()
    }
}

pub(super) fn join_key(bucket: &str, name: &str) -> String {
    if bucket.is_empty() {
        name.to_string()
    } else {
        format!("{bucket}/{name}")
    }
}

impl FileSink {
    /// A sink subtask writing `spec` into `store` (rooted at `spec.path`, see
    /// [`crate::store::open_store`]). Call [`FileSink::initialize`] before anything else.
    pub fn new(
        spec: &FileSinkSpec,
        store: Arc<dyn Store>,
        subtask_index: u32,
        parallelism: u32,
        schema: SchemaRef,
        options: FileSinkOptions,
    ) -> Result<Self> {
        if subtask_index >= parallelism.max(1) {
            return Err(Error::Config(format!(
                "subtask {subtask_index} out of parallelism {parallelism}"
            )));
        }
        let format = FormatKind::from_spec(&spec.format)?;
        let event_time = match (
            &options.event_time_column,
            options.event_times_beside_batches,
        ) {
            (Some(column), _) => EventTime::Column(column),
            (None, true) => EventTime::BesideBatches,
            (None, false) => EventTime::Missing,
        };
        let assigner = BucketAssigner::from_spec(spec.bucket_assigner.as_ref(), event_time)?;
        let policy = RollingPolicy::from_spec(spec.rolling_policy.as_ref(), format.is_bulk())?;
        let ofc = spec.output_file_config.clone().unwrap_or_default();
        let suffix = ofc
            .part_suffix
            .clone()
            .unwrap_or_else(|| format.default_suffix());
        if ofc.part_prefix.is_empty() || ofc.part_prefix.contains('/') || suffix.contains('/') {
            return Err(Error::Config(
                "outputFileConfig: prefix must be non-empty and neither may contain '/'".into(),
            ));
        }
        let success = match &spec.success_marker {
            None => None,
            Some(m) => {
                if !matches!(assigner, BucketAssigner::DateTime { .. }) {
                    return Err(Error::Config(
                        "successMarker needs the dateTime bucket assigner".into(),
                    ));
                }
                let lateness = m
                    .allowed_lateness
                    .as_deref()
                    .map(|l| parse_duration("successMarker.allowedLateness", l))
                    .transpose()?
                    .unwrap_or(Duration::ZERO);
                Some(SuccessConfig {
                    lateness_ms: lateness.as_millis() as i64,
                })
            }
        };
        let compaction_target = spec
            .compaction
            .as_ref()
            .map(|c| parse_size("compaction.targetSize", &c.target_size))
            .transpose()?;
        Ok(Self {
            store,
            schema,
            format,
            assigner,
            policy,
            names: PartNames {
                prefix: ofc.part_prefix,
                suffix,
                subtask_index,
                parallelism,
                next_counter: 0,
            },
            part_size: options
                .part_size
                .unwrap_or(MIN_PART_SIZE)
                .max(MIN_PART_SIZE),
            parts: BTreeMap::new(),
            pending: Pending::default(),
            next_check: i64::MIN,
            initialized: false,
            success: success::SuccessMarkers::new(success),
            metrics: SinkMetrics::default(),
            markers: markers::Markers::new(),
            compaction_target,
        })
    }

    /// How often the runtime should call [`FileSink::on_processing_time`].
    pub fn bucket_check_interval(&self) -> Duration {
        self.policy.bucket_check_interval
    }

    /// Counters for metrics and status.
    pub fn metrics(&self) -> SinkMetrics {
        let mut m = self.metrics.clone();
        m.pending_files = (self.pending.current.len()
            + self
                .pending
                .by_checkpoint
                .values()
                .map(Vec::len)
                .sum::<usize>()) as u64;
        m
    }

    /// The store the sink writes to.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    fn check_init(&self) -> Result<()> {
        if self.initialized {
            Ok(())
        } else {
            Err(Error::State("initialize was not called".into()))
        }
    }

    /// Writes a batch. `processing_time`: now (epoch ms), used for processing-time buckets and
    /// rolling; `watermark`: the current watermark, if any (closes buckets for `_SUCCESS`).
    pub async fn write(
        &mut self,
        batch: &RecordBatch,
        processing_time: i64,
        watermark: Option<i64>,
    ) -> Result<()> {
        self.write_timed(batch, None, processing_time, watermark)
            .await
    }

    /// [`FileSink::write`] with each row's event time (epoch ms) beside the batch, for sinks
    /// built with [`FileSinkOptions::event_times_beside_batches`].
    pub async fn write_timed(
        &mut self,
        batch: &RecordBatch,
        event_times: Option<&Int64Array>,
        processing_time: i64,
        watermark: Option<i64>,
    ) -> Result<()> {
        self.check_init()?;
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let groups = self
            .assigner
            .assign_timed(batch, event_times, processing_time)?;
        let single = groups.len() == 1;
        for (bucket, rows, min_time) in groups {
            let sub = if single {
                batch.clone()
            } else {
                take_record_batch(batch, &UInt32Array::from(rows))?
            };
            self.success
                .written(&bucket, min_time.unwrap_or(processing_time));
            self.write_bucket(&bucket, &sub, processing_time).await?;
        }
        if let Some(wm) = watermark {
            self.on_watermark(wm).await?;
        }
        Ok(())
    }

    async fn write_bucket(&mut self, bucket: &str, batch: &RecordBatch, now: i64) -> Result<()> {
        if let Some(p) = self.parts.get(bucket)
            && self.policy.should_roll_on_event(p.size())
        {
            self.roll(bucket).await?;
        }
        if !self.parts.contains_key(bucket) {
            let counter = self.names.next_counter;
            self.names.next_counter += 1;
            let name = format!(
                "{}-{}-{}{}",
                self.names.prefix, self.names.subtask_index, counter, self.names.suffix
            );
            let final_key = join_key(bucket, &name);
            let stream = self.open_stream(&final_key).await?;
            let encoder = self.format.encoder(&self.schema, false)?;
            self.parts.insert(
                bucket.to_string(),
                OpenPart {
                    final_key,
                    counter,
                    stream,
                    encoder,
                    created_at: now,
                    last_write_at: now,
                },
            );
        }
        let p = self
            .parts
            .get_mut(bucket)
            .ok_or_else(|| Error::State("part vanished".into()))?;
        let mut out = Vec::new();
        p.encoder.write(batch, &mut out)?;
        p.last_write_at = now;
        self.metrics.records += batch.num_rows() as u64;
        self.write_part(bucket, out).await?;
        let roll = self
            .parts
            .get(bucket)
            .is_some_and(|p| self.policy.should_roll_on_event(p.size()));
        if roll {
            self.roll(bucket).await?;
        }
        Ok(())
    }

    /// Appends encoded bytes to the open part of `bucket`; a multipart upload is created and
    /// recorded in a marker before its first part is uploaded.
    async fn write_part(&mut self, bucket: &str, out: Vec<u8>) -> Result<()> {
        let store = self.store.clone();
        let p = self
            .parts
            .get_mut(bucket)
            .ok_or_else(|| Error::State("part vanished".into()))?;
        self.metrics.bytes += out.len() as u64;
        if p.stream.needs_upload(out.len(), false)
            && let Some(id) = p.stream.ensure_upload(store.as_ref(), &p.final_key).await?
        {
            let key = p.final_key.clone();
            self.register_upload(&key, &id).await?;
        }
        let p = self
            .parts
            .get_mut(bucket)
            .ok_or_else(|| Error::State("part vanished".into()))?;
        p.stream.write(store.as_ref(), &p.final_key, out).await
    }

    /// In progress → pending for the part of `bucket`.
    async fn roll(&mut self, bucket: &str) -> Result<()> {
        let Some(p) = self.parts.remove(bucket) else {
            return Ok(());
        };
        let OpenPart {
            final_key,
            stream,
            encoder,
            ..
        } = p;
        let mut out = Vec::new();
        encoder.finish(&mut out)?;
        self.metrics.bytes += out.len() as u64;
        let committable = self.close_stream(&final_key, stream, out).await?;
        tracing::debug!(%final_key, size = committable.size(), "part rolled");
        self.metrics.files_rolled += 1;
        self.pending.current.push(PendingFile {
            checkpoint_id: 0,
            bucket: bucket.to_string(),
            final_key,
            committable,
        });
        Ok(())
    }

    /// Time-based rolling; cheap to call often: it only checks every bucket check interval.
    pub async fn on_processing_time(&mut self, now: i64) -> Result<()> {
        self.check_init()?;
        if now < self.next_check {
            return Ok(());
        }
        self.next_check = now.saturating_add(self.policy.bucket_check_interval.as_millis() as i64);
        let due: Vec<String> = self
            .parts
            .iter()
            .filter(|(_, p)| {
                self.policy
                    .should_roll_on_processing_time(p.created_at, p.last_write_at, now)
            })
            .map(|(b, _)| b.clone())
            .collect();
        for b in due {
            self.roll(&b).await?;
        }
        if matches!(
            self.assigner,
            BucketAssigner::DateTime {
                time: BucketTime::Processing,
                ..
            }
        ) {
            self.close_buckets_before(now).await?;
        }
        Ok(())
    }

    /// Watermark progress: with `_SUCCESS` markers on event-time buckets, buckets whose time range
    /// is past `watermark - allowedLateness` are closed (their part is rolled; the marker is written
    /// once everything of the bucket is committed).
    pub async fn on_watermark(&mut self, watermark: i64) -> Result<()> {
        self.check_init()?;
        if self.assigner.is_event_time() {
            self.close_buckets_before(watermark).await?;
        }
        Ok(())
    }

    async fn close_buckets_before(&mut self, time: i64) -> Result<()> {
        let Some(horizon) = self.success.horizon(time) else {
            return Ok(());
        };
        let Some(current) = self.assigner.bucket_of_time(horizon) else {
            return Ok(());
        };
        for b in self.success.closing(horizon, &current) {
            self.roll(&b).await?;
            self.success.closed.insert(b);
        }
        Ok(())
    }

    /// Snapshot for checkpoint `checkpoint_id`: rolls parts due on checkpoint (always for bulk
    /// formats), persists the others, and returns the state to store. An error fails the
    /// checkpoint (and, like any error but from [`FileSink::notify_checkpoint_complete`], the
    /// subtask: restore it from the last completed checkpoint).
    pub async fn snapshot(&mut self, checkpoint_id: u64) -> Result<SinkSubtaskState> {
        self.check_init()?;
        let span = tracing::info_span!(
            "filesink_snapshot",
            subtask = self.names.subtask_index,
            checkpoint_id
        );
        async move {
            let buckets: Vec<String> = self.parts.keys().cloned().collect();
            for b in &buckets {
                let due = self
                    .parts
                    .get(b)
                    .is_some_and(|p| self.policy.should_roll_on_checkpoint(p.size()));
                if due {
                    self.roll(b).await?;
                }
            }
            let mut in_progress = Vec::new();
            for (bucket, p) in self.parts.iter_mut() {
                let mut out = Vec::new();
                p.encoder.end_frame(&mut out)?;
                self.metrics.bytes += out.len() as u64;
                p.stream
                    .write(self.store.as_ref(), &p.final_key, out)
                    .await?;
                let recoverable = p.stream.persist().await?;
                in_progress.push(InProgressFile {
                    bucket: bucket.clone(),
                    final_key: p.final_key.clone(),
                    counter: p.counter,
                    created_at: p.created_at,
                    last_write_at: p.last_write_at,
                    recoverable,
                });
            }
            self.compact_pending().await?;
            if !self.pending.current.is_empty() {
                let mut cur = std::mem::take(&mut self.pending.current);
                for f in &mut cur {
                    f.checkpoint_id = checkpoint_id;
                }
                self.pending
                    .by_checkpoint
                    .entry(checkpoint_id)
                    .or_default()
                    .extend(cur);
            }
            let pending: Vec<PendingFile> = self
                .pending
                .by_checkpoint
                .values()
                .flatten()
                .cloned()
                .collect();
            tracing::debug!(
                in_progress = in_progress.len(),
                pending = pending.len(),
                "sink snapshot"
            );
            Ok(SinkSubtaskState {
                version: STATE_VERSION,
                subtask_index: self.names.subtask_index,
                checkpoint_id,
                next_counter: self.names.next_counter,
                in_progress,
                pending,
                open_buckets: self.success.open.clone(),
            })
        }
        .instrument(span)
        .await
    }

    /// Checkpoint `checkpoint_id` completed: commits every pending file of it and of earlier
    /// checkpoints. On error the uncommitted files stay pending (and in later snapshots) and are
    /// retried on the next notification or restore: the runtime may log the error and go on.
    pub async fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<()> {
        self.check_init()?;
        let span = tracing::info_span!(
            "filesink_commit",
            subtask = self.names.subtask_index,
            checkpoint_id
        );
        async move {
            let ids: Vec<u64> = self
                .pending
                .by_checkpoint
                .range(..=checkpoint_id)
                .map(|(k, _)| *k)
                .collect();
            for id in ids {
                let files = self.pending.by_checkpoint.remove(&id).unwrap_or_default();
                let mut iter = files.into_iter();
                while let Some(f) = iter.next() {
                    let done = commit_detached(
                        self.store.clone(),
                        f.final_key.clone(),
                        f.committable.clone(),
                    )
                    .await;
                    if let Err(e) = done {
                        self.metrics.commit_failures += 1;
                        let mut rest = vec![f];
                        rest.extend(iter);
                        self.pending.by_checkpoint.insert(id, rest);
                        tracing::warn!(error = %e, "commit failed; files stay pending");
                        return Err(e);
                    }
                    self.metrics.files_committed += 1;
                    self.forget_marker(f.committable.id()).await;
                }
            }
            if !self.markers.orphans_checked {
                self.clean_orphans().await?;
                self.markers.orphans_checked = true;
            }
            self.write_success_markers().await
        }
        .instrument(span)
        .await
    }

    /// In progress → pending: writes `tail` and closes the stream. A multipart part file that
    /// stays below one part becomes a staging object committed by a copy (see [`crate::part`]);
    /// whatever the store holds is recorded in a marker before it exists.
    async fn close_stream(
        &mut self,
        final_key: &str,
        mut stream: PartStream,
        tail: Vec<u8>,
    ) -> Result<Committable> {
        let store = self.store.clone();
        if stream.fits_one_object(tail.len()) {
            let staging_key = temp_key_for(final_key);
            self.register_temp(&staging_key).await?;
            stream.write(store.as_ref(), final_key, tail).await?;
            return stream.close_staged(store.as_ref(), &staging_key).await;
        }
        if stream.needs_upload(tail.len(), true)
            && let Some(id) = stream.ensure_upload(store.as_ref(), final_key).await?
        {
            self.register_upload(final_key, &id).await?;
        }
        stream.write(store.as_ref(), final_key, tail).await?;
        stream.close(store.as_ref(), final_key).await
    }

    /// The stream of a new part; on a rename store its temporary file is recorded first, so
    /// that a crash between the two leaves nothing unrecorded.
    async fn open_stream(&mut self, final_key: &str) -> Result<PartStream> {
        let temp_key = temp_key_for(final_key);
        if !self.store.supports_multipart() {
            self.register_temp(&temp_key).await?;
        }
        PartStream::open_at(self.store.as_ref(), self.part_size, temp_key).await
    }

    /// Bounded input ended: rolls every in-progress part so the final checkpoint commits it
    /// (unlike Flink, nothing stays in progress). Take one more checkpoint afterwards.
    pub async fn end_of_input(&mut self) -> Result<()> {
        self.check_init()?;
        let buckets: Vec<String> = self.parts.keys().cloned().collect();
        for b in buckets {
            self.roll(&b).await?;
        }
        self.success.close_all();
        Ok(())
    }

    /// Subtask index and parallelism this sink was built for.
    pub fn subtask(&self) -> (u32, u32) {
        (self.names.subtask_index, self.names.parallelism)
    }
}
