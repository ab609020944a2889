//! A test harness for keyed functions (Flink's `KeyedOneInputStreamOperatorTestHarness`): feed
//! records and watermarks, move processing time by hand, snapshot, restore into other
//! parallelisms, and read what the function emitted — without a job.
//!
//! ```
//! # use serde::{Deserialize, Serialize};
//! # use streamjob_runtime::sdk::{Context, KeyedFunction, ValueState, harness::Harness};
//! # #[derive(Serialize, Deserialize)] struct Click { key: String }
//! # #[derive(Serialize, Deserialize, PartialEq, Debug)] struct Count { key: String, count: i64 }
//! # struct RunningCount { count: ValueState<i64> }
//! # impl KeyedFunction for RunningCount {
//! #     type In = Click; type Out = Count;
//! #     fn process(&mut self, c: Click, cx: &mut Context<'_, Count>) -> streamjob_runtime::Result<()> {
//! #         let n = self.count.get(cx)?.copied().unwrap_or(0) + 1;
//! #         self.count.set(cx, n)?; cx.emit(Count { key: c.key, count: n }); Ok(())
//! #     }
//! # }
//! let factory = |setup: &mut streamjob_runtime::sdk::Setup<'_>| {
//!     setup.key_by(&["key"]);
//!     Ok(RunningCount { count: setup.value_state("count")? })
//! };
//! let mut h = Harness::new(factory, &[]).unwrap();
//! h.process(Click { key: "a".into() }, 1).unwrap();
//! h.process(Click { key: "a".into() }, 2).unwrap();
//! assert_eq!(h.take_output().last().unwrap().0, Count { key: "a".into(), count: 2 });
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use arrow::array::Int64Array;
use arrow::datatypes::{FieldRef, Schema, SchemaRef};
use serde::Serialize;
use serde_arrow::schema::SchemaLike;

use super::driver::{Clock, KeyedOperator};
use super::{KeyedFunction, Setup, instantiate, tracing_options};
use crate::error::{Error, Result};
use crate::keygroups::key_group_range;
use crate::metrics::OperatorMetrics;
use crate::operator::{
    BadRecord, Collector, DataBatch, Operator, OperatorContext, RestoredState, StateDescriptor,
    SubtaskSnapshot,
};

/// Key groups of the harness unless [`Harness::restore`] says otherwise (the runtime's default
/// `maxParallelism`).
pub const DEFAULT_MAX_PARALLELISM: u32 = 128;

/// One subtask of a keyed function, driven by hand.
pub struct Harness<F: KeyedFunction> {
    operator: KeyedOperator<F>,
    ctx: OperatorContext,
    in_fields: Vec<FieldRef>,
    clock: Arc<AtomicI64>,
    state: StateDescriptor,
    output: Vec<(F::Out, i64)>,
    rejected: Vec<BadRecord>,
}

type Factory<'f, F> = &'f (dyn Fn(&mut Setup<'_>) -> Result<F> + Send + Sync);

impl<F: KeyedFunction> Harness<F>
where
    F::In: Serialize,
{
    /// Subtask 0 of 1, fresh state, processing time 0; the input columns are `F::In`'s fields.
    pub fn new(
        factory: impl Fn(&mut Setup<'_>) -> Result<F> + Send + Sync,
        config: &[(&str, &str)],
    ) -> Result<Self> {
        Self::restore(&factory, config, 0, 1, DEFAULT_MAX_PARALLELISM, &[], 0)
    }

    /// Subtask `subtask` of `parallelism`, restoring the key groups it owns from `snapshots`
    /// (every old subtask's snapshot, whatever the old parallelism), at processing time `now`.
    pub fn restore(
        factory: Factory<'_, F>,
        config: &[(&str, &str)],
        subtask: usize,
        parallelism: usize,
        max_parallelism: u32,
        snapshots: &[SubtaskSnapshot],
        now: i64,
    ) -> Result<Self> {
        let in_fields = Vec::<FieldRef>::from_type::<F::In>(tracing_options())
            .map_err(|e| Error::Other(format!("input type: {e}")))?;
        let input: SchemaRef = Arc::new(Schema::new(in_fields.clone()));
        let config: BTreeMap<String, String> = config
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        let clock = Arc::new(AtomicI64::new(now));
        let (mut operator, state) = instantiate(
            factory,
            "harness",
            &config,
            &input,
            Clock::Manual(clock.clone()),
        )?;
        let key_groups = key_group_range(max_parallelism, parallelism as u32, subtask as u32);
        let ctx = OperatorContext {
            uid: "harness".into(),
            subtask,
            parallelism,
            max_parallelism,
            key_groups: key_groups.clone(),
            bad_record_policy: Default::default(),
            input_schema: input,
            metrics: Arc::new(OperatorMetrics::default()),
        };
        let mut restored = RestoredState::default();
        for snap in snapshots {
            for (kg, bytes) in &snap.keyed {
                if key_groups.contains(kg) {
                    restored.keyed.insert(*kg, bytes.clone());
                }
            }
        }
        futures::executor::block_on(operator.initialize_state(&ctx, restored))?;
        Ok(Self {
            operator,
            ctx,
            in_fields,
            clock,
            state,
            output: Vec::new(),
            rejected: Vec::new(),
        })
    }

    /// What the function declared (as recorded in savepoint metadata).
    pub fn state_descriptor(&self) -> &StateDescriptor {
        &self.state
    }

    /// Processes one record with event time `event_time`.
    pub fn process(&mut self, record: F::In, event_time: i64) -> Result<()> {
        let batch = serde_arrow::to_record_batch(&self.in_fields, &vec![record])
            .map_err(|e| Error::Other(format!("input record does not encode: {e}")))?;
        let batch = DataBatch::new(batch, Int64Array::from(vec![event_time]))?;
        let mut out = Collector::default();
        futures::executor::block_on(self.operator.process_batch(&self.ctx, batch, &mut out))?;
        self.collect(out)
    }

    /// Advances the watermark (fires due event-time timers).
    pub fn watermark(&mut self, watermark: i64) -> Result<()> {
        let mut out = Collector::default();
        futures::executor::block_on(
            self.operator
                .process_watermark(&self.ctx, watermark, &mut out),
        )?;
        self.collect(out)
    }

    /// Sets processing time to `now` (fires due processing-time timers; expires TTL'd state).
    pub fn set_processing_time(&mut self, now: i64) -> Result<()> {
        self.clock.store(now, Ordering::SeqCst);
        let mut out = Collector::default();
        futures::executor::block_on(self.operator.on_timer(&self.ctx, now, &mut out))?;
        self.collect(out)
    }

    /// Snapshots state and timers, as at a checkpoint barrier.
    pub fn snapshot(&mut self) -> Result<SubtaskSnapshot> {
        futures::executor::block_on(self.operator.snapshot_state(&self.ctx, 0))
    }

    /// Emitted records and their event times since the last call.
    pub fn take_output(&mut self) -> Vec<(F::Out, i64)> {
        std::mem::take(&mut self.output)
    }

    /// Records the function rejected ([`super::Context::reject`]).
    pub fn rejected(&self) -> &[BadRecord] {
        &self.rejected
    }

    /// Keys holding each declared state (in declaration order) and pending timers.
    pub fn sizes(&self) -> (Vec<usize>, usize) {
        self.operator.sizes()
    }

    fn collect(&mut self, mut out: Collector) -> Result<()> {
        for batch in out.take_batches() {
            let records: Vec<F::Out> = serde_arrow::from_record_batch(&batch.records)
                .map_err(|e| Error::Other(format!("output does not decode: {e}")))?;
            self.output.extend(
                records
                    .into_iter()
                    .zip(batch.event_time.values().iter().copied()),
            );
        }
        self.rejected.append(&mut out.bad_records);
        Ok(())
    }
}
