//! Real Apache Flink for tests: a standalone application cluster (one JobManager JVM, TaskManager
//! JVMs) from the jars `e2e/scripts/install.sh` fetched from Maven Central per supported version
//! (`STREAMJOB_E2E_FLINK_<version>`), with our pre-check and test job compiled against them
//! (`flink/build.sh`). Everything listens on loopback ports; logs go to the run folder.
//!
//! The roles are started as Flink's own scripts start them: the JobManager runs
//! `StandaloneApplicationClusterEntryPoint` with the job jar in `usrlib/`, a TaskManager runs
//! `TaskManagerRunner` with the memory options `BashJavaUtils` derives from the configuration.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use streamjob_operator::engine::flink::precheck::{
    CHECKER_MAIN, CheckRequest, JAVA_17_OPTIONS, Verdict, parse_verdict,
};
use streamjob_operator::engine::flink::rest::{FlinkRest, JobOverview};

use crate::binaries::env_file;
use crate::error::{Error, IoContext, Result};
use crate::process::{ManagedProcess, Watchdog, free_port, run_checked};
use crate::wait::poll_until;

/// The job id every test cluster runs its job under (application mode allows fixing it).
pub const JOB_ID: &str = "00000000000000000000000000000001";
/// Main class of the test job (`flink/testjob`).
pub const TEST_JOB_CLASS: &str = "dev.streamjob.flink.testjob.CountingJob";

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

    /// Runs the pre-check with this version's jars (as the check pod does); returns its verdict
    /// and how long it took.
    pub fn check(&self, request: &CheckRequest) -> Result<(Verdict, Duration)> {
        let started = Instant::now();
        let mut cmd = Command::new(java());
        cmd.args(JAVA_17_OPTIONS)
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

    /// JVM and `-D` options `BashJavaUtils` derives for a role (`GET_JM_RESOURCE_PARAMS` or
    /// `GET_TM_RESOURCE_PARAMS`) from the configuration in `conf`.
    fn resource_params(&self, command: &str, conf: &Path) -> Result<(Vec<String>, Vec<String>)> {
        let out = run_checked(
            Command::new(java())
                .arg("-cp")
                .arg(format!("{}/*", self.lib().display()))
                .arg("org.apache.flink.runtime.util.bash.BashJavaUtils")
                .arg(command)
                .arg("-c")
                .arg(conf),
        )?;
        let text = String::from_utf8_lossy(&out.stdout);
        let results: Vec<Vec<String>> = text
            .lines()
            .filter_map(|l| l.strip_prefix("BASH_JAVA_UTILS_EXEC_RESULT:"))
            .map(|l| l.split_whitespace().map(str::to_string).collect())
            .collect();
        match results.as_slice() {
            [jvm, dynamic] => Ok((jvm.clone(), dynamic.clone())),
            _ => Err(Error::Other(format!(
                "BashJavaUtils {command} printed no JVM and dynamic options: {text}"
            ))),
        }
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

const LOG4J: &str = "rootLogger.level = INFO
rootLogger.appenderRef.console.ref = ConsoleAppender
appender.console.name = ConsoleAppender
appender.console.type = CONSOLE
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss,SSS} %-5p %-40c{1} - %m%n
logger.akka.name = org.apache.pekko
logger.akka.level = WARN
";

impl FlinkCluster {
    /// Lays out a Flink home in `<run_dir>/<name>` and starts the JobManager and TaskManagers.
    /// Returns at once; wait with [`wait_job`](Self::wait_job).
    pub fn start(
        dist: &FlinkDist,
        run_dir: &Path,
        name: &str,
        spec: &ApplicationSpec,
        watchdog: Option<&Watchdog>,
    ) -> Result<Self> {
        let home = run_dir.join(name);
        let conf_dir = home.join("conf");
        let usrlib = home.join("usrlib");
        for dir in [&conf_dir, &usrlib] {
            std::fs::create_dir_all(dir).ctx(|| format!("create {}", dir.display()))?;
        }
        let lib_link = home.join("lib");
        if !lib_link.exists() {
            std::os::unix::fs::symlink(dist.lib(), &lib_link)
                .ctx(|| format!("link {}", lib_link.display()))?;
        }
        let jar = usrlib.join("job.jar");
        std::fs::copy(&spec.job_jar, &jar).ctx(|| format!("copy {}", spec.job_jar.display()))?;

        let (rpc, rest, blob, tm_rpc) = (free_port()?, free_port()?, free_port()?, free_port()?);
        let query = free_port()?;
        let mut conf = vec![
            (
                "jobmanager.rpc.address".to_string(),
                "127.0.0.1".to_string(),
            ),
            ("jobmanager.rpc.port".into(), rpc.to_string()),
            ("jobmanager.bind-host".into(), "127.0.0.1".into()),
            ("rest.address".into(), "127.0.0.1".into()),
            ("rest.bind-address".into(), "127.0.0.1".into()),
            ("rest.port".into(), rest.to_string()),
            ("blob.server.port".into(), blob.to_string()),
            ("taskmanager.host".into(), "127.0.0.1".into()),
            ("taskmanager.bind-host".into(), "127.0.0.1".into()),
            // One TaskManager per port range entry: several share this host.
            (
                "taskmanager.rpc.port".into(),
                format!("{tm_rpc}-{}", tm_rpc + 20),
            ),
            ("taskmanager.data.port".into(), "0".into()),
            (
                "metrics.internal.query-service.port".into(),
                format!("{query}-{}", query + 20),
            ),
            ("jobmanager.memory.process.size".into(), "1024m".into()),
            ("taskmanager.memory.process.size".into(), "1280m".into()),
            (
                "taskmanager.numberOfTaskSlots".into(),
                spec.slots_per_task_manager.to_string(),
            ),
            ("parallelism.default".into(), spec.parallelism.to_string()),
            // The operator stops with a savepoint and keeps the JobManager up to read it.
            (
                "execution.shutdown-on-application-finish".into(),
                "false".into(),
            ),
        ];
        conf.extend(spec.conf.iter().cloned());
        let yaml: String = conf
            .iter()
            .map(|(k, v)| format!("{k}: \"{v}\"\n"))
            .collect();
        std::fs::write(conf_dir.join("config.yaml"), yaml).ctx(|| "write config.yaml".into())?;
        let log4j = conf_dir.join("log4j-console.properties");
        std::fs::write(&log4j, LOG4J).ctx(|| "write log4j".into())?;

        let java_base = |jvm: &[String]| {
            let mut cmd = Command::new(java());
            cmd.args(jvm)
                .args(JAVA_17_OPTIONS)
                .arg("-XX:+UseSerialGC")
                .arg(format!("-Dlog4j.configurationFile={}", log4j.display()))
                .arg("-cp")
                .arg(format!("{}/*", lib_link.display()))
                .env("FLINK_LIB_DIR", &lib_link)
                .env("FLINK_CONF_DIR", &conf_dir)
                .current_dir(&home);
            cmd
        };

        let started = Instant::now();
        let (jm_jvm, jm_dynamic) = dist.resource_params("GET_JM_RESOURCE_PARAMS", &conf_dir)?;
        let mut jm = java_base(&jm_jvm);
        jm.arg("org.apache.flink.container.entrypoint.StandaloneApplicationClusterEntryPoint")
            .arg("-c")
            .arg(&conf_dir)
            .args(&jm_dynamic)
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

        let (tm_jvm, tm_dynamic) = dist.resource_params("GET_TM_RESOURCE_PARAMS", &conf_dir)?;
        let mut task_managers = Vec::new();
        for i in 0..spec.task_managers {
            let mut tm = java_base(&tm_jvm);
            tm.arg("org.apache.flink.runtime.taskexecutor.TaskManagerRunner")
                .arg("-c")
                .arg(&conf_dir)
                .args(&tm_dynamic);
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
