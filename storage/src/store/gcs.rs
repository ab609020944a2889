//! Google Cloud Storage through its JSON API, with `object_store`'s GCS credentials (service
//! account keys, Application Default Credentials, Workload Identity through the metadata
//! server): `object_store`'s own GCS client writes through the XML API, whose uploads, copies and
//! preconditions the GCS emulator (fake-gcs-server) does not serve; the JSON API is served by
//! both, and offers compose, which the commit protocol needs.
//!
//! A part file in progress is a set of hidden part objects
//! `.inprogress/<final key>/<upload id>/part-<n>` in the same bucket (as Flink's GCS writer keeps
//! them); the checkpoint records their names and the tail below one part. The commit composes
//! them into the final name — atomically: readers see all of it or nothing — 32 at a time (GCS's
//! limit; longer files are composed through intermediate objects next to the parts), then deletes
//! them. Orphans — the parts of uploads no checkpoint recorded — are found by listing
//! `.inprogress/` and deleted.

use std::ops::Range;

use async_trait::async_trait;
use bytes::Bytes;
use object_store::gcp::GcpCredentialProvider;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::Method;

use super::{ObjectInfo, OpenUpload, Store};
use crate::error::{Error, Result};
use crate::retry::{RetryPolicy, retry};

/// Where in-progress parts live, relative to the bucket.
pub const IN_PROGRESS: &str = ".inprogress";

/// GCS's limit on the sources of one compose request.
const MAX_COMPOSE: usize = 32;

/// A GCS bucket (the root of the process's client for it).
pub struct GcsStore {
    credentials: GcpCredentialProvider,
    /// `https://storage.googleapis.com`, or an emulator's or private endpoint's base URL.
    base_url: String,
    bucket: String,
    http: reqwest::Client,
    policy: RetryPolicy,
}

impl std::fmt::Debug for GcsStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GcsStore")
            .field("base_url", &self.base_url)
            .field("bucket", &self.bucket)
            .finish()
    }
}

fn enc(s: &str) -> String {
    utf8_percent_encode(s, NON_ALPHANUMERIC).to_string()
}

fn clean(key: &str) -> &str {
    key.trim_matches('/')
}

/// The prefix of the part objects of one upload.
fn upload_dir(final_key: &str, upload_id: &str) -> String {
    format!("{IN_PROGRESS}/{final_key}/{upload_id}")
}

/// A request of [`GcsStore::call`].
struct Call<'a> {
    op: &'static str,
    key: &'a str,
    method: Method,
    url: String,
    body: Option<(Bytes, &'static str)>,
    range: Option<Range<u64>>,
}

impl GcsStore {
    /// The bucket `bucket` at `base_url`, authenticated by `credentials` (an empty bearer token:
    /// no `Authorization` header, for emulators).
    pub fn new(
        credentials: GcpCredentialProvider,
        base_url: &str,
        bucket: &str,
        policy: RetryPolicy,
    ) -> Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(policy.request_timeout)
            .connect_timeout(policy.connect_timeout)
            .build()
            .map_err(|e| Error::Config(format!("gs://{bucket}: http client: {e}")))?;
        Ok(Self {
            credentials,
            base_url: base_url.trim_end_matches('/').to_string(),
            bucket: bucket.to_string(),
            http,
            policy,
        })
    }

    fn object_url(&self, key: &str) -> String {
        format!(
            "{}/storage/v1/b/{}/o/{}",
            self.base_url,
            enc(&self.bucket),
            enc(key)
        )
    }

    fn fail(&self, op: &'static str, key: &str, source: object_store::Error) -> Error {
        Error::Store {
            op,
            path: format!("gs://{}/{key}", self.bucket),
            retried: false,
            source,
        }
    }

    /// One request, retried under the store's policy while it fails transiently (connection
    /// errors, 5xx, 429); other statuses become the matching error (404 not found, 412
    /// precondition failed).
    async fn call(&self, c: Call<'_>) -> Result<Bytes> {
        retry(c.op, self.policy, || self.call_once(&c)).await
    }

    async fn call_once(&self, c: &Call<'_>) -> Result<Bytes> {
        let generic = |msg: String| object_store::Error::Generic {
            store: "GCS",
            source: msg.into(),
        };
        let cred = self
            .credentials
            .get_credential()
            .await
            .map_err(|e| self.fail(c.op, c.key, e))?;
        let mut req = self.http.request(c.method.clone(), &c.url);
        if !cred.bearer.is_empty() {
            req = req.bearer_auth(&cred.bearer);
        }
        if let Some((body, content_type)) = &c.body {
            req = req
                .header(reqwest::header::CONTENT_TYPE, *content_type)
                .body(body.clone());
        } else if c.method == Method::POST {
            req = req.header(reqwest::header::CONTENT_LENGTH, 0);
        }
        if let Some(r) = &c.range {
            if r.is_empty() {
                return Ok(Bytes::new());
            }
            req = req.header(
                reqwest::header::RANGE,
                format!("bytes={}-{}", r.start, r.end - 1),
            );
        }
        let resp = req
            .send()
            .await
            .map_err(|e| self.fail(c.op, c.key, generic(e.to_string())))?;
        let status = resp.status();
        let body = resp
            .bytes()
            .await
            .map_err(|e| self.fail(c.op, c.key, generic(e.to_string())))?;
        if status.is_success() {
            return Ok(body);
        }
        let message = format!("HTTP {status}: {}", String::from_utf8_lossy(&body));
        let key = c.key.to_string();
        let source = match status.as_u16() {
            404 => object_store::Error::NotFound {
                path: key,
                source: message.into(),
            },
            412 => object_store::Error::Precondition {
                path: key,
                source: message.into(),
            },
            401 => object_store::Error::Unauthenticated {
                path: key,
                source: message.into(),
            },
            403 => object_store::Error::PermissionDenied {
                path: key,
                source: message.into(),
            },
            408 | 429 | 500..=599 => generic(message),
            _ => object_store::Error::NotSupported {
                source: message.into(),
            },
        };
        Err(self.fail(c.op, c.key, source))
    }

    /// A media upload of a whole object; `create_only`: `ifGenerationMatch=0`.
    async fn upload(
        &self,
        op: &'static str,
        key: &str,
        data: Bytes,
        create_only: bool,
    ) -> Result<()> {
        let mut url = format!(
            "{}/upload/storage/v1/b/{}/o?uploadType=media&name={}",
            self.base_url,
            enc(&self.bucket),
            enc(key)
        );
        if create_only {
            url.push_str("&ifGenerationMatch=0");
        }
        self.call(Call {
            op,
            key,
            method: Method::POST,
            url,
            body: Some((data, "application/octet-stream")),
            range: None,
        })
        .await
        .map(|_| ())
    }

    /// Every object whose name starts with `prefix` (a string prefix), all pages; with
    /// `delimiter`, the common prefixes too.
    async fn list_raw(
        &self,
        prefix: &str,
        delimiter: bool,
    ) -> Result<(Vec<ObjectInfo>, Vec<String>)> {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Page {
            #[serde(default)]
            items: Vec<Item>,
            #[serde(default)]
            prefixes: Vec<String>,
            next_page_token: Option<String>,
        }
        #[derive(serde::Deserialize)]
        struct Item {
            name: String,
            size: String,
        }
        let (mut objects, mut prefixes) = (Vec::new(), Vec::new());
        let mut token: Option<String> = None;
        loop {
            let mut url = format!(
                "{}/storage/v1/b/{}/o?prefix={}",
                self.base_url,
                enc(&self.bucket),
                enc(prefix)
            );
            if delimiter {
                url.push_str("&delimiter=%2F");
            }
            if let Some(t) = &token {
                url.push_str(&format!("&pageToken={}", enc(t)));
            }
            let body = self
                .call(Call {
                    op: "list",
                    key: prefix,
                    method: Method::GET,
                    url,
                    body: None,
                    range: None,
                })
                .await?;
            let page: Page = serde_json::from_slice(&body).map_err(|e| {
                self.fail(
                    "list",
                    prefix,
                    object_store::Error::Generic {
                        store: "GCS",
                        source: format!("unreadable listing: {e}").into(),
                    },
                )
            })?;
            for item in page.items {
                let size = item.size.parse().map_err(|e| {
                    Error::State(format!(
                        "gs://{}/{}: size {:?}: {e}",
                        self.bucket, item.name, item.size
                    ))
                })?;
                objects.push(ObjectInfo {
                    key: item.name,
                    size,
                });
            }
            prefixes.extend(page.prefixes);
            match page.next_page_token {
                Some(t) if !t.is_empty() => token = Some(t),
                _ => break,
            }
        }
        objects.sort_by(|a, b| a.key.cmp(&b.key));
        Ok((objects, prefixes))
    }

    /// Composes `sources` (at most 32) into `dest` (replacing it). A compose of one source is a
    /// copy.
    async fn compose(&self, sources: &[String], dest: &str) -> Result<()> {
        let body = serde_json::json!({
            "sourceObjects": sources.iter().map(|s| serde_json::json!({"name": s})).collect::<Vec<_>>(),
            "destination": {"contentType": "application/octet-stream"},
        });
        let call = Call {
            op: "compose",
            key: dest,
            method: Method::POST,
            url: format!("{}/compose", self.object_url(dest)),
            body: Some((Bytes::from(body.to_string()), "application/json")),
            range: None,
        };
        retry("compose", self.policy, || async {
            match self.call_once(&call).await {
                // GCS answers a missing source with 404; the emulator with 500, which would be
                // retried for the whole budget: a source that is gone is not worth a retry
                Err(e) if e.is_transient() => {
                    for source in sources {
                        let probe = Call {
                            op: "compose",
                            key: source,
                            method: Method::GET,
                            url: self.object_url(source),
                            body: None,
                            range: None,
                        };
                        match self.call_once(&probe).await {
                            Err(missing) if missing.is_not_found() => return Err(missing),
                            _ => {}
                        }
                    }
                    Err(e)
                }
                other => other.map(|_| ()),
            }
        })
        .await
    }

    /// Composes any number of `sources` into `dest`; beyond 32, through intermediate objects
    /// `<scratch>/compose-<n>` (hidden, deleted with the upload's parts).
    async fn compose_all(&self, sources: &[String], dest: &str, scratch: &str) -> Result<()> {
        let Some((first, mut rest)) = sources.split_first_chunk::<MAX_COMPOSE>() else {
            return self.compose(sources, dest).await;
        };
        if rest.is_empty() {
            return self.compose(first, dest).await;
        }
        let mut acc = format!("{scratch}/compose-0");
        self.compose(first, &acc).await?;
        let mut n = 0;
        while !rest.is_empty() {
            let take = rest.len().min(MAX_COMPOSE - 1);
            let mut batch = vec![acc];
            batch.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            n += 1;
            acc = if rest.is_empty() {
                dest.to_string()
            } else {
                format!("{scratch}/compose-{n}")
            };
            self.compose(&batch, &acc).await?;
        }
        Ok(())
    }
}

#[async_trait]
impl Store for GcsStore {
    fn describe(&self) -> String {
        format!("gs://{}", self.bucket)
    }
    fn supports_multipart(&self) -> bool {
        true
    }
    fn retry_policy(&self) -> RetryPolicy {
        self.policy
    }

    async fn put(&self, key: &str, data: Bytes) -> Result<()> {
        self.upload("put", clean(key), data, false).await
    }

    async fn put_new(&self, key: &str, data: Bytes) -> Result<bool> {
        match self.upload("put_new", clean(key), data, true).await {
            Ok(()) => Ok(true),
            Err(Error::Store {
                source: object_store::Error::Precondition { .. },
                ..
            }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn get(&self, key: &str) -> Result<Bytes> {
        let key = clean(key);
        self.call(Call {
            op: "get",
            key,
            method: Method::GET,
            url: format!("{}?alt=media", self.object_url(key)),
            body: None,
            range: None,
        })
        .await
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        let key = clean(key);
        let want = range.end.saturating_sub(range.start);
        let got = self
            .call(Call {
                op: "get_range",
                key,
                method: Method::GET,
                url: format!("{}?alt=media", self.object_url(key)),
                body: None,
                range: Some(range.clone()),
            })
            .await?;
        if got.len() as u64 != want {
            return Err(Error::State(format!(
                "gs://{}/{key}: asked for bytes {}..{}, got {} bytes",
                self.bucket,
                range.start,
                range.end,
                got.len()
            )));
        }
        Ok(got)
    }

    async fn head(&self, key: &str) -> Result<Option<u64>> {
        #[derive(serde::Deserialize)]
        struct Meta {
            size: String,
        }
        let key = clean(key);
        let got = self
            .call(Call {
                op: "head",
                key,
                method: Method::GET,
                url: self.object_url(key),
                body: None,
                range: None,
            })
            .await;
        match got {
            Ok(body) => {
                let meta: Meta = serde_json::from_slice(&body).map_err(|e| {
                    Error::State(format!(
                        "gs://{}/{key}: unreadable metadata: {e}",
                        self.bucket
                    ))
                })?;
                let size = meta.size.parse().map_err(|e| {
                    Error::State(format!(
                        "gs://{}/{key}: size {:?}: {e}",
                        self.bucket, meta.size
                    ))
                })?;
                Ok(Some(size))
            }
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        // like object_store: a prefix names a directory (`a/b` lists `a/b/...`, not `a/bc`)
        let dir = clean(prefix);
        let dir = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        Ok(self.list_raw(&dir, false).await?.0)
    }

    async fn list_dirs(&self, dir: &str) -> Result<Vec<String>> {
        let dir = clean(dir);
        let base = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let (_, prefixes) = self.list_raw(&base, true).await?;
        let mut names: Vec<String> = prefixes
            .iter()
            .filter_map(|p| p.strip_prefix(&base))
            .map(|p| p.trim_end_matches('/').to_string())
            .filter(|p| !p.is_empty())
            .collect();
        names.sort();
        Ok(names)
    }

    async fn delete(&self, key: &str) -> Result<()> {
        let key = clean(key);
        let done = self
            .call(Call {
                op: "delete",
                key,
                method: Method::DELETE,
                url: self.object_url(key),
                body: None,
                range: None,
            })
            .await;
        match done {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn copy(&self, from: &str, to: &str) -> Result<()> {
        self.compose(&[clean(from).to_string()], clean(to)).await
    }

    async fn create_multipart(&self, _key: &str) -> Result<String> {
        Ok(uuid::Uuid::new_v4().simple().to_string())
    }

    async fn put_part(
        &self,
        key: &str,
        upload_id: &str,
        part_idx: usize,
        data: Bytes,
    ) -> Result<String> {
        let name = format!("{}/part-{part_idx:05}", upload_dir(clean(key), upload_id));
        self.upload("put_part", &name, data, false).await?;
        Ok(name)
    }

    async fn complete_multipart(&self, key: &str, upload_id: &str, etags: &[String]) -> Result<()> {
        let key = clean(key);
        let dir = upload_dir(key, upload_id);
        if let Some(stranger) = etags.iter().find(|p| !p.starts_with(&dir)) {
            return Err(Error::State(format!(
                "gs://{}/{key}: part {stranger} is not one of upload {upload_id}",
                self.bucket
            )));
        }
        self.compose_all(etags, key, &dir).await?;
        // the file is committed; parts a crash leaves here go with the orphan cleanup
        self.abort_multipart(key, upload_id).await
    }

    async fn abort_multipart(&self, key: &str, upload_id: &str) -> Result<()> {
        let dir = upload_dir(clean(key), upload_id);
        for part in self.list(&dir).await? {
            self.delete(&part.key).await?;
        }
        Ok(())
    }

    async fn list_multipart_uploads(&self, prefix: &str) -> Result<Vec<OpenUpload>> {
        let prefix = prefix.trim_start_matches('/');
        let (found, _) = self
            .list_raw(&format!("{IN_PROGRESS}/{prefix}"), false)
            .await?;
        let mut uploads: Vec<OpenUpload> = found
            .iter()
            .filter_map(|o| {
                let rest = o.key.strip_prefix(IN_PROGRESS)?.strip_prefix('/')?;
                let (upload, _part) = rest.rsplit_once('/')?;
                let (key, upload_id) = upload.rsplit_once('/')?;
                Some(OpenUpload {
                    key: key.to_string(),
                    upload_id: upload_id.to_string(),
                })
            })
            .collect();
        uploads.dedup();
        Ok(uploads)
    }
}
