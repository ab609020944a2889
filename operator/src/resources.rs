//! Pure builders of the objects the operator creates for a StreamJob: the runtime pod, the plan
//! pod, the savepoint-disposal pod, the manifest ConfigMap and the control-token Secret.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapKeySelector, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction,
    ObjectFieldSelector, Pod, PodSpec, Probe, ResourceRequirements, Secret, SecretKeySelector,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use streamjob_crds::v1alpha1::{API_VERSION, KIND, StreamJobSpec};

use crate::decide::{
    LABEL_HASH, LABEL_JOB, LABEL_MANAGED, LABEL_ROLE, MANAGER, PodPlan, PodRole, config_name,
    job_label, token_secret_name,
};
use crate::{Error, Result};

/// Name of the runtime container (a podTemplate container of this name is merged into it).
pub const CONTAINER: &str = "runtime";
/// ConfigMap key of the manifest.
pub const MANIFEST_KEY: &str = "manifest.yaml";
/// Secret key of the control token.
pub const TOKEN_KEY: &str = "token";
/// Env vars the runtime reads the manifest (`env:STREAMJOB_MANIFEST`) and its token from.
pub use streamjob_contract::process::{MANIFEST_ENV, TOKEN_ENV};

/// The StreamJob the objects belong to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

impl Owner {
    pub fn reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: API_VERSION.into(),
            kind: KIND.into(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    pub(crate) fn meta(&self, name: &str, role: Option<PodRole>, hash: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(self.namespace.clone()),
            labels: Some(labels(&self.name, role, hash)),
            owner_references: Some(vec![self.reference()]),
            ..Default::default()
        }
    }
}

/// Labels of operator-created objects.
pub fn labels(job: &str, role: Option<PodRole>, hash: Option<&str>) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    l.insert(LABEL_JOB.to_string(), job_label(job));
    l.insert(LABEL_MANAGED.to_string(), MANAGER.to_string());
    if let Some(r) = role {
        l.insert(LABEL_ROLE.to_string(), r.as_str().to_string());
    }
    if let Some(h) = hash {
        l.insert(LABEL_HASH.to_string(), h.to_string());
    }
    l
}

/// Label selector of everything of one job.
pub fn selector(job: &str) -> String {
    format!("{LABEL_JOB}={},{LABEL_MANAGED}={MANAGER}", job_label(job))
}

/// The manifest the runtime reads: a complete StreamJob document.
pub fn manifest_yaml(owner: &Owner, spec: &StreamJobSpec) -> Result<String> {
    let doc = serde_json::json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": owner.name, "namespace": owner.namespace},
        "spec": spec,
    });
    serde_yaml_ng::to_string(&doc).map_err(|e| Error::Serialize(e.to_string()))
}

pub fn config_map(owner: &Owner, hash: &str, spec: &StreamJobSpec) -> Result<ConfigMap> {
    let mut data = BTreeMap::new();
    data.insert(MANIFEST_KEY.to_string(), manifest_yaml(owner, spec)?);
    Ok(ConfigMap {
        metadata: owner.meta(&config_name(&owner.name, hash), None, Some(hash)),
        data: Some(data),
        ..Default::default()
    })
}

pub fn token_secret(owner: &Owner, token: &str) -> Secret {
    let mut data = BTreeMap::new();
    data.insert(TOKEN_KEY.to_string(), ByteString(token.as_bytes().to_vec()));
    Secret {
        metadata: owner.meta(&token_secret_name(&owner.name), None, None),
        data: Some(data),
        type_: Some("Opaque".into()),
        ..Default::default()
    }
}

fn field_env(name: &str, path: &str) -> EnvVar {
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

fn optional_secret_env(name: &str, secret: &str, key: &str, optional: bool) -> EnvVar {
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

/// Env of every pod running the job's image: pod identity, the manifest, storage credentials.
pub(crate) fn common_env(owner: &Owner, hash: &str, spec: &StreamJobSpec) -> Vec<EnvVar> {
    let mut env = vec![
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_NAMESPACE", "metadata.namespace"),
        field_env("POD_IP", "status.podIP"),
        EnvVar {
            name: MANIFEST_ENV.into(),
            value_from: Some(EnvVarSource {
                config_map_key_ref: Some(ConfigMapKeySelector {
                    name: config_name(&owner.name, hash),
                    key: MANIFEST_KEY.into(),
                    optional: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        },
    ];
    if let Some(creds) = spec
        .storage
        .as_ref()
        .and_then(|s| s.s3.as_ref())
        .and_then(|s| s.credentials_secret.as_ref())
    {
        env.push(secret_env(
            "AWS_ACCESS_KEY_ID",
            &creds.name,
            creds
                .access_key_id_key
                .as_deref()
                .unwrap_or("AWS_ACCESS_KEY_ID"),
        ));
        env.push(secret_env(
            "AWS_SECRET_ACCESS_KEY",
            &creds.name,
            creds
                .secret_access_key_key
                .as_deref()
                .unwrap_or("AWS_SECRET_ACCESS_KEY"),
        ));
    }
    // Kafka credentials: one variable per Secret key, named after the step (crds::secrets).
    for step in &spec.pipeline {
        if let Some(kafka) = step.source.as_ref().and_then(|s| s.kafka.as_ref()) {
            for e in streamjob_crds::secrets::kafka_secret_envs(&step.uid, kafka) {
                env.push(optional_secret_env(&e.env, &e.secret, &e.key, e.optional));
            }
        }
    }
    env
}

/// Merges the user's podTemplate with the operator's container; the operator's fields win for
/// image, args, ports, probes and restart policy; the user's env comes after ours. The
/// `restricted` Pod Security defaults fill what the user left unset (crate::pod_security).
pub(crate) fn pod_from_template(
    owner: &Owner,
    name: &str,
    role: Option<PodRole>,
    hash: &str,
    spec: &StreamJobSpec,
    ours: Container,
    restart_policy: &str,
) -> Pod {
    // validate() refused a template that does not parse, so nothing is dropped here
    let template = spec
        .pod_template
        .as_ref()
        .and_then(|t| t.parse().ok())
        .unwrap_or_default();
    let mut meta = owner.meta(name, role, Some(hash));
    if let Some(tm) = template.metadata {
        let mut l = tm.labels.unwrap_or_default();
        l.extend(meta.labels.take().unwrap_or_default());
        meta.labels = Some(l);
        meta.annotations = tm.annotations;
    }
    let mut pod_spec: PodSpec = template.spec.unwrap_or_default();
    let mut containers = std::mem::take(&mut pod_spec.containers);
    let user = containers
        .iter()
        .position(|c| c.name == CONTAINER)
        .map(|i| containers.remove(i));
    let container = match user {
        Some(mut u) => {
            let mut env = ours.env.clone().unwrap_or_default();
            env.extend(u.env.take().unwrap_or_default());
            Container {
                name: ours.name,
                image: ours.image,
                image_pull_policy: ours.image_pull_policy.or(u.image_pull_policy),
                command: None,
                args: ours.args,
                env: Some(env),
                ports: ours.ports,
                readiness_probe: ours.readiness_probe,
                termination_message_policy: ours.termination_message_policy,
                ..u
            }
        }
        None => ours,
    };
    containers.insert(0, container);
    pod_spec.containers = containers;
    pod_spec.restart_policy = Some(restart_policy.into());
    crate::pod_security::restrict(&mut pod_spec);
    Pod {
        metadata: meta,
        spec: Some(pod_spec),
        ..Default::default()
    }
}

/// Fills the runtime container's resources from the operator's defaults (`--runtime-resources`,
/// chart value `runtimeResources`) where the StreamJob's podTemplate set neither requests nor
/// limits.
pub fn with_default_resources(mut pod: Pod, defaults: Option<&ResourceRequirements>) -> Pod {
    if let (Some(d), Some(spec)) = (defaults, pod.spec.as_mut()) {
        for c in spec.containers.iter_mut().filter(|c| c.name == CONTAINER) {
            let unset = c
                .resources
                .as_ref()
                .is_none_or(|r| r.requests.is_none() && r.limits.is_none());
            if unset {
                c.resources = Some(d.clone());
            }
        }
    }
    pod
}

/// Whether the runtime accepts `--from-savepoint P --resume` ("the latest checkpoint taken after
/// P, else P"), so a container restarted in place does not rewind to the savepoint. The runtime
/// accepts the pair (checkpoint lineage) since its commit 29c5dde.
pub const RESUME_WITH_SAVEPOINT: bool = true;

/// The runtime pod: coordinator and all subtasks in one process. `OnFailure` with `--resume`, so a
/// crashed runtime restarts in place from its latest checkpoint, and a stop-with-savepoint (exit 0)
/// is final.
pub fn runtime_pod(owner: &Owner, plan: &PodPlan, control_port: u16) -> Pod {
    let mut args = vec![
        "coordinator".to_string(),
        format!("env:{MANIFEST_ENV}"),
        "--control-addr".into(),
        format!("$(POD_IP):{control_port}"),
    ];
    // every pod resumes its own run's commits when its container restarts in place (the run
    // is told apart by its epoch), whatever the upgrade mode: a stateless start is `--fresh`
    // only until its first commit
    args.extend(["--epoch".to_string(), plan.epoch.to_string()]);
    match &plan.from_savepoint {
        Some(from) => {
            args.push("--from-savepoint".into());
            args.push(from.clone());
            if RESUME_WITH_SAVEPOINT {
                args.push("--resume".into());
            }
        }
        None if !plan.fresh => args.push("--resume".into()),
        None => args.extend(["--fresh".to_string(), "--resume".to_string()]),
    }
    if plan.standby {
        args.push("--standby".into());
    }
    let mut ports = vec![
        ContainerPort {
            name: Some("control".into()),
            container_port: i32::from(control_port),
            protocol: Some("TCP".into()),
            ..Default::default()
        },
        // served without the token, for Prometheus (the chart's PodMonitor selects it by name)
        ContainerPort {
            name: Some("metrics".into()),
            container_port: i32::from(streamjob_contract::process::METRICS_PORT),
            protocol: Some("TCP".into()),
            ..Default::default()
        },
    ];
    if plan.spec.workers > 0 {
        // the subtasks run on worker pods (crate::workers), which register here
        args.extend([
            "--workers".into(),
            plan.spec.workers.to_string(),
            "--cluster-addr".into(),
            format!("$(POD_IP):{}", crate::workers::CLUSTER_PORT),
        ]);
        ports.push(ContainerPort {
            name: Some("cluster".into()),
            container_port: i32::from(crate::workers::CLUSTER_PORT),
            protocol: Some("TCP".into()),
            ..Default::default()
        });
    }
    let mut env = common_env(owner, &plan.hash, &plan.spec);
    env.push(secret_env(
        TOKEN_ENV,
        &token_secret_name(&owner.name),
        TOKEN_KEY,
    ));
    env.push(EnvVar {
        name: "STREAMJOB_RUN_ID".into(),
        value: Some(plan.name.clone()),
        ..Default::default()
    });
    let container = Container {
        name: CONTAINER.into(),
        image: Some(plan.spec.image.clone()),
        image_pull_policy: plan.spec.image_pull_policy.clone(),
        args: Some(args),
        env: Some(env),
        ports: Some(ports),
        readiness_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/healthz".into()),
                port: IntOrString::Int(i32::from(control_port)),
                ..Default::default()
            }),
            period_seconds: Some(2),
            failure_threshold: Some(3),
            ..Default::default()
        }),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    };
    pod_from_template(
        owner,
        &plan.name,
        Some(PodRole::Runtime),
        &plan.hash,
        &plan.spec,
        container,
        "OnFailure",
    )
}

/// Short-lived pod of the new image: `streamjob-runtime plan MANIFEST --from PATH --json`, exit 0
/// compatible, 3 incompatible, report on stdout (the termination message falls back to the log).
pub fn plan_pod(
    owner: &Owner,
    name: &str,
    hash: &str,
    spec: &StreamJobSpec,
    from: &str,
    deadline_seconds: i64,
) -> Pod {
    let container = Container {
        name: CONTAINER.into(),
        image: Some(spec.image.clone()),
        image_pull_policy: spec.image_pull_policy.clone(),
        args: Some(vec![
            "plan".into(),
            format!("env:{MANIFEST_ENV}"),
            "--from".into(),
            from.into(),
            "--json".into(),
        ]),
        env: Some(common_env(owner, hash, spec)),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    };
    let mut pod = pod_from_template(
        owner,
        name,
        Some(PodRole::Plan),
        hash,
        spec,
        container,
        "Never",
    );
    if let Some(s) = pod.spec.as_mut() {
        s.active_deadline_seconds = Some(deadline_seconds.max(30));
    }
    pod
}

/// Short-lived pod deleting savepoints: `streamjob-runtime dispose MANIFEST PATH...` (runtime
/// requirement).
pub fn dispose_pod(
    owner: &Owner,
    name: &str,
    hash: &str,
    spec: &StreamJobSpec,
    paths: &[String],
) -> Pod {
    let mut args = vec!["dispose".to_string(), format!("env:{MANIFEST_ENV}")];
    args.extend(paths.iter().cloned());
    let container = Container {
        name: CONTAINER.into(),
        image: Some(spec.image.clone()),
        image_pull_policy: spec.image_pull_policy.clone(),
        args: Some(args),
        env: Some(common_env(owner, hash, spec)),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    };
    let mut pod = pod_from_template(
        owner,
        name,
        Some(PodRole::Dispose),
        hash,
        spec,
        container,
        "Never",
    );
    if let Some(s) = pod.spec.as_mut() {
        // A disposal that hangs (a store that never answers) ends; the finalizer then lets go.
        s.active_deadline_seconds = Some(crate::disposal::DISPOSE_DEADLINE_SECONDS);
    }
    pod
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
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

    #[test]
    fn runtime_pod_has_everything() {
        let plan = PodPlan {
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
                "$(POD_IP):8081",
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
        let mut plan = PodPlan {
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
        assert_eq!(args[at + 1], "$(POD_IP):6123");
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
        let plan = PodPlan {
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
        let plan = PodPlan { spec: own, ..plan };
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
            streamjob_crds::pod_template::PodTemplate::from_spec(&PodTemplateSpec::default())
                .unwrap(),
        );
        let plan = PodPlan {
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
        let fresh = PodPlan {
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
}
