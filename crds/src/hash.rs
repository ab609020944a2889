//! Spec hashes: which spec a deployment runs, and whether a change needs a redeploy.

use sha2::{Digest, Sha256};

use crate::Result;
use crate::v1alpha1::{JobState, StreamJobSpec};

/// Hash of everything in the spec that the running job depends on. Fields the operator handles
/// without touching the job (savepoint trigger nonce, periodic savepoints, retention, disposal,
/// readiness and savepoint timeouts, the desired run state, a Flink job's Ingress) are left out,
/// so changing them is not an upgrade.
pub fn deployment_hash(spec: &StreamJobSpec) -> Result<String> {
    let mut relevant = spec.clone();
    relevant.state = JobState::Running;
    if let Some(savepoints) = relevant.savepoints.as_mut() {
        savepoints.trigger_nonce = 0;
        savepoints.periodic = None;
        savepoints.history = Default::default();
        savepoints.dispose_on_delete = false;
    }
    relevant.upgrade.readiness_timeout = String::new();
    relevant.upgrade.savepoint_timeout = String::new();
    relevant.initial_savepoint = None;
    // how the UI is reached is not the job: an Ingress change never upgrades it
    if let Some(flink) = relevant.flink.as_mut() {
        flink.ingress = None;
    }
    let canonical = serde_json::to_vec(&serde_json::to_value(&relevant)?)?;
    let digest = Sha256::digest(&canonical);
    Ok(hex::encode(&digest[..8]))
}
