//! Decision table cases: Idle: first deploy, steady running, savepoints, spec changes.

use super::*;

pub(super) fn push(v: &mut Vec<Case>) {
    let spec = base_spec();

    // ---- Idle: first deploy ----
    v.push(
        Case::new(
            "first deploy, empty state",
            spec.clone(),
            StreamJobStatus::default(),
            Observed::new(t(0)),
        )
        .idle()
        .phase(Phase::Deploying)
        .acts(&["Deploy:*"])
        .event("Deploying"),
    );
    let mut from_sp = spec.clone();
    from_sp.initial_savepoint = Some("s3://b/sp/initial".into());
    v.push(
        Case::new(
            "first deploy from initialSavepoint",
            from_sp,
            StreamJobStatus::default(),
            Observed::new(t(0)),
        )
        .idle()
        .phase(Phase::Deploying)
        .acts(&["Deploy:*:from=s3://b/sp/initial"]),
    );
    v.push(
        Case::new(
            "first deploy, suspended",
            suspended(spec.clone()),
            StreamJobStatus::default(),
            Observed::new(t(0)),
        )
        .idle()
        .phase(Phase::Suspended),
    );
    let mut invalid = spec.clone();
    invalid.checkpoints.interval = "soon".into();
    v.push(
        Case::new(
            "first deploy, invalid spec",
            invalid.clone(),
            StreamJobStatus::default(),
            Observed::new(t(0)),
        )
        .idle(),
    );

    // ---- Idle: steady running ----
    v.push(
        Case::new(
            "running, nothing to do",
            spec.clone(),
            running(),
            world(100),
        )
        .idle()
        .phase(Phase::Running)
        .conds(&["Ready"]),
    );
    let mut deploying = running();
    deploying.phase = Some(Phase::Deploying);
    deploying.last_stable_spec = None;
    deploying.last_stable_spec_hash = None;
    let mut o = world(10);
    set_job(&mut o, OLD, js(RunState::Running, None));
    v.push(
        Case::new(
            "deploying, job runs, no checkpoint yet",
            spec.clone(),
            deploying.clone(),
            o,
        )
        .idle()
        .phase(Phase::Running),
    );
    v.push(
        Case::new(
            "deploying, first checkpoint makes it stable",
            spec.clone(),
            deploying.clone(),
            world(10),
        )
        .idle()
        .phase(Phase::Running)
        .event("Stable"),
    );
    let mut o = world(100);
    drop_pod(&mut o, OLD);
    v.push(
        Case::new("running, pod missing: recreate", spec.clone(), running(), o)
            .idle()
            .acts(&["Deploy:clicks-old"])
            .conds(&["Degraded"])
            .event("PodRecreated"),
    );
    let mut from_sp = running();
    from_sp.deployment.as_mut().unwrap().started_from = StartedFrom::Savepoint;
    from_sp.deployment.as_mut().unwrap().path = Some("s3://b/sp/clicks/sp-0".into());
    let mut o = world(100);
    drop_pod(&mut o, OLD);
    v.push(
        Case::new(
            "running from a savepoint, checkpointed since, pod missing: resume",
            spec.clone(),
            from_sp.clone(),
            o.clone(),
        )
        .idle()
        .acts(&["Deploy:clicks-old"])
        .conds(&["Degraded"]),
    );
    from_sp.last_checkpoint = None;
    v.push(
        Case::new(
            "running from a savepoint, no checkpoint yet, pod missing: savepoint again",
            spec.clone(),
            from_sp,
            o,
        )
        .idle()
        .acts(&["Deploy:clicks-old:from=s3://b/sp/clicks/sp-0"])
        .conds(&["Degraded"]),
    );
    let mut o = world(100);
    o.pods[0].terminating = true;
    v.push(
        Case::new("running, pod terminating: wait", spec.clone(), running(), o)
            .idle()
            .conds(&["Degraded"]),
    );
    let mut o = world(100);
    o.pods[0].phase = PodPhase::Failed;
    v.push(
        Case::new("running, pod failed: replace", spec.clone(), running(), o)
            .idle()
            .acts(&["Remove:clicks-old"])
            .conds(&["Degraded"]),
    );
    // a warm-started pod (a rolled-back Shadow's old version) whose container restarted with
    // its pod's older --epoch: fenced for good, it would crash-loop; the soak found it
    let o = fenced_world(100, 17);
    v.push(
        Case::new(
            "running, container restarted under an older epoch (fenced): replace",
            spec.clone(),
            running(),
            o,
        )
        .idle()
        .acts(&["Remove:clicks-old"])
        .conds(&["Degraded"])
        .event("PodFenced"),
    );
    // killed from outside, the kubelet holding its restart back (up to 5 min on a real
    // kubelet): replace it, the new pod resumes at once; the soak's stalls on the real node
    let mut o = world(100);
    o.pods[0].killed_and_held_back = true;
    o.pods[0].waiting_reason = Some("CrashLoopBackOff".into());
    o.pods[0].restarts = 4;
    o.runtime.clear();
    v.push(
        Case::new(
            "running, killed and held back by the kubelet: replace",
            spec.clone(),
            running(),
            o,
        )
        .idle()
        .acts(&["Remove:clicks-old"])
        .conds(&["Degraded"])
        .event("PodKilled"),
    );
    // the same exit code long ago, the job running now: nothing to do
    let mut o = world(100);
    o.pods[0].last_exit_code = Some(exit::SUPERSEDED as i32);
    o.pods[0].restarts = 1;
    v.push(
        Case::new(
            "running, an old fenced exit but the job runs: keep it",
            spec.clone(),
            running(),
            o,
        )
        .idle()
        .phase(Phase::Running)
        .conds(&["Ready"]),
    );
    let mut o = world(100);
    let mut failed = js(RunState::Failed, Some("s3://b/ck/clicks/6"));
    failed.restarts = 10;
    failed.failure = Some("lost worker clicks-old-w0".into());
    set_job(&mut o, OLD, failed);
    v.push(
        Case::new(
            "running, job failed in a process that waits (started from standby): replace",
            spec.clone(),
            running(),
            o,
        )
        .idle()
        .acts(&["Remove:clicks-old"])
        .conds(&["Degraded"])
        .event("JobFailed"),
    );
    let mut o = world(100);
    set_job(&mut o, OLD, js(RunState::Standby, None));
    o.pods[0].restarts = 1;
    v.push(
        Case::new(
            "running, a promoted standby pod restarted into standby: replace",
            spec.clone(),
            running(),
            o,
        )
        .idle()
        .acts(&["Remove:clicks-old"])
        .conds(&["Degraded"])
        .event("StandbyRestarted"),
    );
    let mut o = world(100);
    o.pods[0].phase = PodPhase::Succeeded;
    o.runtime.clear();
    v.push(
        Case::new(
            "running, pod exited 0: finished",
            spec.clone(),
            running(),
            o,
        )
        .idle()
        .phase(Phase::Finished),
    );
    let mut o = world(100);
    set_job(&mut o, OLD, js(RunState::Finished, None));
    v.push(
        Case::new("running, job finished", spec.clone(), running(), o)
            .idle()
            .phase(Phase::Finished),
    );
    let mut o = world(100);
    o.runtime = vec![(
        OLD.into(),
        RuntimeObs::Unreachable("connection refused".into()),
    )];
    v.push(
        Case::new(
            "running, control API unreachable",
            spec.clone(),
            running(),
            o,
        )
        .idle()
        .phase(Phase::Running),
    );
    let mut o = world(100);
    let mut j = js(RunState::Restarting, None);
    j.restarts = 4;
    j.failure = Some("boom".into());
    set_job(&mut o, OLD, j);
    v.push(
        Case::new("running, job restarting", spec.clone(), running(), o)
            .idle()
            .conds(&["Degraded"]),
    );
    let mut o = world(100);
    o.pods[0].restarts = 5;
    o.pods[0].waiting_reason = Some("CrashLoopBackOff".into());
    v.push(
        Case::new("running, pod crash-looping", spec.clone(), running(), o)
            .idle()
            .conds(&["Degraded", "Ready"]),
    );

    // ---- Idle: savepoints ----
    let mut nonce = spec.clone();
    nonce.savepoints.as_mut().unwrap().trigger_nonce = 1;
    v.push(
        Case::new(
            "nonce bumped: savepoint",
            nonce.clone(),
            running(),
            world(100),
        )
        .idle()
        .acts(&["TakeSavepoint"])
        .conds(&["Ready"])
        .event("SavepointTriggered"),
    );
    let mut o = world(100);
    set_job(&mut o, OLD, js(RunState::Restarting, None));
    v.push(
        Case::new(
            "nonce bumped, job unhealthy: wait",
            nonce.clone(),
            running(),
            o,
        )
        .idle()
        .conds(&["Degraded"]),
    );
    let mut periodic = spec.clone();
    periodic.savepoints.as_mut().unwrap().periodic = Some("1h".into());
    v.push(
        Case::new("periodic due", periodic.clone(), running(), world(3700))
            .idle()
            .acts(&["TakeSavepoint"])
            .conds(&["Ready"]),
    );
    v.push(
        Case::new("periodic not due", periodic.clone(), running(), world(100))
            .idle()
            .conds(&["Ready"]),
    );
    let mut o = world(130);
    o.savepoint = Some(SavepointState::Completed {
        path: "s3://b/sp/clicks/sp-9".into(),
    });
    v.push(
        Case::new(
            "periodic savepoint completes",
            spec.clone(),
            pending(running(), "periodic", false),
            o,
        )
        .idle()
        .conds(&["Ready"])
        .event("SavepointCompleted"),
    );
    let mut o = world(130);
    o.savepoint = Some(SavepointState::Failed {
        error: "disk full".into(),
    });
    v.push(
        Case::new(
            "triggered savepoint fails",
            spec.clone(),
            pending(running(), "trigger", false),
            o,
        )
        .idle()
        .event("SavepointFailed"),
    );
    let mut o = world(100_000);
    o.savepoint = Some(SavepointState::Pending);
    v.push(
        Case::new(
            "triggered savepoint times out",
            spec.clone(),
            pending(running(), "trigger", false),
            o,
        )
        .idle()
        .event("SavepointFailed"),
    );
    let mut o = world(130);
    o.savepoint = Some(SavepointState::Pending);
    v.push(
        Case::new(
            "spec change waits for a savepoint in flight",
            img2(),
            pending(running(), "trigger", false),
            o,
        )
        .idle()
        .conds(&["Ready"]),
    );

    // ---- Idle: spec changes ----
    v.push(
        Case::new(
            "strategy change is policy only",
            shadow(spec.clone()),
            running(),
            world(100),
        )
        .idle()
        .conds(&["Ready"])
        .event("PolicyUpdated"),
    );
    v.push(
        Case::new("image change: pre-check", img2(), running(), world(100))
            .stage("InPlace/Planning")
            .phase(Phase::Upgrading)
            .acts(&["CheckCompatibility:s3://b/ck/clicks/6"])
            .conds(&["Upgrading"])
            .event("UpgradeStarted"),
    );
    let mut no_ck = running();
    no_ck.last_checkpoint = None;
    let mut o = world(100);
    set_job(&mut o, OLD, js(RunState::Running, None));
    v.push(
        Case::new(
            "image change, no state yet: straight to savepoint",
            img2(),
            no_ck,
            o,
        )
        .stage("InPlace/Savepointing")
        .conds(&["Upgrading"]),
    );
    v.push(
        Case::new(
            "image change, stateless",
            mode(img2(), UpgradeMode::Stateless),
            running(),
            world(100),
        )
        .stage("InPlace/Stopped")
        .conds(&["Upgrading"]),
    );
    v.push(
        Case::new(
            "image change, last-state",
            mode(img2(), UpgradeMode::LastState),
            running(),
            world(100),
        )
        .stage("InPlace/Planning")
        .acts(&["CheckCompatibility:s3://b/ck/clicks/6"])
        .conds(&["Upgrading"]),
    );
    v.push(
        Case::new(
            "image change, shadow",
            shadow(img2()),
            running(),
            world(100),
        )
        .stage("Shadow/Planning")
        .acts(&["CheckCompatibility:s3://b/ck/clicks/6"])
        .conds(&["Upgrading"]),
    );
    let mut rescale = spec.clone();
    rescale.parallelism = 4;
    v.push(
        Case::new(
            "parallelism change: rescale",
            rescale,
            running(),
            world(100),
        )
        .stage("InPlace/Planning")
        .acts(&["CheckCompatibility:s3://b/ck/clicks/6"])
        .conds(&["Upgrading"])
        .event("RescaleStarted"),
    );
    v.push(
        Case::new(
            "suspend requested",
            suspended(spec.clone()),
            running(),
            world(100),
        )
        .stage("Suspend/Savepointing")
        .conds(&["Upgrading"]),
    );
    let mut o = world(100);
    set_job(&mut o, OLD, js(RunState::Restarting, None));
    v.push(
        Case::new(
            "suspend requested, job unhealthy",
            suspended(spec.clone()),
            running(),
            o,
        )
        .stage("Suspend/Stopped")
        .conds(&["Upgrading", "Degraded"]),
    );
    v.push(
        Case::new(
            "invalid spec while running: untouched",
            invalid.clone(),
            running(),
            world(100),
        )
        .idle()
        .phase(Phase::Running),
    );
    // --pod-template-policy=restricted refuses a spec the way validation does: a new image is
    // not rolled out, the job running keeps running, and nothing starts from a first deploy
    let refused = "the operator's pod template policy is restricted (podTemplatePolicy): spec.podTemplate.spec.serviceAccountName: runs the pods as another service account";
    let mut o = world(100);
    o.refused_by_settings = Some(refused.into());
    let d = Case::new(
        "a spec the operator's settings refuse while running: untouched",
        img2(),
        running(),
        o,
    )
    .idle()
    .phase(Phase::Running)
    .check();
    let valid = d
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "SpecValid")
        .expect("SpecValid");
    assert_eq!(
        (valid.status.as_str(), valid.message.as_str()),
        ("False", refused)
    );
    let mut o = Observed::new(t(0));
    o.refused_by_settings = Some(refused.into());
    v.push(
        Case::new(
            "first deploy of a spec the operator's settings refuse",
            spec.clone(),
            StreamJobStatus::default(),
            o,
        )
        .idle(),
    );
}
