//! HDFS through `hdfs-native` (feature `hdfs`): the rename protocol with hsync at checkpoints.
//! HDFS has no truncate here: resuming a temporary file longer than its checkpointed length
//! rewrites its first `len` bytes into a fresh file (what Flink does on old Hadoop versions).

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use hdfs_native::client::FileStatus;
use hdfs_native::file::FileWriter;
use hdfs_native::{Client, ClientBuilder, HdfsError, WriteOptions};

use crate::error::{Error, Result};
use crate::retry::{RetryPolicy, STORE_RETRY};
use crate::store::{ObjectInfo, Store, TempFile};

/// A directory in HDFS.
pub struct HdfsStore {
    client: Arc<Client>,
    url: String,
    root: String,
    policy: RetryPolicy,
}

impl std::fmt::Debug for HdfsStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HdfsStore")
            .field("url", &self.url)
            .field("root", &self.root)
            .field("policy", &self.policy)
            .finish()
    }
}

/// Whether the file or directory does not exist. The name node answers some calls (a read of a
/// missing file) with the Java exception itself rather than an empty answer.
fn is_missing(e: &HdfsError) -> bool {
    match e {
        HdfsError::FileNotFound(_) => true,
        HdfsError::RPCError(class, _) => class.ends_with("FileNotFoundException"),
        _ => false,
    }
}

fn herr(op: &'static str, path: &str) -> impl FnOnce(HdfsError) -> Error {
    let path = path.to_string();
    move |e| match e {
        e if is_missing(&e) => Error::NotFound { op, path },
        e => Error::Hdfs {
            op,
            path,
            transient: matches!(e, HdfsError::IOError(_) | HdfsError::DataTransferError(_)),
            message: e.to_string(),
        },
    }
}

/// A fresh hidden name next to `path` (`dir/.name.put.<uuid>`): a whole object is written there
/// first and renamed, and listings that skip hidden names never see a half-written one.
fn hidden_sibling(path: &str) -> String {
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
    format!("{dir}/.{name}.put.{}", uuid::Uuid::new_v4().simple())
}

impl HdfsStore {
    /// `name_node`: `hdfs://host:port`; `root`: absolute directory path.
    pub fn new(name_node: &str, root: &str) -> Result<Self> {
        let client = ClientBuilder::new()
            .with_url(name_node)
            .build()
            .map_err(herr("connect", name_node))?;
        Ok(Self {
            client: Arc::new(client),
            url: name_node.to_string(),
            root: format!("/{}", root.trim_matches('/')),
            policy: STORE_RETRY,
        })
    }

    /// Retries transient HDFS errors under `policy` instead of [`STORE_RETRY`].
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    fn path(&self, key: &str) -> String {
        let key = key.trim_matches('/');
        match (self.root.as_str(), key.is_empty()) {
            ("/", _) => format!("/{key}"),
            (r, true) => r.to_string(),
            (r, false) => format!("{r}/{key}"),
        }
    }

    async fn info(&self, path: &str) -> Result<Option<FileStatus>> {
        match self.client.get_file_info(path).await {
            Ok(s) => Ok(Some(s)),
            Err(e) if is_missing(&e) => Ok(None),
            Err(e) => Err(herr("stat", path)(e)),
        }
    }

    async fn create(&self, path: &str, overwrite: bool) -> Result<FileWriter> {
        let opts = WriteOptions::default()
            .overwrite(overwrite)
            .create_parent(true);
        self.client
            .create(path, opts)
            .await
            .map_err(herr("create", path))
    }
}

struct HdfsTemp {
    path: String,
    writer: FileWriter,
}

impl std::fmt::Debug for HdfsTemp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HdfsTemp")
            .field("path", &self.path)
            .finish()
    }
}

#[async_trait]
impl TempFile for HdfsTemp {
    async fn write(&mut self, data: &[u8]) -> Result<()> {
        self.writer
            .write_bytes(Bytes::copy_from_slice(data))
            .await
            .map(|_| ())
            .map_err(herr("write", &self.path))
    }
    async fn sync(&mut self) -> Result<()> {
        self.writer.hsync().await.map_err(herr("hsync", &self.path))
    }
    async fn close(&mut self) -> Result<()> {
        self.writer.close().await.map_err(herr("close", &self.path))
    }
}

#[async_trait]
impl Store for HdfsStore {
    fn describe(&self) -> String {
        format!("{}{}", self.url, self.root)
    }
    fn supports_multipart(&self) -> bool {
        false
    }
    fn retry_policy(&self) -> RetryPolicy {
        self.policy
    }
    async fn put(&self, key: &str, data: Bytes) -> Result<()> {
        let path = self.path(key);
        let tmp = hidden_sibling(&path);
        let mut w = self.create(&tmp, true).await?;
        w.write_bytes(data).await.map_err(herr("write", &tmp))?;
        w.close().await.map_err(herr("close", &tmp))?;
        self.client
            .rename(&tmp, &path, true)
            .await
            .map_err(herr("rename", &path))
    }
    async fn put_new(&self, key: &str, data: Bytes) -> Result<bool> {
        // write aside, then rename without overwrite: the name appears whole, or not at all
        let path = self.path(key);
        let tmp = hidden_sibling(&path);
        let mut w = self.create(&tmp, true).await?;
        w.write_bytes(data).await.map_err(herr("write", &tmp))?;
        w.close().await.map_err(herr("close", &tmp))?;
        let renamed = self.client.rename(&tmp, &path, false).await;
        if renamed.is_ok() {
            return Ok(true);
        }
        let _ = self.client.delete(&tmp, false).await;
        match (renamed, self.info(&path).await?) {
            (_, Some(_)) => Ok(false),
            (Err(e), None) => Err(herr("rename", &path)(e)),
            (Ok(()), None) => Ok(true),
        }
    }
    async fn get(&self, key: &str) -> Result<Bytes> {
        let path = self.path(key);
        let r = self.client.read(&path).await.map_err(herr("open", &path))?;
        r.read_range(0, r.file_length())
            .await
            .map_err(herr("read", &path))
    }
    async fn get_range(&self, key: &str, range: std::ops::Range<u64>) -> Result<Bytes> {
        let path = self.path(key);
        let r = self.client.read(&path).await.map_err(herr("open", &path))?;
        r.read_range(
            range.start as usize,
            range.end.saturating_sub(range.start) as usize,
        )
        .await
        .map_err(herr("read", &path))
    }
    async fn list_dirs(&self, dir: &str) -> Result<Vec<String>> {
        let path = self.path(dir);
        let statuses = match self.client.list_status(&path, false).await {
            Ok(s) => s,
            Err(e) if is_missing(&e) => return Ok(Vec::new()),
            Err(e) => return Err(herr("list", &path)(e)),
        };
        let mut names: Vec<String> = statuses
            .into_iter()
            .filter(|s| s.isdir)
            .filter_map(|s| s.path.rsplit('/').next().map(str::to_string))
            .filter(|n| !n.is_empty())
            .collect();
        names.sort();
        Ok(names)
    }
    async fn delete_dir(&self, dir: &str) -> Result<()> {
        let path = self.path(dir);
        match self.client.delete(&path, true).await {
            Ok(_) => Ok(()),
            Err(e) if is_missing(&e) => Ok(()),
            Err(e) => Err(herr("delete", &path)(e)),
        }
    }
    async fn head(&self, key: &str) -> Result<Option<u64>> {
        let path = self.path(key);
        Ok(self
            .info(&path)
            .await?
            .filter(|s| !s.isdir)
            .map(|s| s.length as u64))
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let path = self.path(prefix);
        let statuses = match self.client.list_status(&path, true).await {
            Ok(s) => s,
            Err(e) if is_missing(&e) => return Ok(Vec::new()),
            Err(e) => return Err(herr("list", &path)(e)),
        };
        let strip = if self.root == "/" {
            "/".to_string()
        } else {
            format!("{}/", self.root)
        };
        let mut out: Vec<ObjectInfo> = statuses
            .into_iter()
            .filter(|s| !s.isdir)
            .map(|s| {
                let full = if s.path.starts_with('/') {
                    s.path.clone()
                } else {
                    format!("{path}/{}", s.path)
                };
                ObjectInfo {
                    key: full.strip_prefix(&strip).unwrap_or(&full).to_string(),
                    size: s.length as u64,
                }
            })
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }
    async fn delete(&self, key: &str) -> Result<()> {
        let path = self.path(key);
        match self.client.delete(&path, false).await {
            Ok(_) => Ok(()),
            Err(e) if is_missing(&e) => Ok(()),
            Err(e) => Err(herr("delete", &path)(e)),
        }
    }
    async fn open_temp(&self, key: &str, resume_len: Option<u64>) -> Result<Box<dyn TempFile>> {
        let path = self.path(key);
        let writer = match resume_len {
            None => self.create(&path, false).await?,
            Some(len) => {
                // the crashed writer still holds the lease: recover it (closes the file)
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
                while !self
                    .client
                    .recover_lease(&path)
                    .await
                    .map_err(herr("recover_lease", &path))?
                {
                    if std::time::Instant::now() > deadline {
                        return Err(Error::Hdfs {
                            op: "recover_lease",
                            path,
                            transient: true,
                            message: "lease recovery did not finish".into(),
                        });
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
                let have = self
                    .info(&path)
                    .await?
                    .map(|s| s.length as u64)
                    .unwrap_or(0);
                if have < len {
                    return Err(Error::DataLoss(format!(
                        "temporary file {path} has {have} bytes, the checkpoint recorded {len}"
                    )));
                }
                if have == len {
                    self.client
                        .append(&path)
                        .await
                        .map_err(herr("append", &path))?
                } else {
                    let r = self.client.read(&path).await.map_err(herr("open", &path))?;
                    let head = r
                        .read_range(0, len as usize)
                        .await
                        .map_err(herr("read", &path))?;
                    let mut w = self.create(&path, true).await?;
                    w.write_bytes(head).await.map_err(herr("write", &path))?;
                    w.hsync().await.map_err(herr("hsync", &path))?;
                    w
                }
            }
        };
        Ok(Box::new(HdfsTemp { path, writer }))
    }
    async fn rename(&self, from: &str, to: &str) -> Result<()> {
        let src = self.path(from);
        let dst = self.path(to);
        if let Some(parent) = dst
            .rsplit_once('/')
            .map(|(p, _)| p)
            .filter(|p| !p.is_empty())
        {
            self.client
                .mkdirs(parent, 0o755, true)
                .await
                .map_err(herr("mkdirs", parent))?;
        }
        self.client
            .rename(&src, &dst, false)
            .await
            .map_err(herr("rename", &src))
    }
}
