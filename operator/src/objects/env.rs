//! Variables every pod that reads or writes the job's files gets, whatever its engine: the
//! stores' credentials from `spec.storage`, as references to the user's Secrets (never values).

use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, SecretKeySelector};
use streamjob_crds::stores::vars;
use streamjob_crds::v1alpha1::StreamJobSpec;

pub(crate) fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(crate) fn secret_env(name: &str, secret: &str, key: &str) -> EnvVar {
    optional_secret_env(name, secret, key, false)
}

pub(crate) fn optional_secret_env(name: &str, secret: &str, key: &str, optional: bool) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.into(),
                key: key.into(),
                optional: optional.then_some(true),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The stores' credentials from `spec.storage`, as variables read from the user's Secrets (never
/// their values): every pod that reads or writes the job's files gets them, whatever its engine.
pub(crate) fn storage_env(spec: &StreamJobSpec) -> Vec<EnvVar> {
    let mut env = Vec::new();
    if let Some(creds) = spec
        .storage
        .as_ref()
        .and_then(|s| s.s3.as_ref())
        .and_then(|s| s.credentials_secret.as_ref())
    {
        env.push(secret_env(
            vars::AWS_ACCESS_KEY_ID,
            &creds.name,
            creds
                .access_key_id_key
                .as_deref()
                .unwrap_or(vars::AWS_ACCESS_KEY_ID),
        ));
        env.push(secret_env(
            vars::AWS_SECRET_ACCESS_KEY,
            &creds.name,
            creds
                .secret_access_key_key
                .as_deref()
                .unwrap_or(vars::AWS_SECRET_ACCESS_KEY),
        ));
    }
    // GCS: a service-account key (JSON), read by the storage layer from this variable
    if let Some(key) = spec
        .storage
        .as_ref()
        .and_then(|s| s.gcs.as_ref())
        .and_then(|g| g.service_account_key_secret.as_ref())
    {
        env.push(secret_env(
            vars::GOOGLE_SERVICE_ACCOUNT_KEY,
            &key.name,
            key.key.as_deref().unwrap_or("key.json"),
        ));
    }
    // Azure: the account key or a SAS token
    if let Some(creds) = spec
        .storage
        .as_ref()
        .and_then(|s| s.azure.as_ref())
        .and_then(|a| a.credentials_secret.as_ref())
    {
        env.push(match &creds.sas_token_key {
            Some(key) => secret_env(vars::AZURE_STORAGE_SAS_KEY, &creds.name, key),
            None => secret_env(
                vars::AZURE_STORAGE_ACCOUNT_KEY,
                &creds.name,
                creds
                    .account_key_key
                    .as_deref()
                    .unwrap_or(vars::AZURE_STORAGE_ACCOUNT_KEY),
            ),
        });
    }
    env
}
