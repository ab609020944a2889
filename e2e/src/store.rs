//! S3-compatible object stores for tests: a small abstraction ([`S3Server`], [`S3Endpoint`]) and
//! its MinIO implementation ([`Minio`]). A second server (s3s-fs, garage) implements the trait.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use hmac::{Hmac, Mac};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use sha2::{Digest, Sha256};

use crate::binaries::Binaries;
use crate::error::{Error, IoContext, Result};
use crate::process::{ManagedProcess, Watchdog, free_port};
use crate::wait::poll_until;

/// How to reach an S3-compatible server.
#[derive(Debug, Clone)]
pub struct S3Endpoint {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    pub region: String,
    pub access_key: String,
    pub secret_key: String,
}

/// A running S3-compatible server.
pub trait S3Server: std::fmt::Debug + Send + Sync {
    /// Short name of the implementation (`minio`).
    fn kind(&self) -> &'static str;
    /// How to reach it.
    fn endpoint(&self) -> &S3Endpoint;
}

/// One object of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    pub key: String,
    pub size: u64,
}

type HmacSha256 = Hmac<Sha256>;

fn hmac(key: &[u8], data: &[u8]) -> Result<Vec<u8>> {
    let mut mac =
        HmacSha256::new_from_slice(key).map_err(|e| Error::Other(format!("hmac key: {e}")))?;
    mac.update(data);
    Ok(mac.finalize().into_bytes().to_vec())
}

impl S3Endpoint {
    /// Creates a bucket (path-style `PUT /<bucket>`, signed with AWS SigV4). An existing bucket
    /// owned by us is not an error.
    pub async fn create_bucket(&self, bucket: &str) -> Result<()> {
        let host = self
            .url
            .trim_start_matches("http://")
            .trim_start_matches("https://")
            .trim_end_matches('/')
            .to_string();
        let now = chrono::Utc::now();
        let amz_date = now.format("%Y%m%dT%H%M%SZ").to_string();
        let day = now.format("%Y%m%d").to_string();
        let payload_hash = hex::encode(Sha256::digest(b""));
        let canonical = format!(
            "PUT\n/{bucket}\n\nhost:{host}\nx-amz-content-sha256:{payload_hash}\nx-amz-date:{amz_date}\n\nhost;x-amz-content-sha256;x-amz-date\n{payload_hash}"
        );
        let scope = format!("{day}/{}/s3/aws4_request", self.region);
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
            hex::encode(Sha256::digest(canonical.as_bytes()))
        );
        let k_date = hmac(
            format!("AWS4{}", self.secret_key).as_bytes(),
            day.as_bytes(),
        )?;
        let k_region = hmac(&k_date, self.region.as_bytes())?;
        let k_service = hmac(&k_region, b"s3")?;
        let k_signing = hmac(&k_service, b"aws4_request")?;
        let signature = hex::encode(hmac(&k_signing, to_sign.as_bytes())?);
        let auth = format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature={signature}",
            self.access_key
        );
        let resp = reqwest::Client::new()
            .put(format!("{}/{bucket}", self.url.trim_end_matches('/')))
            .header("x-amz-date", &amz_date)
            .header("x-amz-content-sha256", &payload_hash)
            .header("authorization", auth)
            .send()
            .await?;
        let status = resp.status();
        let body = resp.text().await.unwrap_or_default();
        if status.is_success() || body.contains("BucketAlreadyOwnedByYou") {
            Ok(())
        } else {
            Err(Error::Other(format!(
                "create bucket {bucket}: HTTP {status}: {body}"
            )))
        }
    }

    /// An `object_store` client for one bucket.
    pub fn object_store(&self, bucket: &str) -> Result<Arc<AmazonS3>> {
        let store = AmazonS3Builder::new()
            .with_endpoint(&self.url)
            .with_region(&self.region)
            .with_bucket_name(bucket)
            .with_access_key_id(&self.access_key)
            .with_secret_access_key(&self.secret_key)
            .with_allow_http(true)
            .with_virtual_hosted_style_request(false)
            .build()?;
        Ok(Arc::new(store))
    }

    /// Every object under `prefix` in `bucket`, sorted by key.
    pub async fn list(&self, bucket: &str, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let store = self.object_store(bucket)?;
        let prefix = (!prefix.is_empty()).then(|| ObjectPath::from(prefix));
        let mut out: Vec<ObjectInfo> = store
            .list(prefix.as_ref())
            .map_ok(|m| ObjectInfo {
                key: m.location.to_string(),
                size: m.size,
            })
            .try_collect()
            .await?;
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    /// The bytes of one object.
    pub async fn read(&self, bucket: &str, key: &str) -> Result<bytes::Bytes> {
        let store = self.object_store(bucket)?;
        Ok(store.get(&ObjectPath::from(key)).await?.bytes().await?)
    }

    /// Writes one object.
    pub async fn write(&self, bucket: &str, key: &str, data: bytes::Bytes) -> Result<()> {
        let store = self.object_store(bucket)?;
        store.put(&ObjectPath::from(key), data.into()).await?;
        Ok(())
    }
}

/// A MinIO server on a random loopback port with its data in the run folder.
#[derive(Debug)]
pub struct Minio {
    process: ManagedProcess,
    endpoint: S3Endpoint,
    /// Data folder.
    pub data_dir: PathBuf,
    /// How long start-up took.
    pub start_duration: Duration,
}

impl Minio {
    /// Starts MinIO in `dir` and waits for `/minio/health/live`.
    pub async fn start(bins: &Binaries, dir: &Path, watchdog: Option<&Watchdog>) -> Result<Self> {
        let t0 = Instant::now();
        let data_dir = dir.join("minio-data");
        std::fs::create_dir_all(&data_dir).ctx(|| format!("create {}", data_dir.display()))?;
        let port = free_port()?;
        let console = free_port()?;
        let access_key = "streamjob-e2e".to_string();
        let secret_key = format!("secret-{:016x}", rand::random::<u64>());
        let mut cmd = Command::new(&bins.minio);
        cmd.arg("server")
            .arg(&data_dir)
            .arg("--address")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--console-address")
            .arg(format!("127.0.0.1:{console}"))
            .arg("--quiet")
            .env("MINIO_ROOT_USER", &access_key)
            .env("MINIO_ROOT_PASSWORD", &secret_key)
            .env("MINIO_BROWSER", "off")
            .env("MINIO_UPDATE", "off")
            .env("HOME", dir);
        let process = ManagedProcess::spawn("minio", cmd, dir, watchdog)?;
        let url = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()?;
        let live = format!("{url}/minio/health/live");
        poll_until(
            "minio /minio/health/live",
            Duration::from_secs(60),
            Duration::from_millis(100),
            || async {
                process.check_running()?;
                let r = http.get(&live).send().await?;
                Ok(r.status().is_success().then_some(()))
            },
        )
        .await?;
        let start_duration = t0.elapsed();
        tracing::info!(?start_duration, url, "minio ready");
        Ok(Self {
            process,
            endpoint: S3Endpoint {
                url,
                region: "us-east-1".into(),
                access_key,
                secret_key,
            },
            data_dir,
            start_duration,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }
}

impl S3Server for Minio {
    fn kind(&self) -> &'static str {
        "minio"
    }
    fn endpoint(&self) -> &S3Endpoint {
        &self.endpoint
    }
}
