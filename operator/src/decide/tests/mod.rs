//! Table-driven tests of [`decide`]: every stage × every observation that can occur there.
//! The helpers and the `Case` table runner are here; the cases are in `cases_*` (by stage), the
//! named scenarios in `scenarios`, the stage × spec × event sweep in `sweep`, the rest in `misc`.
#![allow(clippy::unwrap_used)]

use super::*;
use crate::decide::{RestoredFrom, Snapshot};
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
            started_at: Some(t(0)),
            dropped_state: Vec::new(),
        }),
        last_stable_spec_hash: Some(hash(&spec)),
        last_stable_spec: Some(serde_json::to_string(&spec).unwrap()),
        last_checkpoint: Some(CheckpointInfo {
            id: 5,
            path: Some("s3://b/ck/clicks/5".into()),
            time: Some(t(50)),
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
    o.runs_fenced = true;
    o.generation = Some(2);
    o.pods.push(pod(OLD, PodPhase::Running));
    o.runtime.push((
        OLD.into(),
        RuntimeObs::Status(Box::new(js(RunState::Running, Some("s3://b/ck/clicks/6")))),
    ));
    o
}

/// [`world`] whose old pod restarted under an older epoch and is fenced: crash-looping after
/// `restarts` restarts, its job unreachable.
fn fenced_world(now: i64, restarts: i32) -> Observed {
    let mut o = world(now);
    o.pods[0].last_exit_code = Some(exit::SUPERSEDED as i32);
    o.pods[0].restarts = restarts;
    o.pods[0].waiting_reason = Some("CrashLoopBackOff".into());
    o.runtime.clear();
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
        step: stage.parse().unwrap(),
        started_at: t(100),
        step_started_at: Some(t(100)),
        savepoint: savepoint.map(String::from),
        message: None,
        dropped_state: Vec::new(),
    });
    s
}

fn stage_of(d: &Decision) -> Option<String> {
    d.status.upgrade.as_ref().map(|u| u.step.to_string())
}

fn tags(d: &Decision) -> Vec<String> {
    d.actions
        .iter()
        .map(|a| match a {
            Action::PrepareVersion { .. } => "PrepareVersion".into(),
            Action::RetireVersion { hash } => format!("RetireVersion:{hash}"),
            Action::Deploy(p) => format!(
                "Deploy:{}{}{}",
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
            Action::Remove { name } => format!("Remove:{name}"),
            Action::ForceRemove { name } => format!("ForceRemove:{name}"),
            Action::AddWorker {
                run: coordinator,
                index,
            } => {
                format!("AddWorker:{coordinator}:{index}")
            }
            Action::CheckCompatibility { from, .. } => format!("CheckCompatibility:{from}"),
            Action::TakeSavepoint { stop, standby, .. } => format!(
                "TakeSavepoint{}{}",
                if *stop { ":stop" } else { "" },
                if *standby { ":standby" } else { "" }
            ),
            Action::Start { from_savepoint, .. } => {
                format!("Start:{}", from_savepoint.as_deref().unwrap_or("-"))
            }
            Action::Cancel { run: pod } => format!("Cancel:{pod}"),
            Action::Dispose { paths } => format!("Dispose:{}", paths.join(",")),
        })
        .collect()
}

/// The chart's Argo CD health check, shipped for `resource.customizations.health`.
const ARGOCD_HEALTH: &str = include_str!("../../../../charts/streamjob-operator/argocd/health.lua");

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
    let before = status.upgrade.as_ref().map(|u| u.step);
    let after = d.status.upgrade.as_ref().map(|u| u.step);
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
    let Some(stage) = before.upgrade.as_ref().map(|u| u.step) else {
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
            !d.actions.contains(&Action::Remove { name: old.clone() }),
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
            .filter(|t| t != "PrepareVersion" && !t.starts_with("RetireVersion"))
            .collect();
        assert_eq!(got, self.actions, "{name}: actions");
        // fencing: every run started gets a new epoch above the recorded one, status (written
        // before any action) covers them all, and a Cancel always precedes its pod's deletion
        let mut last = self.status.epoch.unwrap_or(0);
        for (i, a) in d.actions.iter().enumerate() {
            let epoch = match a {
                Action::Deploy(p) => Some(p.epoch),
                Action::Start {
                    epoch,
                    run: pod,
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
                            dep.started_at,
                            Some(self.obs.now.trunc_subsecs(0)),
                            "{name}: status.deployment.startedAt of started {pod}"
                        );
                    }
                    Some(*epoch)
                }
                Action::Cancel { run: pod } => {
                    assert!(
                        d.actions[i..]
                            .iter()
                            .any(|b| matches!(b, Action::Remove { name } if name == pod)),
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
        &plan_pod_name(JOB, &u.to, &rfc3339(u.started_at)),
        PodRole::Plan,
        phase,
    );
    p.exit_code = code;
    p.message = msg.map(String::from);
    p
}

fn standby_name_of(status: &StreamJobStatus) -> String {
    let u = status.upgrade.as_ref().unwrap();
    pod_name(JOB, &u.to, &rfc3339(u.started_at))
}

fn pending(mut s: StreamJobStatus, reason: &str, stop: bool) -> StreamJobStatus {
    s.pending_savepoint = Some(PendingSavepoint {
        request_id: "7".into(),
        reason: reason.into(),
        stop,
        started_at: t(100),
        previous: None,
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
        started_at: Some(t(200)),
        dropped_state: Vec::new(),
    });
    s
}

fn new_world(now: i64, state: RunState, ck: Option<&str>) -> Observed {
    let mut o = Observed::new(t(now));
    o.runs_fenced = true;
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
    u.step = stage.parse().unwrap();
    s
}

#[allow(clippy::too_many_lines)]
mod cases_idle;
mod cases_in_place;
mod cases_planning;
mod cases_shadow;
mod cases_suspend;
mod clock_skew;
mod misc;
mod scenarios;
mod sweep;

fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    cases_idle::push(&mut v);
    cases_planning::push(&mut v);
    cases_in_place::push(&mut v);
    cases_shadow::push(&mut v);
    cases_suspend::push(&mut v);
    v
}
