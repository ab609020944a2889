//! Object stores through `object_store` — S3 and compatible, Azure Blob Storage / ADLS Gen2 — as
//! one [`CloudStore`]. Reads, writes, listings and deletes are the same calls on each; what
//! differs is how an in-progress part file is kept until it becomes visible ([`Uploads`]):
//!
//! | store | in progress | commit | checkpoint state | orphans |
//! |---|---|---|---|---|
//! | S3 | a multipart upload | CompleteMultipartUpload | upload id, part etags, the tail below 5 MiB | listed (ListMultipartUploads) and aborted |
//! | Azure | uncommitted blocks of the blob | Put Block List | block ids, the tail | none visible; Azure drops uncommitted blocks after 7 days |
//!
//! GCS is [`super::GcsStore`] (parts composed on commit).

use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::AmazonS3;
use object_store::azure::MicrosoftAzure;
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use super::s3::S3Endpoint;
use super::{ObjectInfo, OpenUpload, Store};
use crate::error::{Error, Result};
use crate::retry::{RetryPolicy, STORE_RETRY};

/// A bucket (container) of an object store and a key prefix in it.
#[derive(Debug)]
pub struct CloudStore {
    inner: Arc<dyn ObjectStore>,
    /// `s3`, `gs` or `az`, for messages.
    scheme: &'static str,
    bucket: String,
    prefix: String,
    uploads: Uploads,
    /// The policy the client was built with (its retries), and that of our own requests.
    policy: RetryPolicy,
}

/// How in-progress part files are kept, per store (see the module docs).
#[derive(Debug)]
enum Uploads {
    S3 {
        client: Arc<AmazonS3>,
        /// Where ListMultipartUploads goes; `None`: open uploads cannot be listed.
        endpoint: Option<S3Endpoint>,
    },
    Azure(Arc<MicrosoftAzure>),
}

impl CloudStore {
    /// An S3 bucket; keys are put under `prefix`. Without [`CloudStore::with_s3_endpoint`] open
    /// uploads cannot be listed.
    pub fn s3(client: AmazonS3, bucket: impl Into<String>, prefix: &str) -> Self {
        let client = Arc::new(client);
        Self::new(
            client.clone(),
            "s3",
            bucket,
            prefix,
            Uploads::S3 {
                client,
                endpoint: None,
            },
        )
    }

    /// An Azure container; keys are put under `prefix`.
    pub fn azure(client: MicrosoftAzure, container: impl Into<String>, prefix: &str) -> Self {
        let client = Arc::new(client);
        Self::new(
            client.clone(),
            "az",
            container,
            prefix,
            Uploads::Azure(client),
        )
    }

    fn new(
        inner: Arc<dyn ObjectStore>,
        scheme: &'static str,
        bucket: impl Into<String>,
        prefix: &str,
        uploads: Uploads,
    ) -> Self {
        Self {
            inner,
            scheme,
            bucket: bucket.into(),
            prefix: prefix.trim_matches('/').to_string(),
            uploads,
            policy: STORE_RETRY,
        }
    }

    /// The retry policy the client was built with ([`RetryPolicy::object_store`]).
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// S3: the endpoint, region and addressing style the client was built with (`endpoint`
    /// `None`: AWS), for the requests signed here (listing open multipart uploads). Ignored on
    /// other stores.
    pub fn with_s3_endpoint(
        mut self,
        endpoint: Option<&str>,
        region: &str,
        virtual_hosted: bool,
    ) -> Self {
        if let Uploads::S3 { endpoint: ep, .. } = &mut self.uploads {
            *ep = Some(S3Endpoint::new(endpoint, region, virtual_hosted));
        }
        self
    }

    /// The key in the bucket.
    fn full_key(&self, key: &str) -> String {
        let key = key.trim_matches('/');
        match (self.prefix.is_empty(), key.is_empty()) {
            (true, _) => key.to_string(),
            (false, true) => self.prefix.clone(),
            (false, false) => format!("{}/{key}", self.prefix),
        }
    }

    fn path(&self, key: &str) -> ObjPath {
        ObjPath::from(self.full_key(key))
    }

    /// A bucket key relative to the prefix.
    fn relative(&self, full: &str) -> String {
        if self.prefix.is_empty() {
            return full.to_string();
        }
        full.strip_prefix(self.prefix.as_str())
            .and_then(|rest| rest.strip_prefix('/'))
            .unwrap_or(full)
            .to_string()
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

    /// The multipart client.
    fn multipart(&self) -> &dyn MultipartStore {
        match &self.uploads {
            Uploads::S3 { client, .. } => client.as_ref(),
            Uploads::Azure(client) => client.as_ref(),
        }
    }
}

#[async_trait]
impl Store for CloudStore {
    fn describe(&self) -> String {
        format!("{}://{}/{}", self.scheme, self.bucket, self.prefix)
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

    async fn put_new(&self, key: &str, data: Bytes) -> Result<bool> {
        // If-None-Match: * (S3 conditional writes, Azure conditional headers)
        let p = self.path(key);
        let opts = object_store::PutOptions::from(object_store::PutMode::Create);
        match self.inner.put_opts(&p, PutPayload::from(data), opts).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(Self::err("put_new", &p)(e)),
        }
    }

    async fn get(&self, key: &str) -> Result<Bytes> {
        let p = self.path(key);
        let r = self.inner.get(&p).await.map_err(Self::err("get", &p))?;
        r.bytes().await.map_err(Self::err("get", &p))
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        let p = self.path(key);
        self.inner
            .get_range(&p, range)
            .await
            .map_err(Self::err("get_range", &p))
    }

    async fn list_dirs(&self, dir: &str) -> Result<Vec<String>> {
        let p = self.path(dir);
        let res = self
            .inner
            .list_with_delimiter(Some(&p))
            .await
            .map_err(Self::err("list", &p))?;
        let mut names: Vec<String> = res
            .common_prefixes
            .iter()
            .filter_map(|d| d.filename().map(str::to_string))
            .collect();
        names.sort();
        Ok(names)
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
        let metas: Vec<_> = self
            .inner
            .list(Some(&p))
            .try_collect()
            .await
            .map_err(Self::err("list", &p))?;
        let mut out: Vec<ObjectInfo> = metas
            .into_iter()
            .map(|m| ObjectInfo {
                key: self.relative(m.location.as_ref()),
                size: m.size,
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
        match &self.uploads {
            Uploads::S3 { client, .. } => client
                .create_multipart(&p)
                .await
                .map_err(Self::err("create_multipart", &p)),
            // Azure has no upload ids (blocks belong to the blob); the sink keys its markers by
            // id, so every upload gets one of its own
            Uploads::Azure(_) => Ok(uuid::Uuid::new_v4().simple().to_string()),
        }
    }

    async fn put_part(
        &self,
        key: &str,
        upload_id: &str,
        part_idx: usize,
        data: Bytes,
    ) -> Result<String> {
        let p = self.path(key);
        let multipart = self.multipart();
        multipart
            .put_part(&p, &upload_id.to_string(), part_idx, PutPayload::from(data))
            .await
            .map(|part| part.content_id)
            .map_err(Self::err("put_part", &p))
    }

    async fn complete_multipart(&self, key: &str, upload_id: &str, etags: &[String]) -> Result<()> {
        let p = self.path(key);
        let multipart = self.multipart();
        let parts = etags
            .iter()
            .map(|e| PartId {
                content_id: e.clone(),
            })
            .collect();
        multipart
            .complete_multipart(&p, &upload_id.to_string(), parts)
            .await
            .map(|_| ())
            .map_err(Self::err("complete_multipart", &p))
    }

    async fn abort_multipart(&self, key: &str, upload_id: &str) -> Result<()> {
        let p = self.path(key);
        let multipart = self.multipart();
        multipart
            .abort_multipart(&p, &upload_id.to_string())
            .await
            .map_err(Self::err("abort_multipart", &p))
    }

    async fn list_multipart_uploads(&self, prefix: &str) -> Result<Vec<OpenUpload>> {
        // a plain string prefix below the root (`""`: everything under the root)
        let full = match (self.prefix.is_empty(), prefix.trim_start_matches('/')) {
            (true, p) => p.to_string(),
            (false, p) => format!("{}/{p}", self.prefix),
        };
        let found = match &self.uploads {
            Uploads::S3 {
                client,
                endpoint: Some(ep),
            } => {
                ep.list_uploads(client, &self.bucket, &full, self.policy)
                    .await?
            }
            Uploads::S3 { endpoint: None, .. } => {
                return Err(Error::Unsupported {
                    store: self.describe(),
                    op: "listing multipart uploads (no endpoint configured)",
                });
            }
            Uploads::Azure(_) => {
                return Err(Error::Unsupported {
                    store: self.describe(),
                    op: "listing uncommitted blocks (Azure drops them after 7 days)",
                });
            }
        };
        Ok(found
            .into_iter()
            .map(|u| OpenUpload {
                key: self.relative(&u.key),
                upload_id: u.upload_id,
            })
            .collect())
    }
}
