//! The chart's monitoring files against the code: every PromQL expression of the alert rules
//! (`alerts/streamjob.rules.yaml`) and the Grafana dashboard (`dashboards/streamjob.json`) parses
//! and names only metrics that `runtime/src/metrics.rs` or `operator/src/metrics.rs` export; and
//! the chart renders them (PodMonitor, PrometheusRule, dashboard ConfigMap) as the files say.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use promql_parser::label::MatchOp;
use promql_parser::parser::{self, Expr, VectorSelector};
use promql_parser::util::{ExprVisitor, walk_expr};
use serde::Deserialize;
use serde_json::{Value, json};

const CHART: &str = "charts/streamjob-operator";
const RULES: &str = "charts/streamjob-operator/alerts/streamjob.rules.yaml";
const DASHBOARD: &str = "charts/streamjob-operator/dashboards/streamjob.json";
const RUNTIME_METRICS: &str = "runtime/src/metrics.rs";
const OPERATOR_METRICS: &str = "operator/src/metrics.rs";
const FLINK_METRICS: &str = "operator/src/engine/flink/metrics.rs";

/// Grafana's variables, replaced by plausible values before an expression is parsed.
const GRAFANA_VARS: [(&str, &str); 5] = [
    ("$__rate_interval", "1m"),
    ("$__interval", "30s"),
    ("$__range", "1h"),
    ("$namespace", "team-a"),
    ("$streamjob", "clicks"),
];

fn read(path: &str) -> String {
    let path = super::root().join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn rules() -> Value {
    serde_yaml_ng::from_str(&read(RULES)).expect("the rules file is YAML")
}

/// Every rule of every group of the rules file.
fn all_rules() -> Vec<Value> {
    let groups = rules()["groups"].as_array().cloned().expect("groups");
    let rules = |g: &Value| g["rules"].as_array().cloned().expect("rules");
    groups.iter().flat_map(rules).collect()
}

fn dashboard() -> Value {
    serde_json::from_str(&read(DASHBOARD)).expect("the dashboard is JSON")
}

/// The metric names a metrics source exports: every `streamjob_[a-z_]+` in it, with `_total`
/// (the OpenMetrics encoder adds it to counter names, which the code writes without it), and
/// `_bucket`, `_sum` and `_count` of the names ending in `_seconds` that the source also
/// registers as a histogram (it mentions `Histogram`).
fn exported(source: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (i, _) in source.char_indices() {
        let rest = &source[i..];
        let boundary = !source[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
        if boundary && rest.starts_with("streamjob_") {
            let end = rest.find(|c: char| !c.is_ascii_lowercase() && c != '_');
            let name = &rest[..end.unwrap_or(rest.len())];
            if !name.ends_with('_') {
                names.insert(name.to_string());
            }
        }
    }
    let histograms = source.contains("Histogram");
    let mut all = BTreeSet::new();
    for name in names {
        if !name.ends_with("_total") {
            all.insert(format!("{name}_total"));
        }
        if histograms && name.ends_with("_seconds") {
            all.extend(["_bucket", "_sum", "_count"].map(|s| format!("{name}{s}")));
        }
        all.insert(name);
    }
    all
}

/// The Flink metrics `operator/src/engine/flink/metrics.rs` lists (quoted `"flink_…"` names; the
/// Flink e2e finds each of them on a running job).
fn flink_listed(source: &str) -> BTreeSet<String> {
    source
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            s.starts_with("flink_") && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
        .map(str::to_string)
        .collect()
}

/// Every vector selector of an expression (those inside range selectors included).
struct Selectors(Vec<VectorSelector>);

impl ExprVisitor for Selectors {
    type Error = ();
    fn pre_visit(&mut self, expr: &Expr) -> Result<bool, ()> {
        match expr {
            Expr::VectorSelector(vs) => self.0.push(vs.clone()),
            Expr::MatrixSelector(ms) => self.0.push(ms.vs.clone()),
            _ => {}
        }
        Ok(true)
    }
}

/// The metrics of `runtime/src/metrics.rs` and of `operator/src/metrics.rs`, and the Flink
/// metrics the operator's Flink engine lists.
struct Exported {
    runtime: BTreeSet<String>,
    operator: BTreeSet<String>,
    flink: BTreeSet<String>,
}

impl Exported {
    fn from_code() -> Self {
        let (runtime, operator) = (read(RUNTIME_METRICS), read(OPERATOR_METRICS));
        let (runtime, operator) = (exported(&runtime), exported(&operator));
        let flink = flink_listed(&read(FLINK_METRICS));
        Self {
            runtime,
            operator,
            flink,
        }
    }

    /// Carries the `streamjob` label (the job's pods' metrics, not the operator's).
    fn of_a_job(&self, name: &str) -> bool {
        self.runtime.contains(name) || self.flink.contains(name)
    }

    /// What is wrong with `expr` (from `origin`): unparsable, a metric neither source exports,
    /// or a `job` matcher on a runtime metric (their label is `streamjob`; Prometheus owns `job`).
    fn check(&self, origin: &str, expr: &str) -> Vec<String> {
        let substitute = |q: String, (var, v): &(&str, &str)| q.replace(var, v);
        let query = GRAFANA_VARS.iter().fold(expr.to_string(), substitute);
        if query.contains('$') {
            return vec![format!("{origin}: unknown variable in `{expr}`")];
        }
        let ast = match parser::parse(&query) {
            Ok(ast) => ast,
            Err(e) => return vec![format!("{origin}: cannot parse `{expr}`: {e}")],
        };
        let mut selectors = Selectors(Vec::new());
        let _ = walk_expr(&mut selectors, &ast);
        let mut problems = Vec::new();
        for vs in selectors.0 {
            // a name, `__name__="a"`, or `__name__=~"a|b"` (one selector over both engines)
            let by_name = vs.matchers.find_matchers("__name__");
            let names: Vec<String> = match (&vs.name, by_name.first()) {
                (Some(name), _) => vec![name.clone()],
                (None, Some(m)) if m.op == MatchOp::Equal => vec![m.value.clone()],
                (None, Some(m)) if matches!(m.op, MatchOp::Re(_)) => {
                    m.value.split('|').map(str::to_string).collect()
                }
                _ => Vec::new(),
            };
            if names.is_empty() {
                problems.push(format!("{origin}: `{expr}` selects no metric by name"));
            }
            for name in names {
                let known = self.of_a_job(&name) || self.operator.contains(&name);
                if !known {
                    problems.push(format!(
                        "{origin}: `{expr}` uses unknown metric {name}: neither {RUNTIME_METRICS} nor {OPERATOR_METRICS} exports it, nor does {FLINK_METRICS} list it"
                    ));
                }
                if self.of_a_job(&name) && !vs.matchers.find_matchers("job").is_empty() {
                    problems.push(format!(
                        "{origin}: `{expr}` matches `job` on the job metric {name}: its label is `streamjob`"
                    ));
                }
            }
        }
        problems
    }
}

/// (where, expression) of every PromQL expression in the rules file and the dashboard (panel
/// targets, and the selectors of `label_values(<selector>, <label>)` variables).
fn expressions() -> Vec<(String, String)> {
    let mut found = Vec::new();
    for rule in all_rules() {
        let name = rule["alert"].as_str().or(rule["record"].as_str());
        let expr = rule["expr"].as_str().expect("every rule has an expr");
        let name = name.unwrap_or("?");
        found.push((format!("{RULES}: {name}"), expr.to_string()));
    }
    fn walk(v: &Value, title: &str, found: &mut Vec<(String, String)>) {
        match v {
            Value::Object(o) => {
                let title = o.get("title").and_then(Value::as_str).unwrap_or(title);
                if let Some(expr) = o.get("expr").and_then(Value::as_str) {
                    found.push((format!("{DASHBOARD}: panel {title:?}"), expr.to_string()));
                }
                if let Some(q) = o.get("definition").and_then(Value::as_str)
                    && let Some(args) = q.strip_prefix("label_values(")
                    && let Some((selector, _)) = args.rsplit_once(',')
                {
                    found.push((format!("{DASHBOARD}: variable {q:?}"), selector.to_string()));
                }
                o.values().for_each(|v| walk(v, title, found));
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, title, found)),
            _ => {}
        }
    }
    walk(&dashboard(), "", &mut found);
    found
}

#[test]
fn monitoring_expressions_use_exported_metrics() {
    let code = Exported::from_code();
    let found = expressions();
    assert!(found.len() > 20, "too few expressions found: {found:?}");
    let problems: Vec<String> = found.iter().flat_map(|(o, e)| code.check(o, e)).collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn monitoring_check_catches_unknown_metrics_and_job_matchers() {
    let source = r##"("streamjob_a", Counter); h: Histogram = "streamjob_x_seconds""##;
    let (runtime, operator) = (exported(source), exported("streamjob_leader"));
    let got = Vec::from_iter(runtime.iter().map(String::as_str)).join(" ");
    let x = "streamjob_x_seconds";
    let want = format!("streamjob_a streamjob_a_total {x} {x}_bucket {x}_count {x}_sum {x}_total");
    assert_eq!(got, want);
    let no_histogram = exported("streamjob_y_seconds");
    assert!(
        !no_histogram.contains("streamjob_y_seconds_bucket"),
        "{no_histogram:?}"
    );
    let flink = flink_listed(r#"pub const FLINK_METRICS: &[&str] = &["flink_a_b", "not flink"];"#);
    assert_eq!(
        Vec::from_iter(flink.iter().map(String::as_str)),
        ["flink_a_b"]
    );
    let code = Exported {
        runtime,
        operator,
        flink,
    };
    let check = |expr: &str| code.check("t", expr).join("\n");
    assert_eq!(check("max(streamjob_leader) == 0"), "");
    let unknown = check("rate(streamjob_nope_total[$__rate_interval])");
    let message =
        "`rate(streamjob_nope_total[$__rate_interval])` uses unknown metric streamjob_nope_total";
    assert!(unknown.contains(message), "{unknown}");
    let job = check(r#"increase(streamjob_a_total{job="clicks"}[5m])"#);
    let message = "matches `job` on the job metric streamjob_a_total";
    assert!(job.contains(message), "{job}");
    assert_eq!(check(r#"max(flink_a_b{streamjob="x"})"#), "");
    assert_eq!(
        check(r#"count({__name__=~"streamjob_a_total|flink_a_b"})"#),
        ""
    );
    let union = check(r#"count({__name__=~"streamjob_a_total|flink_nope"})"#);
    assert!(union.contains("unknown metric flink_nope"), "{union}");
    assert!(check("streamjob_leader{").contains("cannot parse"));
    assert!(check(r#"streamjob_leader{pod="$pod"}"#).contains("unknown variable"));
}

#[test]
fn monitoring_alerts_and_dashboard_are_complete() {
    let code = Exported::from_code();
    let mut missing = Vec::new();
    for rule in all_rules() {
        let name = rule["alert"].as_str().expect("only alerting rules");
        let expr = rule["expr"].as_str().unwrap_or_default();
        let of_runtime = code
            .runtime
            .iter()
            .chain(&code.flink)
            .any(|m| expr.contains(m.as_str()));
        let summary = rule["annotations"]["summary"].as_str().unwrap_or_default();
        let named = !summary.is_empty() && (!of_runtime || summary.contains("$labels.streamjob"));
        let described = rule["annotations"]["description"].is_string();
        let severity = rule["labels"]["severity"].is_string();
        for (present, what) in [
            (rule["for"].is_string(), "`for`"),
            (severity, "a severity"),
            (described, "a description"),
            (named, "a summary naming the StreamJob"),
        ] {
            if !present {
                missing.push(format!("{name} needs {what}"));
            }
        }
    }
    assert!(missing.is_empty(), "{RULES}: {missing:?}");
    let d = dashboard();
    let var = |i: usize, key: &str| d["templating"]["list"][i][key].clone();
    let vars = [var(0, "name"), var(1, "name"), var(2, "name")];
    assert_eq!(vars, ["datasource", "namespace", "streamjob"]);
    let datasource = [var(0, "type"), var(0, "query")];
    assert_eq!(datasource, ["datasource", "prometheus"]);
}

/// helm as `cargo xtask install` put it in the cache (the way `helm_lint` finds it), if it did.
fn helm() -> Option<String> {
    let tools = super::installed_tools().ok()?;
    let (_, helm) = tools.into_iter().find(|(k, _)| k == "STREAMJOB_E2E_HELM")?;
    Path::new(&helm).is_file().then_some(helm)
}

/// The documents `helm template` renders with `values` (each passed with --set).
fn render(helm: &str, values: &[&str]) -> Vec<Value> {
    let mut command = Command::new(helm);
    command.args(["template", "sj", "--kube-version", super::KUBE_VERSION]);
    command.arg(super::root().join(CHART));
    command.args(values.iter().flat_map(|v| ["--set", v]));
    let out = super::output(&mut command).expect("helm template");
    serde_yaml_ng::Deserializer::from_str(&out)
        .map(|doc| Value::deserialize(doc).expect("rendered YAML"))
        .filter(|doc| !doc.is_null())
        .collect()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

/// The only document of `kind` in `docs`.
fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found = of_kind(docs, kind);
    assert_eq!(found.len(), 1, "one {kind}");
    found[0]
}

fn dashboards(docs: &[Value]) -> Vec<&Value> {
    let labelled = |c: &&Value| !c["metadata"]["labels"]["grafana_dashboard"].is_null();
    let config_maps = of_kind(docs, "ConfigMap");
    config_maps.into_iter().filter(labelled).collect()
}

#[test]
fn monitoring_chart_renders_the_files() {
    let Some(helm) = helm() else {
        eprintln!("helm not installed (cargo xtask install): chart rendering not checked");
        return;
    };
    let defaults = render(&helm, &[]);
    let kinds = ["PodMonitor", "ServiceMonitor", "PrometheusRule"];
    let rendered = kinds.map(|kind| of_kind(&defaults, kind).len());
    assert_eq!(rendered, [0; 3], "{kinds:?} are off by default");
    assert!(
        dashboards(&defaults).is_empty(),
        "the dashboard is off by default"
    );
    let all = "metrics.podMonitor.enabled=true,metrics.prometheusRule.enabled=true,\
               metrics.dashboard.enabled=true,metrics.serviceMonitor.enabled=true";
    let namespaced = vec![all, "watchNamespaces={a,b}"];
    for (values, namespaces) in [
        (vec![all], json!({"any": true})),
        (namespaced, json!({"matchNames": ["a", "b"]})),
    ] {
        let docs = render(&helm, &values);
        let spec = &one(&docs, "PodMonitor")["spec"];
        let managed = json!({"app.kubernetes.io/managed-by": "streamjob-operator"});
        assert_eq!(spec["selector"]["matchLabels"], managed);
        // runtime coordinators, Flink JobManagers (role runtime) and TaskManagers (role worker)
        let roles = json!([{"key": "streamjob.io/role", "operator": "In", "values": ["runtime", "worker"]}]);
        assert_eq!(spec["selector"]["matchExpressions"], roles);
        assert_eq!(spec["namespaceSelector"], namespaces, "{values:?}");
        let endpoint = |key: &str| spec["podMetricsEndpoints"][0][key].clone();
        let scraped = [endpoint("port"), endpoint("path")];
        assert_eq!(scraped, ["metrics", "/metrics"]);
        // `streamjob` on every series from the pod label (Flink's metrics have none)
        let copied = json!([{"sourceLabels": ["__meta_kubernetes_pod_label_streamjob_io_job"],
                             "targetLabel": "streamjob_io_job"}]);
        assert_eq!(endpoint("relabelings"), copied);
        let named = json!([{"sourceLabels": ["streamjob_io_job"], "targetLabel": "streamjob"},
                           {"action": "labeldrop", "regex": "streamjob_io_job"}]);
        assert_eq!(endpoint("metricRelabelings"), named);
        let sm = one(&docs, "ServiceMonitor");
        assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");
        let (pr, file) = (one(&docs, "PrometheusRule"), rules());
        assert_eq!(pr["spec"]["groups"], file["groups"]);
        let cm = dashboards(&docs);
        assert_eq!(cm.len(), 1, "one dashboard ConfigMap");
        assert_eq!(cm[0]["metadata"]["labels"]["grafana_dashboard"], "1");
        let shipped = cm[0]["data"]["streamjob.json"].as_str();
        let shipped = serde_json::from_str::<Value>(shipped.expect("streamjob.json"));
        assert_eq!(shipped.expect("the shipped dashboard is JSON"), dashboard());
    }
}
