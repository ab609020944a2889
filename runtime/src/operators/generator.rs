//! The deterministic generator source: record `id` is `{id, key, value, ts}` computed from
//! `(seed, id)` alone (see [`generator_record`]), so expected outputs are computable.
//!
//! The id space is split into `maxParallelism` splits (split `s` holds the ids `≡ s mod
//! maxParallelism`); splits are treated like key groups, so a subtask owns a contiguous range of
//! them and rescaling re-divides them. The state of a split is the next id it emits.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{
    Int64Array, Int64Builder, StringBuilder, TimestampMillisecondBuilder, UInt64Builder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;

use crate::error::Result;
use crate::operator::{
    Collector, DataBatch, OperatorContext, RestoredState, SourceOperator, SourcePoll,
    StateDescriptor, SubtaskSnapshot, decode_state, encode_state,
};

/// Default event time of record 0: 2024-01-01T00:00:00Z.
pub const DEFAULT_START_MS: i64 = 1_704_067_200_000;
const BATCH: usize = 1024;

/// Generator settings, resolved from the manifest.
#[derive(Clone, Debug)]
pub struct GeneratorConfig {
    pub count: Option<u64>,
    pub rate_per_second: Option<u64>,
    pub keys: u64,
    pub seed: u64,
    pub start_ms: i64,
    pub interval_ms: i64,
    pub out_of_orderness_ms: i64,
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The key index and value of record `id`: key `key-<index>`, value in `0..1000`.
pub fn generator_record(seed: u64, keys: u64, id: u64) -> (u64, i64) {
    let h = mix(seed ^ mix(id));
    let key = h % keys.max(1);
    let value = (mix(h) % 1000) as i64;
    (key, value)
}

/// Event time of record `id`.
pub fn generator_ts(start_ms: i64, interval_ms: i64, id: u64) -> i64 {
    start_ms + (id as i64) * interval_ms
}

/// Output schema.
pub fn generator_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::UInt64, false),
        Field::new("key", DataType::Utf8, false),
        Field::new("value", DataType::Int64, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            false,
        ),
    ]))
}

/// State schema (recorded in `_metadata`).
pub fn generator_state() -> StateDescriptor {
    StateDescriptor::stateless()
        .field("nextId", "UInt64")
        .keyed("split")
}

/// A generator subtask.
pub struct GeneratorSource {
    cfg: GeneratorConfig,
    /// (next id, split) of owned, unfinished splits.
    heap: BinaryHeap<Reverse<(u64, u32)>>,
    /// Owned splits and their next id (including finished ones, for snapshots).
    splits: Vec<(u32, u64)>,
    started: Option<Instant>,
    emitted: u64,
    rate: Option<f64>,
}

impl GeneratorSource {
    /// A subtask of the generator.
    pub fn new(cfg: GeneratorConfig) -> Self {
        Self {
            cfg,
            heap: BinaryHeap::new(),
            splits: Vec::new(),
            started: None,
            emitted: 0,
            rate: None,
        }
    }

    fn exhausted(&self, id: u64) -> bool {
        self.cfg.count.is_some_and(|c| id >= c)
    }
}

impl SourceOperator for GeneratorSource {
    async fn initialize_state(
        &mut self,
        ctx: &OperatorContext,
        restored: RestoredState,
    ) -> Result<()> {
        for split in ctx.key_groups.clone() {
            let next = match restored.keyed.get(&split) {
                Some(bytes) => decode_state::<u64>(&ctx.uid, bytes)?,
                None => u64::from(split),
            };
            self.splits.push((split, next));
            if !self.exhausted(next) {
                self.heap.push(Reverse((next, split)));
            }
        }
        self.rate = self
            .cfg
            .rate_per_second
            .map(|r| r as f64 * self.splits.len() as f64 / f64::from(ctx.max_parallelism));
        Ok(())
    }

    async fn poll_next(
        &mut self,
        ctx: &OperatorContext,
        _out: &mut Collector,
    ) -> Result<SourcePoll> {
        if self.heap.is_empty() {
            return Ok(SourcePoll::Finished);
        }
        let mut n = BATCH;
        if let Some(rate) = self.rate {
            let started = *self.started.get_or_insert_with(Instant::now);
            let due = (started.elapsed().as_secs_f64() * rate) as u64;
            let allowed = due.saturating_sub(self.emitted);
            if allowed == 0 {
                let wait = ((self.emitted + 1) as f64 / rate) - started.elapsed().as_secs_f64();
                return Ok(SourcePoll::Idle(Duration::from_secs_f64(
                    wait.clamp(0.001, 0.1),
                )));
            }
            n = n.min(allowed as usize);
        }
        let stride = u64::from(ctx.max_parallelism);
        let mut ids = UInt64Builder::with_capacity(n);
        let mut keys = StringBuilder::with_capacity(n, n * 8);
        let mut values = Int64Builder::with_capacity(n);
        let mut ts = TimestampMillisecondBuilder::with_capacity(n).with_timezone("UTC");
        let mut ets = Vec::with_capacity(n);
        let mut rows = 0;
        while rows < n {
            let Some(Reverse((id, split))) = self.heap.pop() else {
                break;
            };
            let (k, v) = generator_record(self.cfg.seed, self.cfg.keys, id);
            let t = generator_ts(self.cfg.start_ms, self.cfg.interval_ms, id);
            ids.append_value(id);
            keys.append_value(format!("key-{k}"));
            values.append_value(v);
            ts.append_value(t);
            ets.push(t);
            rows += 1;
            let next = id + stride;
            if let Some(e) = self.splits.iter_mut().find(|(s, _)| *s == split) {
                e.1 = next;
            }
            if !self.exhausted(next) {
                self.heap.push(Reverse((next, split)));
            }
        }
        self.emitted += rows as u64;
        let batch = RecordBatch::try_new(
            generator_schema(),
            vec![
                Arc::new(ids.finish()),
                Arc::new(keys.finish()),
                Arc::new(values.finish()),
                Arc::new(ts.finish()),
            ],
        )?;
        let watermark = match self.heap.peek() {
            Some(Reverse((next, _))) => {
                generator_ts(self.cfg.start_ms, self.cfg.interval_ms, *next)
                    - 1
                    - self.cfg.out_of_orderness_ms
            }
            None => i64::MAX,
        };
        Ok(SourcePoll::Batch(
            DataBatch::new(batch, Int64Array::from(ets))?,
            Some(watermark),
        ))
    }

    async fn snapshot_state(
        &mut self,
        _ctx: &OperatorContext,
        _id: u64,
    ) -> Result<SubtaskSnapshot> {
        let mut snap = SubtaskSnapshot::default();
        for (split, next) in &self.splits {
            snap.keyed.insert(*split, encode_state(next)?);
        }
        Ok(snap)
    }
}
