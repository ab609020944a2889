//! The reference's connection limits (`fs.<scheme>.limit.total`, `.input`, `.output`,
//! `.timeout`): one [`ConnectionGate`] per store scheme and process, shared by every reader and
//! writer of the job through [`LimitedStore`].

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use streamjob_crds::units::parse_duration;
use streamjob_crds::v1alpha1::ConnectionLimits;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{ObjectInfo, OpenUpload, Store, TempFile};
use crate::error::{Error, Result};
use crate::retry::RetryPolicy;

/// At most `total` requests at once, of which at most `input` reads and `output` writes; a
/// request that cannot get a slot within `timeout` fails with [`Error::ConnectionTimeout`] (a
/// transient error: callers retry).
#[derive(Debug)]
pub struct ConnectionGate {
    total: Option<Arc<Semaphore>>,
    input: Option<Arc<Semaphore>>,
    output: Option<Arc<Semaphore>>,
    timeout: Option<Duration>,
}

/// The slots one request holds until it is answered.
pub(super) struct Permits(
    #[allow(dead_code)] Option<OwnedSemaphorePermit>,
    #[allow(dead_code)] Option<OwnedSemaphorePermit>,
);

impl ConnectionGate {
    /// The manifest's limits (`storage.limits`).
    pub fn new(limits: &ConnectionLimits) -> Result<Self> {
        let sem = |n: Option<u32>| n.map(|n| Arc::new(Semaphore::new(n.max(1) as usize)));
        let timeout = limits
            .timeout
            .as_deref()
            .map(|t| parse_duration("storage.limits.timeout", t))
            .transpose()?
            .filter(|d| !d.is_zero());
        Ok(Self {
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

/// A [`Store`] whose requests (multipart included) pass a [`ConnectionGate`]. Writes to an open
/// temporary file are local or streamed and not limited; opening one is.
#[derive(Debug)]
pub struct LimitedStore {
    inner: Arc<dyn Store>,
    gate: Arc<ConnectionGate>,
}

impl LimitedStore {
    /// Wraps `inner` with its own gate of the manifest's limits.
    pub fn new(inner: Arc<dyn Store>, limits: &ConnectionLimits) -> Result<Self> {
        Ok(Self::shared(inner, Arc::new(ConnectionGate::new(limits)?)))
    }

    /// Wraps `inner` behind a gate other stores share (one per scheme and process).
    pub fn shared(inner: Arc<dyn Store>, gate: Arc<ConnectionGate>) -> Self {
        Self { inner, gate }
    }

    pub(super) async fn acquire(&self, write: bool) -> Result<Permits> {
        self.gate.acquire(write).await
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
    async fn put_new(&self, key: &str, data: Bytes) -> Result<bool> {
        let _p = self.acquire(true).await?;
        self.inner.put_new(key, data).await
    }
    async fn get(&self, key: &str) -> Result<Bytes> {
        let _p = self.acquire(false).await?;
        self.inner.get(key).await
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        let _p = self.acquire(false).await?;
        self.inner.get_range(key, range).await
    }
    async fn list_dirs(&self, dir: &str) -> Result<Vec<String>> {
        let _p = self.acquire(false).await?;
        self.inner.list_dirs(dir).await
    }
    async fn delete_dir(&self, dir: &str) -> Result<()> {
        let _p = self.acquire(true).await?;
        self.inner.delete_dir(dir).await
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
