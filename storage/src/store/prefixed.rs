//! A view of a store below a directory: the per-process client ([`super::registry`]) is rooted at a
//! bucket, a name node or `/`; each checkpoint directory, source path and sink path is a
//! [`Prefixed`] view of it, so they all share the client and its connection limits.

use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use super::{ObjectInfo, OpenUpload, Store, TempFile};
use crate::error::Result;
use crate::retry::RetryPolicy;

/// `inner` seen from `prefix`: every key is `prefix/key` in `inner`, listings strip it again.
#[derive(Debug, Clone)]
pub struct Prefixed {
    inner: Arc<dyn Store>,
    /// Without leading or trailing `/`; empty: the root of `inner`.
    prefix: String,
}

impl Prefixed {
    /// The directory `prefix` of `inner`.
    pub fn new(inner: Arc<dyn Store>, prefix: &str) -> Self {
        Self {
            inner,
            prefix: prefix.trim_matches('/').to_string(),
        }
    }

    /// The sub-directory `rel` of this view, on the same client.
    pub fn child(&self, rel: &str) -> Self {
        Self::new(self.inner.clone(), &self.key(rel))
    }

    /// Whether both views use the same client (and connection limits).
    pub fn shares_client_with(&self, other: &Prefixed) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The key in the underlying store.
    fn key(&self, key: &str) -> String {
        let key = key.trim_matches('/');
        match (self.prefix.is_empty(), key.is_empty()) {
            (true, _) => key.to_string(),
            (false, true) => self.prefix.clone(),
            (false, false) => format!("{}/{key}", self.prefix),
        }
    }

    /// The key relative to this view of a key of the underlying store.
    fn strip<'a>(&self, key: &'a str) -> &'a str {
        if self.prefix.is_empty() {
            return key;
        }
        key.strip_prefix(self.prefix.as_str())
            .and_then(|rest| rest.strip_prefix('/'))
            .unwrap_or(key)
    }

    /// A plain string prefix (may end in the middle of a name) below this view.
    fn string_prefix(&self, prefix: &str) -> String {
        let prefix = prefix.trim_start_matches('/');
        match (self.prefix.is_empty(), prefix.is_empty()) {
            (true, _) => prefix.to_string(),
            (false, true) => format!("{}/", self.prefix),
            (false, false) => format!("{}/{prefix}", self.prefix),
        }
    }
}

#[async_trait]
impl Store for Prefixed {
    fn describe(&self) -> String {
        let root = self.inner.describe();
        match (self.prefix.is_empty(), root.ends_with('/')) {
            (true, _) => root,
            (false, true) => format!("{root}{}", self.prefix),
            (false, false) => format!("{root}/{}", self.prefix),
        }
    }
    fn supports_multipart(&self) -> bool {
        self.inner.supports_multipart()
    }
    fn retry_policy(&self) -> RetryPolicy {
        self.inner.retry_policy()
    }
    async fn put(&self, key: &str, data: Bytes) -> Result<()> {
        self.inner.put(&self.key(key), data).await
    }
    async fn put_new(&self, key: &str, data: Bytes) -> Result<bool> {
        self.inner.put_new(&self.key(key), data).await
    }
    async fn get(&self, key: &str) -> Result<Bytes> {
        self.inner.get(&self.key(key)).await
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        self.inner.get_range(&self.key(key), range).await
    }
    async fn head(&self, key: &str) -> Result<Option<u64>> {
        self.inner.head(&self.key(key)).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let mut objects = self.inner.list(&self.key(prefix)).await?;
        for o in &mut objects {
            o.key = self.strip(&o.key).to_string();
        }
        Ok(objects)
    }
    async fn list_dirs(&self, dir: &str) -> Result<Vec<String>> {
        self.inner.list_dirs(&self.key(dir)).await
    }
    async fn delete(&self, key: &str) -> Result<()> {
        self.inner.delete(&self.key(key)).await
    }
    async fn delete_dir(&self, dir: &str) -> Result<()> {
        self.inner.delete_dir(&self.key(dir)).await
    }
    async fn open_temp(&self, key: &str, resume_len: Option<u64>) -> Result<Box<dyn TempFile>> {
        self.inner.open_temp(&self.key(key), resume_len).await
    }
    async fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.inner.rename(&self.key(from), &self.key(to)).await
    }
    async fn copy(&self, from: &str, to: &str) -> Result<()> {
        self.inner.copy(&self.key(from), &self.key(to)).await
    }
    async fn create_multipart(&self, key: &str) -> Result<String> {
        self.inner.create_multipart(&self.key(key)).await
    }
    async fn put_part(
        &self,
        key: &str,
        upload_id: &str,
        part_idx: usize,
        data: Bytes,
    ) -> Result<String> {
        self.inner
            .put_part(&self.key(key), upload_id, part_idx, data)
            .await
    }
    async fn complete_multipart(&self, key: &str, upload_id: &str, etags: &[String]) -> Result<()> {
        self.inner
            .complete_multipart(&self.key(key), upload_id, etags)
            .await
    }
    async fn abort_multipart(&self, key: &str, upload_id: &str) -> Result<()> {
        self.inner.abort_multipart(&self.key(key), upload_id).await
    }
    async fn list_multipart_uploads(&self, prefix: &str) -> Result<Vec<OpenUpload>> {
        let mut uploads = self
            .inner
            .list_multipart_uploads(&self.string_prefix(prefix))
            .await?;
        for u in &mut uploads {
            u.key = self.strip(&u.key).to_string();
        }
        Ok(uploads)
    }
}
