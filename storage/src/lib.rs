//! # streamjob-storage: the storage layer every part uses
//!
//! One [`Store`] trait over S3 (and S3-compatible stores), GCS, Azure, HDFS and local disks, built
//! from a URL and the manifest's `spec.storage` ([`store::open_store`]) with one client per store
//! and process, connection limits per scheme, and retries in one place ([`retry`]). Checkpoints,
//! savepoints, sources, the fence and the file sink all read and write through it.
//!
//! Which stores exist, their schemes and credential variables are declared once in
//! `streamjob_crds::stores` (the CRD's rules and the validation read the same table; a test here
//! parses every scheme it declares).

pub mod error;
#[cfg(feature = "hdfs")]
pub mod hdfs;
pub mod retry;
pub mod s3_api;
pub mod store;

pub use error::{Error, Result};
pub use store::{Store, open_store};
