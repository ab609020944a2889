//! `dedup`: keep the first record of each key; drop records whose key was seen less than
//! `within` (event time) before. Seen keys are forgotten once the watermark passes
//! `first seen + within`.

use std::collections::{BTreeMap, HashMap};

use arrow::array::{ArrayRef, BooleanArray};
use arrow::datatypes::SchemaRef;

use crate::error::Result;
use crate::keygroups::{Key, key_group_for_key, row_keys};
use crate::operator::{
    Collector, DataBatch, Operator, OperatorContext, RestoredState, StateDescriptor,
    SubtaskSnapshot, decode_state, encode_state,
};
use crate::operators::window::{key_indices, key_type_name};

/// A dedup subtask.
pub struct DedupOperator {
    key_columns: Vec<usize>,
    within: i64,
    /// key → (key group, first seen event time)
    seen: HashMap<Key, (u32, i64)>,
}

/// Plans a dedup step: key column indices and state descriptor.
pub fn dedup_plan(
    uid: &str,
    input: &SchemaRef,
    keys: &[String],
) -> Result<(Vec<usize>, StateDescriptor)> {
    let idx = key_indices(uid, input, keys)?;
    let state = StateDescriptor::stateless()
        .field("firstSeen", "Timestamp")
        .keyed(key_type_name(input, &idx));
    Ok((idx, state))
}

impl DedupOperator {
    /// A subtask.
    pub fn new(key_columns: Vec<usize>, within: i64) -> Self {
        Self {
            key_columns,
            within,
            seen: HashMap::new(),
        }
    }
}

impl Operator for DedupOperator {
    async fn initialize_state(
        &mut self,
        ctx: &OperatorContext,
        restored: RestoredState,
    ) -> Result<()> {
        for (kg, bytes) in &restored.keyed {
            let entries: Vec<(Key, i64)> = decode_state(&ctx.uid, bytes)?;
            for (k, t) in entries {
                self.seen.insert(k, (*kg, t));
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
        let cols: Vec<ArrayRef> = self
            .key_columns
            .iter()
            .map(|i| batch.records.column(*i).clone())
            .collect();
        let keys = row_keys(&cols, batch.num_rows())?;
        let mut keep = Vec::with_capacity(keys.len());
        for (row, key) in keys.into_iter().enumerate() {
            let ts = batch.event_time.value(row);
            match self.seen.get_mut(&key) {
                Some((_, first)) if ts < first.saturating_add(self.within) && ts >= *first => {
                    keep.push(false)
                }
                Some((_, first)) => {
                    *first = ts;
                    keep.push(true);
                }
                None => {
                    let kg = key_group_for_key(&key, ctx.max_parallelism);
                    self.seen.insert(key, (kg, ts));
                    keep.push(true);
                }
            }
        }
        out.emit(batch.filter(&BooleanArray::from(keep))?);
        Ok(())
    }

    async fn process_watermark(
        &mut self,
        _ctx: &OperatorContext,
        watermark: i64,
        _out: &mut Collector,
    ) -> Result<()> {
        let within = self.within;
        self.seen
            .retain(|_, (_, first)| first.saturating_add(within) > watermark);
        Ok(())
    }

    async fn snapshot_state(
        &mut self,
        _ctx: &OperatorContext,
        _id: u64,
    ) -> Result<SubtaskSnapshot> {
        let mut groups: BTreeMap<u32, Vec<(Key, i64)>> = BTreeMap::new();
        for (k, (kg, t)) in &self.seen {
            groups.entry(*kg).or_default().push((k.clone(), *t));
        }
        let mut snap = SubtaskSnapshot::default();
        for (kg, mut v) in groups {
            v.sort();
            snap.keyed.insert(kg, encode_state(&v)?);
        }
        Ok(snap)
    }
}
