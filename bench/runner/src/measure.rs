//! Wall time and peak RSS of one child process.
//!
//! The runner re-executes itself as a small wrapper (`streamjob-bench __measure --report FILE --
//! CMD...`) whose only child is the measured command. While the child runs, the wrapper polls
//! the kernel's high-water mark of the child's resident set (`VmHWM` in `/proc/<pid>/status`)
//! every 5 ms and keeps the last value read (VmHWM only grows, so only growth in the last few
//! milliseconds before exit can be missed); it writes that and the wall time to FILE.
//! `bench/flink/run.sh` `exec`s the JVM, so for Flink the pid is the JVM's (VmHWM restarts at the
//! exec). `getrusage(RUSAGE_CHILDREN)` would be exact, but the `nix` wrapper for it enables a
//! `libc` feature that forces a rebuild of the whole dependency tree, and the workspace forbids
//! `unsafe`.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Hidden sub-command name of the wrapper.
pub const MEASURE_COMMAND: &str = "__measure";

/// What the wrapper measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Measured {
    /// Exit code (None when killed by a signal).
    pub exit_code: Option<i32>,
    /// Terminating signal.
    pub signal: Option<i32>,
    /// Killed because it ran longer than the timeout.
    pub timed_out: bool,
    /// From spawn to exit.
    pub wall_seconds: f64,
    /// Peak resident set size of the child (KiB).
    pub peak_rss_kib: u64,
}

impl Measured {
    /// Exited with 0 in time.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }

    /// Peak RSS in MiB.
    pub fn peak_rss_mib(&self) -> f64 {
        self.peak_rss_kib as f64 / 1024.0
    }

    /// `exit code 2`, `signal 9`, `timed out after …`.
    pub fn describe_exit(&self) -> String {
        match (self.timed_out, self.exit_code, self.signal) {
            (true, _, _) => format!("killed after the timeout ({:.0} s)", self.wall_seconds),
            (false, Some(c), _) => format!("exit code {c}"),
            (false, None, Some(s)) => format!("killed by signal {s}"),
            (false, None, None) => "unknown exit status".to_string(),
        }
    }
}

fn signal_of(status: &ExitStatus) -> Option<i32> {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        status.signal()
    }
    #[cfg(not(unix))]
    {
        let _ = status;
        None
    }
}

/// Wrapper side: runs `program args` as this process's only child, with inherited stdio.
pub fn measure_child(program: &OsStr, args: &[OsString], timeout: Duration) -> Result<Measured> {
    let start = Instant::now();
    let mut child = Command::new(program)
        .args(args)
        .spawn()
        .map_err(|e| Error::io(program, e))?;
    let mut timed_out = false;
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak_rss_kib = 0u64;
    let status = loop {
        if let Some(kib) = vm_hwm_kib(&status_file) {
            peak_rss_kib = peak_rss_kib.max(kib);
        }
        if let Some(s) = child.try_wait().map_err(|e| Error::io(program, e))? {
            break s;
        }
        if start.elapsed() > timeout {
            timed_out = true;
            // the child we started, by its handle
            let _ = child.kill();
            break child.wait().map_err(|e| Error::io(program, e))?;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let wall_seconds = start.elapsed().as_secs_f64();
    Ok(Measured {
        exit_code: status.code(),
        signal: signal_of(&status),
        timed_out,
        wall_seconds,
        peak_rss_kib,
    })
}

/// `VmHWM` (KiB) from a `/proc/<pid>/status` file, if readable.
pub fn vm_hwm_kib(status_file: &str) -> Option<u64> {
    let text = std::fs::read_to_string(status_file).ok()?;
    let line = text.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// A command to measure.
#[derive(Clone, Debug)]
pub struct Job<'a> {
    pub program: &'a OsStr,
    pub args: Vec<OsString>,
    pub env: Vec<(&'a str, &'a str)>,
    pub stdout: &'a Path,
    pub stderr: &'a Path,
    pub timeout: Duration,
}

/// Runner side: runs `job` under the wrapper (`exe` is this binary) and returns the measurement.
pub fn run_measured(exe: &Path, report: &Path, job: &Job<'_>) -> Result<Measured> {
    let _ = std::fs::remove_file(report);
    let stdout = File::create(job.stdout).map_err(|e| Error::io(job.stdout, e))?;
    let stderr = File::create(job.stderr).map_err(|e| Error::io(job.stderr, e))?;
    let status = Command::new(exe)
        .arg(MEASURE_COMMAND)
        .arg("--report")
        .arg(report)
        .arg("--timeout-secs")
        .arg(job.timeout.as_secs().max(1).to_string())
        .arg("--")
        .arg(job.program)
        .args(&job.args)
        .envs(job.env.iter().copied())
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .status()
        .map_err(|e| Error::io(exe, e))?;
    let text = std::fs::read_to_string(report).map_err(|e| {
        Error::Other(format!(
            "the measuring wrapper ({status}) wrote no report {}: {e}; see {}",
            report.display(),
            job.stderr.display()
        ))
    })?;
    Ok(serde_json::from_str(&text)?)
}

/// Nearest-rank percentile (`p` in 0..=1) of `values`.
pub fn percentile(values: &[u64], p: f64) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_unstable();
    let rank = (p * v.len() as f64).ceil() as usize;
    v.get(rank.clamp(1, v.len()) - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        assert_eq!(percentile(&[], 0.99), None);
        assert_eq!(percentile(&[5], 0.99), Some(5));
        assert_eq!(percentile(&[30, 10, 20], 0.99), Some(30));
        let v: Vec<u64> = (1..=200).collect();
        assert_eq!(percentile(&v, 0.99), Some(198));
        assert_eq!(percentile(&v, 0.5), Some(100));
    }

    #[test]
    fn measures_a_child() {
        assert!(vm_hwm_kib("/proc/self/status").is_some_and(|k| k > 0));
        let m = measure_child(
            OsStr::new("sh"),
            &["-c".into(), "sleep 0.1; exit 3".into()],
            Duration::from_secs(10),
        )
        .expect("measured");
        assert_eq!(m.exit_code, Some(3));
        assert!(!m.success());
        assert!(m.peak_rss_kib > 0);
        let m = measure_child(
            OsStr::new("sleep"),
            &["5".into()],
            Duration::from_millis(100),
        )
        .expect("measured");
        assert!(m.timed_out);
        assert!(m.wall_seconds < 4.0);
    }
}
