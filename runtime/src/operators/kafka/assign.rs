//! Which subtask reads which partition, the per-partition read position kept in state, and the
//! per-partition watermarks. Pure: no client, no I/O.
//!
//! Ownership follows Flink's Kafka source: the partitions of a topic are dealt round robin over
//! the subtasks, starting at a subtask chosen by a stable hash of the topic name, so every subtask
//! computes its own share from the topic metadata alone, the share is balanced, and a rescale
//! (another parallelism) deals the same partitions again.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::keygroups::{FNV_OFFSET_BASIS, stable_hash};

/// A topic partition.
pub type TopicPartition = (String, i32);

/// The subtask (of `parallelism`) that reads `partition` of `topic`.
pub fn owner(topic: &str, partition: i32, parallelism: usize) -> usize {
    let n = parallelism.max(1) as u64;
    let start = stable_hash(topic.as_bytes(), FNV_OFFSET_BASIS) % n;
    ((start + u64::from(partition.unsigned_abs())) % n) as usize
}

/// One entry of the source's list state: where to continue reading a partition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionState {
    pub topic: String,
    pub partition: i32,
    /// The next offset to read (last emitted + 1). `None`: nothing read yet, start at the
    /// partition's earliest offset (the only start that is not resolved to a number up front,
    /// because retention may move it and it still means "everything").
    pub next_offset: Option<i64>,
    /// Bounded reads (`stoppingOffsets: latest`): the offset to stop at, fixed when the partition
    /// was first assigned, so a restore ends at the same place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_offset: Option<i64>,
    /// The largest event time read from the partition, so a restored partition that has no new
    /// records yet does not hold the watermark back as if it had never been read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_event_time: Option<i64>,
}

impl PartitionState {
    /// Whether a bounded partition has been read to its end.
    pub fn finished(&self) -> bool {
        match (self.stop_offset, self.next_offset) {
            (Some(stop), Some(next)) => next >= stop,
            (Some(stop), None) => stop <= 0,
            (None, _) => false,
        }
    }
}

/// The restored state entries this subtask owns now (of all old subtasks' entries: union state),
/// by partition. A partition listed twice (it cannot be, unless state was edited) keeps the
/// entry that read further.
pub fn restored_share(
    union: Vec<PartitionState>,
    subtask: usize,
    parallelism: usize,
) -> BTreeMap<TopicPartition, PartitionState> {
    let mut share: BTreeMap<TopicPartition, PartitionState> = BTreeMap::new();
    for s in union {
        if owner(&s.topic, s.partition, parallelism) != subtask {
            continue;
        }
        let key = (s.topic.clone(), s.partition);
        match share.get(&key) {
            Some(prev) if prev.next_offset >= s.next_offset => {}
            _ => {
                share.insert(key, s);
            }
        }
    }
    share
}

/// Per-partition bounded-out-of-orderness watermarks with idleness: the subtask's watermark is
/// the smallest of its active partitions'; a partition without records for `idle_ms` stops
/// holding it back until it has records again.
#[derive(Clone, Debug, Default)]
pub struct PartitionWatermarks {
    /// partition → (largest event time seen, processing time of its last record)
    seen: BTreeMap<TopicPartition, (i64, i64)>,
    /// Partitions assigned that have had no record yet, with the time they were assigned.
    waiting: BTreeMap<TopicPartition, i64>,
    out_of_orderness_ms: i64,
    idle_ms: Option<i64>,
}

impl PartitionWatermarks {
    pub fn new(out_of_orderness_ms: i64, idle_ms: Option<i64>) -> Self {
        Self {
            out_of_orderness_ms,
            idle_ms,
            ..Default::default()
        }
    }

    /// A partition was assigned at processing time `now`; `max_event_time` is the largest event
    /// time read from it before (restored state), if any.
    pub fn assigned(&mut self, tp: &TopicPartition, max_event_time: Option<i64>, now: i64) {
        match max_event_time {
            Some(ts) => self.observe(tp, ts, now),
            None if !self.seen.contains_key(tp) => {
                self.waiting.entry(tp.clone()).or_insert(now);
            }
            None => {}
        }
    }

    /// A record of `tp` with event time `ts` was read at processing time `now`.
    pub fn observe(&mut self, tp: &TopicPartition, ts: i64, now: i64) {
        self.waiting.remove(tp);
        let e = self.seen.entry(tp.clone()).or_insert((i64::MIN, now));
        e.0 = e.0.max(ts);
        e.1 = now;
    }

    /// A bounded partition was read to its end: it no longer holds the watermark back.
    pub fn finished(&mut self, tp: &TopicPartition) {
        self.waiting.remove(tp);
        self.seen.remove(tp);
    }

    /// Whether every partition (of none) is idle at `now`: the subtask then declares itself idle
    /// downstream. Never without an idle timeout.
    pub fn is_idle(&self, now: i64) -> bool {
        let Some(idle) = self.idle_ms else {
            return false;
        };
        self.waiting.values().all(|since| now - since >= idle)
            && self.seen.values().all(|(_, last)| now - last >= idle)
    }

    /// The watermark at processing time `now`: `None` while no partition has given a record or
    /// every partition is idle (the subtask then has nothing to say about event time).
    pub fn current(&self, now: i64) -> Option<i64> {
        let idle = |last: i64| self.idle_ms.is_some_and(|idle| now - last >= idle);
        if self.waiting.values().any(|since| !idle(*since)) {
            return None;
        }
        self.seen
            .values()
            .filter(|(_, last)| !idle(*last))
            .map(|(max, _)| max.saturating_sub(self.out_of_orderness_ms + 1))
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_partition_has_exactly_one_owner_and_shares_are_balanced() {
        for parallelism in 1..=7 {
            let mut counts = vec![0usize; parallelism];
            for topic in ["clicks", "orders", "a"] {
                for p in 0..12 {
                    counts[owner(topic, p, parallelism)] += 1;
                }
            }
            let (min, max) = (
                counts.iter().min().copied().unwrap_or(0),
                counts.iter().max().copied().unwrap_or(0),
            );
            // 12 partitions of each topic dealt round robin: at most 3 apart over 3 topics
            assert!(max - min <= 3, "parallelism {parallelism}: {counts:?}");
            assert_eq!(counts.iter().sum::<usize>(), 36);
        }
        // one topic's partitions are consecutive subtasks
        let p = 4;
        let first = owner("clicks", 0, p);
        for i in 0..8 {
            assert_eq!(owner("clicks", i, p), (first + i as usize) % p);
        }
    }

    #[test]
    fn restored_share_deals_old_entries_to_new_owners() {
        let union: Vec<PartitionState> = (0..6)
            .map(|p| PartitionState {
                topic: "t".into(),
                partition: p,
                next_offset: Some(i64::from(p) * 10),
                stop_offset: None,
                max_event_time: None,
            })
            .collect();
        let mut all = Vec::new();
        for s in 0..4 {
            let share = restored_share(union.clone(), s, 4);
            for (tp, st) in &share {
                assert_eq!(owner(&tp.0, tp.1, 4), s);
                all.push(st.clone());
            }
        }
        all.sort_by_key(|s| s.partition);
        assert_eq!(all, union);
        // a duplicate keeps the entry that read further
        let mut dup = union.clone();
        dup.push(PartitionState {
            next_offset: Some(999),
            ..union[0].clone()
        });
        let s = owner("t", 0, 1);
        let share = restored_share(dup, s, 1);
        assert_eq!(share[&("t".to_string(), 0)].next_offset, Some(999));
    }

    #[test]
    fn bounded_partitions_finish_at_their_stop_offset() {
        let mut s = PartitionState {
            topic: "t".into(),
            partition: 0,
            next_offset: None,
            stop_offset: Some(0),
            max_event_time: None,
        };
        assert!(s.finished(), "an empty partition is done at once");
        s.stop_offset = Some(5);
        assert!(!s.finished());
        s.next_offset = Some(5);
        assert!(s.finished());
        s.stop_offset = None;
        assert!(!s.finished(), "unbounded never finishes");
    }

    #[test]
    fn watermark_is_the_minimum_of_active_partitions_and_idle_ones_stop_holding_it() {
        let a = ("t".to_string(), 0);
        let b = ("t".to_string(), 1);
        let mut w = PartitionWatermarks::new(100, Some(1_000));
        w.assigned(&a, None, 0);
        w.assigned(&b, None, 0);
        w.observe(&a, 5_000, 10);
        assert_eq!(
            w.current(10),
            None,
            "b has had no record and is not idle yet"
        );
        w.observe(&b, 3_000, 20);
        assert_eq!(w.current(20), Some(3_000 - 101));
        // b goes quiet: after the idle timeout only a counts
        w.observe(&a, 6_000, 1_500);
        assert_eq!(w.current(1_500), Some(6_000 - 101));
        // b has records again: it holds the watermark back again
        w.observe(&b, 4_000, 1_600);
        assert_eq!(w.current(1_600), Some(4_000 - 101));
        // everything idle: nothing to say, and the subtask is idle
        assert!(!w.is_idle(1_600));
        assert_eq!(w.current(10_000), None);
        assert!(w.is_idle(10_000));
        assert!(
            PartitionWatermarks::new(0, Some(1)).is_idle(0),
            "no partitions: idle"
        );
        // without an idle timeout a silent partition holds the watermark forever
        let mut strict = PartitionWatermarks::new(0, None);
        strict.assigned(&a, None, 0);
        strict.assigned(&b, Some(2_000), 0);
        assert_eq!(strict.current(0), None, "a has not been read yet");
        strict.observe(&a, 5_000, 10);
        assert_eq!(
            strict.current(1_000_000),
            Some(1_999),
            "b's restored progress counts without new records"
        );
        strict.finished(&b);
        assert_eq!(strict.current(1_000_000), Some(4_999));
        assert!(!strict.is_idle(i64::MAX), "never idle without a timeout");
    }
}
