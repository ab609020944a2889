//! S3 and compatible stores through `object_store`'s `AmazonS3`: multipart uploads as the commit
//! protocol, ListMultipartUploads signed here for the orphan cleanup.

use std::ops::Range;

use async_trait::async_trait;
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::AmazonS3;
use object_store::multipart::MultipartStore;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use super::{ObjectInfo, OpenUpload, Store};
use crate::error::{Error, Result};
use crate::retry::{RetryPolicy, STORE_RETRY, retry};
use crate::s3_api;

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

    async fn put_new(&self, key: &str, data: Bytes) -> Result<bool> {
        // If-None-Match: * (conditional writes; MinIO and AWS S3 both honour it)
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
