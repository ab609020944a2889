//! Fairness between namespaces (tenants) of one operator.
//!
//! An operator that watches every namespace runs one controller with `--concurrency` reconcile
//! slots. A reconcile of a job whose pods hang waits for its control calls' timeout (5 s by
//! default), and such a job is queued again within seconds: 200 hung jobs in one namespace keep
//! every slot busy, and a StreamJob of another namespace waits for minutes before anyone looks at
//! it. So no namespace may hold more than `--namespace-concurrency` slots at once: a reconcile of
//! a namespace at its limit gives its slot back at once and is queued again a moment later
//! ([`DEFER`], with jitter so that a namespace's deferred jobs do not come back in lockstep). The
//! other slots stay free for everyone else. (With `--namespace` the operator already runs one
//! controller per namespace, each with its own slots.)

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rand::Rng;

/// How long a deferred reconcile waits before it is tried again (plus up to as much jitter).
pub const DEFER: Duration = Duration::from_millis(500);

/// Reconciles in flight per namespace, bounded by `limit`.
#[derive(Debug)]
pub struct NamespaceSlots {
    limit: usize,
    busy: Mutex<HashMap<String, usize>>,
}

/// A reconcile slot of one namespace, given back when dropped (also when the reconcile future is
/// dropped half-way, e.g. at shutdown).
#[derive(Debug)]
pub struct Slot<'a> {
    slots: &'a NamespaceSlots,
    namespace: String,
}

impl NamespaceSlots {
    /// At most `limit` reconciles per namespace at once (at least one).
    pub fn new(limit: u16) -> Self {
        Self {
            limit: usize::from(limit.max(1)),
            busy: Mutex::default(),
        }
    }

    fn busy(&self) -> MutexGuard<'_, HashMap<String, usize>> {
        self.busy.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot of `namespace`, or `None` while it already holds `limit`.
    pub fn try_take(&self, namespace: &str) -> Option<Slot<'_>> {
        let mut busy = self.busy();
        let n = busy.entry(namespace.to_string()).or_insert(0);
        if *n >= self.limit {
            return None;
        }
        *n += 1;
        Some(Slot {
            slots: self,
            namespace: namespace.to_string(),
        })
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut busy = self.slots.busy();
        if let Some(n) = busy.get_mut(&self.namespace) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                busy.remove(&self.namespace);
            }
        }
    }
}

/// When to try a deferred reconcile again: [`DEFER`] to twice that.
pub fn defer_delay() -> Duration {
    DEFER + DEFER.mul_f64(rand::rng().random_range(0.0..1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    impl NamespaceSlots {
        fn in_flight(&self, namespace: &str) -> usize {
            self.busy().get(namespace).copied().unwrap_or(0)
        }
    }

    #[test]
    fn a_namespace_holds_at_most_its_limit_and_others_are_unaffected() {
        let slots = NamespaceSlots::new(2);
        let a1 = slots.try_take("a").expect("first slot of a");
        let a2 = slots.try_take("a").expect("second slot of a");
        assert!(slots.try_take("a").is_none(), "a is at its limit");
        let b = slots.try_take("b").expect("b has its own slots");
        assert_eq!((slots.in_flight("a"), slots.in_flight("b")), (2, 1));
        drop(a1);
        let a3 = slots
            .try_take("a")
            .expect("a slot given back is free again");
        drop((a2, a3, b));
        assert_eq!((slots.in_flight("a"), slots.in_flight("b")), (0, 0));
        assert!(slots.busy().is_empty(), "no entry kept for idle namespaces");
    }

    #[test]
    fn a_limit_of_zero_still_lets_one_through() {
        let slots = NamespaceSlots::new(0);
        let s = slots.try_take("a");
        assert!(s.is_some());
        assert!(slots.try_take("a").is_none());
    }

    #[test]
    fn deferral_is_jittered_within_bounds() {
        for _ in 0..100 {
            let d = defer_delay();
            assert!(d >= DEFER && d <= DEFER * 2, "{d:?}");
        }
    }
}
