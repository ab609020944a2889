//! Leader election through a `coordination.k8s.io/v1` Lease: one replica reconciles, the others
//! wait. The leader renews the Lease every third of its duration; a replica that cannot renew
//! before the Lease expires stops leading (the process exits and is restarted as a follower).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::watch;

use crate::Result;

#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub duration: Duration,
}

/// Whether `me` may take or keep a Lease held by `holder`, last renewed at `renewed`.
pub fn may_hold(
    holder: Option<&str>,
    renewed: Option<Timestamp>,
    duration: Duration,
    me: &str,
    now: Timestamp,
) -> bool {
    match holder {
        None | Some("") => true,
        Some(h) if h == me => true,
        Some(_) => match renewed {
            None => true,
            Some(r) => {
                let expires = r
                    .checked_add(k8s_openapi::jiff::SignedDuration::from_millis(
                        i64::try_from(duration.as_millis()).unwrap_or(i64::MAX),
                    ))
                    .unwrap_or(Timestamp::MAX);
                expires < now
            }
        },
    }
}

fn seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
}

/// One attempt to take or renew the Lease. `Ok(true)`: we lead until `now + duration`.
pub async fn try_acquire(api: &Api<Lease>, cfg: &LeaseConfig) -> Result<bool> {
    let now = Timestamp::now();
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
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e.into()),
            }
        }
        Some(mut lease) => {
            let spec = lease.spec.clone().unwrap_or_default();
            let holder = spec.holder_identity.as_deref();
            let renewed = spec.renew_time.as_ref().map(|t| t.0);
            let duration = spec
                .lease_duration_seconds
                .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)))
                .unwrap_or(cfg.duration);
            if !may_hold(holder, renewed, duration, &cfg.identity, now) {
                return Ok(false);
            }
            let taking_over = holder != Some(cfg.identity.as_str());
            let mut new_spec = spec.clone();
            new_spec.holder_identity = Some(cfg.identity.clone());
            new_spec.lease_duration_seconds = Some(seconds(cfg.duration));
            new_spec.renew_time = Some(MicroTime(now));
            if taking_over {
                new_spec.acquire_time = Some(MicroTime(now));
                new_spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            }
            lease.spec = Some(new_spec);
            // resourceVersion from the read makes this a compare-and-swap.
            match api.replace(&cfg.name, &PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e.into()),
            }
        }
    }
}

/// Runs the election loop in the background; the receiver says whether we lead now.
pub fn spawn(client: Client, cfg: LeaseConfig) -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
        let period = (cfg.duration / 3).max(Duration::from_millis(500));
        let mut last_ok: Option<tokio::time::Instant> = None;
        loop {
            match try_acquire(&api, &cfg).await {
                Ok(true) => {
                    last_ok = Some(tokio::time::Instant::now());
                    if !*tx.borrow() {
                        tracing::info!(lease = %cfg.name, identity = %cfg.identity, "became leader");
                    }
                    let _ = tx.send(true);
                }
                Ok(false) => {
                    last_ok = None;
                    let _ = tx.send(false);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "lease renewal failed");
                    // Keep leading only while the Lease we hold has not expired.
                    if last_ok.is_none_or(|t| t.elapsed() >= cfg.duration) {
                        let _ = tx.send(false);
                    }
                }
            }
            if tx.is_closed() {
                return;
            }
            tokio::time::sleep(period).await;
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_rules() {
        let now = Timestamp::from_second(1_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let d = Duration::from_secs(15);
        let recent = Timestamp::from_second(990).unwrap_or(Timestamp::UNIX_EPOCH);
        let old = Timestamp::from_second(900).unwrap_or(Timestamp::UNIX_EPOCH);
        assert!(may_hold(None, None, d, "me", now));
        assert!(may_hold(Some("me"), Some(recent), d, "me", now));
        assert!(!may_hold(Some("other"), Some(recent), d, "me", now));
        assert!(may_hold(Some("other"), Some(old), d, "me", now));
        assert!(may_hold(Some("other"), None, d, "me", now));
    }
}
