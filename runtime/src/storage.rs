//! Where the runtime keeps and reads files: checkpoints, savepoints, fence records, dead letters
//! and the files source. A [`Location`] is a directory of the project's one storage layer
//! ([`streamjob_storage::store`]), which the file sink writes through too: `s3://bucket/prefix`,
//! `hdfs://namenode:port/path`, `file:///abs/path` and plain local paths, one client per store
//! and process, the connection limits of `storage.limits` shared by every reader and writer.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use streamjob_crds::v1alpha1::StorageSpec;
use streamjob_storage::retry::retry;
use streamjob_storage::store::{Prefixed, Store, open};

use crate::error::{Error, Result};

/// A directory in a store.
#[derive(Clone, Debug)]
pub struct Location {
    store: Prefixed,
    /// How the user wrote it (used in messages and returned paths), without a trailing `/`.
    display: String,
}

impl Location {
    /// Parses `s3://bucket/prefix`, `hdfs://namenode:port/path`, `file:///path` or a local path
    /// (a local directory is created if missing).
    pub fn parse(location: &str, storage: Option<&StorageSpec>) -> Result<Self> {
        let trimmed = location.trim_end_matches('/');
        if !trimmed.contains("://") || trimmed.starts_with("file://") {
            let local = trimmed.strip_prefix("file://").unwrap_or(trimmed);
            std::fs::create_dir_all(if local.is_empty() { "/" } else { local })?;
        }
        let store =
            open(trimmed, storage).map_err(|e| Error::Location(location.into(), e.to_string()))?;
        Ok(Self {
            store,
            display: trimmed.to_string(),
        })
    }

    /// A location on a store built by a test (one that misbehaves, say).
    #[cfg(test)]
    pub(crate) fn on_store(store: Arc<dyn Store>, display: &str) -> Self {
        Self {
            store: Prefixed::new(store, ""),
            display: display.to_string(),
        }
    }

    /// A sub-directory.
    pub fn child(&self, rel: &str) -> Self {
        Self {
            store: self.store.child(rel),
            display: format!("{}/{}", self.display, rel.trim_matches('/')),
        }
    }

    /// The location as the user wrote it.
    pub fn display(&self) -> &str {
        &self.display
    }

    /// The store behind this directory, for code doing its own I/O (keys relative to it).
    pub fn store(&self) -> Arc<dyn Store> {
        Arc::new(self.store.clone())
    }

    fn err(&self, rel: &str, source: streamjob_storage::Error) -> Error {
        Error::Storage {
            path: format!("{}/{}", self.display, rel.trim_start_matches('/')),
            source: Box::new(source),
        }
    }

    /// Retries transient failures the store's client did not retry itself (HDFS, local I/O)
    /// under the job's retry budget.
    async fn retried<T, F, Fut>(&self, op: &'static str, rel: &str, call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = streamjob_storage::Result<T>>,
    {
        retry(op, self.store.retry_policy(), call)
            .await
            .map_err(|e| self.err(rel, e))
    }

    /// Writes an object atomically (readers see all of it or nothing).
    pub async fn put(&self, rel: &str, bytes: impl Into<Bytes>) -> Result<()> {
        let bytes = bytes.into();
        self.retried("put", rel, || self.store.put(rel, bytes.clone()))
            .await
    }

    /// Creates an object only if none exists at `rel` (`If-None-Match: *` on S3, a hard link on
    /// local file systems, a rename without overwrite on HDFS): `false` when one already exists.
    /// This is the one atomic step fencing relies on (see [`crate::fence`]). Not retried here: a
    /// retry after a lost answer would find its own object and report `false`.
    pub async fn put_new(&self, rel: &str, bytes: impl Into<Bytes>) -> Result<bool> {
        self.store
            .put_new(rel, bytes.into())
            .await
            .map_err(|e| self.err(rel, e))
    }

    /// Reads an object.
    pub async fn get(&self, rel: &str) -> Result<Bytes> {
        self.retried("get", rel, || self.store.get(rel)).await
    }

    /// Reads an object, or `None` when there is none.
    pub async fn get_if_exists(&self, rel: &str) -> Result<Option<Bytes>> {
        match retry("get", self.store.retry_policy(), || self.store.get(rel)).await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(self.err(rel, e)),
        }
    }

    /// Reads a byte range of an object (files sources read large files chunk by chunk).
    pub async fn get_range(&self, rel: &str, range: Range<u64>) -> Result<Bytes> {
        self.retried("get_range", rel, || {
            self.store.get_range(rel, range.clone())
        })
        .await
    }

    /// Whether an object exists.
    pub async fn exists(&self, rel: &str) -> Result<bool> {
        Ok(self
            .retried("head", rel, || self.store.head(rel))
            .await?
            .is_some())
    }

    /// Names of the immediate sub-directories.
    pub async fn list_dirs(&self) -> Result<Vec<String>> {
        self.retried("list", "", || self.store.list_dirs("")).await
    }

    /// All objects below this location: (path relative to it, size), sorted.
    pub async fn list_files(&self) -> Result<Vec<(String, u64)>> {
        let mut files: Vec<(String, u64)> = self
            .retried("list", "", || self.store.list(""))
            .await?
            .into_iter()
            .map(|o| (o.key, o.size))
            .collect();
        files.sort();
        Ok(files)
    }

    /// Deletes one object (missing is fine).
    pub async fn delete(&self, rel: &str) -> Result<()> {
        self.retried("delete", rel, || self.store.delete(rel)).await
    }

    /// Deletes everything below `rel` (missing objects are fine).
    pub async fn delete_dir(&self, rel: &str) -> Result<()> {
        self.retried("delete", rel, || self.store.delete_dir(rel))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn local_paths_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let loc = Location::parse(dir.path().to_str().unwrap(), None).unwrap();
        loc.put("a/b/c.txt", Bytes::from_static(b"hi"))
            .await
            .unwrap();
        assert_eq!(
            loc.get("a/b/c.txt").await.unwrap(),
            Bytes::from_static(b"hi")
        );
        assert!(loc.exists("a/b/c.txt").await.unwrap());
        assert_eq!(loc.list_dirs().await.unwrap(), vec!["a".to_string()]);
        assert_eq!(
            loc.list_files().await.unwrap(),
            vec![("a/b/c.txt".to_string(), 2)]
        );
        let url = format!("file://{}", dir.path().display());
        let loc2 = Location::parse(&url, None).unwrap();
        assert!(loc2.exists("a/b/c.txt").await.unwrap());
        loc.delete_dir("a").await.unwrap();
        assert!(!loc.exists("a/b/c.txt").await.unwrap());
    }
}
