//! The images `e2e/scripts/build-images.sh` builds for the real node, as the tests name them.
//!
//! The script writes `<cache>/images/index.tsv`: one line per image, tab-separated
//! `name:tag`, archive path, size in bytes, content hash. The images the node runs are imported
//! into its containerd before the kubelet starts (no registry is reachable; pods use
//! `imagePullPolicy: IfNotPresent` or `Never`), from one bundle that holds each layer once.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::error::{Error, IoContext, Result};
use crate::process::run_checked;

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
/// (their layers arrive with those images).
const NOT_ON_THE_NODE: &[&str] = &[
    "streamjob/base-cc:",
    "streamjob/jre:",
    "streamjob/flink:",
    "streamjob/flink-testjob-v2:",
];

/// The Flink 1.20 images: on the node only for the full suite (node g on 1.20); the short one
/// runs Flink 2.3 there and 1.20 on the process kubelet, and skips their import (~460 MB).
const FLINK_1_20: &str = ":1.20.0";

/// The index the build script writes.
pub fn index_path() -> PathBuf {
    crate::binaries::cache_dir()
        .join("images")
        .join("index.tsv")
}

/// What the node imports: one docker-archive of every image of the index it runs ([`bundle`]).
pub fn archives(with_flink_1_20: bool) -> Result<Vec<PathBuf>> {
    let path = index_path();
    let text = std::fs::read_to_string(&path).map_err(|e| {
        Error::Other(format!(
            "{}: {e} (build the images first: bash e2e/scripts/build-images.sh)",
            path.display()
        ))
    })?;
    let images: Vec<Indexed> = parse_index(&text)
        .into_iter()
        .filter(|i| on_the_node(&i.name, with_flink_1_20))
        .collect();
    for i in &images {
        if !i.archive.is_file() {
            return Err(Error::Other(format!(
                "image {}: archive {} is missing (run e2e/scripts/build-images.sh)",
                i.name,
                i.archive.display()
            )));
        }
    }
    Ok(vec![bundle(&images)?])
}

/// One docker-archive of `images`, each layer once. The archive of an image holds every layer
/// of its bases too (five job-template images on one base, three Flink images on one JRE and
/// Flink: 2.3 GiB of archives for 1.1 GiB of layers), and `ctr images import` reads and hashes
/// every copy. In a docker-archive layers and configs are files named by their digest, so the
/// bundle is the union of the archives' files with their `manifest.json` entries joined (as
/// `docker save` of several images writes it). Built once per set of archives, named after their
/// content hashes; older bundles are removed.
fn bundle(images: &[Indexed]) -> Result<PathBuf> {
    let mut key = Sha256::new();
    for i in images {
        key.update(format!("{}\t{}\n", i.name, i.sha256));
    }
    let key: String = key.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let dir = index_path()
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let bundle = dir.join(format!("node-bundle-{key}.tar"));
    if bundle.is_file() {
        return Ok(bundle);
    }
    let files = dir.join(format!(".node-bundle-{key}"));
    let _ = std::fs::remove_dir_all(&files);
    std::fs::create_dir_all(&files).ctx(|| format!("create {}", files.display()))?;
    let mut manifest = Vec::new();
    for (n, i) in images.iter().enumerate() {
        // One read of each archive. An identical file of an earlier archive is the same layer or
        // config: kept, not rewritten. Its manifest.json comes out under a name of its own.
        let own = format!("manifest-{n}.json");
        run_checked(
            Command::new("tar")
                .arg("-xf")
                .arg(&i.archive)
                .arg("-C")
                .arg(&files)
                .args(["--skip-old-files", "--exclude=repositories"])
                .arg(format!("--transform=s|^manifest\\.json$|{own}|")),
        )?;
        let text = std::fs::read(files.join(&own))
            .ctx(|| format!("{}: manifest.json", i.archive.display()))?;
        let entries: Vec<serde_json::Value> = serde_json::from_slice(&text)
            .map_err(|e| Error::Other(format!("{}: manifest.json: {e}", i.archive.display())))?;
        manifest.extend(entries);
        std::fs::remove_file(files.join(&own)).ctx(|| format!("remove {own}"))?;
    }
    let text = serde_json::to_vec(&manifest)
        .map_err(|e| Error::Other(format!("bundle manifest.json: {e}")))?;
    std::fs::write(files.join("manifest.json"), text)
        .ctx(|| format!("write {}/manifest.json", files.display()))?;
    // named one by one: no `./` in front of the names importers match
    let mut names: Vec<String> = std::fs::read_dir(&files)
        .ctx(|| format!("list {}", files.display()))?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    names.sort();
    let partial = dir.join(format!(".node-bundle-{key}.tar"));
    run_checked(
        Command::new("tar")
            .arg("-cf")
            .arg(&partial)
            .arg("-C")
            .arg(&files)
            .args(&names),
    )?;
    std::fs::rename(&partial, &bundle).ctx(|| format!("rename to {}", bundle.display()))?;
    let _ = std::fs::remove_dir_all(&files);
    for old in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = old.file_name().to_string_lossy().into_owned();
        if name.starts_with("node-bundle-") && old.path() != bundle {
            let _ = std::fs::remove_file(old.path());
        }
    }
    tracing::info!(
        images = images.len(),
        bundle = %bundle.display(),
        "image bundle for the node written"
    );
    Ok(bundle)
}

fn on_the_node(name: &str, with_flink_1_20: bool) -> bool {
    let excluded = NOT_ON_THE_NODE
        .iter()
        .chain((!with_flink_1_20).then_some(&FLINK_1_20));
    !excluded.into_iter().any(|n| match n.strip_prefix(':') {
        // a tag, and the tags derived from it (`1.20.0-r2`)
        Some(tag) => name
            .rsplit_once(':')
            .is_some_and(|(_, t)| t == tag || t.starts_with(&format!("{tag}-"))),
        None => name.starts_with(n),
    })
}

/// One line of the index.
#[derive(Debug, PartialEq)]
struct Indexed {
    name: String,
    archive: PathBuf,
    /// `sha256:<hex>` of the archive ("" in an index without it).
    sha256: String,
}

fn parse_index(text: &str) -> Vec<Indexed> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let mut f = l.split('\t');
            Some(Indexed {
                name: f.next()?.to_string(),
                archive: PathBuf::from(f.next()?),
                sha256: f.nth(1).unwrap_or_default().to_string(),
            })
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
            assert!(!on_the_node(name, false), "{name}");
        }
        for name in [
            "streamjob/flink-testjob:2.3.0",
            "streamjob/flink-testjob:2.3.0-r2",
            "streamjob/flink-checker:e2e",
            "streamjob/runtime:e2e",
        ] {
            assert!(on_the_node(name, false), "{name}");
        }
        assert!(on_the_node("streamjob/flink-testjob:1.20.0-r2", true));
        assert!(!on_the_node("streamjob/flink:1.20.0", true));
    }

    #[test]
    fn index_lines_give_name_and_archive() {
        let got = parse_index("# c\nstreamjob/runtime:e2e\t/c/r.tar\t10\tabc\n\n");
        assert_eq!(
            got,
            vec![Indexed {
                name: "streamjob/runtime:e2e".to_string(),
                archive: PathBuf::from("/c/r.tar"),
                sha256: "abc".to_string(),
            }]
        );
    }
}
