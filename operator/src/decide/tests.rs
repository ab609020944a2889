//! Table-driven tests of [`decide`]: every stage × every observation that can occur there.
#![allow(clippy::unwrap_used)]

use super::*;
use crate::control::{RestoredFrom, Snapshot};
use streamjob_crds::v1alpha1::{StreamJob, UpgradeMode, UpgradeStrategy};

const JOB: &str = "clicks";

/// The job the tables (and `crate::fuzz`) start from.
pub(crate) fn base_spec() -> StreamJobSpec {
    let yaml = r#"
apiVersion: streamjob.io/v1alpha1
kind: StreamJob
metadata: {name: clicks}
spec:
  image: runtime:1
  parallelism: 2
  checkpoints: {dir: s3://b/ck/clicks}
  savepoints: {dir: s3://b/sp/clicks, history: {maxCount: 3}}
  pipeline:
    - uid: gen
      source: {generator: {keys: 10}}
    - uid: out
      print: {}
"#;
    let job = StreamJob::from_yaml(yaml).unwrap();
    job.spec.validate().unwrap();
    job.spec
}

fn with_image(img: &str) -> StreamJobSpec {
    let mut s = base_spec();
    s.image = img.into();
    s
}

fn hash(s: &StreamJobSpec) -> String {
    deployment_hash(s).unwrap()
}

fn jref() -> JobRef {
    JobRef {
        name: JOB.into(),
        namespace: "ns".into(),
    }
}

fn t(secs: i64) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
        + chrono::Duration::seconds(secs)
}

fn ts(secs: i64) -> String {
    rfc3339(t(secs))
}

const OLD: &str = "clicks-old";
const NEW: &str = "clicks-new";

/// A job running `base_spec()` stably in pod OLD.
fn running() -> StreamJobStatus {
    let spec = base_spec();
    StreamJobStatus {
        phase: Some(Phase::Running),
        deployment: Some(DeploymentStatus {
            spec_hash: hash(&spec),
            image: spec.image.clone(),
            parallelism: Some(2),
            started_from: StartedFrom::Empty,
            path: None,
            workload: Some(OLD.into()),
            started_at: Some(ts(0)),
        }),
        last_stable_spec_hash: Some(hash(&spec)),
        last_stable_spec: Some(serde_json::to_string(&spec).unwrap()),
        last_checkpoint: Some(CheckpointInfo {
            id: 5,
            path: Some("s3://b/ck/clicks/5".into()),
            time: Some(ts(50)),
        }),
        ..Default::default()
    }
}

fn js(state: RunState, ck: Option<&str>) -> JobStatus {
    let mut j = JobStatus::new(state);
    j.latest_checkpoint = ck.map(|p| Snapshot {
        id: Some(6),
        path: p.into(),
        completed_at: Some(ts(60)),
        duration_ms: Some(10),
    });
    j
}

fn pod(name: &str, phase: PodPhase) -> PodObs {
    let mut p = PodObs::new(name, PodRole::Runtime, phase);
    p.ip = Some("127.0.1.2".into());
    p
}

/// World with pod OLD running a healthy job.
fn world(now: i64) -> Observed {
    let mut o = Observed::new(t(now));
    o.generation = Some(2);
    o.pods.push(pod(OLD, PodPhase::Running));
    o.runtime.push((
        OLD.into(),
        RuntimeObs::Status(Box::new(js(RunState::Running, Some("s3://b/ck/clicks/6")))),
    ));
    o
}

fn set_job(o: &mut Observed, name: &str, j: JobStatus) {
    o.runtime.retain(|(n, _)| n != name);
    o.runtime
        .push((name.into(), RuntimeObs::Status(Box::new(j))));
}

fn drop_pod(o: &mut Observed, name: &str) {
    o.pods.retain(|p| p.name != name);
    o.runtime.retain(|(n, _)| n != name);
}

fn with_upgrade(
    mut s: StreamJobStatus,
    stage: &str,
    target: &StreamJobSpec,
    savepoint: Option<&str>,
) -> StreamJobStatus {
    s.upgrade = Some(UpgradeStatus {
        from: s.deployment.as_ref().map(|d| d.spec_hash.clone()),
        to: hash(target),
        target_spec: Some(serde_json::to_string(target).unwrap()),
        step: stage.into(),
        started_at: ts(100),
        step_started_at: Some(ts(100)),
        savepoint: savepoint.map(String::from),
        message: None,
    });
    s
}

fn stage_of(d: &Decision) -> Option<String> {
    d.status.upgrade.as_ref().map(|u| u.step.clone())
}

fn tags(d: &Decision) -> Vec<String> {
    d.actions
        .iter()
        .map(|a| match a {
            Action::EnsureConfig { .. } => "EnsureConfig".into(),
            Action::DeleteConfig { hash } => format!("DeleteConfig:{hash}"),
            Action::CreatePod(p) => format!(
                "CreatePod:{}{}{}",
                if p.name == OLD || p.name == NEW {
                    p.name.as_str()
                } else {
                    "*"
                },
                if p.standby { ":standby" } else { "" },
                p.from_savepoint
                    .as_deref()
                    .map(|f| format!(":from={f}"))
                    .unwrap_or_default()
            ),
            Action::DeletePod { name } => format!("DeletePod:{name}"),
            Action::CreateWorker { coordinator, index } => {
                format!("CreateWorker:{coordinator}:{index}")
            }
            Action::CreatePlanPod { from, .. } => format!("CreatePlanPod:{from}"),
            Action::TriggerSavepoint { stop, standby, .. } => format!(
                "TriggerSavepoint{}{}",
                if *stop { ":stop" } else { "" },
                if *standby { ":standby" } else { "" }
            ),
            Action::Start { from_savepoint, .. } => {
                format!("Start:{}", from_savepoint.as_deref().unwrap_or("-"))
            }
            Action::Cancel { pod } => format!("Cancel:{pod}"),
            Action::DisposeSavepoints { paths } => format!("Dispose:{}", paths.join(",")),
        })
        .collect()
}

/// The chart's Argo CD health check, shipped for `resource.customizations.health`.
const ARGOCD_HEALTH: &str = include_str!("../../../charts/streamjob-operator/argocd/health.lua");

/// (health status, message) of the Argo CD health check for a StreamJob with `status` at
/// `generation`, run by a Lua 5.4 interpreter as Argo CD does.
fn argocd_health(status: &StreamJobStatus, generation: Option<i64>) -> (String, String) {
    use mlua::LuaSerdeExt;
    let lua = mlua::Lua::new();
    let obj = serde_json::json!({"metadata": {"generation": generation}, "status": status});
    let options = mlua::SerializeOptions::new()
        .serialize_none_to_null(false)
        .serialize_unit_to_null(false);
    lua.globals()
        .set("obj", lua.to_value_with(&obj, options).unwrap())
        .unwrap();
    let hs: mlua::Table = lua.load(ARGOCD_HEALTH).eval().unwrap();
    (hs.get("status").unwrap(), hs.get("message").unwrap())
}

#[test]
fn argocd_health_waits_for_the_operator_to_see_a_new_generation() {
    let status = StreamJobStatus {
        observed_generation: Some(3),
        ..Default::default()
    };
    let (health, message) = argocd_health(&status, Some(4));
    assert_eq!(health, "Progressing");
    assert!(message.contains("generation 4"), "{message}");
}

fn cond<'a>(d: &'a Decision, t: &str) -> &'a Condition {
    d.status.conditions.iter().find(|c| c.type_ == t).unwrap()
}

fn run(spec: &StreamJobSpec, status: &StreamJobStatus, obs: &Observed) -> Decision {
    let d = decide(&jref(), spec, status, obs);
    let before = status
        .upgrade
        .as_ref()
        .map(|u| u.step.parse::<Stage>().unwrap());
    let after = d
        .status
        .upgrade
        .as_ref()
        .map(|u| u.step.parse::<Stage>().unwrap());
    assert!(
        legal(before, after),
        "illegal transition {before:?} -> {after:?}"
    );
    // every move went through move_to and was declared (else the decision is refused)
    assert_no_refusal(&d);
    wal_invariant(status, obs, &d);
    d
}

/// The decision was not refused as an undeclared move or a stage written around `move_to`.
fn assert_no_refusal(d: &Decision) {
    assert!(
        !d.events.iter().any(|e| e.reason == "IllegalTransition"),
        "refused: {:?}",
        d.status.message
    );
}

/// Old pods are never deleted before the state they hold is recorded in the persisted status.
fn wal_invariant(before: &StreamJobStatus, obs: &Observed, d: &Decision) {
    let Some(old) = before.deployment.as_ref().and_then(|d| d.workload.clone()) else {
        return;
    };
    let Some(stage) = before
        .upgrade
        .as_ref()
        .and_then(|u| u.step.parse::<Stage>().ok())
    else {
        return;
    };
    let guarded = match stage.kind {
        Kind::InPlace | Kind::Suspend => matches!(stage.step, Step::Planning | Step::Savepointing),
        Kind::Shadow => stage.step != Step::Restoring,
        _ => false,
    };
    // A failed pod, or a pod whose job failed or that waits in standby (it only waits for a
    // start), holds no state (its checkpoints are in storage): replacing it is always fine.
    let failed = obs.pod(&old).is_some_and(|p| p.phase == PodPhase::Failed)
        || obs
            .job(&old)
            .is_some_and(|j| matches!(j.state, RunState::Failed | RunState::Standby));
    if guarded && !failed {
        assert!(
            !d.actions.contains(&Action::DeletePod { name: old.clone() }),
            "{stage}: deleted the old pod {old} before the WAL allows it: {:?}",
            d.actions
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------------------------

struct Case {
    name: &'static str,
    spec: StreamJobSpec,
    status: StreamJobStatus,
    obs: Observed,
    stage: Option<&'static str>,
    phase: Option<Phase>,
    actions: &'static [&'static str],
    /// Conditions expected True.
    conds: &'static [&'static str],
    event: Option<&'static str>,
    outcome: Option<Outcome>,
}

impl Case {
    fn new(
        name: &'static str,
        spec: StreamJobSpec,
        status: StreamJobStatus,
        obs: Observed,
    ) -> Self {
        Self {
            name,
            spec,
            status,
            obs,
            stage: None,
            phase: None,
            actions: &[],
            conds: &[],
            event: None,
            outcome: None,
        }
    }
    fn stage(mut self, s: &'static str) -> Self {
        self.stage = Some(s);
        self
    }
    fn idle(mut self) -> Self {
        self.stage = Some("");
        self
    }
    fn phase(mut self, p: Phase) -> Self {
        self.phase = Some(p);
        self
    }
    fn acts(mut self, a: &'static [&'static str]) -> Self {
        self.actions = a;
        self
    }
    fn conds(mut self, c: &'static [&'static str]) -> Self {
        self.conds = c;
        self
    }
    fn event(mut self, e: &'static str) -> Self {
        self.event = Some(e);
        self
    }
    fn outcome(mut self, o: Outcome) -> Self {
        self.outcome = Some(o);
        self
    }

    fn check(&self) -> Decision {
        let d = run(&self.spec, &self.status, &self.obs);
        let name = self.name;
        match self.stage {
            Some("") => assert_eq!(stage_of(&d), None, "{name}: stage"),
            Some(s) => assert_eq!(stage_of(&d).as_deref(), Some(s), "{name}: stage"),
            None => {}
        }
        if let Some(p) = self.phase {
            assert_eq!(d.status.phase, Some(p), "{name}: phase");
        }
        let got: Vec<String> = tags(&d)
            .into_iter()
            .filter(|t| t != "EnsureConfig" && !t.starts_with("DeleteConfig"))
            .collect();
        assert_eq!(got, self.actions, "{name}: actions");
        // fencing: every run started gets a new epoch above the recorded one, status (written
        // before any action) covers them all, and a Cancel always precedes its pod's deletion
        let mut last = self.status.epoch.unwrap_or(0);
        for (i, a) in d.actions.iter().enumerate() {
            let epoch = match a {
                Action::CreatePod(p) => Some(p.epoch),
                Action::Start {
                    epoch,
                    pod,
                    from_savepoint,
                } => {
                    // a new run of the deployed pods: status says what it restores
                    if let Some(dep) = d
                        .status
                        .deployment
                        .as_ref()
                        .filter(|dep| dep.workload.as_ref() == Some(pod))
                    {
                        assert_eq!(
                            &dep.path, from_savepoint,
                            "{name}: status.deployment.path of started {pod}"
                        );
                        assert_eq!(
                            dep.started_at.as_deref(),
                            Some(rfc3339(self.obs.now).as_str()),
                            "{name}: status.deployment.startedAt of started {pod}"
                        );
                    }
                    Some(*epoch)
                }
                Action::Cancel { pod } => {
                    assert!(
                        d.actions[i..]
                            .iter()
                            .any(|b| matches!(b, Action::DeletePod { name } if name == pod)),
                        "{name}: Cancel of {pod} without its deletion"
                    );
                    None
                }
                _ => None,
            };
            if let Some(e) = epoch {
                assert!(e > last, "{name}: epoch {e} not above {last}");
                last = e;
            }
        }
        assert_eq!(d.status.epoch.unwrap_or(0), last, "{name}: status.epoch");
        for c in self.conds {
            assert_eq!(
                cond(&d, c).status,
                "True",
                "{name}: condition {c} {:?}",
                cond(&d, c)
            );
        }
        for c in [
            "Ready",
            "Upgrading",
            "UpgradeBlocked",
            "Degraded",
            "RolledBack",
            "SpecValid",
        ] {
            if !self.conds.contains(&c) && c != "SpecValid" && c != "Ready" {
                assert_eq!(
                    cond(&d, c).status,
                    "False",
                    "{name}: condition {c} {:?}",
                    cond(&d, c)
                );
            }
        }
        // kstatus: Stalled exactly when the job needs its user; Reconciling while it moves
        let is = |c: &str| cond(&d, c).status == "True";
        let needs_user = is("UpgradeBlocked")
            || is("RolledBack")
            || !is("SpecValid")
            || d.status.phase == Some(Phase::Failed)
            || stage_of(&d).is_some_and(|s| s.ends_with("/Aborted"));
        assert_eq!(
            is("Stalled"),
            needs_user,
            "{name}: Stalled {:?}",
            cond(&d, "Stalled")
        );
        if is("Stalled") {
            assert!(!is("Reconciling"), "{name}: Stalled and Reconciling");
        } else if is("Upgrading") {
            assert!(is("Reconciling"), "{name}: Upgrading but not Reconciling");
        } else if is("Ready") {
            assert!(
                !is("Reconciling"),
                "{name}: Ready, settled, yet Reconciling"
            );
        }
        // Argo CD sees every status of the table as the documented mapping says
        let (health, message) = argocd_health(&d.status, d.status.observed_generation);
        let want = if is("Stalled") {
            "Degraded"
        } else if d.status.phase == Some(Phase::Suspended) {
            "Suspended"
        } else if is("Reconciling") {
            "Progressing"
        } else if is("Degraded") {
            "Degraded"
        } else if d.status.phase == Some(Phase::Finished) || is("Ready") {
            "Healthy"
        } else {
            "Progressing"
        };
        assert_eq!(health, want, "{name}: Argo CD health ({message})");
        if let Some(e) = self.event {
            assert!(
                d.events.iter().any(|n| n.reason == e),
                "{name}: event {e} in {:?}",
                d.events
            );
        }
        assert_eq!(d.outcome, self.outcome, "{name}: outcome");
        d
    }
}

fn img2() -> StreamJobSpec {
    with_image("runtime:2")
}

fn shadow(mut s: StreamJobSpec) -> StreamJobSpec {
    s.upgrade.strategy = UpgradeStrategy::Shadow;
    s
}

fn mode(mut s: StreamJobSpec, m: UpgradeMode) -> StreamJobSpec {
    s.upgrade.mode = m;
    s
}

fn suspended(mut s: StreamJobSpec) -> StreamJobSpec {
    s.state = JobState::Suspended;
    s
}

fn plan_pod(
    status: &StreamJobStatus,
    phase: PodPhase,
    code: Option<i32>,
    msg: Option<&str>,
) -> PodObs {
    let u = status.upgrade.as_ref().unwrap();
    let mut p = PodObs::new(
        &plan_pod_name(JOB, &u.to, &u.started_at),
        PodRole::Plan,
        phase,
    );
    p.exit_code = code;
    p.message = msg.map(String::from);
    p
}

fn standby_name_of(status: &StreamJobStatus) -> String {
    let u = status.upgrade.as_ref().unwrap();
    pod_name(JOB, &u.to, &u.started_at)
}

fn pending(mut s: StreamJobStatus, reason: &str, stop: bool) -> StreamJobStatus {
    s.pending_savepoint = Some(PendingSavepoint {
        request_id: "7".into(),
        reason: reason.into(),
        stop,
        started_at: ts(100),
    });
    s
}

/// Status after an in-place switch: deployment is the new pod NEW of `target`.
fn switched(target: &StreamJobSpec, stage: &str) -> StreamJobStatus {
    let mut s = with_upgrade(running(), stage, target, Some("s3://b/sp/clicks/sp-1"));
    s.deployment = Some(DeploymentStatus {
        spec_hash: hash(target),
        image: target.image.clone(),
        parallelism: Some(target.parallelism),
        started_from: StartedFrom::Savepoint,
        path: Some("s3://b/sp/clicks/sp-1".into()),
        workload: Some(NEW.into()),
        started_at: Some(ts(200)),
    });
    s
}

fn new_world(now: i64, state: RunState, ck: Option<&str>) -> Observed {
    let mut o = Observed::new(t(now));
    o.pods.push(pod(NEW, PodPhase::Running));
    let mut j = js(state, ck);
    j.restored_from = Some(RestoredFrom {
        kind: "savepoint".into(),
        path: Some("s3://b/sp/clicks/sp-1".into()),
    });
    set_job(&mut o, NEW, j);
    o
}

fn rollback_status(stage: &str) -> StreamJobStatus {
    // Rolling back from img2 (failed, in pod NEW) to base_spec.
    let mut s = switched(&img2(), "InPlace/Restoring");
    let u = s.upgrade.as_mut().unwrap();
    u.from = Some(hash(&img2()));
    u.to = hash(&base_spec());
    u.target_spec = Some(serde_json::to_string(&base_spec()).unwrap());
    u.step = stage.into();
    s
}

#[allow(clippy::too_many_lines)]
fn cases() -> Vec<Case> {
    let mut v = Vec::new();
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
        .acts(&["CreatePod:*"])
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
        .acts(&["CreatePod:*:from=s3://b/sp/initial"]),
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
            .acts(&["CreatePod:clicks-old"])
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
        .acts(&["CreatePod:clicks-old"])
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
        .acts(&["CreatePod:clicks-old:from=s3://b/sp/clicks/sp-0"])
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
            .acts(&["DeletePod:clicks-old"])
            .conds(&["Degraded"]),
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
        .acts(&["DeletePod:clicks-old"])
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
        .acts(&["DeletePod:clicks-old"])
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
        .acts(&["TriggerSavepoint"])
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
            .acts(&["TriggerSavepoint"])
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
            .acts(&["CreatePlanPod:s3://b/ck/clicks/6"])
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
        .acts(&["CreatePlanPod:s3://b/ck/clicks/6"])
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
        .acts(&["CreatePlanPod:s3://b/ck/clicks/6"])
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
        .acts(&["CreatePlanPod:s3://b/ck/clicks/6"])
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
        .acts(&["CreatePlanPod:s3://b/ck/clicks/6"])
        .conds(&["Upgrading", "Ready"]),
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
    let del_plan: &'static str = Box::leak(format!("DeletePod:{plan_name}").into_boxed_str());
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
                    "DeletePod:{}",
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
                        "DeletePod:{}",
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
            vec![del_plan, "CreatePlanPod:s3://b/ck/clicks/6"].into_boxed_slice(),
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
        .acts(&["CreatePlanPod:s3://b/ck/clicks/6"])
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
        .acts(&["TriggerSavepoint:stop"])
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
        .acts(&["TriggerSavepoint:stop"])
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
        .acts(&["CreatePlanPod:s3://b/ck/clicks/6"])
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
    let del_lsplan: &'static str = Box::leak(
        format!("DeletePod:{}", plan_pod_name(JOB, &hash(&ls), &ts(100))).into_boxed_str(),
    );
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
        .acts(&["DeletePod:clicks-old"])
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
        .acts(&["CreatePod:*:from=s3://b/sp/clicks/sp-1"])
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
        .acts(&["CreatePod:clicks-new:from=s3://b/sp/clicks/sp-1"])
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
        .acts(&["Cancel:clicks-new", "DeletePod:clicks-new"])
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
        .acts(&["CreatePod:*:from=s3://b/sp/clicks/sp-1"])
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
        .acts(&["CreatePlanPod:s3://b/ck/clicks/9"]),
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
        .acts(&["CreatePod:*:standby"])
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
    let del_sb: &'static str = Box::leak(format!("DeletePod:{sb}").into_boxed_str());
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
        .acts(&["TriggerSavepoint:stop:standby"])
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
        .acts(&["CreatePod:*:from=s3://b/sp/clicks/sp-1"])
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
        .acts(&["Cancel:clicks-old", "DeletePod:clicks-old"])
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
        .acts(&["TriggerSavepoint:stop"])
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
        .acts(&["DeletePod:clicks-old"])
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
        .acts(&["Cancel:clicks-stray", "DeletePod:clicks-stray"]),
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
        .acts(&["CreatePod:*:from=s3://b/sp/clicks/sp-2"])
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
        .acts(&["CreatePlanPod:s3://b/sp/clicks/sp-2"])
        .conds(&["Upgrading"]),
    );
    let mut res_plan = susp.clone();
    {
        let u = res_plan.upgrade.as_mut().unwrap();
        u.step = "Resume/Planning".into();
        u.from = Some(hash(&spec));
        u.to = hash(&img2());
        u.target_spec = Some(serde_json::to_string(&img2()).unwrap());
    }
    let mut o = Observed::new(t(210));
    o.pods.push(plan_pod(&res_plan, PodPhase::Failed, Some(3), Some(r#"{"operators":[{"uid":"gen","status":"incompatible","reason":"state type changed"}]}"#)));
    let del_rplan: &'static str = Box::leak(
        format!("DeletePod:{}", plan_pod_name(JOB, &hash(&img2()), &ts(100))).into_boxed_str(),
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
            vec![del_rplan, "CreatePod:*:from=s3://b/sp/clicks/sp-2"].into_boxed_slice(),
        ))
        .conds(&["Upgrading"]),
    );
    let mut res_blocked = res_plan.clone();
    res_blocked.upgrade.as_mut().unwrap().step = "Resume/Blocked".into();
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
        .acts(&["CreatePod:*:from=s3://b/sp/clicks/sp-2"])
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
    v
}

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
            .all(|a| !matches!(a, Action::DeletePod { .. }))
    );
    assert_eq!(
        d.status.savepoint_history.last().unwrap().reason.as_deref(),
        Some("upgrade")
    );
    assert_eq!(d.savepoints_completed.len(), 1);
    // The next decision (status persisted) deletes the old pod.
    let d2 = run(&img2(), &d.status, &world(111));
    assert!(d2.actions.contains(&Action::DeletePod { name: OLD.into() }));
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
            .any(|a| matches!(a, Action::TriggerSavepoint { .. }))
    );
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
            time: Some(ts(i * 100)),
            reason: Some("periodic".into()),
            spec_hash: None,
        })
        .collect();
    st.last_savepoint = st.savepoint_history.last().cloned();
    let d = run(&spec, &st, &world(500));
    let disposed: Vec<String> = d
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::DisposeSavepoints { paths } => Some(paths.clone()),
            _ => None,
        })
        .flatten()
        .collect();
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

#[test]
fn suspended_savepoint_is_protected() {
    let mut spec = suspended(base_spec());
    spec.savepoints.as_mut().unwrap().history.max_count = 1;
    let mut st = with_upgrade(running(), "Suspend/Suspended", &base_spec(), Some("sp-s"));
    st.deployment = None;
    st.savepoint_history = vec![
        SavepointInfo {
            path: "sp-s".into(),
            time: Some(ts(0)),
            reason: Some("suspend".into()),
            spec_hash: None,
        },
        SavepointInfo {
            path: "sp-x".into(),
            time: Some(ts(10)),
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
    assert!(t.contains(&"DeletePod:clicks-orphan".to_string()), "{t:?}");
    assert!(t.contains(&"DeletePod:clicks-plan-old".to_string()));
    assert!(t.contains(&"DeletePod:clicks-dispose-1".to_string()));
    assert!(!t.contains(&"DeletePod:clicks-dispose-2".to_string()));
    assert!(t.contains(&"DeleteConfig:deadbeef".to_string()));
    assert!(
        !t.iter()
            .any(|x| x == &format!("DeleteConfig:{}", hash(&base_spec())))
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
            .all(|a| !matches!(a, Action::CreatePod(_) | Action::DeletePod { .. }))
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
            .any(|a| matches!(a, Action::CreatePod(p) if p.name == created))
    );
}

// ---------------------------------------------------------------------------------------------
// Every stage × every observation: the machine only makes declared moves and keeps the WAL rule.
// ---------------------------------------------------------------------------------------------

fn all_stages() -> Vec<Option<Stage>> {
    let kinds = [
        Kind::InPlace,
        Kind::Shadow,
        Kind::Suspend,
        Kind::Resume,
        Kind::Rollback,
    ];
    let steps = [
        Step::Planning,
        Step::Blocked,
        Step::StartingStandby,
        Step::Savepointing,
        Step::Stopped,
        Step::Restoring,
        Step::RolledBack,
        Step::Aborted,
        Step::Suspended,
    ];
    let mut v = vec![None];
    for k in kinds {
        for s in steps {
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
            .map(|u| pod_name(JOB, &u.to, &u.started_at))
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
                    let mut st = match stage {
                        None => running(),
                        Some(s) => {
                            let target = if s.kind == Kind::Rollback {
                                base_spec()
                            } else {
                                spec.clone()
                            };
                            let mut st =
                                with_upgrade(running(), &s.to_string(), &target, Some("sp-1"));
                            if s.kind == Kind::Rollback {
                                st.upgrade.as_mut().unwrap().from = Some(hash(&img2()));
                            }
                            if matches!(s.step, Step::Suspended)
                                || s.kind == Kind::Resume && s.step != Step::Restoring
                            {
                                st.deployment = None;
                            }
                            st
                        }
                    };
                    if pend {
                        st = pending(st, "upgrade", true);
                    }
                    let mut o = world(150);
                    ev(&st, &mut o);
                    let d = decide(&jref(), &spec, &st, &o);
                    let after = d
                        .status
                        .upgrade
                        .as_ref()
                        .map(|u| u.step.parse::<Stage>().unwrap());
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

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

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
    assert_eq!(plan_result(&p), PlanResult::Compatible);
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
    j.problems = vec![crate::control::SourceProblem {
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
        u.step = "InPlace/Restoring".into();
    }
    let observed = Observed::new(chrono::DateTime::from_timestamp(1_000, 0).unwrap());
    let bad = Decision {
        actions: vec![Action::DeletePod { name: "p".into() }],
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
        u.step = "InPlace/Stopped".into();
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
    use crate::workers::{CoordinatorObs, WorkerObs};
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
        },
        WorkerObs {
            name: "gone-w0".into(),
            coordinator: "gone".into(),
            coordinator_uid: "u-gone".into(),
            terminating: false,
        },
    ];
    let d = run(&base_spec(), &running(), &o);
    let t = tags(&d);
    assert!(t.contains(&format!("CreateWorker:{OLD}:1")), "{t:?}");
    assert!(!t.contains(&format!("CreateWorker:{OLD}:0")), "{t:?}");
    assert!(t.contains(&"DeletePod:gone-w0".to_string()), "{t:?}");
}
