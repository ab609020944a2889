//! User code in user images: the job template (`templates/streamjob-job`, a keyed function
//! written with the job SDK) built as three image tags the process kubelet maps to binaries —
//! `v1` (the template), `v2` (changed logic, same state: `examples/upgrade_compatible.rs`),
//! `v3` (a changed state type: `examples/upgrade_incompatible.rs`) — and `v2-crashing` (v2 with
//! a bug that shows after it has written output).

use std::path::{Path, PathBuf};

use super::*;

/// The template's image tags, mapped to its binaries built with the workspace.
pub(crate) fn template_images() -> Vec<ImageMapping> {
    let debug = Path::new(env!("CARGO_BIN_EXE_process-kubelet"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let bin = |rel: &str| -> PathBuf { debug.join(rel) };
    let image = |tag: &str, binary: PathBuf, env: &[(&str, &str)]| ImageMapping {
        image: format!("streamjob/job-template:{tag}"),
        binary,
        env: env
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect(),
        aliases: vec![],
    };
    vec![
        image("v1", bin("window-totals-job"), &[]),
        image("v2", bin("examples/upgrade_compatible"), &[]),
        image(
            "v2-crashing",
            bin("examples/upgrade_compatible"),
            &[("JOB_TEMPLATE_FAIL_AFTER_RECORDS", "6000")],
        ),
        image("v3", bin("examples/upgrade_incompatible"), &[]),
    ]
}

/// A job of the template's image `v1` (its window is the template's keyed function).
async fn template_job(env: &'static TestEnv, name: &str) -> Job {
    let mut job = new_job(env, name).await;
    job.image = "streamjob/job-template:v1".into();
    job.sdk_window = true;
    job
}

/// Output records closed by revision 2 (`"revision": 2`, a column only v2 writes).
async fn revision_2_records(ctx: &Ctx) -> usize {
    let mut n = 0;
    for key in finished_parts(ctx.env, &ctx.job.bucket, &ctx.job.name)
        .await
        .expect("list output")
    {
        let data = ctx
            .env
            .s3()
            .read(&ctx.job.bucket, &key)
            .await
            .expect("read part");
        n += String::from_utf8_lossy(&data)
            .lines()
            .filter(|l| l.contains("\"revision\":2"))
            .count();
    }
    n
}

/// t. In place, on the template's images: `v2-crashing` (fails after writing output, before a
/// checkpoint) is rolled back to v1 from the same savepoint; `v2` is promoted from a savepoint of
/// v1's state; `v3` (state `windows` changed type) is blocked by the pre-check with the state
/// named and v2 left running untouched; reverted to v2, the job finishes. Every window once,
/// with exact totals; v2's new column in the output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t_user_image_bumps_in_place_rollback_and_blocked_state_change() {
    let env = env().await;
    let mut job = template_job(env, "user-img").await;
    job.count = 90_000;
    job.rate = 2000;
    job.keys = 20;
    // small parts: the crashing version uploads several before it fails
    job.rolling = "{default: {maxPartSize: 1KiB}}";
    let mut ctx = Ctx::new(env, job).await;
    ctx.apply();
    let before = ctx.running_with_checkpoint().await;
    let v1 = deployed_hash(&before);

    // 1. v2-crashing: no checkpoint before it fails, so it is never promoted
    ctx.job.image = "streamjob/job-template:v2-crashing".into();
    ctx.job.checkpoint_interval = "30s";
    ctx.job.readiness_timeout = "40s";
    ctx.apply();
    let o = ctx
        .wait(
            "v2-crashing rolled back to v1",
            Duration::from_secs(150),
            |o| {
                condition_true(o, "RolledBack")
                    && phase(o) == "Running"
                    && deployed_hash(o) == v1
                    && status(o)["deployment"]["startedFrom"] == "savepoint"
            },
        )
        .await;
    assert_started_from_recorded_savepoint(&o);
    assert_eq!(
        status(&o)["deployment"]["image"],
        "streamjob/job-template:v1"
    );
    ctx.log(&format!(
        "rolled back: {}",
        condition(&o, "RolledBack").unwrap()["message"]
    ));

    // 2. v2 in place
    ctx.job.image = "streamjob/job-template:v2".into();
    ctx.job.checkpoint_interval = "1s";
    ctx.job.readiness_timeout = "60s";
    let o = upgrade(&ctx).await;
    assert_eq!(
        status(&o)["deployment"]["image"],
        "streamjob/job-template:v2"
    );
    let v2 = deployed_hash(&o);

    // 3. v3 changes the type of state `windows`: blocked, v2 untouched
    let pods = ctx.runtime_pods().await;
    assert_eq!(pods.len(), 1, "one runtime pod");
    let pid = container_pid(&pods[0]).expect("runtime pid");
    ctx.job.image = "streamjob/job-template:v3".into();
    ctx.apply();
    let o = ctx
        .wait("UpgradeBlocked", Duration::from_secs(90), |o| {
            condition_true(o, "UpgradeBlocked")
        })
        .await;
    let msg = condition(&o, "UpgradeBlocked").unwrap()["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        msg.contains("per-key")
            && msg.contains("state \"windows\" changed type")
            && msg.contains("sum: Float64"),
        "the block names the uid, the state and the new type: {msg:?}"
    );
    assert_eq!(deployed_hash(&o), v2, "v2 still deployed");
    let ck = latest_checkpoint_in_log(env, &pods[0]);
    poll_until(
        "the blocked job keeps checkpointing",
        TIMEOUT,
        Duration::from_millis(200),
        || async { Ok((latest_checkpoint_in_log(env, &pods[0]) >= ck + 2).then_some(())) },
    )
    .await
    .expect("checkpoints continue");
    assert_eq!(container_pid(&pods[0]), Some(pid), "same v2 process");
    assert!(pid_alive(pid), "v2 process {pid} runs");
    ctx.log(&format!("blocked: {msg}"));

    // 4. reverted to v2: the block is lifted, the job finishes on v2
    ctx.job.image = "streamjob/job-template:v2".into();
    ctx.apply();
    let o = ctx.finished().await;
    assert_eq!(deployed_hash(&o), v2, "never redeployed after the block");
    ctx.assert_exactly_once().await;
    let v2_windows = revision_2_records(&ctx).await;
    assert!(v2_windows > 0, "no window closed by revision 2");
    ctx.log(&format!(
        "{v2_windows} windows closed by v2; phases: {:?}",
        ctx.seen()
    ));
}

/// u. Shadow, on the template's images: v1 → v2 by an image bump through a warm standby; every
/// window once, v2's column in the output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full suite: cargo xtask e2e --full"]
async fn u_user_image_bump_by_shadow() {
    let env = env().await;
    let mut job = template_job(env, "user-shadow").await;
    job.strategy = "Shadow";
    let mut ctx = Ctx::new(env, job).await;
    ctx.apply();
    ctx.job.image = "streamjob/job-template:v2".into();
    let o = upgrade(&ctx).await;
    assert_eq!(
        status(&o)["deployment"]["image"],
        "streamjob/job-template:v2"
    );
    assert!(
        ctx.seen()
            .iter()
            .any(|s| s.contains("Shadow/StartingStandby")),
        "no standby step: {:?}",
        ctx.seen()
    );
    only_the_promoted_pod_left(&ctx, &o).await;
    ctx.finished().await;
    ctx.assert_exactly_once().await;
    assert!(revision_2_records(&ctx).await > 0, "no window closed by v2");
    ctx.log(&format!("phases: {:?}", ctx.seen()));
}
