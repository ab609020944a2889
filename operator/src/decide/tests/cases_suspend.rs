//! Decision table cases: Suspend / resume.

use super::*;

pub(super) fn push(v: &mut Vec<Case>) {
    let spec = base_spec();

    // ---- Suspend / resume ----
    let susp_sp = with_upgrade(running(), "Suspend/Savepointing", &spec, None);
    v.push(
        Case::new(
            "suspend: stop with savepoint",
            suspended(spec.clone()),
            susp_sp.clone(),
            world(110),
        )
        .stage("Suspend/Savepointing")
        .acts(&["TakeSavepoint:stop"])
        .conds(&["Upgrading", "Ready"]),
    );
    let mut o = world(110);
    o.savepoint = Some(SavepointState::Completed {
        path: "s3://b/sp/clicks/sp-2".into(),
    });
    v.push(
        Case::new(
            "suspend: savepoint recorded",
            suspended(spec.clone()),
            pending(susp_sp.clone(), "suspend", true),
            o,
        )
        .stage("Suspend/Stopped")
        .conds(&["Upgrading", "Ready"]),
    );
    let mut o = world(110);
    o.savepoint = Some(SavepointState::Failed { error: "x".into() });
    v.push(
        Case::new(
            "suspend: savepoint failed, suspend from checkpoint",
            suspended(spec.clone()),
            pending(susp_sp, "suspend", true),
            o,
        )
        .stage("Suspend/Stopped")
        .conds(&["Upgrading", "Ready"]),
    );
    let susp_stopped = with_upgrade(
        running(),
        "Suspend/Stopped",
        &spec,
        Some("s3://b/sp/clicks/sp-2"),
    );
    v.push(
        Case::new(
            "suspend: pod deleted",
            suspended(spec.clone()),
            susp_stopped.clone(),
            world(120),
        )
        .stage("Suspend/Stopped")
        .acts(&["Remove:clicks-old"])
        .conds(&["Upgrading", "Ready"]),
    );
    v.push(
        Case::new(
            "suspend: done",
            suspended(spec.clone()),
            susp_stopped,
            Observed::new(t(130)),
        )
        .stage("Suspend/Suspended")
        .phase(Phase::Suspended),
    );
    let mut susp = with_upgrade(
        running(),
        "Suspend/Suspended",
        &spec,
        Some("s3://b/sp/clicks/sp-2"),
    );
    susp.deployment = None;
    susp.phase = Some(Phase::Suspended);
    v.push(
        Case::new(
            "suspended: stays",
            suspended(spec.clone()),
            susp.clone(),
            Observed::new(t(200)),
        )
        .stage("Suspend/Suspended")
        .phase(Phase::Suspended),
    );
    let mut o = Observed::new(t(200));
    o.pods.push(pod("clicks-stray", PodPhase::Running));
    v.push(
        Case::new(
            "suspended: stray runtime pod removed",
            suspended(spec.clone()),
            susp.clone(),
            o,
        )
        .stage("Suspend/Suspended")
        .acts(&["Cancel:clicks-stray", "Remove:clicks-stray"]),
    );
    v.push(
        Case::new(
            "resume: same spec from the savepoint",
            spec.clone(),
            susp.clone(),
            Observed::new(t(200)),
        )
        .stage("Resume/Restoring")
        .phase(Phase::Deploying)
        .acts(&["Deploy:*:from=s3://b/sp/clicks/sp-2"])
        .conds(&["Upgrading"]),
    );
    v.push(
        Case::new(
            "resume: changed spec is pre-checked",
            img2(),
            susp.clone(),
            Observed::new(t(200)),
        )
        .stage("Resume/Planning")
        .acts(&["CheckCompatibility:s3://b/sp/clicks/sp-2"])
        .conds(&["Upgrading"]),
    );
    let mut res_plan = susp.clone();
    {
        let u = res_plan.upgrade.as_mut().unwrap();
        u.step = "Resume/Planning".parse().unwrap();
        u.from = Some(hash(&spec));
        u.to = hash(&img2());
        u.target_spec = Some(serde_json::to_string(&img2()).unwrap());
    }
    let mut o = Observed::new(t(210));
    o.pods.push(plan_pod(&res_plan, PodPhase::Failed, Some(3), Some(r#"{"operators":[{"uid":"gen","status":"incompatible","reason":"state type changed"}]}"#)));
    let del_rplan: &'static str = Box::leak(
        format!("Remove:{}", plan_pod_name(JOB, &hash(&img2()), &ts(100))).into_boxed_str(),
    );
    v.push(
        Case::new(
            "resume: incompatible spec blocked, stays suspended",
            img2(),
            res_plan.clone(),
            o.clone(),
        )
        .stage("Resume/Blocked")
        .phase(Phase::Suspended)
        .acts(Box::leak(vec![del_rplan].into_boxed_slice()))
        .conds(&["UpgradeBlocked"])
        .outcome(Outcome::Blocked),
    );
    let mut o2 = Observed::new(t(210));
    o2.pods
        .push(plan_pod(&res_plan, PodPhase::Succeeded, Some(0), None));
    v.push(
        Case::new(
            "resume: compatible spec restores",
            img2(),
            res_plan.clone(),
            o2,
        )
        .stage("Resume/Restoring")
        .acts(Box::leak(
            vec![del_rplan, "Deploy:*:from=s3://b/sp/clicks/sp-2"].into_boxed_slice(),
        ))
        .conds(&["Upgrading"]),
    );
    let mut res_blocked = res_plan.clone();
    res_blocked.upgrade.as_mut().unwrap().step = "Resume/Blocked".parse().unwrap();
    v.push(
        Case::new(
            "resume blocked: suspended again",
            suspended(img2()),
            res_blocked.clone(),
            Observed::new(t(220)),
        )
        .stage("Suspend/Suspended")
        .phase(Phase::Suspended),
    );
    v.push(
        Case::new(
            "resume blocked: back to the suspended spec resumes",
            spec.clone(),
            res_blocked,
            Observed::new(t(220)),
        )
        .stage("Resume/Restoring")
        .acts(&["Deploy:*:from=s3://b/sp/clicks/sp-2"])
        .conds(&["Upgrading"]),
    );
    let mut res_rest = switched(&spec, "Resume/Restoring");
    res_rest.upgrade.as_mut().unwrap().to = hash(&spec);
    v.push(
        Case::new(
            "resume: first checkpoint, running",
            spec.clone(),
            res_rest,
            new_world(230, RunState::Running, Some("s3://b/ck/clicks/10")),
        )
        .idle()
        .phase(Phase::Running)
        .event("Resumed")
        .conds(&["Ready"]),
    );
}
