//! Keyed event-time windows (tumbling, sliding, session) with count/sum/min/max/avg.
//!
//! State is kept per key and window and snapshotted per key group, so rescaling re-divides it.
//! A window fires once, when the watermark passes its end (plus `allowedLateness`); records for
//! windows that already fired are dropped and counted (`streamjob_late_records_dropped_total`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanBuilder, Float64Array, Float64Builder, Int64Array,
    Int64Builder, StringBuilder, TimestampMillisecondBuilder, UInt64Builder,
};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Float64Type, Int64Type, Schema, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::keygroups::{Key, KeyValue, key_group_for_key, row_keys};
use crate::operator::{
    Collector, DataBatch, Operator, OperatorContext, RestoredState, StateDescriptor,
    SubtaskSnapshot, decode_state, encode_state,
};

/// Window assigner.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum WindowKind {
    Tumbling { size: i64 },
    Sliding { size: i64, slide: i64 },
    Session { gap: i64 },
}

/// Aggregate function.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AggFn {
    Count,
    Sum,
    Min,
    Max,
    Avg,
}

/// One output aggregate.
#[derive(Clone, Debug)]
pub struct AggSpec {
    pub func: AggFn,
    /// Input column index (unused for count).
    pub column: usize,
    /// Whether the input is floating point.
    pub float: bool,
    pub name: String,
}

/// An accumulator value; serialised in state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Acc {
    Count(i64),
    SumI(i64),
    SumF(f64),
    MinI(Option<i64>),
    MaxI(Option<i64>),
    MinF(Option<f64>),
    MaxF(Option<f64>),
    Avg { sum: f64, count: i64 },
}

/// A planned window aggregation.
#[derive(Clone, Debug)]
pub struct WindowPlan {
    pub kind: WindowKind,
    pub lateness: i64,
    pub key_columns: Vec<usize>,
    pub aggs: Vec<AggSpec>,
    pub output_schema: SchemaRef,
    pub state: StateDescriptor,
}

fn is_float(t: &DataType) -> bool {
    matches!(t, DataType::Float16 | DataType::Float32 | DataType::Float64)
}

fn is_integer(t: &DataType) -> bool {
    t.is_integer()
        || matches!(
            t,
            DataType::Timestamp(_, _) | DataType::Date32 | DataType::Date64
        )
}

/// Normalised output type of a key column.
fn key_output_type(t: &DataType) -> Result<DataType> {
    Ok(match t {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
        DataType::Boolean => DataType::Boolean,
        DataType::Float32 | DataType::Float64 => DataType::Float64,
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
            DataType::UInt64
        }
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => DataType::Int64,
        DataType::Timestamp(TimeUnit::Millisecond, tz) => {
            DataType::Timestamp(TimeUnit::Millisecond, tz.clone())
        }
        other => {
            return Err(Error::Unsupported(format!(
                "key columns of type {other} (use string, integer, float, bool or timestamp)"
            )));
        }
    })
}

/// Key type string recorded in `_metadata`.
pub fn key_type_name(schema: &SchemaRef, key_columns: &[usize]) -> String {
    key_columns
        .iter()
        .map(|i| schema.field(*i).data_type().to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// Resolves key column names to indices.
pub fn key_indices(uid: &str, schema: &SchemaRef, names: &[String]) -> Result<Vec<usize>> {
    names
        .iter()
        .map(|n| {
            let i = schema.index_of(n).map_err(|_| {
                Error::plan(
                    uid,
                    format!(
                        "key column {n:?} is not in the input (columns: {})",
                        column_list(schema)
                    ),
                )
            })?;
            key_output_type(schema.field(i).data_type())
                .map_err(|e| Error::plan(uid, e.to_string()))?;
            Ok(i)
        })
        .collect()
}

/// Comma-separated column names.
pub fn column_list(schema: &SchemaRef) -> String {
    schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

impl WindowPlan {
    /// Plans a window aggregation over `input`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        uid: &str,
        input: &SchemaRef,
        key_by: &[String],
        kind: WindowKind,
        lateness: i64,
        count: bool,
        sum: &[String],
        min: &[String],
        max: &[String],
        avg: &[String],
    ) -> Result<Self> {
        let key_columns = key_indices(uid, input, key_by)?;
        let ts_type = DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()));
        let mut fields: Vec<Field> = Vec::new();
        for i in &key_columns {
            let f = input.field(*i);
            fields.push(Field::new(
                f.name(),
                key_output_type(f.data_type()).map_err(|e| Error::plan(uid, e.to_string()))?,
                true,
            ));
        }
        fields.push(Field::new("window_start", ts_type.clone(), false));
        fields.push(Field::new("window_end", ts_type, false));
        let mut aggs = Vec::new();
        let mut state = StateDescriptor::stateless().keyed(key_type_name(input, &key_columns));
        state = state.field(
            "windows",
            match kind {
                WindowKind::Session { .. } => "SessionWindow",
                _ => "TimeWindow",
            },
        );
        if count {
            aggs.push(AggSpec {
                func: AggFn::Count,
                column: 0,
                float: false,
                name: "count".into(),
            });
            fields.push(Field::new("count", DataType::Int64, false));
            state = state.field("count", "Int64");
        }
        for (func, prefix, cols) in [
            (AggFn::Sum, "sum", sum),
            (AggFn::Min, "min", min),
            (AggFn::Max, "max", max),
            (AggFn::Avg, "avg", avg),
        ] {
            for c in cols {
                let i = input.index_of(c).map_err(|_| {
                    Error::plan(
                        uid,
                        format!(
                            "{prefix} column {c:?} is not in the input (columns: {})",
                            column_list(input)
                        ),
                    )
                })?;
                let t = input.field(i).data_type();
                if !is_float(t) && !is_integer(t) {
                    return Err(Error::plan(
                        uid,
                        format!("{prefix}({c}): column is of type {t}, not numeric"),
                    ));
                }
                let float = is_float(t);
                let name = format!("{prefix}_{c}");
                let (out_t, state_t) = match (func, float) {
                    (AggFn::Avg, _) => (DataType::Float64, "Avg<Float64>".to_string()),
                    (_, true) => (DataType::Float64, "Float64".to_string()),
                    (_, false) => (DataType::Int64, "Int64".to_string()),
                };
                fields.push(Field::new(&name, out_t, !matches!(func, AggFn::Sum)));
                state = state.field(&name, state_t);
                aggs.push(AggSpec {
                    func,
                    column: i,
                    float,
                    name,
                });
            }
        }
        if aggs.is_empty() {
            return Err(Error::plan(
                uid,
                "aggregate: choose at least one of count, sum, min, max, avg",
            ));
        }
        Ok(Self {
            kind,
            lateness,
            key_columns,
            aggs,
            output_schema: Arc::new(Schema::new(fields)),
            state,
        })
    }

    fn new_accs(&self) -> Vec<Acc> {
        self.aggs
            .iter()
            .map(|a| match (a.func, a.float) {
                (AggFn::Count, _) => Acc::Count(0),
                (AggFn::Sum, false) => Acc::SumI(0),
                (AggFn::Sum, true) => Acc::SumF(0.0),
                (AggFn::Min, false) => Acc::MinI(None),
                (AggFn::Max, false) => Acc::MaxI(None),
                (AggFn::Min, true) => Acc::MinF(None),
                (AggFn::Max, true) => Acc::MaxF(None),
                (AggFn::Avg, _) => Acc::Avg { sum: 0.0, count: 0 },
            })
            .collect()
    }
}

/// Input columns of the aggregates, cast once per batch.
enum AggInput {
    None,
    I(Int64Array),
    F(Float64Array),
}

fn update(accs: &mut [Acc], inputs: &[AggInput], row: usize) {
    for (acc, input) in accs.iter_mut().zip(inputs) {
        let iv = match input {
            AggInput::I(a) if a.is_valid(row) => Some(a.value(row)),
            _ => None,
        };
        let fv = match input {
            AggInput::F(a) if a.is_valid(row) => Some(a.value(row)),
            AggInput::I(a) if a.is_valid(row) => Some(a.value(row) as f64),
            _ => None,
        };
        match acc {
            Acc::Count(c) => *c += 1,
            Acc::SumI(s) => *s = s.wrapping_add(iv.unwrap_or(0)),
            Acc::SumF(s) => *s += fv.unwrap_or(0.0),
            Acc::MinI(m) => {
                if let Some(v) = iv {
                    *m = Some(m.map_or(v, |m| m.min(v)));
                }
            }
            Acc::MaxI(m) => {
                if let Some(v) = iv {
                    *m = Some(m.map_or(v, |m| m.max(v)));
                }
            }
            Acc::MinF(m) => {
                if let Some(v) = fv {
                    *m = Some(m.map_or(v, |m| m.min(v)));
                }
            }
            Acc::MaxF(m) => {
                if let Some(v) = fv {
                    *m = Some(m.map_or(v, |m| m.max(v)));
                }
            }
            Acc::Avg { sum, count } => {
                if let Some(v) = fv {
                    *sum += v;
                    *count += 1;
                }
            }
        }
    }
}

fn merge(into: &mut [Acc], from: &[Acc]) {
    for (a, b) in into.iter_mut().zip(from) {
        match (a, b) {
            (Acc::Count(x), Acc::Count(y)) => *x += y,
            (Acc::SumI(x), Acc::SumI(y)) => *x = x.wrapping_add(*y),
            (Acc::SumF(x), Acc::SumF(y)) => *x += y,
            (Acc::MinI(x), Acc::MinI(y)) => *x = opt(*x, *y, i64::min),
            (Acc::MaxI(x), Acc::MaxI(y)) => *x = opt(*x, *y, i64::max),
            (Acc::MinF(x), Acc::MinF(y)) => *x = opt(*x, *y, f64::min),
            (Acc::MaxF(x), Acc::MaxF(y)) => *x = opt(*x, *y, f64::max),
            (Acc::Avg { sum, count }, Acc::Avg { sum: s2, count: c2 }) => {
                *sum += s2;
                *count += c2;
            }
            _ => {}
        }
    }
}

fn opt<T: Copy>(a: Option<T>, b: Option<T>, f: fn(T, T) -> T) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(f(a, b)),
        (a, None) => a,
        (None, b) => b,
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
struct Session {
    start: i64,
    end: i64,
    accs: Vec<Acc>,
}

/// State of one key group, as snapshotted.
#[derive(Default, Serialize, Deserialize)]
struct KeyGroupState {
    #[serde(default)]
    windows: Vec<(i64, i64, Key, Vec<Acc>)>,
    #[serde(default)]
    sessions: Vec<(Key, Vec<Session>)>,
}

type WindowMap = HashMap<Key, (u32, Vec<Acc>)>;

/// A window aggregation subtask.
pub struct WindowOperator {
    plan: WindowPlan,
    /// (end, start) → per key accumulators.
    windows: BTreeMap<(i64, i64), WindowMap>,
    sessions: HashMap<Key, (u32, Vec<Session>)>,
    watermark: i64,
}

impl WindowOperator {
    /// A subtask.
    pub fn new(plan: WindowPlan) -> Self {
        Self {
            plan,
            windows: BTreeMap::new(),
            sessions: HashMap::new(),
            watermark: i64::MIN,
        }
    }

    fn fire_time(&self, end: i64) -> i64 {
        end.saturating_sub(1).saturating_add(self.plan.lateness)
    }

    fn emit(&self, fired: Vec<(Key, i64, i64, Vec<Acc>)>, out: &mut Collector) -> Result<()> {
        if fired.is_empty() {
            return Ok(());
        }
        let schema = &self.plan.output_schema;
        let n = fired.len();
        let mut cols: Vec<ArrayRef> = Vec::new();
        for (ki, _) in self.plan.key_columns.iter().enumerate() {
            let t = schema.field(ki).data_type().clone();
            let vals = fired.iter().map(|f| &f.0[ki]);
            let arr: ArrayRef = match &t {
                DataType::Utf8 => {
                    let mut b = StringBuilder::with_capacity(n, n * 8);
                    for v in vals {
                        match v {
                            KeyValue::Str(s) => b.append_value(s),
                            _ => b.append_null(),
                        }
                    }
                    Arc::new(b.finish())
                }
                DataType::Boolean => {
                    let mut b = BooleanBuilder::with_capacity(n);
                    for v in vals {
                        match v {
                            KeyValue::Bool(x) => b.append_value(*x),
                            _ => b.append_null(),
                        }
                    }
                    Arc::new(b.finish())
                }
                DataType::Float64 => {
                    let mut b = Float64Builder::with_capacity(n);
                    for v in vals {
                        match v {
                            KeyValue::FloatBits(x) => b.append_value(f64::from_bits(*x)),
                            _ => b.append_null(),
                        }
                    }
                    Arc::new(b.finish())
                }
                DataType::UInt64 => {
                    let mut b = UInt64Builder::with_capacity(n);
                    for v in vals {
                        match v {
                            KeyValue::UInt(x) => b.append_value(*x),
                            _ => b.append_null(),
                        }
                    }
                    Arc::new(b.finish())
                }
                DataType::Timestamp(_, tz) => {
                    let mut b =
                        TimestampMillisecondBuilder::with_capacity(n).with_timezone_opt(tz.clone());
                    for v in vals {
                        match v {
                            KeyValue::Int(x) => b.append_value(*x),
                            _ => b.append_null(),
                        }
                    }
                    Arc::new(b.finish())
                }
                _ => {
                    let mut b = Int64Builder::with_capacity(n);
                    for v in vals {
                        match v {
                            KeyValue::Int(x) => b.append_value(*x),
                            _ => b.append_null(),
                        }
                    }
                    Arc::new(b.finish())
                }
            };
            cols.push(arr);
        }
        let mut starts = TimestampMillisecondBuilder::with_capacity(n).with_timezone("UTC");
        let mut ends = TimestampMillisecondBuilder::with_capacity(n).with_timezone("UTC");
        for f in &fired {
            starts.append_value(f.1);
            ends.append_value(f.2);
        }
        cols.push(Arc::new(starts.finish()));
        cols.push(Arc::new(ends.finish()));
        for (ai, _) in self.plan.aggs.iter().enumerate() {
            let first = &fired[0].3[ai];
            let arr: ArrayRef = match first {
                Acc::Count(_) | Acc::SumI(_) | Acc::MinI(_) | Acc::MaxI(_) => {
                    let mut b = Int64Builder::with_capacity(n);
                    for f in &fired {
                        match &f.3[ai] {
                            Acc::Count(v) | Acc::SumI(v) => b.append_value(*v),
                            Acc::MinI(v) | Acc::MaxI(v) => b.append_option(*v),
                            _ => b.append_null(),
                        }
                    }
                    Arc::new(b.finish())
                }
                _ => {
                    let mut b = Float64Builder::with_capacity(n);
                    for f in &fired {
                        match &f.3[ai] {
                            Acc::SumF(v) => b.append_value(*v),
                            Acc::MinF(v) | Acc::MaxF(v) => b.append_option(*v),
                            Acc::Avg { sum, count } if *count > 0 => {
                                b.append_value(sum / *count as f64)
                            }
                            _ => b.append_null(),
                        }
                    }
                    Arc::new(b.finish())
                }
            };
            cols.push(arr);
        }
        let ts: Int64Array = fired.iter().map(|f| f.2 - 1).collect();
        let batch = RecordBatch::try_new(schema.clone(), cols)?;
        out.emit(DataBatch::new(batch, ts)?);
        Ok(())
    }
}

impl Operator for WindowOperator {
    async fn initialize_state(
        &mut self,
        ctx: &OperatorContext,
        restored: RestoredState,
    ) -> Result<()> {
        for (kg, bytes) in &restored.keyed {
            let s: KeyGroupState = decode_state(&ctx.uid, bytes)?;
            for (start, end, key, accs) in s.windows {
                self.windows
                    .entry((end, start))
                    .or_default()
                    .insert(key, (*kg, accs));
            }
            for (key, sessions) in s.sessions {
                self.sessions.insert(key, (*kg, sessions));
            }
        }
        Ok(())
    }

    async fn process_batch(
        &mut self,
        ctx: &OperatorContext,
        batch: DataBatch,
        _out: &mut Collector,
    ) -> Result<()> {
        let n = batch.num_rows();
        let key_cols: Vec<ArrayRef> = self
            .plan
            .key_columns
            .iter()
            .map(|i| batch.records.column(*i).clone())
            .collect();
        let keys = row_keys(&key_cols, n)?;
        let mut inputs = Vec::with_capacity(self.plan.aggs.len());
        for a in &self.plan.aggs {
            inputs.push(match a.func {
                AggFn::Count => AggInput::None,
                _ => {
                    let col = batch.records.column(a.column);
                    if a.float {
                        AggInput::F(
                            cast(col, &DataType::Float64)?
                                .as_primitive::<Float64Type>()
                                .clone(),
                        )
                    } else {
                        let c = match col.data_type() {
                            DataType::Timestamp(_, _) => cast(col, &DataType::Int64)?,
                            _ => col.clone(),
                        };
                        AggInput::I(
                            cast(&c, &DataType::Int64)?
                                .as_primitive::<Int64Type>()
                                .clone(),
                        )
                    }
                }
            });
        }
        let mut late = 0u64;
        let mp = ctx.max_parallelism;
        for (row, key) in keys.into_iter().enumerate() {
            let ts = batch.event_time.value(row);
            match self.plan.kind {
                WindowKind::Tumbling { size } => {
                    let start = ts - ts.rem_euclid(size);
                    let end = start + size;
                    if self.fire_time(end) <= self.watermark {
                        late += 1;
                        continue;
                    }
                    let map = self.windows.entry((end, start)).or_default();
                    let e = match map.get_mut(&key) {
                        Some(e) => e,
                        None => {
                            let kg = key_group_for_key(&key, mp);
                            map.entry(key).or_insert((kg, self.plan.new_accs()))
                        }
                    };
                    update(&mut e.1, &inputs, row);
                }
                WindowKind::Sliding { size, slide } => {
                    let last_start = ts - ts.rem_euclid(slide);
                    let kg = key_group_for_key(&key, mp);
                    let mut start = last_start;
                    let mut any = false;
                    while start > ts - size {
                        let end = start + size;
                        if self.fire_time(end) > self.watermark {
                            any = true;
                            let new_accs = self.plan.new_accs();
                            let e = self
                                .windows
                                .entry((end, start))
                                .or_default()
                                .entry(key.clone())
                                .or_insert((kg, new_accs));
                            update(&mut e.1, &inputs, row);
                        }
                        start -= slide;
                    }
                    if !any {
                        late += 1;
                    }
                }
                WindowKind::Session { gap } => {
                    let end = ts + gap;
                    if self.fire_time(end) <= self.watermark {
                        late += 1;
                        continue;
                    }
                    let mut accs = self.plan.new_accs();
                    update(&mut accs, &inputs, row);
                    let mut s = Session {
                        start: ts,
                        end,
                        accs,
                    };
                    let entry = self
                        .sessions
                        .entry(key.clone())
                        .or_insert_with(|| (key_group_for_key(&key, mp), Vec::new()));
                    let mut kept = Vec::with_capacity(entry.1.len() + 1);
                    for old in entry.1.drain(..) {
                        if old.start < s.end && s.start < old.end {
                            s.start = s.start.min(old.start);
                            s.end = s.end.max(old.end);
                            merge(&mut s.accs, &old.accs);
                        } else {
                            kept.push(old);
                        }
                    }
                    kept.push(s);
                    entry.1 = kept;
                }
            }
        }
        if late > 0 {
            ctx.metrics
                .late_records_dropped
                .fetch_add(late, Ordering::Relaxed);
        }
        Ok(())
    }

    async fn process_watermark(
        &mut self,
        _ctx: &OperatorContext,
        watermark: i64,
        out: &mut Collector,
    ) -> Result<()> {
        self.watermark = watermark;
        let lateness = self.plan.lateness;
        let mut fired = Vec::new();
        while let Some(entry) = self.windows.first_entry() {
            let (end, start) = *entry.key();
            if end.saturating_sub(1).saturating_add(lateness) > watermark {
                break;
            }
            let map = entry.remove();
            let mut rows: Vec<_> = map.into_iter().collect();
            rows.sort_by(|a, b| a.0.cmp(&b.0));
            for (key, (_, accs)) in rows {
                fired.push((key, start, end, accs));
            }
        }
        if !self.sessions.is_empty() {
            let mut done_keys = Vec::new();
            let mut keys: Vec<&Key> = self.sessions.keys().collect();
            keys.sort();
            let keys: Vec<Key> = keys.into_iter().cloned().collect();
            for key in keys {
                if let Some((_, sessions)) = self.sessions.get_mut(&key) {
                    let mut keep = Vec::new();
                    for s in sessions.drain(..) {
                        if s.end.saturating_sub(1).saturating_add(lateness) <= watermark {
                            fired.push((key.clone(), s.start, s.end, s.accs));
                        } else {
                            keep.push(s);
                        }
                    }
                    if keep.is_empty() {
                        done_keys.push(key.clone());
                    }
                    *sessions = keep;
                }
            }
            for k in done_keys {
                self.sessions.remove(&k);
            }
        }
        self.emit(fired, out)
    }

    async fn snapshot_state(
        &mut self,
        _ctx: &OperatorContext,
        _id: u64,
    ) -> Result<SubtaskSnapshot> {
        let mut groups: BTreeMap<u32, KeyGroupState> = BTreeMap::new();
        for ((end, start), map) in &self.windows {
            for (key, (kg, accs)) in map {
                groups.entry(*kg).or_default().windows.push((
                    *start,
                    *end,
                    key.clone(),
                    accs.clone(),
                ));
            }
        }
        for (key, (kg, sessions)) in &self.sessions {
            groups
                .entry(*kg)
                .or_default()
                .sessions
                .push((key.clone(), sessions.clone()));
        }
        let mut snap = SubtaskSnapshot::default();
        for (kg, mut s) in groups {
            s.windows
                .sort_by(|a, b| (a.1, a.0, &a.2).cmp(&(b.1, b.0, &b.2)));
            s.sessions.sort_by(|a, b| a.0.cmp(&b.0));
            snap.keyed.insert(kg, encode_state(&s)?);
        }
        Ok(snap)
    }
}
