//! The operator's command line: `streamjob-operator run …`, its flags as the chart passes them.

use std::net::SocketAddr;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

#[derive(Parser, Debug)]
#[command(
    name = "streamjob-operator",
    version,
    about = "Kubernetes operator for StreamJobs"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the operator (in a cluster, or outside with KUBECONFIG).
    Run(RunArgs),
}

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Address of /metrics, /healthz and /readyz (`IP:PORT`; an unbracketed IPv6 pod IP works).
    #[arg(long, default_value = "0.0.0.0:9090", value_parser = parse_addr)]
    pub metrics_addr: SocketAddr,
    /// StreamJobs reconciled at the same time (a reconcile mostly waits on the API server).
    #[arg(long, default_value_t = 16)]
    pub concurrency: u16,
    /// Reconcile slots one namespace may hold at once, so that one tenant's hung jobs cannot
    /// keep the others waiting (watching every namespace; at least 1).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..))]
    pub namespace_concurrency: u16,
    /// Namespaces to watch (repeat); none: all namespaces.
    #[arg(long = "namespace")]
    pub namespaces: Vec<String>,
    /// Elect a leader through a Lease (more than one replica).
    #[arg(long)]
    pub leader_election: bool,
    /// Namespace of the Lease (default: POD_NAMESPACE, else `default`).
    #[arg(long)]
    pub leader_election_namespace: Option<String>,
    /// Name of the Lease.
    #[arg(long, default_value = "streamjob-operator")]
    pub lease_name: String,
    /// How long a Lease holds without renewal, e.g. 15s.
    #[arg(long, default_value = "15s")]
    pub lease_duration: String,
    /// Time allowed to open a connection to the API server (TCP and TLS handshake), e.g. 30s
    /// (kube's default). Raise it where the API server is known to answer very late.
    #[arg(long, default_value = "30s")]
    pub api_connect_timeout: String,
    /// Port of the runtime pods' control API.
    #[arg(long, env = "STREAMJOB_RUNTIME_CONTROL_PORT", default_value_t = 8081)]
    pub runtime_control_port: u16,
    /// Timeout of one control API call, e.g. 5s.
    #[arg(long, default_value = "5s")]
    pub control_timeout: String,
    /// Resources of the runtime container of every pod the operator creates, where the
    /// StreamJob's podTemplate sets none: a Kubernetes ResourceRequirements as JSON, e.g.
    /// `{"requests":{"cpu":"250m","memory":"512Mi"},"limits":{"memory":"2Gi"}}`.
    #[arg(long, default_value = "")]
    pub runtime_resources: String,
    /// Give every StreamJob a NetworkPolicy admitting only the operator to the control port, the
    /// job's own pods to each other and anyone to the metrics port.
    #[arg(long)]
    pub network_policies: bool,
    /// Labels of the operator's pods (`k=v,k=v`), the peer the NetworkPolicies admit to the
    /// control port (with POD_NAMESPACE); empty: any pod in that namespace.
    #[arg(long, default_value = "")]
    pub operator_pod_labels: String,
    /// The image with the Flink savepoint pre-check, one folder per supported Flink minor under
    /// /opt/streamjob/flink-checker (the check and dispose pods of Flink jobs copy it in with an
    /// init container).
    #[arg(long, env = "STREAMJOB_FLINK_CHECKER_IMAGE", default_value = concat!("streamjob/flink-checker:", env!("CARGO_PKG_VERSION")))]
    pub flink_checker_image: String,
    /// What spec.podTemplate may ask for: `any`, or `restricted` (no service account, Secret,
    /// host namespace, privileged container or volume beyond emptyDir, configMap, downwardAPI and
    /// ephemeral; Secrets named by spec.storage and Kafka sources labelled
    /// streamjob.io/credentials=true; refused specs are reported as invalid).
    #[arg(long, value_enum, default_value = "any")]
    pub pod_template_policy: crate::pod_template_policy::PodTemplatePolicy,
}

/// `IP:PORT`, also `fd00::1:9090` as `$(POD_IP):9090` expands to on IPv6 clusters.
pub fn parse_addr(s: &str) -> Result<SocketAddr, String> {
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

/// Logs to stderr, as text or (`STREAMJOB_LOG_FORMAT=json`) JSON lines; `RUST_LOG` filters.
pub fn init_logging() {
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
