//! Names of the objects the operator makes for a StreamJob: every name derives from the job's
//! name (truncated to fit Kubernetes' limits) and a short hash of what makes it unique, so a
//! repeated decision names the same object and a create is idempotent.

/// The pod of a run of version `hash` (`nonce` tells runs of one version apart).
pub fn pod_name(job: &str, hash: &str, nonce: &str) -> String {
    format!("{}-{}", trunc(job, 45), short_hash(&[job, hash, nonce]))
}

pub fn plan_pod_name(job: &str, hash: &str, nonce: &str) -> String {
    format!(
        "{}-plan-{}",
        trunc(job, 40),
        short_hash(&[job, hash, nonce])
    )
}

pub fn dispose_pod_name(job: &str, paths: &[String]) -> String {
    let joined = paths.join("\n");
    format!("{}-dispose-{}", trunc(job, 37), short_hash(&[job, &joined]))
}

/// Name of worker `index` of a coordinator pod.
pub fn worker_name(coordinator: &str, index: u32) -> String {
    format!("{coordinator}-w{index}")
}

pub fn config_name(job: &str, hash: &str) -> String {
    format!("{}-manifest-{}", trunc(job, 200), hash)
}

pub fn token_secret_name(job: &str) -> String {
    format!("{}-control-token", trunc(job, 200))
}

/// Value of the `streamjob.io/job` label (label values are at most 63 characters).
pub fn job_label(job: &str) -> String {
    if job.len() <= 63 {
        job.to_string()
    } else {
        format!("{}-{}", trunc(job, 52), short_hash(&[job]))
    }
}

pub(crate) fn trunc(s: &str, n: usize) -> &str {
    let mut end = n.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].trim_end_matches(['-', '.'])
}

pub(crate) fn short_hash(parts: &[&str]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0u8]);
    }
    hex::encode(&h.finalize()[..5])
}
