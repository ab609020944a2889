//! Pure builders of a Flink standalone application cluster, as the Flink engine runs one run of a
//! job: the cluster's `config.yaml` (in the version's ConfigMap), one JobManager pod named as the
//! run (application mode: it runs the job's `main()` and the job), TaskManager pods pointed at
//! the JobManager (the run's workers), and the rest Service. The pods run the user's Flink image
//! with its own entrypoint (`standalone-job`, `taskmanager`).
//!
//! Its configuration is a file of the version's ConfigMap ([`super::conf`]).
//!
//! TaskManagers are given the JobManager's pod IP, as the runtime engine gives workers their
//! coordinator's: a TaskManager is made once the JobManager pod has an address, and a new
//! JobManager pod gets new TaskManagers. (No cluster DNS is assumed.)

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction, ObjectFieldSelector, Pod,
    PodSecurityContext, PodSpec, Probe, ResourceRequirements, SecurityContext, Service,
    ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use streamjob_crds::pod_template::PodTemplate;

use super::conf::{conf_dir_env, conf_mount, conf_volume};
use super::plan::{CHECKER_MOUNT, CheckerInstall};
use crate::objects::names::worker_name;
use crate::objects::template::{FLINK_MAIN_CONTAINER, with_pod_template};
use crate::objects::{
    ANNOTATION_COORDINATOR_UID, LABEL_COORDINATOR, LABEL_JOB, LABEL_MANAGED, LABEL_ROLE, PodRole,
    ROLE_WORKER,
};

/// Flink's ports, the same in every cluster (each pod has its own IP).
pub const REST_PORT: u16 = 8081;
pub const RPC_PORT: u16 = 6123;
pub const BLOB_PORT: u16 = 6124;
/// The TaskManager's RPC port.
pub const TASK_MANAGER_RPC_PORT: u16 = 6122;
/// The TaskManager's data port (Flink picks a random one unless told): the runtime engine's data
/// port, so the job's NetworkPolicy admits it.
pub const DATA_PORT: u16 = streamjob_contract::process::DATA_PORT;
/// Where Flink's Prometheus reporter serves `/metrics` (the runtime's metrics port: the chart's
/// PodMonitor scrapes the container port named `metrics`, the NetworkPolicy admits it).
pub const METRICS_PORT: u16 = streamjob_contract::process::METRICS_PORT;
/// Flink's Prometheus reporter, shipped in every Flink distribution's
/// `plugins/metrics-prometheus` (so in the official images).
pub const PROMETHEUS_REPORTER: &str =
    "org.apache.flink.metrics.prometheus.PrometheusReporterFactory";
/// Flink's ports the job's own pods connect to (JobManager RPC and blob server, TaskManager RPC
/// and data): what the NetworkPolicy opens between them.
pub const PEER_PORTS: [u16; 4] = [RPC_PORT, BLOB_PORT, TASK_MANAGER_RPC_PORT, DATA_PORT];
/// The official Flink image's user (`flink`).
pub const FLINK_USER: i64 = 9999;
/// Label telling JobManager and TaskManager pods apart.
pub const LABEL_COMPONENT: &str = "streamjob.io/flink-component";
/// Annotation of a JobManager pod: the TaskManagers it expects (its workers).
pub use crate::objects::ANNOTATION_WORKERS as ANNOTATION_TASK_MANAGERS;

/// Memory and CPU of one JobManager or TaskManager pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodResources {
    /// Flink's `*.memory.process.size` and the pod's memory request and limit (`1024m`, `2g`).
    pub memory_mib: u32,
    /// CPU request (`"1"`, `"500m"`).
    pub cpu: String,
}

impl PodResources {
    /// The container's requests (CPU, memory) and limit (memory: Flink sizes its process to it).
    pub fn requirements(&self) -> ResourceRequirements {
        let memory = Quantity(format!("{}Mi", self.memory_mib));
        ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_string(), Quantity(self.cpu.clone())),
                ("memory".to_string(), memory.clone()),
            ])),
            limits: Some(BTreeMap::from([("memory".to_string(), memory)])),
            ..Default::default()
        }
    }
}

/// A container of a Flink image: the official image's entrypoint writes its configuration under
/// /opt/flink, so its root file system is not read-only (the rest of `restricted` applies).
pub fn image_security_context() -> SecurityContext {
    SecurityContext {
        read_only_root_filesystem: Some(false),
        ..Default::default()
    }
}

/// Everything one cluster (one version of one job) is made of.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterPlan {
    /// The run: the JobManager pod's name, prefix of the TaskManagers' and the Service's.
    pub name: String,
    /// The version's ConfigMap, holding [`super::conf::CONFIG_KEY`].
    pub config_map: String,
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    pub owner: Option<OwnerReference>,
    pub image: String,
    pub image_pull_policy: Option<String>,
    pub entry_class: String,
    pub args: Vec<String>,
    /// The job's id (32 hex digits), fixed so its checkpoints and REST paths are predictable.
    pub job_id: String,
    pub parallelism: u32,
    pub slots_per_task_manager: u32,
    pub task_managers: u32,
    pub job_manager: PodResources,
    pub task_manager: PodResources,
    pub from_savepoint: Option<String>,
    pub allow_non_restored_state: bool,
    pub checkpoints_dir: String,
    pub savepoints_dir: String,
    /// `spec.checkpoints`: interval and timeout (Flink durations), completed ones kept.
    pub checkpoint_interval: String,
    pub checkpoint_timeout: String,
    pub checkpoints_retained: u32,
    /// `spec.maxParallelism`: the key groups of the job's state.
    pub max_parallelism: u32,
    /// The user's Flink configuration (checked with [`ClusterPlan::check_configuration`]).
    pub configuration: BTreeMap<String, String>,
    /// The JobManager pod's template: `spec.flink.jobManager.podTemplate` over `spec.podTemplate`
    /// (its `flink-main-container` merged into Flink's container).
    pub job_manager_template: Option<PodTemplate>,
    /// The TaskManager pods' template: `spec.flink.taskManager.podTemplate` over
    /// `spec.podTemplate`.
    pub task_manager_template: Option<PodTemplate>,
    /// The stores' credentials (`spec.storage`), as variables read from the user's Secrets.
    pub storage_env: Vec<EnvVar>,
}

impl ClusterPlan {
    pub fn config_map_name(&self) -> String {
        self.config_map.clone()
    }

    pub fn job_manager_name(&self) -> String {
        self.name.clone()
    }

    pub fn task_manager_name(&self, index: u32) -> String {
        worker_name(&self.name, index)
    }

    /// The job's REST Service (web UI): one name for every run of the job, so a bookmark, a
    /// port-forward or an Ingress survives upgrades.
    pub fn rest_service_name(&self) -> String {
        format!(
            "{}-rest",
            self.labels.get(LABEL_JOB).map_or(&self.name, |job| job)
        )
    }

    /// The JobManager: `standalone-job` runs the job's `main()` and the job, started by our
    /// `flink-jobmanager` (copied in from `checker`), which resumes the run from its newest
    /// checkpoint when its pod is made again, else from [`Self::from_savepoint`].
    pub fn job_manager_pod(&self, checker: &CheckerInstall) -> Pod {
        let mut args = vec![
            format!("{CHECKER_MOUNT}/flink-jobmanager"),
            "--checkpoints-dir".into(),
            self.checkpoints_dir.clone(),
            "--job-id".into(),
            self.job_id.clone(),
        ];
        if let Some(savepoint) = &self.from_savepoint {
            args.extend(["--from".into(), savepoint.clone()]);
        }
        args.extend([
            "--".into(),
            "standalone-job".into(),
            "-D".into(),
            "jobmanager.rpc.address=$(POD_IP)".into(),
            "--job-classname".into(),
            self.entry_class.clone(),
            "--job-id".into(),
            self.job_id.clone(),
        ]);
        if self.allow_non_restored_state {
            args.push("--allowNonRestoredState".into());
        }
        args.extend(self.args.iter().cloned());
        let ports = [
            ("rest", REST_PORT),
            ("rpc", RPC_PORT),
            ("blob", BLOB_PORT),
            ("metrics", METRICS_PORT),
        ];
        let mut container = self.container("jobmanager", args, &ports, &self.job_manager);
        let probe = |initial: i32, failures: i32| Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/config".into()),
                port: IntOrString::Int(i32::from(REST_PORT)),
                ..Default::default()
            }),
            initial_delay_seconds: Some(initial),
            period_seconds: Some(5),
            failure_threshold: Some(failures),
            ..Default::default()
        };
        container.readiness_probe = Some(probe(0, 6));
        // A JobManager's JVM may take minutes to answer on a busy node (20 jobs applied at once
        // on 2 cores: none answered within the 60 s a liveness probe alone allowed, and every
        // one was killed again and again). The startup probe allows 5 minutes; from its first
        // success, a JobManager that stops answering for 30 s is restarted.
        container.startup_probe = Some(probe(2, 60));
        container.liveness_probe = Some(probe(0, 6));
        let mut pod = self.pod(
            &self.job_manager_name(),
            "jobmanager",
            container,
            Some(checker),
        );
        pod.metadata
            .labels
            .get_or_insert_default()
            .insert(LABEL_ROLE.into(), PodRole::Runtime.as_str().into());
        pod.metadata.annotations.get_or_insert_default().insert(
            ANNOTATION_TASK_MANAGERS.to_string(),
            self.task_managers.to_string(),
        );
        pod
    }

    /// TaskManager `index`, registering with the JobManager at `job_manager_ip` (pod uid
    /// `job_manager_uid`: a recreated JobManager of the same name gets new TaskManagers).
    pub fn task_manager_pod(&self, index: u32, job_manager_ip: &str, job_manager_uid: &str) -> Pod {
        let args = vec![
            "taskmanager".to_string(),
            "-D".into(),
            format!("jobmanager.rpc.address={job_manager_ip}"),
        ];
        let ports = [
            ("rpc", TASK_MANAGER_RPC_PORT),
            ("data", DATA_PORT),
            ("metrics", METRICS_PORT),
        ];
        let container = self.container("taskmanager", args, &ports, &self.task_manager);
        let mut pod = self.pod(
            &self.task_manager_name(index),
            "taskmanager",
            container,
            None,
        );
        // A TaskManager that dies is replaced by a new pod (the worker planning replaces ended
        // workers), never restarted in place: Flink's RPC quarantines the address of a process
        // that died, and a TaskManager restarted at the same address and port cannot register
        // again (measured on 2.3: "Discarding inbound message … in read-only association").
        let labels = pod.metadata.labels.get_or_insert_default();
        labels.insert(LABEL_ROLE.into(), ROLE_WORKER.into());
        labels.insert(LABEL_COORDINATOR.into(), self.name.clone());
        pod.metadata.annotations.get_or_insert_default().insert(
            ANNOTATION_COORDINATOR_UID.to_string(),
            job_manager_uid.to_string(),
        );
        pod
    }

    /// The job's REST endpoint (web UI, `kubectl port-forward`): the JobManagers of the job,
    /// whichever run (during an upgrade the old and the new one may both answer for a moment).
    pub fn rest_service(&self) -> Service {
        let mut selector: BTreeMap<String, String> = self
            .labels
            .iter()
            .filter(|(k, _)| [LABEL_JOB, LABEL_MANAGED].contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        selector.insert(LABEL_COMPONENT.into(), "jobmanager".into());
        let mut labels = selector.clone();
        labels.remove(LABEL_COMPONENT);
        Service {
            metadata: ObjectMeta {
                name: Some(self.rest_service_name()),
                namespace: Some(self.namespace.clone()),
                labels: Some(labels),
                owner_references: self.owner.clone().map(|o| vec![o]),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                selector: Some(selector),
                ports: Some(vec![ServicePort {
                    name: Some("rest".into()),
                    port: i32::from(REST_PORT),
                    target_port: Some(IntOrString::Int(i32::from(REST_PORT))),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn container(
        &self,
        name: &str,
        args: Vec<String>,
        ports: &[(&str, u16)],
        resources: &PodResources,
    ) -> Container {
        Container {
            name: name.into(),
            image: Some(self.image.clone()),
            image_pull_policy: self.image_pull_policy.clone(),
            args: Some(args),
            env: Some(
                [
                    EnvVar {
                        name: "POD_IP".into(),
                        value_from: Some(EnvVarSource {
                            field_ref: Some(ObjectFieldSelector {
                                field_path: "status.podIP".into(),
                                ..Default::default()
                            }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                    conf_dir_env(),
                ]
                .into_iter()
                .chain(self.storage_env.iter().cloned())
                .collect(),
            ),
            ports: Some(
                ports
                    .iter()
                    .map(|(n, p)| ContainerPort {
                        name: Some((*n).into()),
                        container_port: i32::from(*p),
                        ..Default::default()
                    })
                    .collect(),
            ),
            resources: Some(resources.requirements()),
            volume_mounts: Some(vec![conf_mount()]),
            security_context: Some(image_security_context()),
            ..Default::default()
        }
    }

    /// A pod of the cluster; `checker`: with the init container copying our checker into a
    /// volume `container` mounts (the user's template is merged last, and every container is
    /// then held to `restricted`).
    fn pod(
        &self,
        name: &str,
        component: &str,
        mut container: Container,
        checker: Option<&CheckerInstall>,
    ) -> Pod {
        let mut volumes = vec![conf_volume(&self.config_map_name(), false)];
        if checker.is_some() {
            volumes.push(CheckerInstall::volume());
            let mounts = container.volume_mounts.get_or_insert_default();
            mounts.push(CheckerInstall::mount());
        }
        let spec = PodSpec {
            init_containers: checker.map(|c| vec![c.init_container()]),
            containers: vec![container],
            restart_policy: Some("Never".into()),
            volumes: Some(volumes),
            security_context: Some(flink_user()),
            ..Default::default()
        };
        let pod = Pod {
            metadata: self.meta(name, Some(component)),
            spec: Some(spec),
            ..Default::default()
        };
        let template = match component {
            "jobmanager" => self.job_manager_template.as_ref(),
            _ => self.task_manager_template.as_ref(),
        };
        with_pod_template(template, FLINK_MAIN_CONTAINER, pod)
    }

    fn selector(&self, component: &str) -> BTreeMap<String, String> {
        let mut labels = self.labels.clone();
        labels.insert(LABEL_COMPONENT.into(), component.into());
        labels
    }

    fn meta(&self, name: &str, component: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(self.namespace.clone()),
            labels: Some(match component {
                Some(c) => self.selector(c),
                None => self.labels.clone(),
            }),
            owner_references: self.owner.clone().map(|o| vec![o]),
            ..Default::default()
        }
    }
}

/// The official image's user, for every Flink pod.
pub fn flink_user() -> PodSecurityContext {
    PodSecurityContext {
        run_as_user: Some(FLINK_USER),
        run_as_group: Some(FLINK_USER),
        fs_group: Some(FLINK_USER),
        ..Default::default()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::engine::flink::conf::CONF_DIR;

    pub(crate) fn plan() -> ClusterPlan {
        ClusterPlan {
            name: "clicks-1a2b3c4d".into(),
            config_map: "clicks-manifest-h".into(),
            namespace: "team-a".into(),
            labels: BTreeMap::from([("streamjob.io/job".into(), "clicks".into())]),
            owner: None,
            image: "example.com/clicks-flink:2".into(),
            image_pull_policy: None,
            entry_class: "com.example.Clicks".into(),
            args: vec!["--output".into(), "s3://b/out".into()],
            job_id: "00000000000000000000000000000001".into(),
            parallelism: 4,
            slots_per_task_manager: 2,
            task_managers: 2,
            job_manager: PodResources {
                memory_mib: 1024,
                cpu: "500m".into(),
            },
            task_manager: PodResources {
                memory_mib: 2048,
                cpu: "1".into(),
            },
            from_savepoint: Some("s3://b/savepoints/savepoint-1".into()),
            allow_non_restored_state: true,
            checkpoints_dir: "s3://b/checkpoints".into(),
            savepoints_dir: "s3://b/savepoints".into(),
            checkpoint_interval: "10000ms".into(),
            checkpoint_timeout: "600000ms".into(),
            checkpoints_retained: 3,
            max_parallelism: 128,
            configuration: BTreeMap::from([
                ("restart-strategy.type".into(), "fixed-delay".into()),
                ("parallelism.default".into(), "99".into()),
            ]),
            job_manager_template: None,
            task_manager_template: None,
            storage_env: vec![],
        }
    }

    #[test]
    fn job_manager_restores_and_task_managers_find_it() {
        let p = plan();
        let checker = CheckerInstall {
            image: "ck:1".into(),
            minor: "2.3".into(),
        };
        let jm = p.job_manager_pod(&checker);
        let c = &jm.spec.as_ref().unwrap().containers[0];
        // flink-jobmanager resumes from the run's newest checkpoint, else from the savepoint,
        // and puts `--fromSavepoint` after the role
        assert_eq!(
            c.args.as_ref().unwrap().join(" "),
            "/opt/streamjob/checker/flink-jobmanager --checkpoints-dir s3://b/checkpoints \
             --job-id 00000000000000000000000000000001 --from s3://b/savepoints/savepoint-1 -- \
             standalone-job -D jobmanager.rpc.address=$(POD_IP) --job-classname com.example.Clicks \
             --job-id 00000000000000000000000000000001 --allowNonRestoredState --output s3://b/out"
        );
        let ps = jm.spec.as_ref().unwrap();
        let init = &ps.init_containers.as_ref().unwrap()[0];
        assert_eq!(
            init.command.as_ref().unwrap().join(" "),
            "cp -R /opt/streamjob/flink-checker/2.3/. /opt/streamjob/checker/"
        );
        let isc = init.security_context.as_ref().unwrap();
        assert_eq!(
            isc.allow_privilege_escalation,
            Some(false),
            "the init container is held to `restricted` too"
        );
        assert!(
            c.volume_mounts
                .as_ref()
                .unwrap()
                .iter()
                .any(|m| m.mount_path == CHECKER_MOUNT),
            "the checker folder reaches the JobManager"
        );
        assert_eq!(
            ps.restart_policy.as_deref(),
            Some("Never"),
            "a lost JobManager is a new pod, so flink-jobmanager looks for its newest checkpoint"
        );
        // a slow JVM on a busy node gets 5 minutes to answer before liveness counts
        let startup = c.startup_probe.as_ref().unwrap();
        assert_eq!(
            (startup.period_seconds, startup.failure_threshold),
            (Some(5), Some(60))
        );
        assert_eq!(
            c.liveness_probe.as_ref().unwrap().initial_delay_seconds,
            Some(0)
        );
        assert_eq!(jm.metadata.name.as_deref(), Some("clicks-1a2b3c4d"));
        let labels = jm.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[LABEL_COMPONENT], "jobmanager");
        // The configuration is a file of the version's ConfigMap, never FLINK_PROPERTIES.
        let env = c.env.as_ref().unwrap();
        assert!(env.iter().all(|e| e.name != "FLINK_PROPERTIES"));
        let conf_dir = env.iter().find(|e| e.name == "FLINK_CONF_DIR").unwrap();
        assert_eq!(conf_dir.value.as_deref(), Some(CONF_DIR));
        let mount = &c.volume_mounts.as_ref().unwrap()[0];
        assert_eq!(
            (mount.mount_path.as_str(), mount.read_only),
            (CONF_DIR, Some(true))
        );
        let volumes = jm.spec.as_ref().unwrap().volumes.as_ref().unwrap();
        let cm = volumes[0].config_map.as_ref().unwrap();
        assert_eq!(
            (cm.name.as_str(), cm.optional),
            ("clicks-manifest-h", Some(false))
        );
        let tm = p.task_manager_pod(1, "10.0.0.7", "uid-1");
        let tc = &tm.spec.as_ref().unwrap().containers[0];
        assert_eq!(
            tc.args.as_ref().unwrap().join(" "),
            "taskmanager -D jobmanager.rpc.address=10.0.0.7"
        );
        assert_eq!(tm.metadata.name.as_deref(), Some("clicks-1a2b3c4d-w1"));
        assert_eq!(
            tm.spec.as_ref().unwrap().restart_policy.as_deref(),
            Some("Never"),
            "a dead TaskManager is replaced by a new pod, at a new address"
        );
        assert_eq!(
            jm.spec.as_ref().unwrap().restart_policy.as_deref(),
            Some("Never")
        );
        // Restricted Pod Security, as the official image's user.
        let sc = tm.spec.as_ref().unwrap().security_context.as_ref().unwrap();
        assert_eq!(sc.run_as_user, Some(FLINK_USER));
        assert_eq!(sc.run_as_non_root, Some(true));
        let csc = tc.security_context.as_ref().unwrap();
        assert_eq!(csc.allow_privilege_escalation, Some(false));
        assert_eq!(csc.read_only_root_filesystem, Some(false));
        let svc = p.rest_service();
        // one Service for every run of the job
        assert_eq!(svc.metadata.name.as_deref(), Some("clicks-rest"));
        let selector = svc.spec.unwrap().selector.unwrap();
        assert_eq!(selector[LABEL_COMPONENT], "jobmanager");
        assert_eq!(selector["streamjob.io/job"], "clicks");
        assert!(!selector.contains_key("streamjob.io/spec-hash"));
    }
}
