//! Storage through `object_store`: `s3://bucket/prefix`, `file:///abs/path` and plain local paths
//! all go through the same [`Location`] API.

use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use streamjob_crds::v1alpha1::StorageSpec;

use crate::error::{Error, Result};

/// A directory (prefix) in an object store.
#[derive(Clone, Debug)]
pub struct Location {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    /// How the user wrote it (used in messages and returned paths), without a trailing `/`.
    display: String,
}

impl Location {
    /// Parses `s3://bucket/prefix`, `file:///path` or a local path (created if missing).
    pub fn parse(location: &str, storage: Option<&StorageSpec>) -> Result<Self> {
        let trimmed = location.trim_end_matches('/');
        if let Some(rest) = trimmed.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(Error::Location(location.into(), "missing bucket".into()));
            }
            // the storage crate's retry policy: one budget for the sink's and the checkpoints'
            // store calls (storage.retryBudget)
            let policy = streamjob_filesink::retry::RetryPolicy::for_storage(storage)
                .map_err(|e| Error::Location(location.into(), e.to_string()))?;
            let s3 = storage.and_then(|s| s.s3.as_ref());
            let mut builder = object_store::aws::AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .with_virtual_hosted_style_request(false)
                .with_retry(policy.object_store())
                .with_client_options(policy.client_options(s3.is_some_and(|s| s.allow_http)));
            if let Some(s3) = s3 {
                if let Some(endpoint) = &s3.endpoint {
                    builder = builder.with_endpoint(endpoint);
                }
                if let Some(region) = &s3.region {
                    builder = builder.with_region(region);
                }
                builder = builder.with_virtual_hosted_style_request(s3.virtual_hosted_style);
            }
            let store = builder
                .build()
                .map_err(|e| Error::Location(location.into(), e.to_string()))?;
            return Ok(Self {
                store: Arc::new(store),
                prefix: Path::from(prefix),
                display: trimmed.to_string(),
            });
        }
        if trimmed.starts_with("hdfs://") {
            return Err(Error::Unsupported(format!(
                "{location}: hdfs:// paths are not supported by the runtime yet; use s3:// or a local path"
            )));
        }
        let local = match trimmed.strip_prefix("file://") {
            Some(p) => p.to_string(),
            None if trimmed.contains("://") => {
                return Err(Error::Location(
                    location.into(),
                    "unknown scheme: use s3://, file:// or a local path".into(),
                ));
            }
            None => trimmed.to_string(),
        };
        let local = if local.is_empty() {
            "/".to_string()
        } else {
            local
        };
        std::fs::create_dir_all(&local)?;
        let abs = std::fs::canonicalize(&local)?;
        let store = object_store::local::LocalFileSystem::new();
        let prefix = Path::from_filesystem_path(&abs)
            .map_err(|e| Error::Location(location.into(), e.to_string()))?;
        Ok(Self {
            store: Arc::new(store),
            prefix,
            display: trimmed.to_string(),
        })
    }

    /// A sub-directory.
    pub fn child(&self, rel: &str) -> Self {
        Self {
            store: self.store.clone(),
            prefix: self.path(rel),
            display: format!("{}/{}", self.display, rel.trim_matches('/')),
        }
    }

    /// The location as the user wrote it.
    pub fn display(&self) -> &str {
        &self.display
    }

    /// The underlying store and prefix, for operators (like the file sink) doing their own I/O.
    pub fn store(&self) -> (Arc<dyn ObjectStore>, Path) {
        (self.store.clone(), self.prefix.clone())
    }

    fn path(&self, rel: &str) -> Path {
        let mut p = self.prefix.clone();
        for part in rel.split('/').filter(|s| !s.is_empty()) {
            p = p.join(part);
        }
        p
    }

    fn err(&self, rel: &str, source: object_store::Error) -> Error {
        Error::Storage {
            path: format!("{}/{}", self.display, rel),
            source,
        }
    }

    /// Writes an object (atomically on local file systems and S3).
    pub async fn put(&self, rel: &str, bytes: impl Into<Bytes>) -> Result<()> {
        let payload = PutPayload::from(bytes.into());
        self.store
            .put(&self.path(rel), payload)
            .await
            .map_err(|e| self.err(rel, e))?;
        Ok(())
    }

    /// Creates an object only if none exists at `rel` (`If-None-Match: *` on S3, an exclusive
    /// create on local file systems): `false` when one already exists. This is the one atomic
    /// step fencing relies on (see [`crate::fence`]).
    pub async fn put_new(&self, rel: &str, bytes: impl Into<Bytes>) -> Result<bool> {
        let payload = PutPayload::from(bytes.into());
        let opts = object_store::PutOptions::from(object_store::PutMode::Create);
        match self.store.put_opts(&self.path(rel), payload, opts).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(self.err(rel, e)),
        }
    }

    /// Reads an object.
    pub async fn get(&self, rel: &str) -> Result<Bytes> {
        let r = self
            .store
            .get(&self.path(rel))
            .await
            .map_err(|e| self.err(rel, e))?;
        r.bytes().await.map_err(|e| self.err(rel, e))
    }

    /// Reads an object, or `None` when there is none.
    pub async fn get_if_exists(&self, rel: &str) -> Result<Option<Bytes>> {
        match self.store.get(&self.path(rel)).await {
            Ok(r) => Ok(Some(r.bytes().await.map_err(|e| self.err(rel, e))?)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.err(rel, e)),
        }
    }

    /// Reads a byte range of an object (files sources read large files chunk by chunk).
    pub async fn get_range(&self, rel: &str, range: std::ops::Range<u64>) -> Result<Bytes> {
        self.store
            .get_range(&self.path(rel), range)
            .await
            .map_err(|e| self.err(rel, e))
    }

    /// Whether an object exists.
    pub async fn exists(&self, rel: &str) -> Result<bool> {
        match self.store.head(&self.path(rel)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.err(rel, e)),
        }
    }

    /// Names of the immediate sub-directories.
    pub async fn list_dirs(&self) -> Result<Vec<String>> {
        let res = self
            .store
            .list_with_delimiter(Some(&self.prefix))
            .await
            .map_err(|e| self.err("", e))?;
        Ok(res
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_string))
            .collect())
    }

    /// All objects below this location: (path relative to it, size).
    pub async fn list_files(&self) -> Result<Vec<(String, u64)>> {
        let objects: Vec<_> = self
            .store
            .list(Some(&self.prefix))
            .try_collect()
            .await
            .map_err(|e| self.err("", e))?;
        let base: Vec<_> = self.prefix.parts().collect();
        let mut out = Vec::new();
        for o in objects {
            let parts: Vec<_> = o.location.parts().collect();
            if parts.len() <= base.len() {
                continue;
            }
            let rel = parts[base.len()..]
                .iter()
                .map(|p| p.as_ref().to_string())
                .collect::<Vec<_>>()
                .join("/");
            out.push((rel, o.size));
        }
        out.sort();
        Ok(out)
    }

    /// Deletes one object (missing is fine).
    pub async fn delete(&self, rel: &str) -> Result<()> {
        match self.store.delete(&self.path(rel)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.err(rel, e)),
        }
    }

    /// Deletes everything below `rel` (best effort: missing objects are fine).
    pub async fn delete_dir(&self, rel: &str) -> Result<()> {
        let dir = self.child(rel);
        for (file, _) in dir.list_files().await? {
            match self.store.delete(&dir.path(&file)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(dir.err(&file, e)),
            }
        }
        if let Some(local) = self.local_dir(rel) {
            let _ = std::fs::remove_dir_all(local);
        }
        Ok(())
    }

    /// The local directory behind `rel`, for local locations.
    fn local_dir(&self, rel: &str) -> Option<std::path::PathBuf> {
        if self.display.starts_with("s3://") {
            return None;
        }
        Some(std::path::PathBuf::from(format!("/{}", self.path(rel))))
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
