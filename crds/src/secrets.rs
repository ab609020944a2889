//! How Secret values reach runtime pods: the operator maps each Secret key the manifest names to
//! an environment variable (`valueFrom.secretKeyRef`, never an argument, so values stay out of
//! the pod spec, `ps` and logs), and the runtime reads the same names. Both sides call these
//! functions, so the names cannot drift apart.

use crate::v1alpha1::{KafkaSecurity, KafkaSource};

/// One Secret value a source needs, by the environment variable that carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretEnv {
    /// The environment variable in runtime pods.
    pub env: String,
    /// The Secret's name.
    pub secret: String,
    /// The key in the Secret.
    pub key: String,
    /// Whether the key may be missing (then the variable is unset).
    pub optional: bool,
}

/// `STREAMJOB_KAFKA_<UID>_<WHAT>`, the uid upper-cased with every other character as `_`.
pub fn kafka_env_name(uid: &str, what: &str) -> String {
    let uid: String = uid
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("STREAMJOB_KAFKA_{uid}_{what}")
}

/// The Secret values the Kafka source of step `uid` reads: SASL user and password, TLS CA,
/// client certificate and key.
pub fn kafka_secret_envs(uid: &str, kafka: &KafkaSource) -> Vec<SecretEnv> {
    let Some(KafkaSecurity { sasl, tls, .. }) = &kafka.security else {
        return Vec::new();
    };
    let mut envs = Vec::new();
    if let Some(sasl) = sasl {
        for (what, key, default) in [
            ("SASL_USERNAME", &sasl.username_key, "username"),
            ("SASL_PASSWORD", &sasl.password_key, "password"),
        ] {
            envs.push(SecretEnv {
                env: kafka_env_name(uid, what),
                secret: sasl.secret_name.clone(),
                key: key.clone().unwrap_or_else(|| default.to_string()),
                optional: false,
            });
        }
    }
    if let Some(tls) = tls {
        envs.push(SecretEnv {
            env: kafka_env_name(uid, "TLS_CA"),
            secret: tls.secret_name.clone(),
            key: tls.ca_key.clone().unwrap_or_else(|| "ca.crt".to_string()),
            optional: tls.ca_key.is_none(),
        });
        for (what, key) in [("TLS_CERT", &tls.cert_key), ("TLS_KEY", &tls.key_key)] {
            if let Some(key) = key {
                envs.push(SecretEnv {
                    env: kafka_env_name(uid, what),
                    secret: tls.secret_name.clone(),
                    key: key.clone(),
                    optional: false,
                });
            }
        }
    }
    envs
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::v1alpha1::{KafkaSasl, KafkaSaslMechanism, KafkaSecurityProtocol, KafkaTls};

    #[test]
    fn names_and_defaults() {
        assert_eq!(
            kafka_env_name("clicks-in.v2", "SASL_PASSWORD"),
            "STREAMJOB_KAFKA_CLICKS_IN_V2_SASL_PASSWORD"
        );
        let kafka = KafkaSource {
            security: Some(KafkaSecurity {
                protocol: KafkaSecurityProtocol::SaslSsl,
                sasl: Some(KafkaSasl {
                    mechanism: KafkaSaslMechanism::ScramSha512,
                    secret_name: "user".into(),
                    username_key: None,
                    password_key: Some("pw".into()),
                }),
                tls: Some(KafkaTls {
                    secret_name: "tls".into(),
                    ca_key: None,
                    cert_key: Some("tls.crt".into()),
                    key_key: Some("tls.key".into()),
                }),
            }),
            ..Default::default()
        };
        let envs = kafka_secret_envs("in", &kafka);
        let got: Vec<(&str, &str, &str, bool)> = envs
            .iter()
            .map(|e| {
                (
                    e.env.as_str(),
                    e.secret.as_str(),
                    e.key.as_str(),
                    e.optional,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "STREAMJOB_KAFKA_IN_SASL_USERNAME",
                    "user",
                    "username",
                    false
                ),
                ("STREAMJOB_KAFKA_IN_SASL_PASSWORD", "user", "pw", false),
                ("STREAMJOB_KAFKA_IN_TLS_CA", "tls", "ca.crt", true),
                ("STREAMJOB_KAFKA_IN_TLS_CERT", "tls", "tls.crt", false),
                ("STREAMJOB_KAFKA_IN_TLS_KEY", "tls", "tls.key", false),
            ]
        );
        assert!(kafka_secret_envs("in", &KafkaSource::default()).is_empty());
    }
}
