//! The decision table run whole, and named scenarios checked step by step.

use super::*;

#[test]
fn decision_table() {
    // The table is big for a debug-build stack: run it on a thread with room.
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(decision_table_inner)
        .unwrap()
        .join()
        .unwrap();
}

fn decision_table_inner() {
    let cases = cases();
    assert!(cases.len() > 80, "{} cases", cases.len());
    let mut names = BTreeSet::new();
    let mut failed = Vec::new();
    for c in &cases {
        assert!(names.insert(c.name), "duplicate case name {}", c.name);
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.check())).is_err() {
            failed.push(c.name);
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} cases failed: {failed:#?}",
        failed.len(),
        cases.len()
    );
    eprintln!("{} decision table cases passed", cases.len());
}

// ---------------------------------------------------------------------------------------------
// Specific properties
// ---------------------------------------------------------------------------------------------

#[test]
fn savepoint_is_recorded_before_old_pods_are_deleted() {
    let sp = pending(
        with_upgrade(running(), "InPlace/Savepointing", &img2(), None),
        "upgrade",
        true,
    );
    let mut o = world(110);
    o.savepoint = Some(SavepointState::Completed {
        path: "s3://b/sp/clicks/sp-1".into(),
    });
    let d = run(&img2(), &sp, &o);
    let u = d.status.upgrade.as_ref().unwrap();
    assert_eq!(u.savepoint.as_deref(), Some("s3://b/sp/clicks/sp-1"));
    assert!(
        d.actions
            .iter()
            .all(|a| !matches!(a, Action::Remove { .. }))
    );
    assert_eq!(
        d.status.savepoint_history.last().unwrap().reason.as_deref(),
        Some("upgrade")
    );
    assert_eq!(d.savepoints_completed.len(), 1);
    // The next decision (status persisted) deletes the old pod.
    let d2 = run(&img2(), &d.status, &world(111));
    assert!(d2.actions.contains(&Action::Remove { name: OLD.into() }));
}

#[test]
fn blocked_condition_names_the_uid() {
    let planning = with_upgrade(running(), "InPlace/Planning", &img2(), None);
    let mut o = world(110);
    o.pods.push(plan_pod(
        &planning,
        PodPhase::Failed,
        Some(3),
        Some("log line\n{\"compatible\":false,\"operators\":[{\"uid\":\"agg\",\"status\":\"incompatible\",\"reason\":\"no operator\"}]}"),
    ));
    let d = run(&img2(), &planning, &o);
    let c = cond(&d, "UpgradeBlocked");
    assert!(
        c.message.contains("uid agg: incompatible (no operator)"),
        "{}",
        c.message
    );
    assert!(
        d.events
            .iter()
            .any(|e| e.warning && e.reason == "UpgradeBlocked")
    );
    // The old deployment is untouched.
    assert_eq!(d.status.deployment, planning.deployment);
}

#[test]
fn state_the_restore_drops_is_named_in_an_event_and_in_status() {
    let planning = with_upgrade(running(), "InPlace/Planning", &img2(), None);
    let mut o = world(110);
    o.pods.push(plan_pod(
        &planning,
        PodPhase::Succeeded,
        Some(0),
        Some(r#"{"compatible":true,"operators":[{"uid":"audit","status":"dropped","reason":"all of its state"},{"uid":"gen","status":"restored"}]}"#),
    ));
    let d = run(&img2(), &planning, &o);
    assert_eq!(stage_of(&d).as_deref(), Some("InPlace/Savepointing"));
    let dropped = vec!["uid audit: all of its state".to_string()];
    assert_eq!(d.status.upgrade.as_ref().unwrap().dropped_state, dropped);
    let e = d
        .events
        .iter()
        .find(|e| e.reason == "StateDropped")
        .expect("a StateDropped event");
    assert!(
        e.warning && e.message.contains("uid audit: all of its state"),
        "{}",
        e.message
    );
    // kept through the WAL to the deployment the new version becomes
    let mut stopped = d.status.clone();
    let u = stopped.upgrade.as_mut().unwrap();
    u.step = "InPlace/Stopped".parse().unwrap();
    u.savepoint = Some("s3://b/sp/clicks/sp-1".into());
    let mut gone = world(120);
    drop_pod(&mut gone, OLD);
    let d = run(&img2(), &stopped, &gone);
    assert_eq!(stage_of(&d).as_deref(), Some("InPlace/Restoring"));
    assert_eq!(d.status.deployment.as_ref().unwrap().dropped_state, dropped);
}

#[test]
fn rollback_uses_the_same_savepoint_and_last_stable_spec() {
    let restoring = switched(&img2(), "InPlace/Restoring");
    let d = run(
        &img2(),
        &restoring,
        &new_world(100_000, RunState::Running, None),
    );
    let u = d.status.upgrade.as_ref().unwrap();
    assert_eq!(u.savepoint.as_deref(), Some("s3://b/sp/clicks/sp-1"));
    assert_eq!(u.to, hash(&base_spec()));
    assert_eq!(u.from.as_deref(), Some(hash(&img2()).as_str()));
    let target: StreamJobSpec = serde_json::from_str(u.target_spec.as_deref().unwrap()).unwrap();
    assert_eq!(target.image, "runtime:1");
}

#[test]
fn promotion_sets_last_stable() {
    let restoring = switched(&img2(), "InPlace/Restoring");
    let d = run(
        &img2(),
        &restoring,
        &new_world(220, RunState::Running, Some("ck/7")),
    );
    assert_eq!(d.status.last_stable_spec_hash, Some(hash(&img2())));
    assert_eq!(
        d.status.deployment.as_ref().unwrap().workload.as_deref(),
        Some(NEW)
    );
}

#[test]
fn shadow_promotion_switches_deployment_to_the_standby() {
    let sh = shadow(img2());
    let st = with_upgrade(running(), "Shadow/Restoring", &sh, Some("sp-1"));
    let sb = standby_name_of(&st);
    let mut o = world(130);
    o.pods.push(pod(&sb, PodPhase::Running));
    set_job(&mut o, &sb, js(RunState::Running, Some("ck/9")));
    let d = run(&sh, &st, &o);
    let dep = d.status.deployment.unwrap();
    assert_eq!(dep.workload.as_deref(), Some(sb.as_str()));
    assert_eq!(dep.path.as_deref(), Some("sp-1"));
    assert_eq!(dep.spec_hash, hash(&sh));
}

#[test]
fn nonce_is_handled_once() {
    let mut nonce = base_spec();
    nonce.savepoints.as_mut().unwrap().trigger_nonce = 3;
    let d = run(&nonce, &running(), &world(100));
    assert_eq!(d.status.last_handled_nonce, Some(3));
    let p = d.status.pending_savepoint.as_ref().unwrap();
    assert_eq!((p.reason.as_str(), p.stop), ("trigger", false));
    // Completed: no second trigger.
    let mut st = d.status.clone();
    st.pending_savepoint.as_mut().unwrap().request_id = "1".into();
    let mut o = world(101);
    o.savepoint = Some(SavepointState::Completed {
        path: "sp-n".into(),
    });
    let d2 = run(&nonce, &st, &o);
    assert!(d2.status.pending_savepoint.is_none());
    let d3 = run(&nonce, &d2.status, &world(102));
    assert!(
        !d3.actions
            .iter()
            .any(|a| matches!(a, Action::TakeSavepoint { .. }))
    );
}

/// Every path the decision disposes of, in order.
fn disposed(d: &Decision) -> Vec<String> {
    d.actions
        .iter()
        .filter_map(|a| match a {
            Action::Dispose { paths } => Some(paths.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

#[test]
fn retention_by_count_and_age_keeps_protected_savepoints() {
    let mut spec = base_spec();
    spec.savepoints.as_mut().unwrap().history.max_count = 2;
    spec.savepoints.as_mut().unwrap().history.max_age = Some("1d".into());
    let mut st = running();
    st.deployment.as_mut().unwrap().path = Some("sp-0".into());
    st.deployment.as_mut().unwrap().started_from = StartedFrom::Savepoint;
    st.savepoint_history = (0..5)
        .map(|i| SavepointInfo {
            path: format!("sp-{i}"),
            time: Some(t(i * 100)),
            reason: Some("periodic".into()),
            spec_hash: None,
        })
        .collect();
    st.last_savepoint = st.savepoint_history.last().cloned();
    let d = run(&spec, &st, &world(500));
    let disposed = disposed(&d);
    // sp-0 is what the running job started from: never disposed.
    assert_eq!(disposed, vec!["sp-1", "sp-2"]);
    let kept: Vec<&str> = d
        .status
        .savepoint_history
        .iter()
        .map(|s| s.path.as_str())
        .collect();
    assert_eq!(kept, vec!["sp-0", "sp-3", "sp-4"]);
    // Two days later the age limit applies, but never to sp-0 nor to the latest savepoint.
    let d2 = run(&spec, &d.status, &world(2 * 86_400));
    let kept: Vec<&str> = d2
        .status
        .savepoint_history
        .iter()
        .map(|s| s.path.as_str())
        .collect();
    assert_eq!(kept, vec!["sp-0", "sp-4"]);
}

/// Without `spec.savepoints` the default history (10) bounds the status too.
#[test]
fn retention_without_a_savepoints_section_keeps_the_default_ten() {
    let mut spec = base_spec();
    spec.savepoints = None;
    let mut st = running();
    // the running job is of this spec (no upgrade begins)
    st.deployment.as_mut().unwrap().spec_hash = hash(&spec);
    st.last_stable_spec_hash = Some(hash(&spec));
    st.last_stable_spec = Some(serde_json::to_string(&spec).unwrap());
    st.savepoint_history = (0..12)
        .map(|i| SavepointInfo {
            path: format!("sp-{i}"),
            time: Some(t(i * 100)),
            reason: Some("upgrade".into()),
            spec_hash: None,
        })
        .collect();
    st.last_savepoint = st.savepoint_history.last().cloned();
    let d = run(&spec, &st, &world(2_000));
    assert_eq!(d.status.savepoint_history.len(), 10);
    assert!(d.actions.contains(&Action::Dispose {
        paths: vec!["sp-0".into(), "sp-1".into()]
    }));
}

/// The count alone does not bound the status: 200 savepoints with 2 KiB paths (the longest a
/// store path may be) under `maxCount: 1000` would take 420 KiB of it. The oldest go once the
/// history passes its byte budget, the newest stay.
#[test]
fn retention_keeps_the_history_within_its_share_of_the_object() {
    use crate::decide::housekeeping::HISTORY_BUDGET_BYTES;
    let mut spec = base_spec();
    spec.savepoints.as_mut().unwrap().history.max_count = 1000;
    let mut st = running();
    st.deployment.as_mut().unwrap().spec_hash = hash(&spec);
    st.last_stable_spec_hash = Some(hash(&spec));
    st.last_stable_spec = Some(serde_json::to_string(&spec).unwrap());
    let long = "s3://bucket/".to_string() + &"p".repeat(2036);
    st.savepoint_history = (0..200)
        .map(|i| SavepointInfo {
            path: format!("{long}/sp-{i:03}"),
            time: Some(t(i * 100)),
            reason: Some("periodic".into()),
            spec_hash: Some("0123456789abcdef".into()),
        })
        .collect();
    st.last_savepoint = st.savepoint_history.last().cloned();
    let d = run(&spec, &st, &world(30_000));
    let kept = &d.status.savepoint_history;
    let stored = serde_json::to_string(kept).unwrap().len();
    assert!(stored <= HISTORY_BUDGET_BYTES, "{stored} bytes kept");
    assert!(kept.len() > 100, "only {} kept", kept.len());
    assert_eq!(kept.last(), st.savepoint_history.last(), "the newest stays");
    let disposed = disposed(&d);
    // the oldest ones, every one of them disposed, none kept as well
    let oldest: Vec<String> = st.savepoint_history[..200 - kept.len()]
        .iter()
        .map(|s| s.path.clone())
        .collect();
    assert_eq!(disposed, oldest);
}

#[test]
fn suspended_savepoint_is_protected() {
    let mut spec = suspended(base_spec());
    spec.savepoints.as_mut().unwrap().history.max_count = 1;
    let mut st = with_upgrade(running(), "Suspend/Suspended", &base_spec(), Some("sp-s"));
    st.deployment = None;
    st.savepoint_history = vec![
        SavepointInfo {
            path: "sp-s".into(),
            time: Some(t(0)),
            reason: Some("suspend".into()),
            spec_hash: None,
        },
        SavepointInfo {
            path: "sp-x".into(),
            time: Some(t(10)),
            reason: Some("trigger".into()),
            spec_hash: None,
        },
    ];
    st.last_savepoint = st.savepoint_history.last().cloned();
    let d = run(&spec, &st, &Observed::new(t(20)));
    let kept: Vec<&str> = d
        .status
        .savepoint_history
        .iter()
        .map(|s| s.path.as_str())
        .collect();
    assert_eq!(kept, vec!["sp-s", "sp-x"]);
}

#[test]
fn garbage_is_collected() {
    let mut o = world(100);
    o.pods.push(pod("clicks-orphan", PodPhase::Running));
    o.pods.push(PodObs::new(
        "clicks-plan-old",
        PodRole::Plan,
        PodPhase::Succeeded,
    ));
    o.pods.push(PodObs::new(
        "clicks-dispose-1",
        PodRole::Dispose,
        PodPhase::Succeeded,
    ));
    o.pods.push(PodObs::new(
        "clicks-dispose-2",
        PodRole::Dispose,
        PodPhase::Running,
    ));
    o.config_hashes.insert("deadbeef".into());
    o.config_hashes.insert(hash(&base_spec()));
    let d = run(&base_spec(), &running(), &o);
    let t = tags(&d);
    assert!(t.contains(&"Remove:clicks-orphan".to_string()), "{t:?}");
    assert!(t.contains(&"Remove:clicks-plan-old".to_string()));
    assert!(t.contains(&"Remove:clicks-dispose-1".to_string()));
    assert!(!t.contains(&"Remove:clicks-dispose-2".to_string()));
    assert!(t.contains(&"RetireVersion:deadbeef".to_string()));
    assert!(
        !t.iter()
            .any(|x| x == &format!("RetireVersion:{}", hash(&base_spec())))
    );
}

#[test]
fn invalid_spec_is_a_condition_not_a_crash() {
    let mut invalid = base_spec();
    invalid.checkpoints.interval = "soon".into();
    let d = run(&invalid, &running(), &world(100));
    let c = cond(&d, "SpecValid");
    assert_eq!(c.status, "False");
    assert!(
        c.message.contains("spec.checkpoints.interval"),
        "{}",
        c.message
    );
    assert!(
        d.actions
            .iter()
            .all(|a| !matches!(a, Action::Deploy(_) | Action::Remove { .. }))
    );
    assert_eq!(d.requeue_after, SLOW);
}

#[test]
fn condition_transition_time_is_kept() {
    let d = run(&base_spec(), &running(), &world(100));
    let t1 = cond(&d, "Ready").last_transition_time.clone();
    let d2 = run(&base_spec(), &d.status, &world(500));
    assert_eq!(cond(&d2, "Ready").last_transition_time, t1);
}

#[test]
fn operator_restart_resumes_each_step() {
    // Replaying a decision on the status it produced (as a restarted operator would) never goes
    // backwards and never repeats a destructive action whose effect is visible.
    let stopped = with_upgrade(running(), "InPlace/Stopped", &img2(), Some("sp-1"));
    let mut o = world(120);
    drop_pod(&mut o, OLD);
    let d = run(&img2(), &stopped, &o);
    assert_eq!(stage_of(&d).as_deref(), Some("InPlace/Restoring"));
    let created = d
        .status
        .deployment
        .as_ref()
        .unwrap()
        .workload
        .clone()
        .unwrap();
    // Restarted before the pod appeared: it is recreated with the same name.
    let d2 = run(&img2(), &d.status, &Observed::new(t(121)));
    assert!(
        d2.actions
            .iter()
            .any(|a| matches!(a, Action::Deploy(p) if p.name == created))
    );
}

// ---------------------------------------------------------------------------------------------
// Every stage × every observation: the machine only makes declared moves and keeps the WAL rule.
// ---------------------------------------------------------------------------------------------
