//! Worker pods of our runtime (`spec.workers`): the coordinator's image and spec, registering
//! with the coordinator at its pod IP. Which workers exist is planned by the decision
//! ([`crate::decide::plan_workers`]); this builds one.
//!
//! Worker pods restart always (`restartPolicy: Always`): a worker holds no state, a restarted one
//! registers again and the coordinator restarts the job from its latest checkpoint.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, ContainerPort, EnvVar, Pod};
use streamjob_contract::process::{CLUSTER_PORT, DATA_PORT, MANIFEST_ENV, TOKEN_ENV};
use streamjob_crds::v1alpha1::StreamJobSpec;

use super::pods::{common_env, pod_from_template};
use crate::decide::CoordinatorObs;
use crate::objects::env::secret_env;
use crate::objects::names::{token_secret_name, worker_name};
use crate::objects::template::RUNTIME_CONTAINER;
use crate::objects::{
    ANNOTATION_COORDINATOR_UID, LABEL_COORDINATOR, LABEL_ROLE, Owner, ROLE_WORKER, TOKEN_KEY,
};

/// Worker `index` of `coordinator`: the coordinator's image and spec (by its hash), connecting to
/// the coordinator's pod IP.
pub fn worker_pod(
    owner: &Owner,
    coordinator: &CoordinatorObs,
    index: u32,
    spec: &StreamJobSpec,
) -> Option<Pod> {
    let ip = coordinator.ip.as_ref()?;
    let args = vec![
        "worker".to_string(),
        format!("env:{MANIFEST_ENV}"),
        "--coordinator".into(),
        format!("{ip}:{CLUSTER_PORT}"),
        "--data-addr".into(),
        format!("0.0.0.0:{DATA_PORT}"),
        "--advertise-host".into(),
        "$(POD_IP)".into(),
    ];
    let mut env = common_env(owner, &coordinator.hash, spec);
    env.push(secret_env(
        TOKEN_ENV,
        &token_secret_name(&owner.name),
        TOKEN_KEY,
    ));
    env.push(EnvVar {
        name: "STREAMJOB_COORDINATOR".into(),
        value: Some(coordinator.name.clone()),
        ..Default::default()
    });
    let container = Container {
        name: RUNTIME_CONTAINER.into(),
        image: Some(spec.image.clone()),
        image_pull_policy: spec.image_pull_policy.clone(),
        args: Some(args),
        env: Some(env),
        ports: Some(vec![ContainerPort {
            name: Some("data".into()),
            container_port: i32::from(DATA_PORT),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    };
    let mut pod = pod_from_template(
        owner,
        &worker_name(&coordinator.name, index),
        None,
        &coordinator.hash,
        spec,
        container,
        "Always",
    );
    let labels: &mut BTreeMap<String, String> = pod.metadata.labels.get_or_insert_default();
    labels.insert(LABEL_ROLE.into(), ROLE_WORKER.into());
    labels.insert(LABEL_COORDINATOR.into(), coordinator.name.clone());
    pod.metadata
        .annotations
        .get_or_insert_default()
        .insert(ANNOTATION_COORDINATOR_UID.into(), coordinator.uid.clone());
    Some(pod)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::decide::test_coordinator as coord;
    use crate::engine::observe_workers;
    use crate::objects::LABEL_HASH;

    #[test]
    fn a_worker_pod_reaches_its_coordinator_and_restarts_always() {
        let spec = streamjob_crds::v1alpha1::StreamJob::from_yaml(
            "apiVersion: streamjob.io/v1alpha1\nkind: StreamJob\nmetadata: {name: clicks}\nspec:\n  image: runtime:2\n  parallelism: 2\n  workers: 2\n  checkpoints: {dir: s3://b/ck}\n  pipeline:\n    - uid: gen\n      source: {generator: {}}\n    - uid: out\n      print: {}\n",
        )
        .unwrap()
        .spec;
        let owner = Owner {
            name: "clicks".into(),
            namespace: "ns".into(),
            uid: "u".into(),
        };
        let pod = worker_pod(&owner, &coord("clicks-1", 2, true), 1, &spec).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("clicks-1-w1"));
        let labels = pod.metadata.labels.clone().unwrap();
        assert_eq!(labels[LABEL_ROLE], ROLE_WORKER);
        assert_eq!(labels[LABEL_COORDINATOR], "clicks-1");
        assert_eq!(labels[LABEL_HASH], "h1");
        assert_eq!(
            pod.metadata.annotations.as_ref().unwrap()[ANNOTATION_COORDINATOR_UID],
            "uid-clicks-1"
        );
        let pod_spec = pod.spec.clone().unwrap();
        assert_eq!(pod_spec.restart_policy.as_deref(), Some("Always"));
        let c = &pod_spec.containers[0];
        assert_eq!(c.image.as_deref(), Some("runtime:2"));
        assert_eq!(
            c.args.clone().unwrap(),
            [
                "worker",
                "env:STREAMJOB_MANIFEST",
                "--coordinator",
                "10.0.0.7:6123",
                "--data-addr",
                "0.0.0.0:6121",
                "--advertise-host",
                "$(POD_IP)"
            ]
        );
        let env: Vec<String> = c.env.clone().unwrap().into_iter().map(|e| e.name).collect();
        assert!(env.iter().any(|e| e == TOKEN_ENV), "{env:?}");
        assert!(env.iter().any(|e| e == MANIFEST_ENV), "{env:?}");
        // the worker planning reads a coordinator's count back from its arguments
        let mut coordinator = pod.clone();
        coordinator.metadata.labels = Some(BTreeMap::from([(
            LABEL_ROLE.to_string(),
            "runtime".to_string(),
        )]));
        if let Some(s) = coordinator.spec.as_mut() {
            s.containers[0].args = Some(vec!["coordinator".into(), "--workers".into(), "2".into()]);
        }
        let (cs, ws) = observe_workers(&[coordinator]);
        assert_eq!((cs.len(), cs[0].workers, ws.len()), (1, 2, 0));
    }
}
