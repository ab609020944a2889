//! When a failed attempt of a run restarts: exponential delay with jitter, and a budget of
//! restarts that resets after a healthy attempt — Flink's `exponential-delay` restart strategy.
//! So a store outage of a minute is ridden out, and a job that fails for good gives up after a
//! few minutes instead of in a tight loop. Pure: the caller measures and sleeps.

use std::time::Duration;

/// The restart strategy of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct RestartPolicy {
    /// Restarts allowed in a row (`--max-restarts`); the count resets after a healthy attempt.
    pub max_restarts: u32,
    /// Delay before the first restart.
    pub initial: Duration,
    /// The delay doubles per restart up to this.
    pub max: Duration,
    /// An attempt that ran this long was healthy: the next failure starts the count anew.
    pub reset_after: Duration,
    /// Each delay is moved by up to this fraction either way, so the pods of many jobs that
    /// failed together (a store outage) do not all retry at the same instant.
    pub jitter: f64,
}

impl RestartPolicy {
    /// The runtime's strategy with `max_restarts` restarts in a row: 0.5 s doubling to 60 s
    /// (about four minutes of retries with the default 10), reset after 10 healthy minutes.
    pub fn exponential(max_restarts: u32) -> Self {
        Self {
            max_restarts,
            initial: Duration::from_millis(500),
            max: Duration::from_secs(60),
            reset_after: Duration::from_secs(600),
            jitter: 0.1,
        }
    }
}

/// What to do after a failed attempt.
#[derive(Clone, Debug, PartialEq)]
pub enum RestartDecision {
    /// Restart after `delay`; `restart` counts the restarts in a row (1 for the first).
    Restart { restart: u32, delay: Duration },
    /// The budget is spent: the run fails after `restarts` restarts in a row.
    GiveUp { restarts: u32 },
}

/// The restarts of one run so far.
#[derive(Clone, Debug)]
pub struct Restarts {
    policy: RestartPolicy,
    in_a_row: u32,
}

impl Restarts {
    pub fn new(policy: RestartPolicy) -> Self {
        Self {
            policy,
            in_a_row: 0,
        }
    }

    /// An attempt that ran for `ran_for` failed; `unit` is a random number in [0, 1) for the
    /// jitter.
    pub fn on_failure(&mut self, ran_for: Duration, unit: f64) -> RestartDecision {
        if ran_for >= self.policy.reset_after {
            self.in_a_row = 0;
        }
        if self.in_a_row >= self.policy.max_restarts {
            return RestartDecision::GiveUp {
                restarts: self.in_a_row,
            };
        }
        self.in_a_row += 1;
        let doubled = self
            .policy
            .initial
            .saturating_mul(1u32 << (self.in_a_row - 1).min(20));
        let base = doubled.min(self.policy.max);
        let factor = 1.0 + self.policy.jitter * (2.0 * unit.clamp(0.0, 1.0) - 1.0);
        RestartDecision::Restart {
            restart: self.in_a_row,
            delay: base.mul_f64(factor.max(0.0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delays(r: &mut Restarts, n: usize, ran_for: Duration) -> Vec<RestartDecision> {
        (0..n).map(|_| r.on_failure(ran_for, 0.5)).collect()
    }

    #[test]
    fn delays_double_up_to_the_cap_then_the_budget_runs_out() {
        let mut r = Restarts::new(RestartPolicy::exponential(10));
        let got = delays(&mut r, 11, Duration::from_millis(10));
        let ms: Vec<u128> = got
            .iter()
            .filter_map(|d| match d {
                RestartDecision::Restart { delay, .. } => Some(delay.as_millis()),
                RestartDecision::GiveUp { .. } => None,
            })
            .collect();
        assert_eq!(
            ms,
            vec![
                500, 1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000, 60000
            ]
        );
        assert_eq!(got[10], RestartDecision::GiveUp { restarts: 10 });
        // a minute of outage is ridden out: the first seven delays alone add up to > 60 s
        assert!(ms[..7].iter().sum::<u128>() > 60_000);
    }

    #[test]
    fn a_healthy_attempt_resets_the_budget() {
        let mut r = Restarts::new(RestartPolicy::exponential(2));
        delays(&mut r, 2, Duration::from_secs(1));
        assert_eq!(
            r.on_failure(Duration::from_secs(1), 0.5),
            RestartDecision::GiveUp { restarts: 2 }
        );
        assert_eq!(
            r.on_failure(Duration::from_secs(601), 0.5),
            RestartDecision::Restart {
                restart: 1,
                delay: Duration::from_millis(500)
            }
        );
    }

    #[test]
    fn jitter_stays_within_its_fraction() {
        for unit in [0.0, 0.25, 0.999] {
            let mut r = Restarts::new(RestartPolicy::exponential(3));
            let RestartDecision::Restart { delay, .. } = r.on_failure(Duration::ZERO, unit) else {
                panic!("restarts");
            };
            assert!(delay >= Duration::from_millis(450) && delay <= Duration::from_millis(550));
        }
    }

    #[test]
    fn no_restarts_allowed_gives_up_at_once() {
        let mut r = Restarts::new(RestartPolicy::exponential(0));
        assert_eq!(
            r.on_failure(Duration::ZERO, 0.5),
            RestartDecision::GiveUp { restarts: 0 }
        );
    }
}
