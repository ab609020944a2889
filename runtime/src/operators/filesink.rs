//! `fileSink`: the runtime side of the exactly-once file sink (`streamjob-filesink`).
//!
//! One [`FileSink`] per subtask. Its state is one list-state entry per subtask (JSON of
//! `SinkSubtaskState`); on restore every subtask receives the *union* of all old subtasks'
//! entries and keeps the ones `redistribute` assigns to it, with the part counter floor taken
//! over all of them. Pending files are committed on `notify_checkpoint_complete`; a bounded input
//! (`watermark == i64::MAX`) calls `end_of_input` so the final checkpoint commits everything.

use std::time::Duration;

use arrow::datatypes::SchemaRef;
use streamjob_crds::v1alpha1::{FileSinkSpec, StorageSpec};
use streamjob_filesink::{
    FileSink, FileSinkOptions, SinkSubtaskState, max_next_counter, open_store, redistribute,
};

use crate::error::{Error, Result};
use crate::operator::{
    Collector, DataBatch, Operator, OperatorContext, RestoredState, StateDescriptor,
    SubtaskSnapshot, decode_state, encode_state,
};
use crate::registry::{FileSinkContext, OperatorPlan};

fn sink_err(uid: &str, subtask: usize, e: streamjob_filesink::Error) -> Error {
    Error::operator(uid, subtask, format!("file sink: {e}"))
}

/// A file sink subtask.
pub struct FileSinkOperator {
    spec: FileSinkSpec,
    storage: Option<StorageSpec>,
    schema: SchemaRef,
    sink: Option<FileSink>,
    watermark: Option<i64>,
    ended: bool,
    /// Checkpoint completions in a row whose commit failed.
    failed_commits: u32,
}

/// Checkpoint completions in a row whose commit may fail with a transient store error before
/// the attempt fails. Files stay pending between them and the next completion retries; failing
/// the attempt restarts from the latest checkpoint, whose restore commits them again (commits
/// are idempotent), with the restart strategy's back-off. A sink never stops silently.
const COMMIT_FAILURES_IN_A_ROW: u32 = 3;

impl FileSinkOperator {
    fn sink(&mut self, ctx: &OperatorContext) -> Result<&mut FileSink> {
        self.sink
            .as_mut()
            .ok_or_else(|| Error::operator(&ctx.uid, ctx.subtask, "file sink not initialised"))
    }
}

impl Operator for FileSinkOperator {
    async fn initialize_state(
        &mut self,
        ctx: &OperatorContext,
        restored: RestoredState,
    ) -> Result<()> {
        let store = open_store(&self.spec.path, self.storage.as_ref())
            .map_err(|e| sink_err(&ctx.uid, ctx.subtask, e.into()))?;
        let mut sink = FileSink::new(
            &self.spec,
            store,
            ctx.subtask as u32,
            ctx.parallelism as u32,
            self.schema.clone(),
            // the engine keeps event time beside the records (`DataBatch::event_time`)
            FileSinkOptions {
                event_times_beside_batches: true,
                ..FileSinkOptions::default()
            },
        )
        .map_err(|e| sink_err(&ctx.uid, ctx.subtask, e))?;
        let all: Vec<SinkSubtaskState> = restored
            .union
            .iter()
            .map(|b| decode_state(&ctx.uid, b))
            .collect::<Result<_>>()?;
        let floor = max_next_counter(&all);
        let mine = redistribute(all, ctx.parallelism as u32)
            .into_iter()
            .nth(ctx.subtask)
            .unwrap_or_default();
        sink.initialize(mine, floor)
            .await
            .map_err(|e| sink_err(&ctx.uid, ctx.subtask, e))?;
        self.sink = Some(sink);
        Ok(())
    }

    async fn process_batch(
        &mut self,
        ctx: &OperatorContext,
        batch: DataBatch,
        _out: &mut Collector,
    ) -> Result<()> {
        let wm = self.watermark;
        let now = chrono::Utc::now().timestamp_millis();
        let (uid, subtask) = (ctx.uid.clone(), ctx.subtask);
        self.sink(ctx)?
            .write_timed(&batch.records, Some(&batch.event_time), now, wm)
            .await
            .map_err(|e| sink_err(&uid, subtask, e))
    }

    async fn process_watermark(
        &mut self,
        ctx: &OperatorContext,
        watermark: i64,
        _out: &mut Collector,
    ) -> Result<()> {
        self.watermark = Some(watermark);
        let (uid, subtask) = (ctx.uid.clone(), ctx.subtask);
        let ended = self.ended;
        let sink = self.sink(ctx)?;
        sink.on_watermark(watermark)
            .await
            .map_err(|e| sink_err(&uid, subtask, e))?;
        if watermark == i64::MAX && !ended {
            sink.end_of_input()
                .await
                .map_err(|e| sink_err(&uid, subtask, e))?;
            self.ended = true;
        }
        Ok(())
    }

    async fn snapshot_state(
        &mut self,
        ctx: &OperatorContext,
        checkpoint_id: u64,
    ) -> Result<SubtaskSnapshot> {
        let (uid, subtask) = (ctx.uid.clone(), ctx.subtask);
        let state = self
            .sink(ctx)?
            .snapshot(checkpoint_id)
            .await
            .map_err(|e| sink_err(&uid, subtask, e))?;
        Ok(SubtaskSnapshot {
            operator: vec![encode_state(&state)?],
            ..Default::default()
        })
    }

    async fn notify_checkpoint_complete(
        &mut self,
        ctx: &OperatorContext,
        checkpoint_id: u64,
    ) -> Result<()> {
        let (uid, subtask) = (ctx.uid.clone(), ctx.subtask);
        let done = self
            .sink(ctx)?
            .notify_checkpoint_complete(checkpoint_id)
            .await;
        if done.is_err() {
            ctx.metrics
                .commit_failures
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        match done {
            Ok(()) => {
                self.failed_commits = 0;
                Ok(())
            }
            Err(e) if e.is_transient() && self.failed_commits + 1 < COMMIT_FAILURES_IN_A_ROW => {
                self.failed_commits += 1;
                tracing::warn!(%uid, subtask, checkpoint = checkpoint_id, error = %e, failures = self.failed_commits, "file sink commit failed; the next checkpoint retries");
                Ok(())
            }
            Err(e) => Err(Error::operator(
                &uid,
                subtask,
                format!(
                    "file sink: committing the files of checkpoint {checkpoint_id} failed ({} in a row): {e}; the attempt restarts from the latest checkpoint, whose restore commits them",
                    self.failed_commits + 1
                ),
            )),
        }
    }

    fn timer_interval(&self) -> Option<Duration> {
        self.sink.as_ref().map(FileSink::bucket_check_interval)
    }

    async fn on_timer(
        &mut self,
        ctx: &OperatorContext,
        now_ms: i64,
        _out: &mut Collector,
    ) -> Result<()> {
        let (uid, subtask) = (ctx.uid.clone(), ctx.subtask);
        self.sink(ctx)?
            .on_processing_time(now_ms)
            .await
            .map_err(|e| sink_err(&uid, subtask, e))
    }
}

/// The `fileSink` factory registered by [`crate::registry::Registry::with_builtins`].
pub fn plan_file_sink(cx: &FileSinkContext<'_>) -> Result<OperatorPlan> {
    let spec = cx.sink.clone();
    let storage = cx.spec.storage.clone();
    let schema = cx.input_schema.clone();
    let state = StateDescriptor::stateless().field(
        "sinkState",
        format!(
            "SinkSubtaskState/v{}",
            streamjob_filesink::sink::STATE_VERSION
        ),
    );
    Ok(OperatorPlan::new(
        "fileSink",
        cx.input_schema.clone(),
        state,
        None,
        move |_| {
            Ok(FileSinkOperator {
                spec: spec.clone(),
                storage: storage.clone(),
                schema: schema.clone(),
                sink: None,
                watermark: None,
                ended: false,
                failed_commits: 0,
            })
        },
    ))
}
