//! Every pod the operator creates (runtime, worker, plan, dispose) meets the `restricted` Pod
//! Security Standard by default, so namespaces that enforce it admit them: non-root user of the
//! image (65532, distroless `nonroot`), `RuntimeDefault` seccomp, no privilege escalation, every
//! capability dropped, a read-only root file system with an `emptyDir` at `/tmp`, and no
//! service-account token (the runtime never calls the API server).
//!
//! Each default fills only what the user's `podTemplate` left unset: a value the user wrote
//! wins, so a job that needs a token or another user can have one.

use k8s_openapi::api::core::v1::{
    Capabilities, EmptyDirVolumeSource, PodSecurityContext, PodSpec, SeccompProfile,
    SecurityContext, Volume, VolumeMount,
};

/// User and group of the runtime image (`USER 65532:65532` in the Dockerfile).
pub const RUN_AS: i64 = 65532;
/// The writable scratch volume mounted at `/tmp` (the root file system is read-only).
pub const TMP_VOLUME: &str = "streamjob-tmp";

/// Fills the `restricted` defaults into `spec` where the user set nothing.
pub fn restrict(spec: &mut PodSpec) {
    let pod = spec
        .security_context
        .get_or_insert_with(PodSecurityContext::default);
    pod.run_as_non_root.get_or_insert(true);
    pod.run_as_user.get_or_insert(RUN_AS);
    pod.run_as_group.get_or_insert(RUN_AS);
    pod.fs_group.get_or_insert(RUN_AS);
    pod.seccomp_profile.get_or_insert_with(|| SeccompProfile {
        type_: "RuntimeDefault".into(),
        ..Default::default()
    });
    spec.automount_service_account_token.get_or_insert(false);
    let mut mounts_tmp = false;
    for c in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        let s = c
            .security_context
            .get_or_insert_with(SecurityContext::default);
        s.allow_privilege_escalation.get_or_insert(false);
        s.read_only_root_filesystem.get_or_insert(true);
        s.run_as_non_root.get_or_insert(true);
        s.capabilities.get_or_insert_with(|| Capabilities {
            drop: Some(vec!["ALL".into()]),
            add: None,
        });
        let mounts = c.volume_mounts.get_or_insert_with(Vec::new);
        if !mounts.iter().any(|m| m.mount_path == "/tmp") {
            mounts.push(VolumeMount {
                name: TMP_VOLUME.into(),
                mount_path: "/tmp".into(),
                ..Default::default()
            });
        }
        mounts_tmp |= mounts.iter().any(|m| m.name == TMP_VOLUME);
    }
    let volumes = spec.volumes.get_or_insert_with(Vec::new);
    if mounts_tmp && !volumes.iter().any(|v| v.name == TMP_VOLUME) {
        volumes.push(Volume {
            name: TMP_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k8s_openapi::api::core::v1::Container;

    fn spec() -> PodSpec {
        PodSpec {
            containers: vec![Container {
                name: "runtime".into(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    /// The checks of the `restricted` profile (Kubernetes Pod Security Standards, v1.36).
    fn violations(spec: &PodSpec) -> Vec<String> {
        let mut v = Vec::new();
        let pod = spec.security_context.clone().unwrap_or_default();
        let seccomp_pod = pod.seccomp_profile.as_ref().map(|p| p.type_.as_str());
        for c in &spec.containers {
            let s = c.security_context.clone().unwrap_or_default();
            if s.allow_privilege_escalation != Some(false) {
                v.push(format!("{}: allowPrivilegeEscalation", c.name));
            }
            let drop = s
                .capabilities
                .as_ref()
                .and_then(|c| c.drop.clone())
                .unwrap_or_default();
            if !drop.iter().any(|d| d == "ALL") {
                v.push(format!("{}: capabilities.drop ALL", c.name));
            }
            if s.run_as_non_root.or(pod.run_as_non_root) != Some(true) {
                v.push(format!("{}: runAsNonRoot", c.name));
            }
            let seccomp = s
                .seccomp_profile
                .as_ref()
                .map(|p| p.type_.as_str())
                .or(seccomp_pod);
            if !matches!(seccomp, Some("RuntimeDefault" | "Localhost")) {
                v.push(format!("{}: seccompProfile", c.name));
            }
        }
        v
    }

    #[test]
    fn defaults_meet_the_restricted_profile_with_a_writable_tmp() {
        let mut s = spec();
        assert!(!violations(&s).is_empty());
        restrict(&mut s);
        assert_eq!(violations(&s), Vec::<String>::new());
        let c = &s.containers[0];
        assert_eq!(
            c.security_context
                .as_ref()
                .unwrap()
                .read_only_root_filesystem,
            Some(true)
        );
        assert_eq!(c.volume_mounts.as_ref().unwrap()[0].mount_path, "/tmp");
        assert_eq!(s.volumes.as_ref().unwrap()[0].name, TMP_VOLUME);
        assert_eq!(s.automount_service_account_token, Some(false));
        // idempotent
        let again = s.clone();
        restrict(&mut s);
        assert_eq!(s, again);
    }

    #[test]
    fn what_the_user_set_wins() {
        let mut s = spec();
        s.automount_service_account_token = Some(true);
        s.security_context = Some(PodSecurityContext {
            run_as_user: Some(1000),
            ..Default::default()
        });
        s.containers[0].security_context = Some(SecurityContext {
            read_only_root_filesystem: Some(false),
            ..Default::default()
        });
        restrict(&mut s);
        assert_eq!(s.automount_service_account_token, Some(true));
        assert_eq!(s.security_context.as_ref().unwrap().run_as_user, Some(1000));
        let c = s.containers[0].security_context.as_ref().unwrap();
        assert_eq!(c.read_only_root_filesystem, Some(false));
        assert_eq!(c.allow_privilege_escalation, Some(false));
        assert_eq!(violations(&s), Vec::<String>::new());
    }
}
