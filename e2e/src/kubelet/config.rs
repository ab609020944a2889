//! The process kubelet's configuration file (YAML or JSON).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{IoContext, Result};

/// Configuration of one process kubelet (one Node).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeletConfig {
    /// Name of the Node object.
    pub node_name: String,
    /// Folder for pod folders (`<ns>_<name>_<uid>/`): container logs, working dirs, kubeconfigs.
    pub run_dir: PathBuf,
    /// The apiserver URL written into pods' kubeconfigs.
    pub api_server: String,
    /// The CA file written into pods' kubeconfigs.
    pub ca_file: PathBuf,
    /// Image → binary mappings; the first match wins.
    #[serde(default)]
    pub images: Vec<ImageMapping>,
    /// First pod IP; later pods get the following addresses (127.x.y.z, all routed to `lo`).
    #[serde(default = "default_pod_ip_start")]
    pub pod_ip_start: Ipv4Addr,
    /// Node capacity (defaults: cpu 16, memory 64Gi, pods 110).
    #[serde(default)]
    pub capacity: BTreeMap<String, String>,
    /// Extra node labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Names of the kubelet's own environment variables passed on to every container
    /// (containers otherwise start with an empty environment plus PATH/HOME/HOSTNAME).
    #[serde(default)]
    pub inherit_env: Vec<String>,
    /// Seconds between node status heartbeats and Lease renewals.
    #[serde(default = "default_heartbeat")]
    pub heartbeat_seconds: u64,
}

fn default_pod_ip_start() -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 1, 1)
}

fn default_heartbeat() -> u64 {
    10
}

/// Maps container images to local binaries.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageMapping {
    /// `repo:tag` (exact), `repo` (any tag) or a prefix ending in `*` (`streamjob/runtime:*`).
    pub image: String,
    /// The binary that plays the image's entrypoint.
    pub binary: PathBuf,
    /// Extra environment for containers of this image (e.g. to tell two "versions" apart).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Names in `command[0]` that mean this binary (its file name always does).
    #[serde(default)]
    pub aliases: Vec<String>,
}

impl ImageMapping {
    /// Does this mapping apply to `image`?
    pub fn matches(&self, image: &str) -> bool {
        if let Some(prefix) = self.image.strip_suffix('*') {
            image.starts_with(prefix)
        } else {
            image == self.image
                || (image.starts_with(&self.image)
                    && image[self.image.len()..].starts_with(':')
                    && !self.image.contains(':'))
        }
    }
}

impl KubeletConfig {
    /// Reads a YAML (or JSON) file.
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).ctx(|| format!("read {}", path.display()))?;
        Ok(serde_yaml_ng::from_str(&text)?)
    }

    /// Writes the config as YAML.
    pub fn write(&self, path: &Path) -> Result<()> {
        let text = serde_yaml_ng::to_string(self)?;
        std::fs::write(path, text).ctx(|| format!("write {}", path.display()))
    }

    /// The mapping for an image, if any.
    pub fn image(&self, image: &str) -> Option<&ImageMapping> {
        self.images.iter().find(|m| m.matches(image))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(image: &str) -> ImageMapping {
        ImageMapping {
            image: image.into(),
            binary: "/bin/true".into(),
            env: BTreeMap::new(),
            aliases: vec![],
        }
    }

    #[test]
    fn image_patterns() {
        assert!(m("streamjob/runtime:*").matches("streamjob/runtime:1.0"));
        assert!(!m("streamjob/runtime:*").matches("streamjob/operator:1.0"));
        assert!(m("streamjob/runtime").matches("streamjob/runtime:2"));
        assert!(m("streamjob/runtime").matches("streamjob/runtime"));
        assert!(!m("streamjob/runtime").matches("streamjob/runtime-x:2"));
        assert!(m("streamjob/runtime:1").matches("streamjob/runtime:1"));
        assert!(!m("streamjob/runtime:1").matches("streamjob/runtime:12"));
    }
}
