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

/// The Flink test job's image (`flink/testjob/Dockerfile` FROM our Flink base image), tags
/// `<version>` and `<version>-r2` (the same job, another image).
pub const FLINK_TEST_JOB: &str = "streamjob/flink-testjob";

/// The flink-checker image (the Dockerfile's `flink-checker` target).
pub const FLINK_CHECKER: (&str, &str) = ("streamjob/flink-checker", "e2e");

/// Images the script builds that the node does not import: bases other images are built FROM
/// (their layers arrive with those images) and the Flink 1.20 images (the node tests run Flink
/// 2.3; 1.20 runs on the process kubelet). Each archive holds all of its image's layers, so every
/// import costs its full size.
const NOT_ON_THE_NODE: &[&str] = &[
    "streamjob/base-cc:",
    "streamjob/jre:",
    "streamjob/flink:",
    "streamjob/flink-testjob-v2:",
    ":1.20.0",
];

/// The index the build script writes.
pub fn index_path() -> PathBuf {
    crate::binaries::cache_dir()
        .join("images")
        .join("index.tsv")
}

/// The archive of every image of the index the node imports, in its order.
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
        .filter(|(name, _)| on_the_node(name))
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

fn on_the_node(name: &str) -> bool {
    !NOT_ON_THE_NODE.iter().any(|n| match n.strip_prefix(':') {
        // a tag, and the tags derived from it (`1.20.0-r2`)
        Some(tag) => name
            .rsplit_once(':')
            .is_some_and(|(_, t)| t == tag || t.starts_with(&format!("{tag}-"))),
        None => name.starts_with(n),
    })
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
    fn bases_and_flink_1_20_stay_off_the_node() {
        for name in [
            "streamjob/jre:17-debian12",
            "streamjob/flink:2.3.0",
            "streamjob/flink-testjob:1.20.0",
            "streamjob/flink-testjob:1.20.0-r2",
            "streamjob/flink-testjob-v2:2.3.0",
        ] {
            assert!(!on_the_node(name), "{name}");
        }
        for name in [
            "streamjob/flink-testjob:2.3.0",
            "streamjob/flink-testjob:2.3.0-r2",
            "streamjob/flink-checker:e2e",
            "streamjob/runtime:e2e",
        ] {
            assert!(on_the_node(name), "{name}");
        }
    }

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
