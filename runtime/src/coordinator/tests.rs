use std::collections::BTreeMap;
use std::sync::Mutex as StdMutex;
use std::sync::atomic::AtomicBool;

use arrow::array::AsArray;
use arrow::datatypes::{Int64Type, TimestampMillisecondType};

use super::*;
use crate::graph::build_graph;
use crate::operator::{Collector, DataBatch, Operator, RestoredState};
use crate::operators::generator::{DEFAULT_START_MS, generator_record, generator_ts};
use crate::registry::{OperatorPlan, Registry};

/// Fails once, after `after` records, then passes everything through.
struct FailOnce {
    seen: u64,
    after: u64,
    failed: Arc<AtomicBool>,
}

impl Operator for FailOnce {
    async fn initialize_state(&mut self, _: &OperatorContext, _: RestoredState) -> Result<()> {
        Ok(())
    }
    async fn process_batch(
        &mut self,
        ctx: &OperatorContext,
        b: DataBatch,
        out: &mut Collector,
    ) -> Result<()> {
        self.seen += b.num_rows() as u64;
        if self.seen > self.after && !self.failed.swap(true, Ordering::SeqCst) {
            return Err(Error::operator(&ctx.uid, ctx.subtask, "injected failure"));
        }
        out.emit(b);
        Ok(())
    }
}

type Rows = Arc<StdMutex<Vec<(String, i64, i64, i64)>>>;

/// Records window results (key, window start, count, sum).
struct Capture(Rows);

impl Operator for Capture {
    async fn initialize_state(&mut self, _: &OperatorContext, _: RestoredState) -> Result<()> {
        Ok(())
    }
    async fn process_batch(
        &mut self,
        _: &OperatorContext,
        b: DataBatch,
        _: &mut Collector,
    ) -> Result<()> {
        let r = &b.records;
        let keys = r.column(0).as_string::<i32>();
        let starts = r.column(1).as_primitive::<TimestampMillisecondType>();
        let counts = r.column(3).as_primitive::<Int64Type>();
        let sums = r.column(4).as_primitive::<Int64Type>();
        let mut rows = self.0.lock().map_err(|_| Error::Other("poisoned".into()))?;
        for i in 0..r.num_rows() {
            rows.push((
                keys.value(i).to_string(),
                starts.value(i),
                counts.value(i),
                sums.value(i),
            ));
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_failing_subtask_restarts_the_job_from_the_latest_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let count = 40_000u64;
    let yaml = format!(
        "apiVersion: streamjob.io/v1alpha1\nkind: StreamJob\nmetadata: {{name: restart}}\nspec:\n  image: x\n  parallelism: 2\n  checkpoints: {{dir: {}, interval: 100ms}}\n  pipeline:\n    - uid: gen\n      source: {{generator: {{count: {count}, keys: 4, seed: 9, ratePerSecond: 40000}}}}\n    - uid: flaky\n      custom: {{name: fail-once}}\n    - uid: agg\n      keyBy: [key]\n      window: {{tumbling: 1s}}\n      aggregate: {{count: true, sum: [value]}}\n    - uid: out\n      fileSink: {{path: {}, format: {{jsonLines: {{}}}}}}\n",
        dir.path().join("ck").display(),
        dir.path().join("out").display()
    );
    let failed = Arc::new(AtomicBool::new(false));
    let rows: Rows = Arc::default();
    let mut registry = Registry::with_builtins();
    let f2 = failed.clone();
    registry.register("fail-once", move |cx| {
        let f3 = f2.clone();
        Ok(OperatorPlan::stateless(
            "custom:fail-once",
            cx.input_schema.clone(),
            move |_| {
                Ok(FailOnce {
                    seen: 0,
                    after: 15_000,
                    failed: f3.clone(),
                })
            },
        ))
    });
    let r2 = rows.clone();
    registry.register_file_sink(move |cx| {
        let r3 = r2.clone();
        Ok(OperatorPlan::stateless(
            "capture",
            cx.input_schema.clone(),
            move |_| Ok(Capture(r3.clone())),
        ))
    });
    let job = streamjob_crds::v1alpha1::StreamJob::from_yaml(&yaml).unwrap();
    let graph = build_graph(&job, &registry).await.unwrap();
    let (shared, rx) = Shared::new("restart");
    let outcome = run_job(
        graph,
        RunOptions {
            restore: RestoreFrom::Empty,
            max_restarts: 3,
            standby: false,
            workers: None,
            epoch: None,
            resume_own: false,
        },
        shared.clone(),
        rx,
    )
    .await
    .unwrap();
    assert_eq!(outcome, Outcome::Finished);
    assert!(failed.load(Ordering::SeqCst));
    assert_eq!(shared.metrics.restarts.load(Ordering::Relaxed), 1);
    assert!(
        shared
            .status()
            .failure
            .unwrap()
            .contains("injected failure")
    );
    // expected aggregates, computed from the generator definition
    let mut want: BTreeMap<(String, i64), (i64, i64)> = BTreeMap::new();
    for id in 0..count {
        let (k, v) = generator_record(9, 4, id);
        let ts = generator_ts(DEFAULT_START_MS, 1, id);
        let e = want
            .entry((format!("key-{k}"), ts - ts.rem_euclid(1000)))
            .or_default();
        e.0 += 1;
        e.1 += v;
    }
    // the capture sink is not transactional: windows fired after the last checkpoint before
    // the failure are emitted again, with identical values (no double counting)
    let mut got: BTreeMap<(String, i64), (i64, i64)> = BTreeMap::new();
    for (k, s, c, sum) in rows.lock().unwrap().iter() {
        if let Some(prev) = got.insert((k.clone(), *s), (*c, *sum)) {
            assert_eq!(prev, (*c, *sum));
        }
    }
    assert_eq!(got, want);
}

#[tokio::test]
async fn failing_for_good_stops_after_max_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "apiVersion: streamjob.io/v1alpha1\nkind: StreamJob\nmetadata: {{name: broken}}\nspec:\n  image: x\n  checkpoints: {{dir: {}, interval: 1s}}\n  pipeline:\n    - uid: gen\n      source: {{generator: {{count: 100}}}}\n    - uid: bad\n      project: [{{name: x, expr: \"arrow_cast(key, 'Int64')\"}}]\n    - uid: out\n      print: {{}}\n",
        dir.path().join("ck").display()
    );
    let job = streamjob_crds::v1alpha1::StreamJob::from_yaml(&yaml).unwrap();
    let graph = build_graph(&job, &Registry::with_builtins()).await.unwrap();
    let (shared, rx) = Shared::new("broken");
    let err = run_job(
        graph,
        RunOptions {
            restore: RestoreFrom::Empty,
            max_restarts: 2,
            standby: false,
            workers: None,
            epoch: None,
            resume_own: false,
        },
        shared.clone(),
        rx,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, Error::TooManyRestarts { restarts: 2, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("bad record"), "{err}");
    assert_eq!(shared.status().state, RunState::Failed);
    assert_eq!(shared.metrics.restarts.load(Ordering::Relaxed), 2);
}
