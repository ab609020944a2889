//! Classification, plan results, names, reporting, the run-time guard, the docs diagram, workers.

use super::*;
use crate::objects::names::dispose_pod_name;

#[test]
fn classification() {
    let base = base_spec();
    assert_eq!(classify(Some(&base), &base), Change::None);
    assert_eq!(classify(Some(&base), &shadow(base.clone())), Change::Policy);
    let mut r = base.clone();
    r.parallelism = 8;
    assert_eq!(classify(Some(&base), &r), Change::Rescale);
    assert_eq!(classify(Some(&base), &img2()), Change::Image);
    let mut p = base.clone();
    p.pipeline[0].uid = "gen2".into();
    assert_eq!(classify(Some(&base), &p), Change::Pipeline);
    let mut c = base.clone();
    c.checkpoints.interval = "10s".into();
    assert_eq!(classify(Some(&base), &c), Change::Config);
    assert_eq!(classify(None, &c), Change::Config);
    // Operator-only fields do not change the hash at all.
    let mut n = base.clone();
    n.savepoints.as_mut().unwrap().trigger_nonce = 9;
    assert_eq!(hash(&n), hash(&base));
}

#[test]
fn plan_results() {
    let mut p = PodObs::new("p", PodRole::Plan, PodPhase::Running);
    assert_eq!(plan_result(&p), PlanResult::Running);
    p.phase = PodPhase::Succeeded;
    assert_eq!(plan_result(&p), PlanResult::Compatible(Vec::new()));
    p.phase = PodPhase::Failed;
    p.exit_code = Some(3);
    p.message = Some(r#"{"compatible":false,"operators":[{"uid":"a","status":"incompatible","reason":"gone"},{"uid":"b","status":"restored"}]}"#.into());
    assert_eq!(
        plan_result(&p),
        PlanResult::Incompatible("uid a: incompatible (gone)".into())
    );
    p.message = None;
    assert!(
        matches!(plan_result(&p), PlanResult::Incompatible(m) if m.contains("could not be read"))
    );
    p.exit_code = Some(137);
    assert!(matches!(plan_result(&p), PlanResult::Transient(m) if m.contains("exited 137")));
    p.exit_code = Some(2);
    assert!(matches!(plan_result(&p), PlanResult::Error(m) if m.contains("exited 2")));
    p.exit_code = None;
    assert!(matches!(plan_result(&p), PlanResult::Error(_)));
}

#[test]
fn names_are_valid_kubernetes_names() {
    let long = "a".repeat(200);
    for n in [
        pod_name(&long, "h", "n"),
        plan_pod_name(&long, "h", "n"),
        dispose_pod_name(&long, &["x".into()]),
    ] {
        assert!(n.len() <= 63, "{n}");
        assert!(
            n.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
    }
    assert!(job_label(&long).len() <= 63);
    assert_eq!(job_label("short"), "short");
    assert_ne!(pod_name(JOB, "h", "1"), pod_name(JOB, "h", "2"));
    assert_eq!(
        savepoint_from_message("x\n{\"savepoint\":\"s3://p\"}"),
        Some("s3://p".into())
    );
    assert_eq!(savepoint_from_message("nothing"), None);
    assert_eq!(
        savepoint_from_message("job stopping\nsavepoint: /data/sp/savepoint-10-2026\n"),
        Some("/data/sp/savepoint-10-2026".into())
    );
}

#[test]
fn suspended_jobs_are_looked_at_rarely() {
    let mut susp = with_upgrade(running(), "Suspend/Suspended", &base_spec(), Some("sp"));
    susp.deployment = None;
    let d = run(&suspended(base_spec()), &susp, &Observed::new(t(200)));
    assert_eq!(d.requeue_after, IDLE);
    let d = run(&base_spec(), &running(), &world(100));
    assert_eq!(d.requeue_after, SLOW);
}

#[test]
fn source_problems_degrade_the_job_with_a_bounded_message_and_lag_is_reported() {
    let mut o = world(100);
    let mut j = js(RunState::Running, Some("s3://b/ck/clicks/6"));
    j.records_in_per_second = 1234.56;
    j.consumer_lag = Some(42);
    j.problems = vec![crate::decide::SourceProblem {
        uid: "clicks".into(),
        message: format!(
            "kafka: cannot read metadata from b:9092: BrokerTransportFailure{}",
            "x".repeat(5000)
        ),
    }];
    set_job(&mut o, OLD, j);
    let d = run(&base_spec(), &running(), &o);
    let c = cond(&d, "Degraded");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "SourceProblem")
    );
    assert!(
        c.message
            .starts_with("source clicks: kafka: cannot read metadata")
    );
    assert!(
        c.message.len() <= MAX_PROBLEM_MESSAGE + 4,
        "{}",
        c.message.len()
    );
    let t = d.status.throughput.as_ref().unwrap();
    assert_eq!(
        (t.records_in_per_second, t.consumer_lag),
        (1234.6, Some(42))
    );
    // healthy again: the condition clears
    let d = run(&base_spec(), &d.status, &world(110));
    assert_eq!(cond(&d, "Degraded").status, "False");
}

/// An undeclared move (here InPlace/Savepointing straight to InPlace/Restoring, skipping the
/// stop that records the savepoint) is refused in every build: no action, status unchanged but
/// for the Degraded condition, and a Warning Event.
#[test]
fn an_undeclared_transition_is_refused_at_run_time() {
    let target = with_image("v2");
    let old = with_upgrade(
        StreamJobStatus::default(),
        "InPlace/Savepointing",
        &target,
        None,
    );
    let mut wrong = old.clone();
    if let Some(u) = wrong.upgrade.as_mut() {
        u.step = "InPlace/Restoring".parse().unwrap();
    }
    let observed = Observed::new(chrono::DateTime::from_timestamp(1_000, 0).unwrap());
    let bad = Decision {
        actions: vec![Action::Remove { name: "p".into() }],
        status: wrong,
        events: Vec::new(),
        requeue_after: Duration::from_secs(1),
        outcome: None,
        savepoints_completed: Vec::new(),
    };
    let d = guard_transition(&old, bad, &observed);
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    assert_eq!(stage_of(&d).as_deref(), Some("InPlace/Savepointing"));
    let c = d
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded")
        .expect("Degraded condition");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "IllegalTransition")
    );
    assert!(
        c.message
            .contains("InPlace/Savepointing -> InPlace/Restoring"),
        "{}",
        c.message
    );
    assert_eq!(d.events[0].reason, "IllegalTransition");
    // a declared move goes through untouched
    let mut right = old.clone();
    if let Some(u) = right.upgrade.as_mut() {
        u.step = "InPlace/Stopped".parse().unwrap();
    }
    let ok = Decision {
        actions: Vec::new(),
        status: right.clone(),
        events: Vec::new(),
        requeue_after: Duration::from_secs(1),
        outcome: None,
        savepoints_completed: Vec::new(),
    };
    assert_eq!(guard_transition(&old, ok, &observed).status, right);
}

/// The write-ahead rule at run time: a decision removing a run whose job is running, made on a
/// persisted status that has not recorded its state, is refused whole, whatever produced it.
#[test]
fn removing_a_running_run_before_its_state_is_recorded_is_refused() {
    let observed = world(100);
    let decision = |status: &StreamJobStatus| Decision {
        actions: vec![Action::Remove { name: OLD.into() }],
        status: status.clone(),
        events: Vec::new(),
        requeue_after: Duration::from_secs(1),
        outcome: None,
        savepoints_completed: Vec::new(),
    };
    // idle, and mid-upgrade before the stop recorded a savepoint
    let target = with_image("v2");
    for old in [
        running(),
        with_upgrade(running(), "InPlace/Savepointing", &target, None),
    ] {
        let d = guard_transition(&old, decision(&old), &observed);
        assert!(d.actions.is_empty(), "{:?}", d.actions);
        assert_eq!(d.events[0].reason, "IllegalTransition");
        assert!(
            d.events[0].message.contains("write-ahead rule"),
            "{}",
            d.events[0].message
        );
    }
    // once a persisted Stopped records the savepoint, the old run may go
    let stopped = with_upgrade(
        running(),
        "InPlace/Stopped",
        &target,
        Some("s3://b/sp/clicks/savepoint-1"),
    );
    let d = guard_transition(&stopped, decision(&stopped), &observed);
    assert_eq!(d.actions, [Action::Remove { name: OLD.into() }]);
    // a run whose job is not running (failed, standby) holds no unrecorded state
    let mut failed = world(100);
    failed.runtime = vec![(
        OLD.into(),
        RuntimeObs::Status(Box::new(js(RunState::Failed, None))),
    )];
    let d = guard_transition(&running(), decision(&running()), &failed);
    assert_eq!(d.actions.len(), 1);
}

/// docs/upgrades.md carries the declared machine verbatim, so code and docs cannot drift.
/// `STREAMJOB_BLESS=1 cargo test … docs_show_the_declared_machine` rewrites the block.
#[test]
fn docs_show_the_declared_machine() {
    const BEGIN: &str = "<!-- BEGIN generated from operator/src/decide/machine.rs -->\n";
    const END: &str = "<!-- END generated -->";
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/upgrades.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let (Some(a), Some(b)) = (doc.find(BEGIN), doc.find(END)) else {
        panic!("{} lacks the {BEGIN:?} … {END:?} markers", path.display());
    };
    let want = mermaid();
    let have = &doc[a + BEGIN.len()..b];
    if have != want {
        if std::env::var("STREAMJOB_BLESS").is_ok() {
            let new = format!("{}{BEGIN}{want}{}", &doc[..a], &doc[b..]);
            std::fs::write(&path, new).unwrap();
            return;
        }
        panic!(
            "docs/upgrades.md shows another state machine than TRANSITIONS; run with STREAMJOB_BLESS=1 to rewrite it. Expected:\n{want}"
        );
    }
}

/// Worker pods are actions of the same decision: a live coordinator gets its missing workers,
/// a worker of a replaced coordinator is deleted, next to whatever the upgrade does.
#[test]
fn workers_follow_their_coordinators_in_the_decision() {
    use crate::decide::{CoordinatorObs, WorkerObs};
    let mut o = world(110);
    o.coordinators = vec![CoordinatorObs {
        name: OLD.into(),
        uid: "u-old".into(),
        hash: "h".into(),
        ip: Some("10.0.0.1".into()),
        workers: 2,
        live: true,
    }];
    o.workers = vec![
        WorkerObs {
            name: format!("{OLD}-w0"),
            coordinator: OLD.into(),
            coordinator_uid: "u-old".into(),
            terminating: false,
            ended: None,
        },
        WorkerObs {
            name: "gone-w0".into(),
            coordinator: "gone".into(),
            coordinator_uid: "u-gone".into(),
            terminating: false,
            ended: None,
        },
    ];
    let d = run(&base_spec(), &running(), &o);
    let t = tags(&d);
    assert!(t.contains(&format!("AddWorker:{OLD}:1")), "{t:?}");
    assert!(!t.contains(&format!("AddWorker:{OLD}:0")), "{t:?}");
    assert!(t.contains(&"Remove:gone-w0".to_string()), "{t:?}");
    assert!(
        d.events.iter().all(|e| e.reason != "WorkerReplaced"),
        "a worker of a gone coordinator is not news: {:?}",
        d.events
    );

    // an OOM-killed worker (a Flink TaskManager, `restartPolicy: Never`) is replaced, and the
    // kernel's reason reaches an event
    o.workers[0].ended = Some("OOMKilled, exit 137".into());
    let d = run(&base_spec(), &running(), &o);
    assert!(
        tags(&d).contains(&format!("Remove:{OLD}-w0")),
        "{:?}",
        tags(&d)
    );
    let e = d
        .events
        .iter()
        .find(|e| e.reason == "WorkerReplaced")
        .expect("a WorkerReplaced event");
    assert!(
        e.warning && e.message.contains("OOMKilled, exit 137"),
        "{e:?}"
    );
}

/// `readinessTimeout` of `spec` in whole seconds, as the test clocks count.
fn readiness_secs(spec: &StreamJobSpec) -> i64 {
    let wait = dur(
        "readinessTimeout",
        &spec.upgrade.readiness_timeout,
        Duration::ZERO,
    );
    i64::try_from(wait.as_secs()).unwrap()
}

/// A pod whose node does not answer stays Terminating. `readinessTimeout` after its deletion was
/// due, our runtime's pod is force-deleted (what may still run there is fenced); a Flink pod is
/// named in Degraded and an event instead, and left alone.
#[test]
fn pods_stuck_terminating_are_force_deleted_or_reported() {
    let force_removed = |d: &Decision| {
        d.actions
            .iter()
            .any(|a| matches!(a, Action::ForceRemove { name } if name == OLD))
    };
    let stuck_world = |late: i64| {
        let mut o = world(10_000);
        o.pods[0].terminating = true;
        o.pods[0].deletion_due = Some(t(10_000 - late));
        o
    };
    let spec = base_spec();
    let wait = readiness_secs(&spec);
    let d = run(&spec, &running(), &stuck_world(wait - 1));
    assert!(
        !force_removed(&d),
        "not before readinessTimeout: {:?}",
        d.actions
    );
    let d = run(&spec, &running(), &stuck_world(wait + 1));
    assert!(force_removed(&d), "{:?}", d.actions);
    assert!(
        d.events
            .iter()
            .any(|n| n.warning && n.reason == "PodsForceDeleted" && n.message.contains(OLD)),
        "{:?}",
        d.events
    );

    let flink: StreamJobSpec = serde_yaml_ng::from_str(
        r#"
engine: flink
image: example.com/clicks-flink:2
checkpoints: {dir: "s3://b/ck/clicks", interval: 1m}
savepoints: {dir: "s3://b/sp/clicks"}
flink:
  version: 2.3.0
  job: {entryClass: com.example.Clicks}
"#,
    )
    .unwrap();
    flink.validate().unwrap();
    let mut st = running();
    st.deployment.as_mut().unwrap().spec_hash = hash(&flink);
    st.last_stable_spec_hash = Some(hash(&flink));
    st.last_stable_spec = Some(serde_json::to_string(&flink).unwrap());
    let mut unfenced = stuck_world(wait + 1);
    unfenced.runs_fenced = false; // as the Flink adapter observes
    let d = run(&flink, &st, &unfenced);
    assert!(
        !force_removed(&d),
        "a Flink pod is not fenced: {:?}",
        d.actions
    );
    let degraded = d
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded")
        .expect("Degraded");
    assert_eq!(degraded.status, "True");
    assert_eq!(degraded.reason, "PodsStuckTerminating");
    assert!(degraded.message.contains(OLD), "{}", degraded.message);
}

/// A pod nobody schedules or starts (no node fits, the scheduler is down) stays Pending. After
/// `readinessTimeout` it is named in Degraded and a warning event with the scheduler's reason;
/// before, the job is only not ready.
#[test]
fn pods_pending_past_the_readiness_timeout_are_reported() {
    let spec = base_spec();
    let wait = readiness_secs(&spec);
    let pending_world = |age: i64| {
        let mut o = world(10_000);
        o.pods[0].phase = PodPhase::Pending;
        o.pods[0].ready = false;
        o.pods[0].created = Some(t(10_000 - age));
        o.pods[0].message = Some("0/1 nodes are available: 1 node(s) were unschedulable".into());
        o.runtime.clear();
        o
    };
    let degraded = |d: &Decision| {
        d.status
            .conditions
            .iter()
            .find(|c| c.type_ == "Degraded")
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
            .unwrap()
    };
    let d = run(&spec, &running(), &pending_world(wait - 1));
    assert_eq!(degraded(&d).0, "False", "{:?}", degraded(&d));
    assert!(d.events.iter().all(|n| n.reason != "PodsPending"));
    let d = run(&spec, &running(), &pending_world(wait + 1));
    let (status, reason, message) = degraded(&d);
    assert_eq!((status.as_str(), reason.as_str()), ("True", "PodsPending"));
    assert!(
        message.contains(OLD) && message.contains("1 node(s) were unschedulable"),
        "{message}"
    );
    assert!(
        d.events
            .iter()
            .any(|n| n.warning && n.reason == "PodsPending" && n.message.contains(OLD)),
        "{:?}",
        d.events
    );
    // nothing is deleted or replaced for it: a new pod would wait the same
    assert!(
        !d.actions
            .iter()
            .any(|a| matches!(a, Action::Remove { .. } | Action::Deploy(_))),
        "{:?}",
        d.actions
    );
}

/// A Flink job's state restores in the same or a newer minor version only: a downgrade is
/// refused before anything is touched (no plan pod, no savepoint, no pod removed), with the
/// reason; an upgrade is pre-checked; a stateless downgrade starts without state.
#[test]
fn flink_downgrades_are_refused_before_anything_is_touched() {
    let flink = |version: &str, mode: &str| -> StreamJobSpec {
        let spec: StreamJobSpec = serde_yaml_ng::from_str(&format!(
            r#"
engine: flink
image: example.com/clicks-flink:{version}
checkpoints: {{dir: "s3://b/ck/clicks", interval: 1m}}
savepoints: {{dir: "s3://b/sp/clicks"}}
upgrade: {{mode: {mode}}}
flink:
  version: {version}
  job: {{entryClass: com.example.Clicks}}
"#
        ))
        .unwrap();
        spec.validate().unwrap();
        spec
    };
    let running_as = |deployed: &StreamJobSpec| {
        let mut st = running();
        st.deployment.as_mut().unwrap().spec_hash = hash(deployed);
        st.last_stable_spec_hash = Some(hash(deployed));
        st.last_stable_spec = Some(serde_json::to_string(deployed).unwrap());
        st
    };
    let st = running_as(&flink("2.3.0", "savepoint"));
    let mut obs = world(10_000);
    obs.runs_fenced = false;
    let touches = |d: &Decision| {
        d.actions.iter().any(|a| {
            matches!(
                a,
                Action::CheckCompatibility { .. }
                    | Action::TakeSavepoint { .. }
                    | Action::Remove { .. }
                    | Action::Deploy(_)
            )
        })
    };

    let older = flink("1.20.0", "savepoint");
    let d = run(&older, &st, &obs);
    assert_eq!(stage_of(&d).as_deref(), Some("InPlace/Planning"));
    assert!(!touches(&d), "{:?}", d.actions);
    let d = run(&older, &d.status, &obs);
    assert_eq!(stage_of(&d).as_deref(), Some("InPlace/Blocked"));
    assert!(!touches(&d), "{:?}", d.actions);
    let blocked = cond(&d, "UpgradeBlocked");
    assert_eq!(blocked.status, "True");
    assert!(
        blocked
            .message
            .contains("spec.flink.version 1.20.0 is older than the running job's 2.3.0"),
        "{}",
        blocked.message
    );

    // a patch-level change and an upgrade are pre-checked as usual
    for (from, to) in [("2.3.0", "2.3.1"), ("1.20.0", "2.3.0")] {
        let d = run(
            &flink(to, "savepoint"),
            &running_as(&flink(from, "savepoint")),
            &obs,
        );
        assert!(
            d.actions
                .iter()
                .any(|a| matches!(a, Action::CheckCompatibility { .. })),
            "{:?}",
            d.actions
        );
    }
    // without state, any version starts
    let d = run(&flink("1.20.0", "stateless"), &st, &obs);
    assert_eq!(stage_of(&d).as_deref(), Some("InPlace/Stopped"));
}
