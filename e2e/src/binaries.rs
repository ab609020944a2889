//! Locating the binaries built by `e2e/scripts/install.sh`.
//!
//! Each path comes from an environment variable (`STREAMJOB_E2E_ETCD`, ...) if set, else from the
//! env file `${STREAMJOB_CACHE:-$HOME/.cache/streamjob}/e2e-env.sh` that install.sh writes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Paths of the external binaries the harness runs.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub etcd: PathBuf,
    pub kube_apiserver: PathBuf,
    pub kube_controller_manager: PathBuf,
    pub kube_scheduler: PathBuf,
    pub kubectl: PathBuf,
    pub helm: PathBuf,
    pub minio: PathBuf,
}

/// The cache folder install.sh uses.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("STREAMJOB_CACHE") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    home.join(".cache").join("streamjob")
}

/// Path of the env file install.sh writes.
pub fn env_file() -> PathBuf {
    cache_dir().join("e2e-env.sh")
}

/// Parses `export NAME='value'` / `export NAME=value` lines.
fn parse_env_file(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("export "))
        .filter_map(|assignment| assignment.split_once('='))
        .map(|(k, v)| {
            let v = v.trim();
            let v = v
                .strip_prefix('\'')
                .and_then(|v| v.strip_suffix('\''))
                .or_else(|| v.strip_prefix('"').and_then(|v| v.strip_suffix('"')))
                .unwrap_or(v);
            (k.trim().to_string(), v.to_string())
        })
        .collect()
}

/// The value of one of install.sh's variables: from the environment, else from its env file.
pub fn lookup(var: &str) -> Result<String> {
    if let Ok(v) = std::env::var(var) {
        return Ok(v);
    }
    let file = env_file();
    let from_file = std::fs::read_to_string(&file)
        .map(|t| parse_env_file(&t))
        .unwrap_or_default();
    from_file
        .get(var)
        .cloned()
        .ok_or_else(|| Error::MissingBinary {
            name: var.to_string(),
            detail: format!(
                "neither ${var} nor {} defines it (run e2e/scripts/install.sh)",
                file.display()
            ),
        })
}

impl Binaries {
    /// Finds every binary, failing with a message that says to run install.sh when one is missing.
    pub fn locate() -> Result<Self> {
        let file = env_file();
        let from_file = std::fs::read_to_string(&file)
            .map(|t| parse_env_file(&t))
            .unwrap_or_default();
        let get = |var: &str, name: &str| -> Result<PathBuf> {
            let value = std::env::var(var)
                .ok()
                .or_else(|| from_file.get(var).cloned())
                .ok_or_else(|| Error::MissingBinary {
                    name: name.to_string(),
                    detail: format!("neither ${var} nor {} defines it", file.display()),
                })?;
            let path = PathBuf::from(value);
            check_executable(name, &path)?;
            Ok(path)
        };
        Ok(Self {
            etcd: get("STREAMJOB_E2E_ETCD", "etcd")?,
            kube_apiserver: get("STREAMJOB_E2E_KUBE_APISERVER", "kube-apiserver")?,
            kube_controller_manager: get(
                "STREAMJOB_E2E_KUBE_CONTROLLER_MANAGER",
                "kube-controller-manager",
            )?,
            kube_scheduler: get("STREAMJOB_E2E_KUBE_SCHEDULER", "kube-scheduler")?,
            kubectl: get("STREAMJOB_E2E_KUBECTL", "kubectl")?,
            helm: get("STREAMJOB_E2E_HELM", "helm")?,
            minio: get("STREAMJOB_E2E_MINIO", "minio")?,
        })
    }
}

/// Fails with [`Error::MissingBinary`] unless `path` is an existing file.
pub fn check_executable(name: &str, path: &Path) -> Result<()> {
    if path.is_file() {
        Ok(())
    } else {
        Err(Error::MissingBinary {
            name: name.to_string(),
            detail: format!("{} does not exist", path.display()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_env_file() {
        let m = parse_env_file("# c\nexport A='/x/y'\nexport B=\"z\"\nexport C=w\nnoise\n");
        assert_eq!(m.get("A").map(String::as_str), Some("/x/y"));
        assert_eq!(m.get("B").map(String::as_str), Some("z"));
        assert_eq!(m.get("C").map(String::as_str), Some("w"));
        assert_eq!(m.len(), 3);
    }
}
