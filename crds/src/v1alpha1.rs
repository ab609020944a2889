//! `streamjob.io/v1alpha1`: the StreamJob spec a user writes and the status the operator reports.
//!
//! Doc comments on fields are the descriptions `kubectl explain streamjob.spec...` shows.
//! "Exactly one of" choices are structs of optional fields plus a CEL rule: Kubernetes structural
//! schemas cannot express Rust enums with data, and this keeps the YAML the way users write it.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::stage::Stage;

pub const API_VERSION: &str = "streamjob.io/v1alpha1";
pub const KIND: &str = "StreamJob";

/// A long-running streaming job: its pipeline, how it is checkpointed, and how the operator moves
/// it to a new version when the spec changes.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "streamjob.io",
    version = "v1alpha1",
    kind = "StreamJob",
    plural = "streamjobs",
    shortname = "sj",
    namespaced,
    status = "StreamJobStatus",
    doc = "A long-running streaming job kept alive through every change: the operator checkpoints it, and when the spec changes (image, pipeline, parallelism) it takes a savepoint, checks that the new version can restore it before touching the running job, and moves the job over in place or through a warm shadow copy, rolling back if the new version fails. kubectl get sj shows the phase; kubectl describe sj shows conditions and events. Docs: https://github.com/streamjob/streamjob/tree/main/docs",
    scale(
        spec_replicas_path = ".spec.parallelism",
        status_replicas_path = ".status.deployment.parallelism",
        label_selector_path = ".status.selector"
    ),
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status","description":"Whether the job runs and completes checkpoints"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase","description":"Lifecycle phase of the job"}"#,
    printcolumn = r#"{"name":"Image","type":"string","jsonPath":".spec.image","description":"Runtime image of the job"}"#,
    printcolumn = r#"{"name":"Parallelism","type":"integer","jsonPath":".spec.parallelism","description":"Subtasks per operator"}"#,
    printcolumn = r#"{"name":"Last Savepoint","type":"date","jsonPath":".status.lastSavepoint.time","description":"When the latest savepoint completed"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Records/s","type":"number","jsonPath":".status.throughput.recordsInPerSecond","priority":1,"description":"Records read per second by the sources (kubectl get -o wide)"}"#,
    printcolumn = r#"{"name":"Lag","type":"integer","jsonPath":".status.throughput.consumerLag","priority":1,"description":"Kafka records not yet read by the job (kubectl get -o wide)"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "self.maxParallelism >= self.parallelism",
        "message": "spec.maxParallelism must be at least spec.parallelism: raise maxParallelism or lower parallelism"
    },
    {
        "rule": "has(self.engine) && self.engine == 'flink' ? has(self.flink) && (!has(self.pipeline) || size(self.pipeline) == 0) : !has(self.flink) && has(self.pipeline)",
        "message": "spec.engine flink needs spec.flink and no spec.pipeline (the pipeline is the Flink job's code); the runtime engine needs spec.pipeline and no spec.flink"
    },
    {
        "rule": "(has(self.engine) ? self.engine : 'runtime') == (has(oldSelf.engine) ? oldSelf.engine : 'runtime')",
        "message": "spec.engine is immutable (absent means runtime): a job's state belongs to its engine; create a new StreamJob to change it"
    },
    {
        "rule": "!has(self.engine) || self.engine != 'flink' || !has(self.upgrade) || !has(self.upgrade.strategy) || self.upgrade.strategy == 'InPlace'",
        "message": "spec.upgrade.strategy: Flink jobs upgrade InPlace (a warm Shadow copy needs our runtime's standby mode)"
    }
]))]
pub struct StreamJobSpec {
    /// What runs the job: `runtime` (ours, the default) or `flink` (an Apache Flink standalone
    /// application cluster per version, see spec.flink). Immutable; absent means `runtime`, so
    /// adding or removing the field switches nothing (a rule on the spec, where `oldSelf` sees
    /// an absent field too; a rule on the field runs only when both sides have it).
    #[serde(default, skip_serializing_if = "EngineKind::is_runtime")]
    pub engine: EngineKind,

    /// The Flink job, with `engine: flink`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flink: Option<crate::flink::FlinkSpec>,

    /// Container image with the `streamjob-runtime` binary (or a user binary built on the runtime
    /// library). Changing it upgrades the job through a savepoint.
    #[schemars(length(min = 1))]
    pub image: String,

    /// Image pull policy for the runtime pods (Always, IfNotPresent, Never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,

    /// Number of parallel subtasks of every operator. Changing it rescales the job through a
    /// savepoint (key groups are re-divided among subtasks).
    #[serde(default = "default_parallelism")]
    #[schemars(range(min = 1, max = 32768))]
    pub parallelism: u32,

    /// Number of key groups keyed state is partitioned into; the upper bound for parallelism.
    /// Fixed for the life of the job's state: it cannot be changed once set.
    #[serde(default = "default_max_parallelism")]
    #[schemars(range(min = 1, max = 32768))]
    #[schemars(extend("x-kubernetes-validations" = [
        {
            "rule": "self == oldSelf",
            "message": "spec.maxParallelism is immutable: it fixes the key groups of the job's state; create a new StreamJob (from a savepoint) to change it"
        }
    ]))]
    pub max_parallelism: u32,

    /// Worker pods that run the job's subtasks next to the coordinator pod (0: the coordinator
    /// pod runs every subtask). Subtask `j` of every step runs on worker `j % workers`, and
    /// `keyBy` data moves between workers over the network. Changing it redeploys the job through
    /// a savepoint, like a parallelism change.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0, max = 1024))]
    pub workers: u32,

    /// Desired state: `running`, or `suspended` (the job is stopped with a savepoint and resumes
    /// from it when set back to `running`).
    #[serde(default)]
    pub state: JobState,

    /// How spec changes are rolled out.
    #[serde(default)]
    pub upgrade: UpgradeSpec,

    /// Periodic checkpoints: the job's recovery points after failures.
    pub checkpoints: CheckpointSpec,

    /// Savepoints: user-owned, relocatable snapshots taken for upgrades, on request and periodically.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub savepoints: Option<SavepointSpec>,

    /// Savepoint (or retained checkpoint) path the job starts from when it is first deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_savepoint: Option<String>,

    /// How runtime pods reach object stores and HDFS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<StorageSpec>,

    /// Where records rejected by an operator with `onBadRecord: deadLetter` are written
    /// (a directory path or URL, for example s3://bucket/dead-letter/clicks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    #[schemars(transform = crate::stores::path_rule)]
    pub dead_letter_path: Option<String>,

    /// The job graph, a chain of steps from one source to one sink. Every step has a stable `uid`
    /// that its state is matched by when the job is restored from a savepoint.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 2, max = 64))]
    #[schemars(extend("x-kubernetes-validations" = [
        {
            "rule": "self.all(s, self.filter(t, t.uid == s.uid).size() == 1)",
            "message": "spec.pipeline: every step's uid must be unique: rename the duplicate uid"
        },
        {
            "rule": "has(self[0].source) && self.filter(s, has(s.source)).size() == 1",
            "message": "spec.pipeline: the first step must be the job's only source: put exactly one step with `source` at the head"
        },
        {
            "rule": "(has(self[size(self) - 1].fileSink) || has(self[size(self) - 1].print)) && self.filter(s, has(s.fileSink) || has(s.print)).size() == 1",
            "message": "spec.pipeline: the last step must be the job's only sink: end the pipeline with exactly one `fileSink` or `print` step"
        }
    ]))]
    pub pipeline: Vec<PipelineStep>,

    /// Overrides merged into every pod of the job (runtime and worker pods; Flink JobManager,
    /// TaskManager, check and dispose pods): resources, nodeSelector, tolerations, service
    /// account, extra env, volumes and labels. The template container named `runtime` (our
    /// runtime) or `flink-main-container` (Flink) is merged into the operator's container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<crate::pod_template::PodTemplate>,
}

/// The engine a job runs on.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// Our runtime: the pipeline in spec.pipeline.
    #[default]
    Runtime,
    /// Apache Flink: the job in spec.flink.
    Flink,
}

impl EngineKind {
    pub fn is_runtime(&self) -> bool {
        *self == EngineKind::Runtime
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn default_parallelism() -> u32 {
    1
}

fn default_max_parallelism() -> u32 {
    128
}

/// Desired run state of a job.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// The job runs.
    #[default]
    Running,
    /// The job is stopped with a savepoint and restores from it when resumed.
    Suspended,
}

/// How a changed spec is rolled out.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeSpec {
    /// Which state the new version starts from: `savepoint` (stop the old job with a savepoint),
    /// `last-state` (the latest completed checkpoint; for jobs that cannot take a savepoint), or
    /// `stateless` (start empty).
    #[serde(default)]
    pub mode: UpgradeMode,

    /// `InPlace` stops the old version and starts the new one; `Shadow` starts the new version's pods
    /// beside the old ones and keeps the old ones warm until the new one is promoted.
    #[serde(default)]
    pub strategy: UpgradeStrategy,

    /// Restore even when savepoint state belongs to an operator uid the new pipeline no longer has;
    /// that state is dropped.
    #[serde(default)]
    pub allow_non_restored_state: bool,

    /// The new version must complete its first checkpoint within this duration, or the operator rolls
    /// back to the last stable spec.
    #[serde(default = "default_readiness_timeout")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h|d))+$"), length(max = 64))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.matches('[1-9]')", "message": "must be longer than 0s"}]))]
    pub readiness_timeout: String,

    /// How long a savepoint for an upgrade may take before the upgrade is abandoned and the old
    /// version keeps running.
    #[serde(default = "default_savepoint_timeout")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h|d))+$"), length(max = 64))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.matches('[1-9]')", "message": "must be longer than 0s"}]))]
    pub savepoint_timeout: String,
}

impl Default for UpgradeSpec {
    fn default() -> Self {
        Self {
            mode: UpgradeMode::default(),
            strategy: UpgradeStrategy::default(),
            allow_non_restored_state: false,
            readiness_timeout: default_readiness_timeout(),
            savepoint_timeout: default_savepoint_timeout(),
        }
    }
}

fn default_readiness_timeout() -> String {
    "5m".to_string()
}

fn default_savepoint_timeout() -> String {
    "10m".to_string()
}

/// Which state an upgraded job starts from.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum UpgradeMode {
    #[default]
    Savepoint,
    LastState,
    Stateless,
}

/// How the new version replaces the old one.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum UpgradeStrategy {
    #[default]
    InPlace,
    Shadow,
}

/// Periodic checkpoints.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointSpec {
    /// Time between the start of two checkpoints, for example 30s.
    #[serde(default = "default_checkpoint_interval")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h|d))+$"), length(max = 64))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.matches('[1-9]')", "message": "must be longer than 0s"}]))]
    pub interval: String,

    /// Directory checkpoints are written to: s3://bucket/prefix, or a local path (local mode only).
    #[schemars(length(min = 1, max = 2048))]
    #[schemars(transform = crate::stores::path_rule)]
    pub dir: String,

    /// A checkpoint that has not completed within this duration is aborted.
    #[serde(default = "default_checkpoint_timeout")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h|d))+$"), length(max = 64))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.matches('[1-9]')", "message": "must be longer than 0s"}]))]
    pub timeout: String,

    /// Number of completed checkpoints kept; older ones are deleted.
    #[serde(default = "default_retained")]
    #[schemars(range(min = 1, max = 100))]
    pub retained: u32,
}

fn default_checkpoint_interval() -> String {
    "30s".to_string()
}

fn default_checkpoint_timeout() -> String {
    "10m".to_string()
}

fn default_retained() -> u32 {
    3
}

/// Savepoints.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SavepointSpec {
    /// Directory savepoints are written to. Defaults to `<checkpoints.dir>/savepoints`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    #[schemars(transform = crate::stores::path_rule)]
    pub dir: Option<String>,

    /// Change this number (for example increment it) to have the operator take a savepoint now.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub trigger_nonce: i64,

    /// Take a savepoint at this interval (for example 1h). Unset: no periodic savepoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h|d))+$"))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.matches('[1-9]')", "message": "must be longer than 0s"}]))]
    pub periodic: Option<String>,

    /// Which savepoints the operator keeps; older ones are disposed (the savepoint a running or
    /// rolled-back job depends on is always kept).
    #[serde(default)]
    pub history: SavepointHistorySpec,

    /// Delete the job's savepoints when the StreamJob is deleted.
    #[serde(default)]
    pub dispose_on_delete: bool,
}

/// Savepoint retention.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SavepointHistorySpec {
    /// Keep at most this many savepoints.
    #[serde(default = "default_history_max_count")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_count: u32,

    /// Dispose savepoints older than this (for example 7d). Unset: no age limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h|d))+$"))]
    pub max_age: Option<String>,
}

impl Default for SavepointHistorySpec {
    fn default() -> Self {
        Self {
            max_count: default_history_max_count(),
            max_age: None,
        }
    }
}

fn default_history_max_count() -> u32 {
    10
}

/// How runtime pods reach object stores and HDFS.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageSpec {
    /// S3 or an S3-compatible store (MinIO, Ceph, ...), used for s3:// paths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Storage>,

    /// HDFS, used for hdfs:// paths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hdfs: Option<HdfsStorage>,

    /// Google Cloud Storage, used for gs:// paths. Unset: the pod's Application Default
    /// Credentials (GKE Workload Identity, the metadata server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gcs: Option<GcsStorage>,

    /// Azure Blob Storage and ADLS Gen2, used for az://container/path and
    /// abfss://container@account.dfs.core.windows.net/path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub azure: Option<AzureStorage>,

    /// Connection limits per store (Flink's fs.<scheme>.limit.*).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ConnectionLimits>,

    /// How long one store call (an upload, a commit, a checkpoint write) keeps retrying
    /// transient failures — 5xx, throttling, lost connections — with exponential backoff and
    /// jitter, before the job's attempt fails and restarts from its latest checkpoint (the
    /// restarts back off too). Default 60s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_budget: Option<String>,
}

/// An S3 or S3-compatible store.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct S3Storage {
    /// Endpoint URL, for example https://minio.storage.svc:9000. Unset: AWS S3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,

    /// Region, for example eu-west-1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,

    /// Secret in the job's namespace holding the access key id and secret access key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<CredentialsSecretRef>,

    /// Allow plain http endpoints (test and in-cluster stores only).
    #[serde(default)]
    pub allow_http: bool,

    /// Use virtual-hosted-style requests (bucket in the host name) instead of path-style.
    #[serde(default)]
    pub virtual_hosted_style: bool,
}

/// A Secret with S3 credentials.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialsSecretRef {
    /// Name of the Secret.
    #[schemars(length(min = 1))]
    pub name: String,

    /// Key of the access key id in the Secret. Default AWS_ACCESS_KEY_ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_key_id_key: Option<String>,

    /// Key of the secret access key in the Secret. Default AWS_SECRET_ACCESS_KEY.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_access_key_key: Option<String>,
}

/// Google Cloud Storage.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GcsStorage {
    /// Secret in the job's namespace holding a service-account key (JSON). Unset: Application
    /// Default Credentials (GKE Workload Identity: annotate the pod's service account).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_key_secret: Option<SecretKeyRef>,

    /// Endpoint URL for an emulator or a private endpoint, for example http://gcs:4443. Unset:
    /// https://storage.googleapis.com.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub endpoint: Option<String>,

    /// Send no credentials (emulators, public buckets).
    #[serde(default)]
    pub anonymous: bool,
}

/// Azure Blob Storage or ADLS Gen2.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AzureStorage {
    /// Storage account name, for az:// paths (abfss:// paths name it themselves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub account: Option<String>,

    /// Endpoint URL for Azurite or a private endpoint, for example
    /// http://azurite:10000/devstoreaccount1. Unset: https://<account>.blob.core.windows.net.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub endpoint: Option<String>,

    /// Secret in the job's namespace holding the account key or a SAS token. Unset: workload
    /// identity (AZURE_CLIENT_ID, AZURE_TENANT_ID and AZURE_FEDERATED_TOKEN_FILE, as AKS
    /// injects them), then the managed identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<AzureCredentialsRef>,

    /// Allow plain http endpoints (Azurite and in-cluster stores only).
    #[serde(default)]
    pub allow_http: bool,
}

/// A key of a Secret.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,

    /// Key in the Secret. Default key.json.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// A Secret with Azure credentials: an account key or a SAS token.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "!(has(self.accountKeyKey) && has(self.sasTokenKey))", "message": "set accountKeyKey or sasTokenKey, not both"}]))]
pub struct AzureCredentialsRef {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,

    /// Key of the account key in the Secret. Default AZURE_STORAGE_ACCOUNT_KEY (when
    /// sasTokenKey is unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account_key_key: Option<String>,

    /// Key of a SAS token in the Secret (instead of the account key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sas_token_key: Option<String>,
}

/// An HDFS cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HdfsStorage {
    /// Name node address, for example hdfs://namenode:8020.
    #[schemars(length(min = 1))]
    pub name_node: String,
}

/// Connection limits for one store.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionLimits {
    /// Maximum concurrent connections (reads and writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_connections: Option<u32>,

    /// Maximum concurrent reading connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_input_connections: Option<u32>,

    /// Maximum concurrent writing connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_output_connections: Option<u32>,

    /// How long a request waits for a free connection before it fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h|d))+$"))]
    pub timeout: Option<String>,
}

/// One step of the pipeline: exactly one of the operator kinds, with a stable uid.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "[has(self.source), has(self.filter), has(self.project), has(self.keyBy), has(self.dedup), has(self.custom), has(self.fileSink), has(self.print)].filter(x, x).size() == 1",
        "message": "spec.pipeline[]: each step must have exactly one of source, filter, project, keyBy (with window and aggregate), dedup, custom, fileSink or print"
    },
    {
        "rule": "has(self.keyBy) == has(self.window) && has(self.keyBy) == has(self.aggregate)",
        "message": "spec.pipeline[]: keyBy, window and aggregate go together in one step: set all three or none"
    }
]))]
pub struct PipelineStep {
    /// Stable identifier of this operator. Its state is matched by uid on restore, so keep it
    /// unchanged across versions of the job. Lowercase letters, digits and '-'.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub uid: String,

    /// Display name; defaults to the uid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,

    /// Parallelism of this step; defaults to spec.parallelism.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 32768))]
    pub parallelism: Option<u32>,

    /// What to do with a record this step cannot process: fail the job (default), skip it
    /// (counted), or write it to spec.deadLetterPath (counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_bad_record: Option<BadRecordPolicy>,

    /// Source of records; only the first step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceSpec>,

    /// Keep records for which this SQL boolean expression is true, for example `amount > 0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub filter: Option<String>,

    /// Replace each record by these columns, each a SQL expression over the input columns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<Vec<ProjectColumn>>,

    /// Key columns of a keyed window aggregation (with window and aggregate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub key_by: Option<Vec<String>>,

    /// Window of a keyed aggregation (with keyBy and aggregate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowSpec>,

    /// Aggregates computed per key and window (with keyBy and window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregate: Option<AggregateSpec>,

    /// Drop records whose key was already seen within a time bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup: Option<DedupSpec>,

    /// An operator registered by name in the job's own binary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom: Option<CustomSpec>,

    /// Exactly-once file sink: the last step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_sink: Option<FileSinkSpec>,

    /// Debug sink printing records to standard output: the last step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub print: Option<PrintSinkSpec>,
}

/// Policy for records an operator cannot process.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum BadRecordPolicy {
    #[default]
    Fail,
    Skip,
    DeadLetter,
}

/// A source: exactly one of generator, nexmark, files, kafka.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "[has(self.generator), has(self.nexmark), has(self.files), has(self.kafka)].filter(x, x).size() == 1",
        "message": "spec.pipeline[].source: set exactly one of generator, nexmark, files or kafka"
    }
]))]
pub struct SourceSpec {
    /// Deterministic generator of `{id, key, value, ts}` records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator: Option<GeneratorSource>,

    /// Nexmark benchmark events (persons, auctions, bids).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nexmark: Option<NexmarkSource>,

    /// Files under an object-store prefix, discovered continuously or read once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<FilesSource>,

    /// A Kafka topic; offsets are kept in checkpoint state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kafka: Option<KafkaSource>,

    /// Watermarks: how far event time may go backwards before records count as late.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark: Option<WatermarkSpec>,
}

/// Deterministic records `{id, key, value, ts}` computed from the seed and the record id alone, so
/// the expected output of a job is computable.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GeneratorSource {
    /// Number of records; the job ends after them (bounded). Unset: unbounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub count: Option<u64>,

    /// Records per second over all subtasks. Unset: as fast as possible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub rate_per_second: Option<u64>,

    /// Number of distinct keys (`key-0` .. `key-<keys-1>`).
    #[serde(default = "default_generator_keys")]
    #[schemars(range(min = 1))]
    pub keys: u64,

    /// Seed of the value and key sequence.
    #[serde(default)]
    pub seed: u64,

    /// Event time of record 0 (RFC 3339). Default 2024-01-01T00:00:00Z.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,

    /// Event time between consecutive records. Default 1ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h|d))+$"))]
    pub event_interval: Option<String>,
}

fn default_generator_keys() -> u64 {
    1000
}

/// Nexmark events as in the Nexmark benchmark.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NexmarkSource {
    /// Number of events; the job ends after them. Unset: unbounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub events: Option<u64>,

    /// Events per second over all subtasks. Unset: as fast as possible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub rate_per_second: Option<u64>,

    /// Only emit these event kinds (person, auction, bid). Unset: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_kinds: Option<Vec<NexmarkEventKind>>,
}

/// A Nexmark event kind.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NexmarkEventKind {
    Person,
    Auction,
    Bid,
}

/// Files under a prefix.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FilesSource {
    /// Directory or prefix to read: s3://bucket/prefix, or a local path.
    #[schemars(length(min = 1, max = 2048))]
    #[schemars(transform = crate::stores::path_rule)]
    pub path: String,

    /// Format of the files.
    pub format: SourceFormat,

    /// Columns of JSON lines and CSV files (Parquet files carry their own schema).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Vec<FieldSpec>>,

    /// Look for new files at this interval. Unset: read the files present at start, then end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h|d))+$"))]
    pub discovery_interval: Option<String>,

    /// Column holding the event time. Unset: processing time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_time_field: Option<String>,
}

/// Format of source files: exactly one of jsonLines, csv, parquet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "[has(self.jsonLines), has(self.csv), has(self.parquet)].filter(x, x).size() == 1",
        "message": "format: set exactly one of jsonLines, csv or parquet"
    }
]))]
pub struct SourceFormat {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_lines: Option<RowFormat>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csv: Option<CsvFormat>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parquet: Option<ParquetFormat>,
}

/// A column of a record.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FieldSpec {
    /// Column name.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Column type.
    #[serde(rename = "type")]
    pub field_type: FieldType,
    /// Whether the column may be missing or null.
    #[serde(default)]
    pub nullable: bool,
}

/// Column types.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FieldType {
    String,
    Int64,
    Uint64,
    Float64,
    Bool,
    /// Milliseconds since the Unix epoch, or an RFC 3339 string in JSON and CSV.
    Timestamp,
}

/// Kafka topics, read exactly once: the next offset of every partition is kept in checkpoint
/// state, so a restore re-reads exactly what the committed output does not cover.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "[has(self.topic), has(self.topics), has(self.topicPattern)].filter(x, x).size() == 1",
        "message": "kafka: set exactly one of topic, topics or topicPattern"
    },
    {
        "rule": "!has(self.startingOffsets) || self.startingOffsets != 'timestamp' || has(self.startingTimestamp)",
        "message": "kafka.startingTimestamp: required when startingOffsets is timestamp"
    }
]))]
pub struct KafkaSource {
    /// Comma-separated bootstrap servers, `host:port`.
    #[schemars(length(min = 1))]
    pub bootstrap_servers: String,

    /// One topic to read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,

    /// Several topics to read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topics: Option<Vec<String>>,

    /// A regular expression over topic names; matching topics created later are discovered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_pattern: Option<String>,

    /// Where a partition starts when no restored state holds its offset: earliest (default),
    /// latest, committed (the group's committed offsets, earliest where none) or timestamp.
    /// Partitions discovered after the job has state always start at their earliest offset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starting_offsets: Option<KafkaStartingOffsets>,

    /// With `startingOffsets: timestamp`: the first record at or after this time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starting_timestamp: Option<String>,

    /// Bounded reads: `latest` ends the job once every partition is read up to the offset that
    /// was latest when the partition was first assigned (kept in state, so a restore ends at the
    /// same place). Unset: unbounded, the job runs until stopped. Bounded reads do not discover
    /// new partitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopping_offsets: Option<KafkaStoppingOffsets>,

    /// Consumer group id, used for `committed` start offsets and for committing offsets back.
    /// Default `streamjob-<namespace>-<name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,

    /// Commit the checkpointed offsets back to the group when a checkpoint completes, so lag
    /// tools see the job's progress. Monitoring only: state stays the source of truth.
    #[serde(default = "default_true")]
    pub commit_offsets_on_checkpoint: bool,

    /// readCommitted (default) hides records of aborted transactions; readUncommitted reads all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation_level: Option<KafkaIsolationLevel>,

    /// How often to look for new partitions (and topics matching topicPattern). Default 30s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h|d))+$"))]
    pub partition_discovery_interval: Option<String>,

    /// Format of the record values (jsonLines: one JSON object per record; csv: one CSV row).
    pub format: SourceFormat,

    /// Columns of the record values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Vec<FieldSpec>>,

    /// Kafka metadata added as columns after the value's: key (string), topic (string),
    /// partition (int64), offset (int64), timestamp (timestamp), headers (JSON object string).
    /// Named `kafka_<name>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metadata_columns: Vec<KafkaMetadataColumn>,

    /// Column of the value holding the event time. Unset: the record's Kafka timestamp.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_time_field: Option<String>,

    /// TLS and SASL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security: Option<KafkaSecurity>,

    /// More librdkafka consumer properties (for example `fetch.max.bytes`). Properties the runtime
    /// owns (bootstrap.servers, group.id, offsets, isolation, security, credentials) are refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub properties: BTreeMap<String, String>,
}

/// Start position of a partition without restored state.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum KafkaStartingOffsets {
    #[default]
    Earliest,
    Latest,
    Committed,
    Timestamp,
}

/// Where a bounded Kafka read ends.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum KafkaStoppingOffsets {
    Latest,
}

/// Which records of transactional producers a consumer sees.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum KafkaIsolationLevel {
    #[default]
    ReadCommitted,
    ReadUncommitted,
}

/// Kafka metadata a source can add as columns.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum KafkaMetadataColumn {
    Key,
    Topic,
    Partition,
    Offset,
    Timestamp,
    Headers,
}

/// How the source talks to the brokers. Credentials come from Secrets in the job's namespace;
/// the operator passes them to runtime pods as environment variables (never as arguments).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KafkaSecurity {
    /// Kafka's security.protocol.
    #[serde(default)]
    pub protocol: KafkaSecurityProtocol,

    /// SASL credentials (protocols SASL_PLAINTEXT and SASL_SSL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sasl: Option<KafkaSasl>,

    /// TLS trust and client certificate (protocols SSL and SASL_SSL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<KafkaTls>,
}

/// Kafka's security protocols.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum KafkaSecurityProtocol {
    #[default]
    #[serde(rename = "PLAINTEXT")]
    Plaintext,
    #[serde(rename = "SSL")]
    Ssl,
    #[serde(rename = "SASL_PLAINTEXT")]
    SaslPlaintext,
    #[serde(rename = "SASL_SSL")]
    SaslSsl,
}

/// SASL mechanisms.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum KafkaSaslMechanism {
    #[serde(rename = "PLAIN")]
    Plain,
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

/// SASL user and password from a Secret.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KafkaSasl {
    pub mechanism: KafkaSaslMechanism,
    /// Secret holding the user name and password.
    #[schemars(length(min = 1))]
    pub secret_name: String,
    /// Key of the user name in the Secret. Default `username`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username_key: Option<String>,
    /// Key of the password in the Secret. Default `password`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_key: Option<String>,
}

/// PEM certificates from a Secret.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KafkaTls {
    /// Secret holding the PEM files.
    #[schemars(length(min = 1))]
    pub secret_name: String,
    /// Key of the CA certificate(s) that sign the brokers' certificates. Default `ca.crt`;
    /// unset in the Secret: the system trust store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_key: Option<String>,
    /// Keys of a client certificate and its private key, for mutual TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_key: Option<String>,
}

/// Watermark generation at the source.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WatermarkSpec {
    /// Bounded out-of-orderness: the watermark trails the largest event time seen by this much.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h|d))+$"))]
    pub max_out_of_orderness: Option<String>,

    /// A source subtask without records for this long stops holding the watermark back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h|d))+$"))]
    pub idle_timeout: Option<String>,
}

/// An output column of a projection.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProjectColumn {
    /// Output column name.
    #[schemars(length(min = 1))]
    pub name: String,
    /// SQL expression over the input columns, for example `price * 0.908`.
    #[schemars(length(min = 1))]
    pub expr: String,
}

/// A window: exactly one of tumbling, sliding, session.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "[has(self.tumbling), has(self.sliding), has(self.session)].filter(x, x).size() == 1",
        "message": "spec.pipeline[].window: set exactly one of tumbling, sliding or session"
    }
]))]
pub struct WindowSpec {
    /// Fixed-size, non-overlapping windows of this length, for example 1m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h|d))+$"), length(max = 64))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.matches('[1-9]')", "message": "must be longer than 0s"}]))]
    pub tumbling: Option<String>,

    /// Overlapping windows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding: Option<SlidingWindow>,

    /// Windows per key closed after a gap of inactivity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionWindow>,

    /// Records this late (behind the watermark) still update their window; later ones are dropped
    /// and counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h|d))+$"))]
    pub allowed_lateness: Option<String>,
}

/// Sliding windows.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SlidingWindow {
    /// Window length, for example 10s.
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h|d))+$"), length(max = 64))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.matches('[1-9]')", "message": "must be longer than 0s"}]))]
    pub size: String,
    /// Distance between window starts, for example 2s.
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h|d))+$"), length(max = 64))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.matches('[1-9]')", "message": "must be longer than 0s"}]))]
    pub slide: String,
}

/// Session windows.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionWindow {
    /// Inactivity gap that closes a session, for example 5m.
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h|d))+$"), length(max = 64))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.matches('[1-9]')", "message": "must be longer than 0s"}]))]
    pub gap: String,
}

/// Aggregates per key and window. Output columns: the key columns, `window_start`, `window_end`,
/// then `count`, `sum_<field>`, `min_<field>`, `max_<field>`, `avg_<field>`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "(has(self.count) && self.count) || (has(self.sum) && size(self.sum) > 0) || (has(self.min) && size(self.min) > 0) || (has(self.max) && size(self.max) > 0) || (has(self.avg) && size(self.avg) > 0)",
        "message": "spec.pipeline[].aggregate: choose at least one aggregate (count, sum, min, max or avg)"
    }
]))]
pub struct AggregateSpec {
    /// Count records.
    #[serde(default)]
    pub count: bool,
    /// Sum these numeric columns.
    #[serde(default)]
    pub sum: Vec<String>,
    /// Minimum of these columns.
    #[serde(default)]
    pub min: Vec<String>,
    /// Maximum of these columns.
    #[serde(default)]
    pub max: Vec<String>,
    /// Average of these numeric columns.
    #[serde(default)]
    pub avg: Vec<String>,
}

/// Deduplication by key within a time bound.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DedupSpec {
    /// Columns that identify a record.
    #[schemars(length(min = 1))]
    pub keys: Vec<String>,
    /// How long (in event time) a seen key is remembered.
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h|d))+$"))]
    pub within: String,
}

/// An operator registered by name in the job's own binary.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CustomSpec {
    /// Name the operator is registered under.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Settings handed to the operator's factory (`Setup::config` in the job SDK); what they
    /// mean is up to the operator, which refuses missing or malformed ones when the job is
    /// planned.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
    /// Whether the registered operator keeps state (its state is matched by uid like built-in
    /// operators'). Must say what the operator declares: a mismatch is refused when the job is
    /// planned, naming the step and the declared state.
    #[serde(default)]
    pub stateful: bool,
}

/// The exactly-once file sink (Flink's StreamingFileSink, made exactly-once on object stores).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileSinkSpec {
    /// Base path: s3://bucket/prefix, or a local path (local mode).
    #[schemars(length(min = 1, max = 2048))]
    #[schemars(transform = crate::stores::sink_path_rule)]
    pub path: String,

    /// Output format.
    pub format: SinkFormat,

    /// Which bucket (sub-directory) each record goes to. Default: dateTime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket_assigner: Option<BucketAssignerSpec>,

    /// When part files are rolled. Bulk formats (Parquet) always roll on checkpoint too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_policy: Option<RollingPolicySpec>,

    /// Part file names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_file_config: Option<OutputFileConfig>,

    /// Merge a bucket's small finished files at commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<CompactionSpec>,

    /// Write a `_SUCCESS` marker into a bucket when no more data is expected for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_marker: Option<SuccessMarkerSpec>,
}

/// Format of output files: exactly one of jsonLines, csv, parquet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "[has(self.jsonLines), has(self.csv), has(self.parquet)].filter(x, x).size() == 1",
        "message": "spec.pipeline[].fileSink.format: set exactly one of jsonLines, csv or parquet"
    }
]))]
pub struct SinkFormat {
    /// One JSON object per line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_lines: Option<RowFormat>,
    /// Comma-separated values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csv: Option<CsvFormat>,
    /// Apache Parquet (bulk format: rolls on every checkpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parquet: Option<ParquetFormat>,
}

/// A row format with optional compression.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RowFormat {
    /// Compression of the whole file.
    #[serde(default)]
    pub compression: RowCompression,
}

/// CSV.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CsvFormat {
    /// Compression of the whole file.
    #[serde(default)]
    pub compression: RowCompression,
    /// Write (or expect) a header line.
    #[serde(default = "default_true")]
    pub header: bool,
    /// Field delimiter, one character.
    #[serde(default = "default_delimiter")]
    #[schemars(length(min = 1, max = 1))]
    pub delimiter: String,
}

impl Default for CsvFormat {
    fn default() -> Self {
        Self {
            compression: RowCompression::None,
            header: true,
            delimiter: default_delimiter(),
        }
    }
}

fn default_true() -> bool {
    true
}

fn default_delimiter() -> String {
    ",".to_string()
}

/// Compression of row-format files.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RowCompression {
    #[default]
    None,
    Gzip,
    Zstd,
}

/// Parquet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ParquetFormat {
    /// Column compression codec.
    #[serde(default)]
    pub compression: ParquetCompression,
    /// Maximum rows per row group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub row_group_size: Option<u64>,
}

/// Parquet codecs.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ParquetCompression {
    None,
    Snappy,
    Gzip,
    Lz4,
    #[default]
    Zstd,
}

/// Bucket assigner: exactly one of dateTime, basePath, field.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "[has(self.dateTime), has(self.basePath), has(self.field)].filter(x, x).size() == 1",
        "message": "spec.pipeline[].fileSink.bucketAssigner: set exactly one of dateTime, basePath or field"
    }
]))]
pub struct BucketAssignerSpec {
    /// One bucket per formatted date-time (processing or event time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date_time: Option<DateTimeBucketAssigner>,
    /// Everything in the base path (a single bucket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_path: Option<EmptySpec>,
    /// Hive-style `field=value` partitions, one directory level per field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<FieldBucketAssigner>,
}

/// An option that takes no settings: write `{}`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct EmptySpec {}

/// Date-time buckets.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DateTimeBucketAssigner {
    /// strftime format of the bucket name. Default `%Y-%m-%d--%H`.
    #[serde(default = "default_bucket_format")]
    #[schemars(length(min = 1))]
    pub format: String,
    /// Time zone: UTC or a fixed offset such as +02:00.
    #[serde(default = "default_timezone")]
    pub timezone: String,
    /// Which time: processing (default, as Flink) or event.
    #[serde(default)]
    pub time: BucketTime,
}

impl Default for DateTimeBucketAssigner {
    fn default() -> Self {
        Self {
            format: default_bucket_format(),
            timezone: default_timezone(),
            time: BucketTime::default(),
        }
    }
}

fn default_bucket_format() -> String {
    "%Y-%m-%d--%H".to_string()
}

fn default_timezone() -> String {
    "UTC".to_string()
}

/// Which clock assigns date-time buckets.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BucketTime {
    #[default]
    Processing,
    Event,
}

/// Field-value buckets.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FieldBucketAssigner {
    /// Columns, outermost directory first.
    #[schemars(length(min = 1))]
    pub fields: Vec<String>,
}

/// Rolling policy: exactly one of default, onCheckpoint.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "[has(self.default), has(self.onCheckpoint)].filter(x, x).size() == 1",
        "message": "spec.pipeline[].fileSink.rollingPolicy: set exactly one of default or onCheckpoint"
    }
]))]
pub struct RollingPolicySpec {
    /// Roll on size, age or inactivity (and, for bulk formats, on checkpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<DefaultRollingPolicy>,
    /// Roll on every checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_checkpoint: Option<EmptySpec>,
}

/// Flink's DefaultRollingPolicy.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DefaultRollingPolicy {
    /// Roll when the part file reaches this size. Default 128MiB.
    #[serde(default = "default_max_part_size")]
    #[schemars(regex(pattern = r"^[0-9]+(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?$"))]
    pub max_part_size: String,
    /// Roll a part file open this long. Default 60s.
    #[serde(default = "default_rollover_interval")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h|d))+$"), length(max = 64))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.matches('[1-9]')", "message": "must be longer than 0s"}]))]
    pub rollover_interval: String,
    /// Roll a part file that received nothing for this long. Default 60s.
    #[serde(default = "default_rollover_interval")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h|d))+$"), length(max = 64))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.matches('[1-9]')", "message": "must be longer than 0s"}]))]
    pub inactivity_interval: String,
    /// How often time-based rolling is checked. Default 60s.
    #[serde(default = "default_rollover_interval")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h|d))+$"), length(max = 64))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.matches('[1-9]')", "message": "must be longer than 0s"}]))]
    pub bucket_check_interval: String,
}

impl Default for DefaultRollingPolicy {
    fn default() -> Self {
        Self {
            max_part_size: default_max_part_size(),
            rollover_interval: default_rollover_interval(),
            inactivity_interval: default_rollover_interval(),
            bucket_check_interval: default_rollover_interval(),
        }
    }
}

fn default_max_part_size() -> String {
    "128MiB".to_string()
}

fn default_rollover_interval() -> String {
    "60s".to_string()
}

/// Part file naming: `{partPrefix}-{subtask}-{counter}{partSuffix}`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutputFileConfig {
    /// Prefix of part file names. Default `part`.
    #[serde(default = "default_part_prefix")]
    #[schemars(length(min = 1), regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"))]
    pub part_prefix: String,
    /// Suffix of part file names, for example `.parquet`. Default: the format's extension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[A-Za-z0-9._-]*$"))]
    pub part_suffix: Option<String>,
}

impl Default for OutputFileConfig {
    fn default() -> Self {
        Self {
            part_prefix: default_part_prefix(),
            part_suffix: None,
        }
    }
}

fn default_part_prefix() -> String {
    "part".to_string()
}

/// Small-file compaction.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactionSpec {
    /// Finished files smaller than this are merged into one file per bucket at commit.
    #[schemars(regex(pattern = r"^[0-9]+(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?$"))]
    pub target_size: String,
}

/// `_SUCCESS` markers.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SuccessMarkerSpec {
    /// A date-time bucket is closed once the watermark passes its end plus this lateness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h|d))+$"))]
    pub allowed_lateness: Option<String>,
}

/// Debug sink printing records.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrintSinkSpec {
    /// Print only the first this many records of each batch (all when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub limit: Option<u64>,
}

// ---------------------------------------------------------------------------------------------
// Status
// ---------------------------------------------------------------------------------------------

/// What the operator observed and did. The upgrade fields are its write-ahead log: they are
/// written before any destructive step, so a restarted operator resumes where it stopped.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StreamJobStatus {
    /// Lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,

    /// The metadata.generation the status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Ready, Upgrading, UpgradeBlocked, Degraded, RolledBack.
    #[serde(default)]
    pub conditions: Vec<Condition>,

    /// The version that is deployed now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<DeploymentStatus>,

    /// Hash of the last spec that ran stably (completed a checkpoint); rollbacks return to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_stable_spec_hash: Option<String>,

    /// The last stable spec itself (JSON), so a rollback does not depend on the current spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_stable_spec: Option<String>,

    /// Latest completed checkpoint reported by the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checkpoint: Option<CheckpointInfo>,

    /// Latest completed savepoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_savepoint: Option<SavepointInfo>,

    /// Savepoints the operator keeps track of, newest last.
    #[serde(default)]
    pub savepoint_history: Vec<SavepointInfo>,

    /// The last savepoints.triggerNonce the operator acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_nonce: Option<i64>,

    /// A savepoint the operator has asked the job for and not yet seen complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_savepoint: Option<PendingSavepoint>,

    /// Progress of an upgrade, rescale, suspend or rollback in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<UpgradeStatus>,

    /// Whether the job keeps up: its input rate and, for Kafka sources, how far behind it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<ThroughputStatus>,

    /// The epoch handed to the newest run of this job (each runtime pod and each start of a
    /// standby pod gets the next one, recorded here before it exists). A run commits output only
    /// while no larger epoch has started, so a rolled-back or cut-off version never commits after
    /// its successor started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,

    /// Human-readable summary of the latest problem, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,

    /// Label selector of the job's runtime and worker pods (the scale subresource's, for
    /// `kubectl scale sj` and autoscalers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
}

impl StreamJobStatus {
    /// The newest state recorded for the job: its latest checkpoint or its latest savepoint,
    /// whichever the operator saw complete last, else what the deployed run started from. What a
    /// change keeping state without a savepoint (last-state) is pre-checked against and restores:
    /// a run that has not checkpointed since it started from a savepoint restores that savepoint,
    /// not an older checkpoint of the run before it (whose output since would be written again).
    pub fn latest_state_path(&self) -> Option<String> {
        let checkpoint = self
            .last_checkpoint
            .as_ref()
            .and_then(|c| Some((c.time, c.path.clone()?)));
        let savepoint = self
            .last_savepoint
            .as_ref()
            .map(|s| (s.time, s.path.clone()));
        match (checkpoint, savepoint) {
            (Some(c), Some(s)) => Some(if s.0 > c.0 { s.1 } else { c.1 }),
            (Some(c), None) => Some(c.1),
            (None, Some(s)) => Some(s.1),
            (None, None) => self.deployment.as_ref().and_then(|d| d.path.clone()),
        }
    }
}

/// Throughput of the running version, as its runtime reports it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ThroughputStatus {
    /// Records read per second by the sources.
    #[serde(default)]
    pub records_in_per_second: f64,
    /// Kafka sources: records between the job's positions and the ends of its partitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_lag: Option<i64>,
}

/// Lifecycle phases.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum Phase {
    Deploying,
    Running,
    Upgrading,
    RollingBack,
    Suspended,
    Finished,
    Failed,
}

/// What is deployed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentStatus {
    /// Hash of the deployed spec.
    pub spec_hash: String,
    /// Image of the deployed runtime pods.
    pub image: String,
    /// Parallelism of the deployed job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<u32>,
    /// What the deployed job started from.
    pub started_from: StartedFrom,
    /// Path of the savepoint or checkpoint it started from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Name of the runtime workload (the pods' owner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    /// When it was deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    /// State of what it restored that it does not use, dropped by the restore under
    /// `allowNonRestoredState` (one line per operator or state, by uid and name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped_state: Vec<String>,
}

/// What a deployment started from.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StartedFrom {
    #[default]
    Empty,
    Savepoint,
    Checkpoint,
}

/// A completed checkpoint.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointInfo {
    /// Checkpoint id.
    pub id: u64,
    /// Path of the checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// When the operator first saw it completed (on the API server's clock as the operator
    /// reads it, like every time in status; within a reconcile of its completion).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<DateTime<Utc>>,
}

/// A completed savepoint.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SavepointInfo {
    /// Path of the savepoint.
    pub path: String,
    /// Completion time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<DateTime<Utc>>,
    /// Why it was taken: upgrade, suspend, trigger, periodic, rescale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Hash of the spec of the job that took it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_hash: Option<String>,
}

/// A savepoint in flight.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingSavepoint {
    /// Request id returned by the job's control API.
    pub request_id: String,
    /// Why it was requested.
    pub reason: String,
    /// Whether the job stops after it (stop-with-savepoint).
    #[serde(default)]
    pub stop: bool,
    /// When it was requested.
    pub started_at: DateTime<Utc>,
    /// The path of the job's last savepoint when this one was requested ("" if it had none;
    /// unset if its status could not be read). When the answer to the request is lost, a
    /// savepoint the job reports with another path is this one — decided without comparing the
    /// job pod's clock with the operator's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
}

/// Progress of a transition.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeStatus {
    /// Spec hash of the version being replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Spec hash of the target version.
    pub to: String,
    /// The target spec (JSON), so the upgrade can finish even if the spec changes again meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_spec: Option<String>,
    /// Current stage of the upgrade state machine, `Kind/Step`.
    pub step: Stage,
    /// When the upgrade started.
    pub started_at: DateTime<Utc>,
    /// When the current step started; step timeouts count from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_started_at: Option<DateTime<Utc>>,
    /// Savepoint or checkpoint the new version restores from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub savepoint: Option<String>,
    /// Details of the current step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// What the pre-check found the new version would drop from the state it restores
    /// (`allowNonRestoredState`): copied into `deployment.droppedState` when it is deployed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped_state: Vec<String>,
}
