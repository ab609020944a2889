//! Starts the cloud storage emulators the tests run against — fake-gcs-server (GCS) and Azurite
//! (Azure Blob Storage), both installed and pinned by `e2e/scripts/install.sh` — on free loopback
//! ports with their data in a temporary folder. Shared by the tests of several crates through
//! `#[path = "../../tools/emulators/launch.rs"] mod emulators;`.
//!
//! Dropping the handle kills the emulator and waits for it.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Azurite's account and its well-known key (published in Azurite's documentation; the
/// emulator accepts nothing else).
pub const AZURITE_ACCOUNT: &str = "devstoreaccount1";
pub const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// A running emulator.
pub struct Emulator {
    child: Child,
    /// `http://127.0.0.1:<port>` (fake-gcs-server), `http://127.0.0.1:<port>/devstoreaccount1`
    /// (Azurite: the account's blob endpoint).
    pub url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The path install.sh recorded for `var` (environment first, then its env file).
fn binary(var: &str) -> PathBuf {
    if let Ok(p) = std::env::var(var) {
        return p.into();
    }
    let cache = std::env::var("STREAMJOB_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/streamjob")
        });
    let env = std::fs::read_to_string(cache.join("e2e-env.sh")).unwrap_or_default();
    env.lines()
        .find_map(|l| {
            let v = l.strip_prefix(&format!("export {var}="))?;
            let p = PathBuf::from(v.trim_matches(|c| c == '\'' || c == '"'));
            p.exists().then_some(p)
        })
        .unwrap_or_else(|| {
            panic!("{var} is not set and not in $STREAMJOB_CACHE/e2e-env.sh: run `bash e2e/scripts/install.sh`")
        })
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    l.local_addr().expect("its address").port()
}

/// Waits until `port` accepts connections, failing if the process exits first.
fn wait_listening(name: &str, child: &mut Child, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{name} exited before it listened: {status}");
        }
        assert!(
            Instant::now() < deadline,
            "{name} did not listen on {port} within 60 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// fake-gcs-server over http with `buckets` created (it creates a bucket for every folder of
/// its `-data` directory before it listens).
pub fn fake_gcs(buckets: &[&str]) -> Emulator {
    let bin = binary("STREAMJOB_E2E_FAKE_GCS");
    let dir = tempfile::tempdir().expect("a temporary directory");
    for b in buckets {
        std::fs::create_dir_all(dir.path().join("seed").join(b)).expect("seed folder");
    }
    let port = free_port();
    let mut child = Command::new(&bin)
        .args([
            "-scheme",
            "http",
            "-host",
            "127.0.0.1",
            "-log-level",
            "error",
        ])
        .args(["-port", &port.to_string()])
        .args(["-public-host", &format!("127.0.0.1:{port}")])
        .args(["-backend", "filesystem"])
        .arg("-filesystem-root")
        .arg(dir.path().join("root"))
        .arg("-data")
        .arg(dir.path().join("seed"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
    wait_listening("fake-gcs-server", &mut child, port);
    Emulator {
        child,
        url: format!("http://127.0.0.1:{port}"),
        _dir: dir,
    }
}

/// Azurite's blob service with `containers` created (through the official SDK:
/// `tools/azurite/create-container.mjs`, installed next to Azurite).
pub fn azurite(containers: &[&str]) -> Emulator {
    let bin = binary("STREAMJOB_E2E_AZURITE");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let port = free_port();
    let mut child = Command::new(&bin)
        .args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
        .arg("--location")
        .arg(dir.path())
        .args(["--silent", "--skipApiVersionCheck", "--disableTelemetry"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
    wait_listening("azurite", &mut child, port);
    let url = format!("http://127.0.0.1:{port}/{AZURITE_ACCOUNT}");
    // built before the containers, so that a failure below still stops the emulator
    let emulator = Emulator {
        child,
        url,
        _dir: dir,
    };
    let url = &emulator.url;
    let connection = format!(
        "DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};BlobEndpoint={url};"
    );
    let script = bin
        .parent()
        .expect("azurite's folder")
        .join("pkg/create-container.mjs");
    for c in containers {
        let status = Command::new("node")
            .arg(&script)
            .arg(&connection)
            .arg(c)
            .status()
            .unwrap_or_else(|e| panic!("node {}: {e}", script.display()));
        assert!(status.success(), "creating container {c} failed: {status}");
    }
    emulator
}
