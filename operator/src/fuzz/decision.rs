//! The decision function fed arbitrary, stale and concurrent statuses and observations: it
//! never panics, and every decision keeps the invariants `check` names.

use super::*;

const OLD: &str = "clicks-old";
const NEW: &str = "clicks-new";

use crate::decide::tests::base_spec;

/// The specs a job may have: the deployed one, an upgrade, a rescale, shadow, suspended, and an
/// invalid one.
fn specs() -> Vec<StreamJobSpec> {
    let base = base_spec();
    let mut image = base.clone();
    image.image = "runtime:2".into();
    let mut rescale = base.clone();
    rescale.parallelism = 3;
    let mut shadow = image.clone();
    shadow.upgrade.strategy = UpgradeStrategy::Shadow;
    let mut suspended = base.clone();
    suspended.state = JobState::Suspended;
    let mut invalid = base.clone();
    invalid.parallelism = 0;
    vec![base, image, rescale, shadow, suspended, invalid]
}

fn t(secs: i64) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
        + chrono::Duration::seconds(secs)
}

/// Every stage the schema admits, reachable or not (the API server refuses any other string).
fn stages() -> Vec<Stage> {
    Kind::ALL
        .into_iter()
        .flat_map(|kind| Step::ALL.map(|step| Stage { kind, step }))
        .collect()
}

/// A time as status holds it, possibly far from now (stale, or in the future).
fn time() -> impl Strategy<Value = DateTime<Utc>> {
    prop_oneof![
        4 => (-100_000i64..100_000).prop_map(t),
        1 => Just(DateTime::<Utc>::MAX_UTC),
        1 => Just(DateTime::<Utc>::UNIX_EPOCH),
    ]
}

/// A spec hash, a spec as status records it (JSON), or garbage.
fn hash_choice() -> impl Strategy<Value = String> {
    let mut hashes: Vec<String> = specs()
        .iter()
        .filter_map(|s| deployment_hash(s).ok())
        .collect();
    hashes.push("deadbeef".into());
    hashes.push(String::new());
    proptest::sample::select(hashes)
}

fn spec_json_choice() -> impl Strategy<Value = String> {
    let mut jsons: Vec<String> = specs()
        .iter()
        .map(|s| serde_json::to_string(s).unwrap())
        .collect();
    jsons.push("{not json".into());
    jsons.push("{}".into());
    proptest::sample::select(jsons)
}

fn pod_name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(vec![OLD.to_string(), NEW.to_string()]),
        1 => "clicks-[a-z0-9-]{1,10}",
    ]
}

fn sp_path() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(vec![
            "s3://b/sp/clicks/savepoint-7".to_string(),
            "s3://b/sp/clicks/savepoint-8".to_string(),
            "s3://b/ck/clicks/5".to_string(),
        ]),
        1 => text(),
    ]
}

fn savepoint_info() -> impl Strategy<Value = SavepointInfo> {
    (
        sp_path(),
        proptest::option::of(time()),
        proptest::option::of(text()),
        proptest::option::of(hash_choice()),
    )
        .prop_map(|(path, time, reason, spec_hash)| SavepointInfo {
            path,
            time,
            reason,
            spec_hash,
        })
}

fn status(epochs: Vec<u64>) -> impl Strategy<Value = StreamJobStatus> {
    let phase = proptest::option::of(proptest::sample::select(vec![
        Phase::Deploying,
        Phase::Running,
        Phase::Upgrading,
        Phase::RollingBack,
        Phase::Suspended,
        Phase::Finished,
        Phase::Failed,
    ]));
    let deployment = proptest::option::of(
        (
            hash_choice(),
            proptest::option::of(0u32..5),
            proptest::sample::select(vec![
                StartedFrom::Empty,
                StartedFrom::Savepoint,
                StartedFrom::Checkpoint,
            ]),
            proptest::option::of(sp_path()),
            proptest::option::of(pod_name()),
            proptest::option::of(time()),
        )
            .prop_map(
                |(spec_hash, parallelism, started_from, path, workload, started_at)| {
                    DeploymentStatus {
                        spec_hash,
                        image: "runtime:1".into(),
                        parallelism,
                        started_from,
                        path,
                        workload,
                        started_at,
                        dropped_state: Vec::new(),
                    }
                },
            ),
    );
    let upgrade = proptest::option::of(
        (
            proptest::option::of(hash_choice()),
            hash_choice(),
            proptest::option::of(spec_json_choice()),
            proptest::sample::select(stages()),
            (time(), proptest::option::of(time())),
            proptest::option::of(sp_path()),
        )
            .prop_map(
                |(from, to, target_spec, step, (started_at, step_started_at), savepoint)| {
                    UpgradeStatus {
                        from,
                        to,
                        target_spec,
                        step,
                        started_at,
                        step_started_at,
                        savepoint,
                        message: None,
                        dropped_state: Vec::new(),
                    }
                },
            ),
    );
    let pending = proptest::option::of(
        (
            text(),
            proptest::sample::select(vec![
                "upgrade".to_string(),
                "suspend".into(),
                "periodic".into(),
                "manual".into(),
                "x".into(),
            ]),
            any::<bool>(),
            time(),
            proptest::option::of(proptest::sample::select(vec![
                String::new(),
                "s3://b/sp/1".to_string(),
            ])),
        )
            .prop_map(|(request_id, reason, stop, started_at, previous)| {
                PendingSavepoint {
                    request_id,
                    reason,
                    stop,
                    started_at,
                    previous,
                }
            }),
    );
    let extremes = proptest::sample::select(epochs);
    (
        (phase, proptest::option::of(any::<i64>())),
        deployment,
        (
            proptest::option::of(hash_choice()),
            proptest::option::of(spec_json_choice()),
        ),
        proptest::option::of((
            extremes.clone(),
            proptest::option::of(sp_path()),
            proptest::option::of(time()),
        )),
        (
            proptest::option::of(savepoint_info()),
            proptest::collection::vec(savepoint_info(), 0..4),
        ),
        (proptest::option::of(any::<i64>()), pending, upgrade),
        proptest::option::of(extremes),
    )
        .prop_map(
            |(
                (phase, observed_generation),
                deployment,
                (last_stable_spec_hash, last_stable_spec),
                ck,
                (last_savepoint, savepoint_history),
                (last_handled_nonce, pending_savepoint, upgrade),
                epoch,
            )| {
                StreamJobStatus {
                    phase,
                    observed_generation,
                    deployment,
                    last_stable_spec_hash,
                    last_stable_spec,
                    last_checkpoint: ck.map(|(id, path, time)| CheckpointInfo { id, path, time }),
                    last_savepoint,
                    savepoint_history,
                    last_handled_nonce,
                    pending_savepoint,
                    upgrade,
                    epoch,
                    ..Default::default()
                }
            },
        )
}

fn pod() -> impl Strategy<Value = PodObs> {
    let phase = proptest::sample::select(vec![
        PodPhase::Pending,
        PodPhase::Running,
        PodPhase::Succeeded,
        PodPhase::Failed,
        PodPhase::Unknown,
    ]);
    let role = proptest::sample::select(vec![PodRole::Runtime, PodRole::Plan, PodRole::Dispose]);
    let message = proptest::option::of(prop_oneof![
        sp_path().prop_map(|p| serde_json::json!({ "savepoint": p }).to_string()),
        Just(plan_report(&[("gen".into(), 3)])),
        text(),
    ]);
    (
        (pod_name(), role, phase),
        (
            proptest::option::of(hash_choice()),
            any::<bool>(),
            any::<bool>(),
        ),
        prop_oneof![Just(0i32), Just(1), Just(3), Just(i32::MAX), Just(-1)],
        proptest::option::of(proptest::sample::select(vec![
            "CrashLoopBackOff".to_string(),
            "ImagePullBackOff".into(),
            "x".into(),
        ])),
        proptest::option::of(prop_oneof![
            Just(0i32),
            Just(1),
            Just(2),
            Just(3),
            Just(137),
            any::<i32>()
        ]),
        message,
        proptest::option::of(Just("10.0.0.1".to_string())),
    )
        .prop_map(
            |(
                (name, role, phase),
                (spec_hash, ready, terminating),
                restarts,
                waiting_reason,
                exit_code,
                message,
                ip,
            )| {
                let mut p = PodObs::new(&name, role, phase);
                p.spec_hash = spec_hash;
                p.ready = ready;
                p.terminating = terminating;
                p.restarts = restarts;
                // a kill held back by the kubelet's back-off, whenever the draw allows one
                p.killed_and_held_back =
                    exit_code == Some(137) && waiting_reason.as_deref() == Some("CrashLoopBackOff");
                p.waiting_reason = waiting_reason;
                p.exit_code = exit_code;
                p.message = message;
                p.ip = ip;
                p
            },
        )
}

fn observed() -> impl Strategy<Value = Observed> {
    let runtime = proptest::collection::vec(
        (
            pod_name(),
            prop_oneof![
                1 => text().prop_map(RuntimeObs::Unreachable),
                3 => job_status().prop_map(|j| RuntimeObs::Status(Box::new(j))),
            ],
        ),
        0..3,
    );
    let savepoint = proptest::option::of(prop_oneof![
        Just(SavepointState::Pending),
        sp_path().prop_map(|path| SavepointState::Completed { path }),
        text().prop_map(|error| SavepointState::Failed { error }),
    ]);
    (
        -100_000i64..100_000,
        proptest::option::of(any::<i64>()),
        proptest::collection::vec(pod(), 0..4),
        runtime,
        savepoint,
        proptest::collection::btree_set(hash_choice(), 0..3),
        proptest::option::of(sp_path()),
    )
        .prop_map(
            |(now, generation, pods, runtime, savepoint, config_hashes, recovered_savepoint)| {
                let mut o = Observed::new(t(now));
                o.generation = generation;
                o.pods = pods;
                o.runtime = runtime;
                o.savepoint = savepoint;
                o.config_hashes = config_hashes;
                o.recovered_savepoint = recovered_savepoint;
                o
            },
        )
}

fn stage(status: &StreamJobStatus) -> Option<Stage> {
    status.upgrade.as_ref().map(|u| u.step)
}

/// The invariants `decide_tests.rs` checks on its table, for any input.
fn check(status: &StreamJobStatus, obs: &Observed, d: &Decision) -> Result<(), TestCaseError> {
    // legal moves only
    let (before, after) = (stage(status), stage(&d.status));
    prop_assert!(
        legal(before, after),
        "illegal transition {:?} -> {:?}",
        before,
        after
    );
    // WAL: old pods are never deleted before the state they hold is recorded
    if let (Some(old), Some(stage)) = (
        status.deployment.as_ref().and_then(|d| d.workload.clone()),
        stage(status),
    ) {
        let guarded = match stage.kind {
            Kind::InPlace | Kind::Suspend => {
                matches!(stage.step, Step::Planning | Step::Savepointing)
            }
            Kind::Shadow => stage.step != Step::Restoring,
            _ => false,
        };
        let failed = obs.pod(&old).is_some_and(|p| p.phase == PodPhase::Failed)
            || obs
                .job(&old)
                .is_some_and(|j| matches!(j.state, RunState::Failed | RunState::Standby));
        if guarded && !failed {
            prop_assert!(
                !d.actions.contains(&Action::Remove { name: old.clone() }),
                "{}: deleted the old pod {} before the WAL allows it: {:?}",
                stage,
                old,
                d.actions
            );
        }
    }
    // fencing: every run started gets a new epoch above the recorded one, status covers them
    // all, and a Cancel always precedes its pod's deletion
    let mut last = status.epoch.unwrap_or(0);
    let mut started = false;
    for (i, a) in d.actions.iter().enumerate() {
        let epoch = match a {
            Action::Deploy(p) => Some(p.epoch),
            Action::Start { epoch, .. } => Some(*epoch),
            Action::Cancel { run: pod } => {
                prop_assert!(
                    d.actions[i..]
                        .iter()
                        .any(|b| matches!(b, Action::Remove { name } if name == pod)),
                    "Cancel of {} without its deletion",
                    pod
                );
                None
            }
            _ => None,
        };
        if let Some(e) = epoch {
            prop_assert!(e > last, "epoch {} not above {}", e, last);
            last = e;
            started = true;
        }
    }
    if started {
        prop_assert_eq!(d.status.epoch, Some(last), "status.epoch");
    }
    // kstatus: Stalled exactly when the job needs its user, never Stalled and Reconciling
    let is = |c: &str| {
        d.status
            .conditions
            .iter()
            .any(|x| x.type_ == c && x.status == "True")
    };
    let has = |c: &str| d.status.conditions.iter().any(|x| x.type_ == c);
    if has("Stalled") && has("SpecValid") {
        let needs_user = is("UpgradeBlocked")
            || is("RolledBack")
            || !is("SpecValid")
            || d.status.phase == Some(Phase::Failed)
            || d.status
                .upgrade
                .as_ref()
                .is_some_and(|u| u.step.step == Step::Aborted);
        prop_assert_eq!(
            is("Stalled"),
            needs_user,
            "Stalled {:?}",
            d.status.conditions
        );
        prop_assert!(
            !(is("Stalled") && is("Reconciling")),
            "Stalled and Reconciling"
        );
    }
    Ok(())
}

/// `decide` fed arbitrary and stale statuses (stages, savepoints, epochs and times at their
/// extremes, times after `now`) and arbitrary observations: no panic, legal moves only, the WAL
/// and fencing invariants hold, two replicas deciding on the same inputs agree, and the status
/// it writes is a valid input for the next decision.
#[test]
fn fuzz_decide() {
    let specs = specs();
    let inputs = (0..specs.len(), status(vec![0, 1, 5, 1 << 62]), observed());
    let job = JobRef {
        name: "clicks".into(),
        namespace: "ns".into(),
    };
    fuzz("decide", 128, inputs, |(spec, status, obs)| {
        let spec = &specs[spec];
        let d = decide(&job, spec, &status, &obs);
        check(&status, &obs, &d)?;
        // a concurrent replica deciding on the same (possibly stale) inputs agrees
        prop_assert_eq!(&decide(&job, spec, &status, &obs), &d);
        // the status it wrote, read again with the same world
        let next = decide(&job, spec, &d.status, &obs);
        check(&d.status, &obs, &next)?;
        Ok(())
    });
}

/// Epochs at the top of their range (a status written by hand, or corrupted).
#[test]
fn fuzz_decide_epoch_at_the_limit() {
    let specs = specs();
    let inputs = (
        0..specs.len(),
        status(vec![u64::MAX - 1, u64::MAX]),
        observed(),
    );
    let job = JobRef {
        name: "clicks".into(),
        namespace: "ns".into(),
    };
    fuzz(
        "decide_epoch_at_the_limit",
        64,
        inputs,
        |(spec, status, obs)| {
            let d = decide(&job, &specs[spec], &status, &obs);
            check(&status, &obs, &d)?;
            let next = decide(&job, &specs[spec], &d.status, &obs);
            check(&d.status, &obs, &next)?;
            Ok(())
        },
    );
}
