//! Issue #5: the exactly-once file sink under SIGKILL, with the real `streamjob-runtime` process
//! against MinIO, the GCS emulator (fake-gcs-server), Azurite and HDFS (MiniDFS) (no
//! Kubernetes: only the store is started).
//!
//! For JSON lines, CSV+gzip, Parquet (zstd) and JSON lines with compaction (16 KiB files merged
//! at every checkpoint) a bounded, paced, deterministic generator writes
//! into a file sink on `<scheme>://sinkcrash/out/<format>` with checkpoints in
//! `<scheme>://sinkcrash/ck/<format>` every 400 ms (on the same store). Row formats roll at a few MiB, so their part files are multipart uploads with
//! 5 MiB parts uploaded *and* tails carried in checkpoint state. The job is run with
//! `run MANIFEST --resume` and SIGKILLed ten times per format at different points (after a
//! checkpoint's commit; mid-interval; once a multipart upload is open and a checkpoint recorded
//! its parts and tail, mid-interval while more parts upload; delays seeded), each attempt
//! resuming the previous one's uploads and committing its pending files, then run to the end
//! (exit 0). Then:
//!
//! - the multiset of record ids in *finished* objects (no hidden or `_` path component) is
//!   exactly `0..count`, each once, and every record's key and value match the generator;
//! - no upload marker is left, no upload the sink recorded (in a marker) is still open, and no
//!   upload is open at any part name the job used or could have used next (recorded or not:
//!   the restore aborts orphans it finds by listing).
//!
//! Kills *during* a commit (on a completion line, during the restore's commits) are on for
//! Parquet, whose part files (one per checkpoint) stay below one 5 MiB part: the sink writes such
//! a file whole as a hidden staging object and commits it with a server-side copy, which a kill
//! cannot leave half done. For the row formats, whose files are multipart uploads, they are off
//! by default (`STREAMJOB_SINK_CRASH_KILL_IN_COMMIT=1` turns them on): MinIO (build 2026-02-12)
//! does not complete an upload atomically when the client goes away mid-request. It deletes the
//! parts' `part.N.meta` before it moves the data (`cleanupMultipartPath`, then `renameData` under
//! the request's context), leaving an upload that answers every later completion with
//! `InvalidPart`. The restored checkpoint's pending file can then never be committed and the job
//! fails naming the file (a `DataLoss` error). AWS S3 completes server-side regardless of the
//! client. Seen in about one run in three with those kills on.
//!
//! On GCS and Azure the commit is atomic on the server whatever the client does (compose, Put
//! Block List), so kills during commits are on for every format. Azure's uncommitted blocks
//! cannot be listed through `object_store`: there "no upload left open" is not checked (Azure
//! drops them after 7 days; nothing is visible meanwhile).
//!
//! Also here: the AWS chain's web-identity flow through the runtime against MinIO's STS
//! (`web_identity_credentials_from_an_sts_serve_checkpoints_and_the_sink`).
//!
//! Needs MinIO, fake-gcs-server and Azurite from `bash e2e/scripts/install.sh`, Java and Maven
//! for MiniDFS (`tools/minidfs/`) and the runtime binary next to this test's
//! target directory: `cargo build -p streamjob-runtime --bin streamjob-runtime` (or set
//! `STREAMJOB_RUNTIME_BIN`). `STREAMJOB_SINK_CRASH_SEED` changes the kill delays.

#![allow(clippy::unwrap_used)] // test code

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use std::sync::Arc;

use streamjob_e2e::binaries::Binaries;
use streamjob_e2e::store::{Minio, MinioOptions, S3Endpoint, S3Server};
use streamjob_storage::Store;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

const BUCKET: &str = "sinkcrash";
const SEED: u64 = 7;
const KEYS: u64 = 13;
const PARALLELISM: u32 = 2;
const INTERVAL_MS: u64 = 400;
/// Longest wait for any one log line (a checkpoint, the restore) before the test fails.
const LINE_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest the final, uninterrupted run may take.
const FINAL_TIMEOUT: Duration = Duration::from_secs(180);
const MIN_KILLS: usize = 7;

// ---------------------------------------------------------------------------------------------
// The generator's records (same definition as runtime/src/operators/generator.rs)
// ---------------------------------------------------------------------------------------------

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `(key, value)` of record `id`.
fn expected_record(id: u64) -> (String, i64) {
    let h = mix(SEED ^ mix(id));
    (format!("key-{}", h % KEYS), (mix(h) % 1000) as i64)
}

// ---------------------------------------------------------------------------------------------
// Formats
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fmt {
    Json,
    CsvGzip,
    Parquet,
}

struct Case {
    fmt: Fmt,
    name: &'static str,
    format_yaml: &'static str,
    /// Part file suffix (the format's default).
    suffix: &'static str,
    count: u64,
    rate: u64,
    max_part_size: &'static str,
    /// A `project` step adding an incompressible `pad` column (so gzip files pass 5 MiB).
    pad: bool,
    /// `fileSink.compaction.targetSize`.
    compaction: Option<&'static str>,
}

fn cases() -> Vec<Case> {
    vec![
        // ~72 B per record: 14.4 MB per subtask, files of 8 MiB (a 5 MiB part, then tails)
        Case {
            fmt: Fmt::Json,
            name: "json",
            format_yaml: "{jsonLines: {}}",
            suffix: ".json",
            count: 400_000,
            rate: 30_000,
            max_part_size: "8MiB",
            pad: false,
            compaction: None,
        },
        // ~35 B per record gzipped with the pad column: ~8.7 MB per subtask, files of 7 MiB
        Case {
            fmt: Fmt::CsvGzip,
            name: "csv-gzip",
            format_yaml: "{csv: {compression: gzip}}",
            suffix: ".csv.gz",
            count: 500_000,
            rate: 35_000,
            max_part_size: "7MiB",
            pad: true,
            compaction: None,
        },
        // bulk: rolls at every checkpoint
        Case {
            fmt: Fmt::Parquet,
            name: "parquet",
            format_yaml: "{parquet: {compression: zstd}}",
            suffix: ".parquet",
            count: 300_000,
            rate: 20_000,
            max_part_size: "64MiB",
            pad: false,
            compaction: None,
        },
        // compaction: 16 KiB files (staged objects), merged per checkpoint into one per bucket
        Case {
            fmt: Fmt::Json,
            name: "json-compacted",
            format_yaml: "{jsonLines: {}}",
            suffix: ".json",
            count: 200_000,
            rate: 20_000,
            max_part_size: "16KiB",
            pad: false,
            compaction: Some("4MiB"),
        },
    ]
}

// ---------------------------------------------------------------------------------------------
// The stores
// ---------------------------------------------------------------------------------------------

#[path = "../../tools/emulators/launch.rs"]
mod emulators;
#[path = "../../tools/minidfs/launch.rs"]
mod minidfs;

/// The store a case runs against (checkpoints, savepoints and output alike).
#[derive(Clone)]
enum Target {
    S3(S3Endpoint),
    Gcs {
        url: String,
    },
    Azure {
        url: String,
    },
    /// A name node, `hdfs://127.0.0.1:<port>`.
    Hdfs {
        url: String,
    },
}

impl Target {
    fn name(&self) -> &'static str {
        match self {
            Target::S3(_) => "minio",
            Target::Gcs { .. } => "gcs",
            Target::Azure { .. } => "azure",
            Target::Hdfs { .. } => "hdfs",
        }
    }

    /// How much slower than the case's rate the generator runs: MiniDFS checkpoints take about
    /// 1.5 s, so the job must last longer to be killed as often.
    fn slowdown(&self) -> u64 {
        match self {
            Target::Hdfs { .. } => 3,
            _ => 1,
        }
    }

    /// The bucket (container, directory) as a URL.
    fn root(&self) -> String {
        let scheme = match self {
            Target::S3(_) => "s3",
            Target::Gcs { .. } => "gs",
            Target::Azure { .. } => "az",
            Target::Hdfs { url } => return format!("{url}/{BUCKET}"),
        };
        format!("{scheme}://{BUCKET}")
    }

    /// The manifest's `spec.storage` entry for the store.
    fn storage_yaml(&self) -> String {
        match self {
            Target::S3(s3) => format!(
                "s3: {{endpoint: \"{}\", region: {}, allowHttp: true}}",
                s3.url, s3.region
            ),
            Target::Gcs { url } => format!("gcs: {{endpoint: \"{url}\", anonymous: true}}"),
            Target::Azure { url } => format!(
                "azure: {{account: {}, endpoint: \"{url}\", allowHttp: true}}",
                emulators::AZURITE_ACCOUNT
            ),
            Target::Hdfs { url } => format!("hdfs: {{nameNode: \"{url}\"}}"),
        }
    }

    /// The runtime's credentials, as the operator would put them in its environment.
    fn credentials(&self, cmd: &mut tokio::process::Command) {
        match self {
            Target::S3(s3) => {
                cmd.env("AWS_ACCESS_KEY_ID", &s3.access_key)
                    .env("AWS_SECRET_ACCESS_KEY", &s3.secret_key)
                    .env("AWS_REGION", &s3.region);
            }
            Target::Gcs { .. } | Target::Hdfs { .. } => {}
            Target::Azure { .. } => {
                cmd.env("AZURE_STORAGE_ACCOUNT_KEY", emulators::AZURITE_KEY);
            }
        }
    }

    /// The bucket through the storage layer, with the test's credentials.
    fn store(&self) -> Arc<dyn Store> {
        use streamjob_storage::store::CloudStore;
        match self {
            Target::S3(s3) => {
                let client = object_store::aws::AmazonS3Builder::new()
                    .with_endpoint(&s3.url)
                    .with_client_options(s3.client_options().unwrap())
                    .with_region(&s3.region)
                    .with_bucket_name(BUCKET)
                    .with_access_key_id(&s3.access_key)
                    .with_secret_access_key(&s3.secret_key)
                    .build()
                    .unwrap();
                Arc::new(CloudStore::s3(client, BUCKET, ""))
            }
            Target::Gcs { .. } => {
                let spec: streamjob_crds::v1alpha1::StorageSpec =
                    serde_yaml_ng::from_str(&format!("{{{}}}", self.storage_yaml())).unwrap();
                streamjob_storage::store::open_store(&self.root(), Some(&spec)).unwrap()
            }
            Target::Azure { url } => {
                let client = object_store::azure::MicrosoftAzureBuilder::new()
                    .with_account(emulators::AZURITE_ACCOUNT)
                    .with_access_key(emulators::AZURITE_KEY)
                    .with_endpoint(url.clone())
                    .with_allow_http(true)
                    .with_container_name(BUCKET)
                    .build()
                    .unwrap();
                Arc::new(CloudStore::azure(client, BUCKET, ""))
            }
            Target::Hdfs { .. } => {
                streamjob_storage::store::open_store(&self.root(), None).unwrap()
            }
        }
    }

    /// Every object under `prefix`, sorted by key.
    async fn list(&self, prefix: &str) -> Vec<streamjob_storage::store::ObjectInfo> {
        self.store().list(prefix).await.unwrap()
    }

    /// Whether upload `id` of `key` is still open (S3: ListParts; GCS: its part objects are
    /// there; Azure: uncommitted blocks cannot be listed, reported closed; HDFS has temporary
    /// files instead, checked with the staging objects).
    async fn upload_open(&self, key: &str, id: &str) -> bool {
        match self {
            Target::S3(s3) => s3.upload_open(BUCKET, key, id).await.unwrap(),
            Target::Gcs { .. } => self
                .store()
                .list_multipart_uploads(key)
                .await
                .unwrap()
                .iter()
                .any(|u| u.key == key && u.upload_id == id),
            Target::Azure { .. } | Target::Hdfs { .. } => false,
        }
    }

    /// Keys of the uploads open at exactly `key`.
    async fn open_at(&self, key: &str) -> Vec<String> {
        let found: Vec<String> = match self {
            Target::S3(s3) => s3
                .list_multipart_uploads(BUCKET, key)
                .await
                .unwrap()
                .into_iter()
                .map(|u| u.key)
                .collect(),
            Target::Gcs { .. } => self
                .store()
                .list_multipart_uploads(key)
                .await
                .unwrap()
                .into_iter()
                .map(|u| u.key)
                .collect(),
            Target::Azure { .. } | Target::Hdfs { .. } => Vec::new(),
        };
        found.into_iter().filter(|k| k == key).collect()
    }
}

/// 40 hex digits derived from the id: gzip cannot shrink them much.
fn pad_expr() -> String {
    let parts: Vec<String> = [
        2_654_435_761u64,
        2_246_822_519,
        3_266_489_917,
        668_265_263,
        374_761_393,
    ]
    .iter()
    .map(|m| format!("to_hex((CAST(id AS BIGINT) * {m}) % 4294967291)"))
    .collect();
    format!("concat({})", parts.join(", "))
}

/// The job of `case` on `target`; `retry_budget`: `storage.retryBudget`.
fn manifest(case: &Case, target: &Target, retry_budget: Option<&str>) -> String {
    let budget = retry_budget.map_or(String::new(), |b| format!("\n    retryBudget: {b}"));
    let pad = if case.pad {
        format!(
            "    - uid: pad\n      project:\n        - {{name: id, expr: id}}\n        - {{name: key, expr: key}}\n        - {{name: value, expr: value}}\n        - {{name: ts, expr: ts}}\n        - {{name: pad, expr: \"{}\"}}\n",
            pad_expr()
        )
    } else {
        String::new()
    };
    format!(
        r#"apiVersion: streamjob.io/v1alpha1
kind: StreamJob
metadata:
  name: sink-crash-{name}
spec:
  image: streamjob/runtime:test
  parallelism: {PARALLELISM}
  maxParallelism: 128
  checkpoints: {{dir: "{root}/ck/{name}", interval: {INTERVAL_MS}ms, retained: 2}}
  savepoints: {{dir: "{root}/sp/{name}"}}
  storage:
    {storage}{budget}
  pipeline:
    - uid: gen
      source:
        generator: {{count: {count}, keys: {KEYS}, seed: {SEED}, ratePerSecond: {rate}}}
{pad}    - uid: out
      fileSink:
        path: "{root}/out/{name}"
        format: {format}
        bucketAssigner: {{basePath: {{}}}}
        rollingPolicy:
          default: {{maxPartSize: {max}, rolloverInterval: 30m, inactivityInterval: 30m, bucketCheckInterval: 1s}}
{compaction}"#,
        name = case.name,
        root = target.root(),
        storage = target.storage_yaml(),
        count = case.count,
        rate = case.rate / target.slowdown(),
        format = case.format_yaml,
        max = case.max_part_size,
        compaction = case.compaction.map_or(String::new(), |c| format!(
            "        compaction: {{targetSize: {c}}}\n"
        )),
    )
}

/// A finished data file: no path component is hidden (`.x`) or special (`_SUCCESS`).
fn is_finished(key: &str) -> bool {
    key.split('/')
        .all(|c| !c.starts_with('.') && !c.starts_with('_'))
}

/// `(id, key, value)` of every record of a finished file.
fn decode(fmt: Fmt, key: &str, data: bytes::Bytes) -> Vec<(u64, String, i64)> {
    match fmt {
        Fmt::Json => std::str::from_utf8(&data)
            .unwrap_or_else(|e| panic!("{key}: not UTF-8: {e}"))
            .lines()
            .map(|l| {
                let v: serde_json::Value =
                    serde_json::from_str(l).unwrap_or_else(|e| panic!("{key}: {e}: {l:?}"));
                (
                    v["id"].as_u64().unwrap(),
                    v["key"].as_str().unwrap().to_string(),
                    v["value"].as_i64().unwrap(),
                )
            })
            .collect(),
        Fmt::CsvGzip => {
            let mut text = String::new();
            flate2::read::MultiGzDecoder::new(&data[..])
                .read_to_string(&mut text)
                .unwrap_or_else(|e| panic!("{key}: gzip: {e}"));
            let mut lines = text.lines();
            assert_eq!(
                lines.next(),
                Some("id,key,value,ts,pad"),
                "{key}: header line"
            );
            lines
                .map(|l| {
                    let f: Vec<&str> = l.split(',').collect();
                    assert_eq!(f.len(), 5, "{key}: bad line {l:?}");
                    (
                        f[0].parse().unwrap(),
                        f[1].to_string(),
                        f[2].parse().unwrap(),
                    )
                })
                .collect()
        }
        Fmt::Parquet => {
            use arrow::array::AsArray;
            use arrow::datatypes::{DataType, Int64Type, UInt64Type};
            let reader =
                parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(data)
                    .unwrap_or_else(|e| panic!("{key}: parquet: {e}"))
                    .build()
                    .unwrap();
            let mut out = Vec::new();
            for b in reader {
                let b = b.unwrap();
                let col = |n: &str, t: &DataType| {
                    arrow::compute::cast(b.column_by_name(n).unwrap(), t).unwrap()
                };
                let ids = col("id", &DataType::UInt64);
                let keys = col("key", &DataType::Utf8);
                let values = col("value", &DataType::Int64);
                let (ids, keys, values) = (
                    ids.as_primitive::<UInt64Type>(),
                    keys.as_string::<i32>(),
                    values.as_primitive::<Int64Type>(),
                );
                for i in 0..b.num_rows() {
                    out.push((ids.value(i), keys.value(i).to_string(), values.value(i)));
                }
            }
            out
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The runtime process
// ---------------------------------------------------------------------------------------------

fn runtime_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("STREAMJOB_RUNTIME_BIN") {
        return PathBuf::from(p);
    }
    // like fixtures::workspace_binary: next to the test's own target profile directory
    // (<target>/debug/deps/sink_crash-* → <target>/debug/streamjob-runtime)
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap();
    let path = profile_dir.join("streamjob-runtime");
    assert!(
        path.is_file(),
        "{} does not exist: build it first with `cargo build -p streamjob-runtime --bin \
         streamjob-runtime` (same CARGO_TARGET_DIR), or set STREAMJOB_RUNTIME_BIN",
        path.display()
    );
    path
}

/// One `streamjob-runtime run MANIFEST --resume` process; its stderr lines are logged to a file
/// and handed to the test.
struct Attempt {
    child: tokio::process::Child,
    lines: mpsc::UnboundedReceiver<String>,
    started: Instant,
}

impl Attempt {
    fn start(bin: &Path, manifest: &Path, target: &Target, log: &Path) -> Self {
        let mut cmd = tokio::process::Command::new(bin);
        target.credentials(&mut cmd);
        cmd.arg("run")
            .arg(manifest)
            .arg("--resume")
            .env("RUST_LOG", "info")
            .env_remove("AWS_ENDPOINT")
            .env_remove("AWS_ENDPOINT_URL")
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_SESSION_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        let log = log.to_path_buf();
        tokio::spawn(async move {
            let mut file = tokio::fs::File::create(&log).await.unwrap();
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = file.write_all(line.as_bytes()).await;
                let _ = file.write_all(b"\n").await;
                let _ = tx.send(line);
            }
            let _ = file.flush().await;
        });
        Self {
            child,
            lines: rx,
            started: Instant::now(),
        }
    }

    /// The next stderr line; `None` once the process closed stderr (it exited).
    async fn next_line(&mut self, what: &str) -> Option<String> {
        match tokio::time::timeout(LINE_TIMEOUT, self.lines.recv()).await {
            Ok(line) => line,
            Err(_) => panic!("no log line within {LINE_TIMEOUT:?} while waiting for {what}"),
        }
    }

    /// Waits for a line containing `needle`; false if the process ended first.
    async fn wait_line(&mut self, needle: &str) -> bool {
        while let Some(line) = self.next_line(needle).await {
            if line.contains(needle) {
                return true;
            }
        }
        false
    }

    /// Waits until checkpoint `at_least` (or a later one) completed; false if the process ended
    /// first. `latest` follows every completion line seen.
    async fn wait_checkpoint(&mut self, at_least: u64, latest: &mut u64) -> bool {
        let what = format!("checkpoint {at_least}");
        while let Some(line) = self.next_line(&what).await {
            if let Some(id) = completed_checkpoint(&line) {
                *latest = (*latest).max(id);
                if id >= at_least {
                    return true;
                }
            }
        }
        false
    }

    /// Waits until the sink recorded a multipart upload under `prefix` (its marker is written
    /// right before the first part uploads; MinIO cannot list uploads by directory); false if
    /// the process ended first.
    async fn wait_upload_open(&mut self, target: &Target, prefix: &str, latest: &mut u64) -> bool {
        let deadline = Instant::now() + LINE_TIMEOUT;
        loop {
            match tokio::time::timeout(Duration::from_millis(100), self.lines.recv()).await {
                Ok(Some(line)) => {
                    if let Some(id) = completed_checkpoint(&line) {
                        *latest = (*latest).max(id);
                    }
                }
                Ok(None) => return false,
                Err(_) => {}
            }
            if !recorded_uploads(target, prefix).await.is_empty() {
                return true;
            }
            assert!(
                Instant::now() < deadline,
                "no multipart upload opened within {LINE_TIMEOUT:?}"
            );
        }
    }

    /// SIGKILL and reap. `Some(code)` when the process had exited by itself already.
    async fn kill(&mut self) -> Option<i32> {
        let _ = self.child.start_kill();
        let status = tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .expect("killed process did not go away")
            .unwrap();
        status.code()
    }

    /// Waits for a normal end; returns the exit code.
    async fn wait_exit(&mut self, latest: &mut u64) -> Option<i32> {
        let deadline = Instant::now() + FINAL_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.lines.recv()).await {
                Ok(Some(line)) => {
                    if let Some(id) = completed_checkpoint(&line) {
                        *latest = (*latest).max(id);
                    }
                    if line.contains(" WARN ") || line.contains(" ERROR ") {
                        eprintln!("    | {line}");
                    }
                }
                Ok(None) => break,
                Err(_) => {
                    let _ = self.child.start_kill();
                    panic!("the final run did not end within {FINAL_TIMEOUT:?}");
                }
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let status = tokio::time::timeout(left, self.child.wait())
            .await
            .expect("process closed stderr but did not exit")
            .unwrap();
        status.code()
    }
}

/// `checkpoint N completed` in a log line.
fn completed_checkpoint(line: &str) -> Option<u64> {
    let mut rest = line;
    while let Some(i) = rest.find("checkpoint ") {
        rest = &rest[i + "checkpoint ".len()..];
        if let Some((num, tail)) = rest.split_once(' ')
            && tail.starts_with("completed")
            && let Ok(n) = num.parse()
        {
            return Some(n);
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------
// Kill points
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Kill {
    /// On the completion line of checkpoint `latest + after`: the commit of that checkpoint
    /// (notifyCheckpointComplete) has just started or not yet.
    OnCompletion { after: u64 },
    /// `delay_ms` after that completion line: the commit is most likely done.
    AfterCommit { after: u64, delay_ms: u64 },
    /// Mid-interval: `delay_ms` (< interval) after the completion line, while parts upload.
    MidInterval { after: u64, delay_ms: u64 },
    /// `delay_ms` after the `restoring` line: during the restore (which commits the pending
    /// files of the restored checkpoint and resumes in-progress uploads).
    DuringRestore { delay_ms: u64 },
    /// `delay_ms` after `job running`, wherever that is.
    Anywhere { delay_ms: u64 },
    /// Once a multipart upload is open under the sink's prefix (row formats: a part file past
    /// 5 MiB, parts uploaded) and the next checkpoint completed (its state holds upload id,
    /// etags and tail), `delay_ms` into the interval: while more parts upload.
    UploadOpen { delay_ms: u64 },
}

/// Ten kills. Without `in_commit` none lands while a commit may be in flight (see the module
/// docs: a MinIO defect with multipart uploads); `in_commit` puts kills on completion lines and
/// during the restore's commits as well.
fn kill_plan(rng: &mut rand::rngs::StdRng, in_commit: bool) -> Vec<Kill> {
    let mut mid = || rng.random_range(80..INTERVAL_MS - 80);
    let (m1, m2, m3, m4, m5) = (mid(), mid(), mid(), mid(), mid());
    let mut after_commit = || rng.random_range(150..250);
    let (a1, a2, a3) = (after_commit(), after_commit(), after_commit());
    if in_commit {
        return vec![
            Kill::MidInterval {
                after: 3,
                delay_ms: m1,
            },
            Kill::OnCompletion { after: 2 },
            Kill::DuringRestore {
                delay_ms: rng.random_range(0..40),
            },
            Kill::UploadOpen { delay_ms: m2 },
            Kill::OnCompletion { after: 1 },
            Kill::DuringRestore {
                delay_ms: rng.random_range(0..40),
            },
            Kill::UploadOpen { delay_ms: m3 },
            Kill::AfterCommit {
                after: 2,
                delay_ms: a1,
            },
            Kill::Anywhere {
                delay_ms: rng.random_range(200..1200),
            },
            Kill::MidInterval {
                after: 2,
                delay_ms: m4,
            },
        ];
    }
    vec![
        Kill::MidInterval {
            after: 3,
            delay_ms: m1,
        },
        Kill::AfterCommit {
            after: 2,
            delay_ms: a1,
        },
        Kill::UploadOpen { delay_ms: m2 },
        Kill::MidInterval {
            after: 1,
            delay_ms: m3,
        },
        Kill::UploadOpen { delay_ms: m4 },
        Kill::AfterCommit {
            after: 1,
            delay_ms: a2,
        },
        Kill::UploadOpen { delay_ms: m5 },
        Kill::MidInterval {
            after: 2,
            delay_ms: m1,
        },
        Kill::AfterCommit {
            after: 2,
            delay_ms: a3,
        },
        Kill::MidInterval {
            after: 2,
            delay_ms: m2,
        },
    ]
}

// ---------------------------------------------------------------------------------------------
// The test
// ---------------------------------------------------------------------------------------------

/// Upload ids recorded in the sink's markers (`<prefix>/.streamjob/uploads/...`).
async fn recorded_uploads(target: &Target, prefix: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let dir = format!("{prefix}/.streamjob/uploads");
    let store = target.store();
    for o in store.list(&dir).await.unwrap() {
        // a live instance drops the marker of an upload it completed: gone meanwhile is fine
        let Ok(body) = store.get(&o.key).await else {
            continue;
        };
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        if v.get("uploadId").is_none() {
            // a staging object's marker (`tempKey`): small files are copied, not uploaded
            assert!(v["tempKey"].is_string(), "unknown marker {}: {v}", o.key);
            continue;
        }
        out.insert(
            v["uploadId"].as_str().unwrap().to_string(),
            format!("{prefix}/{}", v["key"].as_str().unwrap()),
        );
    }
    out
}

struct Outcome {
    kills: usize,
    elapsed: Duration,
    files: usize,
    bytes: u64,
    largest: u64,
    recorded: usize,
}

async fn run_case(case: &Case, target: &Target, bin: &Path, dir: &Path, seed: u64) -> Outcome {
    let t0 = Instant::now();
    let dir = &dir.join(target.name());
    std::fs::create_dir_all(dir).unwrap();
    let manifest_path = dir.join(format!("{}.yaml", case.name));
    std::fs::write(&manifest_path, manifest(case, target, None)).unwrap();
    let prefix = format!("out/{}", case.name);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ mix(case.fmt as u64));
    let mut latest = 0u64;
    let mut kills = 0usize;
    // every upload id some dead instance recorded, with its key
    let mut recorded: BTreeMap<String, String> = BTreeMap::new();
    let mut attempt_no = 0;
    let mut finished_early = None;
    // staged files (Parquet: one small file per checkpoint) survive a kill mid-commit on MinIO;
    // GCS's compose, Azure's Put Block List and HDFS's rename complete on the server whatever
    // the client does
    let in_commit = case.fmt == Fmt::Parquet
        || !matches!(target, Target::S3(_))
        || std::env::var("STREAMJOB_SINK_CRASH_KILL_IN_COMMIT").as_deref() == Ok("1");
    // Parquet files are staged objects, never multipart uploads: no upload ever opens to wait
    // for, so those kill points become kills in the middle of an interval
    let staged = case.fmt == Fmt::Parquet
        || case.compaction.is_some()
        || matches!(target, Target::Hdfs { .. });
    let plan = kill_plan(&mut rng, in_commit).into_iter().map(|k| match k {
        Kill::UploadOpen { delay_ms } if staged => Kill::MidInterval { after: 1, delay_ms },
        k => k,
    });
    for kill in plan {
        attempt_no += 1;
        let log = dir.join(format!("{}-attempt-{attempt_no}.log", case.name));
        let mut a = Attempt::start(bin, &manifest_path, target, &log);
        let reached = match kill {
            Kill::OnCompletion { after } => a.wait_checkpoint(latest + after, &mut latest).await,
            Kill::AfterCommit { after, delay_ms } | Kill::MidInterval { after, delay_ms } => {
                let ok = a.wait_checkpoint(latest + after, &mut latest).await;
                if ok {
                    tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                }
                ok
            }
            Kill::DuringRestore { delay_ms } => {
                let ok = a.wait_line("restoring").await;
                if ok {
                    tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                }
                ok
            }
            Kill::Anywhere { delay_ms } => {
                let ok = a.wait_line("job running").await;
                if ok {
                    tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                }
                ok
            }
            Kill::UploadOpen { delay_ms } => {
                let ok = a.wait_upload_open(target, &prefix, &mut latest).await
                    && a.wait_checkpoint(latest + 1, &mut latest).await;
                if ok {
                    tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                }
                ok
            }
        };
        if !reached {
            // the job ended before the kill point: that was the final run
            let code = a.wait_exit(&mut latest).await;
            finished_early = Some((attempt_no, code));
            break;
        }
        let exited = a.kill().await;
        // drain what was logged before the kill (completion lines move `latest`)
        while let Ok(line) = a.lines.try_recv() {
            if let Some(id) = completed_checkpoint(&line) {
                latest = latest.max(id);
            }
        }
        if let Some(code) = exited {
            // it ended on its own just before the kill: that was the final run
            finished_early = Some((attempt_no, Some(code)));
            break;
        }
        kills += 1;
        let markers = recorded_uploads(target, &prefix).await;
        let mut open = 0;
        for (id, key) in &markers {
            if target.upload_open(key, id).await {
                open += 1;
            }
        }
        eprintln!(
            "  {} {}: kill {kills} {kill:?} after {:.1?} (latest checkpoint {latest}): {} upload markers, {open} of their uploads open",
            target.name(),
            case.name,
            a.started.elapsed(),
            markers.len()
        );
        recorded.extend(markers);
    }
    let code = match finished_early {
        Some((n, code)) => {
            eprintln!("  {}: attempt {n} ended before its kill point", case.name);
            code
        }
        None => {
            attempt_no += 1;
            let log = dir.join(format!("{}-attempt-{attempt_no}.log", case.name));
            let mut a = Attempt::start(bin, &manifest_path, target, &log);
            a.wait_exit(&mut latest).await
        }
    };
    assert_eq!(
        code,
        Some(0),
        "{}: the final run failed; logs in {}",
        case.name,
        dir.display()
    );
    assert!(
        kills >= MIN_KILLS,
        "{}: only {kills} kills before the job ended; make it longer",
        case.name
    );

    let (objects, files, bytes, largest) = exactly_once(case, target, &prefix, dir).await;
    if case.compaction.is_some() {
        // without compaction the sink rolls a file every 16 KiB
        let rolled = bytes / (16 << 10);
        assert!(
            (files as u64) * 5 < rolled,
            "{}: {files} files for {bytes} bytes rolled at 16 KiB: not compacted",
            case.name
        );
    } else if case.fmt != Fmt::Parquet {
        assert!(
            largest > 5 << 20,
            "{}: no file above one 5 MiB part ({largest} bytes): multipart not exercised",
            case.name
        );
    }

    no_uploads_left(case, target, &prefix, &recorded, &objects).await;
    Outcome {
        kills,
        elapsed: t0.elapsed(),
        files,
        bytes,
        largest,
        recorded: recorded.len(),
    }
}

/// Every record in exactly one finished file, with the generator's key and value (`dir`: the
/// logs, for the message). Returns the objects, and the finished files' count, bytes and
/// largest size.
async fn exactly_once(
    case: &Case,
    target: &Target,
    prefix: &str,
    dir: &Path,
) -> (Vec<streamjob_storage::store::ObjectInfo>, usize, u64, u64) {
    // every record in exactly one finished file, with the generator's key and value
    let store = target.store();
    let objects = store.list(prefix).await.unwrap();
    let mut seen: BTreeMap<u64, u32> = BTreeMap::new();
    let (mut files, mut bytes, mut largest) = (0usize, 0u64, 0u64);
    let mut wrong = Vec::new();
    for o in objects.iter().filter(|o| is_finished(&o.key)) {
        let name = o.key.rsplit('/').next().unwrap();
        assert!(name.starts_with("part-"), "unexpected object {}", o.key);
        files += 1;
        bytes += o.size;
        largest = largest.max(o.size);
        let data = store.get(&o.key).await.unwrap();
        for (id, key, value) in decode(case.fmt, &o.key, data) {
            *seen.entry(id).or_default() += 1;
            if (key.clone(), value) != expected_record(id) && wrong.len() < 5 {
                wrong.push((o.key.clone(), id, key, value));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{}: corrupted records: {wrong:?}",
        case.name
    );
    let dups: Vec<_> = seen.iter().filter(|(_, c)| **c > 1).take(10).collect();
    let missing: Vec<u64> = (0..case.count)
        .filter(|id| !seen.contains_key(id))
        .take(10)
        .collect();
    let extra: Vec<u64> = seen
        .keys()
        .filter(|id| **id >= case.count)
        .take(10)
        .copied()
        .collect();
    assert!(
        dups.is_empty() && missing.is_empty() && extra.is_empty(),
        "{}: not exactly once: duplicated (id, times) {dups:?}, missing {missing:?}, \
         unexpected {extra:?} (first few); {} distinct ids of {}; logs in {}",
        case.name,
        seen.len(),
        case.count,
        dir.display()
    );
    assert_eq!(seen.len() as u64, case.count);
    assert_eq!(
        seen.values().map(|c| u64::from(*c)).sum::<u64>(),
        case.count
    );
    (objects, files, bytes, largest)
}

/// No upload marker left, no upload the sink recorded still open, nothing open at a part name.
async fn no_uploads_left(
    case: &Case,
    target: &Target,
    prefix: &str,
    recorded: &BTreeMap<String, String>,
    objects: &[streamjob_storage::store::ObjectInfo],
) {
    // uploads: no marker left, nothing the sink recorded still open
    let markers_left = recorded_uploads(target, prefix).await;
    assert!(
        markers_left.is_empty(),
        "{}: upload markers left: {markers_left:?}",
        case.name
    );
    // staging objects (small files, committed by a copy): none left behind, nor their markers
    let staging_left: Vec<String> = target
        .list(prefix)
        .await
        .into_iter()
        .map(|o| o.key)
        .filter(|k| {
            k.rsplit('/')
                .next()
                .is_some_and(|n| n.starts_with('.') && n.contains(".inprogress."))
                || k.contains("/.streamjob/uploads/")
                || k.contains("/.streamjob/temp/")
        })
        .collect();
    assert!(
        staging_left.is_empty(),
        "{}: staging objects or markers left: {staging_left:?}",
        case.name
    );
    let mut still_open = Vec::new();
    for (id, key) in recorded {
        if target.upload_open(key, id).await {
            still_open.push((key.clone(), id.clone()));
        }
    }
    assert!(
        still_open.is_empty(),
        "{}: recorded uploads neither completed nor aborted: {still_open:?}",
        case.name
    );
    // and nothing open at any part name the job used or could have used next (MinIO lists
    // uploads of exact keys only), recorded or not: the restore aborts unrecorded orphans too
    let max_counter = objects
        .iter()
        .filter_map(|o| {
            let name = o.key.rsplit('/').next()?;
            let mid = name.strip_prefix("part-")?.strip_suffix(case.suffix)?;
            mid.split_once('-')?.1.parse::<u64>().ok()
        })
        .max()
        .unwrap_or(0);
    let mut open_left = Vec::new();
    for sub in 0..PARALLELISM {
        for c in 0..=max_counter + 10 {
            let key = format!("{prefix}/part-{sub}-{c}{}", case.suffix);
            open_left.extend(target.open_at(&key).await);
        }
    }
    assert!(
        open_left.is_empty(),
        "{}: open multipart uploads left: {:?}",
        case.name,
        open_left.iter().collect::<BTreeSet<_>>()
    );
}

fn run_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .unwrap()
                .join("target")
        },
        PathBuf::from,
    );
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S").to_string();
    let runs = target.join("e2e-runs");
    streamjob_e2e::fixtures::prune_runs(&runs, streamjob_e2e::fixtures::KEPT_RUNS);
    runs.join(format!("sink-crash-{stamp}-{}", std::process::id()))
}

/// MinIO in `dir` with the test bucket.
async fn minio_with_bucket(bins: &Binaries, dir: &Path) -> (Minio, S3Endpoint) {
    let minio = Minio::start(bins, &dir.join("minio"), None)
        .await
        .unwrap_or_else(|e| panic!("MinIO: {e}"));
    let s3 = minio.endpoint().clone();
    // MinIO may answer 503 for a moment after it reports live
    streamjob_e2e::wait::poll_until(
        "bucket created",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || async { s3.create_bucket(BUCKET).await.map(Some) },
    )
    .await
    .unwrap();
    (minio, s3)
}

/// The kill matrix of every format on `target`.
async fn sigkill_matrix(target: &Target, dir: &Path) {
    let bin = runtime_binary();
    let seed = std::env::var("STREAMJOB_SINK_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_u64);
    eprintln!(
        "sink crash matrix on {}: runtime {}, run dir {}, seed {seed}",
        target.name(),
        bin.display(),
        dir.display()
    );
    let mut summary = Vec::new();
    for case in cases() {
        if case.compaction.is_some() && matches!(target, Target::Hdfs { .. }) {
            // two minutes on MiniDFS; compaction on HDFS is run by runtime/tests/runtime.rs
            continue;
        }
        let o = run_case(&case, target, &bin, dir, seed).await;
        summary.push(format!(
            "{} {}: {} kills, {:.1?}, {} files, {} bytes, largest {}, {} uploads recorded by killed instances",
            target.name(), case.name, o.kills, o.elapsed, o.files, o.bytes, o.largest, o.recorded
        ));
    }
    for s in summary {
        eprintln!("{s}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_many_points_is_exactly_once_on_minio() {
    let bins = Binaries::locate().unwrap_or_else(|e| panic!("{e}"));
    let dir = run_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let (_minio, s3) = minio_with_bucket(&bins, &dir).await;
    sigkill_matrix(&Target::S3(s3), &dir).await;
}

// Full suite only (HDFS: runtime/tests/runtime.rs kills the runtime on MiniDFS in every run; the matrix runs on MinIO in every run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full suite: cargo xtask e2e --full"]
async fn sigkill_at_many_points_is_exactly_once_on_hdfs() {
    let dir = run_dir().with_extension("hdfs");
    std::fs::create_dir_all(&dir).unwrap();
    let dfs = minidfs::start();
    let target = Target::Hdfs {
        url: dfs.url.clone(),
    };
    sigkill_matrix(&target, &dir).await;
}

// Full suite only (GCS: runtime/tests/runtime.rs kills the runtime on fake-gcs-server in every run; the matrix runs on MinIO in every run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full suite: cargo xtask e2e --full"]
async fn sigkill_at_many_points_is_exactly_once_on_gcs() {
    let dir = run_dir().with_extension("gcs");
    std::fs::create_dir_all(&dir).unwrap();
    let gcs = emulators::fake_gcs(&[BUCKET]);
    let target = Target::Gcs {
        url: gcs.url.clone(),
    };
    sigkill_matrix(&target, &dir).await;
}

// Full suite only (Azure: runtime/tests/runtime.rs kills the runtime on Azurite in every run; the matrix runs on MinIO in every run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full suite: cargo xtask e2e --full"]
async fn sigkill_at_many_points_is_exactly_once_on_azure() {
    let dir = run_dir().with_extension("azure");
    std::fs::create_dir_all(&dir).unwrap();
    let az = emulators::azurite(&[BUCKET]);
    let target = Target::Azure {
        url: az.url.clone(),
    };
    sigkill_matrix(&target, &dir).await;
}

/// Issue #19, one retry policy: with `storage.retryBudget: 4s` and the store behind a proxy that
/// cuts every connection during an outage, an outage shorter than the budget is ridden out by
/// the calls' retries (no restart), and a longer one makes a call give up, so the attempt
/// restarts from its latest checkpoint with backoff until the store is back. Exactly once
/// either way. Before, the sink's five attempts each waited out the client's two minutes of
/// retries: nothing gave up within a twenty-second outage and the job hung in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_outages_are_ridden_out_or_restart_the_attempt_exactly_once() {
    const SHORT: Duration = Duration::from_millis(1500);
    const LONG: Duration = Duration::from_secs(20);
    let bins = Binaries::locate().unwrap_or_else(|e| panic!("{e}"));
    let bin = runtime_binary();
    let dir = run_dir().with_extension("outage");
    std::fs::create_dir_all(&dir).unwrap();
    let (_minio, s3) = minio_with_bucket(&bins, &dir).await;
    let upstream: std::net::SocketAddr = s3.url.trim_start_matches("http://").parse().unwrap();
    let proxy = streamjob_e2e::proxy::FaultProxy::start(upstream).unwrap();
    let through_proxy = S3Endpoint {
        url: proxy.url(),
        ..s3.clone()
    };
    let case = Case {
        fmt: Fmt::Json,
        name: "outage",
        format_yaml: "{jsonLines: {}}",
        suffix: ".json",
        count: 300_000,
        rate: 12_000,
        max_part_size: "8MiB",
        pad: false,
        compaction: None,
    };
    let manifest_path = dir.join("outage.yaml");
    let target = Target::S3(s3.clone());
    std::fs::write(
        &manifest_path,
        manifest(&case, &Target::S3(through_proxy), Some("4s")),
    )
    .unwrap();
    let mut a = Attempt::start(&bin, &manifest_path, &target, &dir.join("outage.log"));
    let mut latest = 0;
    assert!(
        a.wait_checkpoint(2, &mut latest).await,
        "the job ended early"
    );

    // lines until `until`, or the process's end
    async fn lines_until(a: &mut Attempt, until: Instant, latest: &mut u64) -> Vec<String> {
        let mut got = Vec::new();
        while let Ok(Some(line)) = tokio::time::timeout(
            until.saturating_duration_since(Instant::now()),
            a.lines.recv(),
        )
        .await
        {
            if let Some(id) = completed_checkpoint(&line) {
                *latest = (*latest).max(id);
            }
            got.push(line);
        }
        got
    }
    let failed = |lines: &[String]| lines.iter().any(|l| l.contains("job failed"));

    // a short outage: the retries ride it out, and checkpoints go on without a restart
    let cut = proxy.refused();
    proxy.start_outage();
    let during = lines_until(&mut a, Instant::now() + SHORT, &mut latest).await;
    proxy.end_outage();
    assert!(proxy.refused() > cut, "the short outage cut no connection");
    let before = latest;
    let deadline = Instant::now() + LINE_TIMEOUT;
    let mut after = Vec::new();
    while latest < before + 2 {
        let more = lines_until(
            &mut a,
            Instant::now() + Duration::from_millis(200),
            &mut latest,
        );
        after.extend(more.await);
        assert!(
            Instant::now() < deadline && !failed(&after),
            "no two checkpoints after the short outage without a failure: {:?}",
            after.iter().rev().take(5).collect::<Vec<_>>()
        );
    }
    assert!(
        !failed(&during) && !failed(&after),
        "the short outage restarted the job"
    );

    // a long outage: a call gives up after the budget, the attempt fails and restarts with
    // backoff while the store is away
    proxy.start_outage();
    let during = lines_until(&mut a, Instant::now() + LONG, &mut latest).await;
    proxy.end_outage();
    assert!(
        failed(&during),
        "no call gave up within a {LONG:?} outage with a 4s retry budget; logs in {}",
        dir.display()
    );
    let restarts = during.iter().filter(|l| l.contains("job failed")).count();
    eprintln!("long outage: {restarts} failed attempts while the store was away");

    let code = a.wait_exit(&mut latest).await;
    assert_eq!(
        code,
        Some(0),
        "the job did not finish after the outage; logs in {}",
        dir.display()
    );
    let prefix = format!("out/{}", case.name);
    let (objects, files, bytes, _) = exactly_once(&case, &target, &prefix, &dir).await;
    no_uploads_left(&case, &target, &prefix, &BTreeMap::new(), &objects).await;
    eprintln!(
        "outages: {} records once in {files} files ({bytes} bytes), {} connections cut or refused",
        case.count,
        proxy.refused()
    );
}

/// Issue #38, S3 answers lost after the store acted. MinIO sits behind an HTTP proxy that
/// answers `500 InternalError` after the store did what was asked (every fence probe's first
/// create, every third fence commit, every second CompleteMultipartUpload), drops the connection
/// without an answer after some of them (two fence commits, two completions), and throttles
/// with `503 SlowDown` before the store sees the request (every fourth part upload, every
/// ninth GET). A client retries a 500 and meets its own write: an existing commit object, an
/// upload already completed. The job must take those for its own and go on; only an answer
/// lost on a create-only write (a fence commit: not retried, it cannot tell) may cost an attempt.
/// Exactly once, every fault kind seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_answers_lost_after_the_store_acted_are_exactly_once() {
    use hyper::Method;
    use streamjob_e2e::s3_faults::{Fault, Rule, S3FaultProxy};
    // (name, method, path contains, query contains, every n-th, at most, fault)
    #[rustfmt::skip]
    let table = [
        ("probe-500", Method::PUT, "/_fence/probe-", "", 1, 0, Fault::AppliedThenError),
        ("commit-reset", Method::PUT, "/_fence/commit-", "", 7, 2, Fault::AppliedThenReset),
        ("commit-500", Method::PUT, "/_fence/commit-", "", 3, 0, Fault::AppliedThenError),
        ("complete-reset", Method::POST, "", "uploadId=", 2, 2, Fault::AppliedThenReset),
        ("complete-500", Method::POST, "", "uploadId=", 3, 0, Fault::AppliedThenError),
        ("part-503", Method::PUT, "", "partNumber=", 4, 0, Fault::SlowDown),
        ("get-503", Method::GET, "", "", 9, 0, Fault::SlowDown),
    ];
    let rules: Vec<Rule> = table
        .into_iter()
        .map(
            |(name, method, path_contains, query_contains, every, max, fault)| Rule {
                name,
                method,
                path_contains,
                query_contains,
                every,
                max,
                fault,
            },
        )
        .collect();
    let names: Vec<&str> = rules.iter().map(|r| r.name).collect();
    let bins = Binaries::locate().unwrap_or_else(|e| panic!("{e}"));
    let bin = runtime_binary();
    let dir = run_dir().with_extension("s3-faults");
    std::fs::create_dir_all(&dir).unwrap();
    let (_minio, s3) = minio_with_bucket(&bins, &dir).await;
    let upstream: std::net::SocketAddr = s3.url.trim_start_matches("http://").parse().unwrap();
    let proxy = S3FaultProxy::start(upstream, rules).unwrap();
    let through_proxy = S3Endpoint {
        url: proxy.url(),
        ..s3.clone()
    };
    let case = Case {
        fmt: Fmt::Json,
        name: "s3faults",
        format_yaml: "{jsonLines: {}}",
        suffix: ".json",
        // ~72 B per record: 14.4 MB per subtask, files of 6 MiB, each a completed multipart upload
        count: 400_000,
        rate: 16_000,
        max_part_size: "6MiB",
        pad: false,
        compaction: None,
    };
    let manifest_path = dir.join("s3faults.yaml");
    let target = Target::S3(s3.clone());
    std::fs::write(
        &manifest_path,
        manifest(&case, &Target::S3(through_proxy), Some("10s")),
    )
    .unwrap();
    let log = dir.join("s3faults.log");
    let mut a = Attempt::start(&bin, &manifest_path, &target, &log);
    let mut latest = 0;
    let code = a.wait_exit(&mut latest).await;
    let lines = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        code,
        Some(0),
        "the job did not finish; log in {}",
        log.display()
    );
    let prefix = format!("out/{}", case.name);
    let (objects, files, bytes, _) = exactly_once(&case, &target, &prefix, &dir).await;
    no_uploads_left(&case, &target, &prefix, &BTreeMap::new(), &objects).await;
    let report: Vec<String> = names
        .iter()
        .map(|n| format!("{n} {}/{}", proxy.injected(n), proxy.seen(n)))
        .collect();
    for n in &names {
        assert!(
            proxy.injected(n) > 0,
            "no fault injected by {n} (faults/matches: {report:?}): the rule no longer matches \
             what the runtime sends"
        );
    }
    // a 500 or a 503 is retried and ridden out; only a fence commit that lost its answer
    // (create-only, so not retried) may fail an attempt
    let failed = lines.matches("job failed").count() as u64;
    assert!(
        failed <= proxy.injected("commit-reset"),
        "{failed} failed attempts for {} lost fence-commit answers (faults/matches: {report:?}); \
         log in {}",
        proxy.injected("commit-reset"),
        log.display()
    );
    eprintln!(
        "S3 faults: {} records once in {files} files ({bytes} bytes), {latest} checkpoints, \
         {failed} failed attempts; faults/matches {report:?}",
        case.count
    );
}

// ---------------------------------------------------------------------------------------------
// Web identity (IRSA's flow) against MinIO's STS
// ---------------------------------------------------------------------------------------------

/// An OpenID provider for MinIO's STS: its discovery document and JWKS served by Python's
/// `http.server` from files, tokens signed by the `openssl` CLI (RS256).
struct Idp {
    child: std::process::Child,
    url: String,
    key: PathBuf,
}

impl Drop for Idp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const KID: &str = "streamjob-test";
const CLIENT_ID: &str = "streamjob";

fn b64url(data: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data)
}

fn openssl(args: &[&str], dir: &Path, stdin: Option<&[u8]>) -> Vec<u8> {
    use std::io::Write;
    let mut child = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the web identity test needs the openssl CLI");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or_default()).unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "openssl {args:?}: {}", out.status);
    out.stdout
}

impl Idp {
    fn start(dir: &Path) -> Self {
        let www = dir.join("www");
        std::fs::create_dir_all(www.join(".well-known")).unwrap();
        let key = dir.join("idp.key");
        openssl(&["genrsa", "-out", "idp.key", "2048"], dir, None);
        let modulus = String::from_utf8(openssl(
            &["rsa", "-in", "idp.key", "-noout", "-modulus"],
            dir,
            None,
        ))
        .unwrap();
        let n = hex::decode(modulus.trim().trim_start_matches("Modulus=")).unwrap();
        let port = streamjob_e2e::process::free_port().unwrap();
        let url = format!("http://127.0.0.1:{port}");
        let discovery = serde_json::json!({
            "issuer": url,
            "jwks_uri": format!("{url}/jwks.json"),
            "authorization_endpoint": format!("{url}/authorize"),
            "token_endpoint": format!("{url}/token"),
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
        });
        let jwks = serde_json::json!({"keys": [{
            "kty": "RSA", "use": "sig", "alg": "RS256", "kid": KID, "n": b64url(&n), "e": "AQAB",
        }]});
        std::fs::write(
            www.join(".well-known/openid-configuration"),
            discovery.to_string(),
        )
        .unwrap();
        std::fs::write(www.join("jwks.json"), jwks.to_string()).unwrap();
        let mut child = std::process::Command::new("python3")
            .args([
                "-m",
                "http.server",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .arg("--directory")
            .arg(&www)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the web identity test needs python3");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(child.try_wait().unwrap().is_none(), "the IdP exited");
            assert!(Instant::now() < deadline, "the IdP did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        Self { child, url, key }
    }

    /// A signed ID token granting the MinIO policy `policy` (MinIO's default claim name), signed
    /// with `key` (the IdP's own, or another one the STS must refuse).
    fn token(&self, key: &Path, policy: &str) -> String {
        let now = chrono::Utc::now().timestamp();
        let header = serde_json::json!({"alg": "RS256", "typ": "JWT", "kid": KID});
        let claims = serde_json::json!({
            "iss": self.url, "sub": "system:serviceaccount:jobs:clicks", "aud": CLIENT_ID,
            "azp": CLIENT_ID, "iat": now, "exp": now + 3600, "policy": policy,
        });
        let input = format!(
            "{}.{}",
            b64url(header.to_string().as_bytes()),
            b64url(claims.to_string().as_bytes())
        );
        let dir = key.parent().unwrap();
        let key = key.file_name().unwrap().to_str().unwrap();
        let signature = openssl(
            &["dgst", "-sha256", "-sign", key],
            dir,
            Some(input.as_bytes()),
        );
        format!("{input}.{}", b64url(&signature))
    }
}

/// One `streamjob-runtime run` with web-identity credentials only (no keys in the environment):
/// the token file, a role ARN (MinIO's claim-based provider ignores it; the AWS chain needs one),
/// the STS endpoint, and the CA of MinIO's certificate (the AWS chain talks to an STS over
/// HTTPS only). Returns the exit code and the stderr.
async fn run_with_web_identity(
    bin: &Path,
    manifest: &Path,
    token: &Path,
    s3: &S3Endpoint,
) -> (Option<i32>, String) {
    let out = tokio::process::Command::new(bin)
        .args(["run", manifest.to_str().unwrap(), "--max-restarts", "0"])
        .env("RUST_LOG", "info")
        .env("AWS_WEB_IDENTITY_TOKEN_FILE", token)
        .env("AWS_ROLE_ARN", "arn:minio:iam:::role/streamjob-test")
        .env("AWS_ROLE_SESSION_NAME", "clicks")
        .env("AWS_ENDPOINT_URL_STS", &s3.url)
        .env("AWS_REGION", &s3.region)
        .env("SSL_CERT_FILE", s3.ca.as_ref().unwrap())
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_PROFILE")
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Issue #16: the AWS credential chain's web-identity flow (what IRSA sets up on EKS) through
/// the runtime binary, against a real STS: MinIO's AssumeRoleWithWebIdentity, trusting an
/// OpenID provider of the test's own. One job gets temporary credentials for its checkpoints
/// and its file sink alike (one client) and writes every record exactly once; a token signed by
/// a key the provider does not publish is refused and the job fails with the STS's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_identity_credentials_from_an_sts_serve_checkpoints_and_the_sink() {
    let bins = Binaries::locate().unwrap_or_else(|e| panic!("{e}"));
    let bin = runtime_binary();
    let dir = run_dir().with_extension("sts");
    std::fs::create_dir_all(&dir).unwrap();
    let tls = streamjob_e2e::certs::BrokerTls::generate(&dir.join("tls")).unwrap();
    let idp = Idp::start(&dir);
    let options = MinioOptions {
        tls: Some((
            tls.server.cert.clone(),
            tls.server.key.clone(),
            tls.ca.cert.clone(),
        )),
        env: vec![
            (
                "MINIO_IDENTITY_OPENID_CONFIG_URL".into(),
                format!("{}/.well-known/openid-configuration", idp.url),
            ),
            ("MINIO_IDENTITY_OPENID_CLIENT_ID".into(), CLIENT_ID.into()),
            ("MINIO_IDENTITY_OPENID_CLAIM_NAME".into(), "policy".into()),
        ],
    };
    let minio = Minio::start_with(&bins, &dir.join("minio"), None, &options)
        .await
        .unwrap_or_else(|e| panic!("MinIO: {e}"));
    let s3 = minio.endpoint().clone();
    streamjob_e2e::wait::poll_until(
        "bucket created",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || async { s3.create_bucket(BUCKET).await.map(Some) },
    )
    .await
    .unwrap();
    let case = Case {
        fmt: Fmt::Json,
        name: "web-identity",
        format_yaml: "{jsonLines: {}}",
        suffix: ".json",
        count: 60_000,
        rate: 30_000,
        max_part_size: "8MiB",
        pad: false,
        compaction: None,
    };
    let target = Target::S3(s3.clone());
    let manifest_path = dir.join("web-identity.yaml");
    std::fs::write(&manifest_path, manifest(&case, &target, None)).unwrap();

    // a token the STS refuses: the job fails loudly, nothing is written
    let stranger_key = dir.join("stranger.key");
    openssl(&["genrsa", "-out", "stranger.key", "2048"], &dir, None);
    let refused = dir.join("refused.token");
    std::fs::write(&refused, idp.token(&stranger_key, "readwrite")).unwrap();
    let (code, stderr) = run_with_web_identity(&bin, &manifest_path, &refused, &s3).await;
    assert_ne!(code, Some(0), "a refused token ran the job: {stderr}");
    // the runtime's error names the store call, and carries the STS's answer: it checked the
    // token's signature against the provider's keys
    assert!(
        stderr.contains("storage error at s3://sinkcrash/ck/web-identity")
            && stderr.contains("crypto/rsa: verification error"),
        "the failure does not say why: {stderr}"
    );
    assert!(target.list("out/web-identity").await.is_empty());

    // the provider's own token: temporary credentials for every part of the job
    let token = dir.join("web-identity.token");
    std::fs::write(&token, idp.token(&idp.key, "readwrite")).unwrap();
    let (code, stderr) = run_with_web_identity(&bin, &manifest_path, &token, &s3).await;
    assert_eq!(code, Some(0), "the job failed: {stderr}");
    assert!(
        !target.list("ck/web-identity").await.is_empty(),
        "no checkpoint written"
    );
    let (_, files, bytes, _) = exactly_once(&case, &target, "out/web-identity", &dir).await;
    eprintln!("web identity: {files} files, {bytes} bytes, every record once");
}
