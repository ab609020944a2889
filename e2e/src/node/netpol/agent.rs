//! The agent's I/O: watches Pods, Namespaces and NetworkPolicies, renders the table on every
//! change and applies it with `nft -f -` when it differs from what is applied.
//!
//! Failures are loud: a policy it cannot enforce is logged with its name and left out (the rest is
//! enforced), and a table `nft` refuses stops the agent with the error (the harness sees the
//! process exit), never an open node that looks enforced.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::Notify;

use super::{PodView, check_policy, namespace_labels, render};
use crate::error::{Error, IoContext, Result};

/// Watches a kind into a store and pokes `changed` on every event.
fn watch<K>(api: Api<K>, changed: Arc<Notify>) -> (Store<K>, tokio::task::JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            match stream.try_next().await {
                Ok(Some(_)) => changed.notify_one(),
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "netpol watch error (retrying)");
                    changed.notify_one();
                }
            }
        }
    });
    (reader, task)
}

/// Runs until the process is stopped; `applied` (if given) receives each applied table, so that a
/// test can wait for a policy to be in force.
pub async fn run(client: Client, nft: PathBuf, applied: Option<PathBuf>) -> Result<()> {
    let changed = Arc::new(Notify::new());
    let (pods, _p) = watch(Api::<Pod>::all(client.clone()), changed.clone());
    let (namespaces, _n) = watch(Api::<Namespace>::all(client.clone()), changed.clone());
    let (policies, _np) = watch(Api::<NetworkPolicy>::all(client), changed.clone());
    for (what, ready) in [
        ("pods", pods.wait_until_ready().await),
        ("namespaces", namespaces.wait_until_ready().await),
        ("networkpolicies", policies.wait_until_ready().await),
    ] {
        ready.map_err(|e| Error::Other(format!("netpol agent: {what} never listed: {e}")))?;
    }
    let mut current = String::new();
    let mut refused: BTreeMap<String, String> = BTreeMap::new();
    loop {
        // One pod per address: a pod still terminating and its address's next owner, the newer
        // wins (host-local hands addresses out round-robin, so this is rare).
        let mut all = pods.state();
        all.sort_by(|a, b| {
            let t = |p: &Pod| p.metadata.creation_timestamp.clone();
            t(a).cmp(&t(b))
        });
        let views: Vec<PodView> = all
            .iter()
            .filter_map(|p| PodView::from_pod(p))
            .map(|v| (v.ip, v))
            .collect::<BTreeMap<_, _>>()
            .into_values()
            .collect();
        let ns_labels = namespace_labels(
            &namespaces
                .state()
                .iter()
                .map(|n| n.as_ref().clone())
                .collect::<Vec<_>>(),
        );
        let mut enforced = Vec::new();
        for p in policies.state() {
            let key = format!(
                "{}/{}",
                p.metadata.namespace.as_deref().unwrap_or_default(),
                p.metadata.name.as_deref().unwrap_or_default()
            );
            match check_policy(&p) {
                Ok(()) => enforced.push(p.as_ref().clone()),
                Err(why) => {
                    if refused.insert(key, why.clone()).is_none() {
                        tracing::error!(%why, "NetworkPolicy not enforced");
                    }
                }
            }
        }
        let table = render(&enforced, &views, &ns_labels);
        if table != current {
            apply(&nft, &table)?;
            tracing::info!(
                policies = enforced.len(),
                pods = views.len(),
                "netpol table applied"
            );
            if let Some(path) = &applied {
                write_atomic(path, &table)?;
            }
            current = table;
        }
        changed.notified().await;
    }
}

fn apply(nft: &Path, table: &str) -> Result<()> {
    let mut child = Command::new(nft)
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ctx(|| format!("run {}", nft.display()))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(table.as_bytes())
            .ctx(|| "write the table to nft".to_string())?;
    }
    let out = child
        .wait_with_output()
        .ctx(|| "wait for nft".to_string())?;
    if !out.status.success() {
        return Err(Error::Other(format!(
            "nft refused the NetworkPolicy table ({}): {}\n--- table ---\n{table}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

fn write_atomic(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).ctx(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).ctx(|| format!("rename to {}", path.display()))
}
