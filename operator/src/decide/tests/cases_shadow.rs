//! Decision table cases: Rollback and Shadow.

use super::*;

pub(super) fn push(v: &mut Vec<Case>) {
    // ---- Rollback ----
    let rb_stopped = rollback_status("Rollback/Stopped");
    v.push(
        Case::new(
            "rollback: failed new pod deleted",
            img2(),
            rb_stopped.clone(),
            new_world(230, RunState::Failed, None),
        )
        .stage("Rollback/Stopped")
        .phase(Phase::RollingBack)
        .acts(&["Cancel:clicks-new", "Remove:clicks-new"])
        .conds(&["Upgrading", "Degraded"]),
    );
    let mut o = Observed::new(t(230));
    o.generation = Some(2);
    v.push(
        Case::new(
            "rollback: last stable spec restarts from the same savepoint",
            img2(),
            rb_stopped,
            o,
        )
        .stage("Rollback/Restoring")
        .acts(&["Deploy:*:from=s3://b/sp/clicks/sp-1"])
        .conds(&["Upgrading"]),
    );
    let rb_restoring = rollback_status("Rollback/Restoring");
    v.push(
        Case::new(
            "rollback: first checkpoint ends it",
            img2(),
            rb_restoring.clone(),
            new_world(240, RunState::Running, Some("s3://b/ck/clicks/8")),
        )
        .stage("Rollback/RolledBack")
        .phase(Phase::Running)
        .conds(&["RolledBack", "Ready"])
        .event("RolledBack")
        .outcome(Outcome::RolledBack),
    );
    v.push(
        Case::new(
            "rollback: fails too, Failed",
            img2(),
            rb_restoring.clone(),
            new_world(100_000, RunState::Running, None),
        )
        .stage("Rollback/Restoring")
        .phase(Phase::Failed)
        .conds(&["Upgrading", "Degraded"]),
    );
    let mut rolled = rollback_status("Rollback/RolledBack");
    {
        let u = rolled.upgrade.as_mut().unwrap();
        u.to = hash(&img2());
        u.from = Some(hash(&base_spec()));
        u.target_spec = None;
        let d = rolled.deployment.as_mut().unwrap();
        d.spec_hash = hash(&base_spec());
        d.image = "runtime:1".into();
    }
    v.push(
        Case::new(
            "rolled back: failing spec is not retried",
            img2(),
            rolled.clone(),
            new_world(300, RunState::Running, Some("s3://b/ck/clicks/9")),
        )
        .stage("Rollback/RolledBack")
        .conds(&["RolledBack", "Ready"]),
    );
    v.push(
        Case::new(
            "rolled back: a new spec upgrades again",
            with_image("runtime:3"),
            rolled,
            new_world(300, RunState::Running, Some("s3://b/ck/clicks/9")),
        )
        .stage("InPlace/Planning")
        .conds(&["Upgrading", "Ready"])
        .acts(&["CheckCompatibility:s3://b/ck/clicks/9"]),
    );

    // ---- Shadow ----
    let sh = shadow(img2());
    let starting = with_upgrade(running(), "Shadow/StartingStandby", &sh, None);
    let sb = standby_name_of(&starting);
    v.push(
        Case::new(
            "shadow: standby pod created beside the old",
            sh.clone(),
            starting.clone(),
            world(110),
        )
        .stage("Shadow/StartingStandby")
        .acts(&["Deploy:*:standby"])
        .conds(&["Upgrading", "Ready"]),
    );
    let mut o = world(110);
    o.pods.push(pod(&sb, PodPhase::Running));
    set_job(&mut o, &sb, js(RunState::Standby, None));
    v.push(
        Case::new(
            "shadow: standby ready, stop the old",
            sh.clone(),
            starting.clone(),
            o,
        )
        .stage("Shadow/Savepointing")
        .conds(&["Upgrading", "Ready"])
        .event("StandbyReady"),
    );
    let mut o = world(110);
    let mut p = pod(&sb, PodPhase::Running);
    p.restarts = 4;
    o.pods.push(p);
    let del_sb: &'static str = Box::leak(format!("Remove:{sb}").into_boxed_str());
    let cancel_sb: &'static str = Box::leak(format!("Cancel:{sb}").into_boxed_str());
    v.push(
        Case::new(
            "shadow: standby crash-loops, abort",
            sh.clone(),
            starting.clone(),
            o,
        )
        .stage("Shadow/Aborted")
        .acts(Box::leak(vec![cancel_sb, del_sb].into_boxed_slice()))
        .conds(&["Ready"])
        .outcome(Outcome::Aborted),
    );
    let mut o = world(100_000);
    let mut p = pod(&sb, PodPhase::Pending);
    p.ready = false;
    o.pods.push(p);
    v.push(
        Case::new(
            "shadow: standby never ready, abort",
            sh.clone(),
            starting.clone(),
            o,
        )
        .stage("Shadow/Aborted")
        .acts(Box::leak(vec![cancel_sb, del_sb].into_boxed_slice()))
        .outcome(Outcome::Aborted)
        .conds(&["Ready"]),
    );
    let sh_sp = with_upgrade(running(), "Shadow/Savepointing", &sh, None);
    let mut o = world(120);
    o.pods.push(pod(&sb, PodPhase::Running));
    set_job(&mut o, &sb, js(RunState::Standby, None));
    v.push(
        Case::new(
            "shadow: stop old with savepoint, keep its pod",
            sh.clone(),
            sh_sp.clone(),
            o.clone(),
        )
        .stage("Shadow/Savepointing")
        .acts(&["TakeSavepoint:stop:standby"])
        .conds(&["Upgrading", "Ready"]),
    );
    let mut o2 = o.clone();
    o2.savepoint = Some(SavepointState::Completed {
        path: "s3://b/sp/clicks/sp-1".into(),
    });
    v.push(
        Case::new(
            "shadow: savepoint recorded",
            sh.clone(),
            pending(sh_sp.clone(), "upgrade", true),
            o2,
        )
        .stage("Shadow/Stopped")
        .conds(&["Upgrading", "Ready"]),
    );
    let mut o2 = o.clone();
    o2.savepoint = Some(SavepointState::Failed { error: "x".into() });
    v.push(
        Case::new(
            "shadow: savepoint failed, standby removed",
            sh.clone(),
            pending(sh_sp.clone(), "upgrade", true),
            o2,
        )
        .stage("Shadow/Aborted")
        .acts(Box::leak(vec![cancel_sb, del_sb].into_boxed_slice()))
        .conds(&["Ready"])
        .outcome(Outcome::Aborted),
    );
    let sh_stopped = with_upgrade(
        running(),
        "Shadow/Stopped",
        &sh,
        Some("s3://b/sp/clicks/sp-1"),
    );
    let mut o_st = world(130);
    o_st.pods.push(pod(&sb, PodPhase::Running));
    set_job(&mut o_st, &sb, js(RunState::Standby, None));
    set_job(&mut o_st, OLD, js(RunState::Standby, None));
    v.push(
        Case::new(
            "shadow: standby starts from the savepoint",
            sh.clone(),
            sh_stopped.clone(),
            o_st.clone(),
        )
        .stage("Shadow/Restoring")
        .acts(&["Start:s3://b/sp/clicks/sp-1"])
        .conds(&["Upgrading"]),
    );
    let mut o = o_st.clone();
    drop_pod(&mut o, &sb);
    v.push(
        Case::new(
            "shadow: standby gone, fresh pod restores",
            sh.clone(),
            sh_stopped.clone(),
            o,
        )
        .stage("Shadow/Restoring")
        .acts(&["Deploy:*:from=s3://b/sp/clicks/sp-1"])
        .conds(&["Upgrading"]),
    );
    let sh_rest = with_upgrade(
        running(),
        "Shadow/Restoring",
        &sh,
        Some("s3://b/sp/clicks/sp-1"),
    );
    let mut o = o_st.clone();
    set_job(
        &mut o,
        &sb,
        js(RunState::Running, Some("s3://b/ck/clicks/7")),
    );
    v.push(
        Case::new(
            "shadow: promoted at first checkpoint, old deleted",
            sh.clone(),
            sh_rest.clone(),
            o,
        )
        .idle()
        .phase(Phase::Running)
        .acts(&["Cancel:clicks-old", "Remove:clicks-old"])
        .outcome(Outcome::Promoted)
        .conds(&["Ready"]),
    );
    let mut o = o_st.clone();
    set_job(&mut o, &sb, js(RunState::Failed, None));
    v.push(
        Case::new(
            "shadow: new fails, warm old restores at once",
            sh.clone(),
            sh_rest.clone(),
            o,
        )
        .stage("Rollback/Restoring")
        .phase(Phase::RollingBack)
        .acts(Box::leak(
            vec![cancel_sb, del_sb, "Start:s3://b/sp/clicks/sp-1"].into_boxed_slice(),
        ))
        .conds(&["Upgrading"]),
    );
    let mut o = o_st.clone();
    set_job(&mut o, &sb, js(RunState::Failed, None));
    o.pods[0].phase = PodPhase::Succeeded;
    o.runtime.retain(|(n, _)| n != OLD);
    v.push(
        Case::new(
            "shadow: new fails, old exited, recreate old",
            sh.clone(),
            sh_rest.clone(),
            o,
        )
        .stage("Rollback/Stopped")
        .acts(Box::leak(vec![cancel_sb, del_sb].into_boxed_slice()))
        .conds(&["Upgrading"]),
    );
    let mut sh_rb = with_upgrade(
        running(),
        "Rollback/Restoring",
        &base_spec(),
        Some("s3://b/sp/clicks/sp-1"),
    );
    sh_rb.upgrade.as_mut().unwrap().from = Some(hash(&sh));
    let mut o = world(150);
    set_job(&mut o, OLD, js(RunState::Standby, None));
    v.push(
        Case::new(
            "shadow rollback: old still standby, start it",
            sh.clone(),
            sh_rb.clone(),
            o,
        )
        .stage("Rollback/Restoring")
        .acts(&["Start:s3://b/sp/clicks/sp-1"])
        .conds(&["Upgrading"]),
    );
    // the soak's wedge (seed 20261204): the old pod, started warm with a newer epoch, had its
    // container restarted under the older epoch of its arguments; fenced by its own run it
    // crash-looped, and the rollback failed for good
    let o = fenced_world(150, 72);
    v.push(
        Case::new(
            "shadow rollback: old pod fenced by its own warm start, replace it",
            sh.clone(),
            sh_rb.clone(),
            o,
        )
        .stage("Rollback/Restoring")
        .acts(&["Remove:clicks-old"])
        .conds(&["Upgrading", "Degraded"])
        .event("PodFenced"),
    );
    let mut o = world(155);
    drop_pod(&mut o, OLD);
    v.push(
        Case::new(
            "shadow rollback: fenced old pod gone, recreated from the savepoint",
            sh.clone(),
            sh_rb.clone(),
            o,
        )
        .stage("Rollback/Restoring")
        .acts(&["Deploy:clicks-old:from=s3://b/sp/clicks/sp-1"])
        .conds(&["Upgrading"]),
    );
    // the new version's warm-started pod had its container restarted: back in standby, it
    // would wait until readinessTimeout; start it again
    let mut o = o_st.clone();
    set_job(&mut o, &sb, js(RunState::Standby, None));
    v.push(
        Case::new(
            "shadow: started standby restarted, start it again",
            sh.clone(),
            sh_rest.clone(),
            o,
        )
        .stage("Shadow/Restoring")
        .acts(&["Start:s3://b/sp/clicks/sp-1"])
        .conds(&["Upgrading"]),
    );
}
