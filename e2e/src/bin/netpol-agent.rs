//! The real node's NetworkPolicy agent (e2e/src/node/netpol): enforces every NetworkPolicy of
//! the cluster in the node's network namespace with nftables.

use std::path::PathBuf;

use clap::Parser;

#[derive(Parser)]
struct Args {
    /// Kubeconfig of the agent's identity (reads pods, namespaces, networkpolicies).
    #[arg(long)]
    kubeconfig: PathBuf,
    /// The `nft` program.
    #[arg(long, default_value = "nft")]
    nft: PathBuf,
    /// Where each applied table is written (tests wait on it).
    #[arg(long)]
    applied: Option<PathBuf>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    streamjob_e2e::fixtures::init_process_tracing("info,kube=warn");
    let args = Args::parse();
    let client = streamjob_e2e::cluster::client_from_kubeconfig(&args.kubeconfig).await?;
    streamjob_e2e::node::netpol::agent::run(client, args.nft, args.applied).await?;
    Ok(())
}
