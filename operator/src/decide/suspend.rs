//! Suspend (stop with a savepoint, no pods) and resume.

use super::*;

impl Ctx<'_> {
    pub(super) fn back_to_suspended(&mut self, up: &UpgradeStatus) {
        let mut rec = up.clone();
        rec.to = up.from.clone().unwrap_or_else(|| up.to.clone());
        rec.step = Stage {
            kind: Suspend,
            step: Suspended,
        };
        rec.step_started_at = Some(self.now);
        self.begin(rec);
    }

    pub(super) fn suspended(&mut self, s: Stage) {
        let Some(up) = self.st.upgrade.clone() else {
            return;
        };
        self.deployed = Some(Deployed::Suspended);
        self.ready = Some((false, "Suspended".into(), "the job is suspended".into()));
        // Leftover runtime pods of a suspended job go.
        let leftovers: Vec<String> = self
            .obs
            .pods
            .iter()
            .filter(|p| p.role == PodRole::Runtime && !p.terminating)
            .map(|p| p.name.clone())
            .collect();
        for l in leftovers {
            self.delete_pod(&l);
        }
        if self.spec.state == JobState::Suspended {
            if s.kind == Resume {
                self.back_to_suspended(&up);
            }
            return;
        }
        let (Some(hash), None) = (self.spec_hash.clone(), self.spec_error.clone()) else {
            return;
        };
        let suspended_hash = match s.kind {
            Resume => up.from.clone(),
            _ => Some(up.to.clone()),
        };
        if s.kind == Resume && hash == up.to {
            return; // still blocked
        }
        let spec = self.spec.clone();
        let mut rec = self.new_record(
            suspended_hash.clone(),
            &hash,
            &spec,
            Stage {
                kind: Resume,
                step: Planning,
            },
            "resuming".into(),
        );
        rec.savepoint = up.savepoint.clone();
        self.begin(rec);
        let from = up.savepoint.clone().or_else(|| self.st.latest_state_path());
        if self.refused_restore(&spec).is_some() {
            // Resume/Planning blocks it next, with no plan pod
        } else if suspended_hash.as_deref() == Some(hash.as_str())
            || from.is_none()
            || spec.upgrade.mode == UpgradeMode::Stateless
        {
            self.resume_deploy(&spec);
        } else if let Some(from) = from {
            self.ensure_config(&hash, &spec);
            self.create_plan(&hash, &spec, &from);
            self.note(
                false,
                "Resuming",
                format!("resuming with a changed spec {hash}: checking it against {from}"),
            );
            self.look_again_within(FAST);
        }
    }

    pub(super) fn resume_deploy(&mut self, spec: &StreamJobSpec) {
        let Some(up) = self.st.upgrade.clone() else {
            return;
        };
        let from = if spec.upgrade.mode == UpgradeMode::Stateless {
            None
        } else {
            up.savepoint.clone()
        };
        self.deploy(&up.to, spec, from.clone(), self.now);
        self.move_to(Stage {
            kind: Resume,
            step: Restoring,
        });
        self.note(
            false,
            "Resuming",
            format!(
                "resuming spec {} from {}",
                up.to,
                from.as_deref().unwrap_or("its latest checkpoint")
            ),
        );
    }

    // -- bookkeeping --------------------------------------------------------------------------
}
