//! A small storage abstraction for the file sink (and for anyone else who needs one, such as
//! checkpoint storage): a [`Store`] is rooted at a base path and addressed with relative keys
//! (`a/b/c`, always `/`-separated).
//!
//! Two commit protocols are supported, chosen by [`Store::supports_multipart`]:
//! - **multipart** (S3 and compatible): an in-progress object is a multipart upload; it becomes
//!   visible only when the upload is completed;
//! - **temp file + rename** (local file system): an in-progress file is a hidden temporary file that
//!   is renamed to its final name on commit.
//!
//! `object_store`'s `LocalFileSystem` and `LimitStore` do not implement `MultipartStore`, hence this
//! trait: [`LocalStore`], [`S3Store`] (wrapping `AmazonS3`, which does) and [`LimitedStore`] (the
//! reference's `fs.<scheme>.limit.*` connection limits, multipart included). [`open_store`] builds
//! the right one for a path and a manifest's [`StorageSpec`].

use std::fmt;
use std::io::SeekFrom;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::multipart::MultipartStore;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use streamjob_crds::units::parse_duration;
use streamjob_crds::v1alpha1::{ConnectionLimits, StorageSpec};
use tokio::io::{AsyncSeekExt, AsyncWriteExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{Error, Result};
use crate::retry::{RetryPolicy, STORE_RETRY, retry};
use crate::s3_api;

/// S3's minimum size of every part of a multipart upload but the last.
pub const MIN_PART_SIZE: usize = 5 * 1024 * 1024;

/// One object found by [`Store::list`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Key relative to the store's root.
    pub key: String,
    /// Size in bytes.
    pub size: u64,
}

/// An open (neither completed nor aborted) multipart upload found by
/// [`Store::list_multipart_uploads`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenUpload {
    /// Key relative to the store's root.
    pub key: String,
    /// Upload id.
    pub upload_id: String,
}

/// An open temporary file of the rename protocol.
#[async_trait]
pub trait TempFile: Send + fmt::Debug {
    /// Appends bytes.
    async fn write(&mut self, data: &[u8]) -> Result<()>;
    /// Makes everything written so far durable (fsync; hsync on HDFS).
    async fn sync(&mut self) -> Result<()>;
    /// Makes it durable and closes it (before it is renamed).
    async fn close(&mut self) -> Result<()> {
        self.sync().await
    }
}

/// Storage rooted at a base path, addressed with relative `/`-separated keys.
#[async_trait]
pub trait Store: Send + Sync + fmt::Debug {
    /// A human-readable description (URL of the root).
    fn describe(&self) -> String;
    /// True: in-progress files are multipart uploads. False: temp files renamed on commit.
    fn supports_multipart(&self) -> bool;
    /// How calls to this store are retried (by [`retry`], for errors its client did not retry).
    fn retry_policy(&self) -> RetryPolicy {
        STORE_RETRY
    }

    /// Writes a whole object atomically (readers see all or nothing).
    async fn put(&self, key: &str, data: Bytes) -> Result<()>;
    /// Reads a whole object.
    async fn get(&self, key: &str) -> Result<Bytes>;
    /// Size of an object, `None` if it does not exist.
    async fn head(&self, key: &str) -> Result<Option<u64>>;
    /// All objects under a key prefix (recursive), including hidden ones.
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>>;
    /// Deletes an object; deleting a missing object is not an error.
    async fn delete(&self, key: &str) -> Result<()>;

    /// Opens a temporary file for appending. `resume_len`: reopen an existing file, truncating it
    /// to this length (bytes written after the last durable snapshot are dropped).
    async fn open_temp(&self, key: &str, resume_len: Option<u64>) -> Result<Box<dyn TempFile>> {
        let _ = (key, resume_len);
        Err(Error::Unsupported {
            store: self.describe(),
            op: "temporary files",
        })
    }
    /// Renames `from` to `to` (creating parent directories). Fails with `NotFound` kind if `from`
    /// is missing; callers decide whether that means "already renamed".
    async fn rename(&self, from: &str, to: &str) -> Result<()> {
        let _ = (from, to);
        Err(Error::Unsupported {
            store: self.describe(),
            op: "rename",
        })
    }

    /// Copies `from` to `to` inside the store (S3 CopyObject: the destination appears whole or
    /// not at all, the source stays). Multipart stores only.
    async fn copy(&self, from: &str, to: &str) -> Result<()> {
        let _ = (from, to);
        Err(Error::Unsupported {
            store: self.describe(),
            op: "copy",
        })
    }

    /// Starts a multipart upload, returns its id.
    async fn create_multipart(&self, key: &str) -> Result<String> {
        let _ = key;
        Err(self.no_multipart())
    }
    /// Uploads part `part_idx` (0-based) and returns its etag.
    async fn put_part(
        &self,
        key: &str,
        upload_id: &str,
        part_idx: usize,
        data: Bytes,
    ) -> Result<String> {
        let _ = (key, upload_id, part_idx, data);
        Err(self.no_multipart())
    }
    /// Completes an upload with the etags of parts 0..n; the object becomes visible.
    async fn complete_multipart(&self, key: &str, upload_id: &str, etags: &[String]) -> Result<()> {
        let _ = (key, upload_id, etags);
        Err(self.no_multipart())
    }
    /// Aborts an upload, dropping its parts.
    async fn abort_multipart(&self, key: &str, upload_id: &str) -> Result<()> {
        let _ = (key, upload_id);
        Err(self.no_multipart())
    }

    /// Open multipart uploads whose key starts with `prefix` (a plain string prefix relative to
    /// the root; `""`: the whole store), S3 ListMultipartUploads. MinIO only answers for an exact
    /// object key. `Unsupported` on stores without multipart uploads or a way to list them.
    async fn list_multipart_uploads(&self, prefix: &str) -> Result<Vec<OpenUpload>> {
        let _ = prefix;
        Err(Error::Unsupported {
            store: self.describe(),
            op: "listing multipart uploads",
        })
    }

    /// The error for multipart calls on stores without them.
    fn no_multipart(&self) -> Error {
        Error::Unsupported {
            store: self.describe(),
            op: "multipart uploads",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Local file system
// ---------------------------------------------------------------------------------------------

/// A directory on the local file system.
#[derive(Clone, Debug)]
pub struct LocalStore {
    root: PathBuf,
    policy: RetryPolicy,
}

impl LocalStore {
    /// A store rooted at `root` (created on first write).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            policy: STORE_RETRY,
        }
    }

    /// Retries transient I/O errors under `policy` instead of [`STORE_RETRY`].
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The root directory.
    pub fn root(&self) -> &FsPath {
        &self.root
    }

    fn path(&self, key: &str) -> PathBuf {
        let mut p = self.root.clone();
        for part in key.split('/').filter(|s| !s.is_empty()) {
            p.push(part);
        }
        p
    }
}

fn io_err<'a>(op: &'static str, path: &'a FsPath) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        op,
        path: path.display().to_string(),
        source,
    }
}

async fn ensure_parent(path: &FsPath) -> Result<()> {
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(io_err("create_dir_all", parent))?;
    }
    Ok(())
}

#[derive(Debug)]
struct LocalTempFile {
    path: PathBuf,
    file: tokio::fs::File,
}

#[async_trait]
impl TempFile for LocalTempFile {
    async fn write(&mut self, data: &[u8]) -> Result<()> {
        self.file
            .write_all(data)
            .await
            .map_err(io_err("write", &self.path))
    }
    async fn sync(&mut self) -> Result<()> {
        self.file
            .flush()
            .await
            .map_err(io_err("flush", &self.path))?;
        self.file
            .sync_data()
            .await
            .map_err(io_err("fsync", &self.path))
    }
}

#[async_trait]
impl Store for LocalStore {
    fn describe(&self) -> String {
        format!("file://{}", self.root.display())
    }
    fn supports_multipart(&self) -> bool {
        false
    }
    fn retry_policy(&self) -> RetryPolicy {
        self.policy
    }

    async fn put(&self, key: &str, data: Bytes) -> Result<()> {
        let path = self.path(key);
        ensure_parent(&path).await?;
        let tmp = path.with_file_name(format!(
            ".{}.put.{}",
            path.file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("object"),
            uuid::Uuid::new_v4()
        ));
        let mut f = tokio::fs::File::create(&tmp)
            .await
            .map_err(io_err("create", &tmp))?;
        f.write_all(&data).await.map_err(io_err("write", &tmp))?;
        f.sync_data().await.map_err(io_err("fsync", &tmp))?;
        drop(f);
        tokio::fs::rename(&tmp, &path)
            .await
            .map_err(io_err("rename", &path))
    }

    async fn get(&self, key: &str) -> Result<Bytes> {
        let path = self.path(key);
        tokio::fs::read(&path)
            .await
            .map(Bytes::from)
            .map_err(io_err("read", &path))
    }

    async fn head(&self, key: &str) -> Result<Option<u64>> {
        let path = self.path(key);
        match tokio::fs::metadata(&path).await {
            Ok(m) if m.is_file() => Ok(Some(m.len())),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("stat", &path)(e)),
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let root = self.root.clone();
        let start = self.path(prefix);
        tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            let mut stack = vec![start];
            while let Some(dir) = stack.pop() {
                let entries = match std::fs::read_dir(&dir) {
                    Ok(e) => e,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(io_err("read_dir", &dir)(e)),
                };
                for entry in entries {
                    let entry = entry.map_err(io_err("read_dir", &dir))?;
                    let path = entry.path();
                    let meta = entry.metadata().map_err(io_err("stat", &path))?;
                    if meta.is_dir() {
                        stack.push(path);
                    } else if let Ok(rel) = path.strip_prefix(&root) {
                        let key = rel
                            .components()
                            .map(|c| c.as_os_str().to_string_lossy().into_owned())
                            .collect::<Vec<_>>()
                            .join("/");
                        out.push(ObjectInfo {
                            key,
                            size: meta.len(),
                        });
                    }
                }
            }
            out.sort_by(|a, b| a.key.cmp(&b.key));
            Ok(out)
        })
        .await
        .map_err(|e| Error::State(format!("list task failed: {e}")))?
    }

    async fn delete(&self, key: &str) -> Result<()> {
        let path = self.path(key);
        match tokio::fs::remove_file(&path).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err("remove", &path)(e)),
        }
    }

    async fn open_temp(&self, key: &str, resume_len: Option<u64>) -> Result<Box<dyn TempFile>> {
        let path = self.path(key);
        ensure_parent(&path).await?;
        let mut file = match resume_len {
            None => tokio::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
                .await
                .map_err(io_err("create", &path))?,
            Some(len) => {
                let mut f = tokio::fs::OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .await
                    .map_err(io_err("open", &path))?;
                let have = f.metadata().await.map_err(io_err("stat", &path))?.len();
                if have < len {
                    return Err(Error::DataLoss(format!(
                        "temporary file {} has {have} bytes, the checkpoint recorded {len}",
                        path.display()
                    )));
                }
                f.set_len(len).await.map_err(io_err("truncate", &path))?;
                f.seek(SeekFrom::Start(len))
                    .await
                    .map_err(io_err("seek", &path))?;
                f
            }
        };
        file.flush().await.map_err(io_err("flush", &path))?;
        Ok(Box::new(LocalTempFile { path, file }))
    }

    async fn rename(&self, from: &str, to: &str) -> Result<()> {
        let src = self.path(from);
        let dst = self.path(to);
        ensure_parent(&dst).await?;
        tokio::fs::rename(&src, &dst)
            .await
            .map_err(io_err("rename", &src))
    }
}

// ---------------------------------------------------------------------------------------------
// S3
// ---------------------------------------------------------------------------------------------

/// An S3 (or compatible) bucket and key prefix, through `object_store`'s `AmazonS3`.
#[derive(Debug)]
pub struct S3Store {
    inner: AmazonS3,
    bucket: String,
    prefix: String,
    endpoint: Option<S3Endpoint>,
    /// The policy the client was built with (its retries), and that of the signed listing.
    policy: RetryPolicy,
}

/// Where [`S3Store`] sends the requests `object_store` has no API for (ListMultipartUploads),
/// signed with the client's credentials.
#[derive(Clone, Debug)]
struct S3Endpoint {
    /// The configured endpoint; `None`: AWS (`https://s3.<region>.amazonaws.com`).
    url: Option<String>,
    region: String,
    virtual_hosted: bool,
}

impl S3Store {
    /// Wraps a configured client; keys are put under `prefix`. Without
    /// [`S3Store::with_endpoint`] open uploads cannot be listed.
    pub fn new(inner: AmazonS3, bucket: impl Into<String>, prefix: &str) -> Self {
        Self {
            inner,
            bucket: bucket.into(),
            prefix: prefix.trim_matches('/').to_string(),
            endpoint: None,
            policy: STORE_RETRY,
        }
    }

    /// The retry policy the client was built with ([`RetryPolicy::object_store`]).
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The endpoint, region and addressing style the client was built with (`endpoint`
    /// `None`: AWS), for the requests signed here (listing open multipart uploads).
    pub fn with_endpoint(
        mut self,
        endpoint: Option<&str>,
        region: &str,
        virtual_hosted: bool,
    ) -> Self {
        self.endpoint = Some(S3Endpoint {
            url: endpoint.map(|e| e.trim_end_matches('/').to_string()),
            region: region.to_string(),
            virtual_hosted,
        });
        self
    }

    /// One page of ListMultipartUploads: a SigV4-signed `GET ?uploads` (object_store signs
    /// only its own requests; see [`crate::s3_api`]).
    async fn signed_get(&self, ep: &S3Endpoint, query: &[(&str, &str)]) -> Result<String> {
        let fail = |source: object_store::Error| Error::Store {
            op: "list_multipart_uploads",
            path: self.describe(),
            retried: false,
            source,
        };
        let generic = |msg: String| object_store::Error::Generic {
            store: "S3",
            source: msg.into(),
        };
        let bucket = s3_api::uri_encode(&self.bucket, false);
        let (base, path) = match (&ep.url, ep.virtual_hosted) {
            // object_store's convention: a virtual-hosted endpoint already names the bucket
            (Some(url), true) => (url.clone(), "/".to_string()),
            (Some(url), false) => (url.clone(), format!("/{bucket}")),
            (None, true) => (
                format!("https://{}.s3.{}.amazonaws.com", self.bucket, ep.region),
                "/".to_string(),
            ),
            (None, false) => (
                format!("https://s3.{}.amazonaws.com", ep.region),
                format!("/{bucket}"),
            ),
        };
        let cred = self
            .inner
            .credentials()
            .get_credential()
            .await
            .map_err(fail)?;
        let client = reqwest::Client::builder()
            .timeout(self.policy.request_timeout)
            .connect_timeout(self.policy.connect_timeout)
            .build()
            .map_err(|e| fail(generic(format!("http client: {e}"))))?;
        let req = s3_api::request(
            &client,
            reqwest::Method::GET,
            &base,
            &path,
            query,
            &ep.region,
            &s3_api::Credentials {
                key_id: &cred.key_id,
                secret_key: &cred.secret_key,
                token: cred.token.as_deref(),
            },
        )
        .map_err(|e| fail(generic(e)))?;
        let resp = req.send().await.map_err(|e| fail(generic(e.to_string())))?;
        let status = resp.status();
        let body = resp
            .text()
            .await
            .map_err(|e| fail(generic(e.to_string())))?;
        if status.is_success() {
            Ok(body)
        } else if status.is_server_error() || status.as_u16() == 429 {
            Err(fail(generic(format!("HTTP {status}: {body}"))))
        } else {
            Err(fail(object_store::Error::NotSupported {
                source: format!("HTTP {status}: {body}").into(),
            }))
        }
    }

    fn path(&self, key: &str) -> ObjPath {
        let key = key.trim_matches('/');
        if self.prefix.is_empty() {
            ObjPath::from(key)
        } else if key.is_empty() {
            ObjPath::from(self.prefix.as_str())
        } else {
            ObjPath::from(format!("{}/{}", self.prefix, key))
        }
    }

    fn err<'a>(
        op: &'static str,
        path: &'a ObjPath,
    ) -> impl FnOnce(object_store::Error) -> Error + 'a {
        move |source| Error::Store {
            op,
            path: path.to_string(),
            retried: true,
            source,
        }
    }
}

#[async_trait]
impl Store for S3Store {
    fn describe(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.prefix)
    }
    fn supports_multipart(&self) -> bool {
        true
    }
    fn retry_policy(&self) -> RetryPolicy {
        self.policy
    }

    async fn put(&self, key: &str, data: Bytes) -> Result<()> {
        let p = self.path(key);
        self.inner
            .put(&p, PutPayload::from(data))
            .await
            .map(|_| ())
            .map_err(Self::err("put", &p))
    }

    async fn get(&self, key: &str) -> Result<Bytes> {
        let p = self.path(key);
        let r = self.inner.get(&p).await.map_err(Self::err("get", &p))?;
        r.bytes().await.map_err(Self::err("get", &p))
    }

    async fn head(&self, key: &str) -> Result<Option<u64>> {
        let p = self.path(key);
        match self.inner.head(&p).await {
            Ok(m) => Ok(Some(m.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(Self::err("head", &p)(e)),
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let p = self.path(prefix);
        let strip = if self.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", self.prefix)
        };
        let metas: Vec<_> = self
            .inner
            .list(Some(&p))
            .try_collect()
            .await
            .map_err(Self::err("list", &p))?;
        let mut out: Vec<ObjectInfo> = metas
            .into_iter()
            .map(|m| {
                let full = m.location.to_string();
                ObjectInfo {
                    key: full.strip_prefix(&strip).unwrap_or(&full).to_string(),
                    size: m.size,
                }
            })
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    async fn delete(&self, key: &str) -> Result<()> {
        let p = self.path(key);
        match self.inner.delete(&p).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(Self::err("delete", &p)(e)),
        }
    }

    async fn copy(&self, from: &str, to: &str) -> Result<()> {
        let (f, t) = (self.path(from), self.path(to));
        self.inner.copy(&f, &t).await.map_err(Self::err("copy", &f))
    }

    async fn create_multipart(&self, key: &str) -> Result<String> {
        let p = self.path(key);
        self.inner
            .create_multipart(&p)
            .await
            .map_err(Self::err("create_multipart", &p))
    }

    async fn put_part(
        &self,
        key: &str,
        upload_id: &str,
        part_idx: usize,
        data: Bytes,
    ) -> Result<String> {
        let p = self.path(key);
        let id = upload_id.to_string();
        self.inner
            .put_part(&p, &id, part_idx, PutPayload::from(data))
            .await
            .map(|part| part.content_id)
            .map_err(Self::err("put_part", &p))
    }

    async fn complete_multipart(&self, key: &str, upload_id: &str, etags: &[String]) -> Result<()> {
        let p = self.path(key);
        let id = upload_id.to_string();
        let parts = etags
            .iter()
            .map(|e| object_store::multipart::PartId {
                content_id: e.clone(),
            })
            .collect();
        self.inner
            .complete_multipart(&p, &id, parts)
            .await
            .map(|_| ())
            .map_err(Self::err("complete_multipart", &p))
    }

    async fn abort_multipart(&self, key: &str, upload_id: &str) -> Result<()> {
        let p = self.path(key);
        let id = upload_id.to_string();
        self.inner
            .abort_multipart(&p, &id)
            .await
            .map_err(Self::err("abort_multipart", &p))
    }

    async fn list_multipart_uploads(&self, prefix: &str) -> Result<Vec<OpenUpload>> {
        let Some(ep) = self.endpoint.clone() else {
            return Err(Error::Unsupported {
                store: self.describe(),
                op: "listing multipart uploads (no endpoint configured)",
            });
        };
        // a plain string prefix below the root (`""`: everything under the root)
        let full = match (self.prefix.is_empty(), prefix.trim_start_matches('/')) {
            (true, p) => p.to_string(),
            (false, p) => format!("{}/{p}", self.prefix),
        };
        let strip = if self.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", self.prefix)
        };
        let fetch = |query: Vec<(&'static str, String)>| {
            let ep = &ep;
            async move {
                let query: Vec<(&str, &str)> =
                    query.iter().map(|(k, v)| (*k, v.as_str())).collect();
                retry("list_multipart_uploads", self.retry_policy(), || {
                    self.signed_get(ep, &query)
                })
                .await
            }
        };
        let unreadable = |message: String| Error::Store {
            op: "list_multipart_uploads",
            path: self.describe(),
            retried: false,
            source: object_store::Error::Generic {
                store: "S3",
                source: message.into(),
            },
        };
        let uploads = s3_api::list_uploads(&full, fetch, unreadable).await?;
        Ok(uploads
            .into_iter()
            .map(|u| OpenUpload {
                key: u.key.strip_prefix(&strip).unwrap_or(&u.key).to_string(),
                upload_id: u.upload_id,
            })
            .collect())
    }
}

// ---------------------------------------------------------------------------------------------
// Connection limits
// ---------------------------------------------------------------------------------------------

/// Connection limits around any [`Store`] (multipart included): at most `total` requests at once,
/// of which at most `input` reads and `output` writes; a request that cannot get a slot within
/// `timeout` fails with [`Error::ConnectionTimeout`] (a transient error: callers retry).
/// Writes to an open temporary file are local and not limited; opening one is.
#[derive(Debug)]
pub struct LimitedStore {
    inner: Arc<dyn Store>,
    total: Option<Arc<Semaphore>>,
    input: Option<Arc<Semaphore>>,
    output: Option<Arc<Semaphore>>,
    timeout: Option<Duration>,
}

struct Permits(
    #[allow(dead_code)] Option<OwnedSemaphorePermit>,
    #[allow(dead_code)] Option<OwnedSemaphorePermit>,
);

impl LimitedStore {
    /// Wraps `inner` with the manifest's limits.
    pub fn new(inner: Arc<dyn Store>, limits: &ConnectionLimits) -> Result<Self> {
        let sem = |n: Option<u32>| n.map(|n| Arc::new(Semaphore::new(n.max(1) as usize)));
        let timeout = limits
            .timeout
            .as_deref()
            .map(|t| parse_duration("storage.limits.timeout", t))
            .transpose()?
            .filter(|d| !d.is_zero());
        Ok(Self {
            inner,
            total: sem(limits.max_connections),
            input: sem(limits.max_input_connections),
            output: sem(limits.max_output_connections),
            timeout,
        })
    }

    async fn acquire_one(
        &self,
        sem: &Option<Arc<Semaphore>>,
        kind: &'static str,
    ) -> Result<Option<OwnedSemaphorePermit>> {
        let Some(sem) = sem else { return Ok(None) };
        let fut = sem.clone().acquire_owned();
        let permit = match self.timeout {
            Some(t) => tokio::time::timeout(t, fut)
                .await
                .map_err(|_| Error::ConnectionTimeout { timeout: t, kind })?,
            None => fut.await,
        };
        permit
            .map(Some)
            .map_err(|_| Error::State("connection limiter closed".into()))
    }

    async fn acquire(&self, write: bool) -> Result<Permits> {
        // Kind first, then total: a request waiting for a write slot does not hold a total slot.
        let kind = if write {
            self.acquire_one(&self.output, "output").await?
        } else {
            self.acquire_one(&self.input, "input").await?
        };
        let total = self.acquire_one(&self.total, "total").await?;
        Ok(Permits(kind, total))
    }
}

#[async_trait]
impl Store for LimitedStore {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn supports_multipart(&self) -> bool {
        self.inner.supports_multipart()
    }
    fn retry_policy(&self) -> RetryPolicy {
        self.inner.retry_policy()
    }
    async fn put(&self, key: &str, data: Bytes) -> Result<()> {
        let _p = self.acquire(true).await?;
        self.inner.put(key, data).await
    }
    async fn get(&self, key: &str) -> Result<Bytes> {
        let _p = self.acquire(false).await?;
        self.inner.get(key).await
    }
    async fn head(&self, key: &str) -> Result<Option<u64>> {
        let _p = self.acquire(false).await?;
        self.inner.head(key).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let _p = self.acquire(false).await?;
        self.inner.list(prefix).await
    }
    async fn delete(&self, key: &str) -> Result<()> {
        let _p = self.acquire(true).await?;
        self.inner.delete(key).await
    }
    async fn open_temp(&self, key: &str, resume_len: Option<u64>) -> Result<Box<dyn TempFile>> {
        let _p = self.acquire(true).await?;
        self.inner.open_temp(key, resume_len).await
    }
    async fn rename(&self, from: &str, to: &str) -> Result<()> {
        let _p = self.acquire(true).await?;
        self.inner.rename(from, to).await
    }
    async fn copy(&self, from: &str, to: &str) -> Result<()> {
        let _p = self.acquire(true).await?;
        self.inner.copy(from, to).await
    }
    async fn create_multipart(&self, key: &str) -> Result<String> {
        let _p = self.acquire(true).await?;
        self.inner.create_multipart(key).await
    }
    async fn put_part(
        &self,
        key: &str,
        upload_id: &str,
        part_idx: usize,
        data: Bytes,
    ) -> Result<String> {
        let _p = self.acquire(true).await?;
        self.inner.put_part(key, upload_id, part_idx, data).await
    }
    async fn complete_multipart(&self, key: &str, upload_id: &str, etags: &[String]) -> Result<()> {
        let _p = self.acquire(true).await?;
        self.inner.complete_multipart(key, upload_id, etags).await
    }
    async fn abort_multipart(&self, key: &str, upload_id: &str) -> Result<()> {
        let _p = self.acquire(true).await?;
        self.inner.abort_multipart(key, upload_id).await
    }
    async fn list_multipart_uploads(&self, prefix: &str) -> Result<Vec<OpenUpload>> {
        let _p = self.acquire(false).await?;
        self.inner.list_multipart_uploads(prefix).await
    }
}

// ---------------------------------------------------------------------------------------------
// Construction from a manifest
// ---------------------------------------------------------------------------------------------

#[cfg(feature = "hdfs")]
fn open_hdfs(
    rest: &str,
    storage: Option<&StorageSpec>,
    policy: RetryPolicy,
) -> Result<Arc<dyn Store>> {
    // hdfs://namenode:port/path, or hdfs:///path with storage.hdfs.nameNode
    let (authority, dir) = rest.split_once('/').unwrap_or((rest, ""));
    let name_node = if authority.is_empty() {
        storage
            .and_then(|s| s.hdfs.as_ref())
            .map(|h| h.name_node.clone())
            .ok_or_else(|| Error::Config("hdfs:///path needs storage.hdfs.nameNode".into()))?
    } else {
        format!("hdfs://{authority}")
    };
    Ok(Arc::new(
        crate::hdfs::HdfsStore::new(&name_node, dir)?.with_retry_policy(policy),
    ))
}

#[cfg(not(feature = "hdfs"))]
fn open_hdfs(
    rest: &str,
    _storage: Option<&StorageSpec>,
    _policy: RetryPolicy,
) -> Result<Arc<dyn Store>> {
    Err(Error::Config(format!(
        "hdfs://{rest}: this build of the file sink has no HDFS support (feature `hdfs`)"
    )))
}

/// Splits `s3://bucket/prefix` into bucket and prefix.
pub fn parse_s3_url(url: &str) -> Result<(String, String)> {
    let rest = url
        .strip_prefix("s3://")
        .or_else(|| url.strip_prefix("s3a://"))
        .ok_or_else(|| Error::Config(format!("not an s3:// URL: {url}")))?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(Error::Config(format!("no bucket in {url}")));
    }
    Ok((bucket.to_string(), prefix.trim_matches('/').to_string()))
}

/// Builds the store rooted at `path`: `s3://bucket/prefix` (S3 settings from `storage.s3`,
/// credentials from the environment variables `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`,
/// which the operator fills from the credentials Secret), `file:///dir` or a plain local path.
/// `storage.limits`, when set, wraps the store in a [`LimitedStore`].
pub fn open_store(path: &str, storage: Option<&StorageSpec>) -> Result<Arc<dyn Store>> {
    let policy = RetryPolicy::for_storage(storage)?;
    let base: Arc<dyn Store> = if path.starts_with("s3://") || path.starts_with("s3a://") {
        let (bucket, prefix) = parse_s3_url(path)?;
        let s3 = storage.and_then(|s| s.s3.clone()).unwrap_or_default();
        let mut b = AmazonS3Builder::new()
            .with_bucket_name(&bucket)
            .with_allow_http(s3.allow_http)
            .with_virtual_hosted_style_request(s3.virtual_hosted_style)
            .with_region(s3.region.clone().unwrap_or_else(|| "us-east-1".into()))
            .with_retry(policy.object_store())
            .with_client_options(policy.client_options(s3.allow_http));
        if let Some(ep) = &s3.endpoint {
            b = b.with_endpoint(ep);
        }
        if let Ok(k) = std::env::var("AWS_ACCESS_KEY_ID") {
            b = b.with_access_key_id(k);
        }
        if let Ok(k) = std::env::var("AWS_SECRET_ACCESS_KEY") {
            b = b.with_secret_access_key(k);
        }
        let client = b.build().map_err(|e| Error::Store {
            op: "configure",
            path: path.to_string(),
            retried: false,
            source: e,
        })?;
        let region = s3.region.clone().unwrap_or_else(|| "us-east-1".into());
        Arc::new(
            S3Store::new(client, bucket, &prefix)
                .with_endpoint(s3.endpoint.as_deref(), &region, s3.virtual_hosted_style)
                .with_retry_policy(policy),
        )
    } else if let Some(rest) = path.strip_prefix("hdfs://") {
        open_hdfs(rest, storage, policy)?
    } else if let Some(local) = path.strip_prefix("file://") {
        Arc::new(LocalStore::new(local).with_retry_policy(policy))
    } else if path.contains("://") {
        return Err(Error::Config(format!("{path}: unsupported scheme")));
    } else {
        Arc::new(LocalStore::new(path).with_retry_policy(policy))
    };
    match storage.and_then(|s| s.limits.as_ref()) {
        Some(limits) => Ok(Arc::new(LimitedStore::new(base, limits)?)),
        None => Ok(base),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_s3_urls() {
        assert_eq!(
            parse_s3_url("s3://b/x/y/").unwrap(),
            ("b".to_string(), "x/y".to_string())
        );
        assert_eq!(
            parse_s3_url("s3://b").unwrap(),
            ("b".to_string(), String::new())
        );
        assert!(parse_s3_url("s3:///x").is_err());
    }

    #[tokio::test]
    async fn local_store_basics_and_temp_resume() {
        let dir = tempfile::tempdir().unwrap();
        let s = LocalStore::new(dir.path());
        s.put("a/b/c.txt", Bytes::from_static(b"hello"))
            .await
            .unwrap();
        assert_eq!(s.head("a/b/c.txt").await.unwrap(), Some(5));
        assert_eq!(s.head("a/missing").await.unwrap(), None);
        let mut t = s.open_temp("a/.t", None).await.unwrap();
        t.write(b"0123456789").await.unwrap();
        t.sync().await.unwrap();
        drop(t);
        let mut t = s.open_temp("a/.t", Some(4)).await.unwrap();
        t.write(b"xy").await.unwrap();
        t.sync().await.unwrap();
        assert_eq!(&s.get("a/.t").await.unwrap()[..], b"0123xy");
        assert!(matches!(
            s.open_temp("a/.t", Some(100)).await,
            Err(Error::DataLoss(_))
        ));
        s.rename("a/.t", "z/final").await.unwrap();
        let keys: Vec<_> = s
            .list("")
            .await
            .unwrap()
            .into_iter()
            .map(|o| o.key)
            .collect();
        assert_eq!(keys, vec!["a/b/c.txt".to_string(), "z/final".to_string()]);
        s.delete("z/final").await.unwrap();
        s.delete("z/final").await.unwrap();
        assert!(s.create_multipart("x").await.is_err());
    }

    #[tokio::test]
    async fn limited_store_times_out_when_full() {
        let dir = tempfile::tempdir().unwrap();
        let inner: Arc<dyn Store> = Arc::new(LocalStore::new(dir.path()));
        let limits = ConnectionLimits {
            max_connections: Some(1),
            max_input_connections: None,
            max_output_connections: Some(1),
            timeout: Some("50ms".into()),
        };
        let s = LimitedStore::new(inner, &limits).unwrap();
        let held = s.acquire(true).await.unwrap();
        let err = s.put("k", Bytes::from_static(b"v")).await.unwrap_err();
        assert!(matches!(err, Error::ConnectionTimeout { .. }));
        assert!(err.is_transient());
        drop(held);
        s.put("k", Bytes::from_static(b"v")).await.unwrap();
        assert_eq!(s.head("k").await.unwrap(), Some(1));
    }
}
