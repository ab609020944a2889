//! Real Apache Flink for tests: a standalone application cluster (one JobManager JVM, TaskManager
//! JVMs) from the jars `e2e/scripts/install.sh` fetched from Maven Central per supported version
//! (`STREAMJOB_E2E_FLINK_<version>`), with our pre-check and test job compiled against them
//! (`flink/build.sh`). Everything listens on loopback ports; logs go to the run folder.
//!
//! The roles are started by `e2e/scripts/flink-entrypoint.sh`, the stand-in for the official
//! Flink image's entrypoint that the process kubelet also runs for Flink images: the JobManager
//! runs `StandaloneApplicationClusterEntryPoint` with the job jar in `usrlib/`, a TaskManager
//! runs `TaskManagerRunner` with the memory options `BashJavaUtils` derives.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use streamjob_operator::engine::flink::conf::{LOG_CONFIG, LOG_CONFIG_KEY};
use streamjob_operator::engine::flink::precheck::{
    CHECKER_MAIN, CheckRequest, JAVA_17_OPTIONS, Verdict, parse_verdict,
};
use streamjob_operator::engine::flink::rest::{FlinkRest, JobOverview};

use crate::binaries::env_file;
use crate::error::{Error, IoContext, Result};
use crate::fixtures::repo_root;
use crate::kubelet::ImageMapping;
use crate::process::{ManagedProcess, Watchdog, free_port};
use crate::wait::poll_until;

/// The job id every test cluster runs its job under (application mode allows fixing it).
pub const JOB_ID: &str = "00000000000000000000000000000001";
/// Main class of the test job (`flink/testjob`).
pub const TEST_JOB_CLASS: &str = "dev.streamjob.flink.testjob.CountingJob";
/// The Flink versions install.sh provides.
pub const VERSIONS: &[&str] = &["1.20.0", "2.3.0"];
/// The test job's image in the process kubelet (`<image>:<Flink version>`).
pub const TEST_JOB_IMAGE: &str = "streamjob/flink-testjob";
/// The test job's next image, whose `AuditTally` state class was deleted (`flink/build.sh`).
pub const TEST_JOB_V2_IMAGE: &str = "streamjob/flink-testjob-v2";
/// The scheme only the tests' file system plugin provides (`flink/testplugin`: the local file
/// system), a stand-in for an object store's plugin.
pub const PLUGIN_SCHEME: &str = "streamjob-plugin";

/// Process-kubelet mappings of `streamjob/flink-testjob:<version>` (Flink of that version with
/// the test job in `usrlib/`, playing the official image's entrypoint) for every installed
/// version.
pub fn kubelet_images() -> Vec<ImageMapping> {
    let entrypoint = repo_root().join("e2e/scripts/flink-entrypoint.sh");
    let mut images = Vec::new();
    for dist in VERSIONS.iter().filter_map(|v| FlinkDist::find(v).ok()) {
        for (image, usrlib) in [
            (TEST_JOB_IMAGE, "testjob-usrlib"),
            (TEST_JOB_V2_IMAGE, "testjob-v2-usrlib"),
        ] {
            images.push(ImageMapping {
                // any tag starting with the version: `:1.20.0-r2` is a new image of the same job
                image: format!("{image}:{}*", dist.version),
                binary: entrypoint.clone(),
                env: BTreeMap::from([
                    ("FLINK_HOME".to_string(), dist.dir.display().to_string()),
                    (
                        "STREAMJOB_CHECKER_DIR".to_string(),
                        dist.dir.join("checker").display().to_string(),
                    ),
                    (
                        "FLINK_USRLIB".to_string(),
                        dist.dir.join(usrlib).display().to_string(),
                    ),
                ]),
                aliases: vec!["/docker-entrypoint.sh".into()],
            });
        }
    }
    images
}

/// Arguments of the test job: `records` numbers over `keys` keys at `rate` per source subtask,
/// lines labelled `revision`, written under `out` (a Flink path, e.g. `file:///…`).
pub fn counting_job_args(
    out: &str,
    records: u64,
    keys: u64,
    rate: u32,
    revision: &str,
    extra: &[&str],
) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--output".into(),
        out.into(),
        "--records".into(),
        records.to_string(),
        "--keys".into(),
        keys.to_string(),
        "--rate".into(),
        rate.to_string(),
        "--revision".into(),
        revision.into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Reads every committed line of the test job under the local folder `out` (hidden files are
/// in progress or pending: not visible output) and checks it: every number `0..records` in
/// exactly one line, each key's running counts exactly `1..=records/keys`. Returns the lines
/// per revision.
pub fn check_counting_output(
    out: &Path,
    records: u64,
    keys: u64,
) -> Result<BTreeMap<String, usize>> {
    let mut seen = vec![0u32; usize::try_from(records).unwrap_or(0)];
    let mut counts: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut revisions: BTreeMap<String, usize> = BTreeMap::new();
    let mut total = 0u64;
    let mut stack = vec![out.to_path_buf()];
    let bad =
        |what: String| Error::Other(format!("test job output under {}: {what}", out.display()));
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).ctx(|| format!("list {}", dir.display()))? {
            let path = entry.ctx(|| format!("list {}", dir.display()))?.path();
            let hidden = path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'));
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if hidden {
                continue;
            }
            let text = std::fs::read_to_string(&path).ctx(|| format!("read {}", path.display()))?;
            for line in text.lines() {
                let f: Vec<&str> = line.split(',').collect();
                let number = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
                let (Some(key), Some(n), Some(count), Some(revision), 4) =
                    (number(0), number(1), number(2), f.get(3), f.len())
                else {
                    return Err(bad(format!("{}: malformed line {line:?}", path.display())));
                };
                let slot = seen
                    .get_mut(usize::try_from(n).unwrap_or(usize::MAX))
                    .ok_or_else(|| bad(format!("number {n} out of range")))?;
                *slot += 1;
                if n % keys != key {
                    return Err(bad(format!("number {n} under key {key}")));
                }
                counts.entry(key).or_default().push(count);
                *revisions.entry((*revision).to_string()).or_default() += 1;
                total += 1;
            }
        }
    }
    let missing = seen.iter().filter(|&&n| n == 0).count();
    let duplicated = seen.iter().filter(|&&n| n > 1).count();
    tracing::info!(total, missing, duplicated, ?revisions, "test job output");
    if missing > 0 || duplicated > 0 || total != records {
        return Err(bad(format!(
            "{total} committed lines for {records} numbers: {missing} missing, {duplicated} duplicated"
        )));
    }
    let expected: Vec<u64> = (1..=records / keys).collect();
    for (key, mut c) in counts {
        c.sort_unstable();
        if c != expected {
            return Err(bad(format!(
                "key {key}: running counts are not 1..={} (state lost or counted twice)",
                records / keys
            )));
        }
    }
    Ok(revisions)
}

/// One installed Flink version: `lib/` and the jars built against it.
#[derive(Clone, Debug)]
pub struct FlinkDist {
    pub version: String,
    pub dir: PathBuf,
}

impl FlinkDist {
    /// The installed `version` (e.g. `1.20.0`).
    pub fn find(version: &str) -> Result<Self> {
        let var = format!("STREAMJOB_E2E_FLINK_{}", version.replace('.', "_"));
        let from_file = || {
            std::fs::read_to_string(env_file()).ok().and_then(|t| {
                t.lines().find_map(|l| {
                    l.trim()
                        .strip_prefix(&format!("export {var}="))
                        .map(|v| v.trim_matches(|c| c == '\'' || c == '"').to_string())
                })
            })
        };
        let dir = std::env::var(&var)
            .ok()
            .or_else(from_file)
            .map(PathBuf::from)
            .ok_or_else(|| Error::MissingBinary {
                name: format!("flink-{version}"),
                detail: format!("neither ${var} nor {} names it", env_file().display()),
            })?;
        let dist = Self {
            version: version.to_string(),
            dir,
        };
        for needed in [
            dist.dir.join("lib/.complete"),
            dist.checker_jar(),
            dist.test_job_jar(),
        ] {
            if !needed.is_file() {
                return Err(Error::MissingBinary {
                    name: format!("flink-{version}"),
                    detail: format!("{} is missing", needed.display()),
                });
            }
        }
        Ok(dist)
    }

    pub fn lib(&self) -> PathBuf {
        self.dir.join("lib")
    }

    pub fn checker_jar(&self) -> PathBuf {
        self.dir.join("streamjob-flink-checker.jar")
    }

    pub fn test_job_jar(&self) -> PathBuf {
        self.dir.join("streamjob-flink-testjob.jar")
    }

    /// Flink's plugins folder of this version: the tests' file system plugin (`flink/testplugin`,
    /// scheme [`PLUGIN_SCHEME`]), as an image's `/opt/flink/plugins` holds the object stores'.
    pub fn plugins(&self) -> PathBuf {
        self.dir.join("plugins")
    }

    /// Runs the pre-check with this version's jars and plugins (as the check pod does); returns
    /// its verdict and how long it took.
    pub fn check(&self, request: &CheckRequest) -> Result<(Verdict, Duration)> {
        self.check_with_plugins(request, &self.plugins())
    }

    /// [`check`](Self::check) with Flink's plugins folder at `plugins`.
    pub fn check_with_plugins(
        &self,
        request: &CheckRequest,
        plugins: &Path,
    ) -> Result<(Verdict, Duration)> {
        let started = Instant::now();
        let mut cmd = Command::new(java());
        cmd.env("FLINK_PLUGINS_DIR", plugins)
            .args(JAVA_17_OPTIONS)
            .arg("-Xmx512m")
            .arg("-cp")
            .arg(format!(
                "{}/*:{}",
                self.lib().display(),
                self.checker_jar().display()
            ))
            .arg(CHECKER_MAIN)
            .args(request.arguments());
        let out = cmd.output().ctx(|| format!("run {cmd:?}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let verdict = parse_verdict(&stdout).map_err(|e| {
            Error::Other(format!(
                "{e}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .rev()
                    .take(20)
                    .collect::<Vec<_>>()
                    .join("\n")
            ))
        })?;
        Ok((verdict, started.elapsed()))
    }

    /// Runs `flink-check --dispose` from this version's checker folder, as the dispose pod does
    /// (the test job's image: its jar in usrlib), with `args` (`--savepoints-dir D … -- PATH…`);
    /// the termination message goes to `scratch`.
    pub fn dispose(&self, args: &[&str], scratch: &Path) -> Result<Disposal> {
        let message = scratch.join("dispose-termination-log");
        let _ = std::fs::remove_file(&message);
        let mut cmd = Command::new(self.dir.join("checker/flink-check"));
        cmd.arg("--dispose")
            .args(args)
            .env("FLINK_HOME", &self.dir)
            .env("FLINK_USRLIB", self.dir.join("testjob-usrlib"))
            .env("STREAMJOB_TERMINATION_MESSAGE_PATH", &message)
            .env("STREAMJOB_JAVA", java());
        let out = cmd.output().ctx(|| format!("run {cmd:?}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout
            .lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .ok_or_else(|| {
                Error::Other(format!(
                    "flink-check --dispose printed no JSON line (exit {:?}); stderr: {}",
                    out.status.code(),
                    String::from_utf8_lossy(&out.stderr)
                ))
            })?;
        Ok(Disposal {
            code: out.status.code(),
            result: serde_json::from_str(line)
                .map_err(|e| Error::Other(format!("dispose answer {line:?}: {e}")))?,
            termination_message: std::fs::read_to_string(&message).unwrap_or_default(),
        })
    }
}

/// What `flink-check --dispose` answered.
#[derive(Debug)]
pub struct Disposal {
    /// 0 every path disposed or missing, 3 one refused, 1 one could not be deleted, 2 usage.
    pub code: Option<i32>,
    /// `{"refused":[{"path","reason"}],"failed":[…],"disposed":[…],"missing":[…]}`
    pub result: serde_json::Value,
    /// What the dispose pod's container would leave for the operator.
    pub termination_message: String,
}

impl Disposal {
    /// The paths listed under `key` (`disposed`, `missing`; for `refused` and `failed`, their
    /// paths).
    pub fn paths(&self, key: &str) -> Vec<String> {
        self.entries(key)
            .into_iter()
            .map(|(path, _)| path)
            .collect()
    }

    /// `(path, reason)` of each entry under `key` (reason empty for `disposed` and `missing`).
    pub fn entries(&self, key: &str) -> Vec<(String, String)> {
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
        self.result[key]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|i| match i.get("path") {
                        Some(p) => (text(p), text(&i["reason"])),
                        None => (text(i), String::new()),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn java() -> String {
    std::env::var("STREAMJOB_JAVA").unwrap_or_else(|_| "java".into())
}

/// What an application cluster runs.
#[derive(Clone, Debug)]
pub struct ApplicationSpec {
    pub job_jar: PathBuf,
    pub entry_class: String,
    pub args: Vec<String>,
    pub parallelism: u32,
    pub task_managers: u32,
    pub slots_per_task_manager: u32,
    /// Restore from this savepoint.
    pub from_savepoint: Option<String>,
    pub allow_non_restored_state: bool,
    /// Extra configuration (checkpoint interval, directories, …).
    pub conf: Vec<(String, String)>,
}

/// A running standalone application cluster; stopped when dropped.
#[derive(Debug)]
pub struct FlinkCluster {
    pub name: String,
    pub version: String,
    pub rest: FlinkRest,
    pub home: PathBuf,
    job_manager: ManagedProcess,
    task_managers: Vec<ManagedProcess>,
    started: Instant,
}

impl FlinkCluster {
    /// Starts the JobManager and TaskManagers with `e2e/scripts/flink-entrypoint.sh` (the
    /// process kubelet's stand-in for the official image's entrypoint), each in its own folder
    /// under `<run_dir>/<name>`, on loopback ports. Returns at once; wait with
    /// [`wait_job`](Self::wait_job).
    pub fn start(
        dist: &FlinkDist,
        run_dir: &Path,
        name: &str,
        spec: &ApplicationSpec,
        watchdog: Option<&Watchdog>,
    ) -> Result<Self> {
        let home = run_dir.join(name);
        let usrlib = home.join("usrlib");
        std::fs::create_dir_all(&usrlib).ctx(|| format!("create {}", usrlib.display()))?;
        std::fs::copy(&spec.job_jar, usrlib.join("job.jar"))
            .ctx(|| format!("copy {}", spec.job_jar.display()))?;

        let (rpc, rest, blob, tm_rpc) = (free_port()?, free_port()?, free_port()?, free_port()?);
        let mut conf = vec![
            ("jobmanager.rpc.port".to_string(), rpc.to_string()),
            ("rest.port".into(), rest.to_string()),
            ("blob.server.port".into(), blob.to_string()),
            // Several TaskManagers share this host: a range.
            (
                "taskmanager.rpc.port".into(),
                format!("{tm_rpc}-{}", tm_rpc + 20),
            ),
            (
                "taskmanager.numberOfTaskSlots".into(),
                spec.slots_per_task_manager.to_string(),
            ),
            ("parallelism.default".into(), spec.parallelism.to_string()),
            // Flink reads only this folder (no image defaults under FLINK_CONF_DIR), and
            // BashJavaUtils refuses to size a process without them: the official image's sizes.
            ("jobmanager.memory.process.size".into(), "1600m".into()),
            ("taskmanager.memory.process.size".into(), "1728m".into()),
            // The operator stops with a savepoint and keeps the JobManager up to read it.
            (
                "execution.shutdown-on-application-finish".into(),
                "false".into(),
            ),
        ];
        conf.extend(spec.conf.iter().cloned());
        // A configuration folder, as the operator mounts one (FLINK_CONF_DIR): Flink's YAML
        // parser reads the values exactly (FLINK_PROPERTIES would mangle quoted values).
        let conf_dir = home.join("conf");
        std::fs::create_dir_all(&conf_dir).ctx(|| format!("create {}", conf_dir.display()))?;
        let yaml: String = conf
            .iter()
            .map(|(k, v)| format!("{k}: {}\n", serde_json::Value::from(v.as_str())))
            .collect();
        std::fs::write(conf_dir.join("config.yaml"), yaml).ctx(|| "write config.yaml".into())?;
        std::fs::write(conf_dir.join(LOG_CONFIG_KEY), LOG_CONFIG)
            .ctx(|| "write log4j-console.properties".into())?;
        let entrypoint = repo_root().join("e2e/scripts/flink-entrypoint.sh");
        let role = |folder: &str| -> Result<Command> {
            let dir = home.join(folder);
            std::fs::create_dir_all(&dir).ctx(|| format!("create {}", dir.display()))?;
            let mut cmd = Command::new(&entrypoint);
            cmd.env("FLINK_HOME", &dist.dir)
                .env("FLINK_USRLIB", &usrlib)
                .env("FLINK_CONF_DIR", &conf_dir)
                .env("POD_IP", "127.0.0.1")
                .current_dir(dir);
            Ok(cmd)
        };

        let started = Instant::now();
        let mut jm = role("jobmanager")?;
        jm.arg("standalone-job")
            .args(["-D", "jobmanager.rpc.address=127.0.0.1"])
            .arg("--job-classname")
            .arg(&spec.entry_class)
            .arg("--job-id")
            .arg(JOB_ID);
        if let Some(savepoint) = &spec.from_savepoint {
            jm.arg("--fromSavepoint").arg(savepoint);
        }
        if spec.allow_non_restored_state {
            jm.arg("--allowNonRestoredState");
        }
        jm.args(&spec.args);
        let job_manager =
            ManagedProcess::spawn(&format!("{name}-jobmanager"), jm, run_dir, watchdog)?
                .with_grace(Duration::from_secs(15));
        let mut task_managers = Vec::new();
        for i in 0..spec.task_managers {
            let mut tm = role(&format!("taskmanager-{i}"))?;
            tm.arg("taskmanager")
                .args(["-D", "jobmanager.rpc.address=127.0.0.1"]);
            task_managers.push(
                ManagedProcess::spawn(&format!("{name}-taskmanager-{i}"), tm, run_dir, watchdog)?
                    .with_grace(Duration::from_secs(15)),
            );
        }
        Ok(Self {
            name: name.to_string(),
            version: dist.version.clone(),
            rest: FlinkRest::new(format!("http://127.0.0.1:{rest}")),
            home,
            job_manager,
            task_managers,
            started,
        })
    }

    /// Time since the JVMs were started.
    pub fn age(&self) -> Duration {
        self.started.elapsed()
    }

    /// Waits until the test job satisfies `done`, failing early when a JVM exits or the job
    /// fails.
    pub async fn wait_job(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&JobOverview) -> bool,
    ) -> Result<JobOverview> {
        poll_until(what, timeout, Duration::from_millis(200), || async {
            self.job_manager.check_running()?;
            for tm in &self.task_managers {
                tm.check_running()?;
            }
            let jobs = self.rest.jobs().await?;
            let Some(job) = jobs.into_iter().find(|j| j.jid == JOB_ID) else {
                return Ok(None);
            };
            if done(&job) {
                return Ok(Some(job));
            }
            if job.state == "FAILED" {
                let cause = self.rest.latest_exception(JOB_ID).await.ok().flatten();
                return Err(Error::Other(format!(
                    "job on {} failed: {}",
                    self.name,
                    cause.unwrap_or_default()
                )));
            }
            Ok(None)
        })
        .await
        .map_err(|e| Error::Other(format!("{e} (logs: {})", self.job_manager.log().display())))
    }

    /// Stops every JVM of the cluster.
    pub fn stop(mut self) {
        for tm in &mut self.task_managers {
            tm.stop();
        }
        self.job_manager.stop();
    }
}
