//! StreamJob scenarios shared by the operator e2e tests (`tests/operator.rs`) and the operator
//! benchmark (`bin/operator-bench/`): the job shape (generator → keyed 1 s tumbling window →
//! JSON file sink), the generator's definition reproduced to compute the expected output, reading
//! the committed output back from MinIO and checking it exactly-once, and status accessors.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, ListParams};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::fixtures::{TestEnv, wait_for};
use crate::store::S3Endpoint;

/// Name of the Secret with the S3 credentials in a job's namespace.
pub const SECRET: &str = "s3-credentials";

/// Installs the operator chart (watching every namespace) into `ns` and waits until its
/// Deployment has an available replica.
pub async fn install_operator(
    env: &TestEnv,
    ns: &str,
    set: &[&str],
    timeout: Duration,
) -> Result<()> {
    env.workspace_binary("streamjob-operator")?;
    env.workspace_binary("streamjob-runtime")?;
    env.install_operator_chart("streamjob", ns, set)?;
    let deployments: Api<Deployment> = Api::namespaced(env.client().await?, ns);
    let list = deployments.list(&ListParams::default()).await?;
    let name = list
        .items
        .first()
        .and_then(|d| d.metadata.name.clone())
        .ok_or_else(|| Error::Other(format!("no operator Deployment in {ns}")))?;
    wait_for(&deployments, &name, "available replica", timeout, |d| {
        d.status
            .as_ref()
            .and_then(|s| s.available_replicas)
            .unwrap_or(0)
            >= 1
    })
    .await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The generator's definition (runtime/src/operators/generator.rs), reproduced
// ---------------------------------------------------------------------------------------------

/// Event time of record 0 (2024-01-01T00:00:00Z); records are 1 ms apart.
pub const START_MS: i64 = 1_704_067_200_000;
/// The tumbling window's size.
pub const WINDOW_MS: i64 = 1000;

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// (key index, value) of record `id`.
pub fn generator_record(seed: u64, keys: u64, id: u64) -> (u64, i64) {
    let h = mix(seed ^ mix(id));
    (h % keys.max(1), (mix(h) % 1000) as i64)
}

/// Event time of record `id` (1 ms apart from `START_MS`).
pub fn generator_ts(id: u64) -> i64 {
    START_MS + id as i64
}

/// (key, window start ms) → (count, sum)
pub type Aggregates = BTreeMap<(String, i64), (i64, i64)>;

/// What was read back: (key, window start ms) → ((count, sum), how many times it was written).
pub type Output = BTreeMap<(String, i64), ((i64, i64), usize)>;

/// The aggregates of the first `count` generator records.
pub fn expected(seed: u64, keys: u64, count: u64) -> Aggregates {
    let mut m = Aggregates::new();
    for id in 0..count {
        let (k, v) = generator_record(seed, keys, id);
        let ts = generator_ts(id);
        let start = ts - ts.rem_euclid(WINDOW_MS);
        let e = m.entry((format!("key-{k}"), start)).or_insert((0, 0));
        e.0 += 1;
        e.1 += v;
    }
    m
}

// ---------------------------------------------------------------------------------------------
// Jobs
// ---------------------------------------------------------------------------------------------

/// A StreamJob of the shape the scenarios use, in its own namespace and bucket.
#[derive(Clone, Debug)]
pub struct Job {
    pub name: String,
    pub ns: String,
    pub bucket: String,
    pub image: String,
    pub parallelism: u32,
    pub count: u64,
    pub keys: u64,
    pub seed: u64,
    pub rate: u64,
    /// A stateless filter (uid `pass`) before the window: [`Job::filter_sql`].
    pub filter: bool,
    /// The filter's predicate (default `value >= 0`, which passes everything).
    pub filter_sql: String,
    /// The file sink's `rollingPolicy` (default `{onCheckpoint: {}}`).
    pub rolling: &'static str,
    /// The keyed window (uid `per-key`).
    pub window: bool,
    /// The window as the job template's `window-totals` keyed function (job SDK) instead of the
    /// built-in window: for images of the template (`templates/streamjob-job`).
    pub sdk_window: bool,
    pub allow_non_restored: bool,
    pub strategy: &'static str,
    /// `spec.upgrade.mode`: `savepoint` (default), `last-state` or `stateless`.
    pub mode: &'static str,
    pub state: &'static str,
    pub trigger_nonce: Option<i64>,
    pub dispose_on_delete: bool,
    pub checkpoint_interval: &'static str,
    /// `spec.checkpoints.timeout` (default: the API's).
    pub checkpoint_timeout: Option<&'static str>,
    pub readiness_timeout: &'static str,
    /// The S3 endpoint the job's pods use (default: the environment's MinIO), e.g. a fault proxy.
    pub s3_endpoint: Option<String>,
    /// `spec.workers` (0: the runtime pod runs every subtask).
    pub workers: u32,
    /// Read the generator's records from Kafka instead of generating them (see [`KafkaInput`]).
    pub kafka: Option<KafkaInput>,
}

/// A Kafka topic holding the generator's records as JSON `{id, key, value, ts}` (see
/// [`generator_json`]), so the expected aggregates are the generator job's.
#[derive(Clone, Debug)]
pub struct KafkaInput {
    pub bootstrap: String,
    pub topic: String,
    /// `stoppingOffsets: latest`: end once the topic is read to its end.
    pub bounded: bool,
}

/// Record `id` of the generator as the JSON value the Kafka scenarios produce.
pub fn generator_json(seed: u64, keys: u64, id: u64) -> String {
    let (k, v) = generator_record(seed, keys, id);
    let ts = generator_ts(id);
    format!(r#"{{"id":{id},"key":"key-{k}","value":{v},"ts":{ts}}}"#)
}

impl Job {
    /// The default job (v1, parallelism 1, 30,000 records at 1,000/s over 5 keys, InPlace,
    /// running, 1 s checkpoints) named `name` in `ns`, writing to `bucket`.
    pub fn new(name: &str, ns: &str, bucket: &str) -> Self {
        Self {
            name: name.to_string(),
            ns: ns.to_string(),
            bucket: bucket.to_string(),
            image: "streamjob/runtime:v1".into(),
            parallelism: 1,
            count: 30_000,
            keys: 5,
            seed: 7,
            rate: 1000,
            filter: false,
            filter_sql: "value >= 0".into(),
            rolling: "{onCheckpoint: {}}",
            window: true,
            sdk_window: false,
            allow_non_restored: false,
            strategy: "InPlace",
            mode: "savepoint",
            state: "running",
            trigger_nonce: None,
            dispose_on_delete: false,
            checkpoint_interval: "1s",
            checkpoint_timeout: None,
            readiness_timeout: "60s",
            s3_endpoint: None,
            workers: 0,
            kafka: None,
        }
    }

    /// The StreamJob manifest (YAML), storage on the S3 server at `s3`.
    pub fn manifest(&self, s3: &str) -> String {
        let Self {
            name,
            bucket,
            image,
            parallelism,
            count,
            keys,
            seed,
            rate,
            strategy,
            mode,
            state,
            checkpoint_interval,
            readiness_timeout,
            rolling,
            ..
        } = self;
        let mut steps = match &self.kafka {
            None => format!(
                "  - uid: gen\n    source:\n      generator: {{count: {count}, keys: {keys}, seed: {seed}, ratePerSecond: {rate}}}\n"
            ),
            Some(k) => format!(
                "  - uid: in\n    source:\n      kafka:\n        bootstrapServers: \"{b}\"\n        topic: {t}\n        partitionDiscoveryInterval: 1s\n        format: {{jsonLines: {{}}}}\n        schema: [{{name: id, type: int64}}, {{name: key, type: string}}, {{name: value, type: int64}}, {{name: ts, type: int64}}]\n        eventTimeField: ts\n{stop}",
                b = k.bootstrap,
                t = k.topic,
                stop = if k.bounded {
                    "        stoppingOffsets: latest\n"
                } else {
                    ""
                },
            ),
        };
        if self.filter {
            steps.push_str(&format!(
                "  - uid: pass\n    filter: {:?}\n",
                self.filter_sql
            ));
        }
        if self.window && self.sdk_window {
            steps.push_str(
                "  - uid: per-key\n    custom:\n      name: window-totals\n      stateful: true\n      config: {windowSize: 1s}\n",
            );
        } else if self.window {
            steps.push_str(
                "  - uid: per-key\n    keyBy: [key]\n    window: {tumbling: 1s}\n    aggregate: {count: true, sum: [value]}\n",
            );
        }
        steps.push_str(&format!(
            "  - uid: out\n    fileSink:\n      path: s3://{bucket}/output/{name}\n      format: {{jsonLines: {{}}}}\n      bucketAssigner: {{basePath: {{}}}}\n      rollingPolicy: {rolling}\n      outputFileConfig: {{partPrefix: part, partSuffix: .json}}\n"
        ));
        let nonce = self
            .trigger_nonce
            .map(|n| format!("\n    triggerNonce: {n}"))
            .unwrap_or_default();
        format!(
            r#"
apiVersion: streamjob.io/v1alpha1
kind: StreamJob
metadata:
  name: {name}
spec:
  image: {image}
  parallelism: {parallelism}
  maxParallelism: 16{workers}
  state: {state}
  upgrade:
    mode: {mode}
    strategy: {strategy}
    allowNonRestoredState: {anr}
    readinessTimeout: {readiness_timeout}
    savepointTimeout: 60s
  checkpoints:
    interval: {checkpoint_interval}{checkpoint_timeout}
    dir: s3://{bucket}/checkpoints/{name}
  savepoints:
    dir: s3://{bucket}/savepoints/{name}
    disposeOnDelete: {dispose}{nonce}
  storage:
    s3:
      endpoint: {s3}
      region: us-east-1
      allowHttp: true
      credentialsSecret:
        name: {SECRET}
  pipeline:
{steps}"#,
            anr = self.allow_non_restored,
            checkpoint_timeout = self
                .checkpoint_timeout
                .map(|t| format!("\n    timeout: {t}"))
                .unwrap_or_default(),
            dispose = self.dispose_on_delete,
            workers = if self.workers > 0 {
                format!("\n  workers: {}", self.workers)
            } else {
                String::new()
            },
        )
    }

    /// `kubectl apply` of the manifest.
    pub fn apply(&self, env: &TestEnv) -> Result<String> {
        env.kubectl_ok(
            &["apply", "-n", &self.ns, "-f", "-"],
            Some(&self.manifest(self.s3_endpoint.as_deref().unwrap_or(&env.s3().url))),
        )
    }

    /// The aggregates the job must write once it has finished.
    pub fn expected(&self) -> Aggregates {
        expected(self.seed, self.keys, self.count)
    }
}

/// The StreamJob API in `ns`.
pub fn sj_api(client: kube::Client, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "streamjob.io".into(),
        version: "v1alpha1".into(),
        api_version: "streamjob.io/v1alpha1".into(),
        kind: "StreamJob".into(),
        plural: "streamjobs".into(),
    };
    Api::namespaced_with(client, ns, &ar)
}

pub fn status(o: &DynamicObject) -> &Value {
    &o.data["status"]
}

pub fn phase(o: &DynamicObject) -> &str {
    status(o)["phase"].as_str().unwrap_or("")
}

pub fn condition<'a>(o: &'a DynamicObject, type_: &str) -> Option<&'a Value> {
    status(o)["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

pub fn condition_true(o: &DynamicObject, type_: &str) -> bool {
    condition(o, type_).is_some_and(|c| c["status"] == "True")
}

/// Spec hash of the deployed version.
pub fn deployed_hash(o: &DynamicObject) -> String {
    status(o)["deployment"]["specHash"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The job runs a new version (not `old_hash`) restored from a savepoint, no upgrade in flight.
pub fn promoted(o: &DynamicObject, old_hash: &str) -> bool {
    let d = &status(o)["deployment"];
    phase(o) == "Running"
        && status(o)["upgrade"].is_null()
        && deployed_hash(o) != old_hash
        && d["startedFrom"] == "savepoint"
        && status(o)["lastStableSpecHash"] == d["specHash"]
}

/// The pid of a pod's first container (the process kubelet reports `process://<pid>`).
pub fn container_pid(pod: &Pod) -> Option<u32> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .container_id
        .as_ref()?
        .strip_prefix("process://")?
        .parse()
        .ok()
}

/// The process exists and is not a zombie.
pub fn pid_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

// ---------------------------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------------------------

/// Keys of the finished part files under `output/<name>` (hidden files and folders, such as
/// `.streamjob/` and in-progress temp files, are not output).
pub async fn finished_parts(env: &TestEnv, bucket: &str, name: &str) -> Result<Vec<String>> {
    finished_parts_at(env.s3(), bucket, name).await
}

/// [`finished_parts`] on an S3 endpoint.
pub async fn finished_parts_at(s3: &S3Endpoint, bucket: &str, name: &str) -> Result<Vec<String>> {
    let prefix = format!("output/{name}");
    let listed = s3.list(bucket, &prefix).await?;
    Ok(listed
        .into_iter()
        .filter(|o| {
            let rel = o.key.strip_prefix(&prefix).unwrap_or(&o.key);
            let file = rel.rsplit('/').next().unwrap_or("");
            !rel.split('/').any(|seg| seg.starts_with('.'))
                && file.starts_with("part")
                && file.ends_with(".json")
        })
        .map(|o| o.key)
        .collect())
}

/// The aggregates of one part file: ((key, window start ms), (count, sum)) per line.
pub async fn read_part(
    env: &TestEnv,
    bucket: &str,
    key: &str,
) -> Result<Vec<((String, i64), (i64, i64))>> {
    read_part_at(env.s3(), bucket, key).await
}

/// [`read_part`] on an S3 endpoint.
pub async fn read_part_at(
    s3: &S3Endpoint,
    bucket: &str,
    key: &str,
) -> Result<Vec<((String, i64), (i64, i64))>> {
    let data = s3.read(bucket, key).await?;
    let bad = |line: &str, why: &str| Error::Other(format!("{key}: bad line {line:?}: {why}"));
    let mut out = Vec::new();
    for line in String::from_utf8_lossy(&data).lines() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line).map_err(|e| bad(line, &e.to_string()))?;
        let start = v["window_start"]
            .as_str()
            .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
            .ok_or_else(|| bad(line, "window_start"))?
            .timestamp_millis();
        let key = v["key"].as_str().ok_or_else(|| bad(line, "key"))?;
        let count = v["count"].as_i64().ok_or_else(|| bad(line, "count"))?;
        let sum = v["sum_value"]
            .as_i64()
            .ok_or_else(|| bad(line, "sum_value"))?;
        out.push(((key.to_string(), start), (count, sum)));
    }
    Ok(out)
}

/// A multipart upload a sink instance recorded before uploading a part of an in-progress or
/// pending file (`output/<name>/.streamjob/uploads/<subtask>/<instance>-<seq>`): uncommitted
/// output in the store.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct UploadMarker {
    /// The sink instance (one per sink subtask per attempt) that started the upload.
    pub instance: String,
    /// Bucket key of the part file the upload completes into, or of the staging object a
    /// small part file is copied from.
    pub key: String,
    /// The multipart upload; `None`: a staging object (files below one part are written whole
    /// to a hidden object and committed by a copy).
    pub upload_id: Option<String>,
}

/// The upload markers under `output/<name>/` now (a marker is dropped once its upload is
/// committed or aborted, so one that vanishes between listing and reading is skipped).
pub async fn upload_markers(env: &TestEnv, bucket: &str, name: &str) -> Result<Vec<UploadMarker>> {
    let base = format!("output/{name}");
    let mut out = Vec::new();
    for o in env
        .s3()
        .list(bucket, &format!("{base}/.streamjob/uploads"))
        .await?
    {
        let Ok(body) = env.s3().read(bucket, &o.key).await else {
            continue;
        };
        let v: Value = serde_json::from_slice(&body)
            .map_err(|e| Error::Other(format!("upload marker {}: {e}", o.key)))?;
        let file = o.key.rsplit('/').next().unwrap_or_default();
        let instance = file.rsplit_once('-').map(|(i, _)| i).unwrap_or(file);
        let (key, upload_id) = match (
            v["key"].as_str(),
            v["uploadId"].as_str(),
            v["tempKey"].as_str(),
        ) {
            (Some(key), Some(id), _) => (key, Some(id.to_string())),
            (_, _, Some(staging)) => (staging, None),
            _ => return Err(Error::Other(format!("upload marker {}: {v}", o.key))),
        };
        out.push(UploadMarker {
            instance: instance.to_string(),
            key: format!("{base}/{key}"),
            upload_id,
        });
    }
    Ok(out)
}

/// How far the committed output of a job got and when it moved: the finished parts already
/// read, the newest committed window end, and the instants it grew (output stalls).
#[derive(Debug, Default)]
pub struct OutputTracker {
    seen: BTreeSet<String>,
    /// Newest committed window end (ms).
    pub max_end: Option<i64>,
    /// Wall-clock instants at which `max_end` grew.
    pub advances: Vec<Instant>,
}

impl OutputTracker {
    /// Reads the finished parts not read yet.
    pub async fn sample(&mut self, s3: &S3Endpoint, bucket: &str, name: &str) -> Result<()> {
        let now = Instant::now();
        let mut grew = false;
        for key in finished_parts_at(s3, bucket, name).await? {
            if self.seen.contains(&key) {
                continue;
            }
            for ((_, start), _) in read_part_at(s3, bucket, &key).await? {
                let end = start + WINDOW_MS;
                if self.max_end.is_none_or(|m| end > m) {
                    self.max_end = Some(end);
                    grew = true;
                }
            }
            self.seen.insert(key);
        }
        if grew {
            self.advances.push(now);
        }
        Ok(())
    }

    /// Advances after `t`.
    pub fn advances_since(&self, t: Instant) -> usize {
        self.advances.iter().filter(|a| **a > t).count()
    }

    /// Longest interval between consecutive advances, counting the pairs whose later advance
    /// is after `from` (so the interval spanning `from` is included) and not after `to`.
    pub fn max_gap(&self, from: Instant, to: Instant) -> Duration {
        self.gaps(from, to)
            .first()
            .map(|(a, b)| *b - *a)
            .unwrap_or_default()
    }

    /// The intervals between consecutive advances counted by [`Self::max_gap`], longest first.
    pub fn gaps(&self, from: Instant, to: Instant) -> Vec<(Instant, Instant)> {
        let mut gaps: Vec<(Instant, Instant)> = self
            .advances
            .windows(2)
            .filter(|w| w[1] > from && w[1] <= to)
            .map(|w| (w[0], w[1]))
            .collect();
        gaps.sort_by_key(|(a, b)| std::cmp::Reverse(*b - *a));
        gaps
    }
}

/// Every aggregate in the finished part files under `output/<name>/`.
pub async fn read_output(env: &TestEnv, bucket: &str, name: &str) -> Result<Output> {
    let mut got = Output::new();
    for key in finished_parts(env, bucket, name).await? {
        for (k, val) in read_part(env, bucket, &key).await? {
            let e = got.entry(k).or_insert((val, 0));
            e.1 += 1;
            // Keep a differing value visible as a wrong aggregate.
            e.0 = val;
        }
    }
    Ok(got)
}

/// Checks `got` holds every aggregate of `want` exactly once with the right value and nothing
/// else; `Ok(number of aggregates)`, or a description of what is wrong.
pub fn check_exactly_once(got: &Output, want: &Aggregates) -> std::result::Result<usize, String> {
    let missing: Vec<_> = want.keys().filter(|k| !got.contains_key(*k)).collect();
    let extra: Vec<_> = got.keys().filter(|k| !want.contains_key(*k)).collect();
    let wrong: Vec<_> = want
        .iter()
        .filter_map(|(k, v)| {
            got.get(k)
                .filter(|(g, _)| g != v)
                .map(|(g, n)| (k, v, g, n))
        })
        .collect();
    let dup: Vec<_> = got.iter().filter(|(_, (_, n))| *n != 1).collect();
    if missing.is_empty() && extra.is_empty() && wrong.is_empty() && dup.is_empty() {
        return Ok(want.len());
    }
    Err(format!(
        "output is not exactly-once: {} aggregates expected, {} read; missing {:?}; extra {:?}; wrong {:?}; duplicated {:?}",
        want.len(),
        got.len(),
        &missing[..missing.len().min(10)],
        &extra[..extra.len().min(10)],
        &wrong[..wrong.len().min(10)],
        &dup[..dup.len().min(10)]
    ))
}
