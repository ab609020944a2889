//! An example job binary with its own operators, registered by name and referenced from the
//! manifest (`examples/custom-job.yaml`):
//!
//! * `uppercase` (stateless): upper-cases the string column named by `config.column`;
//! * `running-count` (stateful, keyed): appends `running_count`, the number of records seen so
//!   far for the record's key (`config.key`), kept in keyed state per key group so it survives
//!   restarts, savepoints and rescaling.
//!
//! Run: `cargo run -p streamjob-runtime --example custom_job -- run runtime/examples/custom-job.yaml`

use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use streamjob_runtime::Error;
use streamjob_runtime::keygroups::{Key, key_group_for_key, row_keys};
use streamjob_runtime::operator::{
    Collector, DataBatch, Operator, OperatorContext, RestoredState, StateDescriptor,
    SubtaskSnapshot, decode_state, encode_state,
};
use streamjob_runtime::registry::{OperatorPlan, Registry};

struct Uppercase {
    column: usize,
}

impl Operator for Uppercase {
    async fn initialize_state(
        &mut self,
        _: &OperatorContext,
        _: RestoredState,
    ) -> streamjob_runtime::Result<()> {
        Ok(())
    }

    async fn process_batch(
        &mut self,
        _: &OperatorContext,
        batch: DataBatch,
        out: &mut Collector,
    ) -> streamjob_runtime::Result<()> {
        let mut cols: Vec<ArrayRef> = batch.records.columns().to_vec();
        let upper: StringArray = cols[self.column]
            .as_string::<i32>()
            .iter()
            .map(|v| v.map(str::to_uppercase))
            .collect();
        cols[self.column] = Arc::new(upper);
        let records = RecordBatch::try_new(batch.records.schema(), cols)?;
        out.emit(DataBatch::new(records, batch.event_time)?);
        Ok(())
    }
}

struct RunningCount {
    key: usize,
    schema: Arc<Schema>,
    counts: HashMap<Key, (u32, i64)>,
}

impl Operator for RunningCount {
    async fn initialize_state(
        &mut self,
        ctx: &OperatorContext,
        restored: RestoredState,
    ) -> streamjob_runtime::Result<()> {
        for (kg, bytes) in &restored.keyed {
            let entries: Vec<(Key, i64)> = decode_state(&ctx.uid, bytes)?;
            for (k, n) in entries {
                self.counts.insert(k, (*kg, n));
            }
        }
        Ok(())
    }

    async fn process_batch(
        &mut self,
        ctx: &OperatorContext,
        batch: DataBatch,
        out: &mut Collector,
    ) -> streamjob_runtime::Result<()> {
        let keys = row_keys(&[batch.records.column(self.key).clone()], batch.num_rows())?;
        let mut running = Vec::with_capacity(keys.len());
        for k in keys {
            let kg = key_group_for_key(&k, ctx.max_parallelism);
            let e = self.counts.entry(k).or_insert((kg, 0));
            e.1 += 1;
            running.push(e.1);
        }
        let mut cols = batch.records.columns().to_vec();
        cols.push(Arc::new(Int64Array::from(running)));
        let records = RecordBatch::try_new(self.schema.clone(), cols)?;
        out.emit(DataBatch::new(records, batch.event_time)?);
        Ok(())
    }

    async fn snapshot_state(
        &mut self,
        _: &OperatorContext,
        _: u64,
    ) -> streamjob_runtime::Result<SubtaskSnapshot> {
        let mut groups: BTreeMap<u32, Vec<(Key, i64)>> = BTreeMap::new();
        for (k, (kg, n)) in &self.counts {
            groups.entry(*kg).or_default().push((k.clone(), *n));
        }
        let mut snap = SubtaskSnapshot::default();
        for (kg, mut v) in groups {
            v.sort();
            snap.keyed.insert(kg, encode_state(&v)?);
        }
        Ok(snap)
    }
}

fn column(
    cx: &streamjob_runtime::registry::CustomContext<'_>,
    setting: &str,
) -> streamjob_runtime::Result<usize> {
    let name = cx
        .config
        .get(setting)
        .ok_or_else(|| Error::plan(cx.uid, format!("config.{setting} is required")))?;
    cx.input_schema
        .index_of(name)
        .map_err(|_| Error::plan(cx.uid, format!("config.{setting}: no column {name:?}")))
}

fn main() -> ExitCode {
    let mut registry = Registry::with_builtins();
    registry.register("uppercase", |cx| {
        let column = column(cx, "column")?;
        if cx.input_schema.field(column).data_type() != &DataType::Utf8 {
            return Err(Error::plan(
                cx.uid,
                "uppercase: the column must be a string",
            ));
        }
        Ok(OperatorPlan::stateless(
            "custom:uppercase",
            cx.input_schema.clone(),
            move |_| Ok(Uppercase { column }),
        ))
    });
    registry.register("running-count", |cx| {
        let key = column(cx, "key")?;
        let mut fields: Vec<Field> = cx
            .input_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new("running_count", DataType::Int64, false));
        let schema = Arc::new(Schema::new(fields));
        let state = StateDescriptor::stateless()
            .field("count", "Int64")
            .keyed(cx.input_schema.field(key).data_type().to_string());
        let s2 = schema.clone();
        Ok(OperatorPlan::new(
            "custom:running-count",
            schema,
            state,
            Some(vec![key]),
            move |_| {
                Ok(RunningCount {
                    key,
                    schema: s2.clone(),
                    counts: HashMap::new(),
                })
            },
        ))
    });
    streamjob_runtime::cli::main_with_registry(registry)
}
