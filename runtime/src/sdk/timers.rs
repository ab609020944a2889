//! Event-time and processing-time timers, one set per key (Flink's `TimerService`).
//!
//! A timer is a (timestamp, key) pair: registering the same one twice fires it once. Event-time
//! timers fire when the watermark reaches their timestamp (all of them at the end of a bounded
//! input, whose final watermark is `i64::MAX`); processing-time timers when the wall clock does.
//! Timers are keyed state: snapshotted with their key's key group and restored by whichever
//! subtask owns it after a rescale.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::keygroups::Key;

/// Which clock a timer follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TimeDomain {
    /// The watermark (event time).
    EventTime,
    /// The wall clock of the subtask.
    ProcessingTime,
}

/// A timer that fired, handed to [`super::KeyedFunction::on_timer`]; the context is scoped to
/// its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timer {
    /// The time it was registered for (ms since the epoch).
    pub timestamp: i64,
    /// Its clock.
    pub domain: TimeDomain,
}

/// The timers of one subtask.
#[derive(Default, Debug)]
pub(crate) struct Timers {
    event: BTreeSet<(i64, Key)>,
    processing: BTreeSet<(i64, Key)>,
}

impl Timers {
    fn set(&mut self, domain: TimeDomain) -> &mut BTreeSet<(i64, Key)> {
        match domain {
            TimeDomain::EventTime => &mut self.event,
            TimeDomain::ProcessingTime => &mut self.processing,
        }
    }

    pub(crate) fn register(&mut self, domain: TimeDomain, timestamp: i64, key: &Key) {
        self.set(domain).insert((timestamp, key.clone()));
    }

    pub(crate) fn delete(&mut self, domain: TimeDomain, timestamp: i64, key: &Key) {
        self.set(domain).remove(&(timestamp, key.clone()));
    }

    /// Removes and returns the earliest timer due at `time`, if any. Called in a loop, so a
    /// timer registered by a firing timer for a time already reached fires in the same round.
    pub(crate) fn pop_due(&mut self, domain: TimeDomain, time: i64) -> Option<(i64, Key)> {
        let set = self.set(domain);
        if set.first().is_some_and(|(t, _)| *t <= time) {
            set.pop_first()
        } else {
            None
        }
    }

    /// Every timer, for snapshots.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (TimeDomain, i64, &Key)> {
        self.event
            .iter()
            .map(|(t, k)| (TimeDomain::EventTime, *t, k))
            .chain(
                self.processing
                    .iter()
                    .map(|(t, k)| (TimeDomain::ProcessingTime, *t, k)),
            )
    }

    /// Number of pending timers.
    pub(crate) fn len(&self) -> usize {
        self.event.len() + self.processing.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keygroups::KeyValue;

    fn key(s: &str) -> Key {
        vec![KeyValue::Str(s.into())]
    }

    #[test]
    fn timers_fire_in_time_order_once_per_key_and_time() {
        let mut t = Timers::default();
        t.register(TimeDomain::EventTime, 20, &key("b"));
        t.register(TimeDomain::EventTime, 10, &key("a"));
        t.register(TimeDomain::EventTime, 10, &key("a"));
        t.register(TimeDomain::EventTime, 30, &key("a"));
        t.register(TimeDomain::ProcessingTime, 5, &key("a"));
        t.delete(TimeDomain::EventTime, 30, &key("a"));
        assert_eq!(t.len(), 3);
        let mut fired = Vec::new();
        while let Some(x) = t.pop_due(TimeDomain::EventTime, 25) {
            fired.push(x);
        }
        assert_eq!(fired, vec![(10, key("a")), (20, key("b"))]);
        assert_eq!(t.pop_due(TimeDomain::ProcessingTime, 4), None);
        assert_eq!(
            t.pop_due(TimeDomain::ProcessingTime, 5),
            Some((5, key("a")))
        );
        assert_eq!(t.len(), 0);
    }
}
