//! The Nexmark source (persons, auctions and bids of the Nexmark benchmark), flattened into one
//! table: `event_type` plus `person_*`, `auction_*` and `bid_*` columns (null when the event is of
//! another type) and `date_time`.
//!
//! Event offsets are split into `maxParallelism` splits like the generator's ids; the state of a
//! split is its next event offset. Event times start at a fixed base time so replays are identical.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{
    ArrayRef, Int64Array, Int64Builder, StringBuilder, TimestampMillisecondBuilder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;
use nexmark::EventGenerator;
use nexmark::config::NexmarkConfig;
use nexmark::event::{Event, EventType};

use crate::error::Result;
use crate::operator::{
    Collector, DataBatch, OperatorContext, RestoredState, SourceOperator, SourcePoll,
    StateDescriptor, SubtaskSnapshot, decode_state, encode_state,
};
use crate::operators::generator::DEFAULT_START_MS;

const BATCH: usize = 1024;

/// Nexmark settings resolved from the manifest.
#[derive(Clone, Debug)]
pub struct NexmarkSettings {
    pub events: Option<u64>,
    pub rate_per_second: Option<u64>,
    pub kinds: Option<Vec<EventType>>,
    pub out_of_orderness_ms: i64,
}

/// The generator configuration used by the source (fixed base time, default proportions).
pub fn nexmark_config() -> NexmarkConfig {
    NexmarkConfig {
        base_time: DEFAULT_START_MS as u64,
        ..NexmarkConfig::default()
    }
}

/// Output schema.
pub fn nexmark_schema() -> SchemaRef {
    let ts = DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()));
    let s = |n: &str| Field::new(n, DataType::Utf8, true);
    let i = |n: &str| Field::new(n, DataType::Int64, true);
    Arc::new(Schema::new(vec![
        Field::new("event_type", DataType::Utf8, false),
        i("person_id"),
        s("person_name"),
        s("person_email"),
        s("person_credit_card"),
        s("person_city"),
        s("person_state"),
        i("auction_id"),
        s("auction_item_name"),
        s("auction_description"),
        i("auction_initial_bid"),
        i("auction_reserve"),
        Field::new("auction_expires", ts.clone(), true),
        i("auction_seller"),
        i("auction_category"),
        i("bid_auction"),
        i("bid_bidder"),
        i("bid_price"),
        s("bid_channel"),
        s("bid_url"),
        Field::new("date_time", ts, false),
        s("extra"),
    ]))
}

/// State schema.
pub fn nexmark_state() -> StateDescriptor {
    StateDescriptor::stateless()
        .field("nextOffset", "UInt64")
        .keyed("split")
}

/// Builds Arrow batches from events.
pub struct NexmarkBatchBuilder {
    cols: Vec<ColumnBuilder>,
    ets: Vec<i64>,
}

enum ColumnBuilder {
    S(StringBuilder),
    I(Int64Builder),
    T(TimestampMillisecondBuilder),
}

impl Default for NexmarkBatchBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl NexmarkBatchBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        let cols = nexmark_schema()
            .fields()
            .iter()
            .map(|f| match f.data_type() {
                DataType::Utf8 => ColumnBuilder::S(StringBuilder::new()),
                DataType::Int64 => ColumnBuilder::I(Int64Builder::new()),
                _ => ColumnBuilder::T(TimestampMillisecondBuilder::new().with_timezone("UTC")),
            })
            .collect();
        Self {
            cols,
            ets: Vec::new(),
        }
    }

    fn s(&mut self, i: usize, v: Option<&str>) {
        if let ColumnBuilder::S(b) = &mut self.cols[i] {
            b.append_option(v);
        }
    }
    fn i(&mut self, i: usize, v: Option<i64>) {
        if let ColumnBuilder::I(b) = &mut self.cols[i] {
            b.append_option(v);
        }
    }
    fn t(&mut self, i: usize, v: Option<i64>) {
        if let ColumnBuilder::T(b) = &mut self.cols[i] {
            b.append_option(v);
        }
    }

    /// Appends one event.
    pub fn push(&mut self, e: &Event) {
        let ts = e.timestamp() as i64;
        self.ets.push(ts);
        let (p, a, b) = match e {
            Event::Person(p) => (Some(p), None, None),
            Event::Auction(a) => (None, Some(a), None),
            Event::Bid(b) => (None, None, Some(b)),
        };
        self.s(
            0,
            Some(match e {
                Event::Person(_) => "person",
                Event::Auction(_) => "auction",
                Event::Bid(_) => "bid",
            }),
        );
        self.i(1, p.map(|p| p.id as i64));
        self.s(2, p.map(|p| p.name.as_str()));
        self.s(3, p.map(|p| p.email_address.as_str()));
        self.s(4, p.map(|p| p.credit_card.as_str()));
        self.s(5, p.map(|p| p.city.as_str()));
        self.s(6, p.map(|p| p.state.as_str()));
        self.i(7, a.map(|a| a.id as i64));
        self.s(8, a.map(|a| a.item_name.as_str()));
        self.s(9, a.map(|a| a.description.as_str()));
        self.i(10, a.map(|a| a.initial_bid as i64));
        self.i(11, a.map(|a| a.reserve as i64));
        self.t(12, a.map(|a| a.expires as i64));
        self.i(13, a.map(|a| a.seller as i64));
        self.i(14, a.map(|a| a.category as i64));
        self.i(15, b.map(|b| b.auction as i64));
        self.i(16, b.map(|b| b.bidder as i64));
        self.i(17, b.map(|b| b.price as i64));
        self.s(18, b.map(|b| b.channel.as_str()));
        self.s(19, b.map(|b| b.url.as_str()));
        self.t(20, Some(ts));
        let extra = match e {
            Event::Person(p) => &p.extra,
            Event::Auction(a) => &a.extra,
            Event::Bid(b) => &b.extra,
        };
        self.s(21, Some(extra));
    }

    /// Number of events appended.
    pub fn len(&self) -> usize {
        self.ets.len()
    }

    /// Whether nothing was appended.
    pub fn is_empty(&self) -> bool {
        self.ets.is_empty()
    }

    /// The batch of everything appended so far.
    pub fn finish(&mut self) -> Result<DataBatch> {
        let cols: Vec<ArrayRef> = self
            .cols
            .iter_mut()
            .map(|c| -> ArrayRef {
                match c {
                    ColumnBuilder::S(b) => Arc::new(b.finish()),
                    ColumnBuilder::I(b) => Arc::new(b.finish()),
                    ColumnBuilder::T(b) => Arc::new(b.finish()),
                }
            })
            .collect();
        let batch = RecordBatch::try_new(nexmark_schema(), cols)?;
        DataBatch::new(batch, Int64Array::from(std::mem::take(&mut self.ets)))
    }
}

/// A Nexmark subtask.
pub struct NexmarkSource {
    settings: NexmarkSettings,
    generators: BTreeMap<u32, EventGenerator>,
    heap: BinaryHeap<Reverse<(u64, u32)>>,
    started: Option<Instant>,
    emitted: u64,
    rate: Option<f64>,
}

impl NexmarkSource {
    /// A subtask.
    pub fn new(settings: NexmarkSettings) -> Self {
        Self {
            settings,
            generators: BTreeMap::new(),
            heap: BinaryHeap::new(),
            started: None,
            emitted: 0,
            rate: None,
        }
    }

    fn exhausted(&self, offset: u64) -> bool {
        self.settings.events.is_some_and(|n| offset >= n)
    }
}

impl SourceOperator for NexmarkSource {
    async fn initialize_state(
        &mut self,
        ctx: &OperatorContext,
        restored: RestoredState,
    ) -> Result<()> {
        let base = EventGenerator::new(nexmark_config());
        for split in ctx.key_groups.clone() {
            let next = match restored.keyed.get(&split) {
                Some(bytes) => decode_state::<u64>(&ctx.uid, bytes)?,
                None => u64::from(split),
            };
            let g = base
                .clone()
                .with_offset(next)
                .with_step(u64::from(ctx.max_parallelism));
            if !self.exhausted(next) {
                self.heap.push(Reverse((next, split)));
            }
            self.generators.insert(split, g);
        }
        self.rate = self
            .settings
            .rate_per_second
            .map(|r| r as f64 * self.generators.len() as f64 / f64::from(ctx.max_parallelism));
        Ok(())
    }

    async fn poll_next(
        &mut self,
        _ctx: &OperatorContext,
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
                return Ok(SourcePoll::Idle(Duration::from_millis(5)));
            }
            n = n.min(allowed as usize);
        }
        let mut b = NexmarkBatchBuilder::new();
        let mut generated = 0;
        while generated < n {
            let Some(Reverse((_, split))) = self.heap.pop() else {
                break;
            };
            let Some(g) = self.generators.get_mut(&split) else {
                continue;
            };
            let Some(event) = g.next() else { continue };
            generated += 1;
            let next = g.offset();
            if !self.exhausted(next) {
                self.heap.push(Reverse((next, split)));
            }
            if let Some(kinds) = &self.settings.kinds
                && !kinds.contains(&event.event_type())
            {
                continue;
            }
            b.push(&event);
        }
        self.emitted += generated as u64;
        let watermark = match self.heap.peek() {
            Some(Reverse((next, _))) => {
                let g = EventGenerator::new(nexmark_config()).with_offset(*next);
                g.timestamp() as i64 - 1 - self.settings.out_of_orderness_ms
            }
            None => i64::MAX,
        };
        Ok(SourcePoll::Batch(b.finish()?, Some(watermark)))
    }

    async fn snapshot_state(
        &mut self,
        _ctx: &OperatorContext,
        _id: u64,
    ) -> Result<SubtaskSnapshot> {
        let mut snap = SubtaskSnapshot::default();
        for (split, g) in &self.generators {
            snap.keyed.insert(*split, encode_state(&g.offset())?);
        }
        Ok(snap)
    }
}
