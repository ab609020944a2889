#![allow(clippy::unwrap_used)]
use super::*;
use crate::objects::{LABEL_HASH, LABEL_JOB, LABEL_ROLE, config_map, selector, token_secret};
use k8s_openapi::api::core::v1::{PodTemplateSpec, ResourceRequirements};
use streamjob_crds::v1alpha1::StreamJob;

fn spec() -> StreamJobSpec {
    StreamJob::from_yaml(
        r#"
apiVersion: streamjob.io/v1alpha1
kind: StreamJob
metadata: {name: clicks}
spec:
  image: runtime:1
  checkpoints: {dir: s3://b/ck}
  storage: {s3: {endpoint: "http://minio:9000", credentialsSecret: {name: minio, accessKeyIdKey: user}}}
  pipeline:
    - uid: gen
      source: {generator: {}}
    - uid: out
      print: {}
  podTemplate:
    metadata: {labels: {team: data}}
    spec:
      nodeSelector: {pool: stream}
      containers:
        - name: runtime
          image: ignored:0
          resources: {limits: {memory: 2Gi}}
          env: [{name: EXTRA, value: "1"}]
"#,
    )
    .unwrap()
    .spec
}

fn owner() -> Owner {
    Owner {
        name: "clicks".into(),
        namespace: "ns".into(),
        uid: "u-1".into(),
    }
}

fn env_names(p: &Pod) -> Vec<String> {
    p.spec.as_ref().unwrap().containers[0]
        .env
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| e.name.clone())
        .collect()
}

#[test]
fn kafka_credentials_reach_the_pod_as_secret_refs_only() {
    let spec = StreamJob::from_yaml(
        r#"
apiVersion: streamjob.io/v1alpha1
kind: StreamJob
metadata: {name: clicks}
spec:
  image: runtime:1
  checkpoints: {dir: s3://b/ck}
  pipeline:
    - uid: in
      source:
        kafka:
          bootstrapServers: "b:9093"
          topic: t
          format: {jsonLines: {}}
          schema: [{name: x, type: int64}]
          security:
            protocol: SASL_SSL
            sasl: {mechanism: SCRAM-SHA-512, secretName: kafka-user}
            tls: {secretName: kafka-ca}
    - uid: out
      print: {}
"#,
    )
    .unwrap()
    .spec;
    let env = common_env(&owner(), "h", &spec);
    let find = |name: &str| env.iter().find(|e| e.name == name).unwrap();
    for (name, secret, key, optional) in [
        (
            "STREAMJOB_KAFKA_IN_SASL_USERNAME",
            "kafka-user",
            "username",
            None,
        ),
        (
            "STREAMJOB_KAFKA_IN_SASL_PASSWORD",
            "kafka-user",
            "password",
            None,
        ),
        (
            "STREAMJOB_KAFKA_IN_TLS_CA",
            "kafka-ca",
            "ca.crt",
            Some(true),
        ),
    ] {
        let e = find(name);
        assert!(e.value.is_none(), "{name} has no literal value");
        let r = e
            .value_from
            .as_ref()
            .unwrap()
            .secret_key_ref
            .as_ref()
            .unwrap();
        assert_eq!(
            (r.name.as_str(), r.key.as_str(), r.optional),
            (secret, key, optional)
        );
    }
}

/// GCS and Azure credentials come from Secrets as references, under the variables the storage
/// layer reads; a SAS token replaces the account key.
#[test]
fn gcs_and_azure_credentials_reach_the_pod_as_secret_refs() {
    let spec = |azure: &str| {
        StreamJob::from_yaml(&format!(
            r#"
apiVersion: streamjob.io/v1alpha1
kind: StreamJob
metadata: {{name: clicks}}
spec:
  image: runtime:1
  checkpoints: {{dir: gs://b/ck}}
  storage:
    gcs: {{serviceAccountKeySecret: {{name: gcp-key}}}}
    azure: {{account: acct, credentialsSecret: {azure}}}
  pipeline:
    - uid: gen
      source: {{generator: {{}}}}
    - uid: out
      fileSink: {{path: "az://c/out", format: {{jsonLines: {{}}}}}}
"#
        ))
        .unwrap()
        .spec
    };
    let refs = |spec: &StreamJobSpec| -> Vec<(String, String, String)> {
        common_env(&owner(), "h", spec)
            .into_iter()
            .filter_map(|e| {
                let sel = e.value_from?.secret_key_ref?;
                Some((e.name, sel.name, sel.key))
            })
            .collect()
    };
    let triple = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());
    let with_key = refs(&spec("{name: az}"));
    assert!(with_key.contains(&triple("GOOGLE_SERVICE_ACCOUNT_KEY", "gcp-key", "key.json")));
    assert!(with_key.contains(&triple(
        "AZURE_STORAGE_ACCOUNT_KEY",
        "az",
        "AZURE_STORAGE_ACCOUNT_KEY"
    )));
    let with_sas = refs(&spec("{name: az, sasTokenKey: sas}"));
    assert!(with_sas.contains(&triple("AZURE_STORAGE_SAS_KEY", "az", "sas")));
    assert!(
        !with_sas
            .iter()
            .any(|(n, _, _)| n == "AZURE_STORAGE_ACCOUNT_KEY")
    );
}

#[test]
fn runtime_pod_has_everything() {
    let plan = RunPlan {
        name: "clicks-abc".into(),
        hash: "h1".into(),
        spec: spec(),
        from_savepoint: Some("s3://b/sp/1".into()),
        standby: false,
        fresh: false,
        epoch: 0,
    };
    let p = runtime_pod(&owner(), &plan, 8081);
    let meta = &p.metadata;
    assert_eq!(meta.owner_references.as_ref().unwrap()[0].uid, "u-1");
    let l = meta.labels.as_ref().unwrap();
    assert_eq!(l[LABEL_JOB], "clicks");
    assert_eq!(l[LABEL_HASH], "h1");
    assert_eq!(l[LABEL_ROLE], "runtime");
    assert_eq!(l["team"], "data");
    let s = p.spec.as_ref().unwrap();
    assert_eq!(s.restart_policy.as_deref(), Some("OnFailure"));
    assert_eq!(s.node_selector.as_ref().unwrap()["pool"], "stream");
    let c = &s.containers[0];
    assert_eq!(c.image.as_deref(), Some("runtime:1"));
    assert_eq!(
        c.args.as_ref().unwrap(),
        &vec![
            "coordinator",
            "env:STREAMJOB_MANIFEST",
            "--control-addr",
            "0.0.0.0:8081",
            "--metrics-addr",
            "0.0.0.0:9249",
            "--epoch",
            "0",
            "--from-savepoint",
            "s3://b/sp/1",
            "--resume"
        ]
    );
    assert_eq!(
        c.resources,
        Some(ResourceRequirements {
            limits: Some(
                [(
                    "memory".to_string(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity("2Gi".into())
                )]
                .into()
            ),
            ..Default::default()
        })
    );
    let probe = c
        .readiness_probe
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap();
    assert_eq!(probe.path.as_deref(), Some("/healthz"));
    assert_eq!(probe.port, IntOrString::Int(8081));
    let names = env_names(&p);
    for n in [
        "POD_IP",
        "STREAMJOB_MANIFEST",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "STREAMJOB_CONTROL_TOKEN",
        "EXTRA",
    ] {
        assert!(names.contains(&n.to_string()), "{n} in {names:?}");
    }
    // POD_IP comes before its use in args; the user's env comes after ours.
    assert_eq!(names.last().unwrap(), "EXTRA");
    let key = c
        .env
        .as_ref()
        .unwrap()
        .iter()
        .find(|e| e.name == "AWS_ACCESS_KEY_ID")
        .unwrap();
    let sel = key
        .value_from
        .as_ref()
        .unwrap()
        .secret_key_ref
        .as_ref()
        .unwrap();
    assert_eq!((sel.name.as_str(), sel.key.as_str()), ("minio", "user"));
    let cm = c
        .env
        .as_ref()
        .unwrap()
        .iter()
        .find(|e| e.name == MANIFEST_ENV)
        .unwrap();
    assert_eq!(
        cm.value_from
            .as_ref()
            .unwrap()
            .config_map_key_ref
            .as_ref()
            .unwrap()
            .name,
        "clicks-manifest-h1"
    );
}

#[test]
fn runtime_pod_with_workers_listens_for_them() {
    let mut plan = RunPlan {
        name: "clicks-2".into(),
        hash: "h".into(),
        spec: spec(),
        from_savepoint: None,
        standby: false,
        fresh: true,
        epoch: 0,
    };
    plan.spec.parallelism = 2;
    plan.spec.workers = 2;
    let p = runtime_pod(&owner(), &plan, 8081);
    let c = &p.spec.as_ref().unwrap().containers[0];
    let args = c.args.clone().unwrap();
    let at = args.iter().position(|a| a == "--workers").unwrap();
    assert_eq!(args[at + 1], "2");
    let at = args.iter().position(|a| a == "--cluster-addr").unwrap();
    assert_eq!(args[at + 1], "0.0.0.0:6123");
    let ports: Vec<i32> = c
        .ports
        .clone()
        .unwrap()
        .iter()
        .map(|p| p.container_port)
        .collect();
    assert_eq!(ports, [8081, 9249, 6123]);
}

#[test]
fn default_resources_fill_only_what_the_template_left_unset() {
    let defaults: ResourceRequirements = serde_json::from_value(serde_json::json!({
        "requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}
    }))
    .unwrap();
    let mut bare = spec();
    bare.pod_template = None;
    let plan = RunPlan {
        name: "clicks-x".into(),
        hash: "h".into(),
        spec: bare,
        from_savepoint: None,
        standby: false,
        fresh: false,
        epoch: 0,
    };
    let p = with_default_resources(runtime_pod(&owner(), &plan, 8081), Some(&defaults));
    let c = &p.spec.as_ref().unwrap().containers[0];
    assert_eq!(c.resources.as_ref(), Some(&defaults));
    // the job's own resources win
    let mut own = spec();
    let mine = serde_json::json!({"spec": {"containers": [{"name": "runtime",
        "resources": {"requests": {"cpu": "2"}}}]}});
    own.pod_template = Some(streamjob_crds::pod_template::PodTemplate(mine));
    let plan = RunPlan { spec: own, ..plan };
    let p = with_default_resources(runtime_pod(&owner(), &plan, 8081), Some(&defaults));
    let c = &p.spec.as_ref().unwrap().containers[0];
    let requests = c.resources.as_ref().unwrap().requests.as_ref().unwrap();
    assert_eq!(requests["cpu"].0, "2");
    assert!(c.resources.as_ref().unwrap().limits.is_none());
}

#[test]
fn standby_pod_and_no_template() {
    let mut s = spec();
    s.pod_template = Some(
        streamjob_crds::pod_template::PodTemplate::from_spec(&PodTemplateSpec::default()).unwrap(),
    );
    let plan = RunPlan {
        name: "clicks-x".into(),
        hash: "h".into(),
        spec: s,
        from_savepoint: None,
        standby: true,
        fresh: false,
        epoch: 0,
    };
    let p = runtime_pod(&owner(), &plan, 9000);
    let args = p.spec.unwrap().containers[0].args.clone().unwrap();
    assert!(args.contains(&"--standby".to_string()));
    assert!(args.contains(&"--resume".to_string()));
    assert!(!args.contains(&"--from-savepoint".to_string()));
    let fresh = RunPlan {
        fresh: true,
        epoch: 7,
        standby: false,
        ..plan
    };
    let p = runtime_pod(&owner(), &fresh, 9000);
    let args = p.spec.unwrap().containers[0].args.clone().unwrap();
    // a stateless start ignores older checkpoints, but a container restarted in place
    // resumes its own run's (epoch 7) commits instead of emitting everything again
    let joined = args.join(" ");
    assert!(joined.contains("--epoch 7 --fresh --resume"), "{joined}");
}

#[test]
fn plan_and_dispose_pods() {
    let p = plan_pod(&owner(), "clicks-plan-1", "h2", &spec(), "s3://b/ck/7", 300);
    let s = p.spec.as_ref().unwrap();
    assert_eq!(s.restart_policy.as_deref(), Some("Never"));
    assert_eq!(s.active_deadline_seconds, Some(300));
    assert_eq!(
        s.containers[0].args.as_ref().unwrap(),
        &vec![
            "plan",
            "env:STREAMJOB_MANIFEST",
            "--from",
            "s3://b/ck/7",
            "--json"
        ]
    );
    assert_eq!(p.metadata.labels.as_ref().unwrap()[LABEL_ROLE], "plan");
    assert!(!env_names(&p).contains(&TOKEN_ENV.to_string()));
    let d = dispose_pod(
        &owner(),
        "clicks-dispose-1",
        "h2",
        &spec(),
        &["a".into(), "b".into()],
    );
    assert_eq!(
        d.spec.as_ref().unwrap().containers[0]
            .args
            .as_ref()
            .unwrap(),
        &vec!["dispose", "env:STREAMJOB_MANIFEST", "a", "b"]
    );
}

#[test]
fn config_and_secret() {
    let cm = config_map(&owner(), "h3", &spec()).unwrap();
    assert_eq!(cm.metadata.name.as_deref(), Some("clicks-manifest-h3"));
    let text = &cm.data.as_ref().unwrap()[MANIFEST_KEY];
    let back = StreamJob::from_yaml(text).unwrap();
    assert_eq!(back.spec, spec());
    assert_eq!(back.metadata.namespace.as_deref(), Some("ns"));
    let sec = token_secret(&owner(), "tok");
    assert_eq!(sec.metadata.name.as_deref(), Some("clicks-control-token"));
    assert_eq!(sec.data.unwrap()[TOKEN_KEY].0, b"tok".to_vec());
    assert_eq!(
        selector("clicks"),
        "streamjob.io/job=clicks,app.kubernetes.io/managed-by=streamjob-operator"
    );
}
