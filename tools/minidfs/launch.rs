//! Starts the project's MiniDFS (`tools/minidfs/minidfs.sh`: Hadoop's MiniDFSCluster from Maven
//! Central, loopback only) for a test; shared by the tests of several crates through
//! `#[path = "../../tools/minidfs/launch.rs"] mod minidfs;`.
//!
//! The JVM stops when its stdin closes: a test that dies leaves nothing running. Dropping the
//! handle kills it and waits for it.

use std::io::BufRead;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A running MiniDFS cluster.
pub struct MiniDfs {
    child: Child,
    _stdin: Option<ChildStdin>,
    /// `hdfs://127.0.0.1:<port>`
    pub url: String,
    _dir: tempfile::TempDir,
}

impl Drop for MiniDfs {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a cluster and waits (up to 300 s: the first run builds the launcher with Maven) until
/// it accepts writes. Panics with the reason when it cannot.
pub fn start() -> MiniDfs {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/minidfs/minidfs.sh");
    let dir = tempfile::tempdir().expect("a temporary directory for MiniDFS");
    let mut child = Command::new("bash")
        .arg(&script)
        .arg(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the HDFS tests need bash, Java and Maven (tools/minidfs/minidfs.sh)");
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().expect("piped stdout");
    let (ready, url) = mpsc::channel();
    // the script's stdout carries only the READY line; keep draining it so the JVM never blocks
    std::thread::spawn(move || {
        let mut sent = false;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if let (false, Some(url)) = (sent, line.strip_prefix("MINIDFS_READY ")) {
                sent = ready.send(url.to_string()).is_ok();
            }
        }
    });
    let url = match url.recv_timeout(Duration::from_secs(300)) {
        Ok(url) => url,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            let _ = child.kill();
            panic!("MiniDFS did not start within 300 s (see its stderr above)")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            panic!("MiniDFS exited before it was ready (see its stderr above)")
        }
    };
    MiniDfs {
        child,
        _stdin: stdin,
        url,
        _dir: dir,
    }
}
