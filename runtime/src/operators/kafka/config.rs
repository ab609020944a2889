//! The librdkafka consumer configuration of a Kafka source, with credentials read from the
//! environment variables the operator fills from Secrets (see `streamjob_crds::secrets`).
//! Credentials never reach `Debug` output, logs or errors.

use std::collections::BTreeMap;

use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use streamjob_crds::secrets::kafka_secret_envs;
use streamjob_crds::v1alpha1::{
    KafkaIsolationLevel, KafkaSaslMechanism, KafkaSecurityProtocol, KafkaSource,
};

use crate::error::{Error, Result};

/// The consumer settings of one source step.
#[derive(Clone)]
pub struct ConsumerSettings {
    /// Settings safe to print.
    public: BTreeMap<String, String>,
    /// Credentials (SASL password, TLS key ...): never printed.
    secret: BTreeMap<String, String>,
}

impl std::fmt::Debug for ConsumerSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumerSettings")
            .field("public", &self.public)
            .field("secret", &self.secret.keys().collect::<Vec<_>>())
            .finish()
    }
}

fn protocol_name(p: KafkaSecurityProtocol) -> &'static str {
    match p {
        KafkaSecurityProtocol::Plaintext => "plaintext",
        KafkaSecurityProtocol::Ssl => "ssl",
        KafkaSecurityProtocol::SaslPlaintext => "sasl_plaintext",
        KafkaSecurityProtocol::SaslSsl => "sasl_ssl",
    }
}

fn mechanism_name(m: KafkaSaslMechanism) -> &'static str {
    match m {
        KafkaSaslMechanism::Plain => "PLAIN",
        KafkaSaslMechanism::ScramSha256 => "SCRAM-SHA-256",
        KafkaSaslMechanism::ScramSha512 => "SCRAM-SHA-512",
    }
}

impl ConsumerSettings {
    /// Settings of the source of step `uid`; `env` looks up environment variables (the real
    /// environment at run time, a map in tests). A required credential that is not set fails
    /// with the variable's and the Secret's name.
    pub fn new(
        uid: &str,
        spec: &KafkaSource,
        group_id: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self> {
        let mut public = BTreeMap::new();
        let mut set = |k: &str, v: &str| {
            public.insert(k.to_string(), v.to_string());
        };
        set("bootstrap.servers", &spec.bootstrap_servers);
        set("group.id", group_id);
        // Offsets live in checkpoint state; the group only sees commits for monitoring.
        set("enable.auto.commit", "false");
        set("enable.auto.offset.store", "false");
        // Bounded reads learn from end-of-partition events that a partition is done.
        let bounded = spec.stopping_offsets.is_some();
        set(
            "enable.partition.eof",
            if bounded { "true" } else { "false" },
        );
        // An offset that retention removed: read what is left rather than skip to the end.
        set("auto.offset.reset", "earliest");
        set(
            "isolation.level",
            match spec.isolation_level.unwrap_or_default() {
                KafkaIsolationLevel::ReadCommitted => "read_committed",
                KafkaIsolationLevel::ReadUncommitted => "read_uncommitted",
            },
        );
        // Statistics every second feed the consumer lag gauges.
        set("statistics.interval.ms", "1000");
        // Reconnects back off up to 10 s instead of hammering a broker that is down.
        set("reconnect.backoff.max.ms", "10000");
        for (k, v) in &spec.properties {
            set(k, v);
        }
        let mut secret = BTreeMap::new();
        if let Some(security) = &spec.security {
            public.insert(
                "security.protocol".into(),
                protocol_name(security.protocol).into(),
            );
            if let Some(sasl) = &security.sasl {
                public.insert(
                    "sasl.mechanism".into(),
                    mechanism_name(sasl.mechanism).into(),
                );
            }
            for e in kafka_secret_envs(uid, spec) {
                let Some(value) = env(&e.env) else {
                    if e.optional {
                        continue;
                    }
                    return Err(Error::plan(
                        uid,
                        format!(
                            "kafka.security: environment variable {} (key {:?} of Secret {:?}) is not set; on Kubernetes the operator sets it from the Secret, locally export it",
                            e.env, e.key, e.secret
                        ),
                    ));
                };
                let property = match e.env.rsplit_once("_KAFKA_").map(|(_, rest)| rest) {
                    Some(rest) if rest.ends_with("_SASL_USERNAME") => "sasl.username",
                    Some(rest) if rest.ends_with("_SASL_PASSWORD") => "sasl.password",
                    Some(rest) if rest.ends_with("_TLS_CA") => "ssl.ca.pem",
                    Some(rest) if rest.ends_with("_TLS_CERT") => "ssl.certificate.pem",
                    Some(rest) if rest.ends_with("_TLS_KEY") => "ssl.key.pem",
                    _ => continue,
                };
                secret.insert(property.to_string(), value);
            }
        }
        Ok(Self { public, secret })
    }

    /// The printable settings.
    pub fn public(&self) -> &BTreeMap<String, String> {
        &self.public
    }

    /// The librdkafka configuration.
    pub fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        for (k, v) in self.public.iter().chain(&self.secret) {
            c.set(k, v);
        }
        // librdkafka filters its own log lines: ask for the lines `tracing` would keep
        // (`RUST_LOG=librdkafka=debug` with a `debug` property shows the client's internals)
        let level = if tracing::enabled!(target: "librdkafka", tracing::Level::DEBUG) {
            RDKafkaLogLevel::Debug
        } else if tracing::enabled!(target: "librdkafka", tracing::Level::INFO) {
            RDKafkaLogLevel::Info
        } else {
            RDKafkaLogLevel::Warning
        };
        c.set_log_level(level);
        c
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use streamjob_crds::v1alpha1::{KafkaSasl, KafkaSecurity};

    fn sasl_spec() -> KafkaSource {
        KafkaSource {
            bootstrap_servers: "b:9092".into(),
            topic: Some("t".into()),
            security: Some(KafkaSecurity {
                protocol: KafkaSecurityProtocol::SaslPlaintext,
                sasl: Some(KafkaSasl {
                    mechanism: KafkaSaslMechanism::ScramSha256,
                    secret_name: "kafka-user".into(),
                    username_key: None,
                    password_key: None,
                }),
                tls: None,
            }),
            properties: [("fetch.max.bytes".to_string(), "1000000".to_string())].into(),
            ..Default::default()
        }
    }

    #[test]
    fn credentials_come_from_env_and_never_print() {
        let env = |k: &str| match k {
            "STREAMJOB_KAFKA_IN_SASL_USERNAME" => Some("alice".to_string()),
            "STREAMJOB_KAFKA_IN_SASL_PASSWORD" => Some("s3cr3t-pw".to_string()),
            _ => None,
        };
        let s = ConsumerSettings::new("in", &sasl_spec(), "g", &env).unwrap();
        let printed = format!("{s:?}");
        assert!(!printed.contains("s3cr3t-pw"), "{printed}");
        assert!(printed.contains("sasl.password"), "{printed}");
        assert_eq!(s.public()["sasl.mechanism"], "SCRAM-SHA-256");
        assert_eq!(s.public()["security.protocol"], "sasl_plaintext");
        assert_eq!(s.public()["isolation.level"], "read_committed");
        assert_eq!(s.public()["enable.auto.commit"], "false");
        assert_eq!(s.public()["fetch.max.bytes"], "1000000");
        let c = s.client_config();
        assert_eq!(c.get("sasl.password"), Some("s3cr3t-pw"));
        assert_eq!(c.get("sasl.username"), Some("alice"));
    }

    #[test]
    fn a_missing_credential_names_the_variable_and_the_secret() {
        let e = ConsumerSettings::new("in", &sasl_spec(), "g", &|_| None).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("STREAMJOB_KAFKA_IN_SASL_USERNAME") && text.contains("kafka-user"),
            "{text}"
        );
    }
}
