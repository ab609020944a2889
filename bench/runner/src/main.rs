//! `streamjob-bench`: Streamjob vs Apache Flink, side by side (issue 7).
//!
//! ```text
//! cargo run --release -p streamjob-bench -- [--quick] [--events N] [--queries q0,q5] [--parallelism 1,2]
//! ```
//!
//! Generates the shared CSV input once (`bench/flink/generate.sh`), then for every query and
//! parallelism runs `target/release/streamjob-runtime run MANIFEST` and `bench/flink/run.sh` one
//! after the other, reads both outputs back, and prints a table of ratios (also written to
//! `target/bench/results.json`). Exit code 1 when an output differs (MISMATCH) or Flink fails.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use serde::Serialize;
use streamjob_bench::engine::{EngineRun, RunContext, Status, run_flink, run_ours};
use streamjob_bench::manifest::{self, JobPaths};
use streamjob_bench::measure::{Job, measure_child, run_measured};
use streamjob_bench::plainwrite::{PLAIN_WRITE_COMMAND, PlainWrite, plain_write};
use streamjob_bench::query::{Query, Table};
use streamjob_bench::report::{
    Expected, LimitRow, QueryRow, Verdict, describe_output, render_tables, thousands, verdict,
};

#[derive(Parser, Debug)]
#[command(
    name = "streamjob-bench",
    about = "Streamjob vs Apache Flink on the same input, same output, same run (issue 7)",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    internal: Option<Internal>,
    #[command(flatten)]
    opts: Opts,
}

#[derive(Subcommand, Debug)]
enum Internal {
    /// Runs CMD as the only child and writes its wall time and peak RSS to REPORT.
    #[command(name = "__measure", hide = true)]
    Measure {
        #[arg(long)]
        report: PathBuf,
        #[arg(long)]
        timeout_secs: u64,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        cmd: Vec<OsString>,
    },
    /// Reads a CSV table into Arrow and writes it as Parquet (zstd); writes timings to REPORT.
    #[command(name = "__plain-write", hide = true)]
    PlainWrite {
        #[arg(long)]
        table: String,
        #[arg(long)]
        csv: PathBuf,
        #[arg(long)]
        out: PathBuf,
        #[arg(long)]
        report: PathBuf,
    },
}

#[derive(Args, Debug)]
struct Opts {
    /// Small input (1,000,000 bids and 1,000,000 generator records) and a check against
    /// bench/tools/expected.py: a few minutes.
    #[arg(long)]
    quick: bool,
    /// Records per input file (default 1,000,000 with --quick, 10,000,000 otherwise).
    #[arg(long)]
    events: Option<u64>,
    /// Read bids.csv and generator.csv from this directory instead of generating them.
    #[arg(long)]
    input: Option<PathBuf>,
    /// Seed of the input generator.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Queries to run (comma separated; default all: q0,q1,q2,q5,q7,gen-count).
    #[arg(long, value_delimiter = ',')]
    queries: Vec<String>,
    /// Parallelisms to run.
    #[arg(long, value_delimiter = ',', default_values_t = [1u32, 2])]
    parallelism: Vec<u32>,
    /// Checkpoint interval of both engines.
    #[arg(long, default_value_t = 10_000)]
    checkpoint_interval_ms: u64,
    /// Also compare with bench/tools/expected.py without --quick (pure Python: slow on 10M).
    #[arg(long)]
    expected: bool,
    /// Do not compare with bench/tools/expected.py, even with --quick.
    #[arg(long, conflicts_with = "expected")]
    no_expected: bool,
    /// Do not run `cargo build --release -p streamjob-runtime` first.
    #[arg(long)]
    no_build: bool,
    /// Cargo features the runtime binary is built with besides its defaults (none needed: the
    /// file sink is built in).
    #[arg(long, default_value = "")]
    runtime_features: String,
    /// Runtime binary to use (implies --no-build).
    #[arg(long)]
    runtime_bin: Option<PathBuf>,
    /// Working directory (default <target>/bench).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Keep the output and checkpoint directories of every run.
    #[arg(long)]
    keep_outputs: bool,
    /// Timeout per engine run (default 120 s + 1 s per 10,000 events).
    #[arg(long)]
    timeout_secs: Option<u64>,
    /// Skip the physical-limit measurements.
    #[arg(long)]
    skip_limits: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.internal {
        Some(Internal::Measure {
            report,
            timeout_secs,
            cmd,
        }) => internal_measure(&report, timeout_secs, &cmd),
        Some(Internal::PlainWrite {
            table,
            csv,
            out,
            report,
        }) => internal_plain_write(&table, &csv, &out, &report),
        None => bench(&cli.opts),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn internal_measure(report: &Path, timeout_secs: u64, cmd: &[OsString]) -> Result<ExitCode> {
    let (program, args) = cmd.split_first().context("__measure: no command")?;
    let m = measure_child(program, args, Duration::from_secs(timeout_secs))?;
    std::fs::write(report, serde_json::to_vec(&m)?)
        .with_context(|| format!("writing {}", report.display()))?;
    Ok(ExitCode::SUCCESS)
}

fn table_named(name: &str) -> Result<Table> {
    match name {
        "bids" => Ok(Table::Bids),
        "generator" => Ok(Table::Generator),
        other => bail!("unknown table {other:?} (bids or generator)"),
    }
}

fn internal_plain_write(table: &str, csv: &Path, out: &Path, report: &Path) -> Result<ExitCode> {
    let r = plain_write(table_named(table)?, csv, out)?;
    std::fs::write(report, serde_json::to_vec(&r)?)
        .with_context(|| format!("writing {}", report.display()))?;
    Ok(ExitCode::SUCCESS)
}

/// The repository root (holding bench/flink/run.sh).
fn repo_root() -> Result<PathBuf> {
    let from_build = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut candidates = vec![from_build];
    if let Ok(cwd) = std::env::current_dir() {
        candidates.extend(cwd.ancestors().map(Path::to_path_buf));
    }
    for c in candidates {
        if c.join("bench/flink/run.sh").is_file() {
            return Ok(c.canonicalize()?);
        }
    }
    bail!("cannot find the repository root (a directory with bench/flink/run.sh)")
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".to_string())
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(0, usize::from)
}

fn run_checked(cmd: &mut Command, what: &str) -> Result<()> {
    let status = cmd.status().with_context(|| format!("starting {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

fn count_lines(path: &Path) -> Result<u64> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut buf = vec![0u8; 1 << 20];
    let (mut lines, mut last) = (0u64, b'\n');
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        let chunk = buf.get(..n).unwrap_or_default();
        lines += chunk.iter().filter(|b| **b == b'\n').count() as u64;
        last = chunk.last().copied().unwrap_or(last);
    }
    if last != b'\n' {
        lines += 1;
    }
    // minus the header line
    Ok(lines.saturating_sub(1))
}

/// Directory holding only `table`'s file (a hard link: the very same bytes), for the runtime's
/// `files` source, which reads every file under a prefix.
fn table_view(input: &Path, views: &Path, table: Table) -> Result<PathBuf> {
    let dir = views.join(table.name());
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let src = input.join(table.file_name());
    let dst = dir.join(table.file_name());
    if std::fs::hard_link(&src, &dst).is_err() {
        std::fs::copy(&src, &dst).with_context(|| format!("copying {}", src.display()))?;
    }
    Ok(dir)
}

fn expected(repo: &Path, query: Query, input: &Path) -> Result<Expected> {
    let out = Command::new("python3")
        .arg(repo.join("bench/tools/expected.py"))
        .arg(query.name())
        .arg(input)
        .output()
        .context("running python3 bench/tools/expected.py")?;
    if !out.status.success() {
        bail!(
            "expected.py {query} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct InputInfo {
    generator: String,
    dir: String,
    bids: u64,
    bids_bytes: u64,
    generator_records: u64,
    generator_bytes: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Results<'a> {
    command: String,
    started_at: String,
    finished_at: String,
    cores: usize,
    load_average_start: String,
    load_average_end: String,
    flink: &'a str,
    checkpoint_interval_ms: u64,
    ours_seconds_basis: &'a str,
    flink_seconds_basis: &'a str,
    input: InputInfo,
    rows: &'a [QueryRow],
    limits: &'a [LimitRow],
    table: String,
}

const OURS_BASIS: &str = "events / wall time of the `streamjob-runtime run` process (start-up, planning and the final checkpoint included)";
const FLINK_BASIS: &str = "events / Flink job submission → job result (JVM warm-up included, JVM and MiniCluster start-up excluded), as bench/flink/run.sh reports it";

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map_or(0, |m| m.len())
}

fn limit_from_run(name: &str, run: &EngineRun, note: &str) -> LimitRow {
    LimitRow {
        name: name.to_string(),
        status: run.status.clone(),
        events: run.events,
        seconds: run.seconds,
        events_per_second: run.events_per_second_per_core,
        peak_rss_mib: (run.peak_rss_mib > 0.0).then_some(run.peak_rss_mib),
        note: note.to_string(),
    }
}

fn bench(opts: &Opts) -> Result<ExitCode> {
    let started_at = chrono::Utc::now();
    let load_start = load_average();
    let command = format!(
        "cargo run --release -p streamjob-bench --{}",
        std::env::args()
            .skip(1)
            .map(|a| format!(" {a}"))
            .collect::<String>()
    );
    let repo = repo_root()?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("target"));
    let work = opts
        .work_dir
        .clone()
        .unwrap_or_else(|| target.join("bench"));
    std::fs::create_dir_all(&work)?;
    let work = work.canonicalize()?;
    let exe = std::env::current_exe().context("locating this binary")?;
    let queries: Vec<Query> = if opts.queries.is_empty() {
        Query::ALL.to_vec()
    } else {
        opts.queries
            .iter()
            .map(|q| Query::parse(q).with_context(|| format!("unknown query {q:?}")))
            .collect::<Result<_>>()?
    };
    let n = opts
        .events
        .unwrap_or(if opts.quick { 1_000_000 } else { 10_000_000 });
    let use_expected = !opts.no_expected && (opts.quick || opts.expected);

    // 1. build both sides once (not timed)
    let runtime_bin = match &opts.runtime_bin {
        Some(b) => b.clone(),
        None => {
            if !opts.no_build {
                let mut args = vec!["build", "--release", "-p", "streamjob-runtime", "-j2"];
                if !opts.runtime_features.is_empty() {
                    args.extend(["--features", opts.runtime_features.as_str()]);
                }
                eprintln!("building the runtime: cargo {}", args.join(" "));
                let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
                run_checked(
                    Command::new(cargo).args(&args).current_dir(&repo),
                    "cargo build --release -p streamjob-runtime",
                )?;
            }
            target.join("release/streamjob-runtime")
        }
    };
    if !runtime_bin.is_file() {
        bail!("runtime binary {} is missing", runtime_bin.display());
    }
    run_checked(
        &mut Command::new(repo.join("bench/flink/build.sh")),
        "bench/flink/build.sh (Flink job jar)",
    )?;

    let per_run_timeout = Duration::from_secs(opts.timeout_secs.unwrap_or(120 + n / 10_000));
    let cx = RunContext {
        exe: &exe,
        repo: &repo,
        checkpoint_interval_ms: opts.checkpoint_interval_ms,
        timeout: per_run_timeout,
    };
    let mut limits: Vec<LimitRow> = Vec::new();
    let logs = work.join("logs");
    let _ = std::fs::remove_dir_all(&logs);
    std::fs::create_dir_all(&logs)?;

    // 2. the shared input, generated once
    let (input, generator) = match &opts.input {
        Some(dir) => (
            dir.canonicalize()
                .with_context(|| format!("input directory {}", dir.display()))?,
            format!("given directory {}", dir.display()),
        ),
        None => {
            let dir = work.join("input");
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir)?;
            eprintln!(
                "generating {n} bids and {n} generator records (bench/flink/generate.sh, seed {})",
                opts.seed
            );
            let script = repo.join("bench/flink/generate.sh");
            let m = run_measured(
                &exe,
                &logs.join("generate.measure.json"),
                &Job {
                    program: script.as_os_str(),
                    args: vec![
                        dir.as_os_str().to_owned(),
                        n.to_string().into(),
                        n.to_string().into(),
                        opts.seed.to_string().into(),
                    ],
                    env: vec![],
                    stdout: &logs.join("generate.stdout"),
                    stderr: &logs.join("generate.stderr"),
                    timeout: Duration::from_secs(600 + n / 10_000),
                },
            )?;
            if !m.success() {
                bail!(
                    "bench/flink/generate.sh failed ({}); see {}",
                    m.describe_exit(),
                    logs.join("generate.stderr").display()
                );
            }
            limits.push(LimitRow {
                name: "input generation: Java GenerateInput → CSV (bench/flink/generate.sh)".into(),
                status: Status::Ok,
                events: 2 * n,
                seconds: m.wall_seconds,
                events_per_second: 2.0 * n as f64 / m.wall_seconds.max(1e-9),
                peak_rss_mib: Some(m.peak_rss_mib()),
                note: "both files, JVM start-up included; not an engine limit".into(),
            });
            (
                dir,
                format!(
                    "bench/flink/generate.sh (Java GenerateInput, seed {}): the fallback generator; the runtime's nexmark source cannot write CSV files yet",
                    opts.seed
                ),
            )
        }
    };
    let bids_csv = input.join(Table::Bids.file_name());
    let gen_csv = input.join(Table::Generator.file_name());
    let bids = count_lines(&bids_csv)?;
    let gens = count_lines(&gen_csv)?;
    let views = work.join("tables");
    let bids_view = table_view(&input, &views, Table::Bids)?;
    let gen_view = table_view(&input, &views, Table::Generator)?;
    let info = InputInfo {
        generator,
        dir: input.display().to_string(),
        bids,
        bids_bytes: file_len(&bids_csv),
        generator_records: gens,
        generator_bytes: file_len(&gen_csv),
    };
    eprintln!(
        "input: {} bids ({:.0} MB), {} generator records ({:.0} MB) in {}",
        bids,
        info.bids_bytes as f64 / 1e6,
        gens,
        info.generator_bytes as f64 / 1e6,
        input.display()
    );

    // 3. the engine-independent reference
    let mut expectations = std::collections::BTreeMap::new();
    if use_expected {
        for q in &queries {
            eprintln!("expected.py {q} ...");
            expectations.insert(q.name(), expected(&repo, *q, &input)?);
        }
    }

    // 4. every query at every parallelism: ours, then Flink, never concurrently
    let runs = work.join("runs");
    let _ = std::fs::remove_dir_all(&runs);
    let mut rows: Vec<QueryRow> = Vec::new();
    let total = queries.len() * opts.parallelism.len();
    for q in &queries {
        for &p in &opts.parallelism {
            let dir = runs.join(format!("{q}-p{p}"));
            std::fs::create_dir_all(&dir)?;
            let (events, view) = match q.table() {
                Table::Bids => (bids, &bids_view),
                Table::Generator => (gens, &gen_view),
            };
            let ours_out = dir.join("ours-out");
            let ours_ckpt = dir.join("ours-checkpoints");
            let job = manifest::query_job(
                *q,
                p,
                &JobPaths {
                    table_dir: view,
                    output_dir: &ours_out,
                    checkpoint_dir: &ours_ckpt,
                },
                opts.checkpoint_interval_ms,
            )?;
            let manifest_path = dir.join("streamjob.yaml");
            std::fs::write(&manifest_path, manifest::to_yaml(&job)?)?;
            eprintln!("[{}/{total}] {q} P={p}: ours ...", rows.len() + 1);
            let t = Instant::now();
            let ours = run_ours(
                &cx,
                &runtime_bin,
                &manifest_path,
                Some(&ours_out),
                events,
                p,
                &logs.join(format!("{q}-p{p}-ours")),
            )?;
            eprintln!(
                "    ours: {} in {:.1} s",
                summary_line(&ours, *q),
                t.elapsed().as_secs_f64()
            );
            let flink_out = dir.join("flink-out");
            eprintln!("[{}/{total}] {q} P={p}: Flink ...", rows.len() + 1);
            let t = Instant::now();
            let flink = run_flink(
                &cx,
                *q,
                &input,
                &flink_out,
                events,
                p,
                &logs.join(format!("{q}-p{p}-flink")),
            )?;
            eprintln!(
                "    Flink: {} in {:.1} s",
                summary_line(&flink, *q),
                t.elapsed().as_secs_f64()
            );
            let exp = expectations.get(q.name()).cloned();
            let v = verdict(*q, &ours, &flink, exp.as_ref());
            let ratio = (v == Verdict::Equal && flink.events_per_second_per_core > 0.0)
                .then(|| ours.events_per_second_per_core / flink.events_per_second_per_core);
            if let Verdict::Mismatch(d) = &v {
                eprintln!("    MISMATCH: {}", d.join(" / "));
            }
            if !opts.keep_outputs {
                for d in [&ours_out, &ours_ckpt, &flink_out] {
                    let _ = std::fs::remove_dir_all(d);
                }
            }
            rows.push(QueryRow {
                query: *q,
                parallelism: p,
                manifest: manifest_path.display().to_string(),
                ours,
                flink,
                expected: exp,
                verdict: v,
                ratio,
            });
        }
    }

    // 5. physical limits, in the same run
    if !opts.skip_limits {
        limits.extend(measure_limits(
            &cx,
            opts,
            &work,
            &logs,
            &runtime_bin,
            n,
            &[
                (Table::Bids, bids, &bids_view),
                (Table::Generator, gens, &gen_view),
            ],
        )?);
    }

    // 6. the table
    let table = render_tables(&rows, &limits);
    let load_end = load_average();
    let cps = manifest::duration_ms(opts.checkpoint_interval_ms);
    let mut text = String::new();
    text.push_str("Streamjob vs Apache Flink 2.3.0: same input, same pipelines, same output, same run (issue 7)\n");
    text.push_str(&format!("command: {command}\n"));
    text.push_str(&format!(
        "input: {} bids ({:.0} MB) + {} generator records ({:.0} MB), written by {}; both engines read the same files\n",
        thousands(bids as f64),
        info.bids_bytes as f64 / 1e6,
        thousands(gens as f64),
        info.generator_bytes as f64 / 1e6,
        info.generator
    ));
    text.push_str(&format!(
        "setup: one CSV reader (P=1), operators at P, exactly-once file sink → Parquet zstd, checkpoints every {cps}; {} cores, load average {load_start} at start, {load_end} at end\n",
        cores()
    ));
    text.push_str(&format!(
        "ours ev/s/core = {OURS_BASIS} / P\nFlink ev/s/core = {FLINK_BASIS} / P\n"
    ));
    text.push_str("ratio = ours / Flink (shown only when both outputs are equal); ckpt p99 = nearest-rank p99 of all completed checkpoints (n = how many); RSS = peak resident set of the engine process\n\n");
    text.push_str(&table);
    println!("{text}");

    let results = Results {
        command,
        started_at: started_at.to_rfc3339(),
        finished_at: chrono::Utc::now().to_rfc3339(),
        cores: cores(),
        load_average_start: load_start,
        load_average_end: load_end,
        flink: "Apache Flink 2.3.0 MiniCluster (bench/flink)",
        checkpoint_interval_ms: opts.checkpoint_interval_ms,
        ours_seconds_basis: OURS_BASIS,
        flink_seconds_basis: FLINK_BASIS,
        input: info,
        rows: &rows,
        limits: &limits,
        table: text.clone(),
    };
    let json_dir = target.join("bench");
    std::fs::create_dir_all(&json_dir)?;
    let json_path = json_dir.join("results.json");
    std::fs::write(&json_path, serde_json::to_string_pretty(&results)?)?;
    eprintln!("results: {}", json_path.display());

    let mismatches = rows
        .iter()
        .filter(|r| matches!(r.verdict, Verdict::Mismatch(_)))
        .count();
    if mismatches > 0 {
        eprintln!("{mismatches} MISMATCH row(s): see the notes under the table");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

fn summary_line(run: &EngineRun, q: Query) -> String {
    match (&run.status, &run.output) {
        (Status::Ok, Some(o)) => format!(
            "{} ev/s/core, {}",
            thousands(run.events_per_second_per_core),
            describe_output(o, q.sum_column())
        ),
        (Status::Ok, None) => "ok".to_string(),
        (Status::Unsupported(e), _) => format!("unsupported ({e})"),
        (Status::Failed(e), _) => format!("failed ({e})"),
    }
}

fn measure_limits(
    cx: &RunContext<'_>,
    opts: &Opts,
    work: &Path,
    logs: &Path,
    runtime_bin: &Path,
    n: u64,
    tables: &[(Table, u64, &PathBuf)],
) -> Result<Vec<LimitRow>> {
    let mut out = Vec::new();
    let dir = work.join("limits");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;

    // the runtime's Nexmark generator alone
    eprintln!("limit: nexmark source alone ({n} events) ...");
    let ckpt = dir.join("nexmark-checkpoints");
    let job = manifest::nexmark_limit_job(n, &ckpt, opts.checkpoint_interval_ms)?;
    let path = dir.join("nexmark.yaml");
    std::fs::write(&path, manifest::to_yaml(&job)?)?;
    let run = run_ours(
        cx,
        runtime_bin,
        &path,
        None,
        n,
        1,
        &logs.join("limit-nexmark"),
    )?;
    out.push(limit_from_run(
        "Streamjob nexmark source alone → print(limit 1)",
        &run,
        "all event kinds, process wall time",
    ));
    let _ = std::fs::remove_dir_all(&ckpt);

    for (table, events, view) in tables {
        // the runtime's CSV source alone, on the benchmark input
        eprintln!("limit: CSV files source alone ({}) ...", table.file_name());
        let ckpt = dir.join(format!("csv-{}-checkpoints", table.name()));
        let job = manifest::csv_source_limit_job(*table, view, &ckpt, opts.checkpoint_interval_ms)?;
        let path = dir.join(format!("csv-{}.yaml", table.name()));
        std::fs::write(&path, manifest::to_yaml(&job)?)?;
        let run = run_ours(
            cx,
            runtime_bin,
            &path,
            None,
            *events,
            1,
            &logs.join(format!("limit-csv-{}", table.name())),
        )?;
        out.push(limit_from_run(
            &format!(
                "Streamjob CSV files source alone ({}) → print(limit 1)",
                table.file_name()
            ),
            &run,
            "the queries' source; process wall time",
        ));
        let _ = std::fs::remove_dir_all(&ckpt);

        // a plain write of the same bytes: CSV → Arrow → Parquet zstd, one thread, no engine
        eprintln!("limit: plain write of {} ...", table.file_name());
        let csv = view.join(table.file_name());
        let parquet = dir.join(format!("{}.parquet", table.name()));
        let report = dir.join(format!("plain-{}.json", table.name()));
        let exe_os = cx.exe.as_os_str();
        let m = run_measured(
            cx.exe,
            &logs.join(format!("limit-plain-{}.measure.json", table.name())),
            &Job {
                program: exe_os,
                args: vec![
                    PLAIN_WRITE_COMMAND.into(),
                    "--table".into(),
                    table.name().into(),
                    "--csv".into(),
                    csv.as_os_str().to_owned(),
                    "--out".into(),
                    parquet.as_os_str().to_owned(),
                    "--report".into(),
                    report.as_os_str().to_owned(),
                ],
                env: vec![],
                stdout: &logs.join(format!("limit-plain-{}.stdout", table.name())),
                stderr: &logs.join(format!("limit-plain-{}.stderr", table.name())),
                timeout: cx.timeout,
            },
        )?;
        let name = format!(
            "plain write {} → Parquet zstd (arrow-rs ArrowWriter, 1 thread)",
            table.file_name()
        );
        let row = match std::fs::read(&report)
            .ok()
            .and_then(|b| serde_json::from_slice::<PlainWrite>(&b).ok())
        {
            Some(r) if m.success() => LimitRow {
                name,
                status: Status::Ok,
                events: r.rows,
                seconds: r.total_seconds,
                events_per_second: r.rows as f64 / r.total_seconds.max(1e-9),
                peak_rss_mib: Some(m.peak_rss_mib()),
                note: format!(
                    "CSV parse {:.2} s + Parquet write {:.2} s ({} ev/s); {:.0} MB → {:.0} MB",
                    r.read_seconds,
                    r.write_seconds,
                    thousands(r.rows as f64 / r.write_seconds.max(1e-9)),
                    r.csv_bytes as f64 / 1e6,
                    r.parquet_bytes as f64 / 1e6
                ),
            },
            _ => LimitRow {
                name,
                status: Status::Failed(format!(
                    "{}; see {}",
                    m.describe_exit(),
                    logs.join(format!("limit-plain-{}.stderr", table.name()))
                        .display()
                )),
                events: *events,
                seconds: m.wall_seconds,
                events_per_second: 0.0,
                peak_rss_mib: None,
                note: String::new(),
            },
        };
        out.push(row);
        let _ = std::fs::remove_file(&parquet);
    }
    Ok(out)
}
