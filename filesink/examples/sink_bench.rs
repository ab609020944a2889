//! Sink throughput per format to local disk, MinIO, the GCS emulator (fake-gcs-server) and
//! Azurite, next to a plain write / upload of the same number of bytes to the same store in the
//! same run (the physical limit).
//!
//! `cargo run -p streamjob-filesink --example sink_bench [-- MB_PER_FORMAT]`
//! MinIO is started from `STREAMJOB_MINIO_BIN` or `$STREAMJOB_CACHE/e2e-env.sh` (skipped with a
//! note when absent); the emulators from the same env file (`bash e2e/scripts/install.sh`).
//! Emulator figures say what the sink costs next to the same server's plain upload, not what
//! GCS or Azure would do.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use bytes::Bytes;
use streamjob_crds::v1alpha1::{
    BucketAssignerSpec, CsvFormat, EmptySpec, FileSinkSpec, ParquetFormat, RowCompression,
    RowFormat, SinkFormat,
};
use streamjob_filesink::{FileSink, FileSinkOptions};
use streamjob_storage::store::{CloudStore, LocalStore, Store};

#[path = "../../tools/emulators/launch.rs"]
mod emulators;

const USER: &str = "streamjob";
const PASSWORD: &str = "streamjob-secret";

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("ts", DataType::Int64, false),
        Field::new("payload", DataType::Utf8, false),
    ]))
}

fn batches(mb: usize) -> (Vec<RecordBatch>, usize) {
    let rows = 2000;
    let plen = 200;
    let n = (mb << 20) / (rows * (plen + 16));
    let mut out = Vec::new();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for b in 0..n.max(1) {
        let ids: Vec<i64> = (0..rows).map(|r| (b * rows + r) as i64).collect();
        let ts: Vec<i64> = ids.iter().map(|i| 1_709_300_000_000 + i).collect();
        let payloads: Vec<String> = ids
            .iter()
            .map(|_| {
                let mut s = String::with_capacity(plen);
                while s.len() < plen {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // half random, half repetitive: compresses like typical text
                    s.push_str(&format!("{:08x}-status=ok;", x as u32));
                }
                s.truncate(plen);
                s
            })
            .collect();
        out.push(
            RecordBatch::try_new(
                schema(),
                vec![
                    Arc::new(Int64Array::from(ids)),
                    Arc::new(Int64Array::from(ts)),
                    Arc::new(StringArray::from(payloads)),
                ],
            )
            .unwrap(),
        );
    }
    let records = out.iter().map(|b| b.num_rows()).sum();
    (out, records)
}

fn spec(format: SinkFormat) -> FileSinkSpec {
    FileSinkSpec {
        path: "bench".into(),
        format,
        bucket_assigner: Some(BucketAssignerSpec {
            base_path: Some(EmptySpec {}),
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn run_sink(
    store: Arc<dyn Store>,
    format: SinkFormat,
    input: &[RecordBatch],
) -> (Duration, u64) {
    let mut sink = FileSink::new(
        &spec(format),
        store,
        0,
        1,
        schema(),
        FileSinkOptions::default(),
    )
    .unwrap();
    sink.initialize(vec![], 0).await.unwrap();
    let start = Instant::now();
    let mut ckpt = 0;
    for (i, b) in input.iter().enumerate() {
        sink.write(b, 1_709_300_000_000, None).await.unwrap();
        if (i + 1) % 20 == 0 {
            ckpt += 1;
            sink.snapshot(ckpt).await.unwrap();
            sink.notify_checkpoint_complete(ckpt).await.unwrap();
        }
    }
    sink.end_of_input().await.unwrap();
    sink.snapshot(ckpt + 1).await.unwrap();
    sink.notify_checkpoint_complete(ckpt + 1).await.unwrap();
    (start.elapsed(), sink.metrics().bytes)
}

async fn plain_local(dir: &std::path::Path, bytes: u64) -> Duration {
    use tokio::io::AsyncWriteExt;
    let chunk = vec![7u8; 5 << 20];
    let start = Instant::now();
    let mut f = tokio::fs::File::create(dir.join("plain")).await.unwrap();
    let mut left = bytes as usize;
    while left > 0 {
        let n = left.min(chunk.len());
        f.write_all(&chunk[..n]).await.unwrap();
        left -= n;
    }
    f.sync_all().await.unwrap();
    start.elapsed()
}

/// One PUT of `bytes`.
async fn plain_put(store: &dyn Store, bytes: u64) -> Duration {
    let data = Bytes::from(vec![7u8; bytes as usize]);
    let start = Instant::now();
    store.put("plain-put", data).await.unwrap();
    start.elapsed()
}

/// The sink with every format, then the same store's plain upload of the largest output.
async fn bench_store(
    target: &str,
    store: &dyn Fn(&str) -> Arc<dyn Store>,
    formats: &[(&str, SinkFormat)],
    input: &[RecordBatch],
    records: usize,
) {
    let mut max_bytes = 0;
    for (i, (name, f)) in formats.iter().enumerate() {
        let (d, bytes) = run_sink(store(&format!("f{i}")), f.clone(), input).await;
        max_bytes = max_bytes.max(bytes);
        row(target, &format!("sink {name}"), d, bytes, Some(records));
    }
    let d = plain_multipart(store("plain").as_ref(), max_bytes).await;
    row(target, "plain upload, 5 MiB parts", d, max_bytes, None);
    let d = plain_put(store("plain").as_ref(), max_bytes).await;
    row(target, "plain upload, one PUT", d, max_bytes, None);
}

async fn plain_multipart(store: &dyn Store, bytes: u64) -> Duration {
    let chunk = Bytes::from(vec![7u8; 5 << 20]);
    let start = Instant::now();
    let id = store.create_multipart("plain").await.unwrap();
    let mut etags = Vec::new();
    let mut left = bytes as usize;
    while left > 0 {
        let n = left.min(chunk.len());
        etags.push(
            store
                .put_part("plain", &id, etags.len(), chunk.slice(..n))
                .await
                .unwrap(),
        );
        left -= n;
    }
    store
        .complete_multipart("plain", &id, &etags)
        .await
        .unwrap();
    start.elapsed()
}

fn minio_bin() -> Option<std::path::PathBuf> {
    if let Ok(p) = std::env::var("STREAMJOB_MINIO_BIN") {
        return Some(p.into());
    }
    let cache = std::env::var("STREAMJOB_CACHE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| {
            std::path::PathBuf::from(std::env::var("HOME").unwrap_or_default())
                .join(".cache/streamjob")
        });
    let env = std::fs::read_to_string(cache.join("e2e-env.sh")).ok()?;
    env.lines().find_map(|l| {
        let v = l.strip_prefix("export STREAMJOB_E2E_MINIO=")?;
        let p = std::path::PathBuf::from(v.trim_matches('\''));
        p.exists().then_some(p)
    })
}

async fn create_bucket(endpoint: &str, bucket: &str) -> bool {
    use streamjob_storage::s3_api;
    let req = s3_api::request(
        &reqwest::Client::new(),
        reqwest::Method::PUT,
        endpoint,
        &format!("/{bucket}"),
        &[],
        "us-east-1",
        &s3_api::Credentials {
            key_id: USER,
            secret_key: PASSWORD,
            token: None,
        },
    );
    match req {
        Ok(req) => matches!(req.send().await, Ok(r) if r.status().is_success()),
        Err(_) => false,
    }
}

fn row(target: &str, what: &str, d: Duration, bytes: u64, records: Option<usize>) {
    let s = d.as_secs_f64();
    println!(
        "| {target:<6} | {what:<26} | {:>9.1} | {:>8.1} | {:>12} |",
        bytes as f64 / 1e6,
        bytes as f64 / 1e6 / s,
        records
            .map(|r| format!("{:.0}", r as f64 / s))
            .unwrap_or_else(|| "-".into())
    );
}

#[tokio::main]
async fn main() {
    let mb: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(64);
    let (input, records) = batches(mb);
    let formats = [
        (
            "jsonLines",
            SinkFormat {
                json_lines: Some(RowFormat::default()),
                ..Default::default()
            },
        ),
        (
            "csv+gzip",
            SinkFormat {
                csv: Some(CsvFormat {
                    compression: RowCompression::Gzip,
                    ..Default::default()
                }),
                ..Default::default()
            },
        ),
        (
            "csv+zstd",
            SinkFormat {
                csv: Some(CsvFormat {
                    compression: RowCompression::Zstd,
                    ..Default::default()
                }),
                ..Default::default()
            },
        ),
        (
            "parquet(zstd)",
            SinkFormat {
                parquet: Some(ParquetFormat::default()),
                ..Default::default()
            },
        ),
    ];
    println!("input: {records} records, ~{mb} MB of Arrow data; checkpoint every 20 batches");
    println!("| target | what                       | MB stored |     MB/s |    records/s |");
    println!("|--------|----------------------------|-----------|----------|--------------|");
    let dir = tempfile::tempdir().unwrap();
    let mut max_bytes = 0;
    for (i, (name, f)) in formats.iter().enumerate() {
        let store: Arc<dyn Store> = Arc::new(LocalStore::new(dir.path().join(format!("f{i}"))));
        let (d, bytes) = run_sink(store, f.clone(), &input).await;
        max_bytes = max_bytes.max(bytes);
        row("local", &format!("sink {name}"), d, bytes, Some(records));
    }
    let d = plain_local(dir.path(), max_bytes).await;
    row("local", "plain write+fsync", d, max_bytes, None);

    let gcs = emulators::fake_gcs(&["bench"]);
    let storage = streamjob_crds::v1alpha1::StorageSpec {
        gcs: Some(streamjob_crds::v1alpha1::GcsStorage {
            endpoint: Some(gcs.url.clone()),
            anonymous: true,
            service_account_key_secret: None,
        }),
        ..Default::default()
    };
    let open_gcs = |prefix: &str| {
        streamjob_storage::store::open_store(&format!("gs://bench/{prefix}"), Some(&storage))
            .unwrap()
    };
    bench_store("gcs", &open_gcs, &formats, &input, records).await;
    drop(gcs);
    let az = emulators::azurite(&["bench"]);
    let open_azure = |prefix: &str| -> Arc<dyn Store> {
        let c = object_store::azure::MicrosoftAzureBuilder::new()
            .with_account(emulators::AZURITE_ACCOUNT)
            .with_access_key(emulators::AZURITE_KEY)
            .with_endpoint(az.url.clone())
            .with_allow_http(true)
            .with_container_name("bench")
            .build()
            .unwrap();
        Arc::new(CloudStore::azure(c, "bench", prefix))
    };
    bench_store("azure", &open_azure, &formats, &input, records).await;
    drop(az);

    let Some(bin) = minio_bin() else {
        println!("MinIO not installed (run `bash e2e/scripts/install.sh`): no MinIO rows");
        return;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let data = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(bin)
        .args([
            "server",
            data.path().to_str().unwrap(),
            "--address",
            &format!("127.0.0.1:{port}"),
            "--console-address",
            "127.0.0.1:0",
        ])
        .env("MINIO_ROOT_USER", USER)
        .env("MINIO_ROOT_PASSWORD", PASSWORD)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let endpoint = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !create_bucket(&endpoint, "bench").await {
        assert!(Instant::now() < deadline, "MinIO did not start");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let s3 = |prefix: &str| -> Arc<dyn Store> {
        let c = object_store::aws::AmazonS3Builder::new()
            .with_endpoint(&endpoint)
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_bucket_name("bench")
            .with_access_key_id(USER)
            .with_secret_access_key(PASSWORD)
            .build()
            .unwrap();
        Arc::new(CloudStore::s3(c, "bench", prefix))
    };
    bench_store("minio", &s3, &formats, &input, records).await;
    let _ = child.start_kill();
}
