//! The configuration of a Flink cluster as the operator delivers it: `config.yaml` (the user's
//! keys, then the keys the operator owns) and the log configuration, in the version's ConfigMap,
//! mounted read-only at [`CONF_DIR`] with `FLINK_CONF_DIR` pointing there.
//!
//! Not through `FLINK_PROPERTIES`: the official image's entrypoint strips every blank from those
//! lines and hands each value to Flink as a literal string, so `"1024m"` keeps its quotes (the
//! JobManager refuses it) and `-XX:+UseG1GC -Xss2m` becomes one word. A file is read by Flink's
//! own YAML parser, exactly as written. (The entrypoint still writes its defaults into
//! `/opt/flink/conf`, which nothing then reads.)

use k8s_openapi::api::core::v1::{ConfigMapVolumeSource, EnvVar, KeyToPath, Volume, VolumeMount};
use streamjob_crds::flink::{OwnedKey, owned_keys};

use super::cluster::{
    BLOB_PORT, ClusterPlan, DATA_PORT, METRICS_PORT, PROMETHEUS_REPORTER, REST_PORT, RPC_PORT,
    TASK_MANAGER_RPC_PORT,
};

/// ConfigMap key of the configuration (mounted as `config.yaml` in [`CONF_DIR`]).
pub const CONFIG_KEY: &str = "config.yaml";
/// ConfigMap key of the log configuration Flink's scripts look for in the configuration folder.
pub const LOG_CONFIG_KEY: &str = "log4j-console.properties";
/// Where the version's ConfigMap is mounted (`FLINK_CONF_DIR`) in every Flink pod.
pub const CONF_DIR: &str = "/opt/streamjob/flink-conf";
/// The volume holding [`CONF_DIR`].
pub const CONF_VOLUME: &str = "flink-conf";
/// Logs to the console (what `kubectl logs` shows), as the official image's
/// `log4j-console.properties` does.
pub const LOG_CONFIG: &str = "\
rootLogger.level = INFO
rootLogger.appenderRef.console.ref = ConsoleAppender
appender.console.name = ConsoleAppender
appender.console.type = CONSOLE
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yyyy-MM-dd HH:mm:ss,SSS} %-5p %-60c %x - %m%n
logger.pekko.name = org.apache.pekko
logger.pekko.level = WARN
logger.netty.name = org.apache.flink.shaded.netty4.io.netty
logger.netty.level = WARN
";

impl ClusterPlan {
    /// The user's configuration keys the operator owns (refused with these messages).
    pub fn check_configuration(&self) -> Vec<OwnedKey> {
        owned_keys(&self.configuration)
    }

    /// `config.yaml`: the user's configuration, then the keys the operator owns.
    pub fn config_yaml(&self) -> String {
        let mut conf = self.configuration.clone();
        let mut own = |k: &str, v: String| {
            conf.insert(k.to_string(), v);
        };
        own("jobmanager.rpc.port", RPC_PORT.to_string());
        own("rest.port", REST_PORT.to_string());
        own("blob.server.port", BLOB_PORT.to_string());
        own("taskmanager.rpc.port", TASK_MANAGER_RPC_PORT.to_string());
        own("taskmanager.data.port", DATA_PORT.to_string());
        // Metrics for Prometheus on the port every job's pods serve them on.
        own(
            "metrics.reporter.prom.factory.class",
            PROMETHEUS_REPORTER.into(),
        );
        own("metrics.reporter.prom.port", METRICS_PORT.to_string());
        // Every pod has its own address: listen on all of them, as the official image's own
        // configuration does (this file replaces it).
        own("jobmanager.bind-host", "0.0.0.0".into());
        own("taskmanager.bind-host", "0.0.0.0".into());
        own("rest.bind-address", "0.0.0.0".into());
        own(
            "taskmanager.numberOfTaskSlots",
            self.slots_per_task_manager.to_string(),
        );
        own("parallelism.default", self.parallelism.to_string());
        own(
            "jobmanager.memory.process.size",
            format!("{}m", self.job_manager.memory_mib),
        );
        own(
            "taskmanager.memory.process.size",
            format!("{}m", self.task_manager.memory_mib),
        );
        // 1.20 reads the first name of each, 2.x the second.
        own("state.checkpoints.dir", self.checkpoints_dir.clone());
        own("execution.checkpointing.dir", self.checkpoints_dir.clone());
        own("state.savepoints.dir", self.savepoints_dir.clone());
        own(
            "execution.checkpointing.savepoint-dir",
            self.savepoints_dir.clone(),
        );
        own(
            "execution.checkpointing.interval",
            self.checkpoint_interval.clone(),
        );
        own(
            "execution.checkpointing.timeout",
            self.checkpoint_timeout.clone(),
        );
        own(
            "state.checkpoints.num-retained",
            self.checkpoints_retained.to_string(),
        );
        own(
            "execution.checkpointing.num-retained",
            self.checkpoints_retained.to_string(),
        );
        // Checkpoints outlive a cancelled run: a last-state upgrade restores the latest one.
        own(
            "execution.checkpointing.externalized-checkpoint-retention",
            "RETAIN_ON_CANCELLATION".into(),
        );
        own("pipeline.max-parallelism", self.max_parallelism.to_string());
        // Stop-with-savepoint must leave the JobManager up to report where the savepoint went.
        own("execution.shutdown-on-application-finish", "false".into());
        // Keys are quoted too: validation refuses odd keys, and a key that slipped through still
        // cannot start a second line.
        conf.iter()
            .map(|(k, v)| format!("{}: {}\n", yaml_string(k), yaml_string(v)))
            .collect()
    }
}

/// `FLINK_CONF_DIR`: Flink's scripts read the configuration folder from it.
pub fn conf_dir_env() -> EnvVar {
    EnvVar {
        name: "FLINK_CONF_DIR".into(),
        value: Some(CONF_DIR.into()),
        ..Default::default()
    }
}

/// The configuration folder, read-only.
pub fn conf_mount() -> VolumeMount {
    VolumeMount {
        name: CONF_VOLUME.into(),
        mount_path: CONF_DIR.into(),
        read_only: Some(true),
        ..Default::default()
    }
}

/// The version's ConfigMap as the configuration folder. `optional` for pods that can do without
/// it (a dispose pod after the version was retired).
pub fn conf_volume(config_map: &str, optional: bool) -> Volume {
    Volume {
        name: CONF_VOLUME.into(),
        config_map: Some(ConfigMapVolumeSource {
            name: config_map.into(),
            optional: Some(optional),
            // only Flink's files (the ConfigMap also holds the version's manifest)
            items: Some(
                [CONFIG_KEY, LOG_CONFIG_KEY]
                    .map(|key| KeyToPath {
                        key: key.into(),
                        path: key.into(),
                        ..Default::default()
                    })
                    .to_vec(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A YAML scalar that stays a string (quoted, escaped).
fn yaml_string(v: &str) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "\"\"".into())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::engine::flink::cluster::tests::plan;

    #[test]
    fn the_operator_owns_what_its_protocol_depends_on() {
        let p = plan();
        let yaml = p.config_yaml();
        assert!(
            yaml.contains("\"restart-strategy.type\": \"fixed-delay\"\n"),
            "{yaml}"
        );
        // A refused key never reaches the cluster even if validation were skipped.
        assert!(yaml.contains("\"parallelism.default\": \"4\"\n"), "{yaml}");
        assert!(yaml.contains("\"execution.shutdown-on-application-finish\": \"false\"\n"));
        assert!(yaml.contains("\"state.savepoints.dir\": \"s3://b/savepoints\"\n"));
        assert!(
            yaml.contains("\"execution.checkpointing.savepoint-dir\": \"s3://b/savepoints\"\n")
        );
        assert!(yaml.contains("\"taskmanager.memory.process.size\": \"2048m\"\n"));
        assert_eq!(p.check_configuration().len(), 1);
        let parsed: BTreeMap<String, String> = serde_yaml_ng::from_str(&yaml).unwrap();
        assert_eq!(parsed["rest.port"], "8081");
        assert_eq!(parsed["taskmanager.data.port"], DATA_PORT.to_string());
        assert_eq!(parsed["metrics.reporter.prom.port"], "9249");
    }

    /// What the official image's FLINK_PROPERTIES loses (blanks, quotes, `#`, `:`) survives the
    /// file: every value reads back as written.
    #[test]
    fn configuration_values_read_back_exactly() {
        let mut p = plan();
        let odd = [
            ("env.java.opts.taskmanager", "-XX:+UseG1GC -Xss2m"),
            ("streamjob.test.quoted", "say \"hi\": it's # not a comment"),
            (
                "streamjob.test.yaml-ish",
                "[a, b] {c: d} *anchor &x !tag @ `",
            ),
            ("streamjob.test.lines", "one\ntwo\r\tthree"),
            ("streamjob.test.dollar", "$(POD_IP) ${HOME} $HOME"),
            ("streamjob.test.blank", "  leading and trailing  "),
            ("streamjob.test.empty", ""),
            ("streamjob.test.unicode", "Zürich ✓"),
        ];
        for (k, v) in odd {
            p.configuration.insert(k.into(), v.into());
        }
        let parsed: BTreeMap<String, String> = serde_yaml_ng::from_str(&p.config_yaml()).unwrap();
        for (k, v) in odd {
            assert_eq!(parsed[k], v, "{k}");
        }
        // a key that would start a line of its own stays one key (validation refuses it first)
        p.configuration
            .insert("a\nstate.savepoints.dir".into(), "x".into());
        let parsed: BTreeMap<String, String> = serde_yaml_ng::from_str(&p.config_yaml()).unwrap();
        assert_eq!(parsed["state.savepoints.dir"], "s3://b/savepoints");
        assert_eq!(parsed["a\nstate.savepoints.dir"], "x");
    }
}
