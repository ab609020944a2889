//! Key groups: how keyed state is partitioned and spread over subtasks.
//!
//! A key is hashed with a stable hash (it is part of the savepoint format: changing it would move
//! keys to other key groups), reduced modulo `maxParallelism` to its key group, and key groups are
//! assigned to subtasks in contiguous ranges exactly like Flink's `KeyGroupRangeAssignment`.

use std::ops::RangeInclusive;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{
    DataType, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, TimeUnit,
    TimestampMillisecondType, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// One component of a key, independent of Arrow so that it can live in snapshots.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum KeyValue {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    /// Floats are keyed by their bit pattern.
    FloatBits(u64),
    Str(String),
}

/// A (possibly composite) key.
pub type Key = Vec<KeyValue>;

/// 64-bit FNV-1a followed by the murmur3 finaliser: stable across platforms and versions.
pub fn stable_hash(bytes: &[u8], mut h: u64) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

pub const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;

fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

/// Hash of a key; part of the state format.
pub fn hash_key(key: &[KeyValue]) -> u64 {
    let mut h = FNV_OFFSET_BASIS;
    for v in key {
        h = match v {
            KeyValue::Null => stable_hash(&[0], h),
            KeyValue::Bool(b) => stable_hash(&[1, u8::from(*b)], h),
            KeyValue::Int(i) => stable_hash(&i.to_le_bytes(), stable_hash(&[2], h)),
            KeyValue::UInt(u) => stable_hash(&u.to_le_bytes(), stable_hash(&[3], h)),
            KeyValue::FloatBits(u) => stable_hash(&u.to_le_bytes(), stable_hash(&[4], h)),
            KeyValue::Str(s) => stable_hash(s.as_bytes(), stable_hash(&[5], h)),
        };
        h = stable_hash(&[0xff], h);
    }
    fmix64(h)
}

/// The key group of a key: `hash(key) % maxParallelism`.
pub fn key_group_for_key(key: &[KeyValue], max_parallelism: u32) -> u32 {
    (hash_key(key) % u64::from(max_parallelism.max(1))) as u32
}

/// The subtask that owns a key group (Flink's `computeOperatorIndexForKeyGroup`).
pub fn subtask_for_key_group(key_group: u32, max_parallelism: u32, parallelism: u32) -> u32 {
    ((u64::from(key_group) * u64::from(parallelism)) / u64::from(max_parallelism.max(1))) as u32
}

/// The contiguous key-group range of a subtask (Flink's
/// `computeKeyGroupRangeForOperatorIndex`). Empty when `maxParallelism < parallelism` leaves the
/// subtask without key groups (validation forbids that).
pub fn key_group_range(
    max_parallelism: u32,
    parallelism: u32,
    subtask: u32,
) -> RangeInclusive<u32> {
    let mp = u64::from(max_parallelism);
    let p = u64::from(parallelism.max(1));
    let i = u64::from(subtask);
    let start = (i * mp).div_ceil(p);
    let end = ((i + 1) * mp).saturating_sub(1) / p;
    #[allow(clippy::reversed_empty_ranges)]
    if end < start {
        return 1..=0;
    }
    (start as u32)..=(end as u32)
}

/// Extracts the key of every row from the key columns.
pub fn row_keys(columns: &[ArrayRef], rows: usize) -> Result<Vec<Key>> {
    let mut keys: Vec<Key> = (0..rows)
        .map(|_| Vec::with_capacity(columns.len()))
        .collect();
    for col in columns {
        for (row, key) in keys.iter_mut().enumerate() {
            key.push(key_value(col, row)?);
        }
    }
    Ok(keys)
}

/// The [`KeyValue`] of one cell.
pub fn key_value(col: &ArrayRef, row: usize) -> Result<KeyValue> {
    if col.is_null(row) {
        return Ok(KeyValue::Null);
    }
    Ok(match col.data_type() {
        DataType::Boolean => KeyValue::Bool(col.as_boolean().value(row)),
        DataType::Int8 => KeyValue::Int(i64::from(col.as_primitive::<Int8Type>().value(row))),
        DataType::Int16 => KeyValue::Int(i64::from(col.as_primitive::<Int16Type>().value(row))),
        DataType::Int32 => KeyValue::Int(i64::from(col.as_primitive::<Int32Type>().value(row))),
        DataType::Int64 => KeyValue::Int(col.as_primitive::<Int64Type>().value(row)),
        DataType::UInt8 => KeyValue::UInt(u64::from(col.as_primitive::<UInt8Type>().value(row))),
        DataType::UInt16 => KeyValue::UInt(u64::from(col.as_primitive::<UInt16Type>().value(row))),
        DataType::UInt32 => KeyValue::UInt(u64::from(col.as_primitive::<UInt32Type>().value(row))),
        DataType::UInt64 => KeyValue::UInt(col.as_primitive::<UInt64Type>().value(row)),
        DataType::Float32 => {
            KeyValue::FloatBits(f64::from(col.as_primitive::<Float32Type>().value(row)).to_bits())
        }
        DataType::Float64 => {
            KeyValue::FloatBits(col.as_primitive::<Float64Type>().value(row).to_bits())
        }
        DataType::Utf8 => KeyValue::Str(col.as_string::<i32>().value(row).to_string()),
        DataType::LargeUtf8 => KeyValue::Str(col.as_string::<i64>().value(row).to_string()),
        DataType::Utf8View => KeyValue::Str(col.as_string_view().value(row).to_string()),
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            KeyValue::Int(col.as_primitive::<TimestampMillisecondType>().value(row))
        }
        other => {
            return Err(Error::Unsupported(format!(
                "key columns of type {other} (use string, integer, float, bool or timestamp)"
            )));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_all_key_groups_contiguously_like_flink() {
        for mp in [1u32, 7, 128, 1000] {
            for p in 1..=mp.min(17) {
                let mut next = 0;
                for i in 0..p {
                    let r = key_group_range(mp, p, i);
                    assert_eq!(*r.start(), next, "mp={mp} p={p} i={i}");
                    for kg in r.clone() {
                        assert_eq!(subtask_for_key_group(kg, mp, p), i);
                    }
                    next = r.end() + 1;
                }
                assert_eq!(next, mp);
            }
        }
        // Flink: maxParallelism 128, parallelism 3 → [0,42], [43,85], [86,127]
        assert_eq!(key_group_range(128, 3, 0), 0..=42);
        assert_eq!(key_group_range(128, 3, 1), 43..=85);
        assert_eq!(key_group_range(128, 3, 2), 86..=127);
    }

    #[test]
    fn key_groups_are_stable_and_spread() {
        let k = vec![KeyValue::Str("key-1".into())];
        // part of the savepoint format: must never change
        assert_eq!(hash_key(&k), hash_key(&k.clone()));
        let frozen = key_group_for_key(&k, 128);
        assert_eq!(
            frozen,
            key_group_for_key(&[KeyValue::Str("key-1".into())], 128)
        );
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..1000 {
            seen.insert(key_group_for_key(&[KeyValue::Str(format!("key-{i}"))], 128));
        }
        assert!(seen.len() > 120, "only {} key groups used", seen.len());
        assert!(key_group_for_key(&k, 128) < 128);
    }

    #[test]
    fn golden_hash_values_do_not_change() {
        // Changing these breaks every savepoint with keyed state.
        assert_eq!(
            hash_key(&[KeyValue::Str("key-0".into())]),
            GOLDEN_KEY0,
            "the key hash is part of the snapshot format"
        );
    }
    const GOLDEN_KEY0: u64 = 10_637_017_596_825_918_390;
}
