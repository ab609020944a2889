//! Runs a [`KeyedFunction`] as an engine [`Operator`]: decodes batches into records, scopes
//! state and timers to each record's key, fires timers on watermarks and on the wall clock,
//! encodes the output, and snapshots/restores state and timers per key group.
//!
//! Snapshot format (one JSON document per key group, [`KeyGroupState`]):
//! `{"state": {"<name>": [[<key>, <entry>], ...]}, "timers": [[<key>, "EventTime", <ts>], ...]}`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use arrow::array::{ArrayRef, Int64Array, RecordBatch};
use arrow::datatypes::{FieldRef, SchemaRef};
use serde::{Deserialize, Serialize};

use super::state::Tables;
use super::timers::{TimeDomain, Timer, Timers};
use super::{Context, KeyedFunction};
use crate::error::{Error, Result};
use crate::keygroups::{Key, key_group_for_key, row_keys};
use crate::operator::{
    Collector, DataBatch, Operator, OperatorContext, RestoredState, SubtaskSnapshot, decode_state,
    encode_state,
};
use crate::operators::expr::row_json;

/// How often processing-time timers are checked.
const PROCESSING_TIMER_TICK: Duration = Duration::from_millis(50);

/// Processing time: the wall clock, or a clock a test moves by hand.
#[derive(Clone, Debug)]
pub(crate) enum Clock {
    System,
    Manual(Arc<AtomicI64>),
}

impl Clock {
    fn now(&self) -> i64 {
        match self {
            Clock::System => chrono::Utc::now().timestamp_millis(),
            Clock::Manual(t) => t.load(Ordering::SeqCst),
        }
    }
}

/// Where the function's records are in the batches.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    /// Input columns decoded into `In` (those it names).
    pub(crate) in_columns: Vec<usize>,
    /// Key columns.
    pub(crate) key_columns: Vec<usize>,
    /// Columns of `Out`.
    pub(crate) out_fields: Vec<FieldRef>,
    pub(crate) out_schema: SchemaRef,
    /// Whether the function declared timers.
    pub(crate) timers: bool,
}

/// One key group's state and timers in a snapshot.
#[derive(Debug, Default, Serialize, Deserialize)]
struct KeyGroupState {
    #[serde(default)]
    state: BTreeMap<String, Vec<(Key, serde_json::Value)>>,
    #[serde(default)]
    timers: Vec<(Key, TimeDomain, i64)>,
}

/// The engine side of a keyed function.
pub(crate) struct KeyedOperator<F: KeyedFunction> {
    function: F,
    tables: Tables,
    timers: Timers,
    layout: Layout,
    clock: Clock,
    watermark: i64,
}

impl<F: KeyedFunction> KeyedOperator<F> {
    pub(crate) fn new(function: F, tables: Tables, layout: Layout, clock: Clock) -> Self {
        Self {
            function,
            tables,
            timers: Timers::default(),
            layout,
            clock,
            watermark: i64::MIN,
        }
    }

    /// Number of keys with state in each declared state, and pending timers (tests, harness).
    pub(crate) fn sizes(&self) -> (Vec<usize>, usize) {
        (
            self.tables.tables.iter().map(|t| t.keys()).collect(),
            self.timers.len(),
        )
    }

    pub(crate) fn output_schema(&self) -> SchemaRef {
        self.layout.out_schema.clone()
    }

    pub(crate) fn key_columns(&self) -> Vec<usize> {
        self.layout.key_columns.clone()
    }

    fn context<'a>(
        tables: &'a mut Tables,
        timers: &'a mut Timers,
        timers_declared: bool,
        out: &'a mut Vec<(F::Out, i64)>,
        timestamp: i64,
        watermark: i64,
    ) -> Context<'a, F::Out> {
        Context {
            tables,
            timers,
            timers_declared,
            out,
            timestamp,
            watermark,
            rejected: None,
        }
    }

    /// Encodes emitted records into one batch.
    fn flush(&self, emitted: Vec<(F::Out, i64)>, out: &mut Collector, uid: &str) -> Result<()> {
        if emitted.is_empty() {
            return Ok(());
        }
        let (records, times): (Vec<F::Out>, Vec<i64>) = emitted.into_iter().unzip();
        let batch = serde_arrow::to_record_batch(&self.layout.out_fields, &records)
            .map_err(|e| Error::plan(uid, format!("output records do not encode: {e}")))?;
        // the schema downstream steps were planned with
        let batch = RecordBatch::try_new(self.layout.out_schema.clone(), batch.columns().to_vec())?;
        out.emit(DataBatch::new(batch, Int64Array::from(times))?);
        Ok(())
    }

    /// Fires every timer of `domain` due at `time`.
    fn fire(
        &mut self,
        domain: TimeDomain,
        time: i64,
        out: &mut Collector,
        uid: &str,
    ) -> Result<()> {
        let mut emitted = Vec::new();
        while let Some((timestamp, key)) = self.timers.pop_due(domain, time) {
            self.tables.current_key = key;
            let event_time = match domain {
                TimeDomain::EventTime => timestamp,
                TimeDomain::ProcessingTime if self.watermark != i64::MIN => self.watermark,
                TimeDomain::ProcessingTime => timestamp,
            };
            let mut cx = Self::context(
                &mut self.tables,
                &mut self.timers,
                self.layout.timers,
                &mut emitted,
                event_time,
                self.watermark,
            );
            self.function
                .on_timer(Timer { timestamp, domain }, &mut cx)?;
        }
        self.flush(emitted, out, uid)
    }
}

impl<F: KeyedFunction> Operator for KeyedOperator<F> {
    async fn initialize_state(
        &mut self,
        ctx: &OperatorContext,
        restored: RestoredState,
    ) -> Result<()> {
        let now = self.clock.now();
        for (kg, bytes) in &restored.keyed {
            let group: KeyGroupState = decode_state(&ctx.uid, bytes)?;
            for (name, entries) in group.state {
                let index = self
                    .tables
                    .names
                    .iter()
                    .position(|n| *n == name)
                    .ok_or_else(|| Error::Corrupt {
                        path: ctx.uid.clone(),
                        message: format!(
                            "key group {kg} has state {name:?}, which this operator does not declare"
                        ),
                    })?;
                for (key, entry) in entries {
                    self.tables.tables[index].restore(key, entry, now)?;
                }
            }
            for (key, domain, t) in group.timers {
                self.timers.register(domain, t, &key);
            }
        }
        Ok(())
    }

    async fn process_batch(
        &mut self,
        ctx: &OperatorContext,
        batch: DataBatch,
        out: &mut Collector,
    ) -> Result<()> {
        let key_cols: Vec<ArrayRef> = self
            .layout
            .key_columns
            .iter()
            .map(|i| batch.records.column(*i).clone())
            .collect();
        let keys = row_keys(&key_cols, batch.num_rows())?;
        let projected = batch.records.project(&self.layout.in_columns)?;
        let records: Vec<F::In> = serde_arrow::from_record_batch(&projected).map_err(|e| {
            Error::operator(
                &ctx.uid,
                ctx.subtask,
                format!("input records do not decode into the function's input type: {e}"),
            )
        })?;
        self.tables.now = self.clock.now();
        let mut emitted = Vec::new();
        for (row, (record, key)) in records.into_iter().zip(keys).enumerate() {
            self.tables.current_key = key;
            let mut cx = Self::context(
                &mut self.tables,
                &mut self.timers,
                self.layout.timers,
                &mut emitted,
                batch.event_time.value(row),
                self.watermark,
            );
            self.function.process(record, &mut cx)?;
            if let Some(reason) = cx.rejected {
                out.bad_record(row_json(&batch.records, row), reason);
            }
        }
        self.flush(emitted, out, &ctx.uid)
    }

    async fn process_watermark(
        &mut self,
        ctx: &OperatorContext,
        watermark: i64,
        out: &mut Collector,
    ) -> Result<()> {
        self.watermark = watermark;
        self.tables.now = self.clock.now();
        self.fire(TimeDomain::EventTime, watermark, out, &ctx.uid)
    }

    fn timer_interval(&self) -> Option<Duration> {
        self.layout.timers.then_some(PROCESSING_TIMER_TICK)
    }

    async fn on_timer(
        &mut self,
        ctx: &OperatorContext,
        _now_ms: i64,
        out: &mut Collector,
    ) -> Result<()> {
        let now = self.clock.now();
        self.tables.now = now;
        self.fire(TimeDomain::ProcessingTime, now, out, &ctx.uid)
    }

    async fn snapshot_state(&mut self, ctx: &OperatorContext, _id: u64) -> Result<SubtaskSnapshot> {
        let now = self.clock.now();
        let mp = ctx.max_parallelism;
        let mut groups: BTreeMap<u32, KeyGroupState> = BTreeMap::new();
        let Tables { tables, names, .. } = &mut self.tables;
        for (table, name) in tables.iter_mut().zip(names.iter()) {
            table.snapshot(now, &mut |key, entry| {
                groups
                    .entry(key_group_for_key(key, mp))
                    .or_default()
                    .state
                    .entry(name.clone())
                    .or_default()
                    .push((key.clone(), entry));
            })?;
        }
        for (domain, t, key) in self.timers.iter() {
            groups
                .entry(key_group_for_key(key, mp))
                .or_default()
                .timers
                .push((key.clone(), domain, t));
        }
        let mut snap = SubtaskSnapshot::default();
        for (kg, mut group) in groups {
            // deterministic bytes: the same state always snapshots the same
            for entries in group.state.values_mut() {
                entries.sort_by(|a, b| a.0.cmp(&b.0));
            }
            snap.keyed.insert(kg, encode_state(&group)?);
        }
        tracing::debug!(uid = %ctx.uid, key_groups = snap.keyed.len(), "keyed function state snapshotted");
        Ok(snap)
    }
}
