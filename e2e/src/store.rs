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

/// An open (uncompleted) multipart upload, from S3 ListMultipartUploads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultipartUploadInfo {
    pub key: String,
    pub upload_id: String,
    /// `Initiated` as the server wrote it (RFC 3339).
    pub initiated: String,
}

/// S3's URI encoding (RFC 3986 unreserved characters kept; `/` kept when `keep_slash`).
pub fn uri_encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) || (keep_slash && b == b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The text of every `<tag>...</tag>` in `xml`, in order (no nesting of the same tag).
fn xml_elements<'a>(xml: &'a str, tag: &str) -> Vec<&'a str> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(i) = rest.find(&open) {
        let after = &rest[i + open.len()..];
        let Some(j) = after.find(&close) else { break };
        out.push(&after[..j]);
        rest = &after[j + close.len()..];
    }
    out
}

fn xml_unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

impl S3Endpoint {
    /// A SigV4-signed request without body (path-style). `path` is the already URI-encoded
    /// path (`/bucket/key`); `query` holds unencoded `(name, value)` pairs (value `""` for a
    /// valueless parameter such as `uploads`). Returns status and body whatever the status.
    pub async fn signed_request(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<(reqwest::StatusCode, String)> {
        let host = self
            .url
            .trim_start_matches("http://")
            .trim_start_matches("https://")
            .trim_end_matches('/')
            .to_string();
        let mut pairs: Vec<(String, String)> = query
            .iter()
            .map(|(k, v)| (uri_encode(k, false), uri_encode(v, false)))
            .collect();
        pairs.sort();
        let canonical_query = pairs
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&");
        let now = chrono::Utc::now();
        let amz_date = now.format("%Y%m%dT%H%M%SZ").to_string();
        let day = now.format("%Y%m%d").to_string();
        let payload_hash = hex::encode(Sha256::digest(b""));
        let canonical = format!(
            "{method}\n{path}\n{canonical_query}\nhost:{host}\nx-amz-content-sha256:{payload_hash}\nx-amz-date:{amz_date}\n\nhost;x-amz-content-sha256;x-amz-date\n{payload_hash}"
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
        let mut url = format!("{}{path}", self.url.trim_end_matches('/'));
        if !canonical_query.is_empty() {
            url.push('?');
            url.push_str(&canonical_query);
        }
        let resp = reqwest::Client::new()
            .request(method, url)
            .header("x-amz-date", &amz_date)
            .header("x-amz-content-sha256", &payload_hash)
            .header("authorization", auth)
            .send()
            .await?;
        let status = resp.status();
        let body = resp.text().await.unwrap_or_default();
        Ok((status, body))
    }

    /// Every open multipart upload in `bucket` whose key starts with `prefix`
    /// (S3 ListMultipartUploads, all pages).
    pub async fn list_multipart_uploads(
        &self,
        bucket: &str,
        prefix: &str,
    ) -> Result<Vec<MultipartUploadInfo>> {
        let mut out = Vec::new();
        let (mut key_marker, mut id_marker) = (String::new(), String::new());
        loop {
            let mut query = vec![("uploads", ""), ("prefix", prefix)];
            if !key_marker.is_empty() {
                query.push(("key-marker", &key_marker));
                query.push(("upload-id-marker", &id_marker));
            }
            let path = format!("/{}", uri_encode(bucket, false));
            let (status, body) = self
                .signed_request(reqwest::Method::GET, &path, &query)
                .await?;
            if !status.is_success() {
                return Err(Error::Other(format!(
                    "list multipart uploads of {bucket}/{prefix}: HTTP {status}: {body}"
                )));
            }
            for upload in xml_elements(&body, "Upload") {
                let first = |tag: &str| {
                    xml_elements(upload, tag)
                        .first()
                        .map(|s| xml_unescape(s))
                        .unwrap_or_default()
                };
                out.push(MultipartUploadInfo {
                    key: first("Key"),
                    upload_id: first("UploadId"),
                    initiated: first("Initiated"),
                });
            }
            let truncated = xml_elements(&body, "IsTruncated").first() == Some(&"true");
            let next_key = xml_elements(&body, "NextKeyMarker")
                .first()
                .map(|s| xml_unescape(s))
                .unwrap_or_default();
            if !truncated || next_key.is_empty() {
                break;
            }
            id_marker = xml_elements(&body, "NextUploadIdMarker")
                .first()
                .map(|s| xml_unescape(s))
                .unwrap_or_default();
            key_marker = next_key;
        }
        Ok(out)
    }

    /// Whether multipart upload `upload_id` of `bucket/key` is still open (S3 ListParts:
    /// 200 open, 404 NoSuchUpload completed or aborted).
    pub async fn upload_open(&self, bucket: &str, key: &str, upload_id: &str) -> Result<bool> {
        let path = format!("/{}/{}", uri_encode(bucket, false), uri_encode(key, true));
        let (status, body) = self
            .signed_request(reqwest::Method::GET, &path, &[("uploadId", upload_id)])
            .await?;
        match status.as_u16() {
            200 => Ok(true),
            404 => Ok(false),
            _ => Err(Error::Other(format!(
                "list parts of {bucket}/{key} ({upload_id}): HTTP {status}: {body}"
            ))),
        }
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
