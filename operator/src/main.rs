//! `streamjob-operator run`: the StreamJob operator.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use kube::Api;
use kube::api::ListParams;
use streamjob_crds::v1alpha1::StreamJob;
use streamjob_operator::clock::ApiClock;
use streamjob_operator::controller::{self, Context, Settings};
use streamjob_operator::engine::runtime::control::HttpControl;
use streamjob_operator::leader::{self, LeaseConfig};
use streamjob_operator::metrics::{self, Metrics};
use tracing_subscriber::EnvFilter;

#[derive(Parser, Debug)]
#[command(
    name = "streamjob-operator",
    version,
    about = "Kubernetes operator for StreamJobs"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the operator (in a cluster, or outside with KUBECONFIG).
    Run(RunArgs),
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Address of /metrics, /healthz and /readyz (`IP:PORT`; an unbracketed IPv6 pod IP works).
    #[arg(long, default_value = "0.0.0.0:9090", value_parser = parse_addr)]
    metrics_addr: SocketAddr,
    /// StreamJobs reconciled at the same time (a reconcile mostly waits on the API server).
    #[arg(long, default_value_t = 16)]
    concurrency: u16,
    /// Reconcile slots one namespace may hold at once, so that one tenant's hung jobs cannot
    /// keep the others waiting (watching every namespace; at least 1).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..))]
    namespace_concurrency: u16,
    /// Namespaces to watch (repeat); none: all namespaces.
    #[arg(long = "namespace")]
    namespaces: Vec<String>,
    /// Elect a leader through a Lease (more than one replica).
    #[arg(long)]
    leader_election: bool,
    /// Namespace of the Lease (default: POD_NAMESPACE, else `default`).
    #[arg(long)]
    leader_election_namespace: Option<String>,
    /// Name of the Lease.
    #[arg(long, default_value = "streamjob-operator")]
    lease_name: String,
    /// How long a Lease holds without renewal, e.g. 15s.
    #[arg(long, default_value = "15s")]
    lease_duration: String,
    /// Time allowed to open a connection to the API server (TCP and TLS handshake), e.g. 30s
    /// (kube's default). Raise it where the API server is known to answer very late.
    #[arg(long, default_value = "30s")]
    api_connect_timeout: String,
    /// Port of the runtime pods' control API.
    #[arg(long, env = "STREAMJOB_RUNTIME_CONTROL_PORT", default_value_t = 8081)]
    runtime_control_port: u16,
    /// Timeout of one control API call, e.g. 5s.
    #[arg(long, default_value = "5s")]
    control_timeout: String,
    /// Resources of the runtime container of every pod the operator creates, where the
    /// StreamJob's podTemplate sets none: a Kubernetes ResourceRequirements as JSON, e.g.
    /// `{"requests":{"cpu":"250m","memory":"512Mi"},"limits":{"memory":"2Gi"}}`.
    #[arg(long, default_value = "")]
    runtime_resources: String,
    /// Give every StreamJob a NetworkPolicy admitting only the operator to the control port, the
    /// job's own pods to each other and anyone to the metrics port.
    #[arg(long)]
    network_policies: bool,
    /// Labels of the operator's pods (`k=v,k=v`), the peer the NetworkPolicies admit to the
    /// control port (with POD_NAMESPACE); empty: any pod in that namespace.
    #[arg(long, default_value = "")]
    operator_pod_labels: String,
    /// The image with the Flink savepoint pre-check, one folder per supported Flink minor under
    /// /opt/streamjob/flink-checker (the check and dispose pods of Flink jobs copy it in with an
    /// init container).
    #[arg(long, env = "STREAMJOB_FLINK_CHECKER_IMAGE", default_value = concat!("streamjob/flink-checker:", env!("CARGO_PKG_VERSION")))]
    flink_checker_image: String,
    /// What spec.podTemplate may ask for: `any`, or `restricted` (no service account, Secret,
    /// host namespace, privileged container or volume beyond emptyDir, configMap, downwardAPI and
    /// ephemeral; Secrets named by spec.storage and Kafka sources labelled
    /// streamjob.io/credentials=true; refused specs are reported as invalid).
    #[arg(long, value_enum, default_value = "any")]
    pod_template_policy: streamjob_operator::pod_template_policy::PodTemplatePolicy,
}

/// `IP:PORT`, also `fd00::1:9090` as `$(POD_IP):9090` expands to on IPv6 clusters.
fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse() {
        return Ok(a);
    }
    let (ip, port) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("{s:?} is not IP:PORT"))?;
    format!("[{ip}]:{port}")
        .parse()
        .map_err(|e| format!("{s:?} is not IP:PORT: {e}"))
}

fn init_logging() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("STREAMJOB_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if json {
        builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .init();
    } else {
        builder.init();
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_logging();
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => run(args).await,
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let lease_duration =
        streamjob_crds::units::parse_duration("--lease-duration", &args.lease_duration)?;
    let runtime_resources = match args.runtime_resources.trim() {
        "" => None,
        json => Some(
            serde_json::from_str::<k8s_openapi::api::core::v1::ResourceRequirements>(json)
                .with_context(|| {
                    format!("--runtime-resources {json:?} is not a Kubernetes ResourceRequirements")
                })?,
        ),
    };
    let control_timeout =
        streamjob_crds::units::parse_duration("--control-timeout", &args.control_timeout)?;
    let identity = std::env::var("POD_NAME")
        .unwrap_or_else(|_| format!("streamjob-operator-{}", std::process::id()));
    let mut config = kube::Config::infer()
        .await
        .context("cannot configure a Kubernetes client (in-cluster or KUBECONFIG)")?;
    config.connect_timeout = Some(streamjob_crds::units::parse_duration(
        "--api-connect-timeout",
        &args.api_connect_timeout,
    )?);
    let client = kube::Client::try_from(config.clone())
        .context("cannot build a Kubernetes client from its configuration")?;
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

    // Ready once the StreamJob API answers (CRD installed, RBAC in place).
    let probe: Api<StreamJob> = match args.namespaces.first() {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let mut delay = Duration::from_secs(1);
    loop {
        match probe.list(&ListParams::default().limit(1)).await {
            Ok(_) => break,
            Err(e) => {
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
    }
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

    let mut leading = None;
    if args.leader_election {
        let namespace = args
            .leader_election_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .unwrap_or_else(|| "default".into());
        // Its own client, hence its own connections: a renewal never waits for a connection
        // behind the watches and reconciles, nor opens one (a TLS handshake) when it is due.
        let lease_client = kube::Client::try_from(config)
            .context("cannot build a Kubernetes client from its configuration")?;
        let (mut leadership, election) = leader::spawn(
            lease_client,
            LeaseConfig {
                namespace,
                name: args.lease_name.clone(),
                identity: identity.clone(),
                duration: lease_duration,
            },
        );
        tracing::info!(%identity, "waiting to become leader");
        leadership
            .acquired()
            .await
            .context("leader election stopped")?;
        leading = Some((leadership, election));
    }
    metrics.set_leader(true);

    let settings = Settings {
        control_port: args.runtime_control_port,
        concurrency: args.concurrency,
        namespace_concurrency: args.namespace_concurrency,
        namespaces: args.namespaces.clone(),
        instance: identity,
        home_namespace: std::env::var("POD_NAMESPACE").ok(),
        control_timeout,
        runtime_resources,
        flink_checker_image: args.flink_checker_image.clone(),
        network_policy: args
            .network_policies
            .then(|| -> anyhow::Result<_> {
                Ok(streamjob_operator::network_policy::OperatorPeer {
                    namespace: std::env::var("POD_NAMESPACE").ok(),
                    labels: streamjob_operator::network_policy::parse_labels(
                        &args.operator_pod_labels,
                    )
                    .map_err(|e| anyhow::anyhow!("--operator-pod-labels: {e}"))?,
                })
            })
            .transpose()?,
        pod_template_policy: args.pod_template_policy,
    };
    let control = HttpControl::new(control_timeout)?;
    let mut ctx = Context::new(client, control, metrics.clone(), settings).with_clock(clock);
    if let Some((leadership, _)) = &leading {
        ctx = ctx.leading(leadership.clone());
    }
    let ctx = Arc::new(ctx);
    tracing::info!(
        namespaces = ?args.namespaces,
        concurrency = args.concurrency,
        namespace_concurrency = args.namespace_concurrency,
        "starting controller"
    );

    let result = match leading {
        Some((mut leadership, election)) => {
            tokio::select! {
                () = controller::run(ctx) => {
                    // stopped on a signal, every reconcile done: the next replica may lead now
                    let _ = tokio::time::timeout(Duration::from_secs(5), election.release()).await;
                    Ok(())
                }
                () = leadership.lost() => {
                    Err(anyhow::anyhow!("lost the leader lease; exiting so a fresh replica takes over"))
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_addresses() {
        assert_eq!(parse_addr("10.0.0.7:9090").map(|a| a.port()), Ok(9090));
        assert!(parse_addr("fd00::1:9090").is_ok_and(|a| a.is_ipv6() && a.port() == 9090));
        assert!(parse_addr("nonsense").is_err());
    }

    #[test]
    fn cli_matches_the_chart() {
        let cli = Cli::try_parse_from([
            "streamjob-operator",
            "run",
            "--metrics-addr=10.0.0.7:9090",
            "--concurrency=8",
            "--namespace-concurrency=4",
            "--namespace=a",
            "--namespace=b",
            "--leader-election",
            "--leader-election-namespace=ops",
            "--lease-duration=15s",
            "--api-connect-timeout=30s",
        ]);
        let Ok(Cli {
            command: Command::Run(args),
        }) = cli
        else {
            panic!("chart arguments do not parse");
        };
        assert_eq!(args.concurrency, 8);
        assert_eq!(args.namespace_concurrency, 4);
        assert_eq!(args.namespaces, vec!["a", "b"]);
        assert!(args.leader_election);
        assert_eq!(args.leader_election_namespace.as_deref(), Some("ops"));
        assert!(
            Cli::try_parse_from(["streamjob-operator", "run", "--namespace-concurrency=0"])
                .is_err(),
            "a namespace needs at least one slot"
        );
    }
}
