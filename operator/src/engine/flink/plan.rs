//! From a StreamJob's `spec.flink` to what the Flink engine creates, pure: the cluster of one run
//! ([`ClusterPlan`]), the version's `config.yaml`, the job id of a run, and the check pod that
//! runs the savepoint pre-check in the new image.

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, Pod, PodSpec, Volume, VolumeMount,
};
use sha2::{Digest, Sha256};
use streamjob_crds::flink::{FlinkResources, FlinkSpec, memory_mib, parse_version};
use streamjob_crds::pod_template::PodTemplate;
use streamjob_crds::units::parse_duration;
use streamjob_crds::v1alpha1::StreamJobSpec;

use super::FlinkError;
use super::cluster::{ClusterPlan, PodResources, flink_user, image_security_context};
use super::conf::{conf_dir_env, conf_mount, conf_volume};
use super::precheck::CheckRequest;
use crate::objects::env::storage_env;
use crate::objects::names::config_name;
use crate::objects::template::{FLINK_MAIN_CONTAINER, with_pod_template};
use crate::objects::{Owner, PodRole, labels};

/// Where the check pod's init container puts the checker (and where `flink-check` runs from).
pub const CHECKER_MOUNT: &str = "/opt/streamjob/checker";
/// Where the flink-checker image holds one folder per supported minor (`1.20`, `2.3`).
pub const CHECKER_IMAGE_DIR: &str = "/opt/streamjob/flink-checker";
/// The job jar's folder in a Flink image (application mode).
pub const USRLIB: &str = streamjob_crds::flink::USRLIB;

/// The Flink part of a spec the engine runs (validation guarantees it for `engine: flink`).
pub fn flink_spec(spec: &StreamJobSpec) -> Result<&FlinkSpec, FlinkError> {
    spec.flink
        .as_ref()
        .ok_or_else(|| FlinkError::Version("spec.engine is flink but spec.flink is missing".into()))
}

/// The job id of run `run` (32 hex digits): fixed per run, so a restarted operator finds the job
/// on the run's JobManager without asking which one it is.
pub fn job_id(run: &str) -> String {
    hex::encode(&Sha256::digest(run.as_bytes())[..16])
}

/// `major.minor` of the spec's Flink version (the checker folder in the flink-checker image).
pub fn minor(flink: &FlinkSpec) -> Result<String, FlinkError> {
    parse_version(&flink.version)
        .map(|(a, b, _)| format!("{a}.{b}"))
        .ok_or_else(|| FlinkError::Version(format!("{:?} is not a Flink version", flink.version)))
}

fn resources(r: &FlinkResources) -> PodResources {
    PodResources {
        memory_mib: memory_mib(&r.memory).unwrap_or(1024),
        cpu: r.cpu.clone(),
    }
}

/// A duration of the spec as Flink reads one (milliseconds).
fn flink_duration(field: &str, value: &str) -> String {
    parse_duration(field, value)
        .map(|d| format!("{}ms", d.as_millis()))
        .unwrap_or_else(|_| value.to_string())
}

/// The cluster of run `run` of version `hash`, restoring `from_savepoint` if given.
pub fn cluster_plan(
    owner: &Owner,
    run: &str,
    hash: &str,
    spec: &StreamJobSpec,
    from_savepoint: Option<String>,
) -> Result<ClusterPlan, FlinkError> {
    let flink = flink_spec(spec)?;
    let savepoints_dir = spec
        .savepoints
        .as_ref()
        .and_then(|s| s.dir.clone())
        .unwrap_or_else(|| format!("{}/savepoints", spec.checkpoints.dir.trim_end_matches('/')));
    Ok(ClusterPlan {
        name: run.to_string(),
        config_map: config_name(&owner.name, hash),
        namespace: owner.namespace.clone(),
        labels: labels(&owner.name, None, Some(hash)),
        owner: Some(owner.reference()),
        image: spec.image.clone(),
        image_pull_policy: spec.image_pull_policy.clone(),
        entry_class: flink.job.entry_class.clone(),
        args: flink.job.args.clone(),
        job_id: job_id(run),
        parallelism: spec.parallelism,
        slots_per_task_manager: flink.task_manager.task_slots,
        task_managers: flink.task_manager.replicas,
        job_manager: resources(&flink.job_manager.resources),
        task_manager: resources(&flink.task_manager.resources),
        from_savepoint,
        allow_non_restored_state: spec.upgrade.allow_non_restored_state,
        checkpoints_dir: spec.checkpoints.dir.clone(),
        savepoints_dir,
        checkpoint_interval: flink_duration(
            "spec.checkpoints.interval",
            &spec.checkpoints.interval,
        ),
        checkpoint_timeout: flink_duration("spec.checkpoints.timeout", &spec.checkpoints.timeout),
        checkpoints_retained: spec.checkpoints.retained,
        max_parallelism: spec.max_parallelism,
        configuration: configuration(spec, flink),
        job_manager_template: PodTemplate::overlaid(
            spec.pod_template.as_ref(),
            flink.job_manager.pod_template.as_ref(),
        ),
        task_manager_template: PodTemplate::overlaid(
            spec.pod_template.as_ref(),
            flink.task_manager.pod_template.as_ref(),
        ),
        storage_env: storage_env(spec),
    })
}

/// The user's Flink configuration, with the S3 endpoint of `spec.storage.s3` for Flink's S3
/// file systems where the user did not set one (credentials are never written here: they reach
/// the pods as variables from the user's Secret, which Flink's S3 file systems read).
fn configuration(
    spec: &StreamJobSpec,
    flink: &FlinkSpec,
) -> std::collections::BTreeMap<String, String> {
    let mut conf = flink.flink_configuration.clone();
    if let Some(s3) = spec.storage.as_ref().and_then(|s| s.s3.as_ref()) {
        if let Some(endpoint) = &s3.endpoint {
            conf.entry("s3.endpoint".into())
                .or_insert_with(|| endpoint.clone());
        }
        conf.entry("s3.path.style.access".into())
            .or_insert_with(|| (!s3.virtual_hosted_style).to_string());
    }
    conf
}

/// What the pre-check of `spec` against `from` asks (the jar is found in usrlib by `flink-check`).
pub fn check_request(spec: &StreamJobSpec, from: &str) -> Result<CheckRequest, FlinkError> {
    let flink = flink_spec(spec)?;
    Ok(CheckRequest {
        savepoint: from.to_string(),
        jar: String::new(),
        entry_class: Some(flink.job.entry_class.clone()),
        args: flink.job.args.clone(),
        parallelism: spec.parallelism,
        allow_non_restored_state: spec.upgrade.allow_non_restored_state,
        // the job's own configuration (its state backend decides how state restores), then
        // what the operator owns
        conf: flink
            .flink_configuration
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .chain([(
                "pipeline.max-parallelism".to_string(),
                spec.max_parallelism.to_string(),
            )])
            .collect(),
    })
}

/// The check pod: the *new* image runs `flink-check` (copied in by an init container of
/// `checker_image` from its folder for the target minor), which prints the verdict and writes it
/// as the termination message; exit 0 compatible, 3 incompatible, 1 the savepoint is gone (planned
/// again), 2 the check could not run.
pub fn check_pod(
    owner: &Owner,
    name: &str,
    hash: &str,
    spec: &StreamJobSpec,
    from: &str,
    checker_image: &str,
    deadline_seconds: i64,
) -> Result<Pod, FlinkError> {
    let request = check_request(spec, from)?;
    // `--jar` is added by flink-check (the jar in usrlib)
    let mut args = vec!["--savepoint".to_string(), from.to_string()];
    args.extend(
        request
            .arguments()
            .into_iter()
            .skip_while(|a| a != "--parallelism"),
    );
    let place = CheckerPod {
        name,
        role: PodRole::Plan,
        hash,
        checker_image,
        deadline_seconds,
    };
    checker_pod(owner, &place, spec, args)
}

/// The dispose pod: the job's image deletes `paths` with its own file system plugins
/// (`flink-check --dispose`); no cluster needed, so it also runs after the job is gone. Only
/// savepoints inside the job's savepoints or checkpoints directory are deleted: the checker
/// refuses any other path (exit 3, the reason in the termination message), so a wrong path in
/// status cannot cost more than a failed disposal.
pub fn dispose_pod(
    owner: &Owner,
    name: &str,
    hash: &str,
    spec: &StreamJobSpec,
    paths: &[String],
    checker_image: &str,
) -> Result<Pod, FlinkError> {
    let mut args = vec![
        "--dispose".to_string(),
        "--savepoints-dir".to_string(),
        spec.savepoint_dir(),
        "--checkpoints-dir".to_string(),
        spec.checkpoints.dir.clone(),
        "--".to_string(),
    ];
    args.extend(paths.iter().cloned());
    let place = CheckerPod {
        name,
        role: PodRole::Dispose,
        hash,
        checker_image,
        deadline_seconds: 600,
    };
    checker_pod(owner, &place, spec, args)
}

/// Our checker (`flink/checker`) for the spec's Flink minor, copied into a pod's
/// [`CHECKER_MOUNT`] by an init container of the flink-checker image: the check and dispose pods
/// run `flink-check`, the JobManager `flink-jobmanager`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckerInstall {
    pub image: String,
    /// `major.minor`: the folder in the image.
    pub minor: String,
}

impl CheckerInstall {
    pub fn new(image: &str, spec: &StreamJobSpec) -> Result<Self, FlinkError> {
        Ok(Self {
            image: image.to_string(),
            minor: minor(flink_spec(spec)?)?,
        })
    }

    /// The init container copying the checker folder into the pod's `checker` volume.
    pub fn init_container(&self) -> Container {
        Container {
            name: "install-checker".into(),
            image: Some(self.image.clone()),
            command: Some(vec![
                "cp".into(),
                "-R".into(),
                format!("{CHECKER_IMAGE_DIR}/{}/.", self.minor),
                format!("{CHECKER_MOUNT}/"),
            ]),
            volume_mounts: Some(vec![Self::mount()]),
            ..Default::default()
        }
    }

    pub fn volume() -> Volume {
        Volume {
            name: "checker".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        }
    }

    pub fn mount() -> VolumeMount {
        VolumeMount {
            name: "checker".into(),
            mount_path: CHECKER_MOUNT.into(),
            ..Default::default()
        }
    }
}

/// Which short-lived pod of the checker is made.
struct CheckerPod<'a> {
    name: &'a str,
    role: PodRole,
    hash: &'a str,
    checker_image: &'a str,
    deadline_seconds: i64,
}

/// A pod of the job's image running `flink-check args`.
fn checker_pod(
    owner: &Owner,
    place: &CheckerPod<'_>,
    spec: &StreamJobSpec,
    checker_args: Vec<String>,
) -> Result<Pod, FlinkError> {
    let checker = CheckerInstall::new(place.checker_image, spec)?;
    let mut args = vec![format!("{CHECKER_MOUNT}/flink-check")];
    args.extend(checker_args);
    let mount = CheckerInstall::mount();
    let init = checker.init_container();
    let check = Container {
        name: "check".into(),
        image: Some(spec.image.clone()),
        image_pull_policy: spec.image_pull_policy.clone(),
        args: Some(args),
        // the job's Flink configuration: store endpoints and plugins' settings for reading the
        // savepoint as the job would
        env: Some(
            std::iter::once(conf_dir_env())
                .chain(storage_env(spec))
                .collect(),
        ),
        volume_mounts: Some(vec![mount, conf_mount()]),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        // the checker's JVM: -Xmx512m
        resources: Some(
            PodResources {
                memory_mib: 768,
                cpu: "500m".into(),
            }
            .requirements(),
        ),
        security_context: Some(image_security_context()),
        ..Default::default()
    };
    let pod_spec = PodSpec {
        init_containers: Some(vec![init]),
        containers: vec![check],
        restart_policy: Some("Never".into()),
        active_deadline_seconds: Some(place.deadline_seconds.max(30)),
        volumes: Some(vec![
            CheckerInstall::volume(),
            // optional: a dispose pod may outlive the version's ConfigMap
            conf_volume(&config_name(&owner.name, place.hash), true),
        ]),
        security_context: Some(flink_user()),
        ..Default::default()
    };
    let pod = Pod {
        metadata: owner.meta(place.name, Some(place.role), Some(place.hash)),
        spec: Some(pod_spec),
        ..Default::default()
    };
    // the user's template too: the same service account and Secrets as the job's pods, to read
    // the savepoint the way the job would
    Ok(with_pod_template(
        spec.pod_template.as_ref(),
        FLINK_MAIN_CONTAINER,
        pod,
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn spec() -> StreamJobSpec {
        serde_yaml_ng::from_str(
            r#"
engine: flink
image: example.com/clicks-flink:2
parallelism: 3
checkpoints: {dir: "file:///data/ck", interval: 1m}
savepoints: {dir: "file:///data/sp"}
upgrade: {allowNonRestoredState: true}
flink:
  version: 1.20.0
  job: {entryClass: com.example.Clicks, args: ["--out", "file:///data/out"]}
  taskManager: {replicas: 2, taskSlots: 2, resources: {memory: 2Gi}}
  flinkConfiguration: {state.backend.type: rocksdb}
"#,
        )
        .unwrap()
    }

    fn owner() -> Owner {
        Owner {
            name: "clicks".into(),
            namespace: "team-a".into(),
            uid: "u-1".into(),
        }
    }

    #[test]
    fn a_run_is_a_cluster_of_the_spec() {
        let s = spec();
        s.validate().unwrap();
        let p = cluster_plan(
            &owner(),
            "clicks-abc",
            "h1",
            &s,
            Some("file:///data/sp/sp-1".into()),
        )
        .unwrap();
        assert_eq!(p.job_manager_name(), "clicks-abc");
        assert_eq!(p.task_manager_name(1), "clicks-abc-w1");
        assert_eq!(p.config_map_name(), "clicks-manifest-h1");
        assert_eq!((p.task_managers, p.slots_per_task_manager), (2, 2));
        assert_eq!(p.task_manager.memory_mib, 2048);
        assert_eq!(p.job_id, job_id("clicks-abc"));
        assert_eq!(p.job_id.len(), 32);
        let yaml = p.config_yaml();
        assert!(
            yaml.contains("\"execution.checkpointing.interval\": \"60000ms\"\n"),
            "{yaml}"
        );
        assert!(
            yaml.contains("\"pipeline.max-parallelism\": \"128\"\n"),
            "{yaml}"
        );
        assert!(
            yaml.contains("\"state.backend.type\": \"rocksdb\"\n"),
            "{yaml}"
        );
        assert!(
            yaml.contains("\"state.savepoints.dir\": \"file:///data/sp\"\n"),
            "{yaml}"
        );
        let jm = p.job_manager_pod(&CheckerInstall::new("ck:1", &spec()).unwrap());
        let labels = jm.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["streamjob.io/role"], "runtime");
        assert_eq!(labels["streamjob.io/spec-hash"], "h1");
        let tm = p.task_manager_pod(0, "10.0.0.9", "jm-uid");
        let labels = tm.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["streamjob.io/role"], "worker");
        assert_eq!(labels["streamjob.io/coordinator"], "clicks-abc");
        // what the worker planning reads
        let (coordinators, workers) = crate::engine::observe_workers(&[jm, tm]);
        assert_eq!(coordinators[0].workers, 2);
        assert_eq!(workers[0].coordinator_uid, "jm-uid");
    }

    /// Per-role templates as in a FlinkDeployment: the TaskManagers' tolerations and label
    /// reach the TaskManagers only, the JobManager's memory-hungry sidecar the JobManager only,
    /// `spec.podTemplate` every pod (check pods included) and is overridden by a role.
    #[test]
    fn role_templates_reach_their_role_only() {
        let mut s: StreamJobSpec = serde_yaml_ng::from_str(
            r#"
engine: flink
image: example.com/clicks-flink:2
parallelism: 2
checkpoints: {dir: "s3://b/ck"}
podTemplate:
  metadata: {labels: {team: a, tier: any}}
  spec:
    serviceAccountName: flink
    containers: [{name: flink-main-container, env: [{name: LOG, value: info}]}]
flink:
  version: 2.3.0
  job: {entryClass: com.example.Clicks}
  jobManager:
    podTemplate:
      spec: {containers: [{name: audit, image: example.com/audit:1}]}
  taskManager:
    replicas: 2
    podTemplate:
      metadata: {labels: {tier: spot}}
      spec:
        tolerations: [{key: spot, operator: Exists, effect: NoSchedule}]
        containers: [{name: flink-main-container, env: [{name: LOG, value: debug}]}]
"#,
        )
        .unwrap();
        s.validate().unwrap();
        let p = cluster_plan(&owner(), "clicks-abc", "h1", &s, None).unwrap();
        let jm = p.job_manager_pod(&CheckerInstall::new("ck:1", &s).unwrap());
        let tm = p.task_manager_pod(0, "10.0.0.9", "jm-uid");
        let env = |pod: &Pod, name: &str| {
            pod.spec.as_ref().unwrap().containers[0]
                .env
                .iter()
                .flatten()
                .rfind(|e| e.name == name)
                .and_then(|e| e.value.clone())
        };
        let label =
            |pod: &Pod, name: &str| pod.metadata.labels.as_ref().unwrap().get(name).cloned();
        let names = |pod: &Pod| -> Vec<String> {
            let spec = pod.spec.as_ref().unwrap();
            spec.containers.iter().map(|c| c.name.clone()).collect()
        };
        assert_eq!(env(&jm, "LOG").as_deref(), Some("info"));
        assert_eq!(env(&tm, "LOG").as_deref(), Some("debug"));
        assert_eq!(label(&jm, "tier").as_deref(), Some("any"));
        assert_eq!(label(&tm, "tier").as_deref(), Some("spot"));
        assert_eq!(label(&tm, "team").as_deref(), Some("a"));
        assert_eq!(names(&jm), ["jobmanager", "audit"]);
        assert_eq!(names(&tm), ["taskmanager"]);
        assert!(jm.spec.as_ref().unwrap().tolerations.is_none());
        assert_eq!(
            tm.spec
                .as_ref()
                .unwrap()
                .tolerations
                .as_ref()
                .unwrap()
                .len(),
            1
        );
        for pod in [&jm, &tm] {
            let sa = pod.spec.as_ref().unwrap().service_account_name.as_deref();
            assert_eq!(sa, Some("flink"));
        }
        // the operator's own labels still win over any template
        assert_eq!(label(&tm, "streamjob.io/role").as_deref(), Some("worker"));
        // a role template that does not parse is refused naming its own field
        s.flink.as_mut().unwrap().task_manager.pod_template = Some(PodTemplate(
            serde_json::json!({"spec": {"tolerations": "spot"}}),
        ));
        let e = s.validate().unwrap_err().to_string();
        assert!(
            e.contains("spec.flink.taskManager.podTemplate.spec.tolerations"),
            "{e}"
        );
    }

    #[test]
    fn the_check_pod_runs_the_checker_for_the_target_minor_in_the_new_image() {
        let pod = check_pod(
            &owner(),
            "clicks-plan-1",
            "h2",
            &spec(),
            "file:///sp/1",
            "ck:1",
            300,
        )
        .unwrap();
        let ps = pod.spec.unwrap();
        let init = &ps.init_containers.as_ref().unwrap()[0];
        assert_eq!(init.image.as_deref(), Some("ck:1"));
        assert_eq!(
            init.command.as_ref().unwrap().join(" "),
            "cp -R /opt/streamjob/flink-checker/1.20/. /opt/streamjob/checker/"
        );
        let c = &ps.containers[0];
        assert_eq!(c.image.as_deref(), Some("example.com/clicks-flink:2"));
        assert_eq!(
            c.args.as_ref().unwrap().join(" "),
            "/opt/streamjob/checker/flink-check --savepoint file:///sp/1 --parallelism 3 \
             --class com.example.Clicks --allow-non-restored-state \
             --conf state.backend.type=rocksdb --conf pipeline.max-parallelism=128 \
             -- --out file:///data/out"
        );
        assert_eq!(pod.metadata.labels.unwrap()["streamjob.io/role"], "plan");
        assert_eq!(ps.security_context.unwrap().run_as_non_root, Some(true));
    }

    #[test]
    fn the_dispose_pod_bounds_the_checker_to_the_jobs_directories() {
        let paths = ["file:///data/sp/savepoint-1".to_string()];
        let pod = dispose_pod(&owner(), "clicks-dispose-1", "h2", &spec(), &paths, "ck:1").unwrap();
        let c = &pod.spec.as_ref().unwrap().containers[0];
        assert_eq!(
            c.args.as_ref().unwrap().join(" "),
            "/opt/streamjob/checker/flink-check --dispose --savepoints-dir file:///data/sp \
             --checkpoints-dir file:///data/ck -- file:///data/sp/savepoint-1"
        );
        assert_eq!(pod.metadata.labels.unwrap()["streamjob.io/role"], "dispose");
    }
}
