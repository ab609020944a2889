//! The local file system: the temp file + rename protocol, every write fsynced.

use std::io::SeekFrom;
use std::ops::Range;
use std::path::{Path as FsPath, PathBuf};

use async_trait::async_trait;
use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use super::{ObjectInfo, Store, TempFile};
use crate::error::{Error, Result};
use crate::retry::{RetryPolicy, STORE_RETRY};

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

/// Writes `data` to a fresh hidden file next to `path` and fsyncs it; returns its path.
async fn write_hidden_copy(path: &FsPath, data: &[u8]) -> Result<PathBuf> {
    ensure_parent(path).await?;
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
    f.write_all(data).await.map_err(io_err("write", &tmp))?;
    f.sync_data().await.map_err(io_err("fsync", &tmp))?;
    Ok(tmp)
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
        let tmp = write_hidden_copy(&path, &data).await?;
        tokio::fs::rename(&tmp, &path)
            .await
            .map_err(io_err("rename", &path))
    }

    async fn put_new(&self, key: &str, data: Bytes) -> Result<bool> {
        // a hard link fails when the name exists: the object appears whole, or not at all
        let path = self.path(key);
        let tmp = write_hidden_copy(&path, &data).await?;
        let linked = tokio::fs::hard_link(&tmp, &path).await;
        let _ = tokio::fs::remove_file(&tmp).await;
        match linked {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(io_err("link", &path)(e)),
        }
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        let path = self.path(key);
        let mut f = tokio::fs::File::open(&path)
            .await
            .map_err(io_err("open", &path))?;
        f.seek(SeekFrom::Start(range.start))
            .await
            .map_err(io_err("seek", &path))?;
        let mut buf = vec![0; range.end.saturating_sub(range.start) as usize];
        f.read_exact(&mut buf)
            .await
            .map_err(io_err("read", &path))?;
        Ok(Bytes::from(buf))
    }

    async fn list_dirs(&self, dir: &str) -> Result<Vec<String>> {
        let path = self.path(dir);
        let mut entries = match tokio::fs::read_dir(&path).await {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err("read_dir", &path)(e)),
        };
        let mut names = Vec::new();
        while let Some(entry) = entries
            .next_entry()
            .await
            .map_err(io_err("read_dir", &path))?
        {
            let is_dir = entry
                .file_type()
                .await
                .map_err(io_err("stat", &entry.path()))?
                .is_dir();
            if is_dir {
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    async fn delete_dir(&self, dir: &str) -> Result<()> {
        let path = self.path(dir);
        match tokio::fs::remove_dir_all(&path).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err("remove_dir_all", &path)(e)),
        }
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
