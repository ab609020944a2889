//! The cluster's DNS: CoreDNS (built from its Go module by `install-node.sh`, only the plugins a
//! cluster DNS needs) beside the control plane in the node's namespace, behind the `kube-dns`
//! Service every pod's resolv.conf names, as kubeadm and kind set it up (there CoreDNS runs as a
//! Deployment; here, like the API server, as a process of the harness).
//!
//! ```text
//!  pod ─► 10.0.0.10:53 (Service kube-dns) ─kube-proxy─► <node ip>:53 CoreDNS ─watch─► API server
//! ```

use std::net::Ipv4Addr;
use std::path::Path;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{Patch, PatchParams};

use crate::error::Result;

/// The Service address of the cluster's DNS (kubelet `clusterDNS`), inside the Service CIDR.
pub const CLUSTER_DNS_IP: &str = "10.0.0.10";
/// The cluster domain (kubelet `clusterDomain`).
pub const CLUSTER_DOMAIN: &str = "cluster.local";
/// CoreDNS's readiness endpoint (`ready` plugin): 200 once the kubernetes plugin has synced.
pub const READY_ADDR: &str = "127.0.0.1:18181";
/// CoreDNS's user name (its certificate's subject CN) and what it may read.
pub const USER: &str = "system:streamjob-e2e:coredns";
/// CoreDNS's RBAC: what its kubernetes plugin lists and watches.
pub const READS: [(&str, &[&str]); 2] = [
    ("", &["services", "pods", "namespaces"]),
    ("discovery.k8s.io", &["endpointslices"]),
];

/// The Corefile: the cluster zone from the API, reverse lookups of the pod and Service ranges,
/// nothing forwarded (no upstream resolver is reachable from the namespace: other names fail at
/// once with SERVFAIL instead of timing out; `loop` needs `forward`, so it is left out too).
pub fn corefile(node_ip: Ipv4Addr, kubeconfig: &Path) -> String {
    format!(
        r#".:53 {{
    bind {node_ip}
    errors
    health 127.0.0.1:18180
    ready {READY_ADDR}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    cache 5
}}
"#,
        kubeconfig = kubeconfig.display(),
    )
}

/// The `kube-dns` Service in `kube-system` at [`CLUSTER_DNS_IP`] and its EndpointSlice pointing
/// at CoreDNS on the node (a Service without selector: CoreDNS is not a pod here).
pub async fn publish(client: &kube::Client, node_ip: Ipv4Addr) -> Result<()> {
    let pp = PatchParams::apply("streamjob-e2e").force();
    let ports = |proto: &str| serde_json::json!({"name": format!("dns-{}", proto.to_lowercase()), "port": 53, "protocol": proto});
    let svc = serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kube-dns", "namespace": "kube-system",
                     "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}},
        "spec": {"clusterIP": CLUSTER_DNS_IP, "ports": [ports("UDP"), ports("TCP")]},
    });
    Api::<Service>::namespaced(client.clone(), "kube-system")
        .patch("kube-dns", &pp, &Patch::Apply(&svc))
        .await?;
    let slice = serde_json::json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "kube-dns-node", "namespace": "kube-system",
                     "labels": {"kubernetes.io/service-name": "kube-dns",
                                "endpointslice.kubernetes.io/managed-by": "streamjob-e2e"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [node_ip.to_string()], "conditions": {"ready": true}}],
        "ports": [ports("UDP"), ports("TCP")],
    });
    Api::<EndpointSlice>::namespaced(client.clone(), "kube-system")
        .patch("kube-dns-node", &pp, &Patch::Apply(&slice))
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corefile_binds_the_node_and_reads_the_api_with_its_own_identity() {
        let text = corefile(
            Ipv4Addr::new(10, 200, 0, 1),
            Path::new("/run/x/coredns.kubeconfig"),
        );
        assert!(text.contains("bind 10.200.0.1"));
        assert!(text.contains("kubeconfig /run/x/coredns.kubeconfig"));
        assert!(text.contains("kubernetes cluster.local in-addr.arpa ip6.arpa"));
        assert!(
            !text.contains("forward"),
            "no upstream: nothing to forward to"
        );
    }
}
