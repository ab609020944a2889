//! Issue #38: no decision compares a job pod's clock with the operator's. The one place that did
//! (a savepoint whose request's answer was lost, recognised by its completion time) now goes by
//! the path the job reported when it was asked; shown here with the pod's clock 30 s off either
//! way. (Checkpoints are stamped when first seen, on the operator's clock: `observe_active`.)

use super::*;

const SP0: &str = "s3://b/sp/clicks/sp-0";
const SP1: &str = "s3://b/sp/clicks/sp-1";

/// An in-place upgrade's stop-with-savepoint requested at t=100 whose answer was lost (no request
/// id), when the job's last savepoint was `previous`.
fn answer_lost(previous: Option<&str>) -> StreamJobStatus {
    let sp = with_upgrade(running(), "InPlace/Savepointing", &img2(), None);
    let mut s = pending(sp, "upgrade", true);
    let p = s.pending_savepoint.as_mut().unwrap();
    p.request_id = String::new();
    p.previous = previous.map(String::from);
    s
}

/// The world at `now` with the job running and reporting `path` as its last savepoint, completed
/// at `completed` on its own clock.
fn reporting(now: i64, path: &str, completed: i64) -> Observed {
    let mut o = world(now);
    let mut j = js(RunState::Running, Some("s3://b/ck/clicks/6"));
    j.last_savepoint = Some(Snapshot {
        id: Some(7),
        path: path.into(),
        completed_at: Some(ts(completed)),
        duration_ms: Some(10),
    });
    set_job(&mut o, OLD, j);
    o
}

fn recorded(d: &Decision) -> Option<&str> {
    d.status.last_savepoint.as_ref().map(|s| s.path.as_str())
}

#[test]
fn a_savepoint_whose_answer_was_lost_is_found_whatever_the_pod_clock() {
    // it completed at t=108 on the operator's clock; the pod says 78, 108 or 138
    for skew in [-30, 0, 30] {
        for previous in [Some(""), Some(SP0)] {
            let d = run(
                &img2(),
                &answer_lost(previous),
                &reporting(110, SP1, 108 + skew),
            );
            assert_eq!(
                recorded(&d),
                Some(SP1),
                "pod clock {skew:+} s, previous {previous:?}"
            );
            assert!(d.status.pending_savepoint.is_none());
        }
    }
}

#[test]
fn an_older_savepoint_is_never_taken_for_the_one_asked_for() {
    // SP0 was the job's last savepoint when the new one was asked for; its pod's clock runs
    // 40 s ahead, so SP0 claims to have completed after the request
    let d = run(&img2(), &answer_lost(Some(SP0)), &reporting(110, SP0, 140));
    assert_ne!(recorded(&d), Some(SP0), "within the grace: still waiting");
    assert!(d.status.pending_savepoint.is_some());
    // past the grace for a request never sent: asked again, SP0 still not taken
    let d = run(&img2(), &answer_lost(Some(SP0)), &reporting(200, SP0, 230));
    assert_ne!(recorded(&d), Some(SP0));
    assert!(
        d.actions
            .iter()
            .any(|a| matches!(a, Action::TakeSavepoint { stop: true, .. })),
        "{:?}",
        d.actions
    );
}

#[test]
fn a_request_recorded_by_an_older_operator_falls_back_to_the_completion_time() {
    let d = run(&img2(), &answer_lost(None), &reporting(110, SP1, 108));
    assert_eq!(recorded(&d), Some(SP1));
    let d = run(&img2(), &answer_lost(None), &reporting(110, SP0, 90));
    assert_eq!(recorded(&d), None, "completed before the request");
}

#[test]
fn a_trigger_records_the_jobs_last_savepoint() {
    let sp = with_upgrade(running(), "InPlace/Savepointing", &img2(), None);
    let d = run(&img2(), &sp, &reporting(110, SP0, 50));
    assert_eq!(
        d.status
            .pending_savepoint
            .as_ref()
            .and_then(|p| p.previous.as_deref()),
        Some(SP0)
    );
    let d = run(&img2(), &sp, &world(110));
    assert_eq!(
        d.status
            .pending_savepoint
            .as_ref()
            .and_then(|p| p.previous.as_deref()),
        Some(""),
        "a job with no savepoint yet"
    );
}
