//! Container environment: `env` (with `valueFrom`), `envFrom`, and `$(VAR)` expansion.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use kube::Api;

/// Why a container's configuration could not be built (reported as
/// `CreateContainerConfigError`).
#[derive(Debug)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Expands `$(NAME)` with values from `env`; `$$` is a literal `$`; unknown references stay as
/// they are (Kubernetes semantics).
pub fn expand(input: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(inner) = after.strip_prefix('(') {
            match inner.find(')') {
                Some(end) => {
                    let name = &inner[..end];
                    match env.get(name) {
                        Some(v) => out.push_str(v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &inner[end + 1..];
                }
                None => {
                    out.push('$');
                    rest = after;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

fn field_ref(pod: &Pod, pod_ip: &str, path: &str) -> Result<String, ConfigError> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let from_map = |map: &Option<BTreeMap<String, String>>, key: &str| {
        map.as_ref()
            .and_then(|m| m.get(key))
            .cloned()
            .unwrap_or_default()
    };
    let value = match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into()),
        "status.podIP" => pod_ip.to_string(),
        "status.podIPs" => pod_ip.to_string(),
        "status.hostIP" | "status.hostIPs" => "127.0.0.1".to_string(),
        p => {
            let key_of = |prefix: &str| {
                p.strip_prefix(prefix)
                    .and_then(|r| r.strip_suffix("']"))
                    .map(str::to_string)
            };
            if let Some(k) = key_of("metadata.labels['") {
                from_map(&meta.labels, &k)
            } else if let Some(k) = key_of("metadata.annotations['") {
                from_map(&meta.annotations, &k)
            } else {
                return Err(ConfigError(format!("unsupported fieldRef {p}")));
            }
        }
    };
    Ok(value)
}

pub(super) async fn secret(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Result<Option<Secret>, ConfigError> {
    Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| ConfigError(format!("get secret {name}: {e}")))
}

pub(super) async fn config_map(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Result<Option<ConfigMap>, ConfigError> {
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| ConfigError(format!("get configmap {name}: {e}")))
}

pub(super) fn secret_data(s: &Secret) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = s
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
        .collect();
    out.extend(s.string_data.clone().unwrap_or_default());
    out
}

/// Builds the environment of `container`: `base` first, then `envFrom`, then `env` in order.
pub async fn resolve(
    client: &kube::Client,
    pod: &Pod,
    container: &Container,
    pod_ip: &str,
    base: BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let mut env = base;
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        if let Some(r) = &from.config_map_ref {
            match config_map(client, &ns, &r.name).await? {
                Some(cm) => {
                    for (k, v) in cm.data.unwrap_or_default() {
                        env.insert(format!("{prefix}{k}"), v);
                    }
                }
                None if r.optional == Some(true) => {}
                None => return Err(ConfigError(format!("configmap \"{}\" not found", r.name))),
            }
        }
        if let Some(r) = &from.secret_ref {
            match secret(client, &ns, &r.name).await? {
                Some(s) => {
                    for (k, v) in secret_data(&s) {
                        env.insert(format!("{prefix}{k}"), v);
                    }
                }
                None if r.optional == Some(true) => {}
                None => return Err(ConfigError(format!("secret \"{}\" not found", r.name))),
            }
        }
    }
    for var in container.env.iter().flatten() {
        let value = if let Some(v) = &var.value {
            Some(expand(v, &env))
        } else if let Some(from) = &var.value_from {
            if let Some(f) = &from.field_ref {
                Some(field_ref(pod, pod_ip, &f.field_path)?)
            } else if let Some(k) = &from.secret_key_ref {
                let optional = k.optional == Some(true);
                match secret(client, &ns, &k.name).await? {
                    Some(s) => match secret_data(&s).get(&k.key) {
                        Some(v) => Some(v.clone()),
                        None if optional => None,
                        None => {
                            return Err(ConfigError(format!(
                                "couldn't find key {} in Secret {}/{}",
                                k.key, ns, k.name
                            )));
                        }
                    },
                    None if optional => None,
                    None => return Err(ConfigError(format!("secret \"{}\" not found", k.name))),
                }
            } else if let Some(k) = &from.config_map_key_ref {
                let optional = k.optional == Some(true);
                match config_map(client, &ns, &k.name).await? {
                    Some(cm) => match cm.data.unwrap_or_default().get(&k.key) {
                        Some(v) => Some(v.clone()),
                        None if optional => None,
                        None => {
                            return Err(ConfigError(format!(
                                "couldn't find key {} in ConfigMap {}/{}",
                                k.key, ns, k.name
                            )));
                        }
                    },
                    None if optional => None,
                    None => {
                        return Err(ConfigError(format!("configmap \"{}\" not found", k.name)));
                    }
                }
            } else {
                return Err(ConfigError(format!(
                    "env {}: only fieldRef, secretKeyRef and configMapKeyRef are supported",
                    var.name
                )));
            }
        } else {
            Some(String::new())
        };
        if let Some(v) = value {
            env.insert(var.name.clone(), v);
        }
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_references() {
        let env = BTreeMap::from([("A".to_string(), "x".to_string())]);
        assert_eq!(expand("$(A)-$(B)-$$(A)-$", &env), "x-$(B)-$(A)-$");
        assert_eq!(expand("plain", &env), "plain");
        assert_eq!(expand("$(A", &env), "$(A");
    }
}
