//! AWS Signature Version 4 for S3 requests without a body: the few calls `object_store` has no
//! API for (ListMultipartUploads here; bucket creation and upload probes in tests and tools).
//! One signer, so the canonical request is built in one place, and the few helpers that read S3's
//! XML answers.

use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// Who signs.
#[derive(Clone, Copy, Debug)]
pub struct Credentials<'a> {
    pub key_id: &'a str,
    pub secret_key: &'a str,
    /// Session token of temporary credentials.
    pub token: Option<&'a str>,
}

/// A request to sign: `host` as in the URL (with a port if not the default), `path` already
/// URI-encoded (`/bucket/key`), `query` unencoded `(name, value)` pairs (value `""` for a
/// valueless parameter such as `uploads`).
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub method: &'a str,
    pub host: &'a str,
    pub path: &'a str,
    pub query: &'a [(&'a str, &'a str)],
}

/// What to send: the encoded query string for the URL and the headers to add (the `host`
/// header is the URL's own).
#[derive(Clone, Debug, PartialEq)]
pub struct Signed {
    pub query: String,
    pub headers: Vec<(&'static str, String)>,
}

/// S3's URI encoding (RFC 3986 unreserved characters kept; `/` kept when `keep_slash`).
pub fn uri_encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) || (keep_slash && b == b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The text of every `<tag>...</tag>` in `xml` (flat: no nesting of the same tag).
pub fn xml_elements<'a>(xml: &'a str, tag: &str) -> Vec<&'a str> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(i) = rest.find(&open) {
        let after = &rest[i + open.len()..];
        let Some(j) = after.find(&close) else { break };
        out.push(&after[..j]);
        rest = &after[j + close.len()..];
    }
    out
}

/// Undoes XML's five predefined entities.
pub fn xml_unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// HMAC-SHA256.
pub fn hmac_sha256(key: &[u8], msg: &[u8]) -> Vec<u8> {
    // HMAC takes keys of any length, so this cannot fail; an empty result would only make the
    // server refuse the signature
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
        return Vec::new();
    };
    mac.update(msg);
    mac.finalize().into_bytes().to_vec()
}

/// Signs `req` for S3 in `region` at time `now`.
pub fn sign(req: &Request<'_>, region: &str, cred: &Credentials<'_>, now: DateTime<Utc>) -> Signed {
    let mut pairs: Vec<(String, String)> = req
        .query
        .iter()
        .map(|(k, v)| (uri_encode(k, false), uri_encode(v, false)))
        .collect();
    pairs.sort();
    let query = pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&");
    let amz_date = now.format("%Y%m%dT%H%M%SZ").to_string();
    let day = now.format("%Y%m%d").to_string();
    let payload = hex::encode(Sha256::digest(b""));
    let mut headers: Vec<(&'static str, String)> = vec![
        ("host", req.host.to_string()),
        ("x-amz-content-sha256", payload.clone()),
        ("x-amz-date", amz_date.clone()),
    ];
    if let Some(token) = cred.token {
        headers.push(("x-amz-security-token", token.to_string()));
    }
    let signed_headers = headers
        .iter()
        .map(|(k, _)| *k)
        .collect::<Vec<_>>()
        .join(";");
    let canonical_headers: String = headers
        .iter()
        .map(|(k, v)| format!("{k}:{}\n", v.trim()))
        .collect();
    let canonical = format!(
        "{}\n{}\n{query}\n{canonical_headers}\n{signed_headers}\n{payload}",
        req.method, req.path
    );
    let scope = format!("{day}/{region}/s3/aws4_request");
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    let mut key = hmac_sha256(
        format!("AWS4{}", cred.secret_key).as_bytes(),
        day.as_bytes(),
    );
    for part in [region, "s3", "aws4_request"] {
        key = hmac_sha256(&key, part.as_bytes());
    }
    let signature = hex::encode(hmac_sha256(&key, to_sign.as_bytes()));
    headers.retain(|(k, _)| *k != "host");
    headers.push((
        "authorization",
        format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed_headers}, Signature={signature}",
            cred.key_id
        ),
    ));
    Signed { query, headers }
}

/// A signed request without body to the S3 endpoint `endpoint` (`http[s]://host[:port]`; the
/// bucket is in `path` for path-style, in the host for virtual-hosted style), or why the endpoint
/// is not a URL.
#[allow(clippy::too_many_arguments)]
pub fn request(
    client: &reqwest::Client,
    method: reqwest::Method,
    endpoint: &str,
    path: &str,
    query: &[(&str, &str)],
    region: &str,
    cred: &Credentials<'_>,
) -> Result<reqwest::RequestBuilder, String> {
    let base = endpoint.trim_end_matches('/');
    let url = reqwest::Url::parse(base).map_err(|e| format!("endpoint {base}: {e}"))?;
    // the Host header reqwest sends: no port when it is the scheme's default
    let host = match (url.host_str(), url.port()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_string(),
        (None, _) => return Err(format!("endpoint {base} has no host")),
    };
    let signed = sign(
        &Request {
            method: method.as_str(),
            host: &host,
            path,
            query,
        },
        region,
        cred,
        Utc::now(),
    );
    let target = if signed.query.is_empty() {
        format!("{base}{path}")
    } else {
        format!("{base}{path}?{}", signed.query)
    };
    Ok(signed
        .headers
        .iter()
        .fold(client.request(method, target), |r, (k, v)| r.header(*k, v)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231() {
        // RFC 4231, test case 2
        assert_eq!(
            hex::encode(hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn aws_documented_example_signs_the_same() {
        // The "GET Bucket Lifecycle" example of the AWS SigV4-for-S3 documentation
        // (https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html).
        let now = DateTime::parse_from_rfc3339("2013-05-24T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let signed = sign(
            &Request {
                method: "GET",
                host: "examplebucket.s3.amazonaws.com",
                path: "/",
                query: &[("lifecycle", "")],
            },
            "us-east-1",
            &Credentials {
                key_id: "AKIAIOSFODNN7EXAMPLE",
                secret_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                token: None,
            },
            now,
        );
        assert_eq!(signed.query, "lifecycle=");
        let auth = &signed.headers.last().unwrap().1;
        assert_eq!(
            auth,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"
        );
    }

    #[test]
    fn query_is_sorted_and_encoded_and_a_token_is_signed() {
        let now = Utc::now();
        let signed = sign(
            &Request {
                method: "GET",
                host: "127.0.0.1:9000",
                path: "/b",
                query: &[("uploads", ""), ("prefix", "a b/c")],
            },
            "us-east-1",
            &Credentials {
                key_id: "k",
                secret_key: "s",
                token: Some("t"),
            },
            now,
        );
        assert_eq!(signed.query, "prefix=a%20b%2Fc&uploads=");
        let names: Vec<&str> = signed.headers.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            names,
            [
                "x-amz-content-sha256",
                "x-amz-date",
                "x-amz-security-token",
                "authorization"
            ]
        );
        assert!(
            signed.headers[3].1.contains(
                "SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token"
            )
        );
    }
}
