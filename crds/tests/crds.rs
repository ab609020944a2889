#![allow(clippy::unwrap_used)]

//! The StreamJob API as users meet it: the example manifests, the invalid specs and their messages,
//! and the CRD checked in under the chart.

use std::fs;
use std::path::{Path, PathBuf};

use streamjob_crds::v1alpha1::StreamJob;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    files
}

/// Manifests in `dir` that are StreamJobs (examples may also hold Secrets or other objects).
fn stream_job_manifests(dir: &Path) -> Vec<PathBuf> {
    yaml_files(dir)
        .into_iter()
        .filter(|path| {
            fs::read_to_string(path)
                .unwrap()
                .contains("kind: StreamJob")
        })
        .collect()
}

#[test]
fn every_example_manifest_reads_and_validates() {
    let examples = stream_job_manifests(&workspace().join("examples"));
    assert!(
        examples.len() >= 2,
        "expected at least two example StreamJobs, found {examples:?}"
    );
    for path in examples {
        let text = fs::read_to_string(&path).unwrap();
        let job = StreamJob::from_yaml_strict(&text)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        job.spec
            .validate()
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for step in &job.spec.pipeline {
            step.kind().unwrap();
        }
    }
}

#[test]
fn invalid_specs_are_rejected_with_a_message_naming_the_problem() {
    let cases = yaml_files(&workspace().join("crds/tests/invalid"));
    assert!(
        cases.len() >= 10,
        "expected the table of invalid specs, found {cases:?}"
    );
    // and the ones only the Rust validation (runtime and operator) can refuse
    let runtime_only = yaml_files(&workspace().join("crds/tests/invalid-runtime"));
    assert!(!runtime_only.is_empty());
    for path in cases.into_iter().chain(runtime_only) {
        let text = fs::read_to_string(&path).unwrap();
        let expected = text
            .lines()
            .find_map(|line| line.strip_prefix("# expect: "))
            .unwrap_or_else(|| panic!("{}: no `# expect:` line", path.display()));
        let error = match StreamJob::from_yaml(&text) {
            Err(parse_error) => parse_error.to_string(),
            Ok(job) => match job.spec.validate() {
                Err(invalid) => invalid.to_string(),
                Ok(()) => panic!(
                    "{}: accepted, but should fail with {expected:?}",
                    path.display()
                ),
            },
        };
        assert!(
            error.contains(expected),
            "{}: error {error:?} does not contain {expected:?}",
            path.display()
        );
    }
}

#[test]
fn other_kinds_and_garbage_are_refused_clearly() {
    let deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n";
    let err = StreamJob::from_yaml(deployment).unwrap_err().to_string();
    assert!(err.contains("apps/v1/Deployment"), "{err}");
    let err = StreamJob::from_yaml("{{{{").unwrap_err().to_string();
    assert!(err.contains("cannot read StreamJob manifest"), "{err}");
    // `pipeline` is optional in the schema (a Flink job has none); our runtime's jobs need it.
    let missing_pipeline = "apiVersion: streamjob.io/v1alpha1\nkind: StreamJob\nmetadata: {name: x}\nspec: {image: i, checkpoints: {dir: /x}}\n";
    let err = StreamJob::from_yaml(missing_pipeline)
        .unwrap()
        .spec
        .validate()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("spec.pipeline: needs at least a source and a sink"),
        "{err}"
    );
}

#[test]
fn defaults_are_filled_in() {
    let text = "apiVersion: streamjob.io/v1alpha1\nkind: StreamJob\nmetadata: {name: x}\nspec:\n  image: i\n  checkpoints: {dir: /ck}\n  pipeline:\n    - {uid: src, source: {generator: {}}}\n    - {uid: out, print: {}}\n";
    let job = StreamJob::from_yaml(text).unwrap();
    job.spec.validate().unwrap();
    assert_eq!(job.spec.parallelism, 1);
    assert_eq!(job.spec.max_parallelism, 128);
    assert_eq!(job.spec.checkpoints.interval, "30s");
    assert_eq!(job.spec.upgrade.readiness_timeout, "5m");
    assert_eq!(job.spec.savepoint_dir(), "/ck/savepoints");
    assert_eq!(
        job.spec.pipeline[0]
            .source
            .as_ref()
            .unwrap()
            .generator
            .as_ref()
            .unwrap()
            .keys,
        1000
    );
}

#[test]
fn workers_default_to_none_leave_the_hash_alone_and_may_not_idle() {
    let base = "apiVersion: streamjob.io/v1alpha1\nkind: StreamJob\nmetadata: {name: x}\nspec:\n  image: i\n  parallelism: 2\n  checkpoints: {dir: /ck}\n  pipeline:\n    - {uid: src, source: {generator: {}}}\n    - {uid: agg, parallelism: 3, keyBy: [key], window: {tumbling: 1s}, aggregate: {count: true}}\n    - {uid: out, print: {}}\n";
    let job = StreamJob::from_yaml(base).unwrap();
    assert_eq!(job.spec.workers, 0);
    // not serialised when 0: specs deployed before the field existed keep their hash
    assert!(
        !serde_json::to_string(&job.spec)
            .unwrap()
            .contains("workers")
    );
    // up to the widest step (3) is fine
    let three =
        StreamJob::from_yaml(&base.replace("parallelism: 2\n", "parallelism: 2\n  workers: 3\n"))
            .unwrap();
    three.spec.validate().unwrap();
    assert_ne!(
        streamjob_crds::hash::deployment_hash(&three.spec).unwrap(),
        streamjob_crds::hash::deployment_hash(&job.spec).unwrap(),
        "a workers change redeploys"
    );
    let four =
        StreamJob::from_yaml(&base.replace("parallelism: 2\n", "parallelism: 2\n  workers: 4\n"))
            .unwrap();
    let err = four.spec.validate().unwrap_err().to_string();
    assert!(
        err.contains("spec.workers (4) exceeds the largest parallelism of any step (3)"),
        "{err}"
    );
}

#[test]
fn generated_crd_carries_the_rules_and_columns() {
    let crd = streamjob_crds::crd::crd();
    assert_eq!(crd.spec.group, "streamjob.io");
    assert_eq!(
        crd.spec.names.short_names.as_deref(),
        Some(&["sj".to_string()][..])
    );
    let version = &crd.spec.versions[0];
    assert_eq!(version.name, "v1alpha1");
    assert!(version.subresources.as_ref().unwrap().status.is_some());
    // `kubectl scale sj` (and autoscalers) rescale through spec.parallelism
    let scale = version
        .subresources
        .as_ref()
        .unwrap()
        .scale
        .as_ref()
        .unwrap();
    assert_eq!(scale.spec_replicas_path, ".spec.parallelism");
    assert_eq!(scale.status_replicas_path, ".status.deployment.parallelism");
    assert_eq!(
        scale.label_selector_path.as_deref(),
        Some(".status.selector")
    );
    let columns: Vec<&str> = version
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        columns,
        [
            "Ready",
            "Phase",
            "Image",
            "Parallelism",
            "Last Savepoint",
            "Age",
            "Records/s",
            "Lag"
        ]
    );
    // the throughput columns only show with `kubectl get sj -o wide`
    let wide: Vec<&str> = version
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .filter(|c| c.priority == Some(1))
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(wide, ["Records/s", "Lag"]);

    let schema = serde_json::to_string(&version.schema).unwrap();
    for rule in [
        "self.maxParallelism >= self.parallelism",
        "self == oldSelf",
        "self.all(s, self.filter(t, t.uid == s.uid).size() == 1)",
        "has(self[0].source)",
        "has(self[size(self) - 1].fileSink)",
        "has(self.keyBy) == has(self.window)",
        "[has(self.topic), has(self.topics), has(self.topicPattern)].filter(x, x).size() == 1",
    ] {
        assert!(
            schema.contains(rule),
            "CEL rule {rule:?} missing from the CRD"
        );
    }
    // Every field has a description (what `kubectl explain` shows).
    let spec_schema = serde_json::to_value(&version.schema).unwrap();
    let spec = &spec_schema["openAPIV3Schema"]["properties"]["spec"]["properties"];
    for (field, schema) in spec.as_object().unwrap() {
        assert!(
            schema.get("description").is_some(),
            "spec.{field} has no description"
        );
    }
}

/// Issue #15: `kubectl apply` (client-side) stores the whole object in an annotation capped at
/// 256 KiB, and Argo CD's default sync does the same; the API server warns on unknown formats.
#[test]
fn crd_fits_a_client_side_apply_and_uses_only_known_formats() {
    let crd = streamjob_crds::crd::crd();
    let json = serde_json::to_string(&crd).unwrap();
    assert!(
        json.len() < 128 * 1024,
        "the CRD is {} bytes of JSON: keep it well under the 262144-byte annotation limit",
        json.len()
    );
    let known = [
        "int32",
        "int64",
        "float",
        "double",
        "byte",
        "date",
        "date-time",
        "password",
        "int-or-string",
        "quantity",
    ];
    let formats = regex::Regex::new(r#""format":"([^"]*)""#).unwrap();
    for f in formats.captures_iter(&json) {
        assert!(
            known.contains(&&f[1]),
            "unknown format {:?} in the CRD",
            &f[1]
        );
    }
    let version = serde_json::to_value(&crd.spec.versions[0]).unwrap();
    let root = &version["schema"]["openAPIV3Schema"];
    assert!(
        root["description"]
            .as_str()
            .unwrap()
            .starts_with("A long-running streaming job"),
        "kubectl explain streamjob shows a description for users: {}",
        root["description"]
    );
    // the pod template keeps the fields users set most typed, and the rest as written
    let pod = &root["properties"]["spec"]["properties"]["podTemplate"];
    assert_eq!(pod["x-kubernetes-preserve-unknown-fields"], true);
    let container = &pod["properties"]["spec"]["properties"]["containers"]["items"];
    assert!(container["properties"]["resources"]["properties"]["limits"].is_object());
    assert_eq!(container["required"][0], "name");
}

#[test]
fn checked_in_crd_matches_the_types() {
    let path = workspace().join(streamjob_crds::crd::CHART_CRD_PATH);
    let checked_in = fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run `cargo xtask generate`", path.display()));
    let generated = streamjob_crds::crd::crd_yaml().unwrap();
    assert!(
        checked_in == generated,
        "{} is out of date: run `cargo xtask generate` and commit the result",
        path.display()
    );
}

#[test]
fn deployment_hash_ignores_operator_only_fields() {
    let text = fs::read_to_string(workspace().join("examples/local-clicks.yaml")).unwrap();
    let job = StreamJob::from_yaml(&text).unwrap();
    let base = streamjob_crds::hash::deployment_hash(&job.spec).unwrap();

    let mut nonce = job.spec.clone();
    nonce
        .savepoints
        .get_or_insert_with(Default::default)
        .trigger_nonce += 1;
    nonce.state = streamjob_crds::v1alpha1::JobState::Suspended;
    assert_eq!(streamjob_crds::hash::deployment_hash(&nonce).unwrap(), base);

    let mut image = job.spec.clone();
    image.image = "streamjob/runtime:0.2.0".into();
    assert_ne!(streamjob_crds::hash::deployment_hash(&image).unwrap(), base);

    let mut rescale = job.spec.clone();
    rescale.parallelism += 1;
    assert_ne!(
        streamjob_crds::hash::deployment_hash(&rescale).unwrap(),
        base
    );
    // a Flink job's Ingress is how its UI is reached, not the job
    let text = fs::read_to_string(workspace().join("examples/flink-counting.yaml")).unwrap();
    let flink = StreamJob::from_yaml(&text).unwrap();
    let flink_base = streamjob_crds::hash::deployment_hash(&flink.spec).unwrap();
    let mut ingress = flink.spec.clone();
    ingress.flink.as_mut().unwrap().ingress = Some(streamjob_crds::flink::FlinkIngress {
        host: "flink.example.com".into(),
        path: "/".into(),
        ..Default::default()
    });
    assert_eq!(
        streamjob_crds::hash::deployment_hash(&ingress).unwrap(),
        flink_base
    );
}

#[test]
fn the_latest_state_is_the_newer_of_checkpoint_and_savepoint() {
    use streamjob_crds::v1alpha1::{
        CheckpointInfo, DeploymentStatus, SavepointInfo, StartedFrom, StreamJobStatus,
    };
    let at = |s: i64| chrono::DateTime::from_timestamp(s, 0);
    let checkpoint = |s| CheckpointInfo {
        id: 7,
        path: Some("s3://b/ck/0001/chk-7".into()),
        time: at(s),
    };
    let savepoint = |s| SavepointInfo {
        path: "s3://b/sp/savepoint-1".into(),
        time: at(s),
        ..Default::default()
    };
    let mut st = StreamJobStatus {
        deployment: Some(DeploymentStatus {
            started_from: StartedFrom::Savepoint,
            path: Some("s3://b/sp/savepoint-0".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(
        st.latest_state_path().as_deref(),
        Some("s3://b/sp/savepoint-0"),
        "nothing recorded since: where the run started"
    );
    st.last_checkpoint = Some(checkpoint(100));
    st.last_savepoint = Some(savepoint(200));
    // a run restored from the savepoint that has not checkpointed since restores the
    // savepoint, not the older checkpoint of the run before it
    assert_eq!(
        st.latest_state_path().as_deref(),
        Some("s3://b/sp/savepoint-1")
    );
    st.last_checkpoint = Some(checkpoint(300));
    assert_eq!(
        st.latest_state_path().as_deref(),
        Some("s3://b/ck/0001/chk-7")
    );
}
