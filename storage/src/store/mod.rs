//! The one storage layer of the project: checkpoints, savepoints, the files source, dead letters
//! and the file sink all read and write through a [`Store`], rooted at a base path and addressed
//! with relative keys (`a/b/c`, always `/`-separated).
//!
//! Two commit protocols are supported, chosen by [`Store::supports_multipart`]:
//! - **multipart** (S3 and compatible, Azure: [`CloudStore`]; GCS: [`GcsStore`]):
//!   an in-progress object is a set of uploaded parts; it becomes visible only when the upload is
//!   completed;
//! - **temp file + rename** (local file system, HDFS): an in-progress file is a hidden temporary
//!   file that is renamed to its final name on commit.
//!
//! `object_store`'s `LocalFileSystem` and `LimitStore` do not implement `MultipartStore`, hence this
//! trait: [`LocalStore`], [`CloudStore`] (S3, Azure), [`GcsStore`], `HdfsStore` (feature
//! `hdfs`), [`LimitedStore`] (the reference's `fs.<scheme>.limit.*` connection limits, multipart
//! included) and [`Prefixed`] (a view below a path). [`open_store`] builds the right one for a URL
//! and a manifest's [`StorageSpec`], with one client and one set of connection limits per store
//! and process ([`registry`]).

use std::fmt;
use std::ops::Range;

use async_trait::async_trait;
use bytes::Bytes;

use crate::error::{Error, Result};
use crate::retry::{RetryPolicy, STORE_RETRY};

mod cloud;
mod gcs;
mod limits;
mod local;
mod prefixed;
pub mod registry;
mod s3;
#[cfg(test)]
mod tests;

pub use cloud::CloudStore;
pub use gcs::{GcsStore, IN_PROGRESS as GCS_IN_PROGRESS};
pub use limits::{ConnectionGate, LimitedStore};
pub use local::LocalStore;
pub use prefixed::Prefixed;
pub use registry::{open, open_store, parse_s3_url};

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
    /// Creates an object only if none exists at `key`, atomically (readers see all of it or
    /// nothing): `false` when one already exists. Fencing relies on it.
    async fn put_new(&self, key: &str, data: Bytes) -> Result<bool>;
    /// Reads a whole object ([`Error::is_not_found`] when there is none).
    async fn get(&self, key: &str) -> Result<Bytes>;
    /// Reads the bytes `range` of an object (the files source reads large files in chunks).
    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        let all = self.get(key).await?;
        let (start, end) = (range.start as usize, range.end as usize);
        if start > end || end > all.len() {
            return Err(Error::State(format!(
                "{}/{key}: range {start}..{end} outside its {} bytes",
                self.describe(),
                all.len()
            )));
        }
        Ok(all.slice(start..end))
    }
    /// Size of an object, `None` if it does not exist.
    async fn head(&self, key: &str) -> Result<Option<u64>>;
    /// All objects under a key prefix (recursive), including hidden ones.
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>>;
    /// Names of the immediate sub-directories (common prefixes) of the directory `dir`.
    async fn list_dirs(&self, dir: &str) -> Result<Vec<String>> {
        let dir = dir.trim_matches('/');
        let base = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let mut names: Vec<String> = self
            .list(&base)
            .await?
            .into_iter()
            .filter_map(|o| {
                let rest = o.key.strip_prefix(&base)?;
                rest.split_once('/').map(|(first, _)| first.to_string())
            })
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }
    /// Deletes an object; deleting a missing object is not an error.
    async fn delete(&self, key: &str) -> Result<()>;
    /// Deletes everything below the directory `dir` (missing objects are fine).
    async fn delete_dir(&self, dir: &str) -> Result<()> {
        let dir = dir.trim_matches('/');
        for object in self.list(&format!("{dir}/")).await? {
            self.delete(&object.key).await?;
        }
        Ok(())
    }

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
