//! The API server's clock, as this process estimates it.
//!
//! Every time the operator writes into a status, and every age it computes from one (how long an
//! upgrade step has run against `readinessTimeout`, how long a savepoint has been pending), is
//! read on this clock. Two operator replicas, or one restarted on another node, then stamp and
//! compare times on one clock whatever their nodes' clocks say, within the estimate's error
//! (about a second plus half a round trip). The API server's own stamps (`deletionTimestamp`)
//! are on it too. Before, a replica whose node ran 30 s ahead of the previous leader's saw every
//! step the previous leader had begun as 30 s older than it was, and rolled back early.
//!
//! The estimate comes from the `Date` header of `GET /version` (public to every authenticated
//! client), sampled when the operator starts and every [`RESYNC`] after.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use axum::http::{Request, header::DATE};
use chrono::{DateTime, TimeDelta, Utc};
use kube::Client;
use kube::client::Body;

use crate::Result;

/// How often the offset is sampled again (node clocks drift slowly; NTP steps are rare).
pub const RESYNC: Duration = Duration::from_secs(60);

/// A sample whose request took longer than this says too little about when the server read
/// its clock; it is dropped.
const MAX_ROUND_TRIP: TimeDelta = TimeDelta::seconds(2);

/// The local clock corrected by the last good estimate of (API server − local).
#[derive(Debug, Default)]
pub struct ApiClock {
    offset_ms: AtomicI64,
}

impl ApiClock {
    /// The API server's time now, as estimated.
    pub fn now(&self) -> DateTime<Utc> {
        Utc::now() + self.offset()
    }

    /// API server minus local clock, as last estimated (zero until the first sample).
    pub fn offset(&self) -> TimeDelta {
        TimeDelta::milliseconds(self.offset_ms.load(Ordering::Relaxed))
    }

    /// Samples the offset once; returns it.
    pub async fn sync(&self, client: &Client) -> Result<TimeDelta> {
        let request = Request::get("/version")
            .body(Body::from(Vec::new()))
            .map_err(ClockError::Request)?;
        let sent = Utc::now();
        let response = client.send(request).await?;
        let received = Utc::now();
        let date = response
            .headers()
            .get(DATE)
            .and_then(|v| v.to_str().ok())
            .ok_or(ClockError::NoDate)?;
        let date = DateTime::parse_from_rfc2822(date)
            .map_err(|source| ClockError::BadDate {
                date: date.to_string(),
                source,
            })?
            .with_timezone(&Utc);
        let offset = offset_from(sent, received, date)?;
        self.offset_ms
            .store(offset.num_milliseconds(), Ordering::Relaxed);
        Ok(offset)
    }

    /// Samples the offset every [`RESYNC`] in the background; a failed sample keeps the last.
    pub fn spawn(self: Arc<Self>, client: Client) {
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(RESYNC).await;
                match self.sync(&client).await {
                    Ok(offset) => {
                        tracing::debug!(offset_ms = offset.num_milliseconds(), "API server clock")
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot read the API server's clock; keeping the last offset")
                    }
                }
            }
        });
    }
}

/// Why the API server's clock could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ClockError {
    #[error("cannot build the request: {0}")]
    Request(#[source] axum::http::Error),
    #[error("the API server's answer has no Date header")]
    NoDate,
    #[error("Date header {date:?}: {source}")]
    BadDate {
        date: String,
        #[source]
        source: chrono::ParseError,
    },
    #[error("round trip of {ms} ms says too little about the server's clock")]
    SlowRoundTrip { ms: i64 },
}

/// The offset (server − local) from one request sent at `sent` and answered at `received` on the
/// local clock, whose `Date` (whole seconds) the server read in between: its clock then stood
/// in `[date, date + 1 s)`, taken at the round trip's middle.
pub fn offset_from(
    sent: DateTime<Utc>,
    received: DateTime<Utc>,
    date: DateTime<Utc>,
) -> Result<TimeDelta> {
    let round_trip = received - sent;
    if round_trip < TimeDelta::zero() || round_trip > MAX_ROUND_TRIP {
        return Err(ClockError::SlowRoundTrip {
            ms: round_trip.num_milliseconds(),
        }
        .into());
    }
    let middle = sent + round_trip / 2;
    Ok(date + TimeDelta::milliseconds(500) - middle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_800_000_000_000 + ms).unwrap()
    }

    /// A server 30 s ahead of us or 30 s behind is estimated within a second (the `Date`
    /// header's resolution) plus half the round trip.
    #[test]
    fn offsets_are_estimated_within_the_headers_resolution() {
        for skew_ms in [30_000, -30_000, 0, 1_234] {
            for (sent, rtt) in [(0, 10), (250, 400), (999, 1_500)] {
                // the server reads its clock somewhere in the round trip
                for read_at in [sent, sent + rtt / 2, sent + rtt] {
                    let server_ms: i64 = 1_800_000_000_000 + read_at + skew_ms;
                    let date =
                        DateTime::from_timestamp_millis(server_ms - server_ms.rem_euclid(1000))
                            .unwrap();
                    let est = offset_from(at(sent), at(sent + rtt), date).unwrap();
                    let err = (est.num_milliseconds() - skew_ms).abs();
                    assert!(
                        err <= 500 + rtt / 2,
                        "skew {skew_ms} ms, rtt {rtt} ms: estimated {} ms",
                        est.num_milliseconds()
                    );
                }
            }
        }
    }

    #[test]
    fn slow_or_backwards_round_trips_are_refused() {
        assert!(offset_from(at(0), at(2_500), at(1_000)).is_err());
        assert!(offset_from(at(10), at(0), at(0)).is_err());
    }
}
