//! The `StreamJob` custom resource (`streamjob.io/v1alpha1`): Rust types, the CRD generated from
//! them, and the validation that the API server cannot express in a schema or a CEL rule.

pub mod crd;
pub mod flink;
#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod fuzz_loop;
pub mod hash;
pub mod kinds;
pub mod pod_template;
pub mod secrets;
pub mod stage;
pub mod stores;
pub mod strict;
pub mod units;
pub mod v1alpha1;
pub mod validation;

/// Everything that can go wrong when reading or validating a StreamJob.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The manifest is not valid YAML or does not match the StreamJob schema.
    #[error("cannot read StreamJob manifest: {0}")]
    Parse(#[from] serde_yaml_ng::Error),

    /// The manifest is some other kind of object.
    #[error(
        "expected apiVersion streamjob.io/v1alpha1 and kind StreamJob, found {api_version}/{kind}"
    )]
    WrongKind { api_version: String, kind: String },

    /// A duration such as `30s` or `1h30m` could not be parsed.
    #[error(
        "{field}: invalid duration {value:?}: use a number followed by ms, s, m, h or d, for example 30s or 1h30m"
    )]
    Duration { field: String, value: String },

    /// A size such as `128MiB` could not be parsed.
    #[error(
        "{field}: invalid size {value:?}: use a number with an optional unit B, KB, MB, GB, KiB, MiB, GiB or TiB, for example 128MiB"
    )]
    Size { field: String, value: String },

    /// The spec is well formed but breaks one or more rules; every broken rule is listed.
    #[error("invalid StreamJob spec:\n  - {}", .0.join("\n  - "))]
    Invalid(Vec<String>),

    /// Serialising a value (for hashing or CRD output) failed.
    #[error("cannot serialise: {0}")]
    Serialize(#[from] serde_json::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
