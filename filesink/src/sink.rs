//! The file sink of one subtask. See the crate documentation for the contract.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Int64Array, UInt32Array};
use arrow::compute::take_record_batch;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use streamjob_crds::units::{parse_duration, parse_size};
use streamjob_crds::v1alpha1::{BucketTime, FileSinkSpec};
use tracing::Instrument;

use crate::bucket::{BucketAssigner, EventTime};
use crate::error::{Error, Result};
use crate::format::{Encoder, FormatKind};
use crate::part::{Committable, PartStream, Recoverable, commit_detached, temp_key_for};
use crate::rolling::RollingPolicy;
use crate::store::{MIN_PART_SIZE, Store};

/// Version of [`SinkSubtaskState`]'s layout. 2: pending files may be staging objects
/// ([`Committable::Staged`]), which a sink of version 1 cannot commit.
pub const STATE_VERSION: u32 = 2;

/// Name of the marker written into a closed bucket.
pub const SUCCESS_MARKER: &str = "_SUCCESS";

/// Checkpointed state of one sink subtask (serde: JSON or any other format).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SinkSubtaskState {
    /// [`STATE_VERSION`] when written.
    pub version: u32,
    /// Subtask that wrote it.
    pub subtask_index: u32,
    /// Checkpoint it belongs to.
    pub checkpoint_id: u64,
    /// Next part counter of that subtask (all its part files have lower counters).
    pub next_counter: u64,
    /// In-progress part files to resume.
    pub in_progress: Vec<InProgressFile>,
    /// Pending part files to commit once a checkpoint at or after theirs completes.
    pub pending: Vec<PendingFile>,
    /// Buckets that received data and have no `_SUCCESS` marker yet (bucket → earliest time seen).
    #[serde(default)]
    pub open_buckets: BTreeMap<String, i64>,
}

/// An in-progress part file in a checkpoint.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct InProgressFile {
    /// Bucket id (`""`: the base path).
    pub bucket: String,
    /// Key of the finished file, relative to the store root.
    pub final_key: String,
    /// Part counter.
    pub counter: u64,
    /// Processing time the part was opened (epoch ms).
    pub created_at: i64,
    /// Processing time of the last write (epoch ms).
    pub last_write_at: i64,
    /// How to continue it.
    pub recoverable: Recoverable,
}

/// A pending part file in a checkpoint.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PendingFile {
    /// Checkpoint whose completion commits it.
    pub checkpoint_id: u64,
    /// Bucket id.
    pub bucket: String,
    /// Key of the finished file.
    pub final_key: String,
    /// How to commit it.
    pub committable: Committable,
}

/// The largest `next_counter` among states: pass it to every subtask's [`FileSink::initialize`]
/// (Flink keeps the max part counter in union state for the same reason).
pub fn max_next_counter(states: &[SinkSubtaskState]) -> u64 {
    states.iter().map(|s| s.next_counter).max().unwrap_or(0)
}

/// Distributes restored states over `parallelism` new subtasks: state of old subtask `i` goes to
/// new subtask `i % parallelism`. Every state must be handed to exactly one subtask.
pub fn redistribute(states: Vec<SinkSubtaskState>, parallelism: u32) -> Vec<Vec<SinkSubtaskState>> {
    let p = parallelism.max(1);
    let mut out = vec![Vec::new(); p as usize];
    for s in states {
        out[(s.subtask_index % p) as usize].push(s);
    }
    out
}

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

struct SuccessConfig {
    lateness_ms: i64,
}

/// The exactly-once file sink of one subtask.
pub struct FileSink {
    store: Arc<dyn Store>,
    schema: SchemaRef,
    format: FormatKind,
    assigner: BucketAssigner,
    policy: RollingPolicy,
    prefix: String,
    suffix: String,
    subtask_index: u32,
    parallelism: u32,
    part_size: usize,
    next_counter: u64,
    parts: BTreeMap<String, OpenPart>,
    pending_current: Vec<PendingFile>,
    pending: BTreeMap<u64, Vec<PendingFile>>,
    next_check: i64,
    initialized: bool,
    success: Option<SuccessConfig>,
    open_buckets: BTreeMap<String, i64>,
    closed_buckets: BTreeSet<String>,
    metrics: SinkMetrics,
    instance: String,
    marker_seq: u64,
    /// Upload id (temporary key on rename stores) → key of the marker this instance wrote.
    markers: HashMap<String, String>,
    orphans_checked: bool,
    compaction_target: Option<u64>,
}

/// Where multipart upload markers live, under the base path (hidden from Hive/Spark readers).
pub const UPLOAD_MARKERS: &str = ".streamjob/uploads";

/// Where temporary-file markers live on rename stores (local, HDFS): a sink instance records
/// each temporary part file it creates, so that a later instance deletes those of dead
/// instances (a crash-looping job would otherwise leave one per part per attempt) without
/// listing the output.
pub const TEMP_MARKERS: &str = ".streamjob/temp";

/// A marker of a temporary part file that some sink instance created.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TempMarker {
    /// Key of the temporary file.
    pub temp_key: String,
}

/// A marker of a multipart upload that some sink instance started (see [`FileSink`] docs).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct UploadMarker {
    /// Final key of the upload.
    pub key: String,
    /// Upload id.
    pub upload_id: String,
}

/// How many part counters past the restored floor the orphan cleanup asks for by exact key.
const ORPHAN_PROBE: u64 = 8;

/// `(subtask, counter)` of a part file name `{prefix}-{subtask}-{counter}{suffix}`.
fn parse_part_name(name: &str, prefix: &str, suffix: &str) -> Option<(u32, u64)> {
    let mid = name
        .strip_prefix(prefix)?
        .strip_prefix('-')?
        .strip_suffix(suffix)?;
    let (sub, counter) = mid.split_once('-')?;
    Some((sub.parse().ok()?, counter.parse().ok()?))
}

/// `(subtask, instance)` of a marker key `<dir>/<subtask>/<instance>-<seq>`. Anything else in
/// the folder — such as the hidden temporary file of a marker being written by a live (or
/// paused) instance, [`parse_marker_put`] — is not a marker.
fn parse_marker_key<'a>(dir: &str, key: &'a str) -> Option<(u32, &'a str)> {
    let rest = key.strip_prefix(dir)?.strip_prefix('/')?;
    let (sub, name) = rest.split_once('/')?;
    Some((sub.parse().ok()?, marker_instance(name)?))
}

/// The instance of a marker name `<instance>-<seq>`.
fn marker_instance(name: &str) -> Option<&str> {
    let (instance, seq) = name.rsplit_once('-')?;
    let valid = !instance.is_empty()
        && instance.chars().all(|c| c.is_ascii_alphanumeric())
        && seq.parse::<u64>().is_ok();
    valid.then_some(instance)
}

/// `(subtask, instance)` of the hidden temporary file of a marker being written on a rename
/// store, `<dir>/<subtask>/.<instance>-<seq>.put.<id>`: a whole-object write that a killed
/// instance left before its rename.
fn parse_marker_put<'a>(dir: &str, key: &'a str) -> Option<(u32, &'a str)> {
    let rest = key.strip_prefix(dir)?.strip_prefix('/')?;
    let (sub, name) = rest.split_once('/')?;
    let (marker, _) = name.strip_prefix('.')?.split_once(".put.")?;
    Some((sub.parse().ok()?, marker_instance(marker)?))
}

/// What a marker records: the upload id, or the temporary key on rename stores.
fn marker_id(body: &[u8]) -> Option<String> {
    if let Ok(m) = serde_json::from_slice::<UploadMarker>(body) {
        return Some(m.upload_id);
    }
    serde_json::from_slice::<TempMarker>(body)
        .ok()
        .map(|m| m.temp_key)
}

impl std::fmt::Debug for FileSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSink")
            .field("store", &self.store.describe())
            .field("subtask_index", &self.subtask_index)
            .field("next_counter", &self.next_counter)
            .field("open_parts", &self.parts.len())
            .field("metrics", &self.metrics)
            .finish()
    }
}

fn join_key(bucket: &str, name: &str) -> String {
    if bucket.is_empty() {
        name.to_string()
    } else {
        format!("{bucket}/{name}")
    }
}

/// Deletes upload markers. In `initialize` a failure is fatal (the attempt is retried): a marker
/// of a dead instance left on an upload that this instance took over would let the orphan
/// cleanup abort a live upload.
async fn drop_markers(store: &dyn Store, keys: Option<Vec<String>>) -> Result<()> {
    for k in keys.unwrap_or_default() {
        store.delete(&k).await?;
    }
    Ok(())
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
            prefix: ofc.part_prefix,
            suffix,
            subtask_index,
            parallelism,
            part_size: options
                .part_size
                .unwrap_or(MIN_PART_SIZE)
                .max(MIN_PART_SIZE),
            next_counter: 0,
            parts: BTreeMap::new(),
            pending_current: Vec::new(),
            pending: BTreeMap::new(),
            next_check: i64::MIN,
            initialized: false,
            success,
            open_buckets: BTreeMap::new(),
            closed_buckets: BTreeSet::new(),
            metrics: SinkMetrics::default(),
            instance: uuid::Uuid::new_v4().simple().to_string(),
            marker_seq: 0,
            markers: HashMap::new(),
            orphans_checked: false,
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
        m.pending_files = (self.pending_current.len()
            + self.pending.values().map(Vec::len).sum::<usize>()) as u64;
        m
    }

    /// The store the sink writes to.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Starts the subtask from the states of *all* old subtasks of this sink (the union; empty on
    /// a fresh start): takes its share (old subtask `i` → new subtask `i % parallelism`, as
    /// [`redistribute`]) and the counter floor ([`max_next_counter`]) itself. The simplest correct
    /// call for a runtime that can hand every subtask the same list.
    pub async fn initialize_union(&mut self, all: Vec<SinkSubtaskState>) -> Result<()> {
        let floor = max_next_counter(&all);
        let p = self.parallelism.max(1);
        let mine = all
            .into_iter()
            .filter(|s| s.subtask_index % p == self.subtask_index)
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
            subtask = self.subtask_index,
            states = restored.len()
        );
        async move {
            if self.initialized {
                return Err(Error::State("initialize called twice".into()));
            }
            self.next_counter = counter_floor.max(max_next_counter(&restored));
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
                    let e = self.open_buckets.entry(b.clone()).or_insert(*t);
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
            if store.supports_multipart() && (!restored_empty || self.next_counter > 0) {
                self.abort_unrecorded_orphans(self.next_counter, restored_buckets)
                    .await;
            }
            self.initialized = true;
            Ok(())
        }
        .instrument(span)
        .await
    }

    /// On restore: aborts the open multipart uploads that dead instances of this subtask
    /// started after the restored checkpoint, found by listing the store (S3
    /// ListMultipartUploads), so also those no marker recorded (the creation answer was lost,
    /// or the instance died between creation and marker). Taken are part names
    /// `{partPrefix}-{i}-{counter}{partSuffix}` with `i` this subtask's index (subtask 0: also
    /// any `i` at or above the parallelism) and `counter` at or above the restored counter floor.
    /// No restored state references such a name (every part a checkpoint knows has a lower
    /// counter) and this instance has not created one yet (it starts at the floor, after this
    /// call), so they are orphans. Best effort: failures are logged, the restore goes on, and
    /// what is left stays for the bucket's lifecycle rule.
    ///
    /// S3 lists every upload under the base path at once; MinIO answers only for an exact key,
    /// so the names a dead instance would have used next (counters `floor..floor + 8` in the
    /// restored buckets, and the base path with the `basePath` assigner) are asked for as well.
    async fn abort_unrecorded_orphans(&mut self, floor: u64, buckets: BTreeSet<String>) {
        let mut uploads = match self.store.list_multipart_uploads("").await {
            Ok(u) => u,
            Err(Error::Unsupported { .. }) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list open multipart uploads: orphans are left to the bucket lifecycle rule");
                return;
            }
        };
        'probe: for b in &buckets {
            for c in floor..floor.saturating_add(ORPHAN_PROBE) {
                let name = format!("{}-{}-{c}{}", self.prefix, self.subtask_index, self.suffix);
                let key = join_key(b, &name);
                match self.store.list_multipart_uploads(&key).await {
                    Ok(found) => uploads.extend(found.into_iter().filter(|u| u.key == key)),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot list open multipart uploads");
                        break 'probe;
                    }
                }
            }
        }
        let mut seen = BTreeSet::new();
        uploads.retain(|u| seen.insert(u.upload_id.clone()));
        let mut aborted = 0;
        for u in uploads {
            let name = u.key.rsplit('/').next().unwrap_or(&u.key);
            let Some((sub, counter)) = parse_part_name(name, &self.prefix, &self.suffix) else {
                continue;
            };
            let owned =
                sub == self.subtask_index || (self.subtask_index == 0 && sub >= self.parallelism);
            let ours = self.markers.contains_key(&u.upload_id)
                || self
                    .parts
                    .values()
                    .any(|p| p.stream.upload_id() == Some(u.upload_id.as_str()));
            if !owned || counter < floor || ours {
                continue;
            }
            match self.store.abort_multipart(&u.key, &u.upload_id).await {
                Ok(()) => aborted += 1,
                Err(e) => {
                    tracing::warn!(key = %u.key, error = %e, "could not abort an orphaned upload")
                }
            }
        }
        if aborted > 0 {
            tracing::info!(
                aborted,
                "aborted orphaned multipart uploads found by listing"
            );
        }
        self.metrics.orphans_aborted += aborted;
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
            if self.success.is_some() {
                let t = min_time.unwrap_or(processing_time);
                let e = self.open_buckets.entry(bucket.clone()).or_insert(t);
                *e = (*e).min(t);
                self.closed_buckets.remove(&bucket);
            }
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
            let counter = self.next_counter;
            self.next_counter += 1;
            let name = format!(
                "{}-{}-{}{}",
                self.prefix, self.subtask_index, counter, self.suffix
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
        self.pending_current.push(PendingFile {
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
        let Some(cfg) = &self.success else {
            return Ok(());
        };
        let horizon = time.saturating_sub(cfg.lateness_ms);
        let Some(current) = self.assigner.bucket_of_time(horizon) else {
            return Ok(());
        };
        let closing: Vec<String> = self
            .open_buckets
            .iter()
            .filter(|(b, first)| **b != current && horizon > **first)
            .filter(|(b, _)| !self.closed_buckets.contains(*b))
            .map(|(b, _)| b.clone())
            .collect();
        for b in closing {
            self.roll(&b).await?;
            self.closed_buckets.insert(b);
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
            subtask = self.subtask_index,
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
            if !self.pending_current.is_empty() {
                let mut cur = std::mem::take(&mut self.pending_current);
                for f in &mut cur {
                    f.checkpoint_id = checkpoint_id;
                }
                self.pending.entry(checkpoint_id).or_default().extend(cur);
            }
            let pending: Vec<PendingFile> = self.pending.values().flatten().cloned().collect();
            tracing::debug!(
                in_progress = in_progress.len(),
                pending = pending.len(),
                "sink snapshot"
            );
            Ok(SinkSubtaskState {
                version: STATE_VERSION,
                subtask_index: self.subtask_index,
                checkpoint_id,
                next_counter: self.next_counter,
                in_progress,
                pending,
                open_buckets: self.open_buckets.clone(),
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
            subtask = self.subtask_index,
            checkpoint_id
        );
        async move {
            let ids: Vec<u64> = self
                .pending
                .range(..=checkpoint_id)
                .map(|(k, _)| *k)
                .collect();
            for id in ids {
                let files = self.pending.remove(&id).unwrap_or_default();
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
                        self.pending.insert(id, rest);
                        tracing::warn!(error = %e, "commit failed; files stay pending");
                        return Err(e);
                    }
                    self.metrics.files_committed += 1;
                    self.forget_marker(f.committable.id()).await;
                }
            }
            if !self.orphans_checked {
                self.clean_orphans().await?;
                self.orphans_checked = true;
            }
            self.write_success_markers().await
        }
        .instrument(span)
        .await
    }

    async fn write_success_markers(&mut self) -> Result<()> {
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

    /// Compaction: before the pending files rolled since the last checkpoint enter the state,
    /// those of a bucket smaller than the target size are merged into one new pending file and
    /// the originals dropped. They were never visible and nothing refers to them yet, so a crash
    /// anywhere here is recovered like any crash before the checkpoint: exactly once holds.
    /// Only pending files that can be read back are merged (temporary files; multipart uploads
    /// are not readable before completion and are left as they are).
    async fn compact_pending(&mut self) -> Result<()> {
        let Some(target) = self.compaction_target else {
            return Ok(());
        };
        let mut by_bucket: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, p) in self.pending_current.iter().enumerate() {
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
                match &self.pending_current[*i].committable {
                    Committable::Rename { temp_key: key, .. }
                    | Committable::Staged {
                        staging_key: key, ..
                    } => data.push(self.store.get(key).await?),
                    Committable::Multipart { .. } => {}
                }
            }
            let merged = self.format.merge(&self.schema, &data)?;
            let counter = self.next_counter;
            self.next_counter += 1;
            let name = format!(
                "{}-{}-{}{}",
                self.prefix, self.subtask_index, counter, self.suffix
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
        let old = std::mem::take(&mut self.pending_current);
        for (i, p) in old.into_iter().enumerate() {
            if drop_idx.contains(&i) {
                crate::part::discard(self.store.as_ref(), &p.final_key, &p.committable).await?;
                self.forget_marker(p.committable.id()).await;
            } else {
                self.pending_current.push(p);
            }
        }
        self.pending_current.extend(merged_files);
        self.metrics.files_compacted += drop_idx.len() as u64;
        Ok(())
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

    async fn register_upload(&mut self, final_key: &str, upload_id: &str) -> Result<()> {
        let body = serde_json::to_vec(&UploadMarker {
            key: final_key.to_string(),
            upload_id: upload_id.to_string(),
        })
        .map_err(|e| Error::State(format!("upload marker: {e}")))?;
        self.put_marker(upload_id, body).await
    }

    /// Records a temporary part file before it is created (rename stores).
    async fn register_temp(&mut self, temp_key: &str) -> Result<()> {
        let body = serde_json::to_vec(&TempMarker {
            temp_key: temp_key.to_string(),
        })
        .map_err(|e| Error::State(format!("temp file marker: {e}")))?;
        self.put_marker(temp_key, body).await
    }

    async fn put_marker(&mut self, id: &str, body: Vec<u8>) -> Result<()> {
        if self.markers.contains_key(id) {
            return Ok(());
        }
        self.marker_seq += 1;
        let key = format!(
            "{}/{}/{}-{}",
            self.marker_dir(),
            self.subtask_index,
            self.instance,
            self.marker_seq
        );
        self.store.put(&key, Bytes::from(body)).await?;
        self.markers.insert(id.to_string(), key);
        Ok(())
    }

    /// Drops this instance's marker of a committed or discarded part. Best effort: a leftover
    /// marker of a finished part is harmless (the cleanup finds the upload or file gone).
    async fn forget_marker(&mut self, id: &str) {
        if let Some(m) = self.markers.remove(id)
            && let Err(e) = self.store.delete(&m).await
        {
            tracing::warn!(key = %m, error = %e, "could not delete a part marker");
        }
    }

    fn marker_dir(&self) -> &'static str {
        if self.store.supports_multipart() {
            UPLOAD_MARKERS
        } else {
            TEMP_MARKERS
        }
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

    /// Cleans up what dead instances of this subtask index left (subtask 0 also takes indices
    /// at or above the parallelism): their multipart uploads are aborted, their temporary files
    /// deleted (rename stores). Runs once, after the first checkpoint of this instance
    /// completed: by then every subtask of the attempt has taken over what the restored state
    /// references (and dropped those markers), and no earlier instance is still running.
    async fn clean_orphans(&mut self) -> Result<()> {
        let dir = self.marker_dir();
        let mine: BTreeSet<&str> = self
            .parts
            .values()
            .filter_map(|p| p.stream.upload_id().or_else(|| p.stream.temp_key()))
            .chain(self.markers.keys().map(String::as_str))
            .collect();
        let mut cleaned = 0;
        for o in self.store.list(dir).await? {
            // markers, and what a killed instance left of a marker it was writing (its body may
            // be torn; no earlier instance is running any more, see above)
            let Some((sub, instance)) =
                parse_marker_key(dir, &o.key).or_else(|| parse_marker_put(dir, &o.key))
            else {
                continue;
            };
            let owned =
                sub == self.subtask_index || (self.subtask_index == 0 && sub >= self.parallelism);
            if !owned || instance == self.instance {
                continue;
            }
            let body = self.store.get(&o.key).await?;
            if let Ok(m) = serde_json::from_slice::<UploadMarker>(&body) {
                if mine.contains(m.upload_id.as_str()) {
                    continue;
                }
                match self.store.abort_multipart(&m.key, &m.upload_id).await {
                    Ok(()) => cleaned += 1,
                    Err(e) if e.is_transient() => return Err(e),
                    Err(e) => tracing::debug!(key = %m.key, error = %e, "orphan already gone"),
                }
            } else if let Ok(m) = serde_json::from_slice::<TempMarker>(&body) {
                if mine.contains(m.temp_key.as_str()) {
                    continue;
                }
                // gone: renamed by the commit of a checkpoint (whose marker was not dropped)
                if self.store.head(&m.temp_key).await?.is_some() {
                    self.store.delete(&m.temp_key).await?;
                    cleaned += 1;
                }
            }
            self.store.delete(&o.key).await?;
        }
        if cleaned > 0 {
            tracing::info!(
                cleaned,
                "aborted orphaned uploads / deleted orphaned temporary files"
            );
        }
        self.metrics.orphans_aborted += cleaned;
        Ok(())
    }

    /// Bounded input ended: rolls every in-progress part so the final checkpoint commits it
    /// (unlike Flink, nothing stays in progress). Take one more checkpoint afterwards.
    pub async fn end_of_input(&mut self) -> Result<()> {
        self.check_init()?;
        let buckets: Vec<String> = self.parts.keys().cloned().collect();
        for b in buckets {
            self.roll(&b).await?;
        }
        if self.success.is_some() {
            let all: Vec<String> = self.open_buckets.keys().cloned().collect();
            self.closed_buckets.extend(all);
        }
        Ok(())
    }

    /// Subtask index and parallelism this sink was built for.
    pub fn subtask(&self) -> (u32, u32) {
        (self.subtask_index, self.parallelism)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_keys_parse_and_a_marker_being_written_is_not_one() {
        assert_eq!(
            parse_marker_key(TEMP_MARKERS, ".streamjob/temp/3/0a1b-12"),
            Some((3, "0a1b"))
        );
        // the hidden temporary file of a local `put` of a marker (found when a live or paused
        // instance is writing one): deleting it would fail that instance's write
        assert_eq!(
            parse_marker_key(
                TEMP_MARKERS,
                ".streamjob/temp/3/.0a1b-12.put.5f0e2b1c-77aa-4c2a-9d1e-0123456789ab"
            ),
            None
        );
        assert_eq!(
            parse_marker_key(UPLOAD_MARKERS, ".streamjob/temp/3/0a1b-12"),
            None
        );
        // ... which the cleanup recognises as such, with its instance (removed once no earlier
        // instance runs: a killed one leaves it behind)
        assert_eq!(
            parse_marker_put(
                TEMP_MARKERS,
                ".streamjob/temp/3/.0a1b-12.put.5f0e2b1c77aa4c2a9d1e0123456789ab"
            ),
            Some((3, "0a1b"))
        );
        assert_eq!(
            parse_marker_put(TEMP_MARKERS, ".streamjob/temp/3/0a1b-12"),
            None
        );
        assert_eq!(
            parse_marker_put(TEMP_MARKERS, ".streamjob/temp/3/.x.part-0-1.json.put.ab"),
            None
        );
        assert_eq!(
            parse_marker_key(UPLOAD_MARKERS, ".streamjob/uploads/0/0a1b-x"),
            None
        );
    }
}
