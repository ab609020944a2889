//! The S3 calls `object_store` has no API for — ListMultipartUploads for the sink's orphan
//! cleanup; bucket creation and upload probes in the test harness — signed by `aws-sigv4` (the
//! AWS SDK's signer) and read by `quick-xml`. One place builds them, so the sink and the tests
//! sign and parse alike.

use std::future::Future;
use std::time::SystemTime;

use aws_sigv4::http_request::{
    PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode, sign,
};
use aws_sigv4::sign::v4;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use serde::Deserialize;

/// Who signs.
#[derive(Clone, Copy, Debug)]
pub struct Credentials<'a> {
    pub key_id: &'a str,
    pub secret_key: &'a str,
    /// Session token of temporary credentials.
    pub token: Option<&'a str>,
}

/// RFC 3986 unreserved characters: what S3 keeps unencoded in a path segment or query value.
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');
const UNRESERVED_AND_SLASH: &AsciiSet = &UNRESERVED.remove(b'/');

/// S3's URI encoding (`/` kept when `keep_slash`, for keys in a path).
pub fn uri_encode(s: &str, keep_slash: bool) -> String {
    let set = if keep_slash {
        UNRESERVED_AND_SLASH
    } else {
        UNRESERVED
    };
    utf8_percent_encode(s, set).to_string()
}

/// A SigV4-signed request without a body. `base` is the endpoint URL (`http://127.0.0.1:9000`),
/// `path` already URI-encoded (`/bucket/key`), `query` unencoded `(name, value)` pairs (value
/// `""` for a valueless parameter such as `uploads`).
pub fn request(
    client: &reqwest::Client,
    method: reqwest::Method,
    base: &str,
    path: &str,
    query: &[(&str, &str)],
    region: &str,
    cred: &Credentials<'_>,
) -> Result<reqwest::RequestBuilder, String> {
    let query: Vec<String> = query
        .iter()
        .map(|(k, v)| match v.is_empty() {
            true => uri_encode(k, false),
            false => format!("{}={}", uri_encode(k, false), uri_encode(v, false)),
        })
        .collect();
    let mut url = format!("{}{path}", base.trim_end_matches('/'));
    if !query.is_empty() {
        url = format!("{url}?{}", query.join("&"));
    }
    let identity = aws_credential_types::Credentials::new(
        cred.key_id,
        cred.secret_key,
        cred.token.map(str::to_string),
        None,
        "streamjob",
    )
    .into();
    // S3 signs the payload hash header, and paths exactly as sent (no normalisation, no
    // double encoding)
    let mut settings = SigningSettings::default();
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("s3")
        .time(SystemTime::now())
        .settings(settings)
        .build()
        .map_err(|e| format!("signing parameters: {e}"))?
        .into();
    let signable = SignableRequest::new(
        method.as_str(),
        url.as_str(),
        std::iter::empty(),
        SignableBody::Bytes(&[]),
    )
    .map_err(|e| format!("cannot sign {url}: {e}"))?;
    let (instructions, _signature) = sign(signable, &params)
        .map_err(|e| format!("cannot sign {url}: {e}"))?
        .into_parts();
    let mut req = client.request(method, &url);
    for (name, value) in instructions.headers() {
        req = req.header(name, value);
    }
    Ok(req)
}

/// One open multipart upload.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct Upload {
    pub key: String,
    pub upload_id: String,
    /// When it was created, as the server wrote it (RFC 3339).
    #[serde(default)]
    pub initiated: String,
}

/// One page of a ListMultipartUploads answer (`encoding-type=url`: keys come URL-encoded, so a
/// key with spaces or control characters survives the XML).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct UploadsPage {
    #[serde(rename = "Upload", default)]
    uploads: Vec<Upload>,
    #[serde(default)]
    is_truncated: bool,
    #[serde(default)]
    next_key_marker: Option<String>,
    #[serde(default)]
    next_upload_id_marker: Option<String>,
}

/// A key as S3 writes it with `encoding-type=url` (`+` or `%20` for a space).
fn url_decode(s: &str) -> Result<String, String> {
    percent_decode_str(&s.replace('+', " "))
        .decode_utf8()
        .map(|k| k.into_owned())
        .map_err(|e| format!("key {s:?} is not UTF-8 once decoded: {e}"))
}

/// Where the next page of a listing starts: `(key-marker, upload-id-marker)`.
pub type NextPage = Option<(String, String)>;

/// Reads one page: its uploads (keys decoded) and the markers of the next page, if any.
pub fn parse_uploads(xml: &str) -> Result<(Vec<Upload>, NextPage), String> {
    let page: UploadsPage = quick_xml::de::from_str(xml)
        .map_err(|e| format!("cannot read the ListMultipartUploads answer: {e}"))?;
    let mut uploads = page.uploads;
    for u in &mut uploads {
        u.key = url_decode(&u.key)?;
    }
    let next = match page.next_key_marker {
        Some(k) if page.is_truncated && !k.is_empty() => Some((
            url_decode(&k)?,
            page.next_upload_id_marker.unwrap_or_default(),
        )),
        _ => None,
    };
    Ok((uploads, next))
}

/// Every open multipart upload whose key starts with `prefix`, over all pages; `fetch` answers
/// one page's XML for a query (the bucket and the signing are the caller's), `unreadable` makes
/// the caller's error of an answer that cannot be read.
pub async fn list_uploads<F, Fut, E>(
    prefix: &str,
    mut fetch: F,
    unreadable: impl Fn(String) -> E,
) -> Result<Vec<Upload>, E>
where
    F: FnMut(Vec<(&'static str, String)>) -> Fut,
    Fut: Future<Output = Result<String, E>>,
{
    let mut out = Vec::new();
    let mut marker: NextPage = None;
    loop {
        let mut query = vec![
            ("uploads", String::new()),
            ("prefix", prefix.to_string()),
            ("encoding-type", "url".to_string()),
        ];
        if let Some((key, id)) = marker.take() {
            query.push(("key-marker", key));
            query.push(("upload-id-marker", id));
        }
        let (uploads, next) = parse_uploads(&fetch(query).await?).map_err(&unreadable)?;
        out.extend(uploads);
        match next {
            Some(n) => marker = Some(n),
            None => return Ok(out),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_page_reads_with_decoded_keys_and_the_next_markers() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListMultipartUploadsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Bucket>b</Bucket><KeyMarker></KeyMarker><UploadIdMarker></UploadIdMarker>
  <NextKeyMarker>out/a%20b+c.json</NextKeyMarker><NextUploadIdMarker>id-2</NextUploadIdMarker>
  <EncodingType>url</EncodingType><MaxUploads>1000</MaxUploads><IsTruncated>true</IsTruncated>
  <Upload><Key>out/part-0%2B1.json</Key><UploadId>id-1</UploadId>
    <Initiator><ID>x</ID></Initiator><StorageClass>STANDARD</StorageClass>
    <Initiated>2026-12-02T10:00:00.000Z</Initiated></Upload>
  <Upload><Key>out/a%20b+c.json</Key><UploadId>id-2</UploadId></Upload>
</ListMultipartUploadsResult>"#;
        let (uploads, next) = parse_uploads(xml).unwrap();
        let keys: Vec<(&str, &str)> = uploads
            .iter()
            .map(|u| (u.key.as_str(), u.upload_id.as_str()))
            .collect();
        assert_eq!(
            keys,
            [("out/part-0+1.json", "id-1"), ("out/a b c.json", "id-2")]
        );
        assert_eq!(uploads[0].initiated, "2026-12-02T10:00:00.000Z");
        assert_eq!(next, Some(("out/a b c.json".into(), "id-2".into())));
        let last = xml.replace("<IsTruncated>true", "<IsTruncated>false");
        assert_eq!(parse_uploads(&last).unwrap().1, None);
        let empty = "<ListMultipartUploadsResult><IsTruncated>false</IsTruncated></ListMultipartUploadsResult>";
        assert_eq!(parse_uploads(empty).unwrap(), (Vec::new(), None));
        assert!(parse_uploads("<Error><Code>AccessDenied</Code>").is_err());
    }

    #[tokio::test]
    async fn listing_follows_the_markers_to_the_last_page() {
        let page = |n: u32, next: Option<&str>| {
            let more = next.map_or(String::new(), |k| {
                format!("<NextKeyMarker>{k}</NextKeyMarker><NextUploadIdMarker>u{n}</NextUploadIdMarker>")
            });
            format!(
                "<ListMultipartUploadsResult>{more}<IsTruncated>{}</IsTruncated><Upload><Key>k{n}</Key><UploadId>u{n}</UploadId></Upload></ListMultipartUploadsResult>",
                next.is_some()
            )
        };
        let mut asked = Vec::new();
        let got = list_uploads::<_, _, String>(
            "out/",
            |q| {
                asked.push(q.clone());
                let n = asked.len() as u32;
                let answer = page(n, (n < 3).then_some("k"));
                async move { Ok(answer) }
            },
            |e| e,
        )
        .await
        .unwrap();
        let ids: Vec<&str> = got.iter().map(|u| u.upload_id.as_str()).collect();
        assert_eq!(ids, ["u1", "u2", "u3"]);
        assert!(asked[0].contains(&("encoding-type", "url".to_string())));
        assert!(asked[2].contains(&("upload-id-marker", "u2".to_string())));
        assert!(!asked[0].iter().any(|(k, _)| *k == "key-marker"));
    }

    #[test]
    fn requests_carry_a_sigv4_authorization_for_s3() {
        let req = request(
            &reqwest::Client::new(),
            reqwest::Method::GET,
            "http://127.0.0.1:9000/",
            "/bucket",
            &[("uploads", ""), ("prefix", "a b/")],
            "us-east-1",
            &Credentials {
                key_id: "AKID",
                secret_key: "secret",
                token: Some("session"),
            },
        )
        .unwrap()
        .build()
        .unwrap();
        assert_eq!(
            req.url().as_str(),
            "http://127.0.0.1:9000/bucket?uploads&prefix=a%20b%2F"
        );
        let header = |n: &str| req.headers().get(n).unwrap().to_str().unwrap().to_string();
        let auth = header("authorization");
        assert!(
            auth.starts_with("AWS4-HMAC-SHA256 Credential=AKID/")
                && auth.contains("/us-east-1/s3/aws4_request"),
            "{auth}"
        );
        assert!(auth.contains("x-amz-content-sha256"), "{auth}");
        assert_eq!(header("x-amz-security-token"), "session");
        // the hash of an empty payload
        assert_eq!(
            header("x-amz-content-sha256"),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
