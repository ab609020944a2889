//! The Ingress to a Flink job's web UI (`spec.flink.ingress`): one per StreamJob, named like the
//! REST Service it routes to (`<job>-rest`, the same across upgrades), owned by the StreamJob.
//! Pure: the controller applies it (`controller/ingress.rs`).

use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule,
    IngressServiceBackend, IngressSpec, IngressTLS, ServiceBackendPort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use streamjob_crds::flink::FlinkIngress;

use super::cluster::REST_PORT;
use crate::objects::names::job_label;
use crate::objects::{Owner, labels};

/// The name of the job's REST Service and of its Ingress (as
/// [`ClusterPlan::rest_service_name`](super::cluster::ClusterPlan::rest_service_name)).
pub fn rest_name(job: &str) -> String {
    format!("{}-rest", job_label(job))
}

/// The Ingress `spec` asks for, routing `host` + `path` to the job's REST Service.
pub fn rest_ingress(owner: &Owner, spec: &FlinkIngress) -> Ingress {
    let name = rest_name(&owner.name);
    let backend = IngressBackend {
        service: Some(IngressServiceBackend {
            name: name.clone(),
            port: Some(ServiceBackendPort {
                number: Some(i32::from(REST_PORT)),
                ..Default::default()
            }),
        }),
        ..Default::default()
    };
    Ingress {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(owner.namespace.clone()),
            labels: Some(labels(&owner.name, None, None)),
            annotations: (!spec.annotations.is_empty()).then(|| spec.annotations.clone()),
            owner_references: Some(vec![owner.reference()]),
            ..Default::default()
        },
        spec: Some(IngressSpec {
            ingress_class_name: spec.class_name.clone(),
            rules: Some(vec![IngressRule {
                host: Some(spec.host.clone()),
                http: Some(HTTPIngressRuleValue {
                    paths: vec![HTTPIngressPath {
                        path: Some(spec.path.clone()),
                        path_type: "Prefix".into(),
                        backend,
                    }],
                }),
            }]),
            tls: spec.tls_secret_name.as_ref().map(|secret| {
                vec![IngressTLS {
                    hosts: Some(vec![spec.host.clone()]),
                    secret_name: Some(secret.clone()),
                }]
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn the_ingress_routes_the_host_to_the_rest_service() {
        let owner = Owner {
            name: "clicks".into(),
            namespace: "team-a".into(),
            uid: "u-1".into(),
        };
        let spec = FlinkIngress {
            host: "clicks.flink.example.com".into(),
            path: "/".into(),
            class_name: Some("nginx".into()),
            annotations: BTreeMap::from([("a".into(), "b".into())]),
            tls_secret_name: Some("clicks-tls".into()),
        };
        let i = rest_ingress(&owner, &spec);
        assert_eq!(i.metadata.name.as_deref(), Some("clicks-rest"));
        assert_eq!(i.metadata.owner_references.as_ref().unwrap()[0].uid, "u-1");
        let s = i.spec.unwrap();
        assert_eq!(s.ingress_class_name.as_deref(), Some("nginx"));
        let rule = &s.rules.unwrap()[0];
        assert_eq!(rule.host.as_deref(), Some("clicks.flink.example.com"));
        let path = &rule.http.as_ref().unwrap().paths[0];
        let svc = path.backend.service.as_ref().unwrap();
        assert_eq!(
            (svc.name.as_str(), svc.port.as_ref().unwrap().number),
            ("clicks-rest", Some(8081))
        );
        assert_eq!(s.tls.unwrap()[0].secret_name.as_deref(), Some("clicks-tls"));
    }
}
