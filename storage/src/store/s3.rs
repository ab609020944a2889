//! What S3 needs beyond `object_store`'s API: listing open multipart uploads
//! (ListMultipartUploads, for the orphan cleanup), signed with the client's own credentials.

use object_store::aws::AmazonS3;

use super::OpenUpload;
use crate::error::{Error, Result};
use crate::retry::{RetryPolicy, retry};
use crate::s3_api;

/// Where [`super::CloudStore`] sends the S3 requests `object_store` has no API for.
#[derive(Clone, Debug)]
pub(crate) struct S3Endpoint {
    /// The configured endpoint; `None`: AWS (`https://s3.<region>.amazonaws.com`).
    url: Option<String>,
    region: String,
    virtual_hosted: bool,
}

impl S3Endpoint {
    pub(crate) fn new(url: Option<&str>, region: &str, virtual_hosted: bool) -> Self {
        Self {
            url: url.map(|e| e.trim_end_matches('/').to_string()),
            region: region.to_string(),
            virtual_hosted,
        }
    }

    /// Open uploads of `bucket` whose key starts with `prefix` (keys relative to the bucket).
    pub(crate) async fn list_uploads(
        &self,
        client: &AmazonS3,
        bucket: &str,
        prefix: &str,
        policy: RetryPolicy,
    ) -> Result<Vec<OpenUpload>> {
        let fetch = |query: Vec<(&'static str, String)>| async move {
            let query: Vec<(&str, &str)> = query.iter().map(|(k, v)| (*k, v.as_str())).collect();
            retry("list_multipart_uploads", policy, || {
                self.signed_get(client, bucket, policy, &query)
            })
            .await
        };
        let unreadable = |message: String| Error::Store {
            op: "list_multipart_uploads",
            path: format!("s3://{bucket}/{prefix}"),
            retried: false,
            source: object_store::Error::Generic {
                store: "S3",
                source: message.into(),
            },
        };
        let uploads = s3_api::list_uploads(prefix, fetch, unreadable).await?;
        Ok(uploads
            .into_iter()
            .map(|u| OpenUpload {
                key: u.key,
                upload_id: u.upload_id,
            })
            .collect())
    }

    /// One page of ListMultipartUploads: a SigV4-signed `GET ?uploads` (object_store signs
    /// only its own requests; see [`crate::s3_api`]).
    async fn signed_get(
        &self,
        client: &AmazonS3,
        bucket: &str,
        policy: RetryPolicy,
        query: &[(&str, &str)],
    ) -> Result<String> {
        let fail = |source: object_store::Error| Error::Store {
            op: "list_multipart_uploads",
            path: format!("s3://{bucket}"),
            retried: false,
            source,
        };
        let generic = |msg: String| object_store::Error::Generic {
            store: "S3",
            source: msg.into(),
        };
        let encoded = s3_api::uri_encode(bucket, false);
        let (base, path) = match (&self.url, self.virtual_hosted) {
            // object_store's convention: a virtual-hosted endpoint already names the bucket
            (Some(url), true) => (url.clone(), "/".to_string()),
            (Some(url), false) => (url.clone(), format!("/{encoded}")),
            (None, true) => (
                format!("https://{bucket}.s3.{}.amazonaws.com", self.region),
                "/".to_string(),
            ),
            (None, false) => (
                format!("https://s3.{}.amazonaws.com", self.region),
                format!("/{encoded}"),
            ),
        };
        let cred = client.credentials().get_credential().await.map_err(fail)?;
        let http = reqwest::Client::builder()
            .timeout(policy.request_timeout)
            .connect_timeout(policy.connect_timeout)
            .build()
            .map_err(|e| fail(generic(format!("http client: {e}"))))?;
        let req = s3_api::request(
            &http,
            reqwest::Method::GET,
            &base,
            &path,
            query,
            &self.region,
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
}
