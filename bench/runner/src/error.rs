//! Errors of the runner's library modules (`anyhow` is used only in `main`).

use std::path::Path;

/// What can go wrong while preparing, running or reading back a benchmark.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parquet {
        path: String,
        #[source]
        source: parquet::errors::ParquetError,
    },
    #[error("{path}: {source}")]
    Arrow {
        path: String,
        #[source]
        source: arrow::error::ArrowError,
    },
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("YAML: {0}")]
    Yaml(#[from] serde_yaml_ng::Error),
    #[error("manifest: {0}")]
    Manifest(#[from] streamjob_crds::Error),
    #[error("{0}")]
    Other(String),
}

impl Error {
    /// An I/O error on `path`.
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.as_ref().display().to_string(),
            source,
        }
    }

    /// A Parquet error on `path`.
    pub fn parquet(path: impl AsRef<Path>, source: parquet::errors::ParquetError) -> Self {
        Self::Parquet {
            path: path.as_ref().display().to_string(),
            source,
        }
    }

    /// An Arrow error on `path`.
    pub fn arrow(path: impl AsRef<Path>, source: arrow::error::ArrowError) -> Self {
        Self::Arrow {
            path: path.as_ref().display().to_string(),
            source,
        }
    }
}

/// Result of the runner's library modules.
pub type Result<T> = std::result::Result<T, Error>;
