//! The test-only **process kubelet**: registers a Node, keeps it Ready, and runs the containers
//! of pods bound to it as local processes (see `e2e/src/bin/process-kubelet.rs`).

pub mod config;
pub mod env;
pub mod node;
pub mod pod;
pub mod termination;
pub mod volumes;

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tokio::task::JoinSet;

pub use config::{ImageMapping, KubeletConfig};

use crate::error::{IoContext, Result};

/// Hands out loopback addresses 127.a.b.c, skipping .0 and .255.
#[derive(Debug)]
struct IpAllocator {
    next: u32,
}

impl IpAllocator {
    fn next(&mut self) -> Ipv4Addr {
        loop {
            let ip = Ipv4Addr::from(self.next);
            self.next = self.next.wrapping_add(1);
            let last = ip.octets()[3];
            if last != 0 && last != 255 && ip.octets()[0] == 127 {
                return ip;
            }
            if ip.octets()[0] != 127 {
                self.next = u32::from(Ipv4Addr::new(127, 0, 1, 1));
            }
        }
    }
}

/// Runs the kubelet until `shutdown` becomes true; then stops all pod processes and returns.
pub async fn run(
    client: kube::Client,
    cfg: KubeletConfig,
    mut shutdown: watch::Receiver<bool>,
) -> Result<()> {
    std::fs::create_dir_all(&cfg.run_dir).ctx(|| format!("create {}", cfg.run_dir.display()))?;
    let cfg = Arc::new(cfg);
    let since = node::now_rfc3339();
    node::register(&client, &cfg, &since).await?;
    let heartbeat = tokio::spawn(node::heartbeat_loop(client.clone(), cfg.clone(), since));

    let shared = Arc::new(pod::Shared {
        client: client.clone(),
        cfg: cfg.clone(),
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()?,
    });
    let mut ips = IpAllocator {
        next: u32::from(cfg.pod_ip_start),
    };
    let pods: Api<Pod> = Api::all(client.clone());
    let wc = watcher::Config::default().fields(&format!("spec.nodeName={}", cfg.node_name));
    let mut events = watcher(pods, wc).default_backoff().boxed();
    let mut workers: HashMap<String, watch::Sender<Option<Pod>>> = HashMap::new();
    let mut tasks: JoinSet<String> = JoinSet::new();
    let mut listed: HashSet<String> = HashSet::new();

    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                if let Ok(uid) = done {
                    workers.remove(&uid);
                }
            }
            ev = events.next() => {
                let Some(ev) = ev else { break };
                let ev = match ev {
                    Ok(ev) => ev,
                    Err(e) => {
                        tracing::warn!(error = %e, "pod watch error");
                        continue;
                    }
                };
                match ev {
                    watcher::Event::Init => listed.clear(),
                    watcher::Event::InitApply(pod) | watcher::Event::Apply(pod) => {
                        let uid = pod.metadata.uid.clone().unwrap_or_default();
                        listed.insert(uid.clone());
                        if let Some(tx) = workers.get(&uid) {
                            let _ = tx.send(Some(pod));
                        } else if pod::partitioned(&pod) {
                            // cut off, and its processes already gone: nothing to do for it
                        } else {
                            let (tx, rx) = watch::channel(Some(pod));
                            let ip = ips.next();
                            let shared = shared.clone();
                            let sd = shutdown.clone();
                            let uid2 = uid.clone();
                            tasks.spawn(async move {
                                pod::pod_worker(shared, ip, rx, sd).await;
                                uid2
                            });
                            workers.insert(uid, tx);
                        }
                    }
                    watcher::Event::Delete(pod) => {
                        let uid = pod.metadata.uid.clone().unwrap_or_default();
                        if let Some(tx) = workers.get(&uid) {
                            let _ = tx.send(None);
                        }
                    }
                    watcher::Event::InitDone => {
                        for (uid, tx) in &workers {
                            if !listed.contains(uid) {
                                let _ = tx.send(None);
                            }
                        }
                    }
                }
            }
        }
    }
    tracing::info!("shutting down: stopping pod processes");
    heartbeat.abort();
    drop(workers);
    while tasks.join_next().await.is_some() {}
    Ok(())
}
