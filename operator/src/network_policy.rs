//! The per-job NetworkPolicy: who may open connections to a job's pods.
//!
//! A job's pods listen on the control API (the operator calls it), the ports the job's own pods
//! connect to each other on (our runtime: worker registry and data; Flink: JobManager RPC and
//! blob server, TaskManager RPC and data, all fixed by the operator's configuration) and the
//! metrics port (Prometheus). The
//! policy admits exactly that and nothing else; egress is left open (stores, brokers, DNS are
//! wherever the user's job needs them). It takes effect only where the cluster's network plugin
//! enforces NetworkPolicies (Calico, Cilium, …); elsewhere it is inert.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::objects::names::job_label;
use crate::objects::{LABEL_JOB, LABEL_MANAGED, MANAGER, Owner};
use streamjob_contract::process::METRICS_PORT;

/// Where the operator runs: the only peer admitted to the control port.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OperatorPeer {
    /// The operator's namespace (`POD_NAMESPACE`); `None`: any namespace.
    pub namespace: Option<String>,
    /// Labels of the operator's pods (the chart's selector labels); empty: any pod there.
    pub labels: BTreeMap<String, String>,
}

/// Parses `k=v,k=v` (the chart passes its selector labels this way).
pub fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            kv.split_once('=')
                .filter(|(k, v)| !k.is_empty() && !v.is_empty())
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| format!("{kv:?} is not key=value"))
        })
        .collect()
}

/// Name of a job's NetworkPolicy (its label value, at most 63 characters, keeps it short).
pub fn network_policy_name(job: &str) -> String {
    format!("{}-streamjob", job_label(job))
}

fn tcp(port: u16) -> NetworkPolicyPort {
    NetworkPolicyPort {
        port: Some(IntOrString::Int(i32::from(port))),
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

fn match_labels(labels: BTreeMap<String, String>) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels),
        ..Default::default()
    }
}

/// The policy for `owner`'s pods: the operator to the control port, the job's own pods to
/// `peer_ports` (the engine's), anyone to the metrics port.
pub fn network_policy(
    owner: &Owner,
    operator: &OperatorPeer,
    control_port: u16,
    peer_ports: &[u16],
) -> NetworkPolicy {
    let job_pods = BTreeMap::from([
        (LABEL_JOB.to_string(), job_label(&owner.name)),
        (LABEL_MANAGED.to_string(), MANAGER.to_string()),
    ]);
    let operator_peer = NetworkPolicyPeer {
        namespace_selector: Some(match &operator.namespace {
            Some(ns) => match_labels(BTreeMap::from([(
                "kubernetes.io/metadata.name".to_string(),
                ns.clone(),
            )])),
            None => LabelSelector::default(),
        }),
        pod_selector: Some(match_labels(operator.labels.clone())),
        ..Default::default()
    };
    let own_pods = NetworkPolicyPeer {
        pod_selector: Some(match_labels(job_pods.clone())),
        ..Default::default()
    };
    NetworkPolicy {
        metadata: owner.meta(&network_policy_name(&owner.name), None, None),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(match_labels(job_pods)),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(vec![
                NetworkPolicyIngressRule {
                    from: Some(vec![operator_peer]),
                    ports: Some(vec![tcp(control_port)]),
                },
                NetworkPolicyIngressRule {
                    from: Some(vec![own_pods]),
                    ports: Some(peer_ports.iter().copied().map(tcp).collect()),
                },
                // Prometheus runs wherever the cluster's monitoring lives
                NetworkPolicyIngressRule {
                    from: None,
                    ports: Some(vec![tcp(METRICS_PORT)]),
                },
            ]),
            ..Default::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::engine::peer_ports;
    use streamjob_crds::v1alpha1::EngineKind;

    #[test]
    fn operator_reaches_control_pods_reach_each_other_prometheus_reaches_metrics() {
        let owner = Owner {
            name: "clicks".into(),
            namespace: "team".into(),
            uid: "u".into(),
        };
        let operator = OperatorPeer {
            namespace: Some("streamjob-system".into()),
            labels: parse_labels(
                "app.kubernetes.io/name=streamjob-operator,app.kubernetes.io/instance=sj",
            )
            .unwrap(),
        };
        let p = network_policy(&owner, &operator, 8081, peer_ports(&EngineKind::Runtime));
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["metadata"]["name"], "clicks-streamjob");
        assert_eq!(v["metadata"]["namespace"], "team");
        assert_eq!(v["metadata"]["ownerReferences"][0]["name"], "clicks");
        let spec = &v["spec"];
        assert_eq!(
            spec["podSelector"]["matchLabels"]["streamjob.io/job"],
            "clicks"
        );
        assert_eq!(spec["policyTypes"], serde_json::json!(["Ingress"]));
        let rules = spec["ingress"].as_array().unwrap();
        assert_eq!(rules.len(), 3);
        let from = &rules[0]["from"][0];
        assert_eq!(
            from["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
            "streamjob-system"
        );
        assert_eq!(
            from["podSelector"]["matchLabels"]["app.kubernetes.io/instance"],
            "sj"
        );
        assert_eq!(rules[0]["ports"][0]["port"], 8081);
        assert_eq!(
            rules[1]["from"][0]["podSelector"]["matchLabels"]["streamjob.io/job"],
            "clicks"
        );
        let ports: Vec<_> = rules[1]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["port"].clone())
            .collect();
        assert_eq!(ports, [6123, 6121]);
        assert!(rules[2].get("from").is_none(), "metrics from anywhere");
        assert_eq!(rules[2]["ports"][0]["port"], 9249);
        // Flink: JobManager RPC and blob, TaskManager RPC and data
        let flink = network_policy(&owner, &operator, 8081, peer_ports(&EngineKind::Flink));
        let v = serde_json::to_value(&flink).unwrap();
        let ports: Vec<_> = v["spec"]["ingress"][1]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["port"].clone())
            .collect();
        assert_eq!(ports, [6123, 6124, 6122, 6121]);
    }

    #[test]
    fn labels_parse_or_name_the_bad_pair() {
        assert_eq!(parse_labels("").unwrap(), BTreeMap::new());
        assert_eq!(parse_labels("a=b, c=d").unwrap().len(), 2);
        assert!(parse_labels("a").unwrap_err().contains("\"a\""));
        assert!(parse_labels("a=").is_err());
    }
}
