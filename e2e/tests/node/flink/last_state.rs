//! The end of g: a promoted version hits a bad record and crash-loops, so no savepoint can be
//! taken, and its fix is applied with `spec.upgrade.mode: last-state` — the case last-state is
//! for. The pre-check runs against the latest checkpoint (an incompatible fix is refused there,
//! the crash-looping run untouched), and the good fix restores the newest checkpoint of the run
//! it replaces on MinIO, even one completed after the checkpoint status recorded: output that
//! checkpoint committed is not written again (the exactly-once count at the end of g).

use super::*;

/// Applies the StreamJob with upgrade mode, revision, rate and more test job arguments.
type ApplyIn<'a> = dyn Fn(&str, &str, u32, &[&str]) + 'a;

/// `running_hash` is the promoted version's spec hash; the fix is revision 3 and runs out.
pub(super) async fn fix_a_crash_loop(
    env: &'static TestEnv,
    job: &Job,
    running_hash: &str,
    apply_in: &ApplyIn<'_>,
) {
    let jm = pods_with_role(env, job, "runtime").await;
    let jm_name = jm[0].metadata.name.clone().expect("JobManager name");
    // a bad record for revision 2: every record through the throttle on that TaskManager fails,
    // and Flink restarts the job from its latest checkpoint again and again (its restart
    // strategy never gives up)
    touch_in_a_task_manager(env, job, POISON_FILE).await;
    let t_loop = Instant::now();
    let o = wait_job(
        env,
        job,
        "the job restarting on the bad record",
        FLINK_TIMEOUT,
        |o| {
            condition(o, "Degraded").is_some_and(|c| {
                c["status"] == "True"
                    && c["reason"] == "JobRestarting"
                    && c["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("poison-file"))
            })
        },
    )
    .await;
    eprintln!(
        "crash loop seen in status {:?} after the poison: {}",
        t_loop.elapsed(),
        condition(&o, "Degraded").unwrap()["message"]
    );

    // a fix that retypes the count state: refused against the latest checkpoint, which the
    // check pod reads (its arguments name a chk-N), with the crash-looping run left alone
    let t_refused = Instant::now();
    apply_in("last-state", "3", 0, &["--count-state", "string"]);
    let plan_args = std::sync::Mutex::new(std::collections::BTreeSet::<String>::new());
    let o = wait_job_watching(
        env,
        job,
        "the last-state refusal",
        || async {
            for pod in pods_with_role(env, job, "plan").await {
                let args = pod
                    .spec
                    .iter()
                    .flat_map(|s| &s.containers)
                    .flat_map(|c| c.args.iter().flatten())
                    .cloned();
                plan_args.lock().unwrap().extend(args);
            }
        },
        |o| {
            status(o)["upgrade"]["step"]
                .as_str()
                .is_some_and(|s| s.ends_with("/Blocked"))
        },
    )
    .await;
    let message = status(&o)["upgrade"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains("state \"count\"") && message.contains("StateMigrationException"),
        "the refusal names the retyped state: {message:?}"
    );
    assert_eq!(deployed_hash(&o), running_hash, "the running version stays");
    let checked: Vec<String> = plan_args
        .into_inner()
        .unwrap()
        .into_iter()
        .filter(|a| a.contains("/chk-"))
        .collect();
    assert!(
        !checked.is_empty(),
        "the check pod read a checkpoint (last-state, no savepoint): {message}"
    );
    assert_eq!(
        pods_with_role(env, job, "runtime").await[0].metadata.uid,
        jm[0].metadata.uid,
        "the JobManager was not touched"
    );
    eprintln!(
        "last-state fix refused {:?} after apply, checked against {checked:?}: {message}",
        t_refused.elapsed()
    );

    // the good fix: no savepoint (the job is not running), so the newest checkpoint on MinIO
    let newest_before = newest_checkpoint(env, job, &jm_name).await;
    let recorded = recorded_checkpoint(env, job).await;
    let t_fix = Instant::now();
    apply_in("last-state", "3", 0, &[]);
    wait_job(
        env,
        job,
        "the fix running from a checkpoint",
        FLINK_TIMEOUT,
        |o| {
            let d = &status(o)["deployment"];
            phase(o) == "Running"
                && status(o)["upgrade"].is_null()
                && deployed_hash(o) != running_hash
                && d["startedFrom"] == "checkpoint"
                && status(o)["lastStableSpecHash"] == d["specHash"]
        },
    )
    .await;
    let fixed_after = t_fix.elapsed();
    let new_jm = pods_with_role(env, job, "runtime")
        .await
        .into_iter()
        .find(|p| p.metadata.uid != jm[0].metadata.uid)
        .unwrap_or_else(|| panic!("a JobManager of the fix\n{}", dump(env, &job.ns)));
    let new_jm_name = new_jm.metadata.name.clone().expect("JobManager name");
    let log = env
        .kubectl_ok(&["logs", "-n", &job.ns, &new_jm_name], None)
        .expect("the fix's JobManager log");
    let continued = log
        .lines()
        .find_map(|l| {
            l.split("checkpoint of the run it replaces, ")
                .nth(1)
                .and_then(|rest| rest.split(' ').next())
        })
        .unwrap_or_else(|| panic!("flink-jobmanager named no checkpoint of revision 2:\n{log}"));
    let continued_id = checkpoint_number(&format!("{}/_metadata", continued.trim_end_matches('/')))
        .unwrap_or_else(|| panic!("not a checkpoint: {continued}"));
    let newest_after = newest_checkpoint(env, job, &jm_name).await;
    assert!(
        continued_id >= newest_before && continued_id == newest_after,
        "the fix restored checkpoint {continued_id}; revision 2's newest on MinIO was \
         {newest_before} at apply and {newest_after} after, status recorded {recorded}"
    );
    let events = events_of(env, job).await;
    eprintln!(
        "FIGURES last-state: fix promoted {fixed_after:?} after apply, from checkpoint \
         {continued_id} (status recorded {recorded}); events {:?}",
        events
            .iter()
            .filter(|e| e.contains("Checkpoint") || e.contains("checkpoint"))
            .collect::<Vec<_>>()
    );
}

/// The messages of the job's namespace's events, `reason: message`.
async fn events_of(env: &TestEnv, job: &Job) -> Vec<String> {
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(env.client().await.unwrap(), &job.ns);
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|e| {
            format!(
                "{}: {}",
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default()
            )
        })
        .collect()
}

/// [`wait_job`] that also calls `watch` at every poll (to see short-lived pods).
async fn wait_job_watching<W, F>(
    env: &TestEnv,
    job: &Job,
    what: &str,
    watch: impl Fn() -> W,
    done: F,
) -> DynamicObject
where
    W: std::future::Future<Output = ()>,
    F: Fn(&DynamicObject) -> bool,
{
    poll_until(what, FLINK_TIMEOUT, Duration::from_millis(250), || async {
        watch().await;
        let o = sj_api(env.client().await?, &job.ns).get(&job.name).await?;
        Ok(done(&o).then_some(o))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", dump(env, &job.ns)))
}
