//! End-to-end harness for Streamjob: a real Kubernetes control plane (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler) built by `e2e/scripts/install.sh`, a real S3 server
//! (MinIO), and a test-only process kubelet that runs pod containers as local processes.
//!
//! Tests use [`fixtures::shared`] to get one environment per test binary.

pub mod binaries;
pub mod certs;
pub mod cluster;
pub mod error;
pub mod fixtures;
pub mod flink;
pub mod kafka;
pub mod kafka_cluster;
pub mod kubelet;
pub mod node;
pub mod process;
pub mod proxy;
pub mod s3_faults;
pub mod scenario;
pub mod store;
pub mod wait;

pub use error::{Error, Result};
