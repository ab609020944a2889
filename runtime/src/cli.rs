//! The `streamjob-runtime` command line, reusable by user binaries that register their own
//! operators: `fn main() -> ExitCode { streamjob_runtime::cli::main_with_registry(registry) }`.
//!
//! * `run MANIFEST [--from-savepoint PATH] [--resume]` — local mode.
//! * `plan MANIFEST --from PATH [--json]` — restore compatibility; exit 0 compatible, 3 not.
//! * `coordinator MANIFEST [--from-savepoint PATH] [--resume] [--standby] [--control-addr ADDR]
//!   [--exit-grace 5s]` — runtime pods.
//! * `dispose MANIFEST PATH...` — delete savepoints.
//! * `coordinator ... --workers N [--cluster-addr ADDR]` — the subtasks run on N worker
//!   processes instead of the coordinator's.
//! * `worker MANIFEST --coordinator HOST:PORT [--data-addr ADDR] [--advertise-host HOST]` — a
//!   worker: runs the subtasks the coordinator places on it, exchanges data with other workers.
//! * `bench` — Nexmark throughput.
//!
//! MANIFEST is a path or `env:VAR`. Exit codes: 0 success, 1 failure, 2 usage or invalid
//! manifest, 3 incompatible restore, 143 coordinator stopped by SIGTERM/SIGINT (after its final
//! checkpoint). The termination message is described in [`crate::termination`].

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use streamjob_crds::v1alpha1::StreamJob;
use tracing::Instrument;

use crate::coordinator::{Outcome, RestoreFrom, RunOptions, RunState, Shared, run_job};
use crate::error::{Error, Result};
use crate::graph::{JobGraph, build_graph};
use crate::registry::Registry;
use crate::restore::check_restore;
use streamjob_contract::process::{TOKEN_ENV, exit};

use crate::snapshot::SnapshotMetadata;
use crate::storage::Location;

/// Exit code of an incompatible restore.
pub const EXIT_INCOMPATIBLE: u8 = exit::INCOMPATIBLE;
/// Exit code of a run fenced off by a newer epoch (see [`crate::fence`]): it committed nothing
/// after the newer run started and must not be restarted.
pub const EXIT_SUPERSEDED: u8 = exit::SUPERSEDED;

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
    /// Restore from this savepoint (or checkpoint) directory. With --resume: restore the latest
    /// checkpoint taken after restoring it (this deployment's own progress), else it.
    #[arg(long)]
    from_savepoint: Option<String>,
    /// Restore the latest completed checkpoint in spec.checkpoints.dir (with --from-savepoint:
    /// only one taken after restoring that savepoint).
    #[arg(long)]
    resume: bool,
    /// This run's epoch (the operator's status.epoch): a run commits output only while no run
    /// with a larger epoch has started; with --resume a container restarted in place continues
    /// from its own epoch's latest commit. Unset: a local run that fences nobody.
    #[arg(long, env = "STREAMJOB_EPOCH")]
    epoch: Option<u64>,
    /// Start empty even if checkpoints exist (a stateless upgrade); with --resume and --epoch a
    /// restarted container still continues from its own epoch's commits.
    #[arg(long, conflicts_with = "from_savepoint")]
    fresh: bool,
    /// Load and plan the job graph, serve the control API in state `standby` and run nothing
    /// until `POST /v1/start` (which decides the restore; --from-savepoint/--resume are ignored).
    #[arg(long)]
    standby: bool,
    /// After a stop with savepoint, keep answering the control API this long before exiting
    /// (when the control API is served).
    #[arg(long, default_value = "5s")]
    exit_grace: String,
    /// Address of the control API (run: off unless set; coordinator: 0.0.0.0:8081 in a pod,
    /// where POD_IP is set, else 127.0.0.1:8081). `0.0.0.0` is `[::]` on an IPv6 pod.
    #[arg(long)]
    control_addr: Option<String>,
    /// File holding the control API bearer token (else env STREAMJOB_CONTROL_TOKEN).
    #[arg(long)]
    token_file: Option<String>,
    /// Address of the Prometheus `/metrics` endpoint, served without a token (run: off unless
    /// set; coordinator in a pod, where POD_IP is set: 0.0.0.0:9249).
    #[arg(long)]
    metrics_addr: Option<String>,
    /// Restarts after failures before the job fails for good.
    #[arg(long, default_value_t = 10)]
    max_restarts: u32,
    /// coordinator: run the subtasks on this many worker processes (default spec.workers; 0: in
    /// this process).
    #[arg(long)]
    workers: Option<usize>,
    /// coordinator with --workers: where workers register (default 0.0.0.0:6123 in a pod, else
    /// 127.0.0.1:6123).
    #[arg(long)]
    cluster_addr: Option<String>,
    /// coordinator with --workers: how long an attempt waits for all workers to register.
    #[arg(long, default_value = "2m")]
    register_timeout: String,
}

#[derive(clap::Args, Debug, Clone)]
struct WorkerArgs {
    /// Manifest path, or env:VAR (the coordinator's manifest: the spec digests must match).
    manifest: String,
    /// The coordinator's cluster address (its --cluster-addr).
    #[arg(long)]
    coordinator: String,
    /// Where to listen for data from other workers (default 0.0.0.0:0 in a pod, else
    /// 127.0.0.1:0).
    #[arg(long)]
    data_addr: Option<String>,
    /// Host other workers connect to (default: the IP of --data-addr; POD_IP when that is a
    /// wildcard address).
    #[arg(long)]
    advertise_host: Option<String>,
    /// File holding the job token (else env STREAMJOB_CONTROL_TOKEN).
    #[arg(long)]
    token_file: Option<String>,
    /// Name in the coordinator's logs (default $POD_NAME, else worker-<pid>).
    #[arg(long)]
    name: Option<String>,
    /// Exit when the coordinator stays unreachable this long.
    #[arg(long, default_value = "5m")]
    reconnect_timeout: String,
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
    /// Delete savepoint directories (refuses anything that is not a savepoint; missing is fine).
    Dispose {
        manifest: String,
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// A worker: runs the subtasks the coordinator (started with --workers) places on it.
    Worker(WorkerArgs),
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
        /// Compare running the subtasks in one process with running them on this many workers
        /// connected over loopback TCP (checkpoints on).
        #[arg(long, default_value_t = 0)]
        workers: usize,
    },
    /// Kafka source throughput next to a plain rdkafka consumer on the same topic.
    BenchKafka {
        /// Bootstrap servers of the broker holding the topic.
        #[arg(long)]
        bootstrap: String,
        /// Topic to read (whole, from the beginning).
        #[arg(long)]
        topic: String,
        /// Schema of the JSON values, as the manifest's `schema` list.
        #[arg(
            long,
            default_value = "[{name: user, type: string}, {name: amount, type: int64}, {name: ts, type: timestamp}]"
        )]
        schema: String,
        /// Parallelism of the job.
        #[arg(long, default_value_t = 1)]
        parallelism: u32,
        /// Checkpoint interval of the run with checkpoints on.
        #[arg(long, default_value = "1s")]
        checkpoint_interval: String,
    },
}

/// Reads a manifest from a path or `env:VAR`. A file is what a user wrote: unknown fields are
/// refused (a typo would otherwise be ignored). `env:` holds what the operator wrote for its
/// pods, read leniently so an older runtime image reads a newer operator's manifest.
pub fn read_manifest(manifest: &str) -> Result<StreamJob> {
    match manifest.strip_prefix("env:") {
        Some(var) => {
            let text = std::env::var(var).map_err(|_| {
                Error::Other(format!("environment variable {var} (manifest) is not set"))
            })?;
            Ok(StreamJob::from_yaml(&text)?)
        }
        None => {
            let text = std::fs::read_to_string(manifest)
                .map_err(|e| Error::Other(format!("cannot read manifest {manifest}: {e}")))?;
            Ok(StreamJob::from_yaml_strict(&text)?)
        }
    }
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
        Command::Dispose { manifest, paths } => dispose(&manifest, &paths).await,
        Command::Worker(args) => worker(args, registry).await,
        Command::Bench {
            seconds,
            parallelism,
            checkpoint_interval,
            queries,
            workers,
        } => crate::bench::run(
            seconds,
            parallelism,
            &checkpoint_interval,
            queries.as_deref(),
            workers,
        )
        .await
        .map(|()| ExitCode::SUCCESS),
        Command::BenchKafka {
            bootstrap,
            topic,
            schema,
            parallelism,
            checkpoint_interval,
        } => crate::bench_kafka::run(
            &bootstrap,
            &topic,
            &schema,
            parallelism,
            &checkpoint_interval,
        )
        .await
        .map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            crate::termination::write(&format!("error: {e}"));
            match e {
                Error::Incompatible { .. } => ExitCode::from(EXIT_INCOMPATIBLE),
                Error::Superseded { .. } => ExitCode::from(EXIT_SUPERSEDED),
                Error::Manifest(_)
                | Error::Plan { .. }
                | Error::Unsupported(_)
                | Error::Rewind { .. }
                | Error::NoConditionalWrites { .. } => ExitCode::from(exit::INVALID),
                _ => ExitCode::from(1),
            }
        }
    }
}

async fn load(manifest: &str, registry: &Registry) -> Result<JobGraph> {
    let job = read_manifest(manifest)?;
    build_graph(&job, registry).await
}

/// When `from` is a `chk-N` folder of the job's `checkpoints.dir`: the newest complete checkpoint
/// there and its metadata (none when `from` is anything else or nothing newer can be read).
async fn newest_checkpoint_beside(
    from: &str,
    graph: &JobGraph,
) -> Option<(Location, SnapshotMetadata)> {
    let (dir, name) = from.trim_end_matches('/').rsplit_once('/')?;
    if !name.starts_with("chk-") || dir != graph.spec.checkpoints.dir.trim_end_matches('/') {
        return None;
    }
    let dir = Location::parse(dir, graph.spec.storage.as_ref()).ok()?;
    let (_, newest) = crate::snapshot::latest_checkpoint(&dir).await.ok()??;
    let meta = SnapshotMetadata::read(&newest).await.ok()?;
    Some((newest, meta))
}

async fn plan(manifest: &str, from: &str, json: bool, registry: &Registry) -> Result<ExitCode> {
    let graph = load(manifest, registry).await?;
    let mut loc = Location::parse(from, graph.spec.storage.as_ref())?;
    let meta = match SnapshotMetadata::read(&loc).await {
        Ok(meta) => meta,
        Err(e) => match newest_checkpoint_beside(from, &graph).await {
            // Retention can remove a checkpoint between the operator reading status and this
            // pod reading it (seconds, at short intervals). Every checkpoint in that folder
            // after it records the same running job graph, so the newest answers the same
            // question.
            Some((newer, meta)) => {
                eprintln!(
                    "{from}: {e}; planning against the newest checkpoint {}",
                    newer.display()
                );
                loc = newer;
                meta
            }
            None => return Err(e),
        },
    };
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
    crate::termination::write(&crate::termination::plan_report(&report));
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
        let t = t.trim();
        if t.is_empty() {
            // an empty token would admit anyone who sends an empty one
            return Err(Error::Other(format!(
                "token file {f} is empty: put the job's token in it (the operator keeps it in the Secret <job>-control-token)"
            )));
        }
        return Ok(Some(t.to_string()));
    }
    Ok(std::env::var(TOKEN_ENV)
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty()))
}

async fn run(args: RunArgs, registry: Registry, coordinator: bool) -> Result<ExitCode> {
    let graph = load(&args.manifest, &registry).await?;
    let exit_grace = streamjob_crds::units::parse_duration("--exit-grace", &args.exit_grace)?;
    let restore = match (&args.from_savepoint, args.resume) {
        _ if args.fresh => RestoreFrom::Empty,
        (Some(p), true) => RestoreFrom::ResumeAfter(p.clone()),
        (Some(p), false) => RestoreFrom::Path(p.clone()),
        (None, true) => RestoreFrom::LatestCheckpoint,
        (None, false) => match &graph.spec.initial_savepoint {
            Some(p) => RestoreFrom::Path(p.clone()),
            None => RestoreFrom::Empty,
        },
    };
    if args.workers.is_some_and(|n| n > 0) && !coordinator {
        return Err(Error::Other(
            "--workers: `run` keeps every subtask in this process; use `coordinator --workers N` with `worker` processes".into(),
        ));
    }
    let (shared, requests) = Shared::new(&graph.name);
    let token = read_token(args.token_file.as_deref())?;
    let addr = match (&args.control_addr, coordinator) {
        (Some(a), _) => Some(a.clone()),
        (None, true) => Some(pod_addr(streamjob_contract::process::CONTROL_PORT)),
        (None, false) => None,
    };
    if args.standby && (args.from_savepoint.is_some() || args.resume) {
        tracing::info!(
            "--standby: --from-savepoint/--resume are ignored, POST /v1/start decides the restore"
        );
    }
    let metrics_addr = match (&args.metrics_addr, coordinator) {
        (Some(a), _) => Some(a.clone()),
        (None, true) if std::env::var_os("POD_IP").is_some() => {
            Some(pod_addr(streamjob_contract::process::METRICS_PORT))
        }
        _ => None,
    };
    if let Some(addr) = metrics_addr {
        let parsed = listen_addr("--metrics-addr", &addr)?;
        let bound = crate::control::serve_metrics(shared.clone(), parsed).await?;
        eprintln!("metrics: http://{bound}/metrics");
    }
    let serving = addr.is_some();
    if let Some(addr) = addr {
        let addr = parse_addr("--control-addr", &addr, token.as_deref())?;
        let stores = crate::control::JobStores::of(&graph.spec);
        let bound = crate::control::serve(shared.clone(), addr, token.clone(), stores).await?;
        eprintln!("control API: http://{bound}");
    }
    // signals: `run` stops with a savepoint (the user's Ctrl-C); `coordinator` (pods: SIGTERM
    // means the pod goes away) stops with a final checkpoint that `--resume` restores, because a
    // savepoint nobody records would make the recreated pod rewind to an older checkpoint. A
    // second signal, or a signal while nothing runs, exits at once.
    {
        let shared = shared.clone();
        tokio::spawn(async move {
            let mut count = 0;
            loop {
                wait_for_signal().await;
                count += 1;
                let state = shared.status().state;
                match state {
                    _ if count > 1 => {
                        eprintln!("exiting without savepoint");
                        std::process::exit(130);
                    }
                    RunState::Standby
                    | RunState::Finished
                    | RunState::Created
                    | RunState::Cancelled => {
                        tracing::info!(%state, "signal: nothing runs, exiting");
                        std::process::exit(0);
                    }
                    RunState::Failed => std::process::exit(1),
                    _ if shared
                        .awaiting_start
                        .load(std::sync::atomic::Ordering::SeqCst) =>
                    {
                        std::process::exit(1)
                    }
                    RunState::Stopping => {
                        // a stop with savepoint is under way: let it end, then exit
                        shared
                            .shutdown
                            .store(true, std::sync::atomic::Ordering::SeqCst);
                        tracing::info!(
                            "signal during a stop with savepoint: exiting when it completes (signal again to exit at once)"
                        );
                    }
                    _ if coordinator => {
                        tracing::info!(
                            "stop requested: taking a final checkpoint (signal again to exit at once)"
                        );
                        shared.request_stop_checkpoint();
                    }
                    _ => {
                        tracing::info!(
                            "stop requested: taking a savepoint (signal again to exit at once)"
                        );
                        shared
                            .shutdown
                            .store(true, std::sync::atomic::Ordering::SeqCst);
                        shared.request_savepoint(None, true, false);
                    }
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
                    .map(|c| {
                        format!(
                            "chk-{} ({} ms)",
                            c.id.unwrap_or_default(),
                            c.duration_ms.unwrap_or_default()
                        )
                    })
                    .unwrap_or_else(|| "none".into());
                eprint!(
                    "\r\x1b[2K{} | in {} ({:.0}/s) | out {} | last checkpoint {}",
                    s.state, s.records_in, s.records_in_per_second, s.records_out, ck
                );
            }
        });
    }
    // `run` is local mode: every subtask in this process whatever spec.workers says
    let worker_count = match args.workers {
        Some(n) => n,
        None if coordinator => graph.spec.workers as usize,
        None => 0,
    };
    let workers = if worker_count > 0 {
        let addr = args
            .cluster_addr
            .clone()
            .unwrap_or_else(|| pod_addr(streamjob_contract::process::CLUSTER_PORT));
        let addr = parse_addr("--cluster-addr", &addr, token.as_deref())?;
        let register_timeout =
            streamjob_crds::units::parse_duration("--register-timeout", &args.register_timeout)?;
        let w = crate::cluster::workers::Workers::listen(
            addr,
            worker_count,
            token.clone(),
            crate::cluster::wire::spec_digest(&graph.spec)?,
            register_timeout,
        )
        .await?;
        eprintln!("workers register at: {}", w.local_addr());
        Some(w)
    } else {
        None
    };
    let result = run_job(
        graph,
        RunOptions {
            restore,
            max_restarts: args.max_restarts,
            standby: args.standby,
            workers: workers.clone(),
            epoch: args.epoch,
            resume_own: args.resume && args.epoch.is_some(),
        },
        shared.clone(),
        requests,
    )
    .await;
    if let Some(w) = &workers {
        w.shutdown(match &result {
            Ok(Outcome::Finished) => "the job finished",
            Ok(Outcome::Checkpointed { .. }) => "the coordinator stopped with a final checkpoint",
            Ok(Outcome::Cancelled) => "the job was cancelled",
            Ok(_) => "the job stopped with a savepoint",
            Err(_) => "the job failed",
        })
        .await;
    }
    let outcome = result?;
    match outcome {
        Outcome::Finished => {
            eprintln!("job finished");
            Ok(ExitCode::SUCCESS)
        }
        Outcome::Stopped { savepoint } | Outcome::StoppedToStandby { savepoint } => {
            println!("savepoint: {savepoint}");
            crate::termination::write(&crate::termination::savepoint(&savepoint));
            // whoever asked for the stop may not have read the savepoint's path yet: keep
            // answering `GET /v1/savepoints/{id}` and `/v1/status` for a moment
            if serving
                && !exit_grace.is_zero()
                && !shared.shutdown.load(std::sync::atomic::Ordering::SeqCst)
            {
                tracing::info!(grace = ?exit_grace, "stopped with a savepoint: exiting after the grace period");
                tokio::time::sleep(exit_grace).await;
            }
            Ok(ExitCode::SUCCESS)
        }
        // run_job waits in state `cancelled` instead of returning this
        Outcome::Cancelled => Ok(ExitCode::SUCCESS),
        Outcome::Checkpointed { checkpoint } => {
            println!("checkpoint: {checkpoint}");
            crate::termination::write(&crate::termination::checkpoint(&checkpoint));
            // not 0: the job did not end, a restarted container resumes from the checkpoint
            Ok(ExitCode::from(EXIT_SIGNALLED))
        }
    }
}

/// The default listen address: every interface in a pod (where `POD_IP` is set), so that
/// `kubectl port-forward`, which dials the pod's loopback, reaches it; loopback elsewhere.
fn pod_addr(port: u16) -> String {
    match std::env::var_os("POD_IP") {
        Some(_) => format!("0.0.0.0:{port}"),
        None => format!("127.0.0.1:{port}"),
    }
}

/// A listen address as given, `0.0.0.0` meaning every interface of the pod in its family.
fn listen_addr(flag: &str, addr: &str) -> Result<SocketAddr> {
    let parsed: SocketAddr = addr
        .parse()
        .map_err(|e| Error::Other(format!("{flag} {addr}: {e}")))?;
    let pod_ip = std::env::var("POD_IP").ok();
    Ok(streamjob_contract::process::listen_in_pod(
        parsed,
        pod_ip.as_deref(),
    ))
}

/// Parses a listen address; off loopback it needs a token.
fn parse_addr(flag: &str, addr: &str, token: Option<&str>) -> Result<SocketAddr> {
    let parsed = listen_addr(flag, addr)?;
    if token.is_none() && !parsed.ip().is_loopback() {
        return Err(Error::Other(format!(
            "refusing to listen ({flag}) on non-loopback {parsed} without a token: pass --token-file or set STREAMJOB_CONTROL_TOKEN"
        )));
    }
    Ok(parsed)
}

/// `worker`: serves the coordinator until it ends the job.
async fn worker(args: WorkerArgs, registry: Registry) -> Result<ExitCode> {
    let graph = load(&args.manifest, &registry).await?;
    let token = read_token(args.token_file.as_deref())?;
    let data_addr = args.data_addr.clone().unwrap_or_else(|| pod_addr(0));
    let data_addr = parse_addr("--data-addr", &data_addr, token.as_deref())?;
    // other workers dial the advertised host: never a wildcard address
    let advertise_host = match (&args.advertise_host, data_addr.ip().is_unspecified()) {
        (Some(h), _) => Some(h.clone()),
        (None, false) => None,
        (None, true) => Some(std::env::var("POD_IP").map_err(|_| {
            Error::Other(format!(
                "--data-addr {data_addr} listens on every interface: pass --advertise-host \
                 (or set POD_IP) for the address other workers dial"
            ))
        })?),
    };
    let name = args
        .name
        .clone()
        .or_else(|| std::env::var("POD_NAME").ok())
        .unwrap_or_else(|| format!("worker-{}", std::process::id()));
    let reconnect_timeout =
        streamjob_crds::units::parse_duration("--reconnect-timeout", &args.reconnect_timeout)?;
    let span = tracing::info_span!("worker", %name);
    let crate::cluster::worker::WorkerExit::JobOver(reason) = crate::cluster::worker::run_worker(
        graph,
        crate::cluster::worker::WorkerOptions {
            coordinator: args.coordinator.clone(),
            data_addr,
            advertise_host,
            token,
            name,
            reconnect_timeout,
        },
    )
    .instrument(span)
    .await?;
    eprintln!("worker done: {reason}");
    Ok(ExitCode::SUCCESS)
}

/// Exit code of a coordinator stopped by a signal after its final checkpoint (128 + SIGTERM).
pub const EXIT_SIGNALLED: u8 = exit::SIGNALLED;

/// `dispose MANIFEST PATH...`: deletes savepoint directories on the manifest's storage.
async fn dispose(manifest: &str, paths: &[String]) -> Result<ExitCode> {
    let job = read_manifest(manifest)?;
    let storage = job.spec.storage.as_ref();
    let mut refused = Vec::new();
    for path in paths {
        let span = tracing::info_span!("dispose", %path);
        match dispose_one(path, storage).instrument(span).await {
            Ok(true) => println!("disposed {path}"),
            Ok(false) => println!("already gone {path}"),
            Err(e) => {
                println!("refused {path}: {e}");
                refused.push(format!("{path}: {e}"));
            }
        }
    }
    if refused.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(Error::Other(format!(
            "refused to dispose {} path(s): {}",
            refused.len(),
            refused.join("; ")
        )))
    }
}

/// Deletes one savepoint; `Ok(false)` if there is nothing at `path`.
async fn dispose_one(
    path: &str,
    storage: Option<&streamjob_crds::v1alpha1::StorageSpec>,
) -> Result<bool> {
    // `Location::parse` creates missing local directories: look before touching it
    let trimmed = path.trim_end_matches('/');
    let local = match trimmed.strip_prefix("file://") {
        Some(p) => Some(p),
        None if trimmed.contains("://") => None,
        None => Some(trimmed),
    };
    if let Some(p) = local {
        if p.is_empty() {
            return Err(Error::Other(
                "refusing to dispose the root directory".into(),
            ));
        }
        if !std::path::Path::new(p).exists() {
            return Ok(false);
        }
    }
    let loc = Location::parse(path, storage)?;
    if !loc.exists(crate::snapshot::METADATA_FILE).await? {
        // nothing left (an empty directory, or an object store prefix without objects)
        if loc.list_files().await?.is_empty() {
            return Ok(false);
        }
        return Err(Error::Other(
            "not a savepoint: no _metadata in this directory".into(),
        ));
    }
    // only the kind matters: a savepoint of a newer format version is still a savepoint
    #[derive(serde::Deserialize)]
    struct Kind {
        kind: crate::snapshot::SnapshotKind,
    }
    let bytes = loc.get(crate::snapshot::METADATA_FILE).await?;
    let kind: Kind = serde_json::from_slice(&bytes).map_err(|e| {
        Error::Other(format!(
            "not a savepoint: _metadata is not snapshot metadata ({e})"
        ))
    })?;
    if kind.kind != crate::snapshot::SnapshotKind::Savepoint {
        return Err(Error::Other(
            "not a savepoint: _metadata says it is a checkpoint (checkpoints are managed by the runtime's retention)".into(),
        ));
    }
    // `_metadata` goes last: an interrupted disposal leaves a directory that is still
    // recognisably a savepoint, so a retry finishes it instead of refusing it
    for (file, _) in loc.list_files().await? {
        if file != crate::snapshot::METADATA_FILE {
            loc.delete(&file).await?;
        }
    }
    loc.delete(crate::snapshot::METADATA_FILE).await?;
    loc.delete_dir("").await?;
    tracing::info!("savepoint disposed");
    Ok(true)
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
