//! Issue #12: the Kafka source against a real broker (Apache Kafka 4.4 from Maven Central, KRaft,
//! started by the harness), through the real `streamjob-runtime` binary. No Kubernetes.
//!
//! - Exactly once: Kafka → keyed tumbling windows → Parquet files, SIGKILLed and resumed, with
//!   partitions added while it runs, stopped with a savepoint and resumed with a changed pipeline
//!   and parallelism. Every (user, window) count and sum in the committed files equals what the
//!   produced records give: every record counted once, none missing.
//! - Bad records: malformed values mixed into good ones under fail, skip and deadLetter.
//! - SASL/SCRAM with credentials from the environment; a wrong password fails loudly without
//!   printing it. SASL_SSL with PLAIN and a client certificate; an untrusted broker certificate
//!   fails loudly.
//! - Start positions: timestamp, latest, and a consumer group's committed offsets (the job's
//!   checkpoints commit back to the group).

#![allow(clippy::unwrap_used)] // test code

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use arrow::array::AsArray;
use arrow::datatypes::{DataType, Int64Type, TimeUnit};
use streamjob_e2e::kafka::{Kafka, PLAIN_USER, SCRAM_USER};
use streamjob_e2e::process::Watchdog;

/// Longest wait for one awaited log line.
const LINE_TIMEOUT: Duration = Duration::from_secs(90);
/// Event time of record 0: 2026-01-01T00:00:00Z.
const T0: i64 = 1_767_225_600_000;
const HOUR: i64 = 3_600_000;
const USERS: i64 = 17;

fn runtime_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("STREAMJOB_RUNTIME_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("streamjob-runtime");
    assert!(
        path.is_file(),
        "{} does not exist: `cargo build -p streamjob-runtime --bin streamjob-runtime` first",
        path.display()
    );
    path
}

/// A run of the runtime binary: stderr lines go to the test's output and to a channel, stdout
/// lines are kept.
struct Run {
    child: Child,
    lines: mpsc::Receiver<String>,
    stdout: Option<std::thread::JoinHandle<Vec<String>>>,
}

impl Run {
    fn start(args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut child = Command::new(runtime_binary())
            .args(args)
            .envs(env.iter().copied())
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let err = child.stderr.take().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("  | {line}");
                let _ = tx.send(line);
            }
        });
        let stdout = std::thread::spawn(move || {
            BufReader::new(out)
                .lines()
                .map_while(Result::ok)
                .collect::<Vec<_>>()
        });
        Self {
            child,
            lines,
            stdout: Some(stdout),
        }
    }

    /// Waits for a line that `accept` returns a value for.
    fn wait_for<T>(&self, what: &str, mut accept: impl FnMut(&str) -> Option<T>) -> T {
        let deadline = std::time::Instant::now() + LINE_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(v) = accept(&line) {
                        return v;
                    }
                }
                Err(_) => panic!("no log line {what} within {LINE_TIMEOUT:?}"),
            }
        }
    }

    /// Waits for `checkpoint N completed` with N >= `at_least`; returns N.
    fn wait_checkpoint(&self, at_least: u64) -> u64 {
        self.wait_for(&format!("checkpoint >= {at_least} completed"), |l| {
            completed_checkpoint(l).filter(|id| *id >= at_least)
        })
    }

    fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{signal} failed");
    }

    /// Waits, checkpoint by checkpoint, until every window of `want` is committed in `out`;
    /// `what` and `context()` go into the failure message.
    fn wait_windows(&self, out: &Path, want: &Windows, what: &str, context: impl Fn() -> String) {
        let deadline = std::time::Instant::now() + LINE_TIMEOUT;
        loop {
            let got = read_windows(out);
            if want.iter().all(|(k, v)| got.get(k) == Some(v)) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{what} were not all committed: {} of {} ({})",
                got.len(),
                want.len(),
                context()
            );
            // files appear when checkpoints complete; the next completion is the next chance
            self.wait_checkpoint(0);
        }
    }

    /// Stops the run with a savepoint (SIGINT); returns the savepoint's path.
    fn stop_with_savepoint(self, what: &str) -> String {
        self.signal("INT");
        let (code, stdout, _) = self.finish();
        assert_eq!(code, 0, "stop with savepoint {what} failed");
        stdout
            .last()
            .and_then(|l| l.strip_prefix("savepoint: "))
            .expect("no savepoint line")
            .to_string()
    }

    /// Runs `manifest` (bounded) from `savepoint` to its end; fails unless it exits 0.
    fn bounded_from_savepoint(manifest: &Path, savepoint: &str) {
        let run = Run::start(
            &[
                "run",
                manifest.to_str().unwrap(),
                "--from-savepoint",
                savepoint,
            ],
            &[],
        );
        let (code, _, _) = run.finish();
        assert_eq!(code, 0, "the bounded run from the savepoint failed");
    }

    /// Waits for the process; returns its exit code, stdout and the remaining stderr lines.
    fn finish(mut self) -> (i32, Vec<String>, Vec<String>) {
        let status = self.child.wait().unwrap();
        let stdout = self
            .stdout
            .take()
            .map(|h| h.join().unwrap())
            .unwrap_or_default();
        let rest: Vec<String> = self.lines.iter().collect();
        (status.code().unwrap_or(-1), stdout, rest)
    }
}

/// A run a failed assertion left behind is killed, not left reading from a broker that is gone.
impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn completed_checkpoint(line: &str) -> Option<u64> {
    let i = line.find("checkpoint ")?;
    let rest = &line[i + "checkpoint ".len()..];
    let (num, tail) = rest.split_once(' ')?;
    tail.starts_with("completed").then(|| num.parse().ok())?
}

/// Record `id`: its user, amount and event time.
fn record(id: i64, base: i64) -> (String, i64, i64) {
    (
        format!("u{}", id % USERS),
        (id * 7919) % 1000,
        base + id * 2,
    )
}

fn value(id: i64, base: i64) -> Vec<u8> {
    let (user, amount, ts) = record(id, base);
    format!(r#"{{"id": {id}, "user": "{user}", "amount": {amount}, "ts": {ts}}}"#).into_bytes()
}

/// `ids` spread round robin over `partitions` partitions.
fn batch(ids: std::ops::Range<i64>, base: i64, partitions: i32) -> Vec<(i32, String, Vec<u8>)> {
    ids.map(|id| {
        (
            (id % i64::from(partitions)) as i32,
            format!("k{id}"),
            value(id, base),
        )
    })
    .collect()
}

type Windows = BTreeMap<(String, i64), (i64, i64)>;

fn expected(phases: &[(std::ops::Range<i64>, i64)]) -> Windows {
    let mut w = Windows::new();
    for (ids, base) in phases {
        for id in ids.clone() {
            let (user, amount, ts) = record(id, *base);
            let e = w.entry((user, ts - ts.rem_euclid(1000))).or_default();
            e.0 += 1;
            e.1 += amount;
        }
    }
    w
}

fn walk(dir: &Path, into: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, into);
        } else {
            into.push(p);
        }
    }
}

/// Every (user, window) in the finished Parquet files; a window found twice fails the test.
fn read_windows(out: &Path) -> Windows {
    let mut files = Vec::new();
    walk(out, &mut files);
    let mut w = Windows::new();
    for f in files {
        let rel = f.strip_prefix(out).unwrap();
        let hidden = rel
            .components()
            .any(|c| c.as_os_str().to_string_lossy().starts_with(['.', '_']));
        if hidden {
            continue;
        }
        let file = std::fs::File::open(&f).unwrap();
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap();
        for b in reader {
            let b = b.unwrap();
            let users = b.column_by_name("user").unwrap().as_string::<i32>().clone();
            let starts = arrow::compute::cast(
                &arrow::compute::cast(
                    b.column_by_name("window_start").unwrap(),
                    &DataType::Timestamp(TimeUnit::Millisecond, None),
                )
                .unwrap(),
                &DataType::Int64,
            )
            .unwrap();
            let starts = starts.as_primitive::<Int64Type>();
            let counts = b
                .column_by_name("count")
                .unwrap()
                .as_primitive::<Int64Type>()
                .clone();
            let sums = b
                .column_by_name("sum_amount")
                .unwrap()
                .as_primitive::<Int64Type>()
                .clone();
            for i in 0..b.num_rows() {
                let key = (users.value(i).to_string(), starts.value(i));
                let prev = w.insert(key.clone(), (counts.value(i), sums.value(i)));
                assert!(
                    prev.is_none(),
                    "window {key:?} committed twice ({})",
                    f.display()
                );
            }
        }
    }
    w
}

fn manifest(
    dir: &Path,
    name: &str,
    kafka: &Kafka,
    parallelism: u32,
    extra_step: bool,
    bounded: bool,
) -> PathBuf {
    let filter = if extra_step {
        "    - uid: non-negative\n      filter: \"amount >= 0\"\n"
    } else {
        ""
    };
    let stopping = if bounded {
        "\n          stoppingOffsets: latest"
    } else {
        ""
    };
    let text = format!(
        r#"apiVersion: streamjob.io/v1alpha1
kind: StreamJob
metadata:
  name: {name}
spec:
  image: streamjob/runtime:test
  parallelism: {parallelism}
  maxParallelism: 64
  checkpoints: {{dir: "{ck}", interval: 300ms, retained: 2}}
  savepoints: {{dir: "{sp}"}}
  pipeline:
    - uid: clicks
      source:
        kafka:
          bootstrapServers: "{bootstrap}"
          topic: clicks
          partitionDiscoveryInterval: 500ms
          format: {{jsonLines: {{}}}}
          schema:
            - {{name: id, type: int64}}
            - {{name: user, type: string}}
            - {{name: amount, type: int64}}
            - {{name: ts, type: int64}}
          eventTimeField: ts{stopping}
        watermark: {{maxOutOfOrderness: 1h}}
{filter}    - uid: per-user
      keyBy: [user]
      window: {{tumbling: 1s}}
      aggregate: {{count: true, sum: [amount]}}
    - uid: out
      fileSink:
        path: "{out}"
        format: {{parquet: {{compression: zstd}}}}
        bucketAssigner: {{basePath: {{}}}}
"#,
        ck = dir.join("ck").display(),
        sp = dir.join("sp").display(),
        out = dir.join("out").display(),
        bootstrap = kafka.bootstrap,
    );
    let path = dir.join(format!("{name}-p{parallelism}-{extra_step}-{bounded}.yaml"));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn kafka_to_parquet_exactly_once_across_kills_new_partitions_savepoint_and_rescale() {
    let dir = tempfile::tempdir().unwrap();
    let watchdog = Watchdog::start(dir.path()).unwrap();
    let kafka = Kafka::start(&dir.path().join("kafka"), Some(&watchdog)).unwrap();
    eprintln!("kafka started in {:?}", kafka.start_duration);
    kafka.create_topic("clicks", 3).unwrap();
    // Three phases of event time, hours apart: each phase's windows close (watermark = newest
    // event time - 1h) once the next phase's records arrive, so output is committed while the
    // job is killed and restored, and records in partitions found later are never late.
    let phases = [
        (0..20_000, T0),
        (20_000..35_000, T0 + 5 * HOUR),
        (35_000..45_000, T0 + 10 * HOUR),
    ];
    kafka
        .produce("clicks", &batch(phases[0].0.clone(), phases[0].1, 3))
        .unwrap();

    let unbounded = manifest(dir.path(), "clicks", &kafka, 3, false, false);
    let m = unbounded.to_str().unwrap();
    // 1: fresh start, killed after a few checkpoints
    let run = Run::start(&["run", m, "--resume"], &[]);
    let c = run.wait_checkpoint(3);
    run.signal("KILL");
    let _ = run.finish();
    // 2: resumed; partitions 3 → 5 while it runs, then phase 2 over all five
    let run = Run::start(&["run", m, "--resume"], &[]);
    run.wait_checkpoint(c + 1);
    kafka.add_partitions("clicks", 5).unwrap();
    run.wait_for("a new partition assigned", |l| {
        (l.contains("kafka partition assigned")
            && (l.contains("partition=3") || l.contains("partition=4")))
        .then_some(())
    });
    kafka
        .produce("clicks", &batch(phases[1].0.clone(), phases[1].1, 5))
        .unwrap();
    let c = run.wait_checkpoint(c + 4);
    run.signal("KILL");
    let _ = run.finish();
    // 3: resumed; once phase 1's windows are all committed, stopped with a savepoint (SIGINT)
    let run = Run::start(&["run", m, "--resume"], &[]);
    run.wait_checkpoint(c + 2);
    run.wait_windows(
        &dir.path().join("out"),
        &expected(&phases[..1]),
        "phase 1's windows",
        || format!("end offsets of clicks: {:?}", kafka.end_offsets("clicks")),
    );
    let savepoint = run.stop_with_savepoint("after phase 1");
    // 4: phase 3, then the changed job (a new filter step, parallelism 2, bounded) from the
    // savepoint reads to the end and flushes its windows
    kafka
        .produce("clicks", &batch(phases[2].0.clone(), phases[2].1, 5))
        .unwrap();
    let changed = manifest(dir.path(), "clicks", &kafka, 2, true, true);
    Run::bounded_from_savepoint(&changed, &savepoint);

    let got = read_windows(&dir.path().join("out"));
    let want = expected(&phases);
    let total: i64 = got.values().map(|v| v.0).sum();
    assert_eq!(total, 45_000, "every record counted exactly once");
    let missing: Vec<_> = want
        .keys()
        .filter(|k| !got.contains_key(*k))
        .take(5)
        .collect();
    let wrong: Vec<_> = got
        .iter()
        .filter(|(k, v)| want.get(*k) != Some(*v))
        .take(5)
        .collect();
    assert!(
        missing.is_empty() && wrong.is_empty(),
        "missing {missing:?}, wrong {wrong:?}"
    );
    assert_eq!(got, want);
    drop(kafka);
}

/// Issue #38: the broker crashes (SIGKILL, no controlled shutdown) while the job checkpoints
/// every 300 ms and comes back on the same ports and data: the job goes on without a person
/// (its attempt may restart from a checkpoint), keeps checkpointing and committing, and every
/// record is counted exactly once — then a stop with savepoint and a bounded run from it read
/// the rest.
#[test]
fn kafka_broker_crash_during_checkpoints_is_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let watchdog = Watchdog::start(dir.path()).unwrap();
    let mut kafka = Kafka::start(&dir.path().join("kafka"), Some(&watchdog)).unwrap();
    kafka.create_topic("clicks", 3).unwrap();
    let phases = [
        (0..10_000, T0),
        (10_000..20_000, T0 + 5 * HOUR),
        (20_000..25_000, T0 + 10 * HOUR),
    ];
    kafka
        .produce("clicks", &batch(phases[0].0.clone(), phases[0].1, 3))
        .unwrap();
    let unbounded = manifest(dir.path(), "crash", &kafka, 3, false, false);
    let run = Run::start(&["run", unbounded.to_str().unwrap(), "--resume"], &[]);
    let c = run.wait_checkpoint(2);
    let gone = kafka.crash_and_restart(Some(&watchdog)).unwrap();
    eprintln!("the broker was gone for {gone:?} after checkpoint {c}");
    kafka
        .produce("clicks", &batch(phases[1].0.clone(), phases[1].1, 3))
        .unwrap();
    // checkpoints go on after the broker is back, and phase 1's windows are committed
    let c = run.wait_checkpoint(c + 3);
    run.wait_windows(
        &dir.path().join("out"),
        &expected(&phases[..1]),
        "phase 1's windows after the broker crash",
        || format!("end offsets of clicks: {:?}", kafka.end_offsets("clicks")),
    );
    eprintln!("checkpoint {c} and every window of phase 1 after the broker came back");
    let savepoint = run.stop_with_savepoint("after the broker crash");
    kafka
        .produce("clicks", &batch(phases[2].0.clone(), phases[2].1, 3))
        .unwrap();
    let bounded = manifest(dir.path(), "crash", &kafka, 3, false, true);
    Run::bounded_from_savepoint(&bounded, &savepoint);
    let got = read_windows(&dir.path().join("out"));
    let total: i64 = got.values().map(|v| v.0).sum();
    assert_eq!(total, 25_000, "every record counted exactly once");
    assert_eq!(got, expected(&phases));
    drop(kafka);
}

/// Issue #38: partition leaders move while the job reads and checkpoints every 300 ms, on a
/// cluster of three KRaft nodes (topics with three replicas, two in sync required). The node
/// leading partition 0 is SIGKILLed: its partitions (and the controller, when it was that node)
/// move to the others while records are produced; then it comes back and takes its partitions
/// back (a second leader change). The job goes on without a person, keeps checkpointing and
/// committing, and every record is counted exactly once; a stop with savepoint and a bounded run
/// from it read the rest.
#[test]
fn kafka_partition_leaders_moving_during_checkpoints_is_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let watchdog = Watchdog::start(dir.path()).unwrap();
    let mut kafka = Kafka::start_cluster(&dir.path().join("kafka"), 3, Some(&watchdog)).unwrap();
    eprintln!("three KRaft nodes ready in {:?}", kafka.start_duration);
    kafka.create_topic("clicks", 3).unwrap();
    let phases = [
        (0..10_000, T0),
        (10_000..20_000, T0 + 5 * HOUR),
        (20_000..30_000, T0 + 10 * HOUR),
        (30_000..35_000, T0 + 15 * HOUR),
    ];
    let produce = |kafka: &Kafka, i: usize| {
        kafka
            .produce("clicks", &batch(phases[i].0.clone(), phases[i].1, 3))
            .unwrap();
    };
    produce(&kafka, 0);
    let out = dir.path().join("out");
    let unbounded = manifest(dir.path(), "leaders", &kafka, 3, false, false);
    let run = Run::start(&["run", unbounded.to_str().unwrap(), "--resume"], &[]);
    let c = run.wait_checkpoint(2);

    let first = kafka
        .leader_of("clicks", 0)
        .unwrap()
        .expect("a leader of clicks/0");
    let t = Instant::now();
    kafka.kill_node(first).unwrap();
    let second = kafka
        .wait_leader("clicks", 0, "another node", |l| l != first)
        .unwrap();
    eprintln!(
        "node {first} SIGKILLed after checkpoint {c}: node {second} leads clicks/0 {:?} later",
        t.elapsed()
    );
    produce(&kafka, 1);
    let c = run.wait_checkpoint(c + 3);
    run.wait_windows(
        &out,
        &expected(&phases[..1]),
        "phase 0's windows with a node down",
        || format!("end offsets of clicks: {:?}", kafka.end_offsets("clicks")),
    );
    eprintln!("checkpoint {c} and every window of phase 0 with node {first} down");

    let t = Instant::now();
    kafka.start_node(first, Some(&watchdog)).unwrap();
    kafka
        .wait_leader("clicks", 0, "the preferred replica", |l| l == first)
        .unwrap();
    eprintln!(
        "node {first} back and leading clicks/0 again {:?} later",
        t.elapsed()
    );
    produce(&kafka, 2);
    let c = run.wait_checkpoint(c + 3);
    run.wait_windows(
        &out,
        &expected(&phases[..2]),
        "phase 1's windows after the leaders moved back",
        || format!("end offsets of clicks: {:?}", kafka.end_offsets("clicks")),
    );
    eprintln!("checkpoint {c} and every window of phase 1 after the second leader change");

    let savepoint = run.stop_with_savepoint("after two leader changes");
    produce(&kafka, 3);
    let bounded = manifest(dir.path(), "leaders", &kafka, 3, false, true);
    Run::bounded_from_savepoint(&bounded, &savepoint);
    let got = read_windows(&out);
    let total: i64 = got.values().map(|v| v.0).sum();
    assert_eq!(total, 35_000, "every record counted exactly once");
    assert_eq!(got, expected(&phases));
    drop(kafka);
}

/// A restored subtask whose partitions have nothing new still tells downstream how far it read,
/// so the windows its partner's new records close are committed. Found by CI: after a restore,
/// a subtask with nothing left to read sent no watermark and the windows never closed.
#[test]
fn a_restored_subtask_with_nothing_new_to_read_still_lets_windows_close() {
    let dir = tempfile::tempdir().unwrap();
    let watchdog = Watchdog::start(dir.path()).unwrap();
    let kafka = Kafka::start(&dir.path().join("kafka"), Some(&watchdog)).unwrap();
    kafka.create_topic("clicks", 2).unwrap();
    // both partitions at T0, and partition 0 one record five hours later: partition 1's
    // subtask holds the job's watermark near T0 - 1h, so no window closes in the first run
    let early = [(0..2_000, T0)];
    kafka.produce("clicks", &batch(0..2_000, T0, 2)).unwrap();
    let late = |id: i64, partition: i32| (partition, format!("k{id}"), value(id, T0 + 5 * HOUR));
    kafka.produce("clicks", &[late(2_000, 0)]).unwrap();

    let m = manifest(dir.path(), "quiet", &kafka, 2, false, false);
    let m = m.to_str().unwrap();
    let run = Run::start(&["run", m, "--resume"], &[]);
    // a checkpoint that read everything: its offsets are committed to the job's group
    let deadline = std::time::Instant::now() + LINE_TIMEOUT;
    loop {
        run.wait_checkpoint(0);
        let committed = kafka
            .committed_offsets("streamjob-quiet", "clicks", 2)
            .unwrap();
        if committed == [Some(1_001), Some(1_000)] {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the first run did not read every record: committed {committed:?}"
        );
    }
    run.signal("KILL");
    let _ = run.finish();
    assert!(
        read_windows(&dir.path().join("out")).is_empty(),
        "a window closed while partition 1 held the watermark back"
    );

    // partition 1 moves on; partition 0's subtask restores with nothing new to read
    kafka.produce("clicks", &[late(2_001, 1)]).unwrap();
    let run = Run::start(&["run", m, "--resume"], &[]);
    let want = expected(&early);
    run.wait_windows(&dir.path().join("out"), &want, "the early windows", || {
        "after the restore".to_string()
    });
    run.stop_with_savepoint("after the early windows");
    // the early windows, each record once; the late ones stay open in the savepoint
    assert_eq!(read_windows(&dir.path().join("out")), want);
    drop(kafka);
}

/// Values for the bad-record test: every 7th is not JSON, every 11th has a string id, every
/// 13th is a tombstone; the rest are good.
/// (partition, key, value or tombstone) of a record to produce.
type MaybeRecord = (i32, String, Option<Vec<u8>>);

fn mixed(n: i64) -> (Vec<MaybeRecord>, BTreeSet<i64>, usize) {
    let mut records = Vec::new();
    let mut good = BTreeSet::new();
    let mut bad = 0;
    for id in 0..n {
        let partition = (id % 2) as i32;
        let v = if id % 7 == 3 {
            Some(format!("not json {id} {}", "x".repeat(600)).into_bytes())
        } else if id % 11 == 5 {
            Some(format!(r#"{{"id": "id-{id}", "user": "u", "amount": 1, "ts": 0}}"#).into_bytes())
        } else if id % 13 == 6 {
            None
        } else {
            good.insert(id);
            Some(value(id, T0))
        };
        if v.is_none() || !good.contains(&id) {
            bad += 1;
        }
        records.push((partition, format!("k{id}"), v));
    }
    (records, good, bad)
}

fn produce_optional(kafka: &Kafka, topic: &str, records: &[MaybeRecord]) {
    use rdkafka::producer::{BaseRecord, Producer};
    let producer = kafka.producer().unwrap();
    for (p, k, v) in records {
        let mut r: BaseRecord<'_, String, Vec<u8>> = BaseRecord::to(topic).partition(*p).key(k);
        if let Some(v) = v {
            r = r.payload(v);
        }
        producer.send(r).map_err(|(e, _)| e).unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

fn print_manifest(
    dir: &Path,
    name: &str,
    bootstrap: &str,
    topic: &str,
    policy: &str,
    security: &str,
) -> PathBuf {
    let text = format!(
        r#"apiVersion: streamjob.io/v1alpha1
kind: StreamJob
metadata:
  name: {name}
spec:
  image: streamjob/runtime:test
  parallelism: 2
  checkpoints: {{dir: "{ck}", interval: 200ms}}
  deadLetterPath: "{dl}"
  pipeline:
    - uid: in
      onBadRecord: {policy}
      source:
        kafka:
          bootstrapServers: "{bootstrap}"
          topic: {topic}
          stoppingOffsets: latest
          format: {{jsonLines: {{}}}}
          schema:
            - {{name: id, type: int64}}
            - {{name: user, type: string}}
            - {{name: amount, type: int64}}
            - {{name: ts, type: int64}}
          metadataColumns: [partition, offset, key]{security}
    - uid: out
      print: {{}}
"#,
        ck = dir.join(format!("ck-{name}")).display(),
        dl = dir.join(format!("dl-{name}")).display(),
    );
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// The ids and (partition, offset) pairs of printed records.
fn printed(stdout: &[String]) -> Vec<(i64, i64, i64, String)> {
    stdout
        .iter()
        .filter(|l| l.starts_with('{'))
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["id"].as_i64().unwrap(),
                v["kafka_partition"].as_i64().unwrap(),
                v["kafka_offset"].as_i64().unwrap(),
                v["kafka_key"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn bad_records_fail_skip_and_dead_letter_one_by_one_and_sasl_scram() {
    let dir = tempfile::tempdir().unwrap();
    let watchdog = Watchdog::start(dir.path()).unwrap();
    let kafka = Kafka::start(&dir.path().join("kafka"), Some(&watchdog)).unwrap();
    kafka.create_topic("mixed", 2).unwrap();
    let (records, good, bad) = mixed(400);
    produce_optional(&kafka, "mixed", &records);

    // skip: every good record arrives once, with its partition, offset and key
    let m = print_manifest(dir.path(), "skip", &kafka.bootstrap, "mixed", "skip", "");
    let (code, stdout, _) = Run::start(&["run", m.to_str().unwrap()], &[]).finish();
    assert_eq!(code, 0);
    let rows = printed(&stdout);
    let ids: BTreeSet<i64> = rows.iter().map(|r| r.0).collect();
    assert_eq!(rows.len(), good.len(), "each good record once");
    assert_eq!(ids, good);
    for (id, partition, offset, key) in &rows {
        assert_eq!(*partition, id % 2);
        assert_eq!(
            *offset,
            id / 2,
            "records were produced in id order per partition"
        );
        assert_eq!(key, &format!("k{id}"));
    }

    // deadLetter: the good ones arrive, the bad ones are in the dead-letter files, each once
    let m = print_manifest(
        dir.path(),
        "dlq",
        &kafka.bootstrap,
        "mixed",
        "deadLetter",
        "",
    );
    let (code, stdout, _) = Run::start(&["run", m.to_str().unwrap()], &[]).finish();
    assert_eq!(code, 0);
    let ids: Vec<i64> = printed(&stdout).iter().map(|r| r.0).collect();
    assert_eq!(ids.iter().copied().collect::<BTreeSet<_>>(), good);
    assert_eq!(ids.len(), good.len());
    let mut files = Vec::new();
    walk(&dir.path().join("dl-dlq"), &mut files);
    let mut letters = Vec::new();
    for f in files {
        for line in std::fs::read_to_string(f).unwrap().lines() {
            letters.push(serde_json::from_str::<serde_json::Value>(line).unwrap());
        }
    }
    assert_eq!(letters.len(), bad, "one dead letter per bad record");
    let positions: BTreeSet<String> = letters
        .iter()
        .map(|l| {
            let reason = l["reason"].as_str().unwrap();
            reason.split(':').next().unwrap().to_string()
        })
        .collect();
    assert_eq!(
        positions.len(),
        bad,
        "dead letters name distinct positions: {positions:?}"
    );
    assert!(
        positions.contains("mixed/1@1"),
        "id 3 is at partition 1, offset 1: {positions:?}"
    );
    let not_json = letters
        .iter()
        .find(|l| l["reason"].as_str().unwrap().starts_with("mixed/1@1:"))
        .unwrap();
    assert!(
        not_json["record"]
            .as_str()
            .unwrap()
            .starts_with("not json 3 xxx"),
        "{not_json}"
    );

    // fail: a non-zero exit naming the step, the position and the policy, with a short excerpt
    let m = print_manifest(dir.path(), "fail", &kafka.bootstrap, "mixed", "fail", "");
    let (code, _, rest) =
        Run::start(&["run", m.to_str().unwrap(), "--max-restarts", "0"], &[]).finish();
    assert_ne!(code, 0);
    let err = rest
        .iter()
        .find(|l| l.contains("onBadRecord"))
        .unwrap_or_else(|| panic!("no bad-record error in {rest:?}"));
    assert!(err.contains("mixed/"), "{err}");
    assert!(
        err.len() < 2_000,
        "the error quotes a short excerpt, not the record: {} bytes",
        err.len()
    );

    // SASL/SCRAM-SHA-256 with credentials from the environment
    let security = "\n          security:\n            protocol: SASL_PLAINTEXT\n            sasl: {mechanism: SCRAM-SHA-256, secretName: kafka-user}";
    kafka.create_topic("secure", 1).unwrap();
    kafka.produce("secure", &batch(0..100, T0, 1)).unwrap();
    let m = print_manifest(
        dir.path(),
        "scram",
        &kafka.sasl_bootstrap,
        "secure",
        "fail",
        security,
    );
    let (code, stdout, _) = Run::start(
        &["run", m.to_str().unwrap()],
        &[
            ("STREAMJOB_KAFKA_IN_SASL_USERNAME", SCRAM_USER.0),
            ("STREAMJOB_KAFKA_IN_SASL_PASSWORD", SCRAM_USER.1),
        ],
    )
    .finish();
    assert_eq!(code, 0);
    assert_eq!(printed(&stdout).len(), 100);
    let m = print_manifest(
        dir.path(),
        "scram-bad",
        &kafka.sasl_bootstrap,
        "secure",
        "fail",
        security,
    );
    let run = Run::start(
        &["run", m.to_str().unwrap(), "--max-restarts", "0"],
        &[
            ("STREAMJOB_KAFKA_IN_SASL_USERNAME", SCRAM_USER.0),
            ("STREAMJOB_KAFKA_IN_SASL_PASSWORD", "wrong-password-123"),
        ],
    );
    let (code, stdout, rest) = run.finish();
    assert_ne!(code, 0, "a wrong password fails the job");
    let all = [stdout, rest].concat().join("\n");
    assert!(
        all.contains("uthentication"),
        "the error says authentication failed: {all}"
    );
    assert!(
        !all.contains("wrong-password-123"),
        "the password is never printed"
    );
    drop(kafka);
}

#[test]
fn start_positions_timestamp_and_latest() {
    use rdkafka::producer::{BaseRecord, Producer};
    let dir = tempfile::tempdir().unwrap();
    let watchdog = Watchdog::start(dir.path()).unwrap();
    let kafka = Kafka::start(&dir.path().join("kafka"), Some(&watchdog)).unwrap();
    kafka.create_topic("pos", 2).unwrap();
    // record id has the Kafka timestamp T0 + id s
    let producer = kafka.producer().unwrap();
    for id in 0..100i64 {
        let v = value(id, T0);
        let k = format!("k{id}");
        let r = BaseRecord::to("pos")
            .partition((id % 2) as i32)
            .key(&k)
            .payload(&v)
            .timestamp(T0 + id * 1000);
        producer.send(r).map_err(|(e, _)| e).unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let from = chrono::DateTime::from_timestamp_millis(T0 + 50_000)
        .unwrap()
        .to_rfc3339();
    for (name, start, want) in [
        (
            "from-time",
            format!(
                "\n          startingOffsets: timestamp\n          startingTimestamp: \"{from}\""
            ),
            (50..100).collect::<BTreeSet<i64>>(),
        ),
        (
            "from-latest",
            "\n          startingOffsets: latest".to_string(),
            BTreeSet::new(),
        ),
    ] {
        let m = print_manifest(dir.path(), name, &kafka.bootstrap, "pos", "fail", &start);
        let (code, stdout, _) = Run::start(&["run", m.to_str().unwrap()], &[]).finish();
        assert_eq!(code, 0, "{name}");
        let rows = printed(&stdout);
        let ids: BTreeSet<i64> = rows.iter().map(|r| r.0).collect();
        assert_eq!(rows.len(), want.len(), "{name}: each record once");
        assert_eq!(ids, want, "{name}");
    }
    drop(kafka);
}

#[test]
fn group_offsets_and_tls_with_client_certificate_and_sasl_plain() {
    let dir = tempfile::tempdir().unwrap();
    let watchdog = Watchdog::start(dir.path()).unwrap();
    let kafka = Kafka::start(&dir.path().join("kafka"), Some(&watchdog)).unwrap();
    kafka.create_topic("grp", 2).unwrap();
    // id on partition id % 2 at offset id / 2
    kafka.produce("grp", &batch(0..100, T0, 2)).unwrap();

    // startingOffsets: committed starts where an application's group left off; the job's
    // checkpoints commit their offsets back to the group (the final one included)
    kafka
        .commit_offsets("legacy-app", "grp", &[(0, 20), (1, 30)])
        .unwrap();
    let start = "\n          startingOffsets: committed\n          groupId: legacy-app";
    let m = print_manifest(
        dir.path(),
        "from-group",
        &kafka.bootstrap,
        "grp",
        "fail",
        start,
    );
    let (code, stdout, _) = Run::start(&["run", m.to_str().unwrap()], &[]).finish();
    assert_eq!(code, 0);
    let want: BTreeSet<i64> = (0..100)
        .filter(|id| id / 2 >= if id % 2 == 0 { 20 } else { 30 })
        .collect();
    let rows = printed(&stdout);
    assert_eq!(
        rows.len(),
        want.len(),
        "each record after the group's offsets once"
    );
    assert_eq!(rows.iter().map(|r| r.0).collect::<BTreeSet<_>>(), want);
    assert_eq!(
        kafka.committed_offsets("legacy-app", "grp", 2).unwrap(),
        vec![Some(50), Some(50)],
        "the offsets of the final checkpoint are committed to the group"
    );

    // SASL_SSL: the broker's CA, a client certificate (the listener requires one) and a PLAIN
    // user, all from the environment the operator fills from Secrets
    let security = "\n          security:\n            protocol: SASL_SSL\n            sasl: {mechanism: PLAIN, secretName: kafka-user}\n            tls: {secretName: kafka-tls, caKey: ca.crt, certKey: tls.crt, keyKey: tls.key}";
    let pem = |p: &Path| std::fs::read_to_string(p).unwrap();
    let (ca, cert, key) = (
        pem(&kafka.tls.ca.cert),
        pem(&kafka.tls.client.cert),
        pem(&kafka.tls.client.key),
    );
    let stranger = pem(&kafka.tls.stranger_ca.cert);
    let env = |ca: &str| {
        vec![
            ("STREAMJOB_KAFKA_IN_SASL_USERNAME", PLAIN_USER.0.to_string()),
            ("STREAMJOB_KAFKA_IN_SASL_PASSWORD", PLAIN_USER.1.to_string()),
            ("STREAMJOB_KAFKA_IN_TLS_CA", ca.to_string()),
            ("STREAMJOB_KAFKA_IN_TLS_CERT", cert.clone()),
            ("STREAMJOB_KAFKA_IN_TLS_KEY", key.clone()),
        ]
    };
    let secret_printed = |lines: &str| {
        lines.contains(PLAIN_USER.1)
            || lines.contains("PRIVATE KEY")
            || lines.contains(&key[40..80])
    };
    let m = print_manifest(
        dir.path(),
        "tls",
        &kafka.tls_bootstrap,
        "grp",
        "fail",
        security,
    );
    let good = env(&ca);
    let good: Vec<(&str, &str)> = good.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (code, stdout, rest) = Run::start(&["run", m.to_str().unwrap()], &good).finish();
    assert_eq!(code, 0);
    let rows = printed(&stdout);
    assert_eq!(rows.len(), 100, "every record once over TLS");
    assert!(!secret_printed(&[stdout, rest].concat().join("\n")));

    // a CA that did not sign the broker's certificate fails the job loudly
    let bad = env(&stranger);
    let bad: Vec<(&str, &str)> = bad.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (code, stdout, rest) =
        Run::start(&["run", m.to_str().unwrap(), "--max-restarts", "0"], &bad).finish();
    assert_ne!(code, 0, "an untrusted broker certificate fails the job");
    let all = [stdout, rest].concat().join("\n");
    assert!(
        all.contains("certificate verify failed") || all.contains("SSL handshake failed"),
        "the error says the TLS handshake failed: {all}"
    );
    assert!(!secret_printed(&all), "no credential is printed");
    drop(kafka);
}
