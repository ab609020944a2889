//! Issue #38: an API server that answers the operator late. The operator of this test (a second
//! release of the chart, watching only the job's namespace; the shared one is scaled to zero)
//! reaches the API server through a proxy that holds every chunk either way for a while
//! (`e2e.streamjob.io/api-server` on its pod); the job's pods, the kubelet and the test talk to
//! the API server directly.

use std::net::SocketAddr;

use streamjob_e2e::kubelet::pod::API_SERVER;
use streamjob_e2e::proxy::FaultProxy;

use super::failover::SharedOperatorPaused;
use super::*;

/// The Lease this test installs the operator with: a leader steps down two thirds of it (100 s)
/// after its last successful renewal was sent. A renewal is one write on a connection of its own
/// (the Lease it last wrote, without reading it first); under [`STEADY_DELAY`] its request and
/// answer may each take two chunks, so up to 80 s.
const LEASE_DURATION: Duration = Duration::from_secs(150);
/// Opening a connection through the proxy takes a round trip or two of TLS handshake, 40 s or
/// more under [`STEADY_DELAY`]: past kube's default of 30 s.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(120);
/// Latency (per chunk, each way) during the upgrade, and afterwards while the job runs on.
const UPGRADE_DELAY: Duration = Duration::from_secs(5);
const STEADY_DELAY: Duration = Duration::from_secs(20);
/// Checkpoints the operator must report (each a status write through the slow proxy) while the
/// API server answers [`STEADY_DELAY`] late.
const STEADY_CHECKPOINTS: u64 = 2;

/// The runtime pod's (uid, restarts of its container).
fn identity(p: &Pod) -> (String, i32) {
    (p.metadata.uid.clone().unwrap_or_default(), restarts(p))
}

/// z. A job upgraded in place while every answer to the operator comes 5 s late (10 s or more
/// a round trip), then left running while they come 20 s late: promoted from its savepoint; with
/// answers 20 s late the operator still reports the job's checkpoints, keeps its Lease (its
/// container does not restart) and replaces or restarts nothing (slowness is not a failure);
/// every aggregate once when the job finishes with the API server fast again.
///
/// Measured: promoted 522.5 s after the bump; 2 checkpoints reported 324.9 s into the 20 s
/// phase. Before the fixes the 20 s phase failed: GET+PUT renewals missed their deadline, the
/// leader exited, and the restarted operator could not open a connection (`client error
/// (Connect)`: the TLS handshake through the proxy took longer than kube's 30 s connect timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "full suite: cargo xtask e2e --full"]
async fn z_operator_behind_a_slow_api_server() {
    let env = env().await;
    let mut job = new_job(env, "slowapi").await;
    // long enough (1,000 a second) to still run through the slow upgrade (about 9 min) and the
    // slow phase after it (up to 400 s)
    job.count = 1_200_000;
    let _paused = SharedOperatorPaused::new(env).await;
    let upstream: SocketAddr = env
        .kubelet_config
        .api_server
        .strip_prefix("https://")
        .and_then(|a| a.parse().ok())
        .expect("the API server's address");
    let proxy = FaultProxy::start(upstream).expect("proxy");
    let op_ns = env.restricted_namespace("slowop").await.expect("namespace");
    let watch = format!("watchNamespaces={{{}}}", job.ns);
    let lease = format!("leaderElection.leaseDuration={}s", LEASE_DURATION.as_secs());
    let connect = format!("apiServer.connectTimeout={}s", CONNECT_TIMEOUT.as_secs());
    let via = format!(
        "podAnnotations.{}=https://{}",
        API_SERVER.replace('.', "\\."),
        proxy.addr
    );
    env.install_operator_chart(
        "slow",
        &op_ns,
        &[
            "logFormat=text",
            "logLevel=info",
            &watch,
            &lease,
            &connect,
            &via,
        ],
    )
    .expect("helm install behind the proxy");

    let mut ctx = Ctx::new(env, job).await;
    ctx.apply();
    let before = ctx.running_with_checkpoint().await;
    let old = deployed_hash(&before);

    proxy.set_delay(UPGRADE_DELAY);
    let t0 = Instant::now();
    ctx.job.image = "streamjob/runtime:v2".into();
    ctx.apply();
    let o = ctx
        .wait(
            "promoted with the API server 5 s late",
            // each step costs the operator about a minute of its own (measured: 567 s in all)
            Duration::from_secs(900),
            |o| promoted(o, &old),
        )
        .await;
    ctx.log(&format!(
        "upgrade promoted {:.1?} after the bump, every answer {UPGRADE_DELAY:?} late",
        t0.elapsed()
    ));
    assert_started_from_recorded_savepoint(&o);
    assert_newer_epoch(&before, &o);

    let pods = ctx.runtime_pods().await;
    assert_eq!(pods.len(), 1, "one runtime pod after the upgrade");
    let running = identity(&pods[0]);
    assert_eq!(
        phase(&o),
        "Running",
        "the job must still run through the slow phase (raise its count)"
    );
    let op_pods: Api<Pod> = Api::namespaced(env.client().await.expect("client"), &op_ns);
    let operator_restarts = || async {
        op_pods
            .list(&ListParams::default())
            .await
            .expect("list the operator's pods")
            .items
            .iter()
            .map(|p| (p.metadata.name.clone().unwrap_or_default(), restarts(p)))
            .collect::<Vec<_>>()
    };
    let operators_before = operator_restarts().await;
    proxy.set_delay(STEADY_DELAY);
    let t1 = Instant::now();
    let first = status(&o)["lastCheckpoint"]["id"].as_u64().unwrap_or(0);
    ctx.wait(
        "checkpoints reported through the slow API server",
        Duration::from_secs(400),
        |o| status(o)["lastCheckpoint"]["id"].as_u64().unwrap_or(0) >= first + STEADY_CHECKPOINTS,
    )
    .await;
    ctx.log(&format!(
        "{STEADY_CHECKPOINTS} newer checkpoints reported {:.1?} into answers {STEADY_DELAY:?} late",
        t1.elapsed()
    ));
    let pods = ctx.runtime_pods().await;
    assert_eq!(
        pods.iter().map(identity).collect::<Vec<_>>(),
        vec![running],
        "the runtime pod neither replaced nor restarted while the API server was slow"
    );
    assert_eq!(
        operator_restarts().await,
        operators_before,
        "the operator kept leading (no restart) while the API server answered {STEADY_DELAY:?} late"
    );
    proxy.set_delay(Duration::ZERO);

    let o = ctx
        .wait("phase Finished", Duration::from_secs(900), |o| {
            phase(o) == "Finished"
        })
        .await;
    assert_eq!(status(&o)["deployment"]["image"], "streamjob/runtime:v2");
    ctx.assert_exactly_once().await;
    let seen = ctx.seen();
    assert!(
        !seen
            .iter()
            .any(|s| s.starts_with("Failed") || s.contains("Rollback")),
        "no failure or rollback: {seen:?}"
    );
    ctx.log(&format!("phases: {seen:?}"));
    for p in op_pods
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
    {
        ctx.log(&format!(
            "operator pod {}: container restarts {}",
            p.metadata.name.clone().unwrap_or_default(),
            identity(&p).1
        ));
    }
    env.kubectl_ok(&["delete", "namespace", &op_ns, "--wait=false"], None)
        .expect("delete the slow operator's namespace");
}
