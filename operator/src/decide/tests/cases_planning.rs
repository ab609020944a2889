//! Decision table cases: Planning and Blocked.

use super::*;

pub(super) fn push(v: &mut Vec<Case>) {
    let spec = base_spec();

    // ---- Planning ----
    let planning = with_upgrade(running(), "InPlace/Planning", &img2(), None);
    v.push(
        Case::new(
            "planning: plan pod missing is (re)created",
            img2(),
            planning.clone(),
            world(110),
        )
        .stage("InPlace/Planning")
        .acts(&["CheckCompatibility:s3://b/ck/clicks/6"])
        .conds(&["Upgrading", "Ready"]),
    );
    let mut o = world(110);
    drop_pod(&mut o, OLD);
    o.pods
        .push(plan_pod(&planning, PodPhase::Running, None, None));
    v.push(
        Case::new(
            "planning: the old run's pod is missing: recreated while the plan runs",
            img2(),
            planning.clone(),
            o,
        )
        .stage("InPlace/Planning")
        .acts(&["Deploy:clicks-old"])
        .conds(&["Upgrading", "Degraded"])
        .event("PodRecreated"),
    );
    let mut o = world(110);
    o.pods
        .push(plan_pod(&planning, PodPhase::Running, None, None));
    v.push(
        Case::new("planning: plan running", img2(), planning.clone(), o)
            .stage("InPlace/Planning")
            .conds(&["Upgrading", "Ready"]),
    );
    let mut o = world(100_000);
    o.pods
        .push(plan_pod(&planning, PodPhase::Pending, None, None));
    let plan_name = plan_pod_name(JOB, &hash(&img2()), &ts(100));
    let del_plan: &'static str = Box::leak(format!("Remove:{plan_name}").into_boxed_str());
    v.push(
        Case::new(
            "planning: plan pod never finishes",
            img2(),
            planning.clone(),
            o,
        )
        .stage("InPlace/Blocked")
        .acts(Box::leak(vec![del_plan].into_boxed_slice()))
        .conds(&["UpgradeBlocked", "Ready"])
        .outcome(Outcome::Blocked),
    );
    let mut o = world(110);
    o.pods
        .push(plan_pod(&planning, PodPhase::Succeeded, Some(0), None));
    v.push(
        Case::new(
            "planning: compatible, savepoint mode",
            img2(),
            planning.clone(),
            o.clone(),
        )
        .stage("InPlace/Savepointing")
        .acts(Box::leak(vec![del_plan].into_boxed_slice()))
        .conds(&["Upgrading", "Ready"])
        .event("PlanCompatible"),
    );
    let lastst = with_upgrade(
        running(),
        "InPlace/Planning",
        &mode(img2(), UpgradeMode::LastState),
        None,
    );
    let mut o2 = world(110);
    o2.pods
        .push(plan_pod(&lastst, PodPhase::Succeeded, Some(0), None));
    v.push(
        Case::new(
            "planning: compatible, last-state, job runs: savepoint",
            mode(img2(), UpgradeMode::LastState),
            lastst.clone(),
            o2.clone(),
        )
        .stage("InPlace/Savepointing")
        .acts(Box::leak(
            vec![Box::leak(
                format!(
                    "Remove:{}",
                    plan_pod_name(JOB, &hash(&mode(img2(), UpgradeMode::LastState)), &ts(100))
                )
                .into_boxed_str(),
            ) as &str]
            .into_boxed_slice(),
        ))
        .conds(&["Upgrading", "Ready"]),
    );
    let sh_plan = with_upgrade(running(), "Shadow/Planning", &shadow(img2()), None);
    let mut o3 = world(110);
    o3.pods
        .push(plan_pod(&sh_plan, PodPhase::Succeeded, Some(0), None));
    v.push(
        Case::new("planning: compatible, shadow", shadow(img2()), sh_plan, o3)
            .stage("Shadow/StartingStandby")
            .acts(Box::leak(
                vec![Box::leak(
                    format!(
                        "Remove:{}",
                        plan_pod_name(JOB, &hash(&shadow(img2())), &ts(100))
                    )
                    .into_boxed_str(),
                ) as &str]
                .into_boxed_slice(),
            ))
            .conds(&["Upgrading", "Ready"]),
    );
    let mut o = world(110);
    o.pods.push(plan_pod(
        &planning,
        PodPhase::Failed,
        Some(3),
        Some(r#"{"compatible":false,"operators":[{"uid":"agg","status":"incompatible","reason":"state of uid agg has no operator in the new pipeline"},{"uid":"gen","status":"restored","reason":""}]}"#),
    ));
    v.push(
        Case::new(
            "planning: incompatible, per-uid reason",
            img2(),
            planning.clone(),
            o,
        )
        .stage("InPlace/Blocked")
        .acts(Box::leak(vec![del_plan].into_boxed_slice()))
        .conds(&["UpgradeBlocked", "Ready"])
        .event("UpgradeBlocked")
        .outcome(Outcome::Blocked),
    );
    let mut o = world(110);
    o.pods
        .push(plan_pod(&planning, PodPhase::Failed, Some(3), None));
    v.push(
        Case::new(
            "planning: incompatible, report unreadable",
            img2(),
            planning.clone(),
            o,
        )
        .stage("InPlace/Blocked")
        .acts(Box::leak(vec![del_plan].into_boxed_slice()))
        .conds(&["UpgradeBlocked", "Ready"])
        .outcome(Outcome::Blocked),
    );
    let mut o = world(110);
    o.pods.push(plan_pod(
        &planning,
        PodPhase::Failed,
        Some(2),
        Some("error: invalid manifest"),
    ));
    v.push(
        Case::new(
            "planning: the new spec is wrong",
            img2(),
            planning.clone(),
            o,
        )
        .stage("InPlace/Blocked")
        .acts(Box::leak(vec![del_plan].into_boxed_slice()))
        .conds(&["UpgradeBlocked", "Ready"])
        .outcome(Outcome::Blocked),
    );
    // found by the soak: the checkpoint in status was removed by retention (1 s checkpoints
    // keep 3 s of them) before the plan pod read it, and the upgrade was blocked for good
    let gone = "error: s3://b/ck/clicks/chk-43: NoSuchKey";
    let mut o = world(110);
    o.pods
        .push(plan_pod(&planning, PodPhase::Failed, Some(1), Some(gone)));
    v.push(
        Case::new(
            "planning: plan pod fails on the store, planned again",
            img2(),
            planning.clone(),
            o,
        )
        .stage("InPlace/Planning")
        .acts(Box::leak(vec![del_plan].into_boxed_slice()))
        .conds(&["Upgrading", "Ready"])
        .event("PlanRetried"),
    );
    let mut o = world(110);
    let mut leaving = plan_pod(&planning, PodPhase::Failed, Some(1), Some(gone));
    leaving.terminating = true;
    o.pods.push(leaving);
    v.push(
        Case::new(
            "planning: failed plan pod leaving, wait",
            img2(),
            planning.clone(),
            o,
        )
        .stage("InPlace/Planning")
        .conds(&["Upgrading", "Ready"]),
    );
    let mut o = world(100_000);
    o.pods
        .push(plan_pod(&planning, PodPhase::Failed, Some(1), Some(gone)));
    v.push(
        Case::new(
            "planning: plan pod keeps failing past readinessTimeout, blocked",
            img2(),
            planning.clone(),
            o,
        )
        .stage("InPlace/Blocked")
        .acts(Box::leak(vec![del_plan].into_boxed_slice()))
        .conds(&["UpgradeBlocked", "Ready"])
        .outcome(Outcome::Blocked),
    );
    let mut o = world(110);
    o.pods
        .push(plan_pod(&planning, PodPhase::Running, None, None));
    v.push(
        Case::new(
            "planning: spec changed again, new plan",
            with_image("runtime:3"),
            planning.clone(),
            o.clone(),
        )
        .stage("InPlace/Planning")
        .acts(Box::leak(
            vec![del_plan, "CheckCompatibility:s3://b/ck/clicks/6"].into_boxed_slice(),
        ))
        .conds(&["Upgrading", "Ready"]),
    );
    v.push(
        Case::new(
            "planning: spec reverted, plan dropped",
            spec.clone(),
            planning.clone(),
            o,
        )
        .idle()
        .acts(Box::leak(vec![del_plan].into_boxed_slice()))
        .conds(&["Ready"]),
    );

    // ---- Blocked ----
    let blocked = with_upgrade(running(), "InPlace/Blocked", &img2(), None);
    v.push(
        Case::new(
            "blocked: same spec stays blocked",
            img2(),
            blocked.clone(),
            world(200),
        )
        .stage("InPlace/Blocked")
        .conds(&["UpgradeBlocked", "Ready"]),
    );
    v.push(
        Case::new(
            "blocked: a later spec is pre-checked",
            with_image("runtime:3"),
            blocked.clone(),
            world(200),
        )
        .stage("InPlace/Planning")
        .acts(&["CheckCompatibility:s3://b/ck/clicks/6"])
        .conds(&["Upgrading", "Ready"]),
    );
    v.push(
        Case::new(
            "blocked: spec reverted clears the block",
            spec.clone(),
            blocked,
            world(200),
        )
        .idle()
        .conds(&["Ready"]),
    );
}
