//! Every stage × spec × event: each decision makes a declared move, through `move_to`.

use super::*;

fn all_stages() -> Vec<Option<Stage>> {
    let mut v = vec![None];
    for k in Kind::ALL {
        for s in Step::ALL {
            let stage = Stage { kind: k, step: s };
            // Only the stages the machine can reach.
            let reachable =
                legal(None, Some(stage)) || TRANSITIONS.iter().any(|(_, to)| *to == Some(stage));
            if reachable {
                v.push(Some(stage));
            }
        }
    }
    v
}

type Event = (&'static str, fn(&StreamJobStatus, &mut Observed));

fn events() -> Vec<Event> {
    fn standby(s: &StreamJobStatus) -> Option<String> {
        s.upgrade
            .as_ref()
            .map(|u| pod_name(JOB, &u.to, &rfc3339(u.started_at)))
    }
    vec![
        ("nothing new", |_, _| {}),
        ("old pod missing", |_, o| drop_pod(o, OLD)),
        ("old pod terminating", |_, o| {
            o.pods.iter_mut().for_each(|p| p.terminating = true)
        }),
        ("old pod failed", |_, o| o.pods[0].phase = PodPhase::Failed),
        ("old pod exited 0", |_, o| {
            o.pods[0].phase = PodPhase::Succeeded
        }),
        ("old pod crash-looping", |_, o| o.pods[0].restarts = 9),
        ("old job unreachable", |_, o| {
            o.runtime = vec![(OLD.into(), RuntimeObs::Unreachable("refused".into()))]
        }),
        ("old job failed", |_, o| {
            set_job(o, OLD, js(RunState::Failed, None))
        }),
        ("old job standby", |_, o| {
            set_job(o, OLD, js(RunState::Standby, None))
        }),
        ("savepoint completed", |_, o| {
            o.savepoint = Some(SavepointState::Completed {
                path: "sp-z".into(),
            })
        }),
        ("savepoint failed", |_, o| {
            o.savepoint = Some(SavepointState::Failed { error: "e".into() })
        }),
        ("savepoint pending", |_, o| {
            o.savepoint = Some(SavepointState::Pending)
        }),
        ("plan compatible", |s, o| {
            if s.upgrade.is_some() {
                o.pods.push(plan_pod(s, PodPhase::Succeeded, Some(0), None));
            }
        }),
        ("plan incompatible", |s, o| {
            if s.upgrade.is_some() {
                o.pods.push(plan_pod(s, PodPhase::Failed, Some(3), None));
            }
        }),
        ("plan error", |s, o| {
            if s.upgrade.is_some() {
                o.pods.push(plan_pod(s, PodPhase::Failed, Some(2), None));
            }
        }),
        ("standby ready", |s, o| {
            if let Some(n) = standby(s) {
                o.pods.push(pod(&n, PodPhase::Running));
                set_job(o, &n, js(RunState::Standby, None));
            }
        }),
        ("new version checkpointed", |s, o| {
            let n = standby(s).unwrap_or_default();
            o.pods.push(pod(&n, PodPhase::Running));
            set_job(o, &n, js(RunState::Running, Some("ck-new")));
            set_job(o, OLD, js(RunState::Running, Some("ck-new")));
        }),
        ("new version failed", |s, o| {
            let n = standby(s).unwrap_or_default();
            o.pods.push(pod(&n, PodPhase::Running));
            set_job(o, &n, js(RunState::Failed, None));
            set_job(o, OLD, js(RunState::Failed, None));
        }),
        ("all pods gone", |_, o| {
            o.pods.clear();
            o.runtime.clear();
        }),
        ("timeouts passed", |_, o| o.now += chrono::Duration::days(3)),
    ]
}

fn specs() -> Vec<(&'static str, StreamJobSpec)> {
    let mut invalid = base_spec();
    invalid.checkpoints.interval = "x".into();
    let mut nonce = base_spec();
    nonce.savepoints.as_mut().unwrap().trigger_nonce = 4;
    let mut rescale = base_spec();
    rescale.parallelism = 3;
    vec![
        ("same spec", base_spec()),
        ("new image", img2()),
        ("new image shadow", shadow(img2())),
        ("new image last-state", mode(img2(), UpgradeMode::LastState)),
        ("new image stateless", mode(img2(), UpgradeMode::Stateless)),
        ("rescale", rescale),
        ("suspend", suspended(base_spec())),
        ("nonce", nonce),
        ("invalid", invalid),
    ]
}

#[test]
fn every_stage_and_event_makes_a_legal_move() {
    let mut pairs = 0;
    for stage in all_stages() {
        for (spec_name, spec) in specs() {
            for (ev_name, ev) in events() {
                for pend in [false, true] {
                    let mut st = status_at(stage, &spec);
                    if pend {
                        st = pending(st, "upgrade", true);
                    }
                    let mut o = world(150);
                    ev(&st, &mut o);
                    let d = decide(&jref(), &spec, &st, &o);
                    let after = d.status.upgrade.as_ref().map(|u| u.step);
                    assert!(
                        legal(stage, after),
                        "{stage:?} + {spec_name} + {ev_name} (pending {pend}): illegal move to {after:?}"
                    );
                    assert_no_refusal(&d);
                    wal_invariant(&st, &o, &d);
                    // The status the decision writes always reads back.
                    let json = serde_json::to_string(&d.status).unwrap();
                    let _: StreamJobStatus = serde_json::from_str(&json).unwrap();
                    assert!(d.requeue_after >= Duration::from_secs(1));
                    pairs += 1;
                }
            }
        }
    }
    assert!(pairs > 5000, "{pairs}");
    eprintln!("{pairs} stage x spec x event x pending combinations checked");
}

/// No stage leaves a pod fenced by its own stale epoch (issue #38, soak seed 20261204): a
/// warm-started pod whose container restarted under its arguments' older epoch crash-looped
/// while `Rollback/Restoring` said "no other version to roll back to", Failed for good. Where the
/// fenced pod is the one that must run, it is replaced and the job is not failed beside it.
#[test]
fn no_stage_leaves_a_fenced_pod_crash_looping() {
    let mut replaced = 0;
    for stage in all_stages() {
        for (spec_name, spec) in specs() {
            let st = status_at(stage, &spec);
            let o = fenced_world(150, 9);
            let d = decide(&jref(), &spec, &st, &o);
            let removed = tags(&d).iter().any(|t| *t == format!("Remove:{OLD}"));
            // where the old pod is the job that must run (the steady state and its terminal
            // records, a rollback or an in-place restore of it), it is replaced, and the job is
            // never failed beside it
            let must_run = match stage {
                None => true,
                Some(s) => {
                    s.step.is_terminal() && s.step != Step::Suspended
                        || s.step == Step::Restoring && s.kind != Kind::Shadow
                }
            };
            if must_run && spec_name == "same spec" {
                assert!(removed, "{stage:?} + {spec_name}: the fenced pod is kept");
                assert_ne!(
                    d.status.phase,
                    Some(Phase::Failed),
                    "{stage:?} + {spec_name}: Failed beside a fenced pod"
                );
                replaced += 1;
            }
        }
    }
    assert!(replaced >= 5, "{replaced}");
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// A status in `stage` whose transition targets `spec` (a rollback targets the base spec).
fn status_at(stage: Option<Stage>, spec: &StreamJobSpec) -> StreamJobStatus {
    let Some(s) = stage else {
        return running();
    };
    let target = if s.kind == Kind::Rollback {
        base_spec()
    } else {
        spec.clone()
    };
    let mut st = with_upgrade(running(), &s.to_string(), &target, Some("sp-1"));
    if s.kind == Kind::Rollback {
        st.upgrade.as_mut().unwrap().from = Some(hash(&img2()));
    }
    if matches!(s.step, Step::Suspended) || s.kind == Kind::Resume && s.step != Step::Restoring {
        st.deployment = None;
    }
    st
}

#[test]
fn stages_round_trip_and_transitions_are_declared() {
    for s in all_stages().into_iter().flatten() {
        assert_eq!(s.to_string().parse::<Stage>().unwrap(), s);
    }
    assert!("Nope/Planning".parse::<Stage>().is_err());
    assert!("InPlace".parse::<Stage>().is_err());
    // Forbidden shortcuts.
    assert!(!legal(st(InPlace, Planning), st(InPlace, Restoring)));
    assert!(!legal(st(InPlace, Savepointing), st(InPlace, Restoring)));
    assert!(!legal(None, st(InPlace, Restoring)));
    assert!(!legal(st(Suspend, Savepointing), None));
    assert!(!legal(st(Rollback, Restoring), None));
    assert!(legal(st(InPlace, Restoring), None));
    assert!(legal(st(InPlace, Blocked), st(InPlace, Planning)));
}
