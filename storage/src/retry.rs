//! The one retry policy of store calls, for the file sink and for checkpoint storage alike.
//!
//! S3 requests are retried inside the `object_store` client, which knows which HTTP failures are
//! worth another try (5xx, 429, connection errors — not 4xx) and adds jitter; [`retry`] retries
//! only what no client retried: local file I/O, HDFS, our own signed S3 listing, a connection
//! slot that did not come free. Both stop at the same total time budget, and nothing retries an
//! error its client already retried: before, the sink's five attempts each waited out the
//! client's two minutes, so one call could block for about ten.
//!
//! A call now gives up after about [`RetryPolicy::budget`] plus one request timeout. The job's
//! restart strategy takes over from there (exponential delay, runtime `restart.rs`): a store
//! outage longer than the budget costs a restart from the latest checkpoint, not the job.

use std::future::Future;
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable as _};
use object_store::{BackoffConfig, ClientOptions, RetryConfig};
use streamjob_crds::units::parse_duration;
use streamjob_crds::v1alpha1::StorageSpec;

use crate::error::{Error, Result};

/// How long and how often store calls are retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total time one call may spend retrying, from its first try.
    pub budget: Duration,
    /// Delay before the first retry; it doubles per retry, with jitter.
    pub initial: Duration,
    /// The longest delay between two tries.
    pub max_delay: Duration,
    /// Longest single request (a part upload of up to 64 MiB included).
    pub request_timeout: Duration,
    /// Longest wait for a TCP (and TLS) connection.
    pub connect_timeout: Duration,
}

/// The policy of every store: a minute of retries per call.
pub const STORE_RETRY: RetryPolicy = RetryPolicy {
    budget: Duration::from_secs(60),
    initial: Duration::from_millis(100),
    max_delay: Duration::from_secs(5),
    request_timeout: Duration::from_secs(60),
    connect_timeout: Duration::from_secs(10),
};

impl Default for RetryPolicy {
    fn default() -> Self {
        STORE_RETRY
    }
}

impl RetryPolicy {
    /// The policy of a job's stores: [`STORE_RETRY`] with `storage.retryBudget`.
    pub fn for_storage(storage: Option<&StorageSpec>) -> Result<Self> {
        let mut policy = STORE_RETRY;
        if let Some(budget) = storage.and_then(|s| s.retry_budget.as_deref()) {
            policy.budget = parse_duration("storage.retryBudget", budget)?;
        }
        Ok(policy)
    }

    /// The `object_store` client's retries: the same backoff (its own jitter) and budget. The
    /// count is only a backstop; the budget is what stops retrying.
    pub fn object_store(&self) -> RetryConfig {
        RetryConfig {
            backoff: BackoffConfig {
                init_backoff: self.initial,
                max_backoff: self.max_delay,
                base: 2.0,
            },
            max_retries: 1000,
            retry_timeout: self.budget,
        }
    }

    /// The `object_store` client's HTTP options: the policy's timeouts. (Builders take these
    /// whole, so `allow_http` is set here too.)
    pub fn client_options(&self, allow_http: bool) -> ClientOptions {
        ClientOptions::new()
            .with_allow_http(allow_http)
            .with_timeout(self.request_timeout)
            .with_connect_timeout(self.connect_timeout)
    }

    fn backoff(&self) -> ExponentialBuilder {
        ExponentialBuilder::default()
            .with_min_delay(self.initial)
            .with_max_delay(self.max_delay)
            .with_jitter()
            .without_max_times()
            .with_total_delay(Some(self.budget))
    }
}

/// An error that says whether [`retry`] should try again: the storage layer's, and the error of
/// a caller that wraps it (the file sink's).
pub trait RetryHere: std::fmt::Display {
    fn retry_here(&self) -> bool;
}

impl RetryHere for Error {
    fn retry_here(&self) -> bool {
        Error::retry_here(self)
    }
}

/// Runs `op`, retrying it under `policy` while it fails with an error worth retrying here
/// ([`Error::retry_here`]) and the budget lasts. The last error is returned.
pub async fn retry<T, E, F, Fut>(what: &str, policy: RetryPolicy, op: F) -> Result<T, E>
where
    E: RetryHere,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let started = Instant::now();
    op.retry(policy.backoff())
        .sleep(tokio::time::sleep)
        .when(|e: &E| e.retry_here() && started.elapsed() < policy.budget)
        .notify(|e: &E, delay: Duration| {
            tracing::warn!(%what, error = %e, ?delay, "transient store error, retrying");
        })
        .await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn store_error(retried: bool) -> Error {
        Error::Store {
            op: "put",
            path: "k".into(),
            retried,
            source: object_store::Error::Generic {
                store: "S3",
                source: "503 Service Unavailable".into(),
            },
        }
    }

    const SHORT: RetryPolicy = RetryPolicy {
        budget: Duration::from_millis(300),
        initial: Duration::from_millis(10),
        max_delay: Duration::from_millis(50),
        request_timeout: Duration::from_secs(1),
        connect_timeout: Duration::from_secs(1),
    };

    #[tokio::test]
    async fn transient_errors_are_retried_until_the_budget_is_spent() {
        let tries = AtomicU32::new(0);
        let started = Instant::now();
        let r: Result<()> = retry("put", SHORT, || async {
            tries.fetch_add(1, Ordering::SeqCst);
            Err(store_error(false))
        })
        .await;
        let took = started.elapsed();
        assert!(r.unwrap_err().is_transient());
        assert!(tries.load(Ordering::SeqCst) > 2, "retried");
        // the last delay that fits the budget is the last (a delay is at most twice max_delay
        // with jitter)
        assert!(
            took >= SHORT.budget - SHORT.max_delay * 2 && took < SHORT.budget + SHORT.max_delay * 2,
            "stopped at the budget: {took:?}"
        );
    }

    #[tokio::test]
    async fn errors_the_client_retried_and_permanent_errors_are_not_retried_again() {
        for e in [
            store_error(true),
            Error::State("not transient".into()),
            Error::Store {
                op: "get",
                path: "k".into(),
                retried: false,
                source: object_store::Error::NotFound {
                    path: "k".into(),
                    source: "gone".into(),
                },
            },
        ] {
            let tries = AtomicU32::new(0);
            let mut once = Some(e);
            let _: Result<()> = retry("put", SHORT, || {
                tries.fetch_add(1, Ordering::SeqCst);
                let e = once.take().unwrap_or_else(|| store_error(false));
                async move { Err(e) }
            })
            .await;
            assert_eq!(tries.load(Ordering::SeqCst), 1);
        }
    }

    #[tokio::test]
    async fn a_success_after_failures_is_returned() {
        let tries = AtomicU32::new(0);
        let v = retry("put", SHORT, || async {
            if tries.fetch_add(1, Ordering::SeqCst) < 3 {
                Err(store_error(false))
            } else {
                Ok(7)
            }
        })
        .await
        .unwrap();
        assert_eq!((v, tries.load(Ordering::SeqCst)), (7, 4));
    }

    #[test]
    fn the_client_gets_the_same_budget_and_the_manifest_sets_it() {
        let c = STORE_RETRY.object_store();
        assert_eq!(c.retry_timeout, STORE_RETRY.budget);
        assert_eq!(c.backoff.max_backoff, STORE_RETRY.max_delay);
        assert_eq!(RetryPolicy::for_storage(None).unwrap(), STORE_RETRY);
        let spec = |b: &str| StorageSpec {
            retry_budget: Some(b.into()),
            ..Default::default()
        };
        let p = RetryPolicy::for_storage(Some(&spec("5s"))).unwrap();
        assert_eq!(p.budget, Duration::from_secs(5));
        assert_eq!(p.object_store().retry_timeout, Duration::from_secs(5));
        let e = RetryPolicy::for_storage(Some(&spec("soon"))).unwrap_err();
        assert!(e.to_string().contains("storage.retryBudget"), "{e}");
    }
}
