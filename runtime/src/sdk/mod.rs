//! The job SDK: write a keyed operator as one function over typed records, with managed keyed
//! state and timers (Flink's `KeyedProcessFunction`), and let the engine do snapshots, restores
//! and rescaling.
//!
//! ```no_run
//! use serde::{Deserialize, Serialize};
//! use streamjob_runtime::registry::Registry;
//! use streamjob_runtime::sdk::{Context, KeyedFunction, ValueState};
//!
//! #[derive(Deserialize)]
//! struct Click { key: String }
//! #[derive(Serialize, Deserialize)]
//! struct Count { key: String, count: i64 }
//!
//! struct RunningCount { count: ValueState<i64> }
//!
//! impl KeyedFunction for RunningCount {
//!     type In = Click;
//!     type Out = Count;
//!     fn process(&mut self, click: Click, cx: &mut Context<'_, Count>) -> streamjob_runtime::Result<()> {
//!         let count = self.count.get(cx)?.copied().unwrap_or(0) + 1;
//!         self.count.set(cx, count)?;
//!         cx.emit(Count { key: click.key, count });
//!         Ok(())
//!     }
//! }
//!
//! let mut registry = Registry::with_builtins();
//! registry.register_keyed("running-count", |setup| {
//!     setup.key_by(&["key"]);
//!     Ok(RunningCount { count: setup.value_state("count")? })
//! });
//! // then: streamjob_runtime::cli::main_with_registry(registry)
//! ```
//!
//! * Records are decoded from the step's input columns into `In` by name (serde; columns `In`
//!   does not name are not decoded) and `Out` is encoded into columns (its fields, in order).
//! * State and timers are declared by the factory ([`Setup`]), which runs once at planning (so
//!   the savepoint metadata and the upgrade pre-check know every state's name and type) and once
//!   per subtask. A state's type is described from its Rust type (`value<Int64>`,
//!   `map<Utf8, {total: Int64, seen: Int64?}>`): a new image whose state of the same name has
//!   another type is refused before the running job is touched.
//! * Everything is scoped to the current key: the key of the record being processed, or of the
//!   timer firing.

mod driver;
pub mod harness;
mod state;
mod timers;

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_arrow::schema::{SchemaLike, TracingOptions};
use serde_arrow::utils::Item;

pub use state::{ListState, MapState, StateKey, StateTtl, StateValue, TtlUpdate, ValueState};
pub use timers::{TimeDomain, Timer};

use crate::error::{Error, Result};
use crate::keygroups::Key;
use crate::operator::StateDescriptor;
use crate::operators::window::{key_indices, key_type_name};
use crate::registry::{OperatorPlan, Registry};
use state::{ListTable, MapTable, StateTable, Tables, ValueTable};

/// A keyed operator written against the SDK. `In` is decoded from each input record, `Out`
/// encoded into the output columns.
pub trait KeyedFunction: Send + 'static {
    /// One input record (decoded by column name; derive `Deserialize`).
    type In: DeserializeOwned;
    /// One output record (derive `Serialize` and `Deserialize`; the latter describes its columns).
    type Out: Serialize + DeserializeOwned + Send + 'static;

    /// Processes one record; `cx` is scoped to its key. Emitted records carry the input
    /// record's event time unless [`Context::emit_at`] says otherwise. An error fails the
    /// subtask (the job restarts from its last checkpoint); [`Context::reject`] hands just this
    /// record to the step's `onBadRecord` policy.
    fn process(&mut self, record: Self::In, cx: &mut Context<'_, Self::Out>) -> Result<()>;

    /// A timer registered for the context's key fired. Emitted records carry the timer's
    /// timestamp as event time (for processing-time timers: the current watermark, or the
    /// timer's timestamp before the first watermark).
    fn on_timer(&mut self, timer: Timer, cx: &mut Context<'_, Self::Out>) -> Result<()> {
        let _ = (timer, cx);
        Ok(())
    }
}

/// How Rust types become Arrow columns: `Utf8` strings and `List`s (what the built-in steps
/// produce), so a function's output looks like any other step's.
pub(crate) fn tracing_options() -> TracingOptions {
    TracingOptions::default()
        .strings_as_large_utf8(false)
        .sequence_as_large_list(false)
}

/// The state type recorded for timers in savepoint metadata.
const TIMERS_TYPE: &str = "timers/v1";
/// The name timers are recorded under (not a valid state name: state names are identifiers).
const TIMERS_NAME: &str = "@timers";

/// Declares a keyed function's key, state and timers; handed to the factory registered with
/// [`Registry::register_keyed`].
pub struct Setup<'a> {
    uid: &'a str,
    config: &'a BTreeMap<String, String>,
    input_schema: &'a SchemaRef,
    key_by: Vec<String>,
    tables: Vec<Box<dyn StateTable>>,
    state: StateDescriptor,
    timers: bool,
    timestamp_columns: Vec<String>,
}

impl<'a> Setup<'a> {
    fn new(
        uid: &'a str,
        config: &'a BTreeMap<String, String>,
        input_schema: &'a SchemaRef,
    ) -> Self {
        Self {
            uid,
            config,
            input_schema,
            key_by: Vec::new(),
            tables: Vec::new(),
            state: StateDescriptor::stateless(),
            timers: false,
            timestamp_columns: Vec::new(),
        }
    }

    /// The step's uid.
    pub fn uid(&self) -> &str {
        self.uid
    }

    /// `custom.config.<name>` of the step.
    pub fn config(&self, name: &str) -> Option<&str> {
        self.config.get(name).map(String::as_str)
    }

    /// `custom.config.<name>`, required: its absence is a planning error naming the setting.
    pub fn require_config(&self, name: &str) -> Result<&str> {
        self.config(name)
            .ok_or_else(|| Error::plan(self.uid, format!("custom.config.{name} is required")))
    }

    /// `custom.config.<name>` as a duration (`500ms`, `10s`, `1h30m`), if set.
    pub fn config_duration(&self, name: &str) -> Result<Option<std::time::Duration>> {
        self.config(name)
            .map(|v| {
                streamjob_crds::units::parse_duration(&format!("custom.config.{name}"), v)
                    .map_err(|e| Error::plan(self.uid, e.to_string()))
            })
            .transpose()
    }

    /// Writes output field `name` (an `i64` of milliseconds since the epoch) as a UTC timestamp
    /// column instead of an integer, like the built-in windows' `window_start`.
    pub fn timestamp_column(&mut self, name: &str) {
        self.timestamp_columns.push(name.to_string());
    }

    /// The columns of the step's input.
    pub fn input_schema(&self) -> &SchemaRef {
        self.input_schema
    }

    /// Partitions the input by these columns: records with equal values share state and timers
    /// and go to the same subtask.
    pub fn key_by(&mut self, columns: &[&str]) {
        self.key_by = columns.iter().map(|c| (*c).to_string()).collect();
    }

    /// Declares that the function registers timers.
    pub fn timers(&mut self) {
        self.timers = true;
    }

    /// Declares value state `name`.
    pub fn value_state<T: StateValue>(&mut self, name: &str) -> Result<ValueState<T>> {
        self.value_state_with_ttl(name, None)
    }

    /// Declares value state `name` whose values expire (`ttl`).
    pub fn value_state_with_ttl<T: StateValue>(
        &mut self,
        name: &str,
        ttl: impl Into<Option<StateTtl>>,
    ) -> Result<ValueState<T>> {
        let type_name = format!("value<{}>", self.shape::<T>(name)?);
        let index = self.declare(name, type_name, ValueTable::<T>::new(name, ttl.into()))?;
        Ok(ValueState::new(index, name))
    }

    /// Declares map state `name`.
    pub fn map_state<K: StateKey, V: StateValue>(&mut self, name: &str) -> Result<MapState<K, V>> {
        self.map_state_with_ttl(name, None)
    }

    /// Declares map state `name` whose entries expire one by one (`ttl`).
    pub fn map_state_with_ttl<K: StateKey, V: StateValue>(
        &mut self,
        name: &str,
        ttl: impl Into<Option<StateTtl>>,
    ) -> Result<MapState<K, V>> {
        let type_name = format!(
            "map<{}, {}>",
            self.shape::<K>(name)?,
            self.shape::<V>(name)?
        );
        let index = self.declare(name, type_name, MapTable::<K, V>::new(name, ttl.into()))?;
        Ok(MapState::new(index, name))
    }

    /// Declares list state `name`.
    pub fn list_state<T: StateValue>(&mut self, name: &str) -> Result<ListState<T>> {
        self.list_state_with_ttl(name, None)
    }

    /// Declares list state `name` whose elements expire one by one (`ttl`).
    pub fn list_state_with_ttl<T: StateValue>(
        &mut self,
        name: &str,
        ttl: impl Into<Option<StateTtl>>,
    ) -> Result<ListState<T>> {
        let type_name = format!("list<{}>", self.shape::<T>(name)?);
        let index = self.declare(name, type_name, ListTable::<T>::new(name, ttl.into()))?;
        Ok(ListState::new(index, name))
    }

    fn declare(
        &mut self,
        name: &str,
        type_name: String,
        table: impl StateTable + 'static,
    ) -> Result<usize> {
        let valid = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
        if !valid {
            return Err(Error::plan(
                self.uid,
                format!("state name {name:?}: use letters, digits, '_', '-' and '.'"),
            ));
        }
        if self.state.fields.iter().any(|f| f.name == name) {
            return Err(Error::plan(
                self.uid,
                format!("state {name:?} is declared twice"),
            ));
        }
        self.state = std::mem::take(&mut self.state).field(name, type_name);
        self.tables.push(Box::new(table));
        Ok(self.tables.len() - 1)
    }

    /// The shape of `T` as recorded in savepoint metadata (its Arrow type, traced from serde).
    fn shape<T: StateValue>(&self, state: &str) -> Result<String> {
        let fields = Vec::<FieldRef>::from_type::<Item<T>>(tracing_options()).map_err(
            |e| {
                Error::plan(
                    self.uid,
                    format!(
                        "state {state:?}: its type {} cannot be described ({e}); use plain structs, enums, numbers, strings, vectors and maps",
                        std::any::type_name::<T>()
                    ),
                )
            },
        )?;
        Ok(fields.first().map_or_else(String::new, |f| shape(f)))
    }
}

/// A compact, stable description of an Arrow field: `Int64`, `Utf8?` (nullable),
/// `{a: Int64, b: [Utf8]}` (struct, list).
fn shape(f: &Field) -> String {
    let base = match f.data_type() {
        DataType::Struct(fields) => format!(
            "{{{}}}",
            fields
                .iter()
                .map(|c| format!("{}: {}", c.name(), shape(c)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        DataType::List(c) | DataType::LargeList(c) => format!("[{}]", shape(c)),
        DataType::Map(entries, _) => match entries.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => {
                format!("map<{}, {}>", shape(&kv[0]), shape(&kv[1]))
            }
            other => format!("map<{other}>"),
        },
        other => other.to_string(),
    };
    if f.is_nullable() {
        format!("{base}?")
    } else {
        base
    }
}

/// What a keyed function sees while it runs: the current key, the state scoped to it, timers,
/// and the output.
pub struct Context<'a, O> {
    pub(crate) tables: &'a mut Tables,
    timers: &'a mut timers::Timers,
    timers_declared: bool,
    out: &'a mut Vec<(O, i64)>,
    timestamp: i64,
    watermark: i64,
    rejected: Option<String>,
}

impl<O> Context<'_, O> {
    /// The key the state and timers are scoped to.
    pub fn key(&self) -> &Key {
        &self.tables.current_key
    }

    /// The current key as a Rust value: the key column's value for a single key column (a
    /// `String`, an `i64`, ...), a tuple or vector of them for several.
    pub fn key_as<T: DeserializeOwned>(&self) -> Result<T> {
        use crate::keygroups::KeyValue;
        let json = |v: &KeyValue| match v {
            KeyValue::Null => serde_json::Value::Null,
            KeyValue::Bool(b) => (*b).into(),
            KeyValue::Int(i) => (*i).into(),
            KeyValue::UInt(u) => (*u).into(),
            KeyValue::FloatBits(b) => f64::from_bits(*b).into(),
            KeyValue::Str(s) => s.as_str().into(),
        };
        let key = &self.tables.current_key;
        let value = match key.as_slice() {
            [one] => json(one),
            many => many.iter().map(json).collect(),
        };
        serde_json::from_value(value).map_err(|e| {
            Error::Other(format!(
                "the current key {key:?} is not a {}: {e}",
                std::any::type_name::<T>()
            ))
        })
    }

    /// The event time of the record (or timer) being processed, ms since the epoch.
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// The subtask's current watermark (`None` before the first one).
    pub fn current_watermark(&self) -> Option<i64> {
        (self.watermark != i64::MIN).then_some(self.watermark)
    }

    /// The processing time of this call, ms since the epoch.
    pub fn now(&self) -> i64 {
        self.tables.now
    }

    /// Emits a record with the current [`Context::timestamp`] as its event time.
    pub fn emit(&mut self, record: O) {
        self.out.push((record, self.timestamp));
    }

    /// Emits a record with event time `timestamp`.
    pub fn emit_at(&mut self, record: O, timestamp: i64) {
        self.out.push((record, timestamp));
    }

    /// Hands the record being processed to the step's `onBadRecord` policy (fail the job, skip
    /// it, or write it to the dead-letter path) with `reason`. No effect in `on_timer`.
    pub fn reject(&mut self, reason: impl Into<String>) {
        self.rejected = Some(reason.into());
    }

    /// Calls [`KeyedFunction::on_timer`] for the current key once the watermark reaches
    /// `timestamp`.
    pub fn register_event_time_timer(&mut self, timestamp: i64) -> Result<()> {
        self.timer(TimeDomain::EventTime, timestamp, true)
    }

    /// Calls [`KeyedFunction::on_timer`] for the current key once the wall clock reaches
    /// `timestamp` (checked every 50 ms).
    pub fn register_processing_time_timer(&mut self, timestamp: i64) -> Result<()> {
        self.timer(TimeDomain::ProcessingTime, timestamp, true)
    }

    /// Deletes the current key's event-time timer at `timestamp`, if any.
    pub fn delete_event_time_timer(&mut self, timestamp: i64) -> Result<()> {
        self.timer(TimeDomain::EventTime, timestamp, false)
    }

    /// Deletes the current key's processing-time timer at `timestamp`, if any.
    pub fn delete_processing_time_timer(&mut self, timestamp: i64) -> Result<()> {
        self.timer(TimeDomain::ProcessingTime, timestamp, false)
    }

    fn timer(&mut self, domain: TimeDomain, timestamp: i64, register: bool) -> Result<()> {
        if !self.timers_declared {
            return Err(Error::Other(
                "this function registers timers without declaring them: call setup.timers() in its factory (timers are state, recorded in savepoints)".into(),
            ));
        }
        if register {
            self.timers
                .register(domain, timestamp, &self.tables.current_key);
        } else {
            self.timers
                .delete(domain, timestamp, &self.tables.current_key);
        }
        Ok(())
    }
}

/// What the plan learns from a factory's dry run.
struct Declared {
    key_columns: Vec<usize>,
    state: StateDescriptor,
    in_columns: Vec<usize>,
    out_fields: Vec<FieldRef>,
}

fn declared<F: KeyedFunction>(
    uid: &str,
    input_schema: &SchemaRef,
    setup: &Setup<'_>,
) -> Result<Declared> {
    if setup.key_by.is_empty() {
        return Err(Error::plan(
            uid,
            "a keyed function must name its key columns: call setup.key_by(&[...]) in its factory",
        ));
    }
    let key_columns = key_indices(uid, input_schema, &setup.key_by)?;
    let mut state = setup.state.clone();
    if setup.timers {
        state = state.field(TIMERS_NAME, TIMERS_TYPE);
    }
    if state.is_stateful() {
        state = state.keyed(key_type_name(input_schema, &key_columns));
    }
    let traced = |what: &str, r: serde_arrow::Result<Vec<FieldRef>>| {
        r.map_err(|e| {
            Error::plan(
                uid,
                format!("the function's {what} type cannot be mapped to columns: {e}"),
            )
        })
    };
    let in_fields = traced(
        "input",
        Vec::<FieldRef>::from_type::<F::In>(tracing_options()),
    )?;
    let mut in_columns = Vec::new();
    for f in &in_fields {
        match input_schema.index_of(f.name()) {
            Ok(i) => in_columns.push(i),
            Err(_) if f.is_nullable() => {}
            Err(_) => {
                return Err(Error::plan(
                    uid,
                    format!(
                        "the function reads column {:?}, which its input does not have (columns: {}); make the field an Option to accept records without it",
                        f.name(),
                        input_schema
                            .fields()
                            .iter()
                            .map(|f| f.name().as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
        }
    }
    in_columns.sort_unstable();
    let mut out_fields = traced(
        "output",
        Vec::<FieldRef>::from_type::<F::Out>(tracing_options()),
    )?;
    for name in &setup.timestamp_columns {
        let field = out_fields
            .iter_mut()
            .find(|f| f.name() == name)
            .filter(|f| f.data_type() == &DataType::Int64)
            .ok_or_else(|| {
                Error::plan(
                    uid,
                    format!(
                        "timestamp column {name:?}: the output type has no i64 field of that name"
                    ),
                )
            })?;
        *field = Arc::new(Field::new(
            name,
            DataType::Timestamp(arrow::datatypes::TimeUnit::Millisecond, Some("UTC".into())),
            field.is_nullable(),
        ));
    }
    Ok(Declared {
        key_columns,
        state,
        in_columns,
        out_fields,
    })
}

/// Runs `factory` for one subtask (or for the plan's dry run): the function, its state tables
/// and what it declared.
fn instantiate<F: KeyedFunction>(
    factory: &(dyn Fn(&mut Setup<'_>) -> Result<F> + Send + Sync),
    uid: &str,
    config: &BTreeMap<String, String>,
    input: &SchemaRef,
    clock: driver::Clock,
) -> Result<(driver::KeyedOperator<F>, StateDescriptor)> {
    let mut setup = Setup::new(uid, config, input);
    let function = factory(&mut setup)?;
    let declared = declared::<F>(uid, input, &setup)?;
    let tables = Tables {
        names: setup.state.fields.iter().map(|f| f.name.clone()).collect(),
        tables: setup.tables,
        current_key: Vec::new(),
        now: 0,
    };
    let layout = driver::Layout {
        in_columns: declared.in_columns,
        key_columns: declared.key_columns,
        out_schema: Arc::new(Schema::new(declared.out_fields.clone())),
        out_fields: declared.out_fields,
        timers: setup.timers,
    };
    Ok((
        driver::KeyedOperator::new(function, tables, layout, clock),
        declared.state,
    ))
}

/// A keyed function's factory, shared by the plan and its subtasks.
type Factory<F> = Arc<dyn Fn(&mut Setup<'_>) -> Result<F> + Send + Sync>;

impl Registry {
    /// Registers a keyed function under `name` (referenced as `custom: {name: ...}`). The
    /// factory declares the key, state and timers on its [`Setup`] and returns the function; it
    /// runs once when the job is planned and once for every subtask.
    pub fn register_keyed<F: KeyedFunction>(
        &mut self,
        name: &str,
        factory: impl Fn(&mut Setup<'_>) -> Result<F> + Send + Sync + 'static,
    ) -> &mut Self {
        let factory: Factory<F> = Arc::new(factory);
        let kind = format!("custom:{name}");
        self.register(name, move |cx| {
            let (planned, state) = instantiate(
                factory.as_ref(),
                cx.uid,
                cx.config,
                cx.input_schema,
                driver::Clock::System,
            )?;
            let output_schema = planned.output_schema();
            let key_by = planned.key_columns();
            let (uid, config, input) = (
                cx.uid.to_string(),
                cx.config.clone(),
                cx.input_schema.clone(),
            );
            let factory = factory.clone();
            let expected = state.clone();
            Ok(OperatorPlan::new(
                &kind,
                output_schema,
                state,
                Some(key_by),
                move |_ctx| {
                    let (operator, state) = instantiate(
                        factory.as_ref(),
                        &uid,
                        &config,
                        &input,
                        driver::Clock::System,
                    )?;
                    if state != expected {
                        return Err(Error::plan(
                            &uid,
                            "the factory declared other state for a subtask than when the job was planned: declare state unconditionally",
                        ));
                    }
                    Ok(operator)
                },
            ))
        })
    }
}

#[cfg(test)]
mod tests;
