//! The Flink configuration a user may set, and the keys the operator owns.
//!
//! The operator lays out each Flink cluster itself: addresses and ports (its Services and probes
//! depend on them), where checkpoints and savepoints go and what the job restores from (its
//! upgrade protocol depends on them), slots, parallelism and memory (from the spec's own
//! fields), and that the JobManager stays up after stop-with-savepoint. A user setting one of
//! these in `flinkConfiguration` would silently break an upgrade or a rollback, so it is
//! refused with a message naming the key and the spec field to use instead (the fields of the
//! planned `spec.flink` API, docs/flink.md; used once that API lands).

use std::collections::BTreeMap;

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
        "set by the operator (the internal Service)",
    ),
    (
        "taskmanager.numberOfTaskSlots",
        "use spec.flink.taskManager.slots",
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
    ("pipeline.jars", "use spec.flink.job.jar"),
    ("$internal.", "Flink-internal"),
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
    fn the_users_tuning_passes() {
        let user = conf(&[
            "execution.checkpointing.interval",
            "state.backend.type",
            "taskmanager.memory.managed.fraction",
            "pipeline.max-parallelism",
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
}
