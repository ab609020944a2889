//! Crash/restore matrix of the file sink against the local file system and MinIO.
//!
//! A job is simulated: a replayable source (batch index = position), `p` sink subtasks, aligned
//! checkpoints every few batches (complete when every subtask snapshotted), notifications, and
//! crashes injected by a store wrapper that "kills the process" after a budget of mutating store
//! calls (optionally after the call took effect, as when the response is lost), or right after a
//! completed snapshot before notification, or after a snapshot that never completes. Each attempt
//! restores from the last *completed* checkpoint (rescaling between attempts) and replays the
//! input from that checkpoint's position. At the end the multiset of record ids in finished files
//! must equal the input exactly once.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use arrow::array::{Array, AsArray, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use async_trait::async_trait;
use bytes::Bytes;
use streamjob_crds::v1alpha1::{
    BucketAssignerSpec, BucketTime, CsvFormat, DateTimeBucketAssigner, DefaultRollingPolicy,
    FieldBucketAssigner, FileSinkSpec, ParquetCompression, ParquetFormat, RollingPolicySpec,
    RowCompression, RowFormat, SinkFormat, SuccessMarkerSpec,
};
use streamjob_filesink::{
    FileSink, FileSinkOptions, SinkSubtaskState, Store, max_next_counter, redistribute,
};
/// The stores' error: what the fault-injecting store below fails with.
use streamjob_storage::Error;
use streamjob_storage::retry::RetryPolicy;
use streamjob_storage::s3_api::{self, uri_encode};
use streamjob_storage::store::{LocalStore, ObjectInfo, TempFile};

// ---------------------------------------------------------------------------------------------
// Fault injection
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
struct Faults {
    /// While set, every mutating call fails with a transient (retryable) store error.
    outage: AtomicBool,
    budget: AtomicI64,
    /// When the budget runs out: apply the call, then fail (response lost).
    apply_then_fail: AtomicBool,
}

impl Faults {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            outage: AtomicBool::new(false),
            budget: AtomicI64::new(i64::MAX),
            apply_then_fail: AtomicBool::new(false),
        })
    }
    fn arm(&self, budget: i64, apply_then_fail: bool) {
        self.apply_then_fail
            .store(apply_then_fail, Ordering::SeqCst);
        self.budget.store(budget, Ordering::SeqCst);
    }
    fn disarm(&self) {
        self.budget.store(i64::MAX, Ordering::SeqCst);
    }
    /// Ok(true): go ahead; Ok(false): apply then fail; Err: fail without applying.
    fn take(&self) -> Result<bool, Error> {
        if self.outage.load(Ordering::SeqCst) {
            return Err(Error::Store {
                op: "injected outage",
                path: String::new(),
                retried: false,
                source: object_store::Error::Generic {
                    store: "test",
                    source: "503 Service Unavailable".into(),
                },
            });
        }
        let left = self.budget.fetch_sub(1, Ordering::SeqCst);
        if left > 1 {
            Ok(true)
        } else if left == 1 && self.apply_then_fail.load(Ordering::SeqCst) {
            Ok(false)
        } else {
            Err(crash())
        }
    }
}

fn crash() -> Error {
    Error::State("injected crash".into())
}

#[derive(Debug)]
struct FaultStore {
    inner: Arc<dyn Store>,
    faults: Arc<Faults>,
    /// Upload ids the server created (whether or not the sink saw the answer).
    created: std::sync::Mutex<BTreeMap<String, String>>,
    /// Upload ids the sink recorded in a marker.
    marked: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

#[derive(Debug)]
struct FaultTemp {
    inner: Box<dyn TempFile>,
    faults: Arc<Faults>,
}

#[async_trait]
impl TempFile for FaultTemp {
    async fn write(&mut self, data: &[u8]) -> streamjob_storage::Result<()> {
        if self.faults.take()? {
            self.inner.write(data).await
        } else {
            // a torn write: half of it reaches the disk
            self.inner.write(&data[..data.len() / 2]).await?;
            Err(crash())
        }
    }
    async fn sync(&mut self) -> streamjob_storage::Result<()> {
        if self.faults.take()? {
            self.inner.sync().await
        } else {
            self.inner.sync().await?;
            Err(crash())
        }
    }
    async fn close(&mut self) -> streamjob_storage::Result<()> {
        if self.faults.take()? {
            self.inner.close().await
        } else {
            self.inner.close().await?;
            Err(crash())
        }
    }
}

macro_rules! guarded {
    ($self:ident, $call:expr) => {{
        if $self.faults.take()? {
            $call
        } else {
            $call?;
            Err(crash())
        }
    }};
}

#[async_trait]
impl Store for FaultStore {
    fn describe(&self) -> String {
        format!("faulty {}", self.inner.describe())
    }
    fn supports_multipart(&self) -> bool {
        self.inner.supports_multipart()
    }
    /// Outages outlast the retries in a fraction of a second, not a minute.
    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            budget: Duration::from_millis(400),
            initial: Duration::from_millis(20),
            max_delay: Duration::from_millis(100),
            ..RetryPolicy::default()
        }
    }
    async fn put(&self, key: &str, data: Bytes) -> streamjob_storage::Result<()> {
        let r = guarded!(self, self.inner.put(key, data.clone()).await);
        if key.starts_with(streamjob_filesink::sink::UPLOAD_MARKERS)
            && self.inner.head(key).await.unwrap().is_some()
        {
            // staging objects of small part files have temp-file markers here too
            if let Ok(m) = serde_json::from_slice::<streamjob_filesink::sink::UploadMarker>(&data) {
                self.marked.lock().unwrap().insert(m.upload_id);
            }
        }
        r
    }
    async fn put_new(&self, key: &str, data: Bytes) -> streamjob_storage::Result<bool> {
        guarded!(self, self.inner.put_new(key, data.clone()).await)
    }
    async fn get(&self, key: &str) -> streamjob_storage::Result<Bytes> {
        self.inner.get(key).await
    }
    async fn head(&self, key: &str) -> streamjob_storage::Result<Option<u64>> {
        self.inner.head(key).await
    }
    async fn list(&self, prefix: &str) -> streamjob_storage::Result<Vec<ObjectInfo>> {
        self.inner.list(prefix).await
    }
    async fn delete(&self, key: &str) -> streamjob_storage::Result<()> {
        guarded!(self, self.inner.delete(key).await)
    }
    async fn open_temp(
        &self,
        key: &str,
        resume_len: Option<u64>,
    ) -> streamjob_storage::Result<Box<dyn TempFile>> {
        self.faults.take()?;
        let inner = self.inner.open_temp(key, resume_len).await?;
        Ok(Box::new(FaultTemp {
            inner,
            faults: self.faults.clone(),
        }))
    }
    async fn rename(&self, from: &str, to: &str) -> streamjob_storage::Result<()> {
        guarded!(self, self.inner.rename(from, to).await)
    }
    async fn copy(&self, from: &str, to: &str) -> streamjob_storage::Result<()> {
        guarded!(self, self.inner.copy(from, to).await)
    }
    async fn create_multipart(&self, key: &str) -> streamjob_storage::Result<String> {
        let go = self.faults.take()?;
        let id = self.inner.create_multipart(key).await?;
        self.created
            .lock()
            .unwrap()
            .insert(id.clone(), key.to_string());
        if go { Ok(id) } else { Err(crash()) }
    }
    async fn put_part(
        &self,
        key: &str,
        upload_id: &str,
        part_idx: usize,
        data: Bytes,
    ) -> streamjob_storage::Result<String> {
        guarded!(
            self,
            self.inner
                .put_part(key, upload_id, part_idx, data.clone())
                .await
        )
    }
    async fn complete_multipart(
        &self,
        key: &str,
        upload_id: &str,
        etags: &[String],
    ) -> streamjob_storage::Result<()> {
        guarded!(
            self,
            self.inner.complete_multipart(key, upload_id, etags).await
        )
    }
    async fn abort_multipart(&self, key: &str, upload_id: &str) -> streamjob_storage::Result<()> {
        guarded!(self, self.inner.abort_multipart(key, upload_id).await)
    }
    async fn list_multipart_uploads(
        &self,
        prefix: &str,
    ) -> streamjob_storage::Result<Vec<streamjob_storage::store::OpenUpload>> {
        self.inner.list_multipart_uploads(prefix).await
    }
}

// ---------------------------------------------------------------------------------------------
// Input and job simulation
// ---------------------------------------------------------------------------------------------

const HOUR: i64 = 3_600_000;
const T0: i64 = 1_709_300_000_000; // 2024-03-01T13:33:20Z

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("ts", DataType::Int64, false),
        Field::new("key", DataType::Utf8, false),
        Field::new("payload", DataType::Utf8, false),
    ]))
}

/// Deterministic pseudo-random hex, so that compression cannot shrink it much.
fn payload(id: i64, len: usize) -> String {
    let mut x = (id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    let mut s = String::with_capacity(len + 8);
    s.push_str("a,\"b\" ");
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+-";
    while s.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        for k in 0..10 {
            s.push(ALPHABET[((x >> (k * 6)) & 63) as usize] as char);
        }
    }
    s.truncate(len.max(6));
    s
}

struct Input {
    batches: Vec<RecordBatch>,
    total: usize,
}

fn input(batches: usize, rows: usize, payload_len: usize) -> Input {
    let schema = schema();
    let mut out = Vec::new();
    for b in 0..batches {
        let ids: Vec<i64> = (0..rows).map(|r| (b * rows + r) as i64).collect();
        // event time spans ~4 hours over the input, a little out of order
        let ts: Vec<i64> = ids
            .iter()
            .map(|i| T0 + (i * 4 * HOUR) / (batches * rows) as i64 - (i % 7) * 60_000)
            .collect();
        let keys: Vec<String> = ids.iter().map(|i| format!("k{}", i % 3)).collect();
        let payloads: Vec<String> = ids.iter().map(|i| payload(*i, payload_len)).collect();
        out.push(
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int64Array::from(ids)),
                    Arc::new(Int64Array::from(ts)),
                    Arc::new(StringArray::from(keys)),
                    Arc::new(StringArray::from(payloads)),
                ],
            )
            .unwrap(),
        );
    }
    Input {
        batches: out,
        total: batches * rows,
    }
}

#[derive(Clone, Copy, Debug)]
enum Crash {
    /// Kill after this many mutating store calls; `true`: the last call takes effect first.
    Budget(i64, bool),
    /// Kill after the n-th checkpoint of the attempt completed, before notifying.
    BeforeNotify(u32),
    /// Kill after the n-th checkpoint's snapshots, before it completes.
    Uncompleted(u32),
    /// Run to the end.
    Never,
}

struct Completed {
    checkpoint_id: u64,
    position: usize,
    states: Vec<SinkSubtaskState>,
}

struct Job {
    spec: FileSinkSpec,
    store: Arc<dyn Store>,
    fault_store: Arc<FaultStore>,
    faults: Arc<Faults>,
    checkpoint_every: usize,
    completed: Option<Completed>,
    next_checkpoint: u64,
    options: FileSinkOptions,
    /// Most small files merged by compaction seen in one attempt.
    compacted: u64,
}

impl Job {
    fn new(spec: FileSinkSpec, inner: Arc<dyn Store>, checkpoint_every: usize) -> Self {
        let faults = Faults::new();
        let fault_store = Arc::new(FaultStore {
            inner,
            faults: faults.clone(),
            created: Default::default(),
            marked: Default::default(),
        });
        Self {
            spec,
            store: fault_store.clone(),
            fault_store,
            faults,
            checkpoint_every,
            completed: None,
            next_checkpoint: 1,
            options: FileSinkOptions {
                event_time_column: Some("ts".into()),
                part_size: None,
                event_times_beside_batches: false,
            },
            compacted: 0,
        }
    }

    /// One attempt from the last completed checkpoint. Ok(true): the input ended and everything
    /// was committed; Ok(false): crashed.
    async fn attempt(&mut self, input: &Input, parallelism: u32, crash: Crash) -> bool {
        self.faults.disarm();
        match crash {
            Crash::Budget(n, apply) => self.faults.arm(n, apply),
            _ => self.faults.disarm(),
        }
        let r = self.attempt_inner(input, parallelism, crash).await;
        self.faults.disarm();
        match r {
            Ok(done) => done,
            Err(e) => {
                assert!(
                    e.to_string().contains("injected crash"),
                    "unexpected error (not an injected crash): {e}"
                );
                false
            }
        }
    }

    async fn attempt_inner(
        &mut self,
        input: &Input,
        parallelism: u32,
        crash: Crash,
    ) -> Result<bool, streamjob_filesink::Error> {
        let (states, position) = match &self.completed {
            Some(c) => (c.states.clone(), c.position),
            None => (Vec::new(), 0),
        };
        let floor = max_next_counter(&states);
        let union = states.clone();
        let use_union = parallelism == 3;
        let mut assigned = redistribute(states, parallelism);
        let mut sinks = Vec::new();
        for i in 0..parallelism {
            let mut s = FileSink::new(
                &self.spec,
                self.store.clone(),
                i,
                parallelism,
                schema(),
                self.options.clone(),
            )?;
            if use_union {
                s.initialize_union(union.clone()).await?;
            } else {
                s.initialize(std::mem::take(&mut assigned[i as usize]), floor)
                    .await?;
            }
            sinks.push(s);
        }
        let mut checkpoints_in_attempt = 0u32;
        let mut now = T0 + position as i64 * 1000;
        let n = input.batches.len();
        for idx in position..=n {
            let at_end = idx == n;
            if !at_end {
                let sub = idx % parallelism as usize;
                sinks[sub].write(&input.batches[idx], now, None).await?;
                now += 1000;
                for s in &mut sinks {
                    s.on_processing_time(now).await?;
                }
            } else {
                for s in &mut sinks {
                    s.end_of_input().await?;
                }
            }
            let next = idx + 1;
            if at_end || next % self.checkpoint_every == 0 {
                let id = self.next_checkpoint;
                self.next_checkpoint += 1;
                let mut states = Vec::new();
                for s in &mut sinks {
                    let st = s.snapshot(id).await?;
                    // states travel serialised, as in the runtime
                    let json = serde_json::to_vec(&st).unwrap();
                    states.push(serde_json::from_slice(&json).unwrap());
                }
                checkpoints_in_attempt += 1;
                let compacted: u64 = sinks.iter().map(|s| s.metrics().files_compacted).sum();
                self.compacted = self.compacted.max(compacted);
                if let Crash::Uncompleted(k) = crash
                    && k == checkpoints_in_attempt
                {
                    return Err(crash_err().into());
                }
                self.completed = Some(Completed {
                    checkpoint_id: id,
                    position: if at_end { n } else { next },
                    states,
                });
                if let Crash::BeforeNotify(k) = crash
                    && k == checkpoints_in_attempt
                {
                    return Err(crash_err().into());
                }
                for s in &mut sinks {
                    s.notify_checkpoint_complete(id).await?;
                }
            }
        }
        for s in &sinks {
            assert_eq!(s.metrics().pending_files, 0);
        }
        Ok(true)
    }

    /// Runs attempts with the given crashes, then one without, and returns the number of attempts.
    async fn run(&mut self, input: &Input, plan: &[(u32, Crash)]) -> usize {
        let mut attempts = 0;
        for (p, c) in plan {
            attempts += 1;
            if self.attempt(input, *p, *c).await {
                return attempts;
            }
        }
        attempts += 1;
        assert!(
            self.attempt(input, 2, Crash::Never).await,
            "final attempt failed"
        );
        let c = self.completed.as_ref().unwrap();
        assert_eq!(c.position, input.batches.len());
        assert!(c.checkpoint_id > 0);
        attempts
    }
}

fn crash_err() -> Error {
    crash()
}

// ---------------------------------------------------------------------------------------------
// Reading back
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fmt {
    Json,
    CsvGzip,
    Parquet,
}

fn spec(path: &str, fmt: Fmt, max_part: &str) -> FileSinkSpec {
    let format = match fmt {
        Fmt::Json => SinkFormat {
            json_lines: Some(RowFormat {
                compression: RowCompression::None,
            }),
            ..Default::default()
        },
        Fmt::CsvGzip => SinkFormat {
            csv: Some(CsvFormat {
                compression: RowCompression::Gzip,
                ..Default::default()
            }),
            ..Default::default()
        },
        Fmt::Parquet => SinkFormat {
            parquet: Some(ParquetFormat {
                compression: ParquetCompression::Zstd,
                row_group_size: None,
            }),
            ..Default::default()
        },
    };
    FileSinkSpec {
        path: path.into(),
        format,
        bucket_assigner: Some(BucketAssignerSpec {
            date_time: Some(DateTimeBucketAssigner {
                format: "%Y-%m-%d--%H".into(),
                timezone: "UTC".into(),
                time: BucketTime::Event,
            }),
            ..Default::default()
        }),
        rolling_policy: Some(RollingPolicySpec {
            default: Some(DefaultRollingPolicy {
                max_part_size: max_part.into(),
                rollover_interval: "30s".into(),
                inactivity_interval: "7s".into(),
                bucket_check_interval: "2s".into(),
            }),
            on_checkpoint: None,
        }),
        output_file_config: None,
        compaction: None,
        success_marker: None,
    }
}

/// A finished data file: no path component is hidden (`.x`) or special (`_SUCCESS`).
fn is_finished(key: &str) -> bool {
    key.split('/')
        .all(|c| !c.starts_with('.') && !c.starts_with('_'))
}

fn decode_ids(fmt: Fmt, data: Bytes) -> Vec<i64> {
    let batches: Vec<RecordBatch> = match fmt {
        Fmt::Json => arrow::json::ReaderBuilder::new(schema())
            .build(std::io::Cursor::new(data))
            .unwrap()
            .map(|b| b.unwrap())
            .collect(),
        Fmt::CsvGzip => {
            let mut text = Vec::new();
            flate2::read::MultiGzDecoder::new(&data[..])
                .read_to_end(&mut text)
                .unwrap();
            arrow::csv::ReaderBuilder::new(schema())
                .with_header(true)
                .build(std::io::Cursor::new(text))
                .unwrap()
                .map(|b| b.unwrap())
                .collect()
        }
        Fmt::Parquet => {
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(data)
                .unwrap()
                .build()
                .unwrap()
                .map(|b| b.unwrap())
                .collect()
        }
    };
    let mut ids = Vec::new();
    for b in batches {
        let id = b.column_by_name("id").unwrap().as_primitive::<Int64Type>();
        let pl = b.column_by_name("payload").unwrap().as_string::<i32>();
        for i in 0..b.num_rows() {
            assert!(!id.is_null(i));
            assert_eq!(pl.value(i), payload(id.value(i), pl.value(i).len()));
            ids.push(id.value(i));
        }
    }
    ids
}

/// Asserts exactly-once: every input id in exactly one finished file. Returns (files, bytes).
async fn verify(store: &dyn Store, fmt: Fmt, input: &Input) -> (usize, u64) {
    let objects = store.list("").await.unwrap();
    let mut count: BTreeMap<i64, u32> = BTreeMap::new();
    let mut files = 0;
    let mut bytes = 0;
    for ObjectInfo { key, size } in objects.into_iter().filter(|o| is_finished(&o.key)) {
        let name = key.rsplit('/').next().unwrap();
        assert!(name.starts_with("part-"), "unexpected file {key}");
        files += 1;
        bytes += size;
        let data = store.get(&key).await.unwrap();
        for id in decode_ids(fmt, data) {
            *count.entry(id).or_default() += 1;
        }
    }
    let dup: Vec<_> = count.iter().filter(|(_, c)| **c > 1).take(5).collect();
    assert!(dup.is_empty(), "duplicated records: {dup:?}");
    let missing: Vec<i64> = (0..input.total as i64)
        .filter(|i| !count.contains_key(i))
        .take(5)
        .collect();
    assert!(
        missing.is_empty(),
        "missing records (first few): {missing:?}"
    );
    assert_eq!(count.len(), input.total);
    (files, bytes)
}

/// A crash plan touching many points: budgets small and large, torn and applied-then-lost
/// calls, kills before notify and of uncompleted checkpoints, and rescaling 2 → 3 → 1 → 2.
fn plan(budgets: &[i64]) -> Vec<(u32, Crash)> {
    let mut plan = Vec::new();
    let ps = [2u32, 3, 1, 2];
    for (i, b) in budgets.iter().enumerate() {
        plan.push((ps[i % ps.len()], Crash::Budget(*b, i % 2 == 1)));
        if i == 1 {
            plan.push((2, Crash::BeforeNotify(2)));
        }
        if i == 3 {
            plan.push((3, Crash::Uncompleted(1)));
            plan.push((1, Crash::BeforeNotify(1)));
        }
    }
    plan
}

// ---------------------------------------------------------------------------------------------
// Local file system
// ---------------------------------------------------------------------------------------------

async fn local_matrix(fmt: Fmt, compaction: bool) {
    let dir = tempfile::tempdir().unwrap();
    let inner: Arc<dyn Store> = Arc::new(LocalStore::new(dir.path()));
    let input = input(60, 50, 40);
    let max_part = if compaction { "1KiB" } else { "6KiB" };
    let mut s = spec(dir.path().to_str().unwrap(), fmt, max_part);
    if compaction {
        s.compaction = Some(streamjob_crds::v1alpha1::CompactionSpec {
            target_size: "64KiB".into(),
        });
    }
    let mut job = Job::new(s, inner.clone(), 4);
    let budgets = [1, 2, 5, 9, 17, 33, 64, 120, 3, 40, 77, 250];
    let attempts = job.run(&input, &plan(&budgets)).await;
    assert!(
        attempts > 10,
        "only {attempts} attempts: the crash plan did not bite"
    );
    let (files, _) = verify(inner.as_ref(), fmt, &input).await;
    // what the crashed attempts left (a temporary file per open part each) is gone: the last
    // attempt deleted it after its first checkpoint, and dropped every marker
    let left: Vec<String> = inner
        .list("")
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .filter(|k| k.contains(".inprogress.") || k.starts_with(".streamjob/"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    eprintln!(
        "local {fmt:?} compaction={compaction}: {attempts} attempts, {files} files, {} merged",
        job.compacted
    );
    assert!(
        files > 4,
        "expected rolling to produce many files, got {files}"
    );
    assert_eq!(
        compaction,
        job.compacted > 0,
        "compaction merged {} files",
        job.compacted
    );
}

#[tokio::test]
async fn local_exactly_once_json() {
    local_matrix(Fmt::Json, false).await;
    local_matrix(Fmt::Json, true).await;
}

#[tokio::test]
async fn local_exactly_once_csv_gzip() {
    local_matrix(Fmt::CsvGzip, false).await;
}

#[tokio::test]
async fn local_exactly_once_parquet() {
    local_matrix(Fmt::Parquet, false).await;
    local_matrix(Fmt::Parquet, true).await;
}

#[tokio::test]
async fn local_no_crash_names_counters_and_visibility() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(LocalStore::new(dir.path()));
    let mut s = spec(dir.path().to_str().unwrap(), Fmt::Json, "1MiB");
    s.bucket_assigner = Some(BucketAssignerSpec {
        field: Some(FieldBucketAssigner {
            fields: vec!["key".into()],
        }),
        ..Default::default()
    });
    let input = input(4, 30, 10);
    let mut sink = FileSink::new(
        &s,
        store.clone(),
        1,
        2,
        schema(),
        FileSinkOptions::default(),
    )
    .unwrap();
    sink.initialize(vec![], 7).await.unwrap();
    sink.write(&input.batches[0], T0, None).await.unwrap();
    // nothing visible before a checkpoint completes
    assert!(
        store
            .list("")
            .await
            .unwrap()
            .iter()
            .all(|o| !is_finished(&o.key))
    );
    let st1 = sink.snapshot(1).await.unwrap();
    assert_eq!(st1.in_progress.len(), 3);
    assert!(st1.pending.is_empty());
    sink.write(&input.batches[1], T0 + 1000, None)
        .await
        .unwrap();
    sink.end_of_input().await.unwrap();
    let st2 = sink.snapshot(2).await.unwrap();
    assert!(st2.in_progress.is_empty());
    assert_eq!(st2.pending.len(), 3);
    assert!(
        store
            .list("")
            .await
            .unwrap()
            .iter()
            .all(|o| !is_finished(&o.key))
    );
    sink.notify_checkpoint_complete(2).await.unwrap();
    let mut finished: Vec<String> = store
        .list("")
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .filter(|k| is_finished(k))
        .collect();
    finished.sort();
    assert_eq!(
        finished,
        vec![
            "key=k0/part-1-7.json",
            "key=k1/part-1-8.json",
            "key=k2/part-1-9.json"
        ]
    );
    // recommit of the same state after a restore: no duplicates, no error
    let mut again = FileSink::new(
        &s,
        store.clone(),
        0,
        1,
        schema(),
        FileSinkOptions::default(),
    )
    .unwrap();
    again
        .initialize(
            vec![st2.clone()],
            max_next_counter(std::slice::from_ref(&st2)),
        )
        .await
        .unwrap();
    assert_eq!(again.metrics().files_committed, 3);
    again.write(&input.batches[2], T0, None).await.unwrap();
    let st3 = again.snapshot(3).await.unwrap();
    // counters continue above the restored maximum, with the new subtask index
    assert_eq!(st3.in_progress[0].counter, 10);
    assert!(st3.in_progress[0].final_key.contains("part-0-10.json"));
    let all: Vec<i64> = {
        let mut v = Vec::new();
        for k in &finished {
            v.extend(decode_ids(Fmt::Json, store.get(k).await.unwrap()));
        }
        v.sort();
        v
    };
    assert_eq!(all, (0..60).collect::<Vec<i64>>());
}

#[tokio::test]
async fn store_outage_stalls_commits_and_checkpoints_without_loss_or_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let inner: Arc<dyn Store> = Arc::new(LocalStore::new(dir.path()));
    let mut job = Job::new(
        spec(dir.path().to_str().unwrap(), Fmt::Json, "1MiB"),
        inner.clone(),
        1000,
    );
    let input = input(6, 20, 10);
    let mut sink = FileSink::new(
        &job.spec,
        job.store.clone(),
        0,
        1,
        schema(),
        job.options.clone(),
    )
    .unwrap();
    sink.initialize(vec![], 0).await.unwrap();
    sink.write(&input.batches[0], T0, None).await.unwrap();
    sink.end_of_input().await.unwrap();
    let st1 = sink.snapshot(1).await.unwrap();
    // outage while committing: the notification fails, files stay pending and invisible
    job.faults.outage.store(true, Ordering::SeqCst);
    let err = sink.notify_checkpoint_complete(1).await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert!(sink.metrics().pending_files > 0);
    assert!(sink.metrics().commit_failures > 0);
    assert!(
        inner
            .list("")
            .await
            .unwrap()
            .iter()
            .all(|o| !is_finished(&o.key))
    );
    // the outage stalls the next checkpoint too (a new part cannot even be opened)
    sink.write(&input.batches[1], T0, None).await.unwrap_err();
    job.faults.outage.store(false, Ordering::SeqCst);
    // the runtime restores from checkpoint 1 and replays the input after it
    drop(sink);
    job.completed = Some(Completed {
        checkpoint_id: 1,
        position: 1,
        states: vec![st1],
    });
    job.next_checkpoint = 2;
    assert!(job.attempt(&input, 1, Crash::Never).await);
    verify(inner.as_ref(), Fmt::Json, &input).await;
    // and pending files retried by a later notification commit once the store is back
    let dir2 = tempfile::tempdir().unwrap();
    let inner2: Arc<dyn Store> = Arc::new(LocalStore::new(dir2.path()));
    let job2 = Job::new(
        spec(dir2.path().to_str().unwrap(), Fmt::Json, "1MiB"),
        inner2.clone(),
        1000,
    );
    let mut sink = FileSink::new(
        &job2.spec,
        job2.store.clone(),
        0,
        1,
        schema(),
        job2.options.clone(),
    )
    .unwrap();
    sink.initialize(vec![], 0).await.unwrap();
    for (i, b) in input.batches.iter().enumerate() {
        sink.write(b, T0, None).await.unwrap();
        sink.end_of_input().await.unwrap();
        sink.snapshot(i as u64 + 1).await.unwrap();
        job2.faults.outage.store(i % 2 == 0, Ordering::SeqCst);
        let r = sink.notify_checkpoint_complete(i as u64 + 1).await;
        assert_eq!(r.is_err(), i % 2 == 0);
        job2.faults.outage.store(false, Ordering::SeqCst);
    }
    assert_eq!(sink.metrics().pending_files, 0);
    verify(inner2.as_ref(), Fmt::Json, &input).await;
}

#[tokio::test]
async fn success_marker_after_watermark_passes_bucket() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(LocalStore::new(dir.path()));
    let mut s = spec(dir.path().to_str().unwrap(), Fmt::Json, "1MiB");
    s.success_marker = Some(SuccessMarkerSpec {
        allowed_lateness: Some("10m".into()),
    });
    let input = input(8, 25, 10); // ~4 hours of event time
    let opts = FileSinkOptions {
        event_time_column: Some("ts".into()),
        part_size: None,
        event_times_beside_batches: false,
    };
    let mut sink = FileSink::new(&s, store.clone(), 0, 1, schema(), opts).unwrap();
    sink.initialize(vec![], 0).await.unwrap();
    for b in &input.batches[..4] {
        sink.write(b, T0, None).await.unwrap();
    }
    // watermark at 15:05 with 10m lateness: the 13h bucket is closed, the 14h one is not
    sink.on_watermark(T0 + HOUR + 2 * HOUR / 3 - 60_000)
        .await
        .unwrap();
    sink.snapshot(1).await.unwrap();
    sink.notify_checkpoint_complete(1).await.unwrap();
    // watermark 15:12:20 minus 10m lateness: the 13h and 14h buckets are closed, 15h is not
    assert_eq!(
        store.head("2024-03-01--13/_SUCCESS").await.unwrap(),
        Some(0)
    );
    assert_eq!(
        store.head("2024-03-01--14/_SUCCESS").await.unwrap(),
        Some(0)
    );
    assert_eq!(store.head("2024-03-01--15/_SUCCESS").await.unwrap(), None);
    assert!(
        store
            .list("2024-03-01--15")
            .await
            .unwrap()
            .iter()
            .any(|o| o.key.contains(".inprogress."))
    );
    // the closed bucket's files are all finished
    let in13: Vec<_> = store.list("2024-03-01--13").await.unwrap();
    assert!(
        in13.iter().all(|o| !o.key.contains(".inprogress.")),
        "{in13:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// MinIO
// ---------------------------------------------------------------------------------------------

fn minio_binary() -> Option<std::path::PathBuf> {
    if let Ok(p) = std::env::var("STREAMJOB_MINIO_BIN") {
        return Some(p.into());
    }
    let cache = std::env::var("STREAMJOB_CACHE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| {
            std::path::PathBuf::from(std::env::var("HOME").unwrap_or_default())
                .join(".cache/streamjob")
        });
    let env = std::fs::read_to_string(cache.join("e2e-env.sh")).ok()?;
    env.lines().find_map(|l| {
        let v = l.strip_prefix("export STREAMJOB_E2E_MINIO=")?;
        let p = std::path::PathBuf::from(v.trim_matches(|c| c == '\'' || c == '"'));
        p.exists().then_some(p)
    })
}

struct Minio {
    child: tokio::process::Child,
    endpoint: String,
    _dir: tempfile::TempDir,
}

impl Drop for Minio {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

const MINIO_USER: &str = "streamjob";
const MINIO_PASSWORD: &str = "streamjob-secret";

async fn start_minio() -> Option<Minio> {
    if std::env::var("STREAMJOB_SKIP_MINIO").as_deref() == Ok("1") {
        eprintln!("STREAMJOB_SKIP_MINIO=1: skipping the MinIO tests");
        return None;
    }
    let bin = minio_binary().unwrap_or_else(|| {
        panic!(
            "MinIO binary not found (env STREAMJOB_MINIO_BIN or STREAMJOB_E2E_MINIO in \
             $STREAMJOB_CACHE/e2e-env.sh): run `bash e2e/scripts/install.sh` \
             (or set STREAMJOB_SKIP_MINIO=1 to skip explicitly)"
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let child = tokio::process::Command::new(&bin)
        .arg("server")
        .arg(dir.path().join("data"))
        .arg("--address")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--console-address")
        .arg("127.0.0.1:0")
        .env("MINIO_ROOT_USER", MINIO_USER)
        .env("MINIO_ROOT_PASSWORD", MINIO_PASSWORD)
        .env("MINIO_BROWSER", "off")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
    let endpoint = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    // live first (the process serves HTTP), then ready (it accepts S3 requests)
    for probe in ["live", "ready"] {
        loop {
            if let Ok(r) = client
                .get(format!("{endpoint}/minio/health/{probe}"))
                .send()
                .await
                && r.status().is_success()
            {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "MinIO did not become {probe}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    Some(Minio {
        child,
        endpoint,
        _dir: dir,
    })
}

fn minio_store(m: &Minio, bucket: &str, prefix: &str) -> Arc<dyn Store> {
    let client = object_store::aws::AmazonS3Builder::new()
        .with_endpoint(&m.endpoint)
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_bucket_name(bucket)
        .with_access_key_id(MINIO_USER)
        .with_secret_access_key(MINIO_PASSWORD)
        .build()
        .unwrap();
    Arc::new(
        streamjob_storage::store::CloudStore::s3(client, bucket, prefix).with_s3_endpoint(
            Some(&m.endpoint),
            "us-east-1",
            false,
        ),
    )
}

/// Creates a bucket (object_store cannot): a SigV4-signed `PUT /bucket`.
async fn create_bucket(m: &Minio, bucket: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (status, body) = try_create_bucket(m, bucket).await;
        if status.is_success() {
            return;
        }
        // MinIO answers 503 XMinioServerNotInitialized for a moment after it reports ready
        assert!(
            status == reqwest::StatusCode::SERVICE_UNAVAILABLE
                && std::time::Instant::now() < deadline,
            "create bucket: {status} {body}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

async fn try_create_bucket(m: &Minio, bucket: &str) -> (reqwest::StatusCode, String) {
    signed(m, reqwest::Method::PUT, &format!("/{bucket}"), &[]).await
}

/// Whether a multipart upload is still open (S3 ListParts: 200 open, 404 NoSuchUpload gone).
async fn upload_open(m: &Minio, bucket: &str, key: &str, upload_id: &str) -> bool {
    let path = format!("/{bucket}/{}", uri_encode(key, true));
    let (status, body) = signed(m, reqwest::Method::GET, &path, &[("uploadId", upload_id)]).await;
    match status.as_u16() {
        200 => true,
        404 => false,
        _ => panic!("list parts of {key}: {status} {body}"),
    }
}

/// A SigV4-signed request without body; `query` holds unencoded `(name, value)` pairs.
async fn signed(
    m: &Minio,
    method: reqwest::Method,
    path: &str,
    query: &[(&str, &str)],
) -> (reqwest::StatusCode, String) {
    let req = s3_api::request(
        &reqwest::Client::new(),
        method,
        &m.endpoint,
        path,
        query,
        "us-east-1",
        &s3_api::Credentials {
            key_id: MINIO_USER,
            secret_key: MINIO_PASSWORD,
            token: None,
        },
    )
    .unwrap();
    let r = req.send().await.unwrap();
    let status = r.status();
    (status, r.text().await.unwrap_or_default())
}

async fn minio_matrix(m: &Minio, fmt: Fmt, bucket: &str) {
    let inner = minio_store(m, bucket, &format!("out-{fmt:?}"));
    let job = cloud_stores::cloud_matrix("MinIO", inner.clone(), fmt).await;
    // every upload the sink recorded was completed or aborted; what is left open was created
    // by a call whose answer was lost (or killed before its marker): the bucket's
    // AbortIncompleteMultipartUpload lifecycle rule is the safety net for those
    let created = job.fault_store.created.lock().unwrap().clone();
    let marked = job.fault_store.marked.lock().unwrap().clone();
    let mut open = Vec::new();
    for (id, key) in &created {
        if upload_open(m, bucket, &format!("out-{fmt:?}/{key}"), id).await {
            open.push(id.clone());
        }
    }
    eprintln!(
        "MinIO {fmt:?}: {} uploads created, {} recorded in markers, {} open at the end",
        created.len(),
        marked.len(),
        open.len()
    );
    for id in &open {
        assert!(
            !marked.contains(id),
            "recorded upload {id} was neither completed nor aborted"
        );
    }
}

#[tokio::test]
async fn minio_exactly_once_json_csv_gzip_parquet() {
    let Some(m) = start_minio().await else { return };
    // idempotent recommit on a real S3 server: a second completion fails, HEAD+size decides
    create_bucket(&m, "recommit").await;
    let store = minio_store(&m, "recommit", "x");
    let mut part = streamjob_filesink::part::PartStream::open(store.as_ref(), "b/f", 0)
        .await
        .unwrap();
    part.write(store.as_ref(), "b/f", vec![7u8; (5 << 20) + 10])
        .await
        .unwrap();
    part.write(store.as_ref(), "b/f", vec![8u8; 100])
        .await
        .unwrap();
    let rec = part.persist().await.unwrap();
    assert!(matches!(
        &rec,
        streamjob_filesink::part::Recoverable::Multipart { etags, tail, .. }
            if etags.len() == 1 && tail.len() == 100
    ));
    let c = part.close(store.as_ref(), "b/f").await.unwrap();
    let streamjob_filesink::part::Committable::Multipart { upload_id, .. } = &c else {
        unreachable!()
    };
    assert!(upload_open(&m, "recommit", "x/b/f", upload_id).await);
    let empty = store.create_multipart("b/empty").await.unwrap();
    assert!(upload_open(&m, "recommit", "x/b/empty", &empty).await);
    store.abort_multipart("b/empty", &empty).await.unwrap();
    assert!(!upload_open(&m, "recommit", "x/b/empty", &empty).await);
    assert_eq!(
        store.head("b/f").await.unwrap(),
        None,
        "pending must be invisible"
    );
    streamjob_filesink::part::commit(store.as_ref(), "b/f", &c)
        .await
        .unwrap();
    assert_eq!(store.head("b/f").await.unwrap(), Some((5 << 20) + 110));
    assert!(!upload_open(&m, "recommit", "x/b/f", upload_id).await);
    assert!(
        store
            .complete_multipart(
                "b/f",
                match &c {
                    streamjob_filesink::part::Committable::Multipart { upload_id, .. } => upload_id,
                    _ => unreachable!(),
                },
                &[]
            )
            .await
            .is_err()
    );
    streamjob_filesink::part::commit(store.as_ref(), "b/f", &c)
        .await
        .unwrap();
    // resuming a part that was committed meanwhile is recognised by HEAD
    assert!(
        streamjob_filesink::part::PartStream::resume(store.as_ref(), "b/f", &rec, 0)
            .await
            .unwrap()
            .is_none(),
        "committed meanwhile: nothing to resume"
    );

    // a part file below one part is staged whole and committed by a copy: invisible until the
    // commit, committed again as a no-op, its staging object gone afterwards
    let mut small = streamjob_filesink::part::PartStream::open(store.as_ref(), "b/s", 0)
        .await
        .unwrap();
    small
        .write(store.as_ref(), "b/s", vec![9u8; 1000])
        .await
        .unwrap();
    assert!(small.fits_one_object(10));
    let staging = streamjob_filesink::part::temp_key_for("b/s");
    let c = small.close_staged(store.as_ref(), &staging).await.unwrap();
    assert_eq!(store.head(&staging).await.unwrap(), Some(1000));
    assert_eq!(
        store.head("b/s").await.unwrap(),
        None,
        "pending must be invisible"
    );
    streamjob_filesink::part::commit(store.as_ref(), "b/s", &c)
        .await
        .unwrap();
    assert_eq!(store.head("b/s").await.unwrap(), Some(1000));
    assert_eq!(store.head(&staging).await.unwrap(), None);
    streamjob_filesink::part::commit(store.as_ref(), "b/s", &c)
        .await
        .unwrap();
    // the parts of an upload are gone (what an interrupted completion leaves on MinIO): the
    // commit names the file as lost instead of failing with the store's bare error
    let lost = store.create_multipart("b/lost").await.unwrap();
    let gone = streamjob_filesink::part::Committable::Multipart {
        upload_id: lost.clone(),
        etags: vec!["\"0123456789abcdef0123456789abcdef\"".into()],
        size: 10,
    };
    let err = streamjob_filesink::part::commit(store.as_ref(), "b/lost", &gone)
        .await
        .unwrap_err();
    assert!(
        matches!(err, streamjob_filesink::Error::DataLoss(ref m) if m.contains("b/lost") && m.contains(&lost)),
        "{err:?}"
    );
    store.abort_multipart("b/lost", &lost).await.unwrap();

    for (i, fmt) in [Fmt::Json, Fmt::CsvGzip, Fmt::Parquet]
        .into_iter()
        .enumerate()
    {
        let bucket = format!("sink{i}");
        create_bucket(&m, &bucket).await;
        minio_matrix(&m, fmt, &bucket).await;
    }
}

/// Issue #5, orphans no marker recorded: on restore the sink lists the open multipart uploads
/// (ListMultipartUploads) and aborts those of its subtask index with a part counter at or above
/// the restored floor (started after the checkpoint by a dead instance); it leaves alone parts
/// with lower counters, other subtasks' parts and foreign keys.
#[tokio::test]
async fn minio_restore_aborts_orphan_uploads_found_by_listing() {
    let Some(m) = start_minio().await else { return };
    create_bucket(&m, "orphans").await;
    let store = minio_store(&m, "orphans", "o");
    // the listing itself: keys relative to the root, nothing outside the prefix
    let outside = minio_store(&m, "orphans", "o2");
    let elsewhere = outside.create_multipart("part-0-9.json").await.unwrap();
    let mut s = spec("s3://ignored", Fmt::Json, "64MiB");
    s.bucket_assigner = Some(BucketAssignerSpec {
        base_path: Some(streamjob_crds::v1alpha1::EmptySpec {}),
        ..Default::default()
    });
    let opts = FileSinkOptions {
        event_time_column: Some("ts".into()),
        part_size: None,
        event_times_beside_batches: false,
    };
    let data = input(4, 100, 200);
    // first instance: one checkpoint (in-progress part-0-0 with a tail), then a crash
    let mut a = FileSink::new(&s, store.clone(), 0, 2, schema(), opts.clone()).unwrap();
    a.initialize(vec![], 0).await.unwrap();
    a.write(&data.batches[0], T0, None).await.unwrap();
    let st = a.snapshot(1).await.unwrap();
    a.notify_checkpoint_complete(1).await.unwrap();
    assert_eq!(st.next_counter, 1);
    drop(a);
    // uploads the dead instance started after the checkpoint without recording them
    // (creation answer lost / killed before the marker), and some that must survive
    let orphan = store.create_multipart("part-0-1.json").await.unwrap();
    let orphan_later = store.create_multipart("part-0-7.json").await.unwrap();
    let other_subtask = store.create_multipart("part-1-3.json").await.unwrap();
    let below_floor = store.create_multipart("part-0-0.json").await.unwrap();
    let foreign = store.create_multipart("notes.json").await.unwrap();
    // the listing (MinIO answers for exact keys only; S3 for any prefix): keys relative to the
    // root, nothing of another prefix
    let listed = store.list_multipart_uploads("part-0-1.json").await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].key, "part-0-1.json");
    assert_eq!(listed[0].upload_id, orphan);
    assert!(
        store
            .list_multipart_uploads("part-0-9.json")
            .await
            .unwrap()
            .is_empty()
    );
    // restore from checkpoint 1
    let mut b = FileSink::new(&s, store.clone(), 0, 2, schema(), opts.clone()).unwrap();
    b.initialize(
        vec![st.clone()],
        max_next_counter(std::slice::from_ref(&st)),
    )
    .await
    .unwrap();
    assert_eq!(b.metrics().orphans_aborted, 2);
    assert!(!upload_open(&m, "orphans", "o/part-0-1.json", &orphan).await);
    assert!(!upload_open(&m, "orphans", "o/part-0-7.json", &orphan_later).await);
    assert!(upload_open(&m, "orphans", "o/part-1-3.json", &other_subtask).await);
    assert!(upload_open(&m, "orphans", "o/part-0-0.json", &below_floor).await);
    assert!(upload_open(&m, "orphans", "o/notes.json", &foreign).await);
    assert!(upload_open(&m, "orphans", "o2/part-0-9.json", &elsewhere).await);
    // the restored instance goes on as usual: everything ends in finished files exactly once
    for batch in &data.batches[1..] {
        b.write(batch, T0, None).await.unwrap();
    }
    b.end_of_input().await.unwrap();
    b.snapshot(2).await.unwrap();
    b.notify_checkpoint_complete(2).await.unwrap();
    let mut ids = Vec::new();
    for o in store.list("").await.unwrap() {
        if is_finished(&o.key) {
            ids.extend(decode_ids(Fmt::Json, store.get(&o.key).await.unwrap()));
        }
    }
    ids.sort_unstable();
    assert_eq!(ids, (0..data.total as i64).collect::<Vec<_>>());
    // subtask 1 restores (with its own, here empty, share): it takes part-1-3 (counter ≥ 1)
    let mut c = FileSink::new(&s, store.clone(), 1, 2, schema(), opts).unwrap();
    c.initialize(vec![], 1).await.unwrap();
    assert_eq!(c.metrics().orphans_aborted, 1);
    assert!(!upload_open(&m, "orphans", "o/part-1-3.json", &other_subtask).await);
    assert!(upload_open(&m, "orphans", "o/part-0-0.json", &below_floor).await);
}

// ---------------------------------------------------------------------------------------------
// HDFS (feature `hdfs`): a MiniDFS cluster from the hadoop-client-minicluster Maven artifact
// ---------------------------------------------------------------------------------------------

/// What checkpoints, savepoints and fencing need of a directory of any store (the runtime's
/// `Location` is such a view): sub-directories, ranges, create-if-absent, not-found, removal.
async fn check_directory_view(ck: &dyn Store) {
    ck.put("chk-1/_metadata", Bytes::from_static(b"m1"))
        .await
        .unwrap();
    ck.put("chk-2/state/0", Bytes::from_static(b"0123456789"))
        .await
        .unwrap();
    assert_eq!(ck.list_dirs("").await.unwrap(), vec!["chk-1", "chk-2"]);
    assert_eq!(
        &ck.get_range("chk-2/state/0", 2..5).await.unwrap()[..],
        b"234"
    );
    let first = ck.put_new("fence/e3", Bytes::from_static(b"a")).await;
    assert!(first.unwrap(), "the name was free");
    let second = ck.put_new("fence/e3", Bytes::from_static(b"b")).await;
    assert!(!second.unwrap(), "the name was taken");
    assert_eq!(&ck.get("fence/e3").await.unwrap()[..], b"a");
    let missing = ck.get("chk-9/_metadata").await.unwrap_err();
    assert!(missing.is_not_found(), "{missing}");
    ck.delete_dir("chk-2").await.unwrap();
    let keys: Vec<_> = ck
        .list("")
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect();
    assert_eq!(keys, vec!["chk-1/_metadata", "fence/e3"]);
    assert_eq!(ck.list_dirs("").await.unwrap(), vec!["chk-1", "fence"]);
}

#[tokio::test]
async fn local_directory_view_serves_checkpoints_and_fencing() {
    let dir = tempfile::tempdir().unwrap();
    let root = streamjob_storage::store::open(dir.path().to_str().unwrap(), None).unwrap();
    let ck = root.child("ck/job");
    check_directory_view(&ck).await;
    assert_eq!(root.head("ck/job/chk-1/_metadata").await.unwrap(), Some(2));
    assert!(!dir.path().join("ck/job/chk-2").exists());
    assert_eq!(
        ck.describe(),
        format!("file://{}/ck/job", dir.path().display())
    );
}

#[cfg(feature = "hdfs")]
#[path = "../../tools/minidfs/launch.rs"]
mod minidfs;

// GCS and Azure on their emulators
#[path = "filesink/cloud_stores.rs"]
mod cloud_stores;

#[cfg(feature = "hdfs")]
#[tokio::test]
async fn hdfs_exactly_once_json_csv_gzip_parquet() {
    let dfs = minidfs::start();
    for fmt in [Fmt::Json, Fmt::CsvGzip, Fmt::Parquet] {
        let root = format!("/sink-{fmt:?}");
        let inner: Arc<dyn Store> =
            Arc::new(streamjob_storage::hdfs::HdfsStore::new(&dfs.url, &root).unwrap());
        let input = input(24, 50, 40);
        let mut job = Job::new(spec(&root, fmt, "6KiB"), inner.clone(), 4);
        let budgets = [1, 2, 5, 9, 17, 33, 3, 40];
        let attempts = job.run(&input, &plan(&budgets)).await;
        let (files, bytes) = verify(inner.as_ref(), fmt, &input).await;
        eprintln!("HDFS {fmt:?}: {attempts} attempts, {files} files, {bytes} bytes");
        assert!(attempts >= 6, "only {attempts} attempts");
    }
    // what checkpoints, savepoints and fencing use, on a view of the process's HDFS client
    let ck = streamjob_storage::store::open(&format!("{}/ck/job", dfs.url), None).unwrap();
    check_directory_view(&ck).await;
}

#[tokio::test]
async fn counters_continue_above_every_old_subtask_after_rescale() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(LocalStore::new(dir.path()));
    let mut s = spec(dir.path().to_str().unwrap(), Fmt::Json, "1MiB");
    s.bucket_assigner = Some(BucketAssignerSpec {
        base_path: Some(streamjob_crds::v1alpha1::EmptySpec {}),
        ..Default::default()
    });
    let input = input(12, 10, 10);
    // old job: 2 subtasks; subtask 1 rolls many more files than subtask 0
    let mut states = Vec::new();
    for sub in 0..2u32 {
        let mut sink = FileSink::new(
            &s,
            store.clone(),
            sub,
            2,
            schema(),
            FileSinkOptions::default(),
        )
        .unwrap();
        sink.initialize(vec![], 0).await.unwrap();
        let n = if sub == 0 { 1 } else { 5 };
        for b in &input.batches[sub as usize * 5..sub as usize * 5 + n] {
            sink.write(b, T0, None).await.unwrap();
            sink.end_of_input().await.unwrap();
        }
        sink.write(&input.batches[10 + sub as usize], T0, None)
            .await
            .unwrap();
        states.push(sink.snapshot(1).await.unwrap());
    }
    assert_eq!(states[0].next_counter, 2);
    assert_eq!(states[1].next_counter, 6);
    // new job: 3 subtasks, every one gets the union
    let mut names = Vec::new();
    for sub in 0..3u32 {
        let mut sink = FileSink::new(
            &s,
            store.clone(),
            sub,
            3,
            schema(),
            FileSinkOptions::default(),
        )
        .unwrap();
        sink.initialize_union(states.clone()).await.unwrap();
        sink.write(&input.batches[sub as usize], T0, None)
            .await
            .unwrap();
        let st = sink.snapshot(2).await.unwrap();
        // subtask 2 has no old state but still starts above subtask 1's counters
        let fresh: Vec<_> = st.in_progress.iter().filter(|f| f.counter >= 6).collect();
        assert!(!fresh.is_empty() || sub < 2, "subtask {sub}: {st:?}");
        names.extend(st.in_progress.iter().map(|f| f.final_key.clone()));
        sink.end_of_input().await.unwrap();
        sink.snapshot(3).await.unwrap();
        sink.notify_checkpoint_complete(3).await.unwrap();
    }
    // old subtasks' resumed files keep their names, new files never reuse a name
    let finished: Vec<String> = store
        .list("")
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .filter(|k| is_finished(k))
        .collect();
    let unique: std::collections::BTreeSet<_> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "{names:?}");
    assert_eq!(names.len(), 3);
    assert!(
        finished.contains(&"part-2-6.json".to_string()),
        "{finished:?}"
    );
    assert!(
        finished.iter().any(|k| k.starts_with("part-1-5")),
        "{finished:?}"
    );
}
