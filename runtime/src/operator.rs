//! The operator contract: what every built-in, custom and sink operator implements.
//!
//! # Life cycle of one operator subtask
//!
//! 1. The factory ([`crate::registry::OperatorFactory`]) builds the operator for subtask `i` of `p`.
//! 2. [`Operator::initialize_state`] is called exactly once, before any data, with the state this
//!    subtask restores ([`RestoredState`], empty on a fresh start). Keyed state arrives for the
//!    key groups this subtask owns, whatever the parallelism was when it was written.
//! 3. [`Operator::process_batch`] for each input batch; [`Operator::process_watermark`] whenever the
//!    combined input watermark advances (`i64::MAX` at the end of a bounded input: flush everything).
//! 4. On checkpoint barrier alignment: [`Operator::snapshot_state`] for checkpoint `id`. Everything
//!    the operator has received before the barrier must be covered by the returned snapshot (for a
//!    sink: data written so far must be *pending* and recorded in the snapshot, not yet visible).
//! 5. [`Operator::notify_checkpoint_complete`] once checkpoint `id` is complete (its `_metadata` is
//!    written). A sink makes pending data visible here. Notifications can be skipped (a later id
//!    subsumes earlier ones: commit everything pending up to `id`), and are not sent for savepoints
//!    taken without `stop` (the next checkpoint commits that data). Commits must be idempotent: after
//!    a failure the same pending data can be committed again from restored state.
//! 6. Optionally, [`Operator::on_timer`] every [`Operator::timer_interval`] (processing time).
//! 7. A subtask ends after a stop-with-savepoint or after the final checkpoint of a bounded job;
//!    the last call it receives is `notify_checkpoint_complete` for that savepoint/checkpoint.
//!
//! All methods are `async` so sinks can talk to object stores; operators run on a tokio runtime.
//! Errors fail the subtask; the coordinator then restarts the whole job from the latest completed
//! checkpoint.

use std::collections::BTreeMap;
use std::future::Future;
use std::ops::RangeInclusive;
use std::pin::Pin;
use std::sync::Arc;

use arrow::array::{Array, BooleanArray, Int64Array, RecordBatch, UInt32Array};
use arrow::compute::{filter, filter_record_batch, take, take_record_batch};
use arrow::datatypes::SchemaRef;
use serde::{Deserialize, Serialize};
use streamjob_crds::v1alpha1::BadRecordPolicy;

use crate::error::{Error, Result};
use crate::metrics::OperatorMetrics;

/// A micro-batch of records with their event times (milliseconds since the epoch), kept beside
/// the columns so that projections cannot lose them.
#[derive(Clone, Debug)]
pub struct DataBatch {
    /// The records.
    pub records: RecordBatch,
    /// Event time of each record, same length as `records`.
    pub event_time: Int64Array,
}

impl DataBatch {
    /// A batch; `event_time` must have one entry per row.
    pub fn new(records: RecordBatch, event_time: Int64Array) -> Result<Self> {
        if records.num_rows() != event_time.len() {
            return Err(Error::Other(format!(
                "batch has {} rows but {} event times",
                records.num_rows(),
                event_time.len()
            )));
        }
        Ok(Self {
            records,
            event_time,
        })
    }

    /// Number of records.
    pub fn num_rows(&self) -> usize {
        self.records.num_rows()
    }

    /// Schema of the records.
    pub fn schema(&self) -> SchemaRef {
        self.records.schema()
    }

    /// Keeps the rows where `mask` is true.
    pub fn filter(&self, mask: &BooleanArray) -> Result<Self> {
        let records = filter_record_batch(&self.records, mask)?;
        let ts = filter(&self.event_time, mask)?;
        let event_time = ts
            .as_any()
            .downcast_ref::<Int64Array>()
            .cloned()
            .ok_or_else(|| Error::Other("event time column is not Int64".into()))?;
        Ok(Self {
            records,
            event_time,
        })
    }

    /// The rows at `indices`, in that order.
    pub fn take(&self, indices: &UInt32Array) -> Result<Self> {
        let records = take_record_batch(&self.records, indices)?;
        let ts = take(&self.event_time, indices, None)?;
        let event_time = ts
            .as_any()
            .downcast_ref::<Int64Array>()
            .cloned()
            .ok_or_else(|| Error::Other("event time column is not Int64".into()))?;
        Ok(Self {
            records,
            event_time,
        })
    }
}

/// Where an operator puts its output. The driver sends it downstream after each call.
#[derive(Default, Debug)]
pub struct Collector {
    pub(crate) batches: Vec<DataBatch>,
    pub(crate) bad_records: Vec<BadRecord>,
}

/// A record an operator could not process.
#[derive(Debug, Clone)]
pub struct BadRecord {
    /// The record as JSON (or its raw text for sources).
    pub record: String,
    /// Why it was rejected.
    pub reason: String,
    /// Where a source read it; dead letters with an origin are written exactly once.
    pub origin: Option<RecordOrigin>,
}

/// Where a source read a record: the same record read again (after a restore) has the same
/// origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordOrigin {
    /// A file's path or a Kafka `topic/partition`; a path of the dead-letter objects.
    pub stream: String,
    /// Groups records of a stream into one dead-letter object; chosen by the source so that a
    /// replay puts a record in the same group.
    pub bucket: u64,
    /// The record's position in the stream (byte offset in a file, Kafka offset).
    pub offset: u64,
}

/// The longest excerpt of a bad record quoted in error messages, logs, status and events.
pub const EXCERPT_BYTES: usize = 256;

/// A short, printable excerpt of a record: its first [`EXCERPT_BYTES`] bytes, and its size when
/// it is longer, so one bad record never floods a log line or a status.
pub fn excerpt(record: &str) -> String {
    if record.len() <= EXCERPT_BYTES {
        return record.to_string();
    }
    let mut cut = EXCERPT_BYTES;
    while !record.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}… ({} bytes in all)", &record[..cut], record.len())
}

impl Collector {
    /// Emits a batch downstream (empty batches are dropped).
    pub fn emit(&mut self, batch: DataBatch) {
        if batch.num_rows() > 0 {
            self.batches.push(batch);
        }
    }

    /// Reports a record the operator could not process. What happens next follows the step's
    /// `onBadRecord` policy: the subtask fails (`fail`), or the record is counted and dropped
    /// (`skip`) or written to `deadLetterPath` (`deadLetter`).
    pub fn bad_record(&mut self, record: String, reason: String) {
        self.bad_records.push(BadRecord {
            record,
            reason,
            origin: None,
        });
    }

    /// [`Collector::bad_record`] for a source that knows where it read the record.
    pub fn bad_record_at(&mut self, origin: RecordOrigin, record: String, reason: String) {
        self.bad_records.push(BadRecord {
            record,
            reason,
            origin: Some(origin),
        });
    }

    /// Batches emitted so far (used by tests and by chained drivers).
    pub fn take_batches(&mut self) -> Vec<DataBatch> {
        std::mem::take(&mut self.batches)
    }
}

/// Who the operator is: its uid, subtask index, parallelism and key groups.
#[derive(Clone, Debug)]
pub struct OperatorContext {
    /// The step's uid.
    pub uid: String,
    /// This subtask's index, `0..parallelism`.
    pub subtask: usize,
    /// Number of subtasks of this operator.
    pub parallelism: usize,
    /// Number of key groups of the job.
    pub max_parallelism: u32,
    /// The key groups this subtask owns.
    pub key_groups: RangeInclusive<u32>,
    /// The step's bad-record policy.
    pub bad_record_policy: BadRecordPolicy,
    /// The input schema (the output schema of the previous step; empty for sources).
    pub input_schema: SchemaRef,
    /// Counters of this operator (shared by its subtasks).
    pub metrics: Arc<OperatorMetrics>,
}

/// State written by one subtask for one checkpoint.
///
/// * `keyed` — state partitioned by key group. On restore every subtask receives the key groups it
///   owns under the new parallelism (rescaling re-divides them).
/// * `operator` — non-keyed list state (Flink's operator ListState): on restore with the same
///   parallelism a subtask gets back exactly its own entries; after rescaling the entries of all
///   old subtasks are dealt round-robin. [`RestoredState::union`] always holds every entry of
///   every old subtask (Flink's union list state), which is what a sink needs to commit pending
///   files written by any old subtask and to continue part counters above all of them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SubtaskSnapshot {
    pub keyed: BTreeMap<u32, Vec<u8>>,
    pub operator: Vec<Vec<u8>>,
}

impl SubtaskSnapshot {
    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.keyed.is_empty() && self.operator.is_empty()
    }
}

/// The state a subtask restores.
#[derive(Clone, Debug, Default)]
pub struct RestoredState {
    /// Id of the checkpoint/savepoint restored from; `None` for an empty start.
    pub checkpoint_id: Option<u64>,
    /// Keyed state of the key groups this subtask owns.
    pub keyed: BTreeMap<u32, Vec<u8>>,
    /// This subtask's share of the list state (see [`SubtaskSnapshot`]).
    pub operator: Vec<Vec<u8>>,
    /// All list-state entries of all old subtasks.
    pub union: Vec<Vec<u8>>,
}

impl RestoredState {
    /// Whether the operator starts empty.
    pub fn is_empty(&self) -> bool {
        self.keyed.is_empty() && self.operator.is_empty() && self.union.is_empty()
    }
}

/// One named piece of state and its type, recorded in `_metadata` so that compatibility can be
/// decided before a restore. Change `type_name` whenever the encoding changes incompatibly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateField {
    pub name: String,
    #[serde(rename = "type")]
    pub type_name: String,
}

/// What state an operator keeps: recorded in `_metadata`, compared on restore.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateDescriptor {
    /// Named state and types. Empty for stateless operators.
    pub fields: Vec<StateField>,
    /// Types of the key columns for keyed state (`None` for non-keyed state).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_type: Option<String>,
}

impl StateDescriptor {
    /// A stateless operator.
    pub fn stateless() -> Self {
        Self::default()
    }

    /// Whether the operator keeps state.
    pub fn is_stateful(&self) -> bool {
        !self.fields.is_empty()
    }

    /// Builder: add a field.
    pub fn field(mut self, name: &str, type_name: impl Into<String>) -> Self {
        self.fields.push(StateField {
            name: name.to_string(),
            type_name: type_name.into(),
        });
        self
    }

    /// Builder: set the key type.
    pub fn keyed(mut self, key_type: impl Into<String>) -> Self {
        self.key_type = Some(key_type.into());
        self
    }
}

/// A boxed future, for the object-safe [`DynOperator`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A non-source operator (transformations and sinks). Implement this; the engine uses it through
/// the blanket [`DynOperator`] impl. Write the methods as `async fn`.
pub trait Operator: Send + 'static {
    /// Restores state (called once, before any data).
    fn initialize_state(
        &mut self,
        ctx: &OperatorContext,
        restored: RestoredState,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Processes one batch.
    fn process_batch(
        &mut self,
        ctx: &OperatorContext,
        batch: DataBatch,
        out: &mut Collector,
    ) -> impl Future<Output = Result<()>> + Send;

    /// The combined input watermark advanced to `watermark` (`i64::MAX`: end of input, flush).
    fn process_watermark(
        &mut self,
        ctx: &OperatorContext,
        watermark: i64,
        out: &mut Collector,
    ) -> impl Future<Output = Result<()>> + Send {
        let _ = (ctx, watermark, out);
        async { Ok(()) }
    }

    /// Snapshots the state for checkpoint `checkpoint_id` (barriers aligned).
    fn snapshot_state(
        &mut self,
        ctx: &OperatorContext,
        checkpoint_id: u64,
    ) -> impl Future<Output = Result<SubtaskSnapshot>> + Send {
        let _ = (ctx, checkpoint_id);
        async { Ok(SubtaskSnapshot::default()) }
    }

    /// Checkpoint `checkpoint_id` (and all before it) completed.
    fn notify_checkpoint_complete(
        &mut self,
        ctx: &OperatorContext,
        checkpoint_id: u64,
    ) -> impl Future<Output = Result<()>> + Send {
        let _ = (ctx, checkpoint_id);
        async { Ok(()) }
    }

    /// How often [`Operator::on_timer`] is called (processing time); `None`: never.
    fn timer_interval(&self) -> Option<std::time::Duration> {
        None
    }

    /// Processing-time timer (for example time-based rolling of a file sink); `now_ms` is the
    /// wall clock in epoch milliseconds.
    fn on_timer(
        &mut self,
        ctx: &OperatorContext,
        now_ms: i64,
        out: &mut Collector,
    ) -> impl Future<Output = Result<()>> + Send {
        let _ = (ctx, now_ms, out);
        async { Ok(()) }
    }
}

/// Object-safe form of [`Operator`], implemented for every `Operator`.
pub trait DynOperator: Send {
    fn initialize_state<'a>(
        &'a mut self,
        ctx: &'a OperatorContext,
        restored: RestoredState,
    ) -> BoxFuture<'a, Result<()>>;
    fn process_batch<'a>(
        &'a mut self,
        ctx: &'a OperatorContext,
        batch: DataBatch,
        out: &'a mut Collector,
    ) -> BoxFuture<'a, Result<()>>;
    fn process_watermark<'a>(
        &'a mut self,
        ctx: &'a OperatorContext,
        watermark: i64,
        out: &'a mut Collector,
    ) -> BoxFuture<'a, Result<()>>;
    fn snapshot_state<'a>(
        &'a mut self,
        ctx: &'a OperatorContext,
        checkpoint_id: u64,
    ) -> BoxFuture<'a, Result<SubtaskSnapshot>>;
    fn notify_checkpoint_complete<'a>(
        &'a mut self,
        ctx: &'a OperatorContext,
        checkpoint_id: u64,
    ) -> BoxFuture<'a, Result<()>>;
    fn timer_interval(&self) -> Option<std::time::Duration>;
    fn on_timer<'a>(
        &'a mut self,
        ctx: &'a OperatorContext,
        now_ms: i64,
        out: &'a mut Collector,
    ) -> BoxFuture<'a, Result<()>>;
}

impl<T: Operator> DynOperator for T {
    fn timer_interval(&self) -> Option<std::time::Duration> {
        Operator::timer_interval(self)
    }
    fn on_timer<'a>(
        &'a mut self,
        ctx: &'a OperatorContext,
        now_ms: i64,
        out: &'a mut Collector,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(Operator::on_timer(self, ctx, now_ms, out))
    }
    fn initialize_state<'a>(
        &'a mut self,
        ctx: &'a OperatorContext,
        restored: RestoredState,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(Operator::initialize_state(self, ctx, restored))
    }
    fn process_batch<'a>(
        &'a mut self,
        ctx: &'a OperatorContext,
        batch: DataBatch,
        out: &'a mut Collector,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(Operator::process_batch(self, ctx, batch, out))
    }
    fn process_watermark<'a>(
        &'a mut self,
        ctx: &'a OperatorContext,
        watermark: i64,
        out: &'a mut Collector,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(Operator::process_watermark(self, ctx, watermark, out))
    }
    fn snapshot_state<'a>(
        &'a mut self,
        ctx: &'a OperatorContext,
        checkpoint_id: u64,
    ) -> BoxFuture<'a, Result<SubtaskSnapshot>> {
        Box::pin(Operator::snapshot_state(self, ctx, checkpoint_id))
    }
    fn notify_checkpoint_complete<'a>(
        &'a mut self,
        ctx: &'a OperatorContext,
        checkpoint_id: u64,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(Operator::notify_checkpoint_complete(
            self,
            ctx,
            checkpoint_id,
        ))
    }
}

/// What a source produced.
#[derive(Debug)]
pub enum SourcePoll {
    /// Records, and the source subtask's watermark after them (if it advanced).
    Batch(DataBatch, Option<i64>),
    /// Nothing right now; poll again after at most this long (commands are served meanwhile).
    Idle(std::time::Duration),
    /// A bounded source has emitted everything.
    Finished,
}

/// A source. The driver calls `poll_next` between checkpoint barriers; `snapshot_state` is
/// called right when a barrier is injected, so the position it records must be exactly the
/// position after the last batch returned.
pub trait SourceOperator: Send + 'static {
    /// Restores the read position (called once, before any `poll_next`).
    fn initialize_state(
        &mut self,
        ctx: &OperatorContext,
        restored: RestoredState,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Produces the next batch.
    fn poll_next(
        &mut self,
        ctx: &OperatorContext,
        out: &mut Collector,
    ) -> impl Future<Output = Result<SourcePoll>> + Send;

    /// The read position for checkpoint `checkpoint_id`.
    fn snapshot_state(
        &mut self,
        ctx: &OperatorContext,
        checkpoint_id: u64,
    ) -> impl Future<Output = Result<SubtaskSnapshot>> + Send;

    /// Checkpoint `checkpoint_id` completed.
    fn notify_checkpoint_complete(
        &mut self,
        ctx: &OperatorContext,
        checkpoint_id: u64,
    ) -> impl Future<Output = Result<()>> + Send {
        let _ = (ctx, checkpoint_id);
        async { Ok(()) }
    }

    /// After an [`SourcePoll::Idle`]: whether the subtask has nothing to say about event time
    /// (all its splits idle, or none), so downstream operators stop waiting for its watermark
    /// until it emits again. `now_ms` is the wall clock.
    fn is_idle(&self, now_ms: i64) -> bool {
        let _ = now_ms;
        false
    }

    /// After an [`SourcePoll::Idle`]: the subtask's watermark at `now_ms`, for a source that
    /// knows it without new records (Flink's periodic watermark emission). A restored Kafka
    /// subtask whose partitions have nothing new still knows how far it read; without this its
    /// downstream windows would wait for a record that may never come. Emitted when it is
    /// larger than the last watermark the subtask sent.
    fn watermark(&self, now_ms: i64) -> Option<i64> {
        let _ = now_ms;
        None
    }
}

/// Object-safe form of [`SourceOperator`].
pub trait DynSource: Send {
    fn initialize_state<'a>(
        &'a mut self,
        ctx: &'a OperatorContext,
        restored: RestoredState,
    ) -> BoxFuture<'a, Result<()>>;
    fn poll_next<'a>(
        &'a mut self,
        ctx: &'a OperatorContext,
        out: &'a mut Collector,
    ) -> BoxFuture<'a, Result<SourcePoll>>;
    fn snapshot_state<'a>(
        &'a mut self,
        ctx: &'a OperatorContext,
        checkpoint_id: u64,
    ) -> BoxFuture<'a, Result<SubtaskSnapshot>>;
    fn notify_checkpoint_complete<'a>(
        &'a mut self,
        ctx: &'a OperatorContext,
        checkpoint_id: u64,
    ) -> BoxFuture<'a, Result<()>>;
    fn is_idle(&self, now_ms: i64) -> bool;
    fn watermark(&self, now_ms: i64) -> Option<i64>;
}

impl<T: SourceOperator> DynSource for T {
    fn is_idle(&self, now_ms: i64) -> bool {
        SourceOperator::is_idle(self, now_ms)
    }
    fn watermark(&self, now_ms: i64) -> Option<i64> {
        SourceOperator::watermark(self, now_ms)
    }
    fn initialize_state<'a>(
        &'a mut self,
        ctx: &'a OperatorContext,
        restored: RestoredState,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(SourceOperator::initialize_state(self, ctx, restored))
    }
    fn poll_next<'a>(
        &'a mut self,
        ctx: &'a OperatorContext,
        out: &'a mut Collector,
    ) -> BoxFuture<'a, Result<SourcePoll>> {
        Box::pin(SourceOperator::poll_next(self, ctx, out))
    }
    fn snapshot_state<'a>(
        &'a mut self,
        ctx: &'a OperatorContext,
        checkpoint_id: u64,
    ) -> BoxFuture<'a, Result<SubtaskSnapshot>> {
        Box::pin(SourceOperator::snapshot_state(self, ctx, checkpoint_id))
    }
    fn notify_checkpoint_complete<'a>(
        &'a mut self,
        ctx: &'a OperatorContext,
        checkpoint_id: u64,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(SourceOperator::notify_checkpoint_complete(
            self,
            ctx,
            checkpoint_id,
        ))
    }
}

/// Serialises a value as JSON state bytes (what the built-in operators use).
pub fn encode_state<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    Ok(serde_json::to_vec(value)?)
}

/// Reads JSON state bytes written by [`encode_state`].
pub fn decode_state<T: for<'de> Deserialize<'de>>(uid: &str, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| Error::Corrupt {
        path: uid.to_string(),
        message: format!("state does not decode: {e}"),
    })
}
