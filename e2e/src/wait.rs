//! Polling with a deadline: the only way tests wait for something.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Polls `check` every `interval` until it returns `Ok(Some(v))`, failing after `timeout`.
///
/// `Ok(None)` means "not yet"; an `Err` is remembered and reported if the deadline passes, so
/// transient errors (connection refused while a server starts) do not end the wait.
pub async fn poll_until<T, F, Fut>(
    what: &str,
    timeout: Duration,
    interval: Duration,
    mut check: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = format!("; last error: {e}"),
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: what.to_string(),
                timeout,
                last,
            });
        }
        tokio::time::sleep(interval).await;
    }
}
