//! Node registration, Ready heartbeats and Lease renewals.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use super::config::KubeletConfig;
use crate::error::Result;

const MANAGER: &str = "process-kubelet";

/// RFC 3339 timestamp with seconds, as Kubernetes writes them.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// RFC 3339 timestamp with microseconds (Lease `renewTime` is a MicroTime).
pub fn now_micro() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

fn capacity(cfg: &KubeletConfig) -> BTreeMap<String, String> {
    let mut cap: BTreeMap<String, String> = [
        ("cpu", "16"),
        ("memory", "64Gi"),
        ("pods", "110"),
        ("ephemeral-storage", "100Gi"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    cap.extend(cfg.capacity.clone());
    cap
}

fn conditions(since: &str) -> serde_json::Value {
    let now = now_rfc3339();
    let c = |t: &str, s: &str, reason: &str, msg: &str| {
        json!({"type": t, "status": s, "reason": reason, "message": msg,
               "lastHeartbeatTime": now, "lastTransitionTime": since})
    };
    json!([
        c(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available"
        ),
        c(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure"
        ),
        c(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available"
        ),
        c(
            "Ready",
            "True",
            "KubeletReady",
            "process kubelet is posting ready status"
        ),
    ])
}

fn status(cfg: &KubeletConfig, since: &str) -> serde_json::Value {
    let cap = capacity(cfg);
    json!({
        "capacity": cap,
        "allocatable": cap,
        "conditions": conditions(since),
        "addresses": [
            {"type": "InternalIP", "address": "127.0.0.1"},
            {"type": "Hostname", "address": cfg.node_name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
        "nodeInfo": {
            "machineID": "streamjob-e2e", "systemUUID": "streamjob-e2e", "bootID": "streamjob-e2e",
            "kernelVersion": "", "osImage": "process-kubelet",
            "containerRuntimeVersion": "process://0.1.0", "kubeletVersion": "v1.36.3",
            "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": std::env::consts::ARCH,
        },
    })
}

/// Creates the Node (or takes over an existing one) and reports it Ready.
pub async fn register(client: &kube::Client, cfg: &KubeletConfig, since: &str) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), cfg.node_name.clone()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), "amd64".to_string()),
        (
            "streamjob.io/process-kubelet".to_string(),
            "true".to_string(),
        ),
    ]);
    labels.extend(cfg.labels.clone());
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": cfg.node_name, "labels": labels},
        "spec": {},
        "status": status(cfg, since),
    }))?;
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => tracing::info!(node = %cfg.node_name, "node registered"),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            tracing::info!(node = %cfg.node_name, "node exists; taking it over");
        }
        Err(e) => return Err(e.into()),
    }
    heartbeat(client, cfg, since).await
}

/// One heartbeat: node status conditions and the Lease in `kube-node-lease`.
pub async fn heartbeat(client: &kube::Client, cfg: &KubeletConfig, since: &str) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes
        .patch_status(
            &cfg.node_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status(cfg, since)})),
        )
        .await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {
            "name": cfg.node_name,
            "ownerReferences": [{
                "apiVersion": "v1", "kind": "Node", "name": cfg.node_name,
                "uid": node.metadata.uid.unwrap_or_default(),
            }],
        },
        "spec": {
            "holderIdentity": cfg.node_name,
            "leaseDurationSeconds": 40,
            "renewTime": now_micro(),
        },
    });
    leases
        .patch(
            &cfg.node_name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(lease),
        )
        .await?;
    Ok(())
}

/// Heartbeats forever (errors are logged and retried at the next tick).
pub async fn heartbeat_loop(
    client: kube::Client,
    cfg: std::sync::Arc<KubeletConfig>,
    since: String,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(cfg.heartbeat_seconds.max(1)));
    loop {
        tick.tick().await;
        if let Err(e) = heartbeat(&client, &cfg, &since).await {
            tracing::warn!(error = %e, "node heartbeat failed");
        }
    }
}
