//! What travels between processes: length-prefixed frames, the data elements of one channel
//! (Arrow IPC for record batches) and the JSON messages between coordinator and workers.
//!
//! A frame is `u32 length (big endian) | u8 tag | payload`; `length` counts tag and payload.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int64Array, RecordBatch};
use arrow::buffer::Buffer;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::ipc::reader::StreamDecoder;
use arrow::ipc::writer::StreamWriter;
use serde::{Deserialize, Serialize};
use streamjob_crds::v1alpha1::StorageSpec;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::error::{Error, Result};
use crate::operator::DataBatch;
use crate::storage::Location;
use crate::task::{Barrier, BarrierKind, Element, TaskCommand, TaskEvent};

/// Largest frame accepted (a record batch of a few hundred MiB is a bug upstream, not data).
pub const MAX_FRAME: u32 = 512 * 1024 * 1024;

/// Largest frame accepted before the peer has shown the job's token (a hello, a channel header,
/// a welcome): a stranger cannot make a process allocate more than this by announcing a length.
pub const MAX_UNAUTHENTICATED_FRAME: u32 = 64 * 1024;

/// Whether a peer's token is the job's, compared in constant time (no timing oracle). A job
/// without a token (loopback only) admits only peers without one; an empty token matches
/// nothing (it is refused where tokens are read).
pub fn token_matches(given: Option<&str>, expected: Option<&str>) -> bool {
    use subtle::ConstantTimeEq;
    match (given, expected) {
        (None, None) => true,
        (Some(g), Some(e)) => !e.is_empty() && bool::from(g.as_bytes().ct_eq(e.as_bytes())),
        _ => false,
    }
}

/// The column that carries each record's event time on the wire.
const EVENT_TIME_COLUMN: &str = "__streamjob_event_time";

const TAG_JSON: u8 = 1;
const TAG_STREAM: u8 = 2;
const TAG_BATCH: u8 = 3;
const TAG_WATERMARK: u8 = 4;
const TAG_BARRIER: u8 = 5;
const TAG_END: u8 = 6;
const TAG_IDLE: u8 = 7;

/// One frame as read from a connection.
#[derive(Debug, PartialEq)]
pub struct Frame {
    pub tag: u8,
    pub payload: Vec<u8>,
}

/// Writes one frame (not flushed).
pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, tag: u8, payload: &[u8]) -> Result<()> {
    let mut frame = Vec::with_capacity(payload.len() + 5);
    push_frame(&mut frame, tag, payload)?;
    w.write_all(&frame).await?;
    Ok(())
}

/// Reads one frame; `None` at a clean end of stream (between frames).
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<Frame>> {
    read_frame_within(r, MAX_FRAME).await
}

/// Reads one frame of at most `max` bytes; the length is checked before anything is allocated.
async fn read_frame_within<R: AsyncRead + Unpin>(r: &mut R, max: u32) -> Result<Option<Frame>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_be_bytes(len);
    if len == 0 || len > max {
        return Err(Error::Cluster(format!(
            "bad frame length {len} (at most {max} here): the peer does not speak the streamjob protocol"
        )));
    }
    let mut tag = [0u8; 1];
    r.read_exact(&mut tag).await?;
    let mut payload = vec![0u8; len as usize - 1];
    r.read_exact(&mut payload).await?;
    Ok(Some(Frame {
        tag: tag[0],
        payload,
    }))
}

/// Writes a JSON message frame.
pub async fn write_json<W: AsyncWrite + Unpin, T: Serialize>(w: &mut W, msg: &T) -> Result<()> {
    write_frame(w, TAG_JSON, &serde_json::to_vec(msg)?).await
}

/// Reads a JSON message frame; `None` at a clean end of stream.
pub async fn read_json<R: AsyncRead + Unpin, T: for<'de> Deserialize<'de>>(
    r: &mut R,
) -> Result<Option<T>> {
    read_json_within(r, MAX_FRAME).await
}

/// Reads the first JSON message of a connection, before its peer is authenticated: at most
/// [`MAX_UNAUTHENTICATED_FRAME`] bytes.
pub async fn read_first_json<R: AsyncRead + Unpin, T: for<'de> Deserialize<'de>>(
    r: &mut R,
) -> Result<Option<T>> {
    read_json_within(r, MAX_UNAUTHENTICATED_FRAME).await
}

async fn read_json_within<R: AsyncRead + Unpin, T: for<'de> Deserialize<'de>>(
    r: &mut R,
    max: u32,
) -> Result<Option<T>> {
    match read_frame_within(r, max).await? {
        None => Ok(None),
        Some(Frame {
            tag: TAG_JSON,
            payload,
        }) => Ok(Some(serde_json::from_slice(&payload)?)),
        Some(f) => Err(Error::Cluster(format!(
            "expected a message frame, got tag {}",
            f.tag
        ))),
    }
}

/// A barrier as sent between processes (the target directory by its path).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WireBarrier {
    pub id: u64,
    pub kind: WireBarrierKind,
    pub target: String,
    #[serde(default)]
    pub state_prefix: String,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub enum WireBarrierKind {
    Checkpoint { last: bool },
    Savepoint { stop: bool },
}

impl WireBarrier {
    pub fn of(b: &Barrier) -> Self {
        Self {
            id: b.id,
            kind: match b.kind {
                BarrierKind::Checkpoint { last } => WireBarrierKind::Checkpoint { last },
                BarrierKind::Savepoint { stop } => WireBarrierKind::Savepoint { stop },
            },
            target: b.target.display().to_string(),
            state_prefix: b.state_prefix.clone(),
        }
    }
}

/// Turns wire barriers back into barriers, parsing each target directory once.
#[derive(Default)]
pub struct BarrierResolver {
    storage: Option<StorageSpec>,
    last: Option<Location>,
}

impl BarrierResolver {
    pub fn new(storage: Option<StorageSpec>) -> Self {
        Self {
            storage,
            last: None,
        }
    }

    pub fn resolve(&mut self, w: WireBarrier) -> Result<Barrier> {
        let target = match &self.last {
            Some(l) if l.display() == w.target => l.clone(),
            _ => {
                let l = Location::parse(&w.target, self.storage.as_ref())?;
                self.last = Some(l.clone());
                l
            }
        };
        Ok(Barrier {
            id: w.id,
            kind: match w.kind {
                WireBarrierKind::Checkpoint { last } => BarrierKind::Checkpoint { last },
                WireBarrierKind::Savepoint { stop } => BarrierKind::Savepoint { stop },
            },
            target,
            state_prefix: w.state_prefix,
        })
    }
}

/// A coordinator command for one subtask, as sent to its worker.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub enum WireCommand {
    TriggerBarrier(WireBarrier),
    NotifyComplete(u64),
}

impl WireCommand {
    pub fn of(c: &TaskCommand) -> Self {
        match c {
            TaskCommand::TriggerBarrier(b) => WireCommand::TriggerBarrier(WireBarrier::of(b)),
            TaskCommand::NotifyComplete(id) => WireCommand::NotifyComplete(*id),
        }
    }

    pub fn resolve(self, barriers: &mut BarrierResolver) -> Result<TaskCommand> {
        Ok(match self {
            WireCommand::TriggerBarrier(b) => TaskCommand::TriggerBarrier(barriers.resolve(b)?),
            WireCommand::NotifyComplete(id) => TaskCommand::NotifyComplete(id),
        })
    }
}

/// Counters of one step on one worker (absolute, since the worker started).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StepCounters {
    pub records_in: u64,
    pub records_out: u64,
    pub bad_records_skipped: u64,
    pub bad_records_dead_letter: u64,
    pub bad_records_failed: u64,
    pub late_records_dropped: u64,
    /// File sinks: failed commits (workers of older versions do not send it).
    #[serde(default)]
    pub commit_failures: u64,
    /// Sources: why the source cannot make progress (see [`OperatorMetrics::problem`]).
    ///
    /// [`OperatorMetrics::problem`]: crate::metrics::OperatorMetrics::problem
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// Kafka sources: lag per `topic/partition` (each partition is read by one subtask, so the
    /// workers' maps never overlap).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub lag: BTreeMap<String, i64>,
}

impl StepCounters {
    /// The counters in `m` now.
    pub fn read(m: &crate::metrics::OperatorMetrics) -> Self {
        use std::sync::atomic::Ordering::Relaxed;
        Self {
            records_in: m.records_in.load(Relaxed),
            records_out: m.records_out.load(Relaxed),
            bad_records_skipped: m.bad_records_skipped.load(Relaxed),
            bad_records_dead_letter: m.bad_records_dead_letter.load(Relaxed),
            bad_records_failed: m.bad_records_failed.load(Relaxed),
            late_records_dropped: m.late_records_dropped.load(Relaxed),
            commit_failures: m.commit_failures.load(Relaxed),
            problem: m.problem.lock().ok().and_then(|p| p.clone()),
            lag: m.lag.lock().map(|l| l.clone()).unwrap_or_default(),
        }
    }

    /// Adds `other` to these counters.
    pub fn add(&mut self, other: &Self) {
        self.records_in += other.records_in;
        self.records_out += other.records_out;
        self.bad_records_skipped += other.bad_records_skipped;
        self.bad_records_dead_letter += other.bad_records_dead_letter;
        self.bad_records_failed += other.bad_records_failed;
        self.late_records_dropped += other.late_records_dropped;
        self.commit_failures += other.commit_failures;
        if self.problem.is_none() {
            self.problem.clone_from(&other.problem);
        }
        self.lag
            .extend(other.lag.iter().map(|(k, v)| (k.clone(), *v)));
    }

    /// Sets `m` to these counters.
    pub fn write(&self, m: &crate::metrics::OperatorMetrics) {
        use std::sync::atomic::Ordering::Relaxed;
        m.records_in.store(self.records_in, Relaxed);
        m.records_out.store(self.records_out, Relaxed);
        m.bad_records_skipped
            .store(self.bad_records_skipped, Relaxed);
        m.bad_records_dead_letter
            .store(self.bad_records_dead_letter, Relaxed);
        m.bad_records_failed.store(self.bad_records_failed, Relaxed);
        m.late_records_dropped
            .store(self.late_records_dropped, Relaxed);
        m.commit_failures.store(self.commit_failures, Relaxed);
        if let Ok(mut p) = m.problem.lock() {
            p.clone_from(&self.problem);
        }
        if let Ok(mut l) = m.lag.lock() {
            l.clone_from(&self.lag);
        }
    }
}

/// Coordinator → worker.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum ToWorker {
    /// Registration accepted: this worker fills `slot` of `workers`.
    Welcome { slot: usize, workers: usize },
    /// Registration refused (the worker exits with this reason).
    Refused { reason: String },
    /// Run attempt `attempt` (ends any older one): the subtasks placed on this worker's slot,
    /// restored from `restore` (a snapshot directory) or empty; `peers[s]` is the data address of
    /// slot `s`.
    #[serde(rename_all = "camelCase")]
    Deploy {
        attempt: u64,
        restore: Option<String>,
        peers: Vec<String>,
    },
    /// A command for one subtask of `attempt`.
    Command {
        attempt: u64,
        step: usize,
        subtask: usize,
        command: WireCommand,
    },
    /// Stop the subtasks of `attempt` (the job failed elsewhere and restarts).
    Cancel { attempt: u64 },
    /// The job is over: exit.
    Exit { reason: String },
    /// Nothing else to say for a while (a silent coordinator is a lost one).
    Ping,
}

/// Interval of the keep-alive messages in both directions (pings one way, counters the other).
pub const KEEPALIVE: std::time::Duration = std::time::Duration::from_millis(500);

/// A peer that sends nothing for this long is lost.
pub const PEER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// Worker → coordinator.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum FromWorker {
    /// First message of a connection.
    #[serde(rename_all = "camelCase")]
    Hello {
        name: String,
        token: Option<String>,
        /// Digest of the worker's StreamJob spec; must equal the coordinator's.
        spec_digest: String,
        runtime_version: String,
        /// Where other workers reach this one's data plane.
        data_addr: String,
    },
    /// A subtask event of `attempt`.
    Event { attempt: u64, event: TaskEvent },
    /// `attempt` could not be deployed (e.g. its snapshot cannot be read).
    DeployFailed { attempt: u64, error: String },
    /// Counters per step.
    Metrics { steps: Vec<StepCounters> },
}

/// Header of a data connection: which channel of which attempt it carries.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct ChannelHeader {
    pub token: Option<String>,
    pub spec_digest: String,
    #[serde(flatten)]
    pub key: ChannelKey,
}

/// One data channel: subtask `from` of step `step - 1` → subtask `to` of step `step`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "camelCase")]
pub struct ChannelKey {
    pub attempt: u64,
    pub step: usize,
    pub from: usize,
    pub to: usize,
}

/// Encodes the elements of one channel. Record batches go as one Arrow IPC stream per schema
/// (the schema once, then each batch), with the event times as an extra column.
#[derive(Default)]
pub struct ElementEncoder {
    /// (schema of the records, schema on the wire, writer)
    writer: Option<(SchemaRef, SchemaRef, StreamWriter<Vec<u8>>)>,
}

impl ElementEncoder {
    /// Appends the frames of `e` to `out`.
    pub fn encode(&mut self, e: &Element, out: &mut Vec<u8>) -> Result<()> {
        match e {
            Element::Data(batch) => {
                let schema = batch.records.schema();
                if self.writer.as_ref().is_none_or(|(s, _, _)| *s != schema) {
                    let wire = Arc::new(wire_schema(&schema));
                    let mut w = StreamWriter::try_new(Vec::new(), &wire)?;
                    push_frame(out, TAG_STREAM, &std::mem::take(w.get_mut()))?;
                    self.writer = Some((schema.clone(), wire, w));
                }
                let Some((_, wire_schema, w)) = self.writer.as_mut() else {
                    return Err(Error::Cluster("no IPC writer".into()));
                };
                let mut cols: Vec<ArrayRef> = batch.records.columns().to_vec();
                cols.push(Arc::new(batch.event_time.clone()));
                let wire = RecordBatch::try_new(wire_schema.clone(), cols)?;
                w.write(&wire)?;
                push_frame(out, TAG_BATCH, &std::mem::take(w.get_mut()))
            }
            Element::Watermark(wm) => push_frame(out, TAG_WATERMARK, &wm.to_be_bytes()),
            Element::Barrier(b) => {
                push_frame(out, TAG_BARRIER, &serde_json::to_vec(&WireBarrier::of(b))?)
            }
            Element::End => push_frame(out, TAG_END, &[]),
            Element::Idle => push_frame(out, TAG_IDLE, &[]),
        }
    }
}

fn wire_schema(schema: &Schema) -> Schema {
    let mut fields: Vec<Arc<Field>> = schema.fields().iter().cloned().collect();
    fields.push(Arc::new(Field::new(
        EVENT_TIME_COLUMN,
        DataType::Int64,
        false,
    )));
    Schema::new_with_metadata(fields, schema.metadata().clone())
}

fn push_frame(out: &mut Vec<u8>, tag: u8, payload: &[u8]) -> Result<()> {
    let len = u32::try_from(payload.len() + 1)
        .ok()
        .filter(|l| *l <= MAX_FRAME)
        .ok_or_else(|| Error::Cluster(format!("frame of {} bytes is too large", payload.len())))?;
    out.extend_from_slice(&len.to_be_bytes());
    out.push(tag);
    out.extend_from_slice(payload);
    Ok(())
}

/// One step of the Arrow IPC decoder, with its panics turned into errors: arrow-ipc panics on some
/// corrupted messages (found by runtime's fuzz target on frames) instead of returning an error. The
/// channel is then closed and the attempt restarts from its checkpoint, as for any broken channel.
fn guarded_decode(
    d: &mut StreamDecoder,
    buf: &mut Buffer,
) -> Result<Option<arrow::record_batch::RecordBatch>> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| d.decode(buf)))
        .map_err(|_| Error::Cluster("a corrupted Arrow batch frame (the decoder failed)".into()))?
        .map_err(Error::from)
}

/// Decodes the frames of one channel back into elements.
pub struct ElementDecoder {
    decoder: Option<StreamDecoder>,
    barriers: BarrierResolver,
}

impl ElementDecoder {
    pub fn new(storage: Option<StorageSpec>) -> Self {
        Self {
            decoder: None,
            barriers: BarrierResolver::new(storage),
        }
    }

    /// The element a frame carries; `None` for frames that only set up the stream.
    pub fn decode(&mut self, frame: Frame) -> Result<Option<Element>> {
        match frame.tag {
            TAG_STREAM => {
                let mut d = StreamDecoder::new();
                let mut buf = Buffer::from_vec(frame.payload);
                while !buf.is_empty() {
                    if guarded_decode(&mut d, &mut buf)?.is_some() {
                        return Err(Error::Cluster("a stream header carried a batch".into()));
                    }
                }
                self.decoder = Some(d);
                Ok(None)
            }
            TAG_BATCH => {
                let Some(d) = self.decoder.as_mut() else {
                    return Err(Error::Cluster("a batch arrived before its schema".into()));
                };
                let mut buf = Buffer::from_vec(frame.payload);
                let mut batch = None;
                while !buf.is_empty() {
                    if let Some(b) = guarded_decode(d, &mut buf)? {
                        batch = Some(b);
                    }
                }
                let batch =
                    batch.ok_or_else(|| Error::Cluster("a batch frame without a batch".into()))?;
                Ok(Some(Element::Data(split_event_time(batch)?)))
            }
            TAG_WATERMARK => {
                let bytes: [u8; 8] = frame
                    .payload
                    .as_slice()
                    .try_into()
                    .map_err(|_| Error::Cluster("a watermark frame is not 8 bytes".into()))?;
                Ok(Some(Element::Watermark(i64::from_be_bytes(bytes))))
            }
            TAG_BARRIER => {
                let w: WireBarrier = serde_json::from_slice(&frame.payload)?;
                Ok(Some(Element::Barrier(self.barriers.resolve(w)?)))
            }
            TAG_END => Ok(Some(Element::End)),
            TAG_IDLE => Ok(Some(Element::Idle)),
            t => Err(Error::Cluster(format!("unknown data frame tag {t}"))),
        }
    }
}

fn split_event_time(batch: RecordBatch) -> Result<DataBatch> {
    let n = batch.num_columns();
    let schema = batch.schema();
    if n == 0 || schema.field(n - 1).name() != EVENT_TIME_COLUMN {
        return Err(Error::Cluster(
            "a batch without its event-time column".into(),
        ));
    }
    let event_time = batch
        .column(n - 1)
        .as_any()
        .downcast_ref::<Int64Array>()
        .ok_or_else(|| Error::Cluster("the event-time column is not Int64".into()))?
        .clone();
    let fields: Vec<Arc<Field>> = schema.fields().iter().take(n - 1).cloned().collect();
    let records = RecordBatch::try_new(
        Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone())),
        batch.columns()[..n - 1].to_vec(),
    )?;
    if event_time.null_count() > 0 {
        return Err(Error::Cluster("null event time on the wire".into()));
    }
    DataBatch::new(records, event_time)
}

/// Digest of a job spec: coordinator and workers must run the same one.
pub fn spec_digest(spec: &streamjob_crds::v1alpha1::StreamJobSpec) -> Result<String> {
    use sha2::Digest;
    let bytes = serde_json::to_vec(spec)?;
    Ok(hex::encode(&sha2::Sha256::digest(&bytes)[..12]))
}

#[cfg(test)]
mod tests {
    use arrow::array::{DictionaryArray, StringArray, UInt64Array};
    use arrow::datatypes::Int32Type;

    use super::*;

    #[test]
    fn worker_counters_carry_lag_and_source_problems_to_the_coordinator() {
        let a = StepCounters {
            records_in: 3,
            lag: [("t/0".to_string(), 5)].into(),
            ..Default::default()
        };
        let b = StepCounters {
            records_in: 4,
            problem: Some("brokers unreachable".into()),
            lag: [("t/1".to_string(), 7)].into(),
            ..Default::default()
        };
        let m = crate::metrics::OperatorMetrics::new("in");
        let mut total = StepCounters::default();
        total.add(&a);
        total.add(&b);
        total.write(&m);
        assert_eq!(m.records_in.load(std::sync::atomic::Ordering::Relaxed), 7);
        assert_eq!(m.lag.lock().unwrap().values().sum::<i64>(), 12);
        assert_eq!(
            m.problem.lock().unwrap().as_deref(),
            Some("brokers unreachable")
        );
        // the problem clears once no worker reports it
        let mut total = StepCounters::default();
        total.add(&a);
        total.write(&m);
        assert_eq!(*m.problem.lock().unwrap(), None);
        assert_eq!(StepCounters::read(&m), a);
        // a report from a worker without these fields still parses
        let old: StepCounters = serde_json::from_str(
            r#"{"recordsIn":1,"recordsOut":0,"badRecordsSkipped":0,"badRecordsDeadLetter":0,"badRecordsFailed":0,"lateRecordsDropped":0}"#,
        )
        .unwrap();
        assert_eq!(old.records_in, 1);
        assert!(old.lag.is_empty());
    }

    fn batch(ids: &[u64], names: &[&str]) -> DataBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::UInt64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let records = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(UInt64Array::from(ids.to_vec())),
                Arc::new(StringArray::from(names.to_vec())),
            ],
        )
        .unwrap();
        let ts: Vec<i64> = ids.iter().map(|i| 1_000 + *i as i64).collect();
        DataBatch::new(records, Int64Array::from(ts)).unwrap()
    }

    fn frames(bytes: &[u8]) -> Vec<Frame> {
        let mut out = Vec::new();
        let mut rest = bytes;
        while !rest.is_empty() {
            let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
            out.push(Frame {
                tag: rest[4],
                payload: rest[5..4 + len].to_vec(),
            });
            rest = &rest[4 + len..];
        }
        out
    }

    fn round_trip(elements: &[Element]) -> Vec<Element> {
        let mut enc = ElementEncoder::default();
        let mut bytes = Vec::new();
        for e in elements {
            enc.encode(e, &mut bytes).unwrap();
        }
        let mut dec = ElementDecoder::new(None);
        frames(&bytes)
            .into_iter()
            .filter_map(|f| dec.decode(f).unwrap())
            .collect()
    }

    #[test]
    fn elements_survive_the_wire_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let target = Location::parse(dir.path().to_str().unwrap(), None).unwrap();
        let b1 = batch(&[1, 2, 3], &["a", "b", "c"]);
        let b2 = batch(&[4], &["d"]);
        let barrier = Barrier {
            id: 7,
            kind: BarrierKind::Savepoint { stop: true },
            target: target.clone(),
            state_prefix: "e1-0/".into(),
        };
        let got = round_trip(&[
            Element::Data(b1.clone()),
            Element::Watermark(-5),
            Element::Data(b2.clone()),
            Element::Barrier(barrier),
            Element::End,
            Element::Idle,
        ]);
        assert_eq!(got.len(), 6);
        assert!(matches!(got[5], Element::Idle));
        match (&got[0], &got[2]) {
            (Element::Data(a), Element::Data(b)) => {
                assert_eq!(a.records, b1.records);
                assert_eq!(a.event_time, b1.event_time);
                assert_eq!(b.records, b2.records);
                assert_eq!(b.event_time, b2.event_time);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(got[1], Element::Watermark(-5)));
        match &got[3] {
            Element::Barrier(b) => {
                assert_eq!(b.id, 7);
                assert_eq!(b.kind, BarrierKind::Savepoint { stop: true });
                assert_eq!(b.target.display(), target.display());
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(got[4], Element::End));
    }

    #[test]
    fn a_new_schema_starts_a_new_stream_and_dictionaries_travel() {
        let dict: DictionaryArray<Int32Type> = vec!["x", "y", "x"].into_iter().collect();
        let schema = Arc::new(Schema::new(vec![Field::new(
            "d",
            dict.data_type().clone(),
            false,
        )]));
        let records = RecordBatch::try_new(schema, vec![Arc::new(dict)]).unwrap();
        let with_dict = DataBatch::new(records, Int64Array::from(vec![1, 2, 3])).unwrap();
        let plain = batch(&[9], &["z"]);
        let got = round_trip(&[
            Element::Data(plain.clone()),
            Element::Data(with_dict.clone()),
            Element::Data(plain.clone()),
        ]);
        let recs: Vec<_> = got
            .iter()
            .map(|e| match e {
                Element::Data(d) => d.records.clone(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            recs,
            vec![plain.records.clone(), with_dict.records, plain.records]
        );
    }

    #[test]
    fn garbage_is_refused_with_a_message() {
        let mut dec = ElementDecoder::new(None);
        let err = dec
            .decode(Frame {
                tag: TAG_BATCH,
                payload: vec![1, 2, 3],
            })
            .unwrap_err();
        assert!(err.to_string().contains("before its schema"), "{err}");
        let err = dec
            .decode(Frame {
                tag: 99,
                payload: vec![],
            })
            .unwrap_err();
        assert!(
            err.to_string().contains("unknown data frame tag 99"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn frames_round_trip_over_a_byte_stream() {
        let (mut a, mut b) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            write_json(&mut a, &ToWorker::Cancel { attempt: 3 })
                .await
                .unwrap();
            write_frame(&mut a, TAG_END, &[]).await.unwrap();
        });
        let msg: ToWorker = read_json(&mut b).await.unwrap().unwrap();
        assert_eq!(msg, ToWorker::Cancel { attempt: 3 });
        let end = read_frame(&mut b).await.unwrap().unwrap();
        assert_eq!(end.tag, TAG_END);
        writer.await.unwrap();
        assert!(read_frame(&mut b).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_stranger_cannot_announce_a_large_first_frame() {
        // 100 MiB announced, nothing sent: refused from the length alone (nothing allocated,
        // no wait for the bytes), where a later frame of that size would be read
        let mut announced = (100u32 << 20).to_be_bytes().to_vec();
        announced.push(TAG_JSON);
        let e = read_first_json::<_, ToWorker>(&mut announced.as_slice())
            .await
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("bad frame length 104857600 (at most 65536 here)"),
            "{e}"
        );
        // a hello of ordinary size passes
        let mut hello = Vec::new();
        write_json(&mut hello, &ToWorker::Cancel { attempt: 1 })
            .await
            .unwrap();
        let m: ToWorker = read_first_json(&mut hello.as_slice())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m, ToWorker::Cancel { attempt: 1 });
    }

    #[test]
    fn tokens_match_only_when_equal_and_present() {
        assert!(token_matches(Some("s3cret"), Some("s3cret")));
        assert!(token_matches(None, None));
        assert!(!token_matches(Some("s3cret"), Some("s3creT")));
        assert!(!token_matches(Some("s3cre"), Some("s3cret")));
        assert!(!token_matches(None, Some("s3cret")));
        assert!(!token_matches(Some("s3cret"), None));
        assert!(!token_matches(Some(""), Some("")));
    }
}
