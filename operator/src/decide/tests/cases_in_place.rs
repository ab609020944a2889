//! Decision table cases: in-place upgrades: Savepointing, Stopped, Restoring.

use super::*;

pub(super) fn push(v: &mut Vec<Case>) {
    // ---- Savepointing (in place) ----
    let sp = with_upgrade(running(), "InPlace/Savepointing", &img2(), None);
    v.push(
        Case::new(
            "savepointing: stop-with-savepoint requested",
            img2(),
            sp.clone(),
            world(110),
        )
        .stage("InPlace/Savepointing")
        .acts(&["TakeSavepoint:stop"])
        .conds(&["Upgrading", "Ready"]),
    );
    let mut o = world(110);
    o.savepoint = Some(SavepointState::Pending);
    v.push(
        Case::new(
            "savepointing: in flight",
            img2(),
            pending(sp.clone(), "upgrade", true),
            o,
        )
        .stage("InPlace/Savepointing")
        .conds(&["Upgrading", "Ready"]),
    );
    let mut o = world(110);
    o.savepoint = Some(SavepointState::Completed {
        path: "s3://b/sp/clicks/sp-1".into(),
    });
    v.push(
        Case::new(
            "savepointing: completed, recorded before any deletion",
            img2(),
            pending(sp.clone(), "upgrade", true),
            o,
        )
        .stage("InPlace/Stopped")
        .conds(&["Upgrading", "Ready"])
        .event("SavepointCompleted"),
    );
    let mut o = world(110);
    o.savepoint = Some(SavepointState::Failed {
        error: "timeout writing".into(),
    });
    v.push(
        Case::new(
            "savepointing: failed, old job untouched",
            img2(),
            pending(sp.clone(), "upgrade", true),
            o,
        )
        .stage("InPlace/Aborted")
        .conds(&["Ready"])
        .outcome(Outcome::Aborted),
    );
    let mut o = world(110);
    o.pods[0].phase = PodPhase::Succeeded;
    o.pods[0].exit_code = Some(0);
    o.pods[0].message = Some(r#"{"savepoint":"s3://b/sp/clicks/sp-1"}"#.into());
    o.runtime.clear();
    v.push(
        Case::new(
            "savepointing: pod exited, path from termination message",
            img2(),
            pending(sp.clone(), "upgrade", true),
            o,
        )
        .stage("InPlace/Stopped")
        .conds(&["Upgrading"]),
    );
    let mut o = world(110);
    set_job(&mut o, OLD, js(RunState::Restarting, None));
    v.push(
        Case::new("savepointing: job not running, wait", img2(), sp.clone(), o)
            .stage("InPlace/Savepointing")
            .conds(&["Upgrading", "Degraded"]),
    );
    let mut o = world(100_000);
    set_job(&mut o, OLD, js(RunState::Restarting, None));
    v.push(
        Case::new(
            "savepointing: job not running too long, abort",
            img2(),
            sp.clone(),
            o,
        )
        .stage("InPlace/Aborted")
        .conds(&["Degraded"])
        .outcome(Outcome::Aborted),
    );

    let mut unsent = pending(sp.clone(), "upgrade", true);
    unsent.pending_savepoint.as_mut().unwrap().request_id = String::new();
    v.push(
        Case::new(
            "savepointing: request recorded but never sent is re-sent",
            img2(),
            unsent.clone(),
            world(200),
        )
        .stage("InPlace/Savepointing")
        .acts(&["TakeSavepoint:stop"])
        .conds(&["Upgrading", "Ready"]),
    );
    v.push(
        Case::new(
            "savepointing: unsent request within grace waits",
            img2(),
            unsent,
            world(110),
        )
        .stage("InPlace/Savepointing")
        .conds(&["Upgrading", "Ready"]),
    );

    // The old version is kept running until it is stopped: a run that cannot run its job by
    // itself is replaced while the upgrade waits for it (found by the soak: the upgrade waited
    // for the savepoint timeout with the job in standby and the output stalled).
    let mut o = world(110);
    set_job(&mut o, OLD, js(RunState::Standby, None));
    o.pods[0].restarts = 1;
    v.push(
        Case::new(
            "savepointing: the old run restarted into standby: replaced, the upgrade waits",
            img2(),
            sp.clone(),
            o,
        )
        .stage("InPlace/Savepointing")
        .acts(&["Remove:clicks-old"])
        .conds(&["Upgrading", "Degraded"])
        .event("StandbyRestarted"),
    );
    let mut o = world(110);
    drop_pod(&mut o, OLD);
    v.push(
        Case::new(
            "savepointing: the old run's pod is missing: recreated, the upgrade waits",
            img2(),
            sp.clone(),
            o,
        )
        .stage("InPlace/Savepointing")
        .acts(&["Deploy:clicks-old"])
        .conds(&["Upgrading", "Degraded"])
        .event("PodRecreated"),
    );

    let aborted = with_upgrade(running(), "InPlace/Aborted", &img2(), None);
    v.push(
        Case::new(
            "aborted: same spec waits",
            img2(),
            aborted.clone(),
            world(200),
        )
        .stage("InPlace/Aborted")
        .conds(&["Ready"]),
    );
    v.push(
        Case::new(
            "aborted: retried once the job runs again",
            img2(),
            aborted,
            world(5000),
        )
        .stage("InPlace/Planning")
        .acts(&["CheckCompatibility:s3://b/ck/clicks/6"])
        .conds(&["Upgrading", "Ready"]),
    );

    let mut o = world(100_000);
    o.pods[0].phase = PodPhase::Succeeded;
    o.pods[0].exit_code = Some(0);
    o.runtime.clear();
    v.push(
        Case::new(
            "savepointing: job exited, path unknown: never abort, ask",
            img2(),
            pending(sp.clone(), "upgrade", true),
            o.clone(),
        )
        .stage("InPlace/Savepointing")
        .conds(&["Upgrading", "Degraded"]),
    );
    o.recovered_savepoint = Some("s3://b/sp/clicks/savepoint-9".into());
    let mut used = pending(sp.clone(), "upgrade", true);
    used.savepoint_history.push(SavepointInfo {
        path: "s3://b/sp/clicks/savepoint-9".into(),
        ..Default::default()
    });
    v.push(
        Case::new(
            "savepointing: a stale annotation is not used twice",
            img2(),
            used,
            o.clone(),
        )
        .stage("InPlace/Savepointing")
        .conds(&["Upgrading", "Degraded"]),
    );
    v.push(
        Case::new(
            "savepointing: path handed over by annotation",
            img2(),
            pending(sp.clone(), "upgrade", true),
            o,
        )
        .stage("InPlace/Stopped")
        .conds(&["Upgrading"])
        .event("SavepointCompleted"),
    );

    // last-state: from the latest checkpoint when no savepoint can be taken.
    let ls = mode(img2(), UpgradeMode::LastState);
    let mut o = world(110);
    set_job(&mut o, OLD, js(RunState::Restarting, None));
    let lsp = with_upgrade(running(), "InPlace/Planning", &ls, None);
    o.pods
        .push(plan_pod(&lsp, PodPhase::Succeeded, Some(0), None));
    let del_lsplan: &'static str =
        Box::leak(format!("Remove:{}", plan_pod_name(JOB, &hash(&ls), &ts(100))).into_boxed_str());
    v.push(
        Case::new(
            "planning: compatible, last-state, job failing: checkpoint",
            ls.clone(),
            lsp,
            o,
        )
        .stage("InPlace/Stopped")
        .acts(Box::leak(vec![del_lsplan].into_boxed_slice()))
        .conds(&["Upgrading", "Degraded"]),
    );
    let ls_sp = with_upgrade(running(), "InPlace/Savepointing", &ls, None);
    let mut o = world(110);
    o.savepoint = Some(SavepointState::Failed { error: "x".into() });
    v.push(
        Case::new(
            "savepointing: last-state savepoint fails, checkpoint instead",
            ls.clone(),
            pending(ls_sp.clone(), "upgrade", true),
            o,
        )
        .stage("InPlace/Stopped")
        .conds(&["Upgrading", "Ready"])
        .event("UpgradeFromCheckpoint"),
    );
    let mut o = world(110);
    set_job(&mut o, OLD, js(RunState::Failed, None));
    v.push(
        Case::new(
            "savepointing: last-state, job stopped running, checkpoint at once",
            ls.clone(),
            ls_sp,
            o,
        )
        .stage("InPlace/Stopped")
        .conds(&["Upgrading", "Degraded"]),
    );

    // ---- Stopped (in place) ----
    let stopped = with_upgrade(
        running(),
        "InPlace/Stopped",
        &img2(),
        Some("s3://b/sp/clicks/sp-1"),
    );
    v.push(
        Case::new(
            "stopped: old pod deleted",
            img2(),
            stopped.clone(),
            world(120),
        )
        .stage("InPlace/Stopped")
        .acts(&["Remove:clicks-old"])
        .conds(&["Upgrading", "Ready"]),
    );
    let mut o = world(120);
    o.pods[0].terminating = true;
    v.push(
        Case::new(
            "stopped: old pod terminating, wait",
            img2(),
            stopped.clone(),
            o,
        )
        .stage("InPlace/Stopped")
        .conds(&["Upgrading", "Ready"]),
    );
    let mut o = world(120);
    drop_pod(&mut o, OLD);
    v.push(
        Case::new(
            "stopped: old gone, new starts from the savepoint",
            img2(),
            stopped.clone(),
            o,
        )
        .stage("InPlace/Restoring")
        .acts(&["Deploy:*:from=s3://b/sp/clicks/sp-1"])
        .conds(&["Upgrading"]),
    );

    // ---- Restoring (in place) ----
    let restoring = switched(&img2(), "InPlace/Restoring");
    v.push(
        Case::new(
            "restoring: first checkpoint promotes",
            img2(),
            restoring.clone(),
            new_world(220, RunState::Running, Some("s3://b/ck/clicks/7")),
        )
        .idle()
        .phase(Phase::Running)
        .conds(&["Ready"])
        .event("Promoted")
        .outcome(Outcome::Promoted),
    );
    v.push(
        Case::new(
            "restoring: running without checkpoint, wait",
            img2(),
            restoring.clone(),
            new_world(220, RunState::Running, None),
        )
        .stage("InPlace/Restoring")
        .phase(Phase::Upgrading)
        .conds(&["Upgrading"]),
    );
    v.push(
        Case::new(
            "restoring: still restoring",
            img2(),
            restoring.clone(),
            new_world(220, RunState::Restoring, Some("s3://b/sp/clicks/sp-1")),
        )
        .stage("InPlace/Restoring")
        .conds(&["Upgrading"]),
    );
    v.push(
        Case::new(
            "restoring: readiness timeout rolls back",
            img2(),
            restoring.clone(),
            new_world(100_000, RunState::Running, None),
        )
        .stage("Rollback/Stopped")
        .phase(Phase::RollingBack)
        .conds(&["Upgrading"])
        .event("RollingBack"),
    );
    // the operator (API server answering late) created the pod long after the step began: the
    // new version's time counts from the pod's creation
    let mut o = new_world(100_000, RunState::Running, None);
    o.pods[0].created = Some(t(100_000 - 20));
    v.push(
        Case::new(
            "restoring: a pod created late still has its readiness timeout",
            img2(),
            restoring.clone(),
            o,
        )
        .stage("InPlace/Restoring")
        .conds(&["Upgrading"]),
    );
    let mut o = new_world(100_000, RunState::Running, None);
    o.pods[0].created = Some(t(100_000 - 3600));
    v.push(
        Case::new(
            "restoring: a pod created late and still without a checkpoint rolls back",
            img2(),
            restoring.clone(),
            o,
        )
        .stage("Rollback/Stopped")
        .phase(Phase::RollingBack)
        .conds(&["Upgrading"])
        .event("RollingBack"),
    );
    let mut o = new_world(220, RunState::Restarting, None);
    o.pods[0].restarts = 3;
    o.pods[0].waiting_reason = Some("CrashLoopBackOff".into());
    v.push(
        Case::new(
            "restoring: crash loop rolls back",
            img2(),
            restoring.clone(),
            o,
        )
        .stage("Rollback/Stopped")
        .conds(&["Upgrading", "Degraded"]),
    );
    v.push(
        Case::new(
            "restoring: job failed rolls back",
            img2(),
            restoring.clone(),
            new_world(220, RunState::Failed, None),
        )
        .stage("Rollback/Stopped")
        .conds(&["Upgrading", "Degraded"]),
    );
    let mut o = new_world(220, RunState::Running, None);
    o.pods[0].phase = PodPhase::Failed;
    v.push(
        Case::new(
            "restoring: pod failed rolls back",
            img2(),
            restoring.clone(),
            o,
        )
        .stage("Rollback/Stopped")
        .conds(&["Upgrading"]),
    );
    let mut o = new_world(220, RunState::Running, None);
    drop_pod(&mut o, NEW);
    v.push(
        Case::new(
            "restoring: new pod missing, recreated",
            img2(),
            restoring.clone(),
            o,
        )
        .stage("InPlace/Restoring")
        .acts(&["Deploy:clicks-new:from=s3://b/sp/clicks/sp-1"])
        .conds(&["Upgrading"]),
    );
    let mut no_stable = restoring.clone();
    no_stable.last_stable_spec = None;
    no_stable.last_stable_spec_hash = None;
    v.push(
        Case::new(
            "restoring: fails with nothing to roll back to",
            img2(),
            no_stable,
            new_world(220, RunState::Failed, None),
        )
        .stage("InPlace/Restoring")
        .phase(Phase::Failed)
        .conds(&["Upgrading", "Degraded"]),
    );
    v.push(
        Case::new(
            "restoring: bounded job finished",
            img2(),
            restoring.clone(),
            new_world(220, RunState::Finished, None),
        )
        .idle()
        .outcome(Outcome::Promoted),
    );
}
