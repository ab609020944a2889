//! Starts the e2e environment (control plane, MinIO, process kubelet) for manual use:
//! `cargo run -p streamjob-e2e --bin e2e-cluster`, then `kubectl` with the printed kubeconfig.
//! Ctrl-C (or SIGTERM) stops everything; `--check` starts, reports and stops at once.

use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use streamjob_e2e::fixtures::{EnvOptions, TestEnv};

#[derive(Debug, Parser)]
#[command(about = "Run the Streamjob e2e environment until Ctrl-C")]
struct Args {
    /// Start, print the figures, and stop (checks start-up and clean shutdown).
    #[arg(long)]
    check: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    streamjob_e2e::fixtures::init_process_tracing("info,kube=warn");
    let args = Args::parse();
    let exe = std::env::current_exe().context("current_exe")?;
    let dir = exe.parent().context("exe has no folder")?;
    let opts = EnvOptions::new(
        &dir.join("process-kubelet").display().to_string(),
        &dir.join("e2e-echo-server").display().to_string(),
    );
    let env = TestEnv::start(opts).await?;
    println!("run dir:        {}", env.run_dir.display());
    println!("export KUBECONFIG={}", env.plane.admin_kubeconfig.display());
    println!("kubectl:        {}", env.bins.kubectl.display());
    println!(
        "s3:             {} (access key {}, secret key {})",
        env.s3().url,
        env.s3().access_key,
        env.s3().secret_key
    );
    println!(
        "control plane ready in {:?}; environment in {:?}",
        env.plane.start_duration, env.start_duration
    );
    for (name, pid) in env.pids() {
        if let Some((rss, peak)) = streamjob_e2e::cluster::rss_kib(pid) {
            println!(
                "{name:<24} pid {pid:>7}  rss {:>5} MiB  peak {:>5} MiB",
                rss / 1024,
                peak / 1024
            );
        }
    }
    if !args.check {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    let pids = env.pids();
    let t0 = Instant::now();
    drop(env);
    let left: Vec<_> = pids
        .iter()
        .filter(|(_, pid)| std::path::Path::new(&format!("/proc/{pid}")).exists())
        .collect();
    println!("stopped in {:?}; processes left: {left:?}", t0.elapsed());
    anyhow::ensure!(left.is_empty(), "processes left behind: {left:?}");
    Ok(())
}
