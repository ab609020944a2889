//! Leader election through a `coordination.k8s.io/v1` Lease: one replica reconciles, the others
//! wait.
//!
//! No decision compares the clocks of two machines. A follower does not read the holder's
//! `renewTime` as a time: it notes, on its own monotonic clock, when it last saw the Lease's
//! record change, and takes the Lease only after a whole `leaseDurationSeconds` without a change
//! (client-go's rule). A leader that cannot renew stops leading a third of the duration before a
//! follower could take over, counted from *before* its last successful renewal was sent, so the
//! two never act at once whatever their clocks say (the process exits and is restarted as a
//! follower).
//!
//! A leader that stops on purpose (SIGTERM: a rolling update, a drained node) hands the Lease
//! back once its controller has stopped, as client-go's `ReleaseOnCancel` does: the holder is
//! cleared, and a follower takes the Lease at its next attempt instead of waiting out a whole
//! duration with no replica reconciling.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::Result;

#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub duration: Duration,
}

impl LeaseConfig {
    /// How long a leader keeps leading after the start of its last successful renewal: two
    /// thirds of the duration (client-go's renew deadline is 10 s of 15 s).
    pub fn renew_deadline(&self) -> Duration {
        self.duration * 2 / 3
    }
}

/// What this replica last saw of the Lease, and when on its own clock it first saw it so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// The holder and its renewal exactly as written (compared for change, never as a time).
    record: (Option<String>, Option<String>),
    duration: Duration,
    since: Instant,
}

impl Observed {
    /// Notes the Lease's record as read at `now`; keeps the earlier instant if it has not changed.
    pub fn note(
        previous: Option<&Observed>,
        spec: &LeaseSpec,
        fallback: Duration,
        now: Instant,
    ) -> Self {
        let record = (
            spec.holder_identity.clone().filter(|h| !h.is_empty()),
            spec.renew_time.as_ref().map(|t| t.0.to_string()),
        );
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(fallback, Duration::from_secs);
        let since = match previous {
            Some(p) if p.record == record => p.since,
            _ => now,
        };
        Self {
            record,
            duration,
            since,
        }
    }

    /// Whether `me` may take or keep the Lease at `now`: it is free, ours, or its record has not
    /// changed for a whole duration on this replica's clock.
    pub fn may_hold(&self, me: &str, now: Instant) -> bool {
        match self.record.0.as_deref() {
            None => true,
            Some(h) if h == me => true,
            Some(_) => now.saturating_duration_since(self.since) > self.duration,
        }
    }
}

fn seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
}

/// One attempt to take or renew the Lease. `Ok(true)`: we hold it. `seen` carries what this
/// replica observed between attempts; `mine` the Lease as this replica last wrote it, while it
/// holds it.
pub async fn try_acquire(
    api: &Api<Lease>,
    cfg: &LeaseConfig,
    seen: &mut Option<Observed>,
    mine: &mut Option<Lease>,
) -> Result<bool> {
    // written into the Lease for people and tools to read; no replica decides by it
    let stamp = MicroTime(Timestamp::now());
    // A holder renews the Lease it last wrote without reading it first (client-go's fast path):
    // one round trip instead of two, which is what keeps a leader leading behind an API server
    // that answers late. The write carries the resourceVersion of our own last write, so it
    // succeeds only if no one has written the Lease since; a conflict falls back to reading it.
    if let Some(mut lease) = mine.take() {
        if let Some(spec) = lease.spec.as_mut() {
            spec.renew_time = Some(stamp.clone());
        }
        match api.replace(&cfg.name, &PostParams::default(), &lease).await {
            Ok(written) => {
                *mine = Some(written);
                return Ok(true);
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    match api.get_opt(&cfg.name).await? {
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(cfg.name.clone()),
                    namespace: Some(cfg.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(cfg.identity.clone()),
                    lease_duration_seconds: Some(seconds(cfg.duration)),
                    acquire_time: Some(stamp.clone()),
                    renew_time: Some(stamp),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            match api.create(&PostParams::default(), &lease).await {
                Ok(written) => {
                    *mine = Some(written);
                    Ok(true)
                }
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e.into()),
            }
        }
        Some(mut lease) => {
            let spec = lease.spec.clone().unwrap_or_default();
            let now = Instant::now();
            let observed = Observed::note(seen.as_ref(), &spec, cfg.duration, now);
            let may = observed.may_hold(&cfg.identity, now);
            *seen = Some(observed);
            if !may {
                return Ok(false);
            }
            let taking_over = spec.holder_identity.as_deref() != Some(cfg.identity.as_str());
            let mut new_spec = spec.clone();
            new_spec.holder_identity = Some(cfg.identity.clone());
            new_spec.lease_duration_seconds = Some(seconds(cfg.duration));
            new_spec.renew_time = Some(stamp.clone());
            if taking_over {
                new_spec.acquire_time = Some(stamp);
                new_spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            }
            lease.spec = Some(new_spec);
            // resourceVersion from the read makes this a compare-and-swap.
            match api.replace(&cfg.name, &PostParams::default(), &lease).await {
                Ok(written) => {
                    *mine = Some(written);
                    Ok(true)
                }
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e.into()),
            }
        }
    }
}

/// Hands back the Lease this replica last wrote (`mine`): the holder cleared, with the
/// resourceVersion of our last write, so a Lease someone else has written since is left alone.
async fn release(api: &Api<Lease>, cfg: &LeaseConfig, mine: Option<Lease>) {
    let Some(mut lease) = mine else { return };
    if let Some(spec) = lease.spec.as_mut() {
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
    }
    match api.replace(&cfg.name, &PostParams::default(), &lease).await {
        Ok(_) => tracing::info!(lease = %cfg.name, "lease released"),
        Err(e) => {
            tracing::warn!(lease = %cfg.name, error = %e, "lease not released: a follower waits it out")
        }
    }
}

/// When the election loop tries next. A leader paces its renewals from when the last one was
/// *sent* (`sent`), not from when its answer came: behind an API server that answers late, each
/// renewal then starts before the previous one's deadline has half run out. It also wakes at
/// its deadline to step down if renewals keep failing. A follower tries every `period`.
pub fn next_attempt(
    cfg: &LeaseConfig,
    sent: Instant,
    renewed: Option<Instant>,
    now: Instant,
) -> Instant {
    let period = (cfg.duration / 5).max(Duration::from_millis(500));
    match renewed {
        Some(t) => (sent + period).min(t + cfg.renew_deadline()),
        None => now + period,
    }
}

/// Whether a leader whose last successful renewal was *sent* at `renewed` still leads at `now`.
pub fn still_leading(renewed: Option<Instant>, cfg: &LeaseConfig, now: Instant) -> bool {
    renewed.is_some_and(|t| now.saturating_duration_since(t) < cfg.renew_deadline())
}

/// This replica's hold on the Lease, checked by the controller before every write and every
/// action. It holds while the last successful renewal was sent less than the renew deadline ago
/// on this process's monotonic clock. That clock keeps counting while the process is stopped
/// (SIGSTOP, a frozen cgroup, a long pause), so a replica resumed after the standby took over
/// does not carry out what it decided before the pause, even before its election loop runs again.
#[derive(Clone, Debug)]
pub struct Leadership {
    renewed: watch::Receiver<Option<Instant>>,
    cfg: LeaseConfig,
}

impl Leadership {
    /// Whether this replica leads at this instant.
    pub fn holds_now(&self) -> bool {
        self.holds_at(Instant::now())
    }

    fn holds_at(&self, now: Instant) -> bool {
        still_leading(*self.renewed.borrow(), &self.cfg, now)
    }

    /// Waits until this replica leads; `Err` when the election loop has ended.
    pub async fn acquired(&mut self) -> std::result::Result<(), watch::error::RecvError> {
        self.renewed.wait_for(Option::is_some).await.map(drop)
    }

    /// Waits until the election loop says this replica no longer leads (or has ended).
    pub async fn lost(&mut self) {
        let _ = self.renewed.wait_for(Option::is_none).await;
    }
}

/// The election loop, to stop once the controller has stopped.
#[derive(Debug)]
pub struct Election {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Election {
    /// Stops the loop and hands the Lease back if this replica holds it. Call only when this
    /// replica will act no more (its controller has stopped): a follower may lead at once.
    pub async fn release(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Runs the election loop in the background.
pub fn spawn(client: Client, cfg: LeaseConfig) -> (Leadership, Election) {
    let (tx, rx) = watch::channel(None);
    let (stop, mut stopped) = watch::channel(false);
    let leadership = Leadership {
        renewed: rx,
        cfg: cfg.clone(),
    };
    let task = tokio::spawn(async move {
        let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
        let mut seen = None;
        let mut mine = None;
        // when the last successful renewal was sent, while this replica leads
        let mut renewed: Option<Instant> = None;
        loop {
            let sent = Instant::now();
            // a renewal that hangs must not outlive the deadline it protects
            let attempt = tokio::time::timeout(
                cfg.renew_deadline(),
                try_acquire(&api, &cfg, &mut seen, &mut mine),
            )
            .await;
            match attempt {
                Ok(Ok(true)) => {
                    if renewed.is_none() {
                        tracing::info!(lease = %cfg.name, identity = %cfg.identity, "became leader");
                    }
                    renewed = Some(sent);
                }
                Ok(Ok(false)) => {
                    renewed = None;
                    mine = None;
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "lease renewal failed"),
                Err(_) => {
                    tracing::warn!(deadline = ?cfg.renew_deadline(), "lease renewal timed out")
                }
            }
            if renewed.is_some() && !still_leading(renewed, &cfg, Instant::now()) {
                tracing::warn!(lease = %cfg.name, "no renewal within the renew deadline: stepping down");
                renewed = None;
                mine = None;
            }
            if tx.send(renewed).is_err() {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep_until(next_attempt(&cfg, sent, renewed, Instant::now())) => {}
                _ = stopped.changed() => {
                    let _ = tx.send(None);
                    release(&api, &cfg, mine.filter(|_| renewed.is_some())).await;
                    return;
                }
            }
        }
    });
    (leadership, Election { stop, task })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: Option<&str>, renewed_at_second: i64) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_string),
            renew_time: Timestamp::from_second(renewed_at_second)
                .ok()
                .map(MicroTime),
            lease_duration_seconds: Some(15),
            ..Default::default()
        }
    }

    #[test]
    fn a_free_or_own_lease_may_be_held_at_once() {
        let now = Instant::now();
        let free = Observed::note(None, &spec(None, 0), Duration::from_secs(15), now);
        assert!(free.may_hold("me", now));
        let empty = Observed::note(None, &spec(Some(""), 0), Duration::from_secs(15), now);
        assert!(empty.may_hold("me", now));
        let mine = Observed::note(None, &spec(Some("me"), 0), Duration::from_secs(15), now);
        assert!(mine.may_hold("me", now));
    }

    /// The holder's renewTime is only compared for change: a renewal stamped 30 s behind (or
    /// ahead of) this replica's clock neither hands the Lease over nor keeps it.
    #[test]
    fn another_holder_is_waited_out_on_this_replica_s_clock_whatever_its_stamps_say() {
        let d = Duration::from_secs(15);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        // stamps far in the past (the holder's clock is behind): still renewing, so never taken
        let mut seen = Observed::note(None, &spec(Some("other"), 1_000), d, at(0));
        for (i, stamp) in [1_005, 1_010, 1_015, 1_020].into_iter().enumerate() {
            let now = at(5 * (i as u64 + 1));
            seen = Observed::note(Some(&seen), &spec(Some("other"), stamp), d, now);
            assert!(!seen.may_hold("me", now), "renewed {i}");
        }
        // it stops renewing at 20 s: taken only once a whole duration has passed here
        let last = seen.clone();
        seen = Observed::note(Some(&last), &spec(Some("other"), 1_020), d, at(30));
        assert!(!seen.may_hold("me", at(35)));
        assert!(seen.may_hold("me", at(36)));
        // stamps far in the future (the holder's clock is ahead) change nothing either
        let ahead = Observed::note(None, &spec(Some("other"), 9_999_999), d, at(0));
        assert!(!ahead.may_hold("me", at(15)));
        assert!(ahead.may_hold("me", at(16)));
    }

    /// A leader steps down before any follower may take over: its deadline (10 s of a 15 s
    /// Lease) runs from before its renewal was sent, a follower's wait from after it saw it.
    #[test]
    fn a_leader_steps_down_before_a_follower_may_take_over() {
        let cfg = LeaseConfig {
            namespace: "ops".into(),
            name: "streamjob".into(),
            identity: "a".into(),
            duration: Duration::from_secs(15),
        };
        let sent = Instant::now();
        assert!(still_leading(
            Some(sent),
            &cfg,
            sent + Duration::from_secs(9)
        ));
        assert!(!still_leading(
            Some(sent),
            &cfg,
            sent + Duration::from_secs(10)
        ));
        assert!(!still_leading(None, &cfg, sent));
        // the follower read the renewed record no earlier than it was sent
        let follower = Observed::note(None, &spec(Some("a"), 0), cfg.duration, sent);
        let earliest_takeover = sent + cfg.duration;
        assert!(!follower.may_hold("b", earliest_takeover));
        assert!(earliest_takeover > sent + cfg.renew_deadline());
    }

    /// Renewals are paced from when they were sent: with answers 40 s late on a 90 s Lease
    /// (deadline 60 s, period 18 s), the next renewal goes out as soon as the last one returns,
    /// and the leader never passes its deadline (it acts in the last 20 s of each 40 s: the
    /// controller waits while the renewal in flight is older than the deadline); a follower waits
    /// a period after each try.
    #[test]
    fn renewals_that_answer_late_still_come_before_the_deadline() {
        let cfg = LeaseConfig {
            namespace: "ops".into(),
            name: "streamjob".into(),
            identity: "a".into(),
            duration: Duration::from_secs(90),
        };
        let t0 = Instant::now();
        let s = |n: u64| Duration::from_secs(n);
        // sent at 0, answered at 40: the next goes out at once (18 s after 0 has passed)
        assert_eq!(next_attempt(&cfg, t0, Some(t0), t0 + s(40)), t0 + s(18));
        let mut sent = t0;
        for _ in 0..10 {
            let answered = sent + s(40);
            // each answer comes before its deadline: the loop does not step down
            assert!(still_leading(Some(sent), &cfg, answered));
            // and the next renewal goes out at once, not a period after the late answer
            assert!(next_attempt(&cfg, sent, Some(sent), answered) <= answered);
            sent = answered;
        }
        // fast answers: one renewal per period
        assert_eq!(next_attempt(&cfg, t0, Some(t0), t0 + s(1)), t0 + s(18));
        // renewals failing: wake at the deadline to step down
        let short = LeaseConfig {
            duration: s(15),
            ..cfg.clone()
        };
        assert_eq!(
            next_attempt(&short, t0 + s(8), Some(t0), t0 + s(9)),
            t0 + s(10)
        );
        // a follower: a period after this try
        assert_eq!(next_attempt(&cfg, t0, None, t0 + s(40)), t0 + s(58));
    }

    /// A replica stopped (SIGSTOP) right after a renewal and resumed later no longer holds the
    /// Lease the moment it resumes, before its election loop has run again: the controller's
    /// check reads the renewal's instant, not the last value the loop published.
    #[test]
    fn a_replica_resumed_after_the_deadline_does_not_act() {
        let cfg = LeaseConfig {
            namespace: "ops".into(),
            name: "streamjob".into(),
            identity: "a".into(),
            duration: Duration::from_secs(6),
        };
        let sent = Instant::now();
        let (tx, rx) = watch::channel(Some(sent));
        let leadership = Leadership { renewed: rx, cfg };
        assert!(leadership.holds_at(sent + Duration::from_millis(3_900)));
        // paused from 1 s to 30 s: the loop published nothing in between
        assert!(!leadership.holds_at(sent + Duration::from_secs(30)));
        // and once the loop has stepped down, not even right after the renewal
        tx.send(None).unwrap();
        assert!(!leadership.holds_at(sent));
    }
}
