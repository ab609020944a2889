//! Volumes of a container, as far as a process can have them.
//!
//! A process cannot mount anything, so the process kubelet gives every container a folder that
//! stands for its root file system: a mount at `/opt/x` is the folder `$STREAMJOB_ROOT/opt/x`,
//! filled as the kubelet would fill the volume (configMap and secret keys as files, `items`
//! honoured; emptyDir an empty folder). Entrypoints that play an image's (the Flink stand-in)
//! read a path `P` the pod spec names as `$STREAMJOB_ROOT$P`. Other volume kinds are not
//! materialised (logged).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, KeyToPath, Pod, Volume};

use super::env::{ConfigError, config_map, secret, secret_data};

/// The variable naming the folder that stands for the container's root file system.
pub const ROOT_VAR: &str = "STREAMJOB_ROOT";

/// Fills the volumes `container` mounts under `root` (created afresh on every start, as a
/// kubelet projects a ConfigMap's current content).
pub async fn materialise(
    client: &kube::Client,
    pod: &Pod,
    container: &Container,
    root: &Path,
) -> Result<(), ConfigError> {
    let io = |what: &str, e: std::io::Error| ConfigError(format!("{what}: {e}"));
    if root.exists() {
        std::fs::remove_dir_all(root).map_err(|e| io("clear the container's root", e))?;
    }
    std::fs::create_dir_all(root).map_err(|e| io("create the container's root", e))?;
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let volumes: Vec<&Volume> = pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .collect();
    for mount in container.volume_mounts.iter().flatten() {
        let Some(volume) = volumes.iter().find(|v| v.name == mount.name) else {
            return Err(ConfigError(format!(
                "volumeMount {}: no volume of that name in the pod",
                mount.name
            )));
        };
        let dir = root.join(mount.mount_path.trim_start_matches('/'));
        let files: Option<BTreeMap<String, String>> = if let Some(cm) = &volume.config_map {
            match config_map(client, &ns, &cm.name).await? {
                Some(c) => Some(project(c.data.unwrap_or_default(), cm.items.as_deref())?),
                None if cm.optional == Some(true) => Some(BTreeMap::new()),
                None => {
                    return Err(ConfigError(format!(
                        "MountVolume.SetUp failed for volume {:?}: configmap {:?} not found",
                        volume.name, cm.name
                    )));
                }
            }
        } else if let Some(sv) = &volume.secret {
            let name = sv.secret_name.clone().unwrap_or_default();
            match secret(client, &ns, &name).await? {
                Some(s) => Some(project(secret_data(&s), sv.items.as_deref())?),
                None if sv.optional == Some(true) => Some(BTreeMap::new()),
                None => {
                    return Err(ConfigError(format!(
                        "MountVolume.SetUp failed for volume {:?}: secret {name:?} not found",
                        volume.name
                    )));
                }
            }
        } else if volume.empty_dir.is_some() {
            Some(BTreeMap::new())
        } else {
            tracing::warn!(volume = %volume.name, "the process kubelet does not materialise this volume kind");
            None
        };
        if let Some(files) = files {
            std::fs::create_dir_all(&dir).map_err(|e| io("create a mount folder", e))?;
            for (path, content) in files {
                let file: PathBuf = dir.join(&path);
                if let Some(parent) = file.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| io("create a folder", e))?;
                }
                std::fs::write(&file, content).map_err(|e| io("write a volume file", e))?;
            }
        }
    }
    Ok(())
}

/// The files of a volume: every key, or only `items` (each under its `path`).
fn project(
    data: BTreeMap<String, String>,
    items: Option<&[KeyToPath]>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let Some(items) = items else {
        return Ok(data);
    };
    items
        .iter()
        .map(|item| {
            if item.path.split('/').any(|p| p == "..") {
                return Err(ConfigError(format!(
                    "item path {:?} escapes the volume",
                    item.path
                )));
            }
            data.get(&item.key)
                .map(|v| (item.path.clone(), v.clone()))
                .ok_or_else(|| {
                    ConfigError(format!(
                        "couldn't find key {} in the volume's source",
                        item.key
                    ))
                })
        })
        .collect()
}
