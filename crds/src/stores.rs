//! Every store a path may name, declared once: its URL schemes and the credential variables the
//! operator injects from the user's Secrets (`spec.storage`) and the storage layer reads. The CRD's
//! CEL rules on path fields ([`path_rule`], [`sink_path_rule`]), the Rust validation
//! (`validation::known_store`), the storage layer's refusals (`streamjob-storage`'s registry)
//! and the variables the operator sets (`operator/src/objects/env.rs`) all read this table.
//!
//! Adding a store: a row here, its client in `storage/src/store/` (the registry's `parse` and a
//! test that every scheme here parses), its settings in `spec.storage` (`v1alpha1.rs`), then
//! `cargo xtask generate`.

use schemars::Schema;

/// Variables holding store credentials (never values in a manifest: the operator reads them from
/// the Secrets `spec.storage` names).
pub mod vars {
    pub const AWS_ACCESS_KEY_ID: &str = "AWS_ACCESS_KEY_ID";
    pub const AWS_SECRET_ACCESS_KEY: &str = "AWS_SECRET_ACCESS_KEY";
    /// A GCS service-account key (JSON).
    pub const GOOGLE_SERVICE_ACCOUNT_KEY: &str = "GOOGLE_SERVICE_ACCOUNT_KEY";
    /// A path to a GCS service-account key file (set by users outside the operator).
    pub const GOOGLE_SERVICE_ACCOUNT: &str = "GOOGLE_SERVICE_ACCOUNT";
    pub const AZURE_STORAGE_ACCOUNT_KEY: &str = "AZURE_STORAGE_ACCOUNT_KEY";
    pub const AZURE_STORAGE_SAS_KEY: &str = "AZURE_STORAGE_SAS_KEY";
}

/// One kind of store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Store {
    pub name: &'static str,
    /// URL schemes that name it, in the order messages list them.
    pub schemes: &'static [&'static str],
    /// Accepted but not advertised (Hadoop's `abfs://`, read as `abfss://`).
    pub quiet_schemes: &'static [&'static str],
    /// Accepted only where the file sink writes (Hadoop's `s3a://`, which Flink's sinks use),
    /// read as the first scheme.
    pub sink_aliases: &'static [&'static str],
    /// Variables the storage layer reads its credentials from (any one may be set).
    pub credential_vars: &'static [&'static str],
}

/// Every store, in the order messages list them; a path without `://` is a local path.
pub const STORES: &[Store] = &[
    Store {
        name: "S3",
        schemes: &["s3"],
        quiet_schemes: &[],
        sink_aliases: &["s3a"],
        credential_vars: &[vars::AWS_ACCESS_KEY_ID],
    },
    Store {
        name: "HDFS",
        schemes: &["hdfs"],
        quiet_schemes: &[],
        sink_aliases: &[],
        credential_vars: &[],
    },
    Store {
        name: "GCS",
        schemes: &["gs"],
        quiet_schemes: &[],
        sink_aliases: &[],
        credential_vars: &[
            vars::GOOGLE_SERVICE_ACCOUNT_KEY,
            vars::GOOGLE_SERVICE_ACCOUNT,
        ],
    },
    Store {
        name: "Azure",
        schemes: &["az", "abfss"],
        quiet_schemes: &["abfs"],
        sink_aliases: &[],
        credential_vars: &[vars::AZURE_STORAGE_ACCOUNT_KEY, vars::AZURE_STORAGE_SAS_KEY],
    },
    Store {
        name: "local",
        schemes: &["file"],
        quiet_schemes: &[],
        sink_aliases: &[],
        credential_vars: &[],
    },
];

/// The store `scheme` names (`sink`: where the file sink writes, aliases included).
pub fn store_of(scheme: &str, sink: bool) -> Option<&'static Store> {
    STORES.iter().find(|s| {
        s.schemes.contains(&scheme)
            || s.quiet_schemes.contains(&scheme)
            || (sink && s.sink_aliases.contains(&scheme))
    })
}

/// Every accepted scheme in rule order (`s3`, its sink aliases, …, `abfs` before `abfss`).
fn accepted(sink: bool) -> Vec<&'static str> {
    let mut out = Vec::new();
    for s in STORES {
        let (first, rest) = s
            .schemes
            .split_first()
            .map_or((None, &[][..]), |(f, r)| (Some(*f), r));
        out.extend(first);
        if sink {
            out.extend(s.sink_aliases.iter().copied());
        }
        out.extend(s.quiet_schemes.iter().copied());
        out.extend(rest.iter().copied());
    }
    out
}

/// `use s3://, hdfs://, gs://, az://, abfss://, file:// or a local path`.
pub fn use_hint() -> String {
    let shown: Vec<String> = STORES
        .iter()
        .flat_map(|s| s.schemes.iter().map(|x| format!("{x}://")))
        .collect();
    format!("use {} or a local path", shown.join(", "))
}

/// The CEL rule and message for a path field (`sink`: the file sink's path).
pub fn cel(sink: bool) -> (String, String) {
    let starts: Vec<String> = accepted(sink)
        .iter()
        .map(|x| format!("self.startsWith('{x}://')"))
        .collect();
    let rule = format!("!self.contains('://') || {}", starts.join(" || "));
    let mut message = format!("unknown scheme: {}", use_hint());
    if sink {
        for s in STORES {
            for alias in s.sink_aliases {
                let read_as = s.schemes.first().copied().unwrap_or_default();
                message.push_str(&format!(" ({alias}:// is read as {read_as}://)"));
            }
        }
    }
    (rule, message)
}

fn add_rule(schema: &mut Schema, sink: bool) {
    let (rule, message) = cel(sink);
    schema.insert(
        "x-kubernetes-validations".into(),
        serde_json::json!([{"rule": rule, "message": message}]),
    );
}

/// `#[schemars(transform = …)]` of a path field: the scheme must be a known store's.
pub fn path_rule(schema: &mut Schema) {
    add_rule(schema, false);
}

/// [`path_rule`] for the file sink's path (sink aliases accepted).
pub fn sink_path_rule(schema: &mut Schema) {
    add_rule(schema, true);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generated rules are the ones the CRD carried when they were written by hand.
    #[test]
    fn rules_and_hints_read_as_before() {
        let (rule, message) = cel(false);
        assert_eq!(
            rule,
            "!self.contains('://') || self.startsWith('s3://') || self.startsWith('hdfs://') || self.startsWith('gs://') || self.startsWith('az://') || self.startsWith('abfs://') || self.startsWith('abfss://') || self.startsWith('file://')"
        );
        assert_eq!(
            message,
            "unknown scheme: use s3://, hdfs://, gs://, az://, abfss://, file:// or a local path"
        );
        let (rule, message) = cel(true);
        assert!(rule.contains("self.startsWith('s3://') || self.startsWith('s3a://') || self.startsWith('hdfs://')"), "{rule}");
        assert!(message.ends_with("(s3a:// is read as s3://)"), "{message}");
        assert_eq!(store_of("abfs", false).map(|s| s.name), Some("Azure"));
        assert_eq!(store_of("s3a", false), None);
        assert_eq!(store_of("s3a", true).map(|s| s.name), Some("S3"));
        assert_eq!(store_of("ftp", true), None);
    }
}
