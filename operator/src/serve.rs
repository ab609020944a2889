//! One operator process: probes and metrics first, then (after the leader election) the
//! controller until SIGTERM, which hands the Lease back.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ResourceRequirements;
use kube::Api;
use kube::api::ListParams;
use streamjob_crds::units::parse_duration;
use streamjob_crds::v1alpha1::StreamJob;

use crate::cli::RunArgs;
use crate::clock::ApiClock;
use crate::controller::{self, Context, Settings};
use crate::engine::runtime::control::HttpControl;
use crate::leader::{self, Election, Leadership, LeaseConfig};
use crate::metrics::{self, Metrics};
use crate::network_policy::{OperatorPeer, parse_labels};
use crate::{Error, Result};

/// Runs the operator until SIGTERM (`Ok`) or until it loses its Lease (an error: the process
/// exits so that a fresh replica takes over).
pub async fn run(args: RunArgs) -> Result<()> {
    let settings = settings(&args)?;
    let mut config = kube::Config::infer().await.map_err(Error::KubeConfig)?;
    config.connect_timeout = Some(flag_duration(
        "--api-connect-timeout",
        &args.api_connect_timeout,
    )?);
    let client = kube::Client::try_from(config.clone())?;
    let metrics = Metrics::default();

    // Probes and metrics first, so the pod is live while it waits for the lease.
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    // 0.0.0.0 (the chart's) is every interface of the pod, `[::]` on an IPv6 pod
    let pod_ip = std::env::var("POD_IP").ok();
    let metrics_addr =
        streamjob_contract::process::listen_in_pod(args.metrics_addr, pod_ip.as_deref());
    let server = tokio::spawn(metrics::serve(metrics_addr, metrics.clone(), async move {
        let _ = stop_rx.wait_for(|s| *s).await;
    }));
    tracing::info!(addr = %metrics_addr, "serving /metrics, /healthz, /readyz");

    wait_for_the_api(&client, args.namespaces.first()).await;
    metrics.set_ready(true);

    // Status times are written and compared on the API server's clock (see `clock`).
    let clock = Arc::new(ApiClock::default());
    match clock.sync(&client).await {
        Ok(offset) => tracing::info!(offset_ms = offset.num_milliseconds(), "API server clock"),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the API server's clock yet: local clock until it can")
        }
    }
    clock.clone().spawn(client.clone());

    let leading = if args.leader_election {
        // Its own client, hence its own connections: a renewal never waits for a connection
        // behind the watches and reconciles, nor opens one (a TLS handshake) when it is due.
        Some(lead(kube::Client::try_from(config)?, &args, &settings.instance).await?)
    } else {
        None
    };
    metrics.set_leader(true);

    let control = HttpControl::new(settings.control_timeout)?;
    let mut ctx = Context::new(client, control, metrics.clone(), settings).with_clock(clock);
    if let Some((leadership, _)) = &leading {
        ctx = ctx.leading(leadership.clone());
    }
    tracing::info!(
        namespaces = ?args.namespaces,
        concurrency = args.concurrency,
        namespace_concurrency = args.namespace_concurrency,
        "starting controller"
    );
    let ctx = Arc::new(ctx);
    let result = match leading {
        Some((mut leadership, election)) => {
            tokio::select! {
                () = controller::run(ctx) => {
                    // stopped on a signal, every reconcile done: the next replica may lead now
                    let _ = tokio::time::timeout(Duration::from_secs(5), election.release()).await;
                    Ok(())
                }
                () = leadership.lost() => Err(Error::LeaseLost),
            }
        }
        None => {
            controller::run(ctx).await;
            Ok(())
        }
    };
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
    tracing::info!("stopped");
    result
}

/// The controller's settings from the flags (and the pod's environment), each refusal naming
/// its flag.
fn settings(args: &RunArgs) -> Result<Settings> {
    let runtime_resources = match args.runtime_resources.trim() {
        "" => None,
        json => Some(
            serde_json::from_str::<ResourceRequirements>(json).map_err(|e| Error::Flag {
                flag: "--runtime-resources",
                reason: format!("{json:?} is not a Kubernetes ResourceRequirements: {e}"),
            })?,
        ),
    };
    let network_policy = if args.network_policies {
        Some(OperatorPeer {
            namespace: std::env::var("POD_NAMESPACE").ok(),
            labels: parse_labels(&args.operator_pod_labels).map_err(|reason| Error::Flag {
                flag: "--operator-pod-labels",
                reason,
            })?,
        })
    } else {
        None
    };
    // the lease duration is checked here too, so that a bad flag fails before any I/O
    flag_duration("--lease-duration", &args.lease_duration)?;
    Ok(Settings {
        control_port: args.runtime_control_port,
        concurrency: args.concurrency,
        namespace_concurrency: args.namespace_concurrency,
        namespaces: args.namespaces.clone(),
        instance: std::env::var("POD_NAME")
            .unwrap_or_else(|_| format!("streamjob-operator-{}", std::process::id())),
        home_namespace: std::env::var("POD_NAMESPACE").ok(),
        control_timeout: flag_duration("--control-timeout", &args.control_timeout)?,
        runtime_resources,
        flink_checker_image: args.flink_checker_image.clone(),
        network_policy,
        pod_template_policy: args.pod_template_policy,
    })
}

fn flag_duration(flag: &'static str, value: &str) -> Result<Duration> {
    parse_duration(flag, value).map_err(|e| Error::Flag {
        flag,
        reason: e.to_string(),
    })
}

/// Ready once the StreamJob API answers (CRD installed, RBAC in place); until then, says why not.
async fn wait_for_the_api(client: &kube::Client, namespace: Option<&String>) {
    let probe: Api<StreamJob> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let mut delay = Duration::from_secs(1);
    while let Err(e) = probe.list(&ListParams::default().limit(1)).await {
        // say which: an API server out of reach, or one that does not know StreamJobs
        let hint = match &e {
            kube::Error::Api(s) if s.code == 404 => "is the CRD installed?",
            kube::Error::Api(s) if s.code == 403 => {
                "RBAC: may this service account list streamjobs?"
            }
            _ => "the API server did not answer",
        };
        tracing::warn!(error = %e, hint, "cannot list StreamJobs yet");
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(30));
    }
}

/// Waits until this replica holds the Lease.
async fn lead(
    client: kube::Client,
    args: &RunArgs,
    identity: &str,
) -> Result<(Leadership, Election)> {
    let namespace = args
        .leader_election_namespace
        .clone()
        .or_else(|| std::env::var("POD_NAMESPACE").ok())
        .unwrap_or_else(|| "default".into());
    let (mut leadership, election) = leader::spawn(
        client,
        LeaseConfig {
            namespace,
            name: args.lease_name.clone(),
            identity: identity.to_string(),
            duration: flag_duration("--lease-duration", &args.lease_duration)?,
        },
    );
    tracing::info!(%identity, "waiting to become leader");
    leadership
        .acquired()
        .await
        .map_err(|_| Error::LeaderElectionStopped)?;
    Ok((leadership, election))
}
