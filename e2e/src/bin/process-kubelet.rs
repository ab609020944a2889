//! Test-only process kubelet: registers a Node and runs the containers of the pods bound to it
//! as local processes. See `streamjob_e2e::kubelet`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;

#[derive(Debug, Parser)]
#[command(about = "Test-only kubelet that runs pod containers as local processes")]
struct Args {
    /// Kubeconfig to reach the apiserver with.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,
    /// Kubelet config file (YAML): node name, image mappings, run folder.
    #[arg(long)]
    config: PathBuf,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    streamjob_e2e::fixtures::init_process_tracing("info");
    let args = Args::parse();
    let cfg = streamjob_e2e::kubelet::KubeletConfig::read(&args.config)
        .with_context(|| format!("reading {}", args.config.display()))?;
    let client = streamjob_e2e::cluster::client_from_kubeconfig(&args.kubeconfig).await?;
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(error = %e, "cannot install SIGTERM handler");
                    return;
                }
            };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        tracing::info!("signal received");
        let _ = tx.send(true);
    });
    streamjob_e2e::kubelet::run(client, cfg, rx).await?;
    Ok(())
}
