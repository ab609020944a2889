//! The real node's NetworkPolicy agent: every NetworkPolicy of the cluster enforced in the node's
//! network namespace with nftables, as a cluster's network plugin (Calico, Cilium, …) would.
//!
//! `sigs.k8s.io/kube-network-policies` needs the kernel's `nft_queue` (absent on this machine
//! kind: `# CONFIG_NFT_QUEUE is not set`) and kube-router v2.1.0, the version the Go proxy serves,
//! has reported security flaws; so the harness renders the policies itself. This module is the
//! pure part (policies, pods, namespaces → one nftables table); [`agent`] watches the API and
//! applies it.
//!
//! ```text
//!  forward / input hook (pod traffic; bridged traffic goes through it: br_netfilter)
//!    ct state established,related ─► accept   (replies of allowed connections)
//!    ip saddr vmap { pod : jump eg_<pod> }    (pods selected by an Egress policy)
//!    ip daddr vmap { pod : jump in_<pod> }    (pods selected by an Ingress policy)
//!  in_<pod> / eg_<pod>: one `return` per allowed (peers, ports), then drop
//! ```
//!
//! Semantics (networking.k8s.io/v1): a pod selected by no policy of a direction is open in that
//! direction; once selected, only the union of the selecting policies' rules is allowed. A peer
//! with `podSelector` only means pods of the policy's namespace; with `namespaceSelector` (and
//! maybe `podSelector`) pods of the matching namespaces; `ipBlock` a CIDR minus its exceptions.
//! Named ports resolve against the destination pod's container ports. The node itself (kubelet
//! probes, the API server, the test process) is not a pod: its traffic to pods is not filtered
//! (it leaves through the output hook), as on most network plugins.

pub mod agent;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// The nftables table the agent owns (family `inet`).
pub const TABLE: &str = "streamjob_netpol";

/// A pod as the policies see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    /// Namespace.
    pub namespace: String,
    /// Name (for comments and errors).
    pub name: String,
    /// Its address on the pod network.
    pub ip: Ipv4Addr,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Named container ports: (name, protocol) → port.
    pub named_ports: BTreeMap<(String, String), u16>,
}

impl PodView {
    /// A running pod on the pod network; `None` for host-network pods, pods without an address
    /// yet and pods that have ended (their address may already belong to another pod).
    pub fn from_pod(pod: &Pod) -> Option<Self> {
        let spec = pod.spec.as_ref()?;
        let status = pod.status.as_ref()?;
        if spec.host_network == Some(true)
            || matches!(status.phase.as_deref(), Some("Succeeded" | "Failed"))
        {
            return None;
        }
        let ip = status.pod_ip.as_deref()?.parse().ok()?;
        let named_ports = spec
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .filter_map(|p| {
                let name = p.name.clone()?;
                let proto = p.protocol.clone().unwrap_or_else(|| "TCP".into());
                Some(((name, proto), u16::try_from(p.container_port).ok()?))
            })
            .collect();
        Some(Self {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            ip,
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            named_ports,
        })
    }
}

/// Labels of each namespace.
pub fn namespace_labels(namespaces: &[Namespace]) -> BTreeMap<String, BTreeMap<String, String>> {
    namespaces
        .iter()
        .filter_map(|ns| {
            let name = ns.metadata.name.clone()?;
            Some((name, ns.metadata.labels.clone().unwrap_or_default()))
        })
        .collect()
}

/// Does `selector` select `labels`? (The empty selector selects everything.) An operator this
/// module does not know selects nothing: closed rather than open.
pub fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let by_labels = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let by_expressions = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" => labels.get(&e.key).is_some_and(|v| values.contains(v)),
            "NotIn" => labels.get(&e.key).is_none_or(|v| !values.contains(v)),
            "Exists" => labels.contains_key(&e.key),
            "DoesNotExist" => !labels.contains_key(&e.key),
            _ => false,
        }
    });
    by_labels && by_expressions
}

/// Ingress or egress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Direction {
    Ingress,
    Egress,
}

impl Direction {
    /// The chain prefix, the peer's address field and the selected pod's address field.
    fn words(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Self::Ingress => ("in", "saddr", "daddr"),
            Self::Egress => ("eg", "daddr", "saddr"),
        }
    }
}

/// The directions a policy governs (`policyTypes`, or its default: Ingress, plus Egress when it
/// has egress rules).
fn directions(policy: &NetworkPolicy) -> BTreeSet<Direction> {
    let Some(spec) = &policy.spec else {
        return BTreeSet::new();
    };
    match &spec.policy_types {
        Some(types) => types
            .iter()
            .filter_map(|t| match t.as_str() {
                "Ingress" => Some(Direction::Ingress),
                "Egress" => Some(Direction::Egress),
                _ => None,
            })
            .collect(),
        None => {
            let mut d = BTreeSet::from([Direction::Ingress]);
            if spec.egress.is_some() {
                d.insert(Direction::Egress);
            }
            d
        }
    }
}

/// The addresses a list of peers stands for: pod addresses and CIDRs with exceptions.
#[derive(Debug, Default)]
struct Peers {
    /// Any address (no peers given).
    any: bool,
    pods: BTreeSet<Ipv4Addr>,
    /// (cidr, except)
    blocks: Vec<(String, Vec<String>)>,
}

struct World<'a> {
    pods: &'a [PodView],
    namespaces: &'a BTreeMap<String, BTreeMap<String, String>>,
}

impl World<'_> {
    fn peers(&self, policy_ns: &str, peers: Option<&Vec<NetworkPolicyPeer>>) -> Peers {
        let Some(peers) = peers.filter(|p| !p.is_empty()) else {
            return Peers {
                any: true,
                ..Peers::default()
            };
        };
        let mut out = Peers::default();
        for peer in peers {
            if let Some(block) = &peer.ip_block {
                out.blocks
                    .push((block.cidr.clone(), block.except.clone().unwrap_or_default()));
                continue;
            }
            let no_labels = BTreeMap::new();
            for pod in self.pods {
                let in_namespace = match &peer.namespace_selector {
                    None => pod.namespace == policy_ns,
                    Some(sel) => selects(
                        sel,
                        self.namespaces.get(&pod.namespace).unwrap_or(&no_labels),
                    ),
                };
                let pod_matches = peer
                    .pod_selector
                    .as_ref()
                    .is_none_or(|sel| selects(sel, &pod.labels));
                if in_namespace && pod_matches {
                    out.pods.insert(pod.ip);
                }
            }
        }
        out
    }
}

/// `proto port` pieces of one rule's ports for a destination pod (`None`: any destination, named
/// ports then resolve against no pod). Empty when the rule names ports and none resolves.
fn port_matches(ports: Option<&Vec<NetworkPolicyPort>>, dest: Option<&PodView>) -> Vec<String> {
    let Some(ports) = ports.filter(|p| !p.is_empty()) else {
        return vec![String::new()];
    };
    let mut by_proto: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut all_of: BTreeSet<String> = BTreeSet::new();
    for p in ports {
        let proto = p.protocol.clone().unwrap_or_else(|| "TCP".into());
        let number = match &p.port {
            None => {
                all_of.insert(proto.to_lowercase());
                continue;
            }
            Some(IntOrString::Int(n)) => u16::try_from(*n).ok(),
            Some(IntOrString::String(name)) => dest
                .and_then(|d| d.named_ports.get(&(name.clone(), proto.clone())))
                .copied(),
        };
        let Some(number) = number else { continue };
        let text = match p.end_port.and_then(|e| u16::try_from(e).ok()) {
            Some(end) if end > number => format!("{number}-{end}"),
            _ => number.to_string(),
        };
        by_proto
            .entry(proto.to_lowercase())
            .or_default()
            .insert(text);
    }
    let mut out: Vec<String> = all_of
        .iter()
        .map(|proto| format!("meta l4proto {proto}"))
        .collect();
    for (proto, ports) in by_proto {
        if !all_of.contains(&proto) {
            out.push(format!(
                "meta l4proto {proto} th dport {{ {} }}",
                ports.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    out
}

fn chain_name(prefix: &str, ip: Ipv4Addr) -> String {
    format!("{prefix}_{}", ip.to_string().replace('.', "_"))
}

fn set(items: impl IntoIterator<Item = String>) -> String {
    format!("{{ {} }}", items.into_iter().collect::<Vec<_>>().join(", "))
}

/// One rule of a policy: its peers (`from` or `to`) and ports.
type Rule<'a> = (
    Option<&'a Vec<NetworkPolicyPeer>>,
    Option<&'a Vec<NetworkPolicyPort>>,
);

/// The whole table for the cluster's policies, pods and namespace labels: the text `nft -f`
/// applies atomically (it deletes the previous table in the same transaction).
pub fn render(
    policies: &[NetworkPolicy],
    pods: &[PodView],
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
) -> String {
    let world = World { pods, namespaces };
    // (direction, pod index) → rule lines of its chain
    let mut chains: BTreeMap<(Direction, usize), Vec<String>> = BTreeMap::new();
    for policy in policies {
        let Some(spec) = &policy.spec else { continue };
        let ns = policy.metadata.namespace.as_deref().unwrap_or_default();
        let policy_name = policy.metadata.name.as_deref().unwrap_or_default();
        let selected: Vec<usize> = pods
            .iter()
            .enumerate()
            .filter(|(_, p)| {
                p.namespace == ns
                    && spec
                        .pod_selector
                        .as_ref()
                        .is_none_or(|sel| selects(sel, &p.labels))
            })
            .map(|(i, _)| i)
            .collect();
        for direction in directions(policy) {
            let rules: Vec<Rule<'_>> = match direction {
                Direction::Ingress => spec
                    .ingress
                    .iter()
                    .flatten()
                    .map(|r| (r.from.as_ref(), r.ports.as_ref()))
                    .collect(),
                Direction::Egress => spec
                    .egress
                    .iter()
                    .flatten()
                    .map(|r| (r.to.as_ref(), r.ports.as_ref()))
                    .collect(),
            };
            for &i in &selected {
                let lines = chains.entry((direction, i)).or_default();
                for (peers, ports) in &rules {
                    let peers = world.peers(ns, *peers);
                    lines.extend(rule_lines(direction, policy_name, &peers, *ports, pods, i));
                }
            }
        }
    }

    let mut vmaps: BTreeMap<Direction, Vec<String>> = BTreeMap::new();
    let mut text = String::new();
    let _ = writeln!(text, "table inet {TABLE}\ndelete table inet {TABLE}");
    let _ = writeln!(text, "table inet {TABLE} {{");
    for ((direction, i), lines) in &chains {
        let (prefix, _, _) = direction.words();
        let name = chain_name(prefix, pods[*i].ip);
        vmaps
            .entry(*direction)
            .or_default()
            .push(format!("{} : jump {name}", pods[*i].ip));
        let _ = writeln!(text, "  chain {name} {{");
        let _ = writeln!(
            text,
            "    # {}/{} ({direction:?})",
            pods[*i].namespace, pods[*i].name
        );
        for line in lines {
            let _ = writeln!(text, "    {line}");
        }
        let _ = writeln!(text, "    drop\n  }}");
    }
    for (hook, priority) in [("forward", -10), ("input", -10)] {
        let _ = writeln!(
            text,
            "  chain {hook} {{\n    type filter hook {hook} priority {priority}; policy accept;\n    ct state established,related accept"
        );
        if let Some(v) = vmaps.get(&Direction::Egress) {
            let _ = writeln!(text, "    ip saddr vmap {}", set(v.iter().cloned()));
        }
        // pods do not live at the node's own addresses: ingress chains only on forward
        if let (Some(v), "forward") = (vmaps.get(&Direction::Ingress), hook) {
            let _ = writeln!(text, "    ip daddr vmap {}", set(v.iter().cloned()));
        }
        let _ = writeln!(text, "  }}");
    }
    let _ = writeln!(text, "}}");
    text
}

/// The `return` lines for one rule of a policy in the chain of `pods[me]`.
fn rule_lines(
    direction: Direction,
    policy: &str,
    peers: &Peers,
    ports: Option<&Vec<NetworkPolicyPort>>,
    pods: &[PodView],
    me: usize,
) -> Vec<String> {
    let (_, peer_field, _) = direction.words();
    let comment = format!("comment \"{}\"", policy.replace('"', ""));
    let mut lines = Vec::new();
    // Destinations whose named ports matter: the selected pod for ingress; each peer pod for
    // egress (or every pod, when the rule allows any destination).
    let mut emit = |peer_match: String, dest: Option<&PodView>| {
        for port in port_matches(ports, dest) {
            let line = [peer_match.as_str(), port.as_str(), "return", &comment]
                .iter()
                .filter(|s| !s.is_empty())
                .copied()
                .collect::<Vec<_>>()
                .join(" ");
            lines.push(line);
        }
    };
    let peer_pods: Vec<&PodView> = pods.iter().filter(|p| peers.pods.contains(&p.ip)).collect();
    match direction {
        Direction::Ingress => {
            let me = &pods[me];
            if peers.any {
                emit(String::new(), Some(me));
            }
            if !peers.pods.is_empty() {
                let addrs = set(peers.pods.iter().map(ToString::to_string));
                emit(format!("ip {peer_field} {addrs}"), Some(me));
            }
            for (cidr, except) in &peers.blocks {
                emit(block_match(peer_field, cidr, except), Some(me));
            }
        }
        Direction::Egress => {
            let named = ports
                .into_iter()
                .flatten()
                .any(|p| matches!(p.port, Some(IntOrString::String(_))));
            if peers.any {
                if named {
                    for dest in pods {
                        emit(format!("ip {peer_field} {}", dest.ip), Some(dest));
                    }
                }
                emit(String::new(), None);
            }
            if named {
                for dest in &peer_pods {
                    emit(format!("ip {peer_field} {}", dest.ip), Some(*dest));
                }
            } else if !peers.pods.is_empty() {
                let addrs = set(peers.pods.iter().map(ToString::to_string));
                emit(format!("ip {peer_field} {addrs}"), None);
            }
            for (cidr, except) in &peers.blocks {
                emit(block_match(peer_field, cidr, except), None);
            }
        }
    }
    lines
}

fn block_match(field: &str, cidr: &str, except: &[String]) -> String {
    if except.is_empty() {
        format!("ip {field} {cidr}")
    } else {
        format!(
            "ip {field} {cidr} ip {field} != {}",
            set(except.iter().cloned())
        )
    }
}

/// Why a rendered table cannot be trusted: a CIDR or name nft would choke on, checked before
/// applying so that one bad policy names itself instead of failing the whole table.
pub fn check_policy(policy: &NetworkPolicy) -> Result<(), String> {
    let name = format!(
        "{}/{}",
        policy.metadata.namespace.as_deref().unwrap_or_default(),
        policy.metadata.name.as_deref().unwrap_or_default()
    );
    let Some(spec) = &policy.spec else {
        return Ok(());
    };
    let peers = spec
        .ingress
        .iter()
        .flatten()
        .flat_map(|r| r.from.iter().flatten())
        .chain(
            spec.egress
                .iter()
                .flatten()
                .flat_map(|r| r.to.iter().flatten()),
        );
    for peer in peers {
        if let Some(block) = &peer.ip_block {
            for cidr in std::iter::once(&block.cidr).chain(block.except.iter().flatten()) {
                if !is_ipv4_cidr(cidr) {
                    return Err(format!(
                        "NetworkPolicy {name}: ipBlock {cidr:?} is not an IPv4 CIDR (this node is IPv4 only)"
                    ));
                }
            }
        }
    }
    Ok(())
}

fn is_ipv4_cidr(s: &str) -> bool {
    let Some((addr, len)) = s.split_once('/') else {
        return false;
    };
    addr.parse::<Ipv4Addr>().is_ok() && len.parse::<u8>().is_ok_and(|l| l <= 32)
}

#[cfg(test)]
mod tests;
