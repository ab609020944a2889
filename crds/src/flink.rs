//! `spec.flink`: a job run on Apache Flink (`spec.engine: flink`), and the Flink configuration a
//! user may set.
//!
//! The operator lays out each Flink cluster itself: addresses and ports (its Services and probes
//! depend on them), where checkpoints and savepoints go and what the job restores from (its
//! upgrade protocol depends on them), slots, parallelism and memory (from the spec's own
//! fields), and that the JobManager stays up after stop-with-savepoint. A user setting one of
//! these in `flinkConfiguration` would silently break an upgrade or a rollback, so it is
//! refused with a message naming the key and the spec field to use instead.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::v1alpha1::StreamJobSpec;

/// The Flink minors the engine runs (`major`, `minor`): the savepoint pre-check is compiled per
/// minor. The operator's `engine::flink::version::SUPPORTED` holds the same list with what each
/// reads.
pub const SUPPORTED_MINORS: &[(u32, u32)] = &[(1, 20), (2, 3)];

/// Where application mode finds the job's jar in the image.
pub const USRLIB: &str = "/opt/flink/usrlib";

/// How a job runs on Apache Flink: one standalone application cluster per version of the job,
/// owned by the operator (a JobManager pod running the job's `main()`, TaskManager pods, a
/// ConfigMap and a rest Service).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlinkSpec {
    /// Flink version of `spec.image`, major.minor.patch: 1.20.x or 2.3.x. Savepoints restore
    /// forward only; the pre-check runs with this version.
    #[schemars(regex(pattern = r"^[0-9]+\.[0-9]+\.[0-9]+$"), length(max = 32))]
    pub version: String,

    /// The job: its jar is in the image under /opt/flink/usrlib, as Flink's application mode
    /// expects.
    pub job: FlinkJobSpec,

    /// The JobManager pod.
    #[serde(default)]
    pub job_manager: FlinkJobManagerSpec,

    /// The TaskManager pods.
    #[serde(default)]
    pub task_manager: FlinkTaskManagerSpec,

    /// Flink configuration (`config.yaml` keys, written as `a.b.c`). Keys the operator owns
    /// (addresses, ports, checkpoint and savepoint directories, parallelism, memory, restore
    /// settings) are refused naming the spec field to use. Values may hold any text: they reach
    /// Flink exactly as written.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self.all(k, k.matches('^[A-Za-z0-9][A-Za-z0-9._-]*$'))",
        "message": "spec.flink.flinkConfiguration: keys are Flink option names: letters, digits, '.', '_' and '-' (no blanks, quotes, ':' or line breaks)"
    }]))]
    pub flink_configuration: BTreeMap<String, String>,

    /// An Ingress to the job's Flink web UI and REST API (the `<job>-rest` Service, the same
    /// across upgrades). Not part of the job's version: changing it never upgrades the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<FlinkIngress>,
}

/// The Ingress `<job>-rest` the operator keeps for the job (owned by the StreamJob).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlinkIngress {
    /// The host, e.g. flink-clicks.example.com (`*.example.com` for a wildcard).
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^(\*\.)?[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    )]
    pub host: String,
    /// Path prefix routed to the UI (pathType Prefix), default `/`. A prefix other than `/`
    /// needs the controller to strip it (an annotation such as nginx's rewrite-target).
    #[serde(default = "root_path")]
    #[schemars(length(min = 1, max = 512), regex(pattern = r"^/"))]
    pub path: String,
    /// The IngressClass (`spec.ingressClassName`); unset: the cluster's default class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_name: Option<String>,
    /// Annotations of the Ingress, for its controller (authentication, rewrites, certificates).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// A Secret of the job's namespace with the host's TLS certificate (`tls.crt`, `tls.key`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_secret_name: Option<String>,
}

fn root_path() -> String {
    "/".into()
}

/// The job's entry point.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlinkJobSpec {
    /// The class whose `main()` builds the job, e.g. com.example.Clicks.
    #[schemars(length(min = 1, max = 512))]
    pub entry_class: String,

    /// Arguments of `main()`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,

    /// Moved: use spec.upgrade.allowNonRestoredState (one field for both engines). Kept in the
    /// schema so a manifest that still sets it is refused with that message instead of the API
    /// server dropping it silently.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "false",
        "message": "spec.flink.job.allowNonRestoredState moved to spec.upgrade.allowNonRestoredState (one field for both engines)"
    }]))]
    pub allow_non_restored_state: Option<bool>,
}

/// Memory and CPU of one Flink pod.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlinkResources {
    /// Process memory (Flink's `*.memory.process.size`, the pod's request and limit): 1024Mi,
    /// 2Gi, 1536m, 2g.
    #[serde(default = "default_memory")]
    #[schemars(regex(pattern = r"^[0-9]+(Mi|Gi|m|g)$"), length(max = 16))]
    pub memory: String,
    /// CPU request: 1, 500m.
    #[serde(default = "default_cpu")]
    #[schemars(length(min = 1, max = 16))]
    pub cpu: String,
}

impl Default for FlinkResources {
    fn default() -> Self {
        Self {
            memory: default_memory(),
            cpu: default_cpu(),
        }
    }
}

fn default_memory() -> String {
    "1024Mi".into()
}

fn default_cpu() -> String {
    "1".into()
}

/// The JobManager pod.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlinkJobManagerSpec {
    #[serde(default)]
    pub resources: FlinkResources,
    /// Merged over `spec.podTemplate` into the JobManager pod only (as a FlinkDeployment's
    /// `jobManager.podTemplate`): the role's fields win, containers, volumes and env merge by
    /// name. The check and dispose pods get `spec.podTemplate` alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::pod_template::role_template_schema")]
    pub pod_template: Option<crate::pod_template::PodTemplate>,
}

/// The TaskManager pods.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlinkTaskManagerSpec {
    /// TaskManager pods; with `taskSlots` they must hold `spec.parallelism` slots.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 1024))]
    pub replicas: u32,
    /// Task slots per TaskManager (`taskmanager.numberOfTaskSlots`).
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 256))]
    pub task_slots: u32,
    #[serde(default)]
    pub resources: FlinkResources,
    /// Merged over `spec.podTemplate` into the TaskManager pods only (as a FlinkDeployment's
    /// `taskManager.podTemplate`), e.g. tolerations for spot nodes: the role's fields win,
    /// containers, volumes and env merge by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::pod_template::role_template_schema")]
    pub pod_template: Option<crate::pod_template::PodTemplate>,
}

impl Default for FlinkTaskManagerSpec {
    fn default() -> Self {
        Self {
            replicas: 1,
            task_slots: 1,
            resources: FlinkResources::default(),
            pod_template: None,
        }
    }
}

fn one() -> u32 {
    1
}

/// Memory in MiB from `1024Mi`, `2Gi`, `1536m`, `2g`.
pub fn memory_mib(value: &str) -> Option<u32> {
    let v = value.trim();
    let (number, factor) = if let Some(n) = v.strip_suffix("Mi").or_else(|| v.strip_suffix('m')) {
        (n, 1)
    } else if let Some(n) = v.strip_suffix("Gi").or_else(|| v.strip_suffix('g')) {
        (n, 1024)
    } else {
        return None;
    };
    number.parse::<u32>().ok()?.checked_mul(factor)
}

/// `major.minor.patch`, if `version` is one.
pub fn parse_version(version: &str) -> Option<(u32, u32, u32)> {
    let mut parts = version.trim().split('.').map(str::parse::<u32>);
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(Ok(a)), Some(Ok(b)), Some(Ok(c)), None) => Some((a, b, c)),
        _ => None,
    }
}

impl StreamJobSpec {
    /// Why this spec cannot restore the state a job deployed as `deployed` keeps, whatever the
    /// job's code: an engine's rule that no pre-check needs to run for. The one rule today:
    /// Flink restores savepoints and checkpoints in the same or a newer minor version only, so a
    /// downgrade would fail after the running job is stopped.
    pub fn cannot_restore_state_of(&self, deployed: &StreamJobSpec) -> Option<String> {
        let (new, old) = (self.flink.as_ref()?, deployed.flink.as_ref()?);
        let (to, from) = (parse_version(&new.version)?, parse_version(&old.version)?);
        ((to.0, to.1) < (from.0, from.1)).then(|| {
            format!(
                "spec.flink.version {} is older than the running job's {}: Flink restores state written by the same or an older minor version only; keep {} (or a newer version), or start the job without its state (spec.upgrade.mode: stateless)",
                new.version, old.version, old.version
            )
        })
    }
}

impl FlinkSpec {
    /// Every problem of this Flink spec, each naming its field.
    pub fn problems(&self, parallelism: u32) -> Vec<String> {
        let mut out = Vec::new();
        match parse_version(&self.version) {
            None => out.push(format!(
                "spec.flink.version: {:?} is not a Flink version: use major.minor.patch, e.g. 1.20.0",
                self.version
            )),
            Some((major, minor, _)) if !SUPPORTED_MINORS.contains(&(major, minor)) => {
                out.push(format!(
                    "spec.flink.version: Flink {} is not supported: the Flink engine runs {} (the savepoint pre-check is built per minor version)",
                    self.version,
                    SUPPORTED_MINORS
                        .iter()
                        .map(|(a, b)| format!("{a}.{b}.x"))
                        .collect::<Vec<_>>()
                        .join(" and ")
                ))
            }
            Some(_) => {}
        }
        if self.job.allow_non_restored_state.is_some() {
            out.push("spec.flink.job.allowNonRestoredState moved to spec.upgrade.allowNonRestoredState (one field for both engines)".into());
        }
        if self.job.entry_class.trim().is_empty() {
            out.push("spec.flink.job.entryClass: must not be empty: name the class whose main() builds the job".into());
        }
        // The least each process starts with on Flink's default memory model: a JobManager
        // needs its JVM metaspace (256m) and overhead (192m) beside 320m of Flink memory; a
        // TaskManager also its framework heap and off-heap (128m each), network (64m) and
        // managed memory (40%) before any task heap is left, which takes about 1000m (at 768Mi
        // Flink 2.3 refuses: "… exceed configured Total Flink Memory (320.000mb)"). A
        // TaskManager whose memory model the job sets itself (`taskmanager.memory.*`) is
        // Flink's to judge.
        let own_tm_model = self
            .flink_configuration
            .keys()
            .any(|k| k.starts_with("taskmanager.memory."));
        for (field, r, least) in [
            (
                "spec.flink.jobManager.resources.memory",
                &self.job_manager.resources,
                768,
            ),
            (
                "spec.flink.taskManager.resources.memory",
                &self.task_manager.resources,
                if own_tm_model { 768 } else { 1024 },
            ),
        ] {
            match memory_mib(&r.memory) {
                Some(m) if m >= least => {}
                Some(_) => out.push(format!(
                    "{field}: {} is too little for a Flink process: give it at least {least}Mi",
                    r.memory
                )),
                None => out.push(format!(
                    "{field}: {:?} is not a memory size: use Mi or Gi (1024Mi, 2Gi)",
                    r.memory
                )),
            }
        }
        for (field, r) in [
            (
                "spec.flink.jobManager.resources.cpu",
                &self.job_manager.resources,
            ),
            (
                "spec.flink.taskManager.resources.cpu",
                &self.task_manager.resources,
            ),
        ] {
            if r.cpu.trim().is_empty() {
                out.push(format!(
                    "{field}: must not be empty: use cores, e.g. 1 or 500m"
                ));
            }
        }
        let slots = u64::from(self.task_manager.replicas) * u64::from(self.task_manager.task_slots);
        if slots < u64::from(parallelism) {
            out.push(format!(
                "spec.flink.taskManager.replicas ({}) × taskSlots ({}) = {slots} slot(s) cannot run spec.parallelism {parallelism}: raise replicas or taskSlots",
                self.task_manager.replicas, self.task_manager.task_slots
            ));
        }
        out.extend(
            self.flink_configuration
                .keys()
                .filter(|k| !is_option_name(k))
                .map(|k| {
                    format!(
                        "spec.flink.flinkConfiguration[{k:?}]: not a Flink option name: use letters, digits, '.', '_' and '-' (no blanks, quotes, ':' or line breaks)"
                    )
                }),
        );
        out.extend(
            owned_keys(&self.flink_configuration)
                .iter()
                .map(|k| format!("spec.flink.{k}")),
        );
        out
    }
}

/// A key Flink's configuration can hold as written: no character that could end the key, start
/// another line or be read differently by YAML (the CEL rule on the field says the same).
pub fn is_option_name(key: &str) -> bool {
    key.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Keys (or key prefixes ending in `.`) the operator sets, with what to use instead.
const OWNED: &[(&str, &str)] = &[
    (
        "jobmanager.rpc.address",
        "set by the operator (the JobManager's Service)",
    ),
    (
        "jobmanager.rpc.port",
        "set by the operator (the JobManager's Service)",
    ),
    ("jobmanager.bind-host", "set by the operator"),
    ("taskmanager.host", "set by the operator (the pod IP)"),
    ("taskmanager.bind-host", "set by the operator"),
    ("rest.address", "set by the operator (the rest Service)"),
    ("rest.bind-address", "set by the operator"),
    (
        "rest.port",
        "set by the operator (the rest Service and probes use it)",
    ),
    (
        "rest.bind-port",
        "set by the operator (the rest Service and probes use it)",
    ),
    (
        "blob.server.port",
        "set by the operator (the job's NetworkPolicy admits it)",
    ),
    (
        "taskmanager.rpc.port",
        "set by the operator (the job's NetworkPolicy admits it)",
    ),
    (
        "taskmanager.data.port",
        "set by the operator (the job's NetworkPolicy admits it)",
    ),
    (
        "taskmanager.numberOfTaskSlots",
        "use spec.flink.taskManager.taskSlots",
    ),
    ("parallelism.default", "use spec.parallelism"),
    (
        "jobmanager.memory.process.size",
        "use spec.flink.jobManager.resources",
    ),
    (
        "taskmanager.memory.process.size",
        "use spec.flink.taskManager.resources",
    ),
    ("state.checkpoints.dir", "use spec.checkpoints.dir"),
    ("execution.checkpointing.dir", "use spec.checkpoints.dir"),
    ("state.savepoints.dir", "use spec.savepoints.dir"),
    (
        "execution.checkpointing.savepoint-dir",
        "use spec.savepoints.dir",
    ),
    (
        "execution.savepoint.path",
        "the operator restores from the savepoint of the upgrade",
    ),
    (
        "execution.state-recovery.path",
        "the operator restores from the savepoint of the upgrade",
    ),
    (
        "execution.savepoint.ignore-unclaimed-state",
        "use spec.upgrade.allowNonRestoredState",
    ),
    (
        "execution.state-recovery.ignore-unclaimed-state",
        "use spec.upgrade.allowNonRestoredState",
    ),
    (
        "execution.shutdown-on-application-finish",
        "the operator keeps the JobManager up to read the stop savepoint",
    ),
    (
        "execution.target",
        "the operator runs standalone application clusters",
    ),
    (
        "pipeline.jars",
        "put the job's jar in the image's /opt/flink/usrlib",
    ),
    ("pipeline.max-parallelism", "use spec.maxParallelism"),
    (
        "state.checkpoints.num-retained",
        "use spec.checkpoints.retained",
    ),
    (
        "execution.checkpointing.num-retained",
        "use spec.checkpoints.retained",
    ),
    (
        "execution.checkpointing.interval",
        "use spec.checkpoints.interval",
    ),
    (
        "execution.checkpointing.timeout",
        "use spec.checkpoints.timeout",
    ),
    (
        "execution.checkpointing.externalized-checkpoint-retention",
        "set by the operator (checkpoints are kept for last-state upgrades)",
    ),
    ("$internal.", "Flink-internal"),
    (
        "metrics.reporter.prom.",
        "set by the operator (Prometheus on the port named metrics, 9249, which the chart's PodMonitor scrapes); add other reporters under another name",
    ),
    (
        "kubernetes.",
        "the operator creates the cluster's Kubernetes objects (Flink's native Kubernetes mode is not used)",
    ),
    ("high-availability.", "set by the operator"),
];

/// A refused key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedKey {
    pub key: String,
    pub why: &'static str,
}

impl std::fmt::Display for OwnedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "flinkConfiguration[\"{}\"] is owned by the operator: {}",
            self.key, self.why
        )
    }
}

/// Every key of `user` the operator owns (empty: the configuration may be used as it is).
/// Keys are compared as Flink does: case-sensitively, after trimming.
pub fn owned_keys(user: &BTreeMap<String, String>) -> Vec<OwnedKey> {
    user.keys()
        .filter_map(|key| {
            let k = key.trim();
            OWNED
                .iter()
                .find(|(owned, _)| {
                    if owned.ends_with('.') {
                        k.starts_with(owned)
                    } else {
                        k == *owned
                    }
                })
                .map(|(_, why)| OwnedKey {
                    key: key.clone(),
                    why,
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(keys: &[&str]) -> BTreeMap<String, String> {
        keys.iter()
            .map(|k| (k.to_string(), "x".to_string()))
            .collect()
    }

    #[test]
    fn the_flink_example_is_valid_and_refusals_name_their_field() {
        use crate::v1alpha1::StreamJob;
        let job = StreamJob::from_yaml_strict(include_str!("../../examples/flink-counting.yaml"))
            .unwrap();
        job.spec.validate().unwrap();
        let f = job.spec.flink.clone().unwrap();
        assert_eq!(memory_mib(&f.task_manager.resources.memory), Some(1536));
        let refused = |edit: &dyn Fn(&mut crate::v1alpha1::StreamJobSpec)| {
            let mut spec = job.spec.clone();
            edit(&mut spec);
            spec.validate().unwrap_err().to_string()
        };
        let e = refused(&|s| s.flink.as_mut().unwrap().version = "1.19.1".into());
        assert!(e.contains("spec.flink.version: Flink 1.19.1 is not supported: the Flink engine runs 1.20.x and 2.3.x"), "{e}");
        let e = refused(&|s| s.parallelism = 3);
        assert!(e.contains("spec.flink.taskManager.replicas (1) × taskSlots (2) = 2 slot(s) cannot run spec.parallelism 3"), "{e}");
        let e = refused(&|s| {
            s.flink
                .as_mut()
                .unwrap()
                .flink_configuration
                .insert("state.savepoints.dir".into(), "x".into());
        });
        assert!(e.contains("spec.flink.flinkConfiguration[\"state.savepoints.dir\"] is owned by the operator: use spec.savepoints.dir"), "{e}");
        let e = refused(&|s| s.upgrade.strategy = crate::v1alpha1::UpgradeStrategy::Shadow);
        assert!(
            e.contains("spec.upgrade.strategy: Flink jobs upgrade InPlace"),
            "{e}"
        );
        let e = refused(&|s| s.engine = crate::v1alpha1::EngineKind::Runtime);
        assert!(
            e.contains("spec.flink: set only with spec.engine: flink"),
            "{e}"
        );
        assert!(e.contains("spec.pipeline"), "{e}");
        let e = refused(&|s| s.flink = None);
        assert!(
            e.contains("spec.flink: required with spec.engine: flink"),
            "{e}"
        );
        let e =
            refused(&|s| s.flink.as_mut().unwrap().task_manager.resources.memory = "512Mi".into());
        assert!(
            e.contains("spec.flink.taskManager.resources.memory: 512Mi is too little"),
            "{e}"
        );
        // 768Mi is enough for a JobManager, not for a TaskManager on Flink's default memory
        // model, unless the job sets that model itself
        let e =
            refused(&|s| s.flink.as_mut().unwrap().task_manager.resources.memory = "768Mi".into());
        assert!(e.contains("give it at least 1024Mi"), "{e}");
        let e = refused(&|s| {
            let f = s.flink.as_mut().unwrap();
            f.task_manager.resources.memory = "768Mi".into();
            f.job_manager.resources.memory = "512Mi".into();
            f.flink_configuration
                .insert("taskmanager.memory.managed.size".into(), "16m".into());
        });
        assert!(!e.contains("taskManager.resources.memory"), "{e}");
        assert!(
            e.contains("jobManager.resources.memory: 512Mi is too little"),
            "{e}"
        );
    }

    #[test]
    fn the_users_tuning_passes() {
        let user = conf(&[
            "state.backend.type",
            "taskmanager.memory.managed.fraction",
            "restart-strategy.type",
            "rest.flamegraph.enabled",
        ]);
        assert_eq!(owned_keys(&user), vec![]);
    }

    #[test]
    fn owned_keys_are_refused_with_the_field_to_use() {
        let user = conf(&[
            "state.savepoints.dir",
            " parallelism.default",
            "high-availability.type",
            "kubernetes.cluster-id",
            "rest.port",
        ]);
        let refused: Vec<String> = owned_keys(&user).iter().map(ToString::to_string).collect();
        assert_eq!(refused.len(), 5, "{refused:?}");
        assert!(refused.contains(
            &"flinkConfiguration[\"state.savepoints.dir\"] is owned by the operator: use spec.savepoints.dir"
                .to_string()
        ));
        assert!(
            refused
                .iter()
                .any(|r| r.contains("\" parallelism.default\"")
                    && r.ends_with("use spec.parallelism"))
        );
    }

    #[test]
    fn keys_that_could_smuggle_a_line_are_refused_naming_the_key() {
        for bad in [
            "a\nstate.savepoints.dir",
            "x: y",
            "\"quoted\"",
            " parallelism.default",
            "a#b",
            "",
            "-leading",
        ] {
            assert!(!is_option_name(bad), "{bad:?}");
        }
        for good in [
            "state.backend.type",
            "fs.s3a.connection.maximum",
            "env.java.opts.taskmanager",
            "metrics.reporter.prom_1.port",
        ] {
            assert!(is_option_name(good), "{good:?}");
        }
        use crate::v1alpha1::StreamJob;
        let mut job =
            StreamJob::from_yaml_strict(include_str!("../../examples/flink-counting.yaml"))
                .unwrap();
        job.spec
            .flink
            .as_mut()
            .unwrap()
            .flink_configuration
            .insert("a\nstate.savepoints.dir".into(), "file:///elsewhere".into());
        let e = job.spec.validate().unwrap_err().to_string();
        assert!(
            e.contains("spec.flink.flinkConfiguration[\"a\\nstate.savepoints.dir\"]: not a Flink option name"),
            "{e}"
        );
    }
}
