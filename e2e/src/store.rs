//! S3-compatible object stores for tests: a small abstraction ([`S3Server`], [`S3Endpoint`]) and
//! its MinIO implementation ([`Minio`]). A second server (s3s-fs, garage) implements the trait.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};

use crate::binaries::Binaries;
use crate::error::{Error, IoContext, Result};
use crate::process::{ManagedProcess, Watchdog, free_port};
use crate::wait::poll_until;

/// How to reach an S3-compatible server.
#[derive(Debug, Clone)]
pub struct S3Endpoint {
    /// `http://127.0.0.1:<port>` (`https://` with [`MinioOptions::tls`]).
    pub url: String,
    pub region: String,
    pub access_key: String,
    pub secret_key: String,
    /// The CA (PEM file) that signed the server's certificate, when it serves TLS.
    pub ca: Option<PathBuf>,
}

/// How to start MinIO beyond the defaults.
#[derive(Debug, Clone, Default)]
pub struct MinioOptions {
    /// Serve TLS with this certificate, signed by this CA: `(cert, key, ca)` PEM files.
    pub tls: Option<(PathBuf, PathBuf, PathBuf)>,
    /// Extra environment (identity providers, ...).
    pub env: Vec<(String, String)>,
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
    /// When the object was written (the store's clock; the same machine's here).
    pub last_modified: chrono::DateTime<chrono::Utc>,
}

impl S3Endpoint {
    /// Creates a bucket (path-style `PUT /<bucket>`, signed with AWS SigV4). An existing bucket
    /// owned by us is not an error.
    pub async fn create_bucket(&self, bucket: &str) -> Result<()> {
        let (status, body) = self
            .signed_request(reqwest::Method::PUT, &format!("/{bucket}"), &[])
            .await?;
        if status.is_success() || body.contains("BucketAlreadyOwnedByYou") {
            Ok(())
        } else {
            Err(Error::Other(format!(
                "create bucket {bucket}: HTTP {status}: {body}"
            )))
        }
    }

    /// An HTTP client that trusts the server's CA.
    pub fn http_client(&self) -> Result<reqwest::Client> {
        let mut builder = reqwest::Client::builder();
        if let Some(ca) = &self.ca {
            let pem = std::fs::read(ca).ctx(|| format!("read {}", ca.display()))?;
            builder = builder.add_root_certificate(reqwest::Certificate::from_pem(&pem)?);
        }
        Ok(builder.build()?)
    }

    /// `object_store`'s client options for the server (its CA trusted).
    pub fn client_options(&self) -> Result<object_store::ClientOptions> {
        let mut options = object_store::ClientOptions::new().with_allow_http(true);
        if let Some(ca) = &self.ca {
            let pem = std::fs::read(ca).ctx(|| format!("read {}", ca.display()))?;
            options = options.with_root_certificate(object_store::Certificate::from_pem(&pem)?);
        }
        Ok(options)
    }

    /// An `object_store` client for one bucket.
    pub fn object_store(&self, bucket: &str) -> Result<Arc<AmazonS3>> {
        let store = AmazonS3Builder::new()
            .with_client_options(self.client_options()?)
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
                last_modified: m.last_modified,
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

use streamjob_storage::s3_api;
pub use streamjob_storage::s3_api::uri_encode;

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
        let req = s3_api::request(
            &self.http_client()?,
            method,
            &self.url,
            path,
            query,
            &self.region,
            &s3_api::Credentials {
                key_id: &self.access_key,
                secret_key: &self.secret_key,
                token: None,
            },
        )
        .map_err(Error::Other)?;
        let resp = req.send().await?;
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
        let path = format!("/{}", uri_encode(bucket, false));
        let fetch = |query: Vec<(&'static str, String)>| {
            let path = &path;
            async move {
                let query: Vec<(&str, &str)> =
                    query.iter().map(|(k, v)| (*k, v.as_str())).collect();
                let (status, body) = self
                    .signed_request(reqwest::Method::GET, path, &query)
                    .await?;
                if !status.is_success() {
                    return Err(Error::Other(format!(
                        "list multipart uploads of {bucket}/{prefix}: HTTP {status}: {body}"
                    )));
                }
                Ok(body)
            }
        };
        let uploads = s3_api::list_uploads(prefix, fetch, Error::Other).await?;
        Ok(uploads
            .into_iter()
            .map(|u| MultipartUploadInfo {
                key: u.key,
                upload_id: u.upload_id,
                initiated: u.initiated,
            })
            .collect())
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
        Self::start_with(bins, dir, watchdog, &MinioOptions::default()).await
    }

    /// [`Minio::start`] with TLS and extra environment.
    pub async fn start_with(
        bins: &Binaries,
        dir: &Path,
        watchdog: Option<&Watchdog>,
        options: &MinioOptions,
    ) -> Result<Self> {
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
            .arg(format!("{}:{port}", crate::cluster::listen_address()))
            .arg("--console-address")
            .arg(format!("127.0.0.1:{console}"))
            .arg("--quiet")
            .env("MINIO_ROOT_USER", &access_key)
            .env("MINIO_ROOT_PASSWORD", &secret_key)
            .env("MINIO_BROWSER", "off")
            .env("MINIO_UPDATE", "off")
            .env("HOME", dir)
            .envs(options.env.iter().map(|(k, v)| (k, v)));
        let mut ca = None;
        if let Some((cert, key, ca_cert)) = &options.tls {
            // MinIO serves TLS with <certs-dir>/public.crt and private.key
            let certs = dir.join("minio-certs");
            std::fs::create_dir_all(&certs).ctx(|| format!("create {}", certs.display()))?;
            std::fs::copy(cert, certs.join("public.crt")).ctx(|| "copy the certificate".into())?;
            std::fs::copy(key, certs.join("private.key")).ctx(|| "copy the key".into())?;
            cmd.arg("--certs-dir").arg(&certs);
            ca = Some(ca_cert.clone());
        }
        let process = ManagedProcess::spawn("minio", cmd, dir, watchdog)?;
        let scheme = if ca.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{}:{port}", crate::cluster::host_address());
        let endpoint = S3Endpoint {
            url: url.clone(),
            region: "us-east-1".into(),
            access_key,
            secret_key,
            ca,
        };
        let http = endpoint.http_client()?;
        let live = format!("{url}/minio/health/live");
        poll_until(
            "minio /minio/health/live",
            Duration::from_secs(60),
            Duration::from_millis(100),
            || async {
                process.check_running()?;
                let r = http
                    .get(&live)
                    .timeout(Duration::from_secs(5))
                    .send()
                    .await?;
                Ok(r.status().is_success().then_some(()))
            },
        )
        .await?;
        let start_duration = t0.elapsed();
        tracing::info!(?start_duration, url, "minio ready");
        Ok(Self {
            process,
            endpoint,
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
