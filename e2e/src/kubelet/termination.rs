//! Termination messages, as the real kubelet builds them: the content of the container's
//! termination-message file (at most [`MAX_MESSAGE_BYTES`]), or with
//! `terminationMessagePolicy: FallbackToLogsOnError` the tail of the container log when the file
//! is empty and the container failed.
//!
//! Processes cannot get `/dev/termination-log` mounted, so every container start gets a fresh
//! file in the pod folder and the environment variable [`ENV_VAR`] naming it.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Environment variable with the path of the container's termination-message file.
pub const ENV_VAR: &str = "STREAMJOB_TERMINATION_MESSAGE_PATH";
/// The kubelet keeps at most this many bytes of a termination-message file.
pub const MAX_MESSAGE_BYTES: usize = 4096;
/// Lines of log tail used by `FallbackToLogsOnError`.
pub const FALLBACK_LINES: usize = 80;
/// Bytes of log tail used by `FallbackToLogsOnError`.
pub const FALLBACK_BYTES: usize = 2048;

/// The message kept from a termination-message file's content: its first
/// [`MAX_MESSAGE_BYTES`] bytes (invalid UTF-8 replaced).
pub fn message_from_file(content: &[u8]) -> String {
    let n = content.len().min(MAX_MESSAGE_BYTES);
    String::from_utf8_lossy(&content[..n]).into_owned()
}

/// The last `max_lines` lines of `log`, and of those at most the last `max_bytes` bytes.
pub fn log_tail(log: &[u8], max_lines: usize, max_bytes: usize) -> String {
    // A trailing newline ends the last line; it does not start another one.
    let body = log.strip_suffix(b"\n").unwrap_or(log);
    let mut start = body.len();
    let mut lines = 0;
    while start > 0 {
        if body[start - 1] == b'\n' {
            lines += 1;
            if lines == max_lines {
                break;
            }
        }
        start -= 1;
    }
    if max_lines == 0 {
        start = log.len();
    }
    let start = start.max(log.len().saturating_sub(max_bytes));
    String::from_utf8_lossy(&log[start..]).into_owned()
}

/// The termination message of a container that exited with `exit_code`: the file content, or
/// (`fallback_to_logs`, empty file, non-zero exit) the tail of the log `read_log` returns.
pub fn termination_message(
    file_content: &[u8],
    exit_code: i32,
    fallback_to_logs: bool,
    read_log: impl FnOnce() -> Vec<u8>,
) -> String {
    let msg = message_from_file(file_content);
    if msg.is_empty() && fallback_to_logs && exit_code != 0 {
        log_tail(&read_log(), FALLBACK_LINES, FALLBACK_BYTES)
    } else {
        msg
    }
}

/// Reads at most the first `max` bytes of a file (nothing if it is missing).
pub fn read_head(path: &Path, max: usize) -> Vec<u8> {
    let mut buf = Vec::new();
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.take(max as u64).read_to_end(&mut buf);
    }
    buf
}

/// Reads at most the last `max` bytes of a file (nothing if it is missing).
pub fn read_tail(path: &Path, max: u64) -> Vec<u8> {
    let mut buf = Vec::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if f.seek(SeekFrom::Start(len.saturating_sub(max))).is_ok() {
            let _ = f.read_to_end(&mut buf);
        }
    }
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_content_is_cut_at_4096_bytes() {
        assert_eq!(message_from_file(b""), "");
        assert_eq!(
            message_from_file(br#"{"savepoint":"s3://b/sp-1"}"#),
            r#"{"savepoint":"s3://b/sp-1"}"#
        );
        let big = vec![b'x'; 5000];
        assert_eq!(message_from_file(&big).len(), 4096);
    }

    #[test]
    fn tail_keeps_last_lines_and_bytes() {
        let log: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let t = log_tail(log.as_bytes(), 80, 100_000);
        assert!(t.starts_with("line 20\n"), "{t:?}");
        assert!(t.ends_with("line 99\n"));
        assert_eq!(t.lines().count(), 80);
        let t = log_tail(log.as_bytes(), 80, 16);
        assert_eq!(t, "line 98\nline 99\n");
        assert_eq!(log_tail(b"a\nb", 1, 100), "b");
        assert_eq!(log_tail(b"a\nb\n", 1, 100), "b\n");
        assert_eq!(log_tail(b"only", 80, 100), "only");
        assert_eq!(log_tail(b"", 80, 100), "");
    }

    #[test]
    fn fallback_only_for_failures_with_an_empty_file() {
        let log = || b"starting\nfatal: boom\n".to_vec();
        assert_eq!(
            termination_message(b"", 1, true, log),
            "starting\nfatal: boom\n"
        );
        assert_eq!(termination_message(b"", 0, true, log), "");
        assert_eq!(termination_message(b"", 1, false, log), "");
        assert_eq!(termination_message(b"own words", 1, true, log), "own words");
        let never = || -> Vec<u8> { panic!("log read although the file had a message") };
        assert_eq!(termination_message(b"ok", 2, true, never), "ok");
    }

    #[test]
    fn reads_heads_and_tails_of_files() {
        let dir = std::env::temp_dir().join(format!("tm-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let p = dir.join("f");
        std::fs::write(&p, b"0123456789").expect("write");
        assert_eq!(read_head(&p, 4), b"0123");
        assert_eq!(read_tail(&p, 3), b"789");
        assert_eq!(read_tail(&p, 30), b"0123456789");
        assert!(read_head(&dir.join("missing"), 4).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
