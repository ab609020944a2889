//! The images `e2e/scripts/build-images.sh` builds for the real node, as the tests name them.
//!
//! The script writes `<cache>/images/index.tsv`: one line per image, tab-separated
//! `name:tag`, archive path, size in bytes, content hash. Every archive listed is imported into
//! the node's containerd before the kubelet starts (no registry is reachable; pods use
//! `imagePullPolicy: IfNotPresent` or `Never`).

use std::path::PathBuf;

use crate::error::{Error, Result};

/// The runtime image (Dockerfile target `runtime`).
pub const RUNTIME: (&str, &str) = ("streamjob/runtime", "e2e");
/// The operator image (Dockerfile target `operator`).
pub const OPERATOR: (&str, &str) = ("streamjob/operator", "e2e");

/// The job template's image (`templates/streamjob-job/Dockerfile`), tags `v1`, `v2`,
/// `v2-crashing`, `v3` (see `e2e/tests/operator/user_images.rs` for what each changes) and
/// `v2-oom` (v2 with `JOB_TEMPLATE_ALLOCATE_AFTER_RECORDS=20000`: a memory spike once per pod).
pub const JOB_TEMPLATE: &str = "streamjob/job-template";

/// The e2e network probe (`e2e/node/probe.c`): connect, resolve, serve.
pub const PROBE: (&str, &str) = ("streamjob/e2e-probe", "e2e");

/// The index the build script writes.
pub fn index_path() -> PathBuf {
    crate::binaries::cache_dir()
        .join("images")
        .join("index.tsv")
}

/// Every image archive of the index, in its order.
pub fn archives() -> Result<Vec<PathBuf>> {
    let path = index_path();
    let text = std::fs::read_to_string(&path).map_err(|e| {
        Error::Other(format!(
            "{}: {e} (build the images first: bash e2e/scripts/build-images.sh)",
            path.display()
        ))
    })?;
    parse_index(&text)
        .into_iter()
        .map(|(name, archive)| {
            if archive.is_file() {
                Ok(archive)
            } else {
                Err(Error::Other(format!(
                    "image {name}: archive {} is missing (run e2e/scripts/build-images.sh)",
                    archive.display()
                )))
            }
        })
        .collect()
}

fn parse_index(text: &str) -> Vec<(String, PathBuf)> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let mut f = l.split('\t');
            Some((f.next()?.to_string(), PathBuf::from(f.next()?)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_lines_give_name_and_archive() {
        let got = parse_index("# c\nstreamjob/runtime:e2e\t/c/r.tar\t10\tabc\n\n");
        assert_eq!(
            got,
            vec![(
                "streamjob/runtime:e2e".to_string(),
                PathBuf::from("/c/r.tar")
            )]
        );
    }
}
