//! Stores from URLs and a manifest's `spec.storage`, with one client per store and process:
//! `s3://` (`s3a://`), `gs://`, `az://` / `abfss://`, `hdfs://`, `file://` and local paths.
//!
//! A process (a runtime pod, a worker, a test) may open the same bucket many times: checkpoints,
//! savepoints, each files source and each sink subtask. They all get a [`Prefixed`] view of one
//! shared client (one connection pool, one credential cache) behind one [`ConnectionGate`] per
//! scheme, so `storage.limits` bounds every reader and writer of the process together, as Flink's
//! `fs.<scheme>.limit.*` do.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use streamjob_crds::v1alpha1::StorageSpec;

use super::{CloudStore, ConnectionGate, GcsStore, LimitedStore, LocalStore, Prefixed, Store};
use crate::error::{Error, Result};
use crate::retry::RetryPolicy;

/// Where a URL points: the shared client it needs, and the directory below that client's root.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// An S3 bucket.
    S3 { bucket: String },
    /// An HDFS name node (`hdfs://host:port`).
    Hdfs { name_node: String },
    /// A GCS bucket.
    Gcs { bucket: String },
    /// An Azure container; the account from the URL (abfss://) or `storage.azure.account`.
    Azure {
        account: Option<String>,
        container: String,
    },
    /// The local file system (rooted at `/`).
    Local,
}

impl Target {
    fn scheme(&self) -> &'static str {
        match self {
            Target::S3 { .. } => "s3",
            Target::Hdfs { .. } => "hdfs",
            Target::Gcs { .. } => "gs",
            Target::Azure { .. } => "az",
            Target::Local => "file",
        }
    }
}

/// Splits a URL into its target and the directory below the target's root.
fn parse(url: &str, storage: Option<&StorageSpec>) -> Result<(Target, String)> {
    let url = url.trim_end_matches('/');
    if url.starts_with("s3://") || url.starts_with("s3a://") {
        let (bucket, prefix) = parse_s3_url(url)?;
        return Ok((Target::S3 { bucket }, prefix));
    }
    if let Some(rest) = url.strip_prefix("gs://") {
        let (bucket, prefix) = bucket_and_prefix(url, rest)?;
        return Ok((Target::Gcs { bucket }, prefix));
    }
    if let Some(rest) = url
        .strip_prefix("az://")
        .or_else(|| url.strip_prefix("azure://"))
    {
        let (container, prefix) = bucket_and_prefix(url, rest)?;
        return Ok((
            Target::Azure {
                account: None,
                container,
            },
            prefix,
        ));
    }
    if let Some(rest) = url
        .strip_prefix("abfss://")
        .or_else(|| url.strip_prefix("abfs://"))
    {
        // abfss://container@account.dfs.core.windows.net/path (ADLS Gen2's Hadoop form)
        let (authority, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let (container, host) = authority.split_once('@').ok_or_else(|| {
            Error::Config(format!(
                "{url}: write abfss://container@account.dfs.core.windows.net/path"
            ))
        })?;
        let account = host.split('.').next().unwrap_or_default();
        if container.is_empty() || account.is_empty() {
            return Err(Error::Config(format!(
                "{url}: write abfss://container@account.dfs.core.windows.net/path"
            )));
        }
        return Ok((
            Target::Azure {
                account: Some(account.to_string()),
                container: container.to_string(),
            },
            prefix.trim_matches('/').to_string(),
        ));
    }
    if let Some(rest) = url.strip_prefix("hdfs://") {
        // hdfs://namenode:port/path, or hdfs:///path with storage.hdfs.nameNode
        let (authority, dir) = rest.split_once('/').unwrap_or((rest, ""));
        let name_node = if authority.is_empty() {
            storage
                .and_then(|s| s.hdfs.as_ref())
                .map(|h| h.name_node.trim_end_matches('/').to_string())
                .ok_or_else(|| {
                    Error::Config(format!("{url}: hdfs:///path needs storage.hdfs.nameNode"))
                })?
        } else {
            format!("hdfs://{authority}")
        };
        return Ok((
            Target::Hdfs { name_node },
            dir.trim_matches('/').to_string(),
        ));
    }
    let local = match url.strip_prefix("file://") {
        Some(path) => path,
        None if url.contains("://") => {
            return Err(Error::Config(format!(
                "{url}: unknown scheme; {}",
                streamjob_crds::stores::use_hint()
            )));
        }
        None => url,
    };
    let local = if local.is_empty() { "/" } else { local };
    let absolute = std::path::absolute(local)
        .map_err(|e| Error::Config(format!("{url}: not a usable local path: {e}")))?;
    let dir = absolute
        .to_str()
        .ok_or_else(|| Error::Config(format!("{url}: the path is not UTF-8")))?
        .trim_matches('/')
        .to_string();
    Ok((Target::Local, dir))
}

/// Splits `s3://bucket/prefix` into bucket and prefix.
pub fn parse_s3_url(url: &str) -> Result<(String, String)> {
    let rest = url
        .strip_prefix("s3://")
        .or_else(|| url.strip_prefix("s3a://"))
        .ok_or_else(|| Error::Config(format!("not an s3:// URL: {url}")))?;
    bucket_and_prefix(url, rest)
}

/// `bucket/prefix` (what follows the scheme) into bucket and prefix.
fn bucket_and_prefix(url: &str, rest: &str) -> Result<(String, String)> {
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(Error::Config(format!("no bucket in {url}")));
    }
    Ok((bucket.to_string(), prefix.trim_matches('/').to_string()))
}

/// The store at `url`: `s3://bucket/prefix` (`storage.s3`; credentials from the AWS chain: the
/// environment's keys and session token — which the operator fills from the credentials Secret —
/// web identity / IRSA, EKS Pod Identity and ECS container credentials, then the instance
/// profile), `hdfs://namenode:port/path` (or `hdfs:///path` with `storage.hdfs.nameNode`; cargo
/// feature `hdfs`), `file:///dir` or a plain local path. A view of the process's one client for
/// that store, behind the process's connection gate for its scheme (`storage.limits`).
pub fn open(url: &str, storage: Option<&StorageSpec>) -> Result<Prefixed> {
    let (target, dir) = parse(url, storage)?;
    let policy = RetryPolicy::for_storage(storage)?;
    // the configuration a client is built from is its identity: two manifests with different
    // settings for the same bucket get two clients
    // The tokio runtime is part of it too: clients keep connections and background tasks on
    // the runtime that made them, which dies with it (one runtime per process in the binaries;
    // one per test under #[tokio::test]).
    let runtime = tokio::runtime::Handle::try_current().map(|h| h.id().to_string());
    let identity = format!(
        "{target:?}|{:?}|{:?}|{:?}|{policy:?}|{:?}|{runtime:?}",
        storage.and_then(|s| s.s3.as_ref()),
        storage.and_then(|s| s.gcs.as_ref()),
        storage.and_then(|s| s.azure.as_ref()),
        storage.and_then(|s| s.limits.as_ref()),
    );
    // the environment's credentials are part of a client (tests change them in-process)
    let credentials: &[&str] =
        streamjob_crds::stores::store_of(target.scheme(), false).map_or(&[], |s| s.credential_vars);
    let identity = credentials.iter().fold(identity, |id, var| {
        format!("{id}|{}", std::env::var(var).unwrap_or_default())
    });
    let mut clients = clients()
        .lock()
        .map_err(|_| Error::State("store registry poisoned".into()))?;
    if let Some(client) = clients.get(&identity) {
        return Ok(Prefixed::new(client.clone(), &dir));
    }
    let client = build(&target, storage, policy)?;
    let client: Arc<dyn Store> = match storage.and_then(|s| s.limits.as_ref()) {
        Some(limits) => {
            let gate = gates()
                .lock()
                .map_err(|_| Error::State("connection gates poisoned".into()))?
                .entry(format!("{}|{limits:?}", target.scheme()))
                .or_insert_with(|| {
                    ConnectionGate::new(limits)
                        .map(Arc::new)
                        .map_err(|e| GateError(e.to_string()))
                })
                .clone()?;
            Arc::new(LimitedStore::shared(client, gate))
        }
        None => client,
    };
    clients.insert(identity, client.clone());
    Ok(Prefixed::new(client, &dir))
}

/// [`open`] as a trait object (what the file sink holds).
pub fn open_store(url: &str, storage: Option<&StorageSpec>) -> Result<Arc<dyn Store>> {
    Ok(Arc::new(open(url, storage)?))
}

/// The process's clients, by the configuration they were built from.
fn clients() -> &'static Mutex<HashMap<String, Arc<dyn Store>>> {
    static CLIENTS: OnceLock<Mutex<HashMap<String, Arc<dyn Store>>>> = OnceLock::new();
    CLIENTS.get_or_init(Default::default)
}

/// The process's connection gates, by scheme and limits. A failed parse of the limits is kept
/// too, so every opener reports it.
type Gates = HashMap<String, Result<Arc<ConnectionGate>, GateError>>;

/// [`Error`] is not `Clone`; the gate's only failure is a bad duration, kept as its message.
#[derive(Debug, Clone)]
struct GateError(String);

impl From<GateError> for Error {
    fn from(e: GateError) -> Self {
        Error::Config(e.0)
    }
}

fn gates() -> &'static Mutex<Gates> {
    static GATES: OnceLock<Mutex<Gates>> = OnceLock::new();
    GATES.get_or_init(Default::default)
}

/// A new client rooted at the target's root.
fn build(
    target: &Target,
    storage: Option<&StorageSpec>,
    policy: RetryPolicy,
) -> Result<Arc<dyn Store>> {
    match target {
        Target::S3 { bucket } => build_s3(bucket, storage, policy),
        Target::Hdfs { name_node } => build_hdfs(name_node, policy),
        Target::Gcs { bucket } => build_gcs(bucket, storage, policy),
        Target::Azure { account, container } => {
            build_azure(account.as_deref(), container, storage, policy)
        }
        Target::Local => Ok(Arc::new(LocalStore::new("/").with_retry_policy(policy))),
    }
}

fn build_s3(
    bucket: &str,
    storage: Option<&StorageSpec>,
    policy: RetryPolicy,
) -> Result<Arc<dyn Store>> {
    let s3 = storage.and_then(|s| s.s3.clone()).unwrap_or_default();
    // from_env: AWS_ACCESS_KEY_ID / _SECRET_ACCESS_KEY / _SESSION_TOKEN, AWS_WEB_IDENTITY_TOKEN_FILE
    // with AWS_ROLE_ARN (IRSA), AWS_CONTAINER_CREDENTIALS_FULL_URI (EKS Pod Identity), ..., then
    // the instance metadata service; the manifest's settings win over the environment's
    let mut builder = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_allow_http(s3.allow_http)
        .with_virtual_hosted_style_request(s3.virtual_hosted_style)
        .with_retry(policy.object_store())
        .with_client_options(policy.client_options(s3.allow_http));
    if let Some(endpoint) = &s3.endpoint {
        builder = builder.with_endpoint(endpoint);
    }
    if let Some(region) = &s3.region {
        builder = builder.with_region(region);
    }
    let region = builder
        .get_config_value(&AmazonS3ConfigKey::Region)
        .unwrap_or_else(|| "us-east-1".into());
    let builder = builder.with_region(&region);
    let endpoint = builder.get_config_value(&AmazonS3ConfigKey::Endpoint);
    let client = builder.build().map_err(|e| Error::Store {
        op: "configure",
        path: format!("s3://{bucket}"),
        retried: false,
        source: e,
    })?;
    Ok(Arc::new(
        CloudStore::s3(client, bucket, "")
            .with_s3_endpoint(endpoint.as_deref(), &region, s3.virtual_hosted_style)
            .with_retry_policy(policy),
    ))
}

/// Google's public endpoint.
const GCS_URL: &str = "https://storage.googleapis.com";

fn build_gcs(
    bucket: &str,
    storage: Option<&StorageSpec>,
    policy: RetryPolicy,
) -> Result<Arc<dyn Store>> {
    let gcs = storage.and_then(|s| s.gcs.clone()).unwrap_or_default();
    let configure = |e: object_store::Error| Error::Store {
        op: "configure",
        path: format!("gs://{bucket}"),
        retried: false,
        source: e,
    };
    // from_env: GOOGLE_SERVICE_ACCOUNT_KEY (the operator fills it from the key Secret),
    // GOOGLE_SERVICE_ACCOUNT / GOOGLE_APPLICATION_CREDENTIALS (a key file), else Application
    // Default Credentials (Workload Identity, the metadata server)
    let mut builder = GoogleCloudStorageBuilder::from_env()
        .with_bucket_name(bucket)
        .with_retry(policy.object_store());
    let base_url = gcs.endpoint.clone().unwrap_or_else(|| GCS_URL.to_string());
    if gcs.endpoint.is_some() || gcs.anonymous {
        // object_store takes another endpoint (and no credentials) only through the key
        let key = builder.get_config_value(&GoogleConfigKey::ServiceAccountKey);
        builder = builder.with_service_account_key(gcs_key(
            key.as_deref(),
            &base_url,
            gcs.anonymous,
            bucket,
        )?);
    }
    let client = builder
        .with_client_options(policy.client_options(base_url.starts_with("http://")))
        .build()
        .map_err(configure)?;
    // object_store's client for the credentials only (see super::gcs for why)
    Ok(Arc::new(GcsStore::new(
        client.credentials().clone(),
        &base_url,
        bucket,
        policy,
    )?))
}

/// The service-account key `object_store` reads, with the endpoint and anonymous access set.
fn gcs_key(key: Option<&str>, base_url: &str, anonymous: bool, bucket: &str) -> Result<String> {
    let mut key: serde_json::Map<String, serde_json::Value> = match key {
        Some(k) => serde_json::from_str(k).map_err(|e| {
            Error::Config(format!(
                "gs://{bucket}: the service-account key (GOOGLE_SERVICE_ACCOUNT_KEY) is not JSON: {e}"
            ))
        })?,
        None => serde_json::Map::new(),
    };
    for field in ["private_key", "private_key_id", "client_email"] {
        key.entry(field).or_insert_with(|| "".into());
    }
    key.insert("gcs_base_url".into(), base_url.into());
    if anonymous {
        key.insert("disable_oauth".into(), true.into());
    }
    Ok(serde_json::Value::Object(key).to_string())
}

fn build_azure(
    account: Option<&str>,
    container: &str,
    storage: Option<&StorageSpec>,
    policy: RetryPolicy,
) -> Result<Arc<dyn Store>> {
    let az = storage.and_then(|s| s.azure.clone()).unwrap_or_default();
    // from_env: AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_KEY (the operator fills them from
    // the credentials Secret), AZURE_CLIENT_ID + AZURE_TENANT_ID + AZURE_FEDERATED_TOKEN_FILE
    // (workload identity), else the managed identity
    let mut builder = MicrosoftAzureBuilder::from_env()
        .with_container_name(container)
        .with_retry(policy.object_store())
        .with_client_options(policy.client_options(az.allow_http));
    if let Some(account) = account.or(az.account.as_deref()) {
        builder = builder.with_account(account);
    }
    if let Some(endpoint) = &az.endpoint {
        builder = builder.with_endpoint(endpoint.clone());
    }
    let client = builder.build().map_err(|e| Error::Store {
        op: "configure",
        path: format!("az://{container}"),
        retried: false,
        source: e,
    })?;
    Ok(Arc::new(
        CloudStore::azure(client, container, "").with_retry_policy(policy),
    ))
}

#[cfg(feature = "hdfs")]
fn build_hdfs(name_node: &str, policy: RetryPolicy) -> Result<Arc<dyn Store>> {
    Ok(Arc::new(
        crate::hdfs::HdfsStore::new(name_node, "/")?.with_retry_policy(policy),
    ))
}

#[cfg(not(feature = "hdfs"))]
fn build_hdfs(name_node: &str, _policy: RetryPolicy) -> Result<Arc<dyn Store>> {
    Err(Error::Config(format!(
        "{name_node}: this build has no HDFS support (cargo feature `hdfs` of streamjob-filesink)"
    )))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn azure(account: Option<&str>, container: &str) -> Target {
        Target::Azure {
            account: account.map(str::to_string),
            container: container.to_string(),
        }
    }

    /// Every scheme of the store table (crds::stores, what validation and the CRD accept) parses
    /// here into its store, and the table names the store a URL's target is.
    #[test]
    fn every_declared_scheme_is_served() {
        let sample = |scheme: &str| match scheme {
            "abfs" | "abfss" => format!("{scheme}://c@acct.dfs.core.windows.net/p"),
            "hdfs" => "hdfs://nn:8020/p".to_string(),
            "file" => "file:///tmp/p".to_string(),
            other => format!("{other}://b/p"),
        };
        for store in streamjob_crds::stores::STORES {
            let all = store
                .schemes
                .iter()
                .chain(store.quiet_schemes)
                .chain(store.sink_aliases);
            for scheme in all {
                let (target, _) = parse(&sample(scheme), None)
                    .unwrap_or_else(|e| panic!("{scheme}:// ({}): {e}", store.name));
                let named = streamjob_crds::stores::store_of(target.scheme(), false);
                assert_eq!(named.map(|s| s.name), Some(store.name), "{scheme}://");
            }
        }
    }

    #[test]
    fn parses_gcs_and_azure_urls() {
        let ok = |url: &str| parse(url, None).unwrap();
        assert_eq!(
            ok("gs://b/x/y/"),
            (Target::Gcs { bucket: "b".into() }, "x/y".into())
        );
        assert_eq!(ok("az://c/out"), (azure(None, "c"), "out".into()));
        assert_eq!(ok("azure://c"), (azure(None, "c"), String::new()));
        assert_eq!(
            ok("abfss://c@acct.dfs.core.windows.net/a/b"),
            (azure(Some("acct"), "c"), "a/b".into())
        );
        assert_eq!(
            ok("abfs://c@acct.blob.core.windows.net"),
            (azure(Some("acct"), "c"), String::new())
        );
        for bad in [
            "gs:///x",
            "az:///x",
            "abfss://acct.dfs.core.windows.net/x",
            "abfss://@acct.dfs.core.windows.net/x",
            "wasbs://c@acct.blob.core.windows.net/x",
        ] {
            let err = parse(bad, None).unwrap_err().to_string();
            assert!(err.contains(bad.trim_end_matches('/')), "{bad}: {err}");
        }
    }

    #[test]
    fn gcs_key_carries_the_endpoint_and_keeps_the_given_key() {
        let anonymous: serde_json::Value =
            serde_json::from_str(&gcs_key(None, "http://gcs:4443", true, "b").unwrap()).unwrap();
        assert_eq!(anonymous["gcs_base_url"], "http://gcs:4443");
        assert_eq!(anonymous["disable_oauth"], true);
        assert_eq!(anonymous["client_email"], "");
        let given = r#"{"client_email":"sa@p.iam.gserviceaccount.com","private_key":"k","private_key_id":"i"}"#;
        let key: serde_json::Value =
            serde_json::from_str(&gcs_key(Some(given), "https://private", false, "b").unwrap())
                .unwrap();
        assert_eq!(key["client_email"], "sa@p.iam.gserviceaccount.com");
        assert_eq!(key["gcs_base_url"], "https://private");
        assert!(key.get("disable_oauth").is_none());
        let err = gcs_key(Some("not json"), "x", false, "b").unwrap_err();
        assert!(
            err.to_string().contains("GOOGLE_SERVICE_ACCOUNT_KEY"),
            "{err}"
        );
    }
}
