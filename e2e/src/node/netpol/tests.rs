#![allow(clippy::unwrap_used)]

use super::*;

fn pod(ns: &str, name: &str, ip: &str, labels: &[(&str, &str)]) -> PodView {
    PodView {
        namespace: ns.into(),
        name: name.into(),
        ip: ip.parse().unwrap(),
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect(),
        named_ports: BTreeMap::from([(("control".into(), "TCP".into()), 8081)]),
    }
}

fn policy(v: serde_json::Value) -> NetworkPolicy {
    serde_json::from_value(v).unwrap()
}

fn namespaces() -> BTreeMap<String, BTreeMap<String, String>> {
    ["team", "ops", "other"]
        .into_iter()
        .map(|n| {
            (
                n.to_string(),
                BTreeMap::from([("kubernetes.io/metadata.name".to_string(), n.to_string())]),
            )
        })
        .collect()
}

fn world() -> Vec<PodView> {
    vec![
        pod(
            "team",
            "job-0",
            "10.244.0.10",
            &[("streamjob.io/job", "clicks")],
        ),
        pod(
            "team",
            "job-1",
            "10.244.0.11",
            &[("streamjob.io/job", "clicks")],
        ),
        pod("team", "client", "10.244.0.12", &[("app", "client")]),
        pod("ops", "operator", "10.244.0.20", &[("app", "operator")]),
        pod("other", "intruder", "10.244.0.30", &[("app", "operator")]),
    ]
}

/// The rule lines of one pod's chain.
fn chain<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let start = text
        .find(&format!("chain {name} {{"))
        .unwrap_or_else(|| panic!("no chain {name} in\n{text}"));
    text[start..]
        .lines()
        .skip(2)
        .take_while(|l| l.trim() != "}")
        .map(str::trim)
        .collect()
}

#[test]
fn operator_policy_admits_operator_to_control_and_job_pods_to_each_other() {
    let p = policy(serde_json::json!({
        "metadata": {"name": "clicks-streamjob", "namespace": "team"},
        "spec": {
            "podSelector": {"matchLabels": {"streamjob.io/job": "clicks"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
                           "podSelector": {"matchLabels": {"app": "operator"}}}],
                 "ports": [{"port": 8081, "protocol": "TCP"}]},
                {"from": [{"podSelector": {"matchLabels": {"streamjob.io/job": "clicks"}}}],
                 "ports": [{"port": 6123, "protocol": "TCP"}, {"port": 6121}]},
                {"ports": [{"port": 9249, "protocol": "TCP"}]}
            ]
        }
    }));
    let text = render(&[p], &world(), &namespaces());
    let lines = chain(&text, "in_10_244_0_10");
    assert_eq!(
        lines,
        [
            "ip saddr { 10.244.0.20 } meta l4proto tcp th dport { 8081 } return comment \"clicks-streamjob\"",
            "ip saddr { 10.244.0.10, 10.244.0.11 } meta l4proto tcp th dport { 6121, 6123 } return comment \"clicks-streamjob\"",
            "meta l4proto tcp th dport { 9249 } return comment \"clicks-streamjob\"",
            "drop",
        ]
    );
    // the intruder has the operator's labels in another namespace: not admitted
    assert!(!text.contains("10.244.0.30"));
    // unselected pods have no chain; both job pods are in the ingress map, nobody in an egress map
    assert!(!text.contains("in_10_244_0_12"));
    assert!(text.contains(
        "ip daddr vmap { 10.244.0.10 : jump in_10_244_0_10, 10.244.0.11 : jump in_10_244_0_11 }"
    ));
    assert!(!text.contains("saddr vmap"));
    assert!(text.starts_with("table inet streamjob_netpol\ndelete table inet streamjob_netpol\n"));
}

#[test]
fn deny_all_selects_without_rules_and_policies_add_up() {
    let deny = policy(serde_json::json!({
        "metadata": {"name": "deny", "namespace": "team"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    }));
    let text = render(std::slice::from_ref(&deny), &world(), &namespaces());
    for ip in ["10_244_0_10", "10_244_0_11", "10_244_0_12"] {
        assert_eq!(chain(&text, &format!("in_{ip}")), ["drop"]);
        assert_eq!(chain(&text, &format!("eg_{ip}")), ["drop"]);
    }
    assert!(!text.contains("10_244_0_20"), "other namespaces untouched");

    // a second policy opening egress to DNS by ipBlock and to the ops namespace by named port
    let open = policy(serde_json::json!({
        "metadata": {"name": "egress", "namespace": "team"},
        "spec": {
            "podSelector": {"matchLabels": {"app": "client"}},
            "egress": [
                {"to": [{"ipBlock": {"cidr": "10.0.0.0/24", "except": ["10.0.0.1/32"]}}],
                 "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53}]},
                {"to": [{"namespaceSelector": {"matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["ops"]}]}}],
                 "ports": [{"port": "control"}]}
            ]
        }
    }));
    let text = render(&[deny, open], &world(), &namespaces());
    assert_eq!(
        chain(&text, "eg_10_244_0_12"),
        [
            "ip daddr 10.0.0.0/24 ip daddr != { 10.0.0.1/32 } meta l4proto tcp th dport { 53 } return comment \"egress\"",
            "ip daddr 10.0.0.0/24 ip daddr != { 10.0.0.1/32 } meta l4proto udp th dport { 53 } return comment \"egress\"",
            "ip daddr 10.244.0.20 meta l4proto tcp th dport { 8081 } return comment \"egress\"",
            "drop",
        ]
    );
    // no egress rules given: policyTypes defaults to Ingress plus Egress because egress is set
    assert!(text.contains("ip saddr vmap {"));
}

#[test]
fn unresolvable_named_ports_and_empty_selections_allow_nothing() {
    let p = policy(serde_json::json!({
        "metadata": {"name": "p", "namespace": "team"},
        "spec": {
            "podSelector": {"matchLabels": {"app": "client"}},
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": {"app": "nobody"}}}]},
                {"ports": [{"port": "no-such-port"}]},
                {"from": [{"podSelector": {"matchExpressions": [
                    {"key": "app", "operator": "Weird"}]}}]},
                {"ports": [{"port": 7000, "endPort": 7010, "protocol": "SCTP"}]}
            ]
        }
    }));
    let text = render(&[p], &world(), &namespaces());
    assert_eq!(
        chain(&text, "in_10_244_0_12"),
        [
            "meta l4proto sctp th dport { 7000-7010 } return comment \"p\"",
            "drop"
        ]
    );
}

#[test]
fn selectors_follow_label_selector_semantics() {
    let labels = BTreeMap::from([("a".to_string(), "1".to_string())]);
    let sel = |v: serde_json::Value| -> LabelSelector { serde_json::from_value(v).unwrap() };
    assert!(selects(&sel(serde_json::json!({})), &labels));
    assert!(selects(
        &sel(serde_json::json!({"matchLabels": {"a": "1"}})),
        &labels
    ));
    assert!(!selects(
        &sel(serde_json::json!({"matchLabels": {"a": "2"}})),
        &labels
    ));
    let expr = |op: &str, values: &[&str]| {
        sel(
            serde_json::json!({"matchExpressions": [{"key": "a", "operator": op, "values": values}]}),
        )
    };
    assert!(selects(&expr("In", &["1", "2"]), &labels));
    assert!(!selects(&expr("NotIn", &["1"]), &labels));
    assert!(selects(&expr("Exists", &[]), &labels));
    assert!(!selects(&expr("DoesNotExist", &[]), &labels));
    assert!(selects(&expr("NotIn", &["1"]), &BTreeMap::new()));
}

#[test]
fn bad_cidrs_name_the_policy() {
    let p = policy(serde_json::json!({
        "metadata": {"name": "p", "namespace": "team"},
        "spec": {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "fd00::/8"}}]}]}
    }));
    let err = check_policy(&p).unwrap_err();
    assert!(err.contains("team/p") && err.contains("fd00::/8"), "{err}");
}
