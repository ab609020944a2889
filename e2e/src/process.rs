//! Long-lived child processes (control plane, kubelet, MinIO) with clean shutdown.
//!
//! Every process is started in its own process group, so stopping it also stops whatever it
//! started (the process kubelet's pod processes). [`ManagedProcess`] stops its group on drop:
//! SIGTERM, wait up to a grace period, then SIGKILL. A [`Watchdog`] shell, started once per run
//! folder, does the same for every registered group when the test process goes away without
//! running destructors (a process-wide static, a panic with abort, a SIGKILL of the test).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::error::{Error, IoContext, Result};

/// A child process whose output goes to `<run dir>/<name>.log`.
#[derive(Debug)]
pub struct ManagedProcess {
    name: String,
    pid: u32,
    child: Mutex<Child>,
    log: PathBuf,
    grace: Duration,
}

impl ManagedProcess {
    /// Spawns `cmd` in a new process group, logging to `<log_dir>/<name>.log`.
    pub fn spawn(
        name: &str,
        mut cmd: Command,
        log_dir: &Path,
        watchdog: Option<&Watchdog>,
    ) -> Result<Self> {
        let log = log_dir.join(format!("{name}.log"));
        let out = File::create(&log).ctx(|| format!("create {}", log.display()))?;
        let err = out.try_clone().ctx(|| format!("clone {}", log.display()))?;
        use std::os::unix::process::CommandExt;
        cmd.stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        let child = cmd.spawn().ctx(|| format!("spawn {name}: {cmd:?}"))?;
        tracing::info!(name, pid = child.id(), log = %log.display(), "started");
        if let Some(w) = watchdog {
            w.register(child.id())?;
        }
        Ok(Self {
            name: name.to_string(),
            pid: child.id(),
            child: Mutex::new(child),
            log,
            grace: Duration::from_secs(20),
        })
    }

    /// Sets how long [`stop`](Self::stop) waits after SIGTERM before SIGKILL.
    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Changes how long [`stop`](Self::stop) waits after SIGTERM before SIGKILL.
    pub fn set_grace(&mut self, grace: Duration) {
        self.grace = grace;
    }

    /// The process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The process's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Fails if the process has exited.
    pub fn check_running(&self) -> Result<()> {
        let mut child = self
            .child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match child.try_wait() {
            Ok(Some(status)) => Err(Error::ProcessExited {
                name: self.name.clone(),
                status: status.to_string(),
                log: self.log.clone(),
            }),
            Ok(None) => Ok(()),
            Err(e) => Err(Error::Io {
                context: format!("wait for {}", self.name),
                source: e,
            }),
        }
    }

    /// SIGTERM to the process group, wait up to the grace period, then SIGKILL; reaps the child.
    pub fn stop(&mut self) {
        let pgid = pgid_of(self.pid);
        let child = self
            .child
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Ok(Some(_)) = child.try_wait() {
            // The leader is gone; make sure nothing it started lingers.
            let _ = killpg(pgid, Signal::SIGKILL);
            return;
        }
        let started = Instant::now();
        let _ = killpg(pgid, Signal::SIGTERM);
        let deadline = started + self.grace;
        while Instant::now() < deadline {
            match child.try_wait() {
                Ok(Some(status)) => {
                    // Members of the group that ignored SIGTERM must not survive their leader.
                    let _ = killpg(pgid, Signal::SIGKILL);
                    tracing::info!(name = %self.name, %status, elapsed = ?started.elapsed(), "stopped");
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                Err(_) => break,
            }
        }
        tracing::warn!(name = %self.name, grace = ?self.grace, "did not exit after SIGTERM; SIGKILL");
        let _ = killpg(pgid, Signal::SIGKILL);
        let _ = child.wait();
    }
}

impl Drop for ManagedProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

fn pgid_of(pid: u32) -> Pid {
    Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX))
}

/// A `sh` process that waits for EOF on its stdin (which only this process holds) and then
/// SIGTERMs, and 5 s later SIGKILLs, every process group listed in `<run dir>/pgids`.
#[derive(Debug)]
pub struct Watchdog {
    _stdin: ChildStdin,
    child: Child,
    pgids: PathBuf,
}

impl Watchdog {
    /// Starts the watchdog for a run folder.
    pub fn start(run_dir: &Path) -> Result<Self> {
        let pgids = run_dir.join("pgids");
        File::create(&pgids).ctx(|| format!("create {}", pgids.display()))?;
        let script = r#"cat >/dev/null
list=$(cat "$1" 2>/dev/null)
[ -z "$list" ] && exit 0
for g in $list; do kill -TERM "-$g" 2>/dev/null; done
i=0
while [ $i -lt 50 ]; do
  alive=0
  for g in $list; do kill -0 "-$g" 2>/dev/null && alive=1; done
  [ $alive = 0 ] && exit 0
  sleep 0.1; i=$((i+1))
done
for g in $list; do kill -KILL "-$g" 2>/dev/null; done
"#;
        use std::os::unix::process::CommandExt;
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("streamjob-e2e-watchdog")
            .arg(&pgids)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .ctx(|| "spawn watchdog shell".to_string())?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| Error::Other("watchdog has no stdin".into()))?;
        Ok(Self {
            _stdin: stdin,
            child,
            pgids,
        })
    }

    /// Adds a process group to kill when this process goes away.
    pub fn register(&self, pgid: u32) -> Result<()> {
        let mut f = OpenOptions::new()
            .append(true)
            .open(&self.pgids)
            .ctx(|| format!("open {}", self.pgids.display()))?;
        writeln!(f, "{pgid}").ctx(|| format!("write {}", self.pgids.display()))
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // Everything was stopped in order already; tell the shell to exit without killing.
        let _ = std::fs::write(&self.pgids, "");
        // Dropping `_stdin` after this body closes the pipe; reap the shell in the background.
        let _ = self.child.try_wait();
    }
}

/// A free TCP port on 127.0.0.1 (bind to port 0, read, release).
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").ctx(|| "bind 127.0.0.1:0".to_string())?;
    let port = l
        .local_addr()
        .ctx(|| "local_addr of 127.0.0.1:0".to_string())?
        .port();
    Ok(port)
}

/// `n` free loopback ports, all different from each other and from `taken`: the listeners are
/// held open until every port is picked (one [`free_port`] after another may hand out the same
/// port twice, and a broker refuses two listeners on one port).
pub fn free_ports(n: usize, taken: &[u16]) -> Result<Vec<u16>> {
    let mut held = Vec::new();
    let mut ports = Vec::new();
    while ports.len() < n {
        let l =
            std::net::TcpListener::bind("127.0.0.1:0").ctx(|| "bind 127.0.0.1:0".to_string())?;
        let port = l
            .local_addr()
            .ctx(|| "local_addr of 127.0.0.1:0".to_string())?
            .port();
        if !taken.contains(&port) {
            ports.push(port);
        }
        held.push(l);
    }
    Ok(ports)
}

/// Runs a command to completion, failing with its stderr when it exits non-zero.
pub fn run_checked(cmd: &mut Command) -> Result<std::process::Output> {
    let out = cmd.output().ctx(|| format!("run {cmd:?}"))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(Error::Command {
            command: format!("{cmd:?}"),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}
