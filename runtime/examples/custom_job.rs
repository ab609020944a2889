//! An example job binary with its own operators, registered by name and referenced from the
//! manifest (`examples/custom-job.yaml`):
//!
//! * `uppercase` (stateless): upper-cases the string column named by `config.column`;
//! * `running-count` (stateful, keyed, written with the job SDK): emits each record's key and
//!   `running_count`, the number of records seen so far for that key, kept in managed keyed
//!   state (the engine snapshots, restores and re-divides it on rescaling).
//!
//! Run: `cargo run -p streamjob-runtime --example custom_job -- run runtime/examples/custom-job.yaml`

use std::process::ExitCode;
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, StringArray};
use arrow::datatypes::DataType;
use arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};
use streamjob_runtime::operator::{Collector, DataBatch, Operator, OperatorContext, RestoredState};
use streamjob_runtime::registry::{OperatorPlan, Registry};
use streamjob_runtime::sdk::{Context, KeyedFunction, ValueState};
use streamjob_runtime::{Error, Result};

struct Uppercase {
    column: usize,
}

impl Operator for Uppercase {
    async fn initialize_state(&mut self, _: &OperatorContext, _: RestoredState) -> Result<()> {
        Ok(())
    }

    async fn process_batch(
        &mut self,
        _: &OperatorContext,
        batch: DataBatch,
        out: &mut Collector,
    ) -> Result<()> {
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

/// Input of `running-count`: only the key column is decoded.
#[derive(Deserialize)]
struct Keyed {
    key: String,
}

/// Output of `running-count`.
#[derive(Serialize, Deserialize)]
struct Counted {
    key: String,
    running_count: i64,
}

/// Keyed state per key, managed by the engine (snapshots, restores, rescaling).
struct RunningCount {
    count: ValueState<i64>,
}

impl KeyedFunction for RunningCount {
    type In = Keyed;
    type Out = Counted;

    fn process(&mut self, record: Keyed, cx: &mut Context<'_, Counted>) -> Result<()> {
        let running_count = self.count.get(cx)?.copied().unwrap_or(0) + 1;
        self.count.set(cx, running_count)?;
        cx.emit(Counted {
            key: record.key,
            running_count,
        });
        Ok(())
    }
}

fn column(cx: &streamjob_runtime::registry::CustomContext<'_>, setting: &str) -> Result<usize> {
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
    registry.register_keyed("running-count", |setup| {
        setup.key_by(&["key"]);
        Ok(RunningCount {
            count: setup.value_state("count")?,
        })
    });
    streamjob_runtime::cli::main_with_registry(registry)
}
