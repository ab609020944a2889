//! `cargo xtask <command>`: the single entry point for generating, linting, testing and benchmarking.
//! It uses nothing but std and the tools the project installs itself, so it works on a fresh machine.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

mod boundaries;
#[cfg(test)]
mod monitoring;

const USAGE: &str = "usage: cargo xtask <command>

commands:
  generate   write the CRD YAML into the chart (charts/streamjob-operator/crds/)
  lint       cargo fmt --check, the operator's layer boundaries, clippy -D warnings,
             CRD drift, helm lint + template
  boundaries which operator module may name which (xtask/src/boundaries.rs): prints the
             layer graph, fails on a broken rule or a circle
  test       every test: unit and integration tests, then the end-to-end suite
             (installs the pinned control plane, MinIO and Helm into the cache first);
             --full adds the end-to-end tests kept out of CI for time (#[ignore]d ones)
  unit       unit and integration tests only (no control plane)
  e2e        the end-to-end suite only (--full: with the #[ignore]d tests)
  install    build the pinned Kubernetes, etcd, Helm and MinIO binaries into the cache
  images     build every container image offline (e2e/scripts/build-images.sh)
  soak       a StreamJob under >= 200 random faults, checked exactly-once
             (--quick: 16 faults; --faults N, --seed S; --real-node: on containerd;
             --kafka: input from a Kafka topic, broker restarts among the faults)
  bench      benchmarks (add --quick for a short run)
  fuzz       the property tests of every parser fed from outside, each run as a fuzz target
             for a bounded time (--seconds N per target, default 60)
  ci         what .ci/run does: lint, then test";

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let Some(command) = args.first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let rest = &args[1..];
    let started = Instant::now();
    let result = match command.as_str() {
        "generate" => generate(),
        "lint" => lint(),
        "boundaries" => boundaries::check(&root().join("operator/src"), true),
        "test" => suite(rest).and_then(test),
        "unit" => unit(),
        "e2e" => suite(rest).and_then(e2e),
        "install" => install(),
        "images" => build_all().and_then(|()| images()),
        "soak" => soak(rest),
        "bench" => bench(rest),
        "fuzz" => fuzz(rest),
        "ci" => ci(Suite::Short),
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            Ok(())
        }
        other => Err(format!("unknown command {other:?}\n\n{USAGE}")),
    };
    match result {
        Ok(()) => {
            eprintln!(
                "xtask {command}: ok in {:.1}s",
                started.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("xtask {command}: FAILED: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root of the checkout `cargo xtask` runs in: cargo sets `CARGO_MANIFEST_DIR`
/// when it runs the binary; the compile-time value names whichever checkout built it last, which
/// with a shared target folder (CI clones) can be another one.
fn root() -> PathBuf {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest_dir
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// `cargo xtask ci` lints while it builds: `clippy-driver` compiles the workspace's own crates
/// (`RUSTC_WORKSPACE_WRAPPER`, what `cargo clippy` does in check mode) with `-D warnings`, and
/// makes the binaries and tests too. `cargo clippy` would compile every dependency once more in
/// check mode, which shares nothing with the build: 15–19 minutes of a cold CI run on two cores.
/// Every cargo command of the run then carries the wrapper, or cargo would rebuild the
/// workspace's crates without it.
static CLIPPY_IN_BUILD: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();

/// The toolchain's `clippy-driver`, when `ci` asked for linting while building.
fn clippy_in_build() -> Option<&'static PathBuf> {
    CLIPPY_IN_BUILD.get().and_then(Option::as_ref)
}

/// Turns linting while building on for this run (`ci`), if the toolchain has clippy-driver.
fn lint_while_building() {
    let driver = env::var_os("CARGO")
        .map(PathBuf::from)
        .and_then(|cargo| cargo.parent().map(|bin| bin.join("clippy-driver")))
        .filter(|driver| driver.is_file());
    let _ = CLIPPY_IN_BUILD.set(driver);
}

fn cargo() -> Command {
    let mut command = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".to_string()));
    command.current_dir(root());
    if let Some(driver) = clippy_in_build() {
        command
            .env("RUSTC_WORKSPACE_WRAPPER", driver)
            .env("CLIPPY_ARGS", "-Dwarnings");
    }
    // `cargo run` (the `xtask` alias) describes xtask to it in the environment (CARGO_PKG_NAME,
    // CARGO_MANIFEST_DIR, ...) and puts the target and toolchain library folders in front of
    // LD_LIBRARY_PATH. Build scripts declare `rerun-if-env-changed` on such names (ring does on
    // CARGO_PKG_NAME), and cargo compares its own environment: a nested build would not match the
    // builds run from a shell and would recompile ring, rustls and everything above them.
    for (name, _) in env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_MANIFEST_")
            || [
                "CARGO_CRATE_NAME",
                "CARGO_BIN_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "OUT_DIR",
            ]
            .contains(&name.as_ref())
        {
            command.env_remove(name.as_ref());
        }
    }
    if let Some(paths) = env::var_os("LD_LIBRARY_PATH") {
        let injected = |p: &Path| {
            p.starts_with(target_dir())
                || env::var_os("RUSTUP_HOME").is_some_and(|home| p.starts_with(home))
        };
        let kept: Vec<PathBuf> = env::split_paths(&paths).filter(|p| !injected(p)).collect();
        if kept.is_empty() {
            command.env_remove("LD_LIBRARY_PATH");
        } else if let Ok(joined) = env::join_paths(kept) {
            command.env("LD_LIBRARY_PATH", joined);
        }
    }
    command
}

/// A command as a shell line: program and arguments (not the environment [`cargo`] cleans).
fn shown(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|part| part.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

fn run(command: &mut Command) -> Result<(), String> {
    eprintln!("+ {}", shown(command));
    let status = command
        .status()
        .map_err(|e| format!("cannot start {}: {e}", shown(command)))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{} exited with {status}", shown(command)))
    }
}

fn output(command: &mut Command) -> Result<String, String> {
    let out = command
        .output()
        .map_err(|e| format!("cannot start {}: {e}", shown(command)))?;
    if !out.status.success() {
        return Err(format!(
            "{} exited with {}: {}",
            shown(command),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    String::from_utf8(out.stdout)
        .map_err(|e| format!("{} printed invalid UTF-8: {e}", shown(command)))
}

/// The Kubernetes version e2e/scripts/install.sh builds.
const KUBE_VERSION: &str = "1.36.3";

const CRD_PATH: &str = "charts/streamjob-operator/crds/streamjob.io_streamjobs.yaml";

/// The CRD YAML `crdgen` prints, from the binary [`build_all`] built (`cargo run -p` would build
/// the crate's dependencies once more, with other features).
fn generated_crd() -> Result<String, String> {
    build_all()?;
    output(&mut built_binary("crdgen"))
}

fn generate() -> Result<(), String> {
    let crd = generated_crd()?;
    let path = root().join(CRD_PATH);
    fs::write(&path, crd).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

fn lint() -> Result<(), String> {
    run(cargo().args(["fmt", "--all", "--check"]))?;
    boundaries::check(&root().join("operator/src"), false)?;
    if clippy_in_build().is_some() {
        // clippy runs inside the one build every later step reuses (see `clippy_in_build`)
        eprintln!("clippy -D warnings: while building (RUSTC_WORKSPACE_WRAPPER=clippy-driver)");
        build_all()?;
    } else {
        run(cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--locked",
            "--",
            "-D",
            "warnings",
        ]))?;
    }
    // The HDFS code is checked too: the runtime enables the sink's `hdfs` feature by default.
    let checked_in = fs::read_to_string(root().join(CRD_PATH))
        .map_err(|e| format!("cannot read {CRD_PATH}: {e}"))?;
    if checked_in != generated_crd()? {
        return Err(format!(
            "{CRD_PATH} is out of date with crds/src: run `cargo xtask generate` and commit it"
        ));
    }
    eprintln!("CRD up to date: {CRD_PATH}");
    helm_lint()
}

/// Paths of the binaries `e2e/scripts/install.sh` built, read from the env file it writes.
fn installed_tools() -> Result<Vec<(String, String)>, String> {
    let env_file = cache_dir().join("e2e-env.sh");
    let text = fs::read_to_string(&env_file).map_err(|e| {
        format!(
            "{}: {e}; run `cargo xtask install` first",
            env_file.display()
        )
    })?;
    Ok(text
        .lines()
        .filter_map(|line| line.trim().strip_prefix("export "))
        .filter_map(|assignment| assignment.split_once('='))
        .map(|(key, value)| {
            let value = value.trim_matches(|c| c == '"' || c == '\'');
            (key.to_string(), value.to_string())
        })
        .collect())
}

fn cache_dir() -> PathBuf {
    env::var_os("STREAMJOB_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env::var_os("HOME").unwrap_or_else(|| ".".into()))
                .join(".cache/streamjob")
        })
}

fn helm_lint() -> Result<(), String> {
    install()?;
    let tools = installed_tools()?;
    let helm = tools
        .iter()
        .find(|(key, _)| key == "STREAMJOB_E2E_HELM")
        .map(|(_, value)| value.clone())
        .ok_or("the install step did not report STREAMJOB_E2E_HELM")?;
    let chart = root().join("charts/streamjob-operator");
    run(Command::new(&helm).arg("lint").arg(&chart).arg("--strict"))?;
    // Cluster mode and namespaced mode must both render.
    // Built from its Go module, helm's default Kubernetes version is old; render for the pinned one.
    let cluster = output(
        Command::new(&helm)
            .args(["template", "sj"])
            .arg(&chart)
            .args(["--kube-version", KUBE_VERSION]),
    )?;
    if !cluster.contains("kind: ClusterRole") {
        return Err("helm template in cluster mode rendered no ClusterRole".into());
    }
    let namespaced = output(
        Command::new(&helm)
            .args(["template", "sj"])
            .arg(&chart)
            .args(["--kube-version", KUBE_VERSION])
            .args([
                "--set",
                "watchNamespaces={team-a,team-b}",
                "--set",
                "replicaCount=2",
            ]),
    )?;
    if namespaced.contains("kind: ClusterRole") || namespaced.matches("kind: Role\n").count() < 3 {
        return Err("helm template in namespaced mode must render one Role per namespace plus the leader-election Role and no ClusterRole".into());
    }
    if !namespaced.contains("--leader-election") {
        return Err("helm template with replicaCount=2 must enable leader election".into());
    }
    eprintln!("helm lint and template ok");
    Ok(())
}

/// Every build and test selects the whole workspace with its dev-dependencies. Cargo unifies
/// features over the selected packages (and over dev-dependencies when a test target is built):
/// one selection compiles datafusion, arrow and parquet once; each other selection (`--bins`,
/// `-p streamjob-e2e`, `--exclude`) would compile them again with other features.
fn build_all() -> Result<(), String> {
    run(cargo().args(["build", "--locked", "--workspace", "--all-targets"]))
}

/// The package whose integration tests are the end-to-end suite (they need the control plane).
const E2E_DIR: &str = "e2e";

/// `--test NAME` arguments for the workspace's integration tests (`<crate>/tests/*.rs`): those of
/// the end-to-end package when `e2e`, the others otherwise. Selecting test targets by name keeps
/// the package selection (`--workspace`) and with it the features of [`build_all`].
fn integration_tests(e2e: bool) -> Result<Vec<String>, String> {
    let mut all: Vec<(String, String)> = Vec::new();
    let entries = fs::read_dir(root()).map_err(|e| format!("cannot list the workspace: {e}"))?;
    // crates at the top level, and one level down (templates/streamjob-job, bench/runner)
    let mut crates = Vec::new();
    for entry in entries.flatten() {
        if entry.path().join("Cargo.toml").exists() {
            crates.push(entry.path());
        } else if let Ok(nested) = fs::read_dir(entry.path()) {
            crates.extend(
                nested
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.join("Cargo.toml").exists()),
            );
        }
    }
    for dir in crates {
        let krate = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Ok(tests) = fs::read_dir(dir.join("tests")) else {
            continue;
        };
        for test in tests.flatten() {
            let path = test.path();
            let name = if path.extension().is_some_and(|x| x == "rs") {
                path.file_stem()
            } else if path.join("main.rs").exists() {
                path.file_name()
            } else {
                None
            };
            if let Some(name) = name {
                all.push((krate.clone(), name.to_string_lossy().into_owned()));
            }
        }
    }
    all.sort();
    let mut args = Vec::new();
    for (i, (krate, name)) in all.iter().enumerate() {
        if all[..i].iter().any(|(_, other)| other == name) {
            return Err(format!(
                "integration test {name:?} exists in two crates ({krate} and another): \
                 `--test {name}` would select both; rename one"
            ));
        }
        if (krate == E2E_DIR) == e2e {
            args.extend(["--test".to_string(), name.clone()]);
        }
    }
    Ok(args)
}

fn target_dir() -> PathBuf {
    env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
}

/// A binary [`build_all`] built, run directly: `cargo run -p` would select one package and
/// compile its dependencies with other features.
fn built_binary(name: &str) -> Command {
    let mut command = Command::new(target_dir().join("debug").join(name));
    command.current_dir(root());
    command
}

/// Unit and integration tests: the local file system, MinIO (the file sink starts its own), a
/// MiniDFS cluster (Java, from Maven Central) for HDFS and a Kafka broker. Doc tests run on
/// their own (`--doc` cannot be combined with other targets).
fn unit() -> Result<(), String> {
    install()?;
    build_all()?;
    run(cargo()
        .args(["test", "--locked", "--workspace", "--lib", "--bins"])
        .args(integration_tests(false)?))?;
    run(cargo().args(["test", "--locked", "--workspace", "--doc"]))
}

fn install() -> Result<(), String> {
    run(Command::new("bash")
        .arg(root().join("e2e/scripts/install.sh"))
        .current_dir(root()))
}

/// Which end-to-end tests run. CI runs the short suite; the full one adds the tests marked
/// `#[ignore = "full suite: ..."]`: variants of what the short suite covers already (the SIGKILL
/// matrix on HDFS, GCS and Azure besides MinIO; Flink 1.20 through the operator besides 2.3;
/// the operator killed at every shadow step besides every in-place one; a Shadow rollback of a
/// version that never checkpoints (r) and a Shadow upgrade with workers (m) besides p's Shadow
/// rollback with workers; the Shadow bump of template images (u) besides j and t), kept out of CI
/// so that a cold run fits its 90 minutes.
#[derive(Clone, Copy)]
enum Suite {
    Short,
    Full,
}

impl Suite {
    fn libtest_args(self) -> &'static [&'static str] {
        match self {
            Suite::Short => &[],
            Suite::Full => &["--include-ignored"],
        }
    }
}

/// `--full` or nothing.
fn suite(args: &[String]) -> Result<Suite, String> {
    match args {
        [] => Ok(Suite::Short),
        [flag] if flag == "--full" => Ok(Suite::Full),
        other => Err(format!("unexpected arguments {other:?} (only --full)")),
    }
}

/// The end-to-end suite: the process-kubelet tests, then the real node's (`e2e/tests/node.rs`)
/// inside the network and mount namespaces of `e2e/scripts/node-netns.sh`, with the images built
/// first (`e2e/scripts/build-images.sh`).
fn e2e(suite: Suite) -> Result<(), String> {
    install()?;
    build_all()?;
    images()?;
    // `--test NAME` pairs: the real node's binary apart from the others
    let tests = integration_tests(true)?;
    let (node, others): (Vec<&[String]>, Vec<&[String]>) = tests
        .chunks(2)
        .partition(|pair| pair.get(1).is_some_and(|name| name == REAL_NODE_TEST));
    run(cargo()
        .args(["test", "--locked", "--workspace"])
        .args(others.concat())
        .args(["--", "--test-threads=1"])
        .args(suite.libtest_args()))?;
    let mut test = cargo();
    test.args(["test", "--locked", "--offline", "--workspace"])
        .args(node.concat())
        .args(["--", "--test-threads=1"])
        .args(suite.libtest_args());
    run(&mut in_node_namespace(&test))
}

/// The e2e test binary that runs on the real node (only inside `node-netns.sh`).
const REAL_NODE_TEST: &str = "node";

/// Every container image, built offline from the Dockerfile with the binaries cargo built
/// (`e2e/scripts/build-images.sh`; cached, a warm run takes seconds).
fn images() -> Result<(), String> {
    run(Command::new("bash")
        .arg(root().join("e2e/scripts/build-images.sh"))
        .current_dir(root()))
}

/// `command` run by `e2e/scripts/node-netns.sh`, with the same environment changes.
fn in_node_namespace(command: &Command) -> Command {
    let mut wrapped = Command::new("bash");
    wrapped
        .arg(root().join("e2e/scripts/node-netns.sh"))
        .arg(command.get_program())
        .args(command.get_args())
        .current_dir(root());
    for (name, value) in command.get_envs() {
        match value {
            Some(v) => wrapped.env(name, v),
            None => wrapped.env_remove(name),
        };
    }
    wrapped
}

/// The fuzz targets (`fuzz_*` in each crate's `src/fuzz.rs`): proptest strategies over arbitrary
/// and mutated inputs, run in batches until `STREAMJOB_FUZZ_SECONDS` have passed per target; each
/// prints `fuzz <target>: <cases> cases in <secs> s, no failure`, a failure its shrunk input.
/// One target at a time (the time bound is per target); every crate runs even if one fails.
fn fuzz(args: &[String]) -> Result<(), String> {
    let seconds = match args {
        [] => 60,
        [flag, n] if flag == "--seconds" => n
            .parse::<u64>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("--seconds takes a positive number, not {n:?}"))?,
        other => {
            return Err(format!(
                "usage: cargo xtask fuzz [--seconds N], not {other:?}"
            ));
        }
    };
    run(cargo()
        .args(["test", "--locked", "--workspace", "--lib", "--no-fail-fast"])
        .args(["--", "fuzz_", "--test-threads=1", "--nocapture"])
        .env("STREAMJOB_FUZZ_SECONDS", seconds.to_string()))
}

/// The Kafka source next to a plain rdkafka consumer: the project's broker (`kafka-broker`,
/// KRaft on loopback) is filled with demo records, then `streamjob-runtime bench-kafka` (release)
/// reads the topic with both; the broker stops with SIGINT afterwards, or when this process ends
/// (its stdin closes).
///
/// `release: false` uses the debug runtime the tests built: it checks that the benchmark runs and
/// reads every record; its figures are not the engine's.
fn kafka_bench(quick: bool, release: bool) -> Result<(), String> {
    install()?;
    build_all()?;
    if release {
        run(cargo().args([
            "build",
            "--release",
            "--locked",
            "-p",
            "streamjob-runtime",
            "--bin",
            "streamjob-runtime",
        ]))?;
    }
    let target = target_dir();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free port: {e}"))?
        .port();
    let records = match (quick, release) {
        (_, false) => "50000",
        (true, true) => "200000",
        (false, true) => "2000000",
    };
    let runtime = target
        .join(if release { "release" } else { "debug" })
        .join("streamjob-runtime");
    let mut broker = Command::new(target.join("debug/kafka-broker"))
        .args([
            "--port",
            &port.to_string(),
            "--topic",
            "bench",
            "--partitions",
            "4",
        ])
        .args(["--demo", records])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start kafka-broker: {e}"))?;
    // read until the broker says it is ready, then keep draining its output in the background
    // (a closed pipe would end it at its next line)
    let ready = broker.stdout.take().and_then(|out| {
        use std::io::BufRead;
        let mut lines = std::io::BufReader::new(out).lines().map_while(Result::ok);
        let found = lines.find(|l| l.starts_with("bootstrap: "));
        std::thread::spawn(move || lines.for_each(drop));
        found
    });
    let result = match ready {
        Some(_) => run(Command::new(&runtime)
            .args(["bench-kafka", "--bootstrap", &format!("127.0.0.1:{port}")])
            .args(["--topic", "bench", "--parallelism", "2"])),
        None => Err("kafka-broker ended before it was ready".into()),
    };
    let _ = Command::new("kill")
        .args(["-INT", &broker.id().to_string()])
        .status();
    let _ = broker.wait();
    result
}

/// Unit and integration tests, the end-to-end suite, then the short soak (16 faults).
/// What `.ci/run` does: lint, then every test. Clippy lints while the one build compiles (see
/// [`CLIPPY_IN_BUILD`]). `e2e/scripts/install.sh` (downloads and Go builds of the pinned tools:
/// ≈25 minutes on a fresh cache, seconds on a warm one) runs beside the lint and the build, its
/// output in a log; the tests wait for it.
fn ci(suite: Suite) -> Result<(), String> {
    lint_while_building();
    let log = cache_dir().join("logs").join("install-ci.log");
    fs::create_dir_all(cache_dir().join("logs"))
        .map_err(|e| format!("cannot create {}: {e}", cache_dir().display()))?;
    let file = fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = file
        .try_clone()
        .map_err(|e| format!("{}: {e}", log.display()))?;
    let mut install = Command::new("bash");
    install
        .arg(root().join("e2e/scripts/install.sh"))
        .current_dir(root())
        .stdout(file)
        .stderr(err);
    eprintln!(
        "+ {} (beside the lint; output in {})",
        shown(&install),
        log.display()
    );
    let mut child = install
        .spawn()
        .map_err(|e| format!("cannot start install.sh: {e}"))?;
    let linted = lint();
    let installed = child.wait();
    linted?;
    match installed {
        Ok(status) if status.success() => eprintln!("install.sh: done ({})", log.display()),
        Ok(status) => {
            let text = fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(format!(
                "install.sh exited with {status} (log {}):\n{}",
                log.display(),
                tail.join("\n")
            ));
        }
        Err(e) => return Err(format!("install.sh: {e}")),
    }
    test(suite)
}

fn test(suite: Suite) -> Result<(), String> {
    unit()?;
    e2e(suite)?;
    soak(&["--quick".to_string()])
}

/// The soak (`e2e/src/bin/soak.rs`): one StreamJob on the e2e environment under random faults,
/// its output checked exactly-once; arguments go to the binary.
fn soak(args: &[String]) -> Result<(), String> {
    install()?;
    build_all()?;
    let mut soak = built_binary("soak");
    soak.args(args);
    if args.iter().any(|a| a == "--real-node") {
        // the runtime and operator images, then the soak inside the node's namespaces
        images()?;
        return run(&mut in_node_namespace(&soak));
    }
    run(&mut soak)
}

/// The engine's own Nexmark benchmark, the file sink benchmark (per format, local disk and
/// MinIO, next to a plain write of the same bytes), then the side-by-side run against Apache
/// Flink (bench/runner: same input files, same queries, output checked equal, ratios in one run),
/// then the operator benchmark on the e2e environment (`e2e/src/bin/operator-bench/`).
fn bench(args: &[String]) -> Result<(), String> {
    let quick = args.iter().any(|a| a == "--quick");
    let mut engine = cargo();
    engine.args([
        "run",
        "--release",
        "--locked",
        "-p",
        "streamjob-runtime",
        "--bin",
        "streamjob-runtime",
        "--",
        "bench",
    ]);
    if quick {
        engine.args(["--seconds", "5"]);
    }
    run(&mut engine)?;
    // MB of Arrow input per format (MinIO rows only when install.sh put MinIO in the cache)
    let sink_mb = if quick { "16" } else { "64" };
    run(cargo().args([
        "run",
        "--release",
        "--locked",
        "-p",
        "streamjob-filesink",
        "--example",
        "sink_bench",
        "--",
        sink_mb,
    ]))?;
    let mut side_by_side = cargo();
    side_by_side.args([
        "run",
        "--release",
        "--locked",
        "-p",
        "streamjob-bench",
        "--",
    ]);
    if quick {
        side_by_side.arg("--quick");
    }
    run(&mut side_by_side)?;
    kafka_bench(quick, true)?;
    // The operator on the e2e environment: output gap across InPlace/Shadow upgrades, and
    // 1,000 suspended StreamJobs (200 with --quick) against a baseline of 10.
    install()?;
    build_all()?;
    let mut operator = built_binary("operator-bench");
    if quick {
        operator.arg("--quick");
    }
    run(&mut operator)
}
