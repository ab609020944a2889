//! Rolling policies: when an in-progress part file is closed and becomes pending.

use std::time::Duration;

use streamjob_crds::units::{parse_duration, parse_size};
use streamjob_crds::v1alpha1::{DefaultRollingPolicy, RollingPolicySpec};

use crate::error::{Error, Result};

/// A rolling policy with everything parsed. Times are epoch milliseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct RollingPolicy {
    /// Roll on size, age and inactivity (Flink's DefaultRollingPolicy); `false`: on checkpoint only.
    pub default_policy: bool,
    /// Roll once a part reaches this many bytes.
    pub max_part_size: u64,
    /// Roll a part open this long.
    pub rollover_interval: Duration,
    /// Roll a part that received nothing for this long.
    pub inactivity_interval: Duration,
    /// How often time-based rolling is checked.
    pub bucket_check_interval: Duration,
    /// Bulk format: always roll on checkpoint.
    pub bulk: bool,
}

impl RollingPolicy {
    /// Builds the policy of a manifest (default: Flink's defaults). `bulk`: the format is a bulk
    /// format (Parquet), which rolls on every checkpoint in addition.
    pub fn from_spec(spec: Option<&RollingPolicySpec>, bulk: bool) -> Result<Self> {
        let defaults = DefaultRollingPolicy::default();
        let (default_policy, d) = match spec {
            None => (true, &defaults),
            Some(s) => match (&s.default, &s.on_checkpoint) {
                (Some(d), None) => (true, d),
                (None, Some(_)) => (false, &defaults),
                _ => {
                    return Err(Error::Config(
                        "rollingPolicy: set exactly one of default or onCheckpoint".into(),
                    ));
                }
            },
        };
        let p = RollingPolicy {
            default_policy,
            max_part_size: parse_size("rollingPolicy.default.maxPartSize", &d.max_part_size)?,
            rollover_interval: parse_duration(
                "rollingPolicy.default.rolloverInterval",
                &d.rollover_interval,
            )?,
            inactivity_interval: parse_duration(
                "rollingPolicy.default.inactivityInterval",
                &d.inactivity_interval,
            )?,
            bucket_check_interval: parse_duration(
                "rollingPolicy.default.bucketCheckInterval",
                &d.bucket_check_interval,
            )?,
            bulk,
        };
        if p.bucket_check_interval.is_zero() {
            return Err(Error::Config(
                "rollingPolicy.default.bucketCheckInterval must be positive".into(),
            ));
        }
        if p.max_part_size == 0 {
            return Err(Error::Config(
                "rollingPolicy.default.maxPartSize must be positive".into(),
            ));
        }
        Ok(p)
    }

    /// After writing: roll when the part reached the maximum size.
    pub fn should_roll_on_event(&self, part_size: u64) -> bool {
        self.default_policy && part_size >= self.max_part_size
    }

    /// On a bucket check: roll when the part is too old or inactive.
    pub fn should_roll_on_processing_time(&self, created: i64, last_write: i64, now: i64) -> bool {
        self.default_policy
            && (now.saturating_sub(created) >= self.rollover_interval.as_millis() as i64
                || now.saturating_sub(last_write) >= self.inactivity_interval.as_millis() as i64)
    }

    /// At a checkpoint: roll (else the part stays in progress and its state is persisted).
    pub fn should_roll_on_checkpoint(&self, part_size: u64) -> bool {
        self.bulk || !self.default_policy || part_size >= self.max_part_size
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use streamjob_crds::v1alpha1::EmptySpec;

    fn default_spec(size: &str, roll: &str, idle: &str) -> RollingPolicySpec {
        RollingPolicySpec {
            default: Some(DefaultRollingPolicy {
                max_part_size: size.into(),
                rollover_interval: roll.into(),
                inactivity_interval: idle.into(),
                bucket_check_interval: "1s".into(),
            }),
            on_checkpoint: None,
        }
    }

    #[test]
    fn default_policy_decisions() {
        let p = RollingPolicy::from_spec(Some(&default_spec("1KiB", "10s", "3s")), false).unwrap();
        assert!(!p.should_roll_on_event(1023));
        assert!(p.should_roll_on_event(1024));
        // created at 0, last write at 5s
        assert!(!p.should_roll_on_processing_time(0, 5_000, 7_999));
        assert!(p.should_roll_on_processing_time(0, 5_000, 8_000)); // inactive 3s
        assert!(p.should_roll_on_processing_time(0, 9_500, 10_000)); // open 10s
        assert!(!p.should_roll_on_checkpoint(10));
        assert!(p.should_roll_on_checkpoint(4096));
        assert_eq!(p.bucket_check_interval, Duration::from_secs(1));
    }

    #[test]
    fn defaults_and_on_checkpoint_and_bulk() {
        let d = RollingPolicy::from_spec(None, false).unwrap();
        assert_eq!(d.max_part_size, 128 << 20);
        assert_eq!(d.rollover_interval, Duration::from_secs(60));
        let oc = RollingPolicy::from_spec(
            Some(&RollingPolicySpec {
                default: None,
                on_checkpoint: Some(EmptySpec {}),
            }),
            false,
        )
        .unwrap();
        assert!(!oc.should_roll_on_event(u64::MAX));
        assert!(!oc.should_roll_on_processing_time(0, 0, i64::MAX));
        assert!(oc.should_roll_on_checkpoint(0));
        let bulk = RollingPolicy::from_spec(Some(&default_spec("1GiB", "1h", "1h")), true).unwrap();
        assert!(bulk.should_roll_on_checkpoint(1));
        assert!(bulk.should_roll_on_event(1 << 30));
        assert!(RollingPolicy::from_spec(Some(&RollingPolicySpec::default()), false).is_err());
        assert!(RollingPolicy::from_spec(Some(&default_spec("x", "1s", "1s")), false).is_err());
    }
}
