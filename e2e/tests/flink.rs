//! Issue #17 (part 1): real Apache Flink 1.20 and 2.3 JVMs (jars from Maven Central, started by
//! the harness as standalone application clusters), driven through the REST client and the
//! savepoint pre-check the Flink engine uses (as pods on Kubernetes:
//! `e2e/tests/operator/flink_cluster.rs`).
//!
//! Per version, one stateful job (`flink/testjob`: sequence source → keyed running count in
//! ValueState → FileSink rolling on checkpoints) is savepointed by trigger id, pre-checked
//! against compatible and incompatible revisions (renamed stateful uid, with and without
//! allowNonRestoredState, changed max parallelism) while it keeps running, stopped with a
//! savepoint and restored as revision 2 at another parallelism, and run to the end. Every
//! number must appear in exactly one committed line, and each key's running counts must be
//! exactly 1..=n: state carried across the savepoint and the rescale, nothing lost, nothing
//! duplicated. Across versions: a 2.3 savepoint for a 1.20 target is refused, and a 1.20
//! savepoint with pending sink commits for a 2.3 target is refused (that restore fails).
//!
//! Issue #33: `flink-check --dispose` (the dispose pod) deletes a real savepoint inside the job's
//! savepoints directory and refuses, leaving it untouched, anything else: a directory without
//! `_metadata`, a real savepoint outside that directory (also when reached through `..`), the
//! directory itself, and a savepoint whose format the running Flink cannot read. The pre-check
//! reads the savepoint through a scheme only a Flink file system plugin provides (the tests'
//! plugin, `flink/testplugin`, standing in for an object store's).

#![allow(clippy::unwrap_used)] // test code

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use streamjob_e2e::flink::{
    ApplicationSpec, FlinkCluster, FlinkDist, JOB_ID, PLUGIN_SCHEME, TEST_JOB_CLASS,
    check_counting_output, counting_job_args,
};
use streamjob_e2e::process::Watchdog;
use streamjob_e2e::wait::poll_until;
use streamjob_operator::engine::flink::precheck::{CheckRequest, Verdict};
use streamjob_operator::engine::flink::rest::{Operation, trigger_id};

const RECORDS: u64 = 30_000;
const KEYS: u64 = 10;
const START_TIMEOUT: Duration = Duration::from_secs(120);

fn job_args(out: &Path, revision: &str, extra: &[&str]) -> Vec<String> {
    // 500 per source subtask: the job runs long enough to be savepointed and upgraded mid-stream
    let out = format!("file://{}", out.display());
    counting_job_args(&out, RECORDS, KEYS, 500, revision, extra)
}

fn conf(dir: &Path) -> Vec<(String, String)> {
    vec![
        ("execution.checkpointing.interval".into(), "1s".into()),
        (
            "execution.checkpointing.dir".into(),
            format!("file://{}/checkpoints", dir.display()),
        ),
        (
            "state.checkpoints.dir".into(),
            format!("file://{}/checkpoints", dir.display()),
        ),
    ]
}

fn request(dist: &FlinkDist, savepoint: &str, args: Vec<String>, allow: bool) -> CheckRequest {
    CheckRequest {
        savepoint: savepoint.to_string(),
        jar: dist.test_job_jar().display().to_string(),
        entry_class: Some(TEST_JOB_CLASS.to_string()),
        args,
        parallelism: 3,
        allow_non_restored_state: allow,
        conf: vec![],
    }
}

fn check(dist: &FlinkDist, savepoint: &str, args: Vec<String>, allow: bool) -> Verdict {
    let (verdict, took) = dist.check(&request(dist, savepoint, args, allow)).unwrap();
    eprintln!(
        "pre-check on Flink {} took {:.1} s: {} {:?}",
        dist.version,
        took.as_secs_f64(),
        verdict.verdict,
        verdict.outcome(&[])
    );
    verdict
}

async fn savepoint(cluster: &FlinkCluster, trigger: &str, stop: bool, dir: &Path) -> String {
    let target = format!("file://{}/savepoints", dir.display());
    // Triggered twice under the same id (an operator retrying, or restarted): one savepoint.
    for _ in 0..2 {
        if stop {
            cluster
                .rest
                .stop_with_savepoint(JOB_ID, trigger, &target)
                .await
                .unwrap();
        } else {
            cluster
                .rest
                .trigger_savepoint(JOB_ID, trigger, &target)
                .await
                .unwrap();
        }
    }
    poll_until(
        "savepoint",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || async {
            match cluster.rest.savepoint(JOB_ID, trigger).await? {
                Operation::InProgress => Ok(None),
                Operation::Completed(Some(location)) => Ok(Some(location)),
                other => Err(streamjob_e2e::Error::Other(format!("savepoint: {other:?}"))),
            }
        },
    )
    .await
    .unwrap()
}

fn savepoint_dirs(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("savepoints"))
        .map(|d| d.filter(|e| e.is_ok()).count())
        .unwrap_or(0)
}

async fn checkpoints_at_least(cluster: &FlinkCluster, n: u64) {
    poll_until(
        "completed checkpoints",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || async {
            let c = cluster.rest.checkpoints(JOB_ID).await?;
            Ok((c.completed >= n).then_some(c))
        },
    )
    .await
    .unwrap();
}

/// What one version's scenario leaves for the cross-version checks.
struct Scenario {
    dir: Dir,
    /// A savepoint taken while the job ran.
    savepoint: String,
    /// The uids of the job's operators (from the pre-check of the running version).
    running_uids: Vec<String>,
}

/// Runs the counting job on `dist` at parallelism 2, savepoints it by trigger id, pre-checks
/// revisions against the savepoint, stops it with a savepoint and restores that at parallelism
/// 3 with revision 2, runs to the end and counts every committed line.
async fn savepoint_precheck_upgrade(dist: &FlinkDist, format_version: u32) -> Scenario {
    // Kept when the test fails (the panic names the logs in it); removed when it passes.
    let dir = Dir(tempfile::Builder::new()
        .prefix("streamjob-flink-")
        .tempdir()
        .unwrap()
        .keep());
    let watchdog = Watchdog::start(dir.path()).unwrap();
    let out = dir.path().join("out");
    let tag = dist.version.replace('.', "-");

    // 1. Revision 1 at parallelism 2.
    let spec = ApplicationSpec {
        job_jar: dist.test_job_jar(),
        entry_class: TEST_JOB_CLASS.into(),
        args: job_args(&out, "1", &[]),
        parallelism: 2,
        task_managers: 1,
        slots_per_task_manager: 2,
        from_savepoint: None,
        allow_non_restored_state: false,
        conf: conf(dir.path()),
    };
    let old = FlinkCluster::start(
        dist,
        dir.path(),
        &format!("flink-{tag}-r1"),
        &spec,
        Some(&watchdog),
    )
    .unwrap();
    old.wait_job("job running", START_TIMEOUT, |j| j.fully_running())
        .await
        .unwrap();
    eprintln!(
        "figure: Flink {} JVMs started → every task RUNNING: {:.1} s",
        dist.version,
        old.age().as_secs_f64()
    );
    assert_eq!(old.rest.flink_version().await.unwrap(), dist.version);
    checkpoints_at_least(&old, 2).await;

    // 2. A savepoint by trigger id (asked twice: one savepoint).
    let sp1 = savepoint(
        &old,
        &trigger_id(&format!("{tag}/savepoint/1")),
        false,
        dir.path(),
    )
    .await;
    assert_eq!(
        savepoint_dirs(dir.path()),
        1,
        "one savepoint for one trigger id"
    );
    // Flink caches checkpoint statistics for a few seconds (rest.cache.checkpoint-statistics.*).
    poll_until(
        "the savepoint in the job's checkpoint statistics",
        Duration::from_secs(30),
        Duration::from_millis(500),
        || async {
            let latest = old.rest.checkpoints(JOB_ID).await?.latest_savepoint;
            Ok(
                (latest.and_then(|s| s.external_path).as_deref() == Some(sp1.as_str()))
                    .then_some(()),
            )
        },
    )
    .await
    .unwrap();

    // 3. The pre-check against it with this version's jars, the job still running.
    let compatible = check(dist, &sp1, job_args(&out, "2", &[]), false);
    assert_eq!(compatible.verdict, "compatible");
    assert_eq!(compatible.format_version, Some(format_version));
    // The running version's uids (kept from its own check) name the ids of a 1.x savepoint.
    let running_uids: Vec<String> = compatible
        .operators
        .iter()
        .filter_map(|o| o.uid.clone())
        .collect();
    assert!(
        running_uids.contains(&"counter".to_string()),
        "{running_uids:?}"
    );

    // Issue #33: the same savepoint through a scheme only a Flink plugin provides, as s3:// is
    // on an object store: the checker loads Flink's plugins folder (and without it, Flink knows
    // no such scheme: every upgrade of a job on an object store was blocked).
    let through_plugin = format!("{PLUGIN_SCHEME}://{}", local(&sp1).display());
    let via_plugin = check(dist, &through_plugin, job_args(&out, "2", &[]), false);
    assert_eq!(via_plugin.verdict, "compatible", "{via_plugin:?}");
    assert_eq!(via_plugin.format_version, Some(format_version));
    let (no_plugins, _) = dist
        .check_with_plugins(
            &request(dist, &through_plugin, job_args(&out, "2", &[]), false),
            &dir.path().join("no-plugins"),
        )
        .unwrap();
    let why = no_plugins.message.unwrap_or_default();
    assert!(
        no_plugins.verdict == "error" && why.contains("UnsupportedFileSystemSchemeException"),
        "{why}"
    );

    let renamed = check(
        dist,
        &sp1,
        job_args(&out, "2", &["--counter-uid", "counter-v2"]),
        false,
    );
    let reason = renamed.outcome(&running_uids).unwrap_err();
    assert!(
        reason.starts_with("operator uid \"counter\" (id 0da08f51eaa85fc298e176a139b3649a)"),
        "{reason}"
    );
    assert_eq!(renamed.problems.len(), 1, "{renamed:?}");

    let dropped = check(
        dist,
        &sp1,
        job_args(&out, "2", &["--counter-uid", "counter-v2"]),
        true,
    );
    assert_eq!(dropped.outcome(&running_uids), Ok(()));
    assert_eq!(
        dropped
            .not_restored
            .iter()
            .map(|o| o.operator_id.as_str())
            .collect::<Vec<_>>(),
        ["0da08f51eaa85fc298e176a139b3649a"]
    );

    let rescaled = check(
        dist,
        &sp1,
        job_args(&out, "2", &["--max-parallelism", "256"]),
        false,
    );
    let reason = rescaled.outcome(&running_uids).unwrap_err();
    // Every operator's key groups change: one reason names them all.
    assert!(
        reason.contains("operator uid \"counter\", ")
            && reason.ends_with(": max parallelism changed from 128 to 256 (key groups of the saved state would not line up)"),
        "{reason}"
    );
    assert_eq!(rescaled.problems.len(), 5, "{rescaled:?}");
    assert_eq!(
        old.wait_job("still running", Duration::from_secs(5), |j| j.state
            == "RUNNING")
            .await
            .unwrap()
            .state,
        "RUNNING",
        "the checks did not touch the running job"
    );

    // 4. Stop with a savepoint; revision 2 at parallelism 3 restores it.
    let stall = Instant::now();
    let sp2 = savepoint(
        &old,
        &trigger_id(&format!("{tag}/stop/2")),
        true,
        dir.path(),
    )
    .await;
    old.wait_job("stopped", Duration::from_secs(30), |j| {
        j.state == "FINISHED"
    })
    .await
    .unwrap();
    old.stop();
    let spec = ApplicationSpec {
        args: job_args(&out, "2", &[]),
        parallelism: 3,
        slots_per_task_manager: 3,
        from_savepoint: Some(sp2.clone()),
        ..spec
    };
    let new = FlinkCluster::start(
        dist,
        dir.path(),
        &format!("flink-{tag}-r2"),
        &spec,
        Some(&watchdog),
    )
    .unwrap();
    new.wait_job("job running from the savepoint", START_TIMEOUT, |j| {
        j.fully_running()
    })
    .await
    .unwrap();
    eprintln!(
        "figure: Flink {} upgrade (stop-with-savepoint → every task of revision 2 RUNNING): {:.1} s",
        dist.version,
        stall.elapsed().as_secs_f64()
    );
    poll_until(
        "the restore in the job's checkpoint statistics",
        Duration::from_secs(30),
        Duration::from_millis(500),
        || async {
            let restored = new.rest.checkpoints(JOB_ID).await?.restored;
            Ok(
                (restored.and_then(|r| r.external_path).as_deref() == Some(sp2.as_str()))
                    .then_some(()),
            )
        },
    )
    .await
    .unwrap();

    // 5. To the end of the input; then count every line.
    new.wait_job("finished", Duration::from_secs(180), |j| {
        j.state == "FINISHED"
    })
    .await
    .unwrap();
    new.stop();
    drop(watchdog);
    assert_exactly_once(&out);
    Scenario {
        dir,
        savepoint: sp1,
        running_uids,
    }
}

fn assert_exactly_once(out: &Path) {
    let revisions = check_counting_output(out, RECORDS, KEYS).unwrap();
    eprintln!("{RECORDS} numbers exactly once; lines per revision {revisions:?}");
    assert!(revisions.get("1").is_some_and(|&n| n > 0), "{revisions:?}");
    assert!(revisions.get("2").is_some_and(|&n| n > 0), "{revisions:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flink_1_20_savepoint_precheck_upgrade_exactly_once() {
    let v1_20 = FlinkDist::find("1.20.0").unwrap();
    let v2_3 = FlinkDist::find("2.3.0").unwrap();
    let scenario = savepoint_precheck_upgrade(&v1_20, 4).await;

    // Upgrading the Flink version: 2.3 maps every operator, but refuses the 1.x sink
    // committer's pending committables (a restore measured here fails with "Trying to commit
    // incomplete batch of committables" after the old job is gone).
    let out = scenario.dir.path().join("out-2-3");
    let upgrade = check(&v2_3, &scenario.savepoint, job_args(&out, "2", &[]), false);
    assert_eq!(upgrade.format_version, Some(4));
    let reason = upgrade.outcome(&scenario.running_uids).unwrap_err();
    assert!(
        reason.starts_with(
            "operator uid \"Sink Committer: file-sink\": the savepoint was written by Flink 1.x \
             and holds pending committables of this sink committer"
        ),
        "{reason}"
    );
    assert_eq!(upgrade.problems.len(), 1, "{upgrade:?}");
    assert_eq!(upgrade.problems[0].kind, "sink-committer-across-majors");
    dispose_only_the_jobs_savepoints(&v1_20, scenario.dir.path(), &scenario.savepoint);
    std::fs::remove_dir_all(scenario.dir.path()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flink_2_3_savepoint_precheck_upgrade_exactly_once() {
    let v1_20 = FlinkDist::find("1.20.0").unwrap();
    let v2_3 = FlinkDist::find("2.3.0").unwrap();
    let scenario = savepoint_precheck_upgrade(&v2_3, 6).await;

    // A 2.3 savepoint for a 1.20 target: refused by 1.20's own code (restores go forward only).
    let out = scenario.dir.path().join("out-1-20");
    let downgrade = check(&v1_20, &scenario.savepoint, job_args(&out, "2", &[]), false);
    let reason = downgrade.outcome(&scenario.running_uids).unwrap_err();
    assert!(
        reason.contains("savepoint format version 6 cannot be read by Flink 1.20.0"),
        "{reason}"
    );
    // 2.x savepoints carry the uids themselves: no running version needed to name them.
    let renamed = check(
        &v2_3,
        &scenario.savepoint,
        job_args(&out, "2", &["--counter-uid", "x"]),
        false,
    );
    assert!(
        renamed
            .outcome(&[])
            .unwrap_err()
            .starts_with("operator uid \"counter\""),
        "{renamed:?}"
    );
    // 1.20 cannot read a 2.3 savepoint's _metadata: not shown to be a savepoint, so not deleted.
    let (savepoints, checkpoints) = job_dirs(scenario.dir.path());
    let unreadable = v1_20
        .dispose(
            &dispose_args(&savepoints, &checkpoints, &[&scenario.savepoint]),
            scenario.dir.path(),
        )
        .unwrap();
    assert_eq!(unreadable.code, Some(3), "{unreadable:?}");
    let reason = &unreadable.entries("refused")[0].1;
    assert!(
        reason.contains("Flink 1.20.0") && reason.contains("format version 6"),
        "{reason}"
    );
    assert!(local(&scenario.savepoint).join("_metadata").is_file());
    dispose_only_the_jobs_savepoints(&v2_3, scenario.dir.path(), &scenario.savepoint);
    std::fs::remove_dir_all(scenario.dir.path()).unwrap();
}

/// The job's savepoints and checkpoints directories under `dir`, as a spec names them.
fn job_dirs(dir: &Path) -> (String, String) {
    (
        format!("file://{}/savepoints", dir.display()),
        format!("file://{}/checkpoints", dir.display()),
    )
}

/// The dispose pod's arguments (`operator/src/engine/flink/plan.rs` `dispose_pod`).
fn dispose_args<'a>(savepoints: &'a str, checkpoints: &'a str, paths: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--savepoints-dir",
        savepoints,
        "--checkpoints-dir",
        checkpoints,
        "--",
    ];
    args.extend(paths);
    args
}

/// The local file of a `file:` path as Flink writes them (`file:/tmp/…`).
fn local(path: &str) -> PathBuf {
    PathBuf::from(
        path.strip_prefix("file://")
            .or_else(|| path.strip_prefix("file:"))
            .unwrap_or(path),
    )
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &to.join(entry.file_name()));
        } else {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// Issue #33: the dispose pod's checker deletes `savepoint` (a savepoint the job wrote into
/// `<dir>/savepoints`) and refuses every path that is not a savepoint inside that directory,
/// leaving it as it was; a second disposal finds the savepoint missing and succeeds.
fn dispose_only_the_jobs_savepoints(dist: &FlinkDist, dir: &Path, savepoint: &str) {
    let (savepoints, checkpoints) = job_dirs(dir);
    let name = local(savepoint).file_name().unwrap().to_owned();

    // A directory in the savepoints directory that is not a savepoint.
    let stranger = dir.join("savepoints/not-a-savepoint");
    std::fs::create_dir_all(&stranger).unwrap();
    std::fs::write(stranger.join("keep.txt"), "not a savepoint").unwrap();
    // A real savepoint of the same job, but outside the given directories.
    let outside = dir.join("elsewhere").join(&name);
    copy_dir(&local(savepoint), &outside);
    let stranger_path = format!("file://{}", stranger.display());
    let outside_path = format!("file://{}", outside.display());
    let escaping = format!("{savepoints}/../elsewhere/{}", name.to_string_lossy());
    let refusals = dist
        .dispose(
            &dispose_args(
                &savepoints,
                &checkpoints,
                &[&stranger_path, &outside_path, &escaping, &savepoints],
            ),
            dir,
        )
        .unwrap();
    eprintln!("dispose on Flink {}: {}", dist.version, refusals.result);
    assert_eq!(refusals.code, Some(3), "{refusals:?}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&refusals.termination_message).ok(),
        Some(refusals.result.clone()),
        "the operator reads the same answer from the termination message"
    );
    let refused = refusals.entries("refused");
    assert_eq!(
        refused.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(),
        [
            stranger_path.as_str(),
            &outside_path,
            &escaping,
            &savepoints
        ],
        "{refusals:?}"
    );
    assert!(
        refused[0].1 == "not a savepoint: no _metadata in this directory",
        "{refused:?}"
    );
    assert!(
        refused[3]
            .1
            .ends_with("is the job's directory itself, not a savepoint in it"),
        "{refused:?}"
    );
    for (_, reason) in &refused[1..3] {
        assert!(
            reason.starts_with("not a savepoint of this job: ")
                && reason.ends_with(&format!(" is not inside {savepoints} or {checkpoints}")),
            "{reason}"
        );
    }
    assert!(refusals.paths("disposed").is_empty(), "{refusals:?}");
    assert!(
        stranger.join("keep.txt").is_file(),
        "a refused path is left as it was"
    );
    assert!(
        outside.join("_metadata").is_file(),
        "a refused path is left as it was"
    );

    // The job's own savepoint, given as Flink reported it (`file:/…`): deleted.
    let disposal = dist
        .dispose(&dispose_args(&savepoints, &checkpoints, &[savepoint]), dir)
        .unwrap();
    assert_eq!(disposal.code, Some(0), "{disposal:?}");
    assert_eq!(disposal.paths("disposed"), [savepoint], "{disposal:?}");
    assert!(!local(savepoint).exists(), "{savepoint} was disposed");
    assert!(stranger.join("keep.txt").is_file());
    // Again (an operator retrying after a restart): nothing there, nothing refused.
    let again = dist
        .dispose(&dispose_args(&savepoints, &checkpoints, &[savepoint]), dir)
        .unwrap();
    assert_eq!(again.code, Some(0), "{again:?}");
    assert_eq!(again.paths("missing"), [savepoint], "{again:?}");
}

struct Dir(std::path::PathBuf);

impl Dir {
    fn path(&self) -> &Path {
        &self.0
    }
}
