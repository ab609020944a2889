//! What `spec.podTemplate` may ask for (`--pod-template-policy`, the chart's
//! `podTemplatePolicy`).
//!
//! Whoever may create a StreamJob gets pods in its namespace, and the template reaches every one
//! of them: under `any` (the default) it may run them as any service account of the namespace,
//! with any of its Secrets and any volume. `restricted` is for namespaces shared by people who
//! must not have that: the operator refuses a template that names a service account or a Secret,
//! mounts anything but scratch and configuration volumes, or asks for the host's namespaces or
//! privileged containers. A refused spec is reported like an invalid one (`SpecValid=False`,
//! naming the field): nothing new is started, a job already running stays as it is.
//!
//! `spec.storage` and Kafka sources name Secrets too, which the operator passes to its pods as
//! variables. Under `restricted` such a Secret must carry the label [`CREDENTIALS_LABEL`]: whoever
//! may label a Secret decides that StreamJobs may hand it to their pods, not whoever writes the
//! StreamJob.

use k8s_openapi::api::core::v1::{Container, PodTemplateSpec, Volume};
use streamjob_crds::v1alpha1::StreamJobSpec;

/// How much of a pod `spec.podTemplate` may set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PodTemplatePolicy {
    /// Anything a pod may have (the template's author may create pods in the namespace).
    #[default]
    Any,
    /// No service account, Secret, host namespace, privileged container or volume beyond
    /// `emptyDir`, `configMap`, `downwardAPI`, `ephemeral` and `projected` of those.
    Restricted,
}

impl PodTemplatePolicy {
    /// Why the policy refuses `spec`, naming each field; `None`: allowed. `labelled` says whether
    /// a Secret of the job's namespace carries [`CREDENTIALS_LABEL`] (`None`: no such Secret).
    pub fn refuses(
        self,
        spec: &StreamJobSpec,
        labelled: impl Fn(&str) -> Option<bool>,
    ) -> Option<String> {
        if self == Self::Any {
            return None;
        }
        // a template that does not parse is refused by validation, naming the field
        let mut found: Vec<String> = spec
            .pod_templates()
            .into_iter()
            .filter_map(|(at, t)| Some(restricted_refusals(&t.parse_at(at).ok()?, at)))
            .flatten()
            .collect();
        for (field, secret) in credential_secrets(spec) {
            match labelled(&secret) {
                Some(true) => {}
                Some(false) => found.push(format!(
                    "{field}: Secret {secret} is not labelled {CREDENTIALS_LABEL}=true"
                )),
                None => found.push(format!(
                    "{field}: Secret {secret} not found (it needs the label {CREDENTIALS_LABEL}=true)"
                )),
            }
        }
        (!found.is_empty()).then(|| {
            format!(
                "the operator's pod template policy is restricted (podTemplatePolicy): {}",
                found.join("; ")
            )
        })
    }
}

/// The label a Secret needs before a StreamJob may hand it to its pods under `restricted`.
pub const CREDENTIALS_LABEL: &str = "streamjob.io/credentials";

/// The Secrets `spec` hands to its pods as variables (store credentials, Kafka SASL and TLS),
/// each with the field that names it, in the order of the spec.
pub fn credential_secrets(spec: &StreamJobSpec) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(storage) = &spec.storage {
        let s3 = storage
            .s3
            .as_ref()
            .and_then(|s| s.credentials_secret.as_ref());
        let gcs = storage
            .gcs
            .as_ref()
            .and_then(|g| g.service_account_key_secret.as_ref());
        let azure = storage
            .azure
            .as_ref()
            .and_then(|a| a.credentials_secret.as_ref());
        for (field, name) in [
            ("s3.credentialsSecret", s3.map(|c| &c.name)),
            ("gcs.serviceAccountKeySecret", gcs.map(|k| &k.name)),
            ("azure.credentialsSecret", azure.map(|c| &c.name)),
        ] {
            if let Some(name) = name {
                out.push((format!("spec.storage.{field}"), name.clone()));
            }
        }
    }
    for step in &spec.pipeline {
        let security = step
            .source
            .as_ref()
            .and_then(|s| s.kafka.as_ref())
            .and_then(|k| k.security.as_ref());
        let Some(security) = security else { continue };
        let at = |what: &str| {
            format!(
                "spec.pipeline[uid={}].source.kafka.security.{what}",
                step.uid
            )
        };
        if let Some(sasl) = &security.sasl {
            out.push((at("sasl.secretName"), sasl.secret_name.clone()));
        }
        if let Some(tls) = &security.tls {
            out.push((at("tls.secretName"), tls.secret_name.clone()));
        }
    }
    out
}

/// What `restricted` refuses in `template` (the one at field `template_at`), each naming its
/// field.
pub fn restricted_refusals(template: &PodTemplateSpec, template_at: &str) -> Vec<String> {
    let mut out = Vec::new();
    let Some(spec) = &template.spec else {
        return out;
    };
    let at = |field: &str| format!("{template_at}.spec.{field}");
    if spec.service_account_name.is_some() || spec.service_account.is_some() {
        out.push(format!(
            "{}: runs the pods as another service account",
            at("serviceAccountName")
        ));
    }
    if spec.automount_service_account_token == Some(true) {
        out.push(format!(
            "{}: true mounts an API token into the pods",
            at("automountServiceAccountToken")
        ));
    }
    for (field, on) in [
        ("hostNetwork", spec.host_network),
        ("hostPID", spec.host_pid),
        ("hostIPC", spec.host_ipc),
    ] {
        if on == Some(true) {
            out.push(format!("{}: the host's namespaces", at(field)));
        }
    }
    for v in spec.volumes.iter().flatten() {
        if let Some(kind) = refused_volume(v) {
            out.push(format!(
                "{}: {kind} volumes are not allowed (emptyDir, configMap, downwardAPI, ephemeral)",
                at(&format!("volumes[name={}]", v.name))
            ));
        }
    }
    let containers = [
        ("containers", spec.containers.as_slice()),
        (
            "initContainers",
            spec.init_containers.as_deref().unwrap_or_default(),
        ),
    ];
    for (list, cs) in containers {
        for c in cs {
            out.extend(
                container_refusals(c)
                    .into_iter()
                    .map(|why| format!("{}.{why}", at(&format!("{list}[name={}]", c.name)))),
            );
        }
    }
    if spec
        .ephemeral_containers
        .as_ref()
        .is_some_and(|e| !e.is_empty())
    {
        out.push(format!("{}: not allowed", at("ephemeralContainers")));
    }
    out
}

/// The kind of a volume `restricted` refuses.
fn refused_volume(v: &Volume) -> Option<&'static str> {
    let harmless = v.empty_dir.is_some()
        || v.config_map.is_some()
        || v.downward_api.is_some()
        || v.ephemeral.is_some();
    if harmless {
        return None;
    }
    match &v.projected {
        Some(p) => p
            .sources
            .iter()
            .flatten()
            .any(|s| s.secret.is_some() || s.service_account_token.is_some())
            .then_some("projected Secret or service account token"),
        None if v.secret.is_some() => Some("secret"),
        None if v.host_path.is_some() => Some("hostPath"),
        None if v.persistent_volume_claim.is_some() => Some("persistentVolumeClaim"),
        None => Some("this kind of"),
    }
}

/// What `restricted` refuses in a container, relative to it.
fn container_refusals(c: &Container) -> Vec<String> {
    let mut out = Vec::new();
    for e in c.env.iter().flatten() {
        if e.value_from
            .as_ref()
            .is_some_and(|f| f.secret_key_ref.is_some())
        {
            out.push(format!(
                "env[name={}].valueFrom.secretKeyRef: reads a Secret",
                e.name
            ));
        }
    }
    for (i, e) in c.env_from.iter().flatten().enumerate() {
        if e.secret_ref.is_some() {
            out.push(format!("envFrom[{i}].secretRef: reads a Secret"));
        }
    }
    if let Some(sc) = &c.security_context {
        if sc.privileged == Some(true) {
            out.push("securityContext.privileged: true".into());
        }
        if sc
            .capabilities
            .as_ref()
            .and_then(|cap| cap.add.as_ref())
            .is_some_and(|add| !add.is_empty())
        {
            out.push("securityContext.capabilities.add: extra capabilities".into());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use streamjob_crds::pod_template::PodTemplate;

    fn spec_with(template: serde_json::Value) -> StreamJobSpec {
        let yaml = "apiVersion: streamjob.io/v1alpha1\nkind: StreamJob\nmetadata: {name: j}\nspec:\n  image: i\n  checkpoints: {dir: /ck}\n  pipeline:\n    - {uid: src, source: {generator: {count: 1}}}\n    - {uid: out, print: {}}\n";
        let mut s = streamjob_crds::v1alpha1::StreamJob::from_yaml(yaml)
            .unwrap()
            .spec;
        s.pod_template = Some(PodTemplate(template));
        s.validate().unwrap();
        s
    }

    #[test]
    fn any_allows_everything_restricted_names_each_refused_field() {
        let t = serde_json::json!({"spec": {
            "serviceAccountName": "admin",
            "hostNetwork": true,
            "volumes": [
                {"name": "scratch", "emptyDir": {}},
                {"name": "conf", "configMap": {"name": "c"}},
                {"name": "keys", "secret": {"secretName": "other-team"}},
                {"name": "tok", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}},
                {"name": "info", "projected": {"sources": [{"downwardAPI": {"items": []}}]}},
                {"name": "disk", "hostPath": {"path": "/"}}
            ],
            "containers": [{
                "name": "runtime",
                "env": [
                    {"name": "OK", "value": "1"},
                    {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}
                ],
                "envFrom": [{"configMapRef": {"name": "c"}}, {"secretRef": {"name": "all"}}],
                "securityContext": {"privileged": true}
            }],
            "initContainers": [{"name": "init", "envFrom": [{"secretRef": {"name": "x"}}]}]
        }});
        let spec = spec_with(t);
        assert_eq!(PodTemplatePolicy::Any.refuses(&spec, |_| None), None);
        let why = PodTemplatePolicy::Restricted
            .refuses(&spec, |_| None)
            .unwrap();
        for field in [
            "spec.podTemplate.spec.serviceAccountName",
            "spec.podTemplate.spec.hostNetwork",
            "spec.podTemplate.spec.volumes[name=keys]: secret",
            "spec.podTemplate.spec.volumes[name=tok]: projected",
            "spec.podTemplate.spec.volumes[name=disk]: hostPath",
            "spec.podTemplate.spec.containers[name=runtime].env[name=PW].valueFrom.secretKeyRef",
            "spec.podTemplate.spec.containers[name=runtime].envFrom[1].secretRef",
            "spec.podTemplate.spec.containers[name=runtime].securityContext.privileged",
            "spec.podTemplate.spec.initContainers[name=init].envFrom[0].secretRef",
        ] {
            assert!(why.contains(field), "{field} in {why}");
        }
        for allowed in [
            "volumes[name=scratch]",
            "volumes[name=conf]",
            "volumes[name=info]",
            "env[name=OK]",
            "[name=runtime].envFrom[0]",
        ] {
            assert!(!why.contains(allowed), "{allowed} in {why}");
        }
    }

    /// The Flink roles' templates are held to the same rules, each refusal naming its role.
    #[test]
    fn restricted_checks_the_flink_role_templates_too() {
        let yaml = r#"
apiVersion: streamjob.io/v1alpha1
kind: StreamJob
metadata: {name: j}
spec:
  engine: flink
  image: i
  checkpoints: {dir: "s3://b/ck"}
  podTemplate: {spec: {tolerations: [{key: a, operator: Exists}]}}
  flink:
    version: 2.3.0
    job: {entryClass: a.B}
    jobManager:
      podTemplate: {spec: {serviceAccountName: admin}}
    taskManager:
      podTemplate:
        spec: {volumes: [{name: keys, secret: {secretName: other-team}}]}
"#;
        let spec = streamjob_crds::v1alpha1::StreamJob::from_yaml(yaml)
            .unwrap()
            .spec;
        spec.validate().unwrap();
        assert_eq!(PodTemplatePolicy::Any.refuses(&spec, |_| None), None);
        let why = PodTemplatePolicy::Restricted
            .refuses(&spec, |_| None)
            .unwrap();
        for field in [
            "spec.flink.jobManager.podTemplate.spec.serviceAccountName",
            "spec.flink.taskManager.podTemplate.spec.volumes[name=keys]: secret",
        ] {
            assert!(why.contains(field), "{field} in {why}");
        }
        assert!(!why.contains("spec.podTemplate"), "{why}");
    }

    #[test]
    fn restricted_allows_what_jobs_need() {
        let spec = spec_with(serde_json::json!({
            "metadata": {"labels": {"team": "a"}},
            "spec": {
                "nodeSelector": {"pool": "stream"},
                "imagePullSecrets": [{"name": "registry"}],
                "volumes": [{"name": "scratch", "emptyDir": {"medium": "Memory"}}],
                "containers": [{
                    "name": "runtime",
                    "resources": {"limits": {"memory": "4Gi"}},
                    "env": [{"name": "RUST_LOG", "value": "debug"}],
                    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]
                }]
            }
        }));
        assert_eq!(PodTemplatePolicy::Restricted.refuses(&spec, |_| None), None);
        let mut bare = spec.clone();
        bare.pod_template = None;
        assert_eq!(PodTemplatePolicy::Restricted.refuses(&bare, |_| None), None);
    }

    #[test]
    fn restricted_hands_out_only_labelled_secrets() {
        let yaml = r#"
apiVersion: streamjob.io/v1alpha1
kind: StreamJob
metadata: {name: j}
spec:
  image: i
  checkpoints: {dir: s3://b/ck}
  storage:
    s3: {credentialsSecret: {name: store}}
    gcs: {serviceAccountKeySecret: {name: gcp}}
  pipeline:
    - uid: in
      source:
        kafka:
          bootstrapServers: k:9092
          topic: t
          format: {jsonLines: {}}
          schema: [{name: x, type: int64}]
          security:
            protocol: SASL_SSL
            sasl: {mechanism: PLAIN, secretName: db-admin}
            tls: {secretName: kafka-ca}
    - {uid: out, print: {}}
"#;
        let spec = streamjob_crds::v1alpha1::StreamJob::from_yaml(yaml)
            .unwrap()
            .spec;
        spec.validate().unwrap();
        let names: Vec<_> = credential_secrets(&spec)
            .into_iter()
            .map(|(_, s)| s)
            .collect();
        assert_eq!(names, ["store", "gcp", "db-admin", "kafka-ca"]);
        // `any` looks at no Secret
        assert_eq!(PodTemplatePolicy::Any.refuses(&spec, |_| None), None);
        let labelled = |s: &str| match s {
            "db-admin" => Some(false),
            "gcp" => None,
            _ => Some(true),
        };
        let why = PodTemplatePolicy::Restricted
            .refuses(&spec, labelled)
            .unwrap();
        assert!(why.contains("spec.pipeline[uid=in].source.kafka.security.sasl.secretName: Secret db-admin is not labelled streamjob.io/credentials=true"), "{why}");
        assert!(
            why.contains("spec.storage.gcs.serviceAccountKeySecret: Secret gcp not found"),
            "{why}"
        );
        assert!(!why.contains("store") && !why.contains("kafka-ca"), "{why}");
        assert_eq!(
            PodTemplatePolicy::Restricted.refuses(&spec, |_| Some(true)),
            None
        );
    }
}
