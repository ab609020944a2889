//! The `streamjob-runtime` command line, reusable by user binaries that register their own
//! operators: `fn main() -> ExitCode { streamjob_runtime::cli::main_with_registry(registry) }`.
//!
//! * `run MANIFEST [--from-savepoint PATH] [--resume]` — local mode.
//! * `plan MANIFEST --from PATH [--json]` — restore compatibility; exit 0 compatible, 3 not.
//! * `coordinator MANIFEST [--from-savepoint PATH] [--resume] [--control-addr ADDR]` — runtime pods.
//! * `worker` — not supported yet (the coordinator runs all subtasks).
//! * `bench` — Nexmark throughput.
//!
//! MANIFEST is a path or `env:VAR`. Exit codes: 0 success, 1 failure, 2 usage or invalid
//! manifest, 3 incompatible restore.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use streamjob_crds::v1alpha1::StreamJob;

use crate::coordinator::{Outcome, RestoreFrom, RunOptions, Shared, run_job};
use crate::error::{Error, Result};
use crate::graph::{JobGraph, build_graph};
use crate::registry::Registry;
use crate::restore::check_restore;
use crate::snapshot::SnapshotMetadata;
use crate::storage::Location;

/// Exit code of an incompatible restore.
pub const EXIT_INCOMPATIBLE: u8 = 3;

#[derive(Parser, Debug)]
#[command(
    name = "streamjob-runtime",
    version,
    about = "Streamjob dataflow runtime"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Debug, Clone)]
struct RunArgs {
    /// Manifest path, or env:VAR to read the YAML from an environment variable.
    manifest: String,
    /// Restore from this savepoint (or checkpoint) directory.
    #[arg(long, conflicts_with = "resume")]
    from_savepoint: Option<String>,
    /// Restore the latest completed checkpoint in spec.checkpoints.dir.
    #[arg(long)]
    resume: bool,
    /// Address of the control API (run: off unless set; coordinator: ${POD_IP:-127.0.0.1}:8081).
    #[arg(long)]
    control_addr: Option<String>,
    /// File holding the control API bearer token (else env STREAMJOB_CONTROL_TOKEN).
    #[arg(long)]
    token_file: Option<String>,
    /// Restarts after failures before the job fails for good.
    #[arg(long, default_value_t = 10)]
    max_restarts: u32,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a manifest locally (coordinator and all subtasks in this process).
    Run(RunArgs),
    /// Decide whether MANIFEST can restore the snapshot at --from, without running it.
    Plan {
        manifest: String,
        #[arg(long)]
        from: String,
        #[arg(long)]
        json: bool,
    },
    /// What runtime pods run: the coordinator with all subtasks and the control API.
    Coordinator(RunArgs),
    /// A worker for multi-pod deployments (not supported yet).
    Worker {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Nexmark throughput (q0, q1, q2, q5, q7) with checkpoints off and on.
    Bench {
        /// Seconds per measurement (above the checkpoint interval, so checkpoints happen).
        #[arg(long, default_value_t = 12)]
        seconds: u64,
        /// Parallelism of the benchmark jobs.
        #[arg(long, default_value_t = 1)]
        parallelism: u32,
        /// Checkpoint interval when checkpoints are on.
        #[arg(long, default_value = "10s")]
        checkpoint_interval: String,
        /// Only these queries (comma separated).
        #[arg(long)]
        queries: Option<String>,
    },
}

/// Reads a manifest from a path or `env:VAR`.
pub fn read_manifest(manifest: &str) -> Result<StreamJob> {
    let text = match manifest.strip_prefix("env:") {
        Some(var) => std::env::var(var).map_err(|_| {
            Error::Other(format!("environment variable {var} (manifest) is not set"))
        })?,
        None => std::fs::read_to_string(manifest)
            .map_err(|e| Error::Other(format!("cannot read manifest {manifest}: {e}")))?,
    };
    Ok(StreamJob::from_yaml(&text)?)
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

/// Runs the CLI with the built-in operators.
pub fn main() -> ExitCode {
    main_with_registry(Registry::with_builtins())
}

/// Runs the CLI with a registry holding the binary's own operators.
pub fn main_with_registry(registry: Registry) -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = rt.block_on(dispatch(cli, registry));
    rt.shutdown_timeout(Duration::from_secs(1));
    code
}

async fn dispatch(cli: Cli, registry: Registry) -> ExitCode {
    let result = match cli.command {
        Command::Run(args) => run(args, registry, false).await,
        Command::Coordinator(args) => run(args, registry, true).await,
        Command::Plan {
            manifest,
            from,
            json,
        } => plan(&manifest, &from, json, &registry).await,
        Command::Worker { .. } => Err(Error::Unsupported(
            "the worker role: runtime pods run `coordinator`, which holds all subtasks (single-pod deployment)".into(),
        )),
        Command::Bench {
            seconds,
            parallelism,
            checkpoint_interval,
            queries,
        } => crate::bench::run(seconds, parallelism, &checkpoint_interval, queries.as_deref())
            .await
            .map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            match e {
                Error::Incompatible { .. } => ExitCode::from(EXIT_INCOMPATIBLE),
                Error::Manifest(_) | Error::Plan { .. } | Error::Unsupported(_) => {
                    ExitCode::from(2)
                }
                _ => ExitCode::from(1),
            }
        }
    }
}

async fn load(manifest: &str, registry: &Registry) -> Result<JobGraph> {
    let job = read_manifest(manifest)?;
    build_graph(&job, registry).await
}

async fn plan(manifest: &str, from: &str, json: bool, registry: &Registry) -> Result<ExitCode> {
    let graph = load(manifest, registry).await?;
    let loc = Location::parse(from, graph.spec.storage.as_ref())?;
    let meta = SnapshotMetadata::read(&loc).await?;
    let report = check_restore(
        &meta,
        loc.display(),
        &graph.graph_operators(),
        graph.max_parallelism,
        graph.spec.upgrade.allow_non_restored_state,
    );
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.to_text());
    }
    Ok(if report.compatible {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_INCOMPATIBLE)
    })
}

fn read_token(file: Option<&str>) -> Result<Option<String>> {
    if let Some(f) = file {
        let t = std::fs::read_to_string(f)
            .map_err(|e| Error::Other(format!("cannot read token file {f}: {e}")))?;
        return Ok(Some(t.trim().to_string()));
    }
    Ok(std::env::var("STREAMJOB_CONTROL_TOKEN")
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty()))
}

async fn run(args: RunArgs, registry: Registry, coordinator: bool) -> Result<ExitCode> {
    let graph = load(&args.manifest, &registry).await?;
    let restore = match (&args.from_savepoint, args.resume) {
        (Some(p), _) => RestoreFrom::Path(p.clone()),
        (None, true) => RestoreFrom::LatestCheckpoint,
        (None, false) => match &graph.spec.initial_savepoint {
            Some(p) => RestoreFrom::Path(p.clone()),
            None => RestoreFrom::Empty,
        },
    };
    let (shared, requests) = Shared::new(&graph.name);
    let token = read_token(args.token_file.as_deref())?;
    let addr = match (&args.control_addr, coordinator) {
        (Some(a), _) => Some(a.clone()),
        (None, true) => Some(format!(
            "{}:8081",
            std::env::var("POD_IP").unwrap_or_else(|_| "127.0.0.1".into())
        )),
        (None, false) => None,
    };
    if let Some(addr) = addr {
        let addr: SocketAddr = addr
            .parse()
            .map_err(|e| Error::Other(format!("--control-addr {addr}: {e}")))?;
        if token.is_none() && !addr.ip().is_loopback() {
            return Err(Error::Other(format!(
                "refusing to serve the control API on non-loopback {addr} without a token: pass --token-file or set STREAMJOB_CONTROL_TOKEN"
            )));
        }
        let bound = crate::control::serve(shared.clone(), addr, token).await?;
        eprintln!("control API: http://{bound}");
    }
    // signals → stop with savepoint; a second signal exits at once
    {
        let shared = shared.clone();
        tokio::spawn(async move {
            let mut count = 0;
            loop {
                wait_for_signal().await;
                count += 1;
                if count == 1 {
                    tracing::info!(
                        "stop requested: taking a savepoint (signal again to exit at once)"
                    );
                    shared.request_savepoint(None, true);
                } else {
                    eprintln!("exiting without savepoint");
                    std::process::exit(130);
                }
            }
        });
    }
    if !coordinator && std::io::stderr().is_terminal() {
        let shared = shared.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                let s = shared.status();
                let ck = s
                    .latest_checkpoint
                    .as_ref()
                    .map(|c| format!("chk-{} ({} ms)", c.id, c.duration_ms))
                    .unwrap_or_else(|| "none".into());
                eprint!(
                    "\r\x1b[2K{} | in {} ({:.0}/s) | out {} | last checkpoint {}",
                    s.state, s.records_in, s.records_in_per_second, s.records_out, ck
                );
            }
        });
    }
    let outcome = run_job(
        graph,
        RunOptions {
            restore,
            max_restarts: args.max_restarts,
        },
        shared.clone(),
        requests,
    )
    .await?;
    match outcome {
        Outcome::Finished => {
            eprintln!("job finished");
        }
        Outcome::Stopped { savepoint } => {
            println!("savepoint: {savepoint}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            (Ok(mut i), Ok(mut t)) => {
                tokio::select! {
                    _ = i.recv() => {}
                    _ = t.recv() => {}
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Keeps `Arc` imported for doc links.
pub type SharedState = Arc<Shared>;
