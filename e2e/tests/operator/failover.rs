//! Issue #38: the operator with two replicas electing a leader through a Lease. The shared
//! operator of this binary is scaled to zero meanwhile; a second release of the chart watches
//! only the job's namespace, with `replicaCount=2` and a 6 s Lease.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::*;

/// The chart's Lease (`--lease-name` default) and the duration this test installs it with.
const LEASE: &str = "streamjob-operator";
const LEASE_DURATION: Duration = Duration::from_secs(6);
/// How long after a leader stops renewing a standby may be expected to lead: the Lease's duration
/// counted from the standby's first read of the last renewal (it polls every duration / 5), plus
/// one poll and an API round trip on a loaded two-core machine.
const TAKEOVER_BOUND: Duration = Duration::from_secs(6 + 2 + 2);

/// The shared operator scaled to zero with its pods gone, until dropped.
pub(super) struct SharedOperatorPaused {
    env: &'static TestEnv,
    ns: String,
    deployment: String,
}

impl SharedOperatorPaused {
    pub(super) async fn new(env: &'static TestEnv) -> Self {
        let ns = operator(env).await.to_string();
        let client = env.client().await.expect("client");
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        let deployment = deployments
            .list(&ListParams::default())
            .await
            .expect("list Deployments")
            .items
            .first()
            .and_then(|d| d.metadata.name.clone())
            .expect("the shared operator's Deployment");
        env.kubectl_ok(
            &[
                "scale",
                "deployment",
                &deployment,
                "-n",
                &ns,
                "--replicas=0",
            ],
            None,
        )
        .expect("scale the shared operator to zero");
        let pods: Api<Pod> = Api::namespaced(client, &ns);
        poll_until(
            "the shared operator's pods gone",
            TIMEOUT,
            Duration::from_millis(200),
            || async {
                Ok(pods
                    .list(&ListParams::default())
                    .await?
                    .items
                    .is_empty()
                    .then_some(()))
            },
        )
        .await
        .expect("shared operator stopped");
        Self {
            env,
            ns,
            deployment,
        }
    }
}

impl Drop for SharedOperatorPaused {
    fn drop(&mut self) {
        // the tests after this one expect it running and ready again
        self.env.resume_deployment(&self.ns, &self.deployment);
    }
}

/// The Lease's holder and the renewal it last wrote (compared for change only).
async fn lease_record(leases: &Api<Lease>) -> Option<(String, String)> {
    let spec = leases.get_opt(LEASE).await.ok().flatten()?.spec?;
    Some((spec.holder_identity?, spec.renew_time?.0.to_string()))
}

/// The pid of the operator container of `pod`, and how often that container has restarted.
async fn operator_container(pods: &Api<Pod>, pod: &str) -> (u32, i32) {
    poll_until(
        "operator container running",
        TIMEOUT,
        Duration::from_millis(100),
        || async {
            let p = pods.get(pod).await?;
            Ok(container_pid(&p)
                .filter(|pid| pid_alive(*pid))
                .map(|pid| (pid, restarts(&p))))
        },
    )
    .await
    .expect("operator container")
}

fn signal(pid: u32, sig: Signal) {
    kill(Pid::from_raw(i32::try_from(pid).unwrap()), sig).expect("signal the operator");
}

/// Waits until the Lease's record (holder, renewal) is one `wanted` accepts; returns it.
async fn lease_until(
    leases: &Api<Lease>,
    what: &str,
    wanted: impl Fn(&(String, String)) -> bool,
) -> (String, String) {
    poll_until(what, TIMEOUT, Duration::from_millis(100), || async {
        Ok(lease_record(leases).await.filter(|r| wanted(r)))
    })
    .await
    .expect("Lease record")
}

/// Bumps the job to `image` and waits until status says the upgrade's first step has begun;
/// returns the old spec hash and that step. Fails if the job was promoted before a step was seen.
async fn upgrade_to_a_step(ctx: &mut Ctx, image: &str) -> (String, String) {
    let before = ctx.running_with_checkpoint().await;
    let old = deployed_hash(&before);
    ctx.job.image = image.into();
    ctx.apply();
    let o = ctx
        .wait("an upgrade step begun", Duration::from_secs(60), |o| {
            status(o)["upgrade"]["step"].is_string() || promoted(o, &old)
        })
        .await;
    assert!(
        !promoted(&o, &old),
        "promoted before the test could act on a step"
    );
    let step = status(&o)["upgrade"]["step"].as_str().unwrap().to_string();
    (old, step)
}

/// x. Two replicas, a job upgraded twice. In the first upgrade, once status says a step has
/// begun, the leader is stopped (SIGSTOP: what a partition from the API server or a long pause
/// looks like from outside) and stays stopped until the job is promoted: the standby must take
/// the Lease within [`TAKEOVER_BOUND`] and finish the upgrade alone. Resumed, the old leader must
/// exit ("lost the leader lease") and come back as the standby, never acting on what it decided
/// before (the controller checks the Lease's deadline on its own monotonic clock before every
/// write and action). In the second upgrade the leader is SIGKILLed at its first step: its
/// container restarts and the Lease is held again within the bound. Every aggregate once.
/// Last, the leader is stopped by SIGTERM and hands the Lease back: the standby leads within
/// one of its polls, without waiting the Lease out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_two_operator_replicas_fail_over_mid_upgrade() {
    let env = env().await;
    let job = new_job(env, "failover").await;
    let _paused = SharedOperatorPaused::new(env).await;
    let op_ns = env.restricted_namespace("haop").await.expect("namespace");
    let watch = format!("watchNamespaces={{{}}}", job.ns);
    let lease = format!("leaderElection.leaseDuration={}s", LEASE_DURATION.as_secs());
    env.install_operator_chart(
        "ha",
        &op_ns,
        &[
            "logFormat=text",
            "logLevel=info",
            &watch,
            "replicaCount=2",
            &lease,
        ],
    )
    .expect("helm install with two replicas");
    let client = env.client().await.expect("client");
    let leases: Api<Lease> = Api::namespaced(client.clone(), &op_ns);
    let op_pods: Api<Pod> = Api::namespaced(client.clone(), &op_ns);
    let deployments: Api<Deployment> = Api::namespaced(client, &op_ns);
    let deployment = deployments
        .list(&ListParams::default())
        .await
        .expect("list Deployments")
        .items
        .first()
        .and_then(|d| d.metadata.name.clone())
        .expect("the Deployment");
    fixtures::wait_for(
        &deployments,
        &deployment,
        "two available replicas",
        TIMEOUT,
        |d| {
            d.status
                .as_ref()
                .and_then(|s| s.available_replicas)
                .unwrap_or(0)
                >= 2
        },
    )
    .await
    .expect("both replicas available");
    let replicas: Vec<String> = op_pods
        .list(&ListParams::default())
        .await
        .expect("operator pods")
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert_eq!(replicas.len(), 2, "two operator pods: {replicas:?}");

    let mut ctx = Ctx::new(env, job).await;
    // long enough for two upgrades, a Lease handed over and a restart
    ctx.job.count = 90_000;
    ctx.apply();
    ctx.running_with_checkpoint().await;
    let (leader, _) = lease_until(&leases, "the Lease held", |_| true).await;
    assert!(
        replicas.contains(&leader),
        "{leader} is not one of {replicas:?}"
    );
    let standby = replicas.iter().find(|r| **r != leader).unwrap().clone();

    // ---- 1. the leader stopped mid-upgrade ----
    let (old, step) = upgrade_to_a_step(&mut ctx, "streamjob/runtime:v2").await;
    let (pid, restarts) = operator_container(&op_pods, &leader).await;
    signal(pid, Signal::SIGSTOP);
    let stopped = Instant::now();
    ctx.log(&format!("stopped leader {leader} (pid {pid}) at {step}"));
    let (taker, _) = lease_until(&leases, "the Lease taken over", |(h, _)| *h != leader).await;
    let takeover = stopped.elapsed();
    ctx.log(&format!(
        "{taker} holds the Lease {takeover:?} after the stop"
    ));
    assert_eq!(
        taker, standby,
        "the standby takes over, not the stopped leader"
    );
    assert!(
        takeover <= TAKEOVER_BOUND,
        "takeover took {takeover:?} (bound {TAKEOVER_BOUND:?}, Lease {LEASE_DURATION:?})"
    );
    let o = ctx
        .wait(
            "promoted by the standby while the leader is stopped",
            // within the stopped pod's liveness budget (3 × 20 s), so that it is this test that
            // resumes it, not its kubelet that restarts it
            Duration::from_secs(45),
            |o| promoted(o, &old),
        )
        .await;
    assert_eq!(status(&o)["deployment"]["image"], "streamjob/runtime:v2");
    let log_path =
        pod_dir(env, &op_pods.get(&leader).await.expect("pod")).join("operator.stdout.log");
    let log_before = std::fs::read_to_string(&log_path).unwrap_or_default().len();
    signal(pid, Signal::SIGCONT);
    // resumed, it finds its Lease gone by its own clock and exits; its container comes back
    let (_, restarts_after) = poll_until(
        "the resumed leader restarted",
        TIMEOUT,
        Duration::from_millis(200),
        || async {
            let (pid_now, r) = operator_container(&op_pods, &leader).await;
            Ok((r > restarts).then_some((pid_now, r)))
        },
    )
    .await
    .expect("resumed leader exits");
    // its tracing goes to stdout, the error `main` returns to stderr
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    let stderr =
        std::fs::read_to_string(log_path.with_file_name("operator.stderr.log")).unwrap_or_default();
    let resumed = format!("{}{stderr}", log.get(log_before..).unwrap_or_default());
    assert!(
        resumed.contains("lost the leader lease"),
        "the resumed leader must exit for its lost Lease; it logged:\n{resumed}"
    );
    assert!(
        !resumed.contains("savepoint triggered") && !resumed.contains("action failed"),
        "the resumed leader acted:\n{resumed}"
    );
    ctx.log(&format!(
        "{leader} resumed, exited and restarted ({restarts} → {restarts_after} restarts)"
    ));
    assert_eq!(lease_record(&leases).await.expect("Lease").0, standby);

    // ---- 2. the new leader SIGKILLed at the first step of the next upgrade ----
    let (old, step) = upgrade_to_a_step(&mut ctx, "streamjob/runtime:v3").await;
    let (pid, _) = operator_container(&op_pods, &standby).await;
    signal(pid, Signal::SIGKILL);
    let killed = Instant::now();
    // read after the kill: the dead leader renews no more, so any newer renewal is a new hold
    let held = lease_record(&leases).await.expect("Lease");
    let (holder, _) = lease_until(&leases, "the Lease held again", |r| *r != held).await;
    let reheld = killed.elapsed();
    ctx.log(&format!(
        "killed leader {standby} at {step}; {holder} holds the Lease {reheld:?} later"
    ));
    assert!(
        replicas.contains(&holder),
        "{holder} is not one of {replicas:?}"
    );
    assert!(
        reheld <= TAKEOVER_BOUND,
        "Lease held again after {reheld:?}"
    );
    let o = ctx
        .wait("promoted on v3", Duration::from_secs(120), |o| {
            promoted(o, &old)
        })
        .await;
    assert_eq!(status(&o)["deployment"]["image"], "streamjob/runtime:v3");
    ctx.finished().await;
    ctx.assert_exactly_once().await;
    ctx.log(&format!("phases: {:?}", ctx.seen()));

    // ---- 3. the leader stopped on purpose (SIGTERM, as a rolling update or a drain does): it
    // hands the Lease back once its controller has stopped, and the standby leads at its next
    // poll (every duration / 5). Waiting the Lease out instead takes at least 4.8 s here: a
    // whole duration from the standby's first read of a renewal sent at most 1.2 s before the
    // signal ----
    let (pid, _) = operator_container(&op_pods, &holder).await;
    signal(pid, Signal::SIGTERM);
    let stopped = Instant::now();
    let (next, _) = lease_until(&leases, "the Lease handed to the standby", |r| {
        r.0 != holder
    })
    .await;
    let handed = stopped.elapsed();
    ctx.log(&format!(
        "leader {holder} stopped by SIGTERM; {next} holds the Lease {handed:?} later"
    ));
    assert!(
        replicas.contains(&next),
        "{next} is not one of {replicas:?}"
    );
    assert!(
        handed < Duration::from_secs(4),
        "the Lease was waited out ({handed:?}), not handed back"
    );
    env.kubectl_ok(
        &[
            "delete",
            "sj",
            &ctx.job.name,
            "-n",
            &ctx.job.ns,
            "--wait=true",
        ],
        None,
    )
    .expect("delete the job while its operator runs");
    env.helm_ok(&["uninstall", "ha", "-n", &op_ns, "--wait"])
        .expect("helm uninstall");
}
