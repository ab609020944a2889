//! Subtask drivers: the loops that move elements between channels and call the operators,
//! align checkpoint barriers, snapshot, upload and acknowledge.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::Duration;

use arrow::array::UInt32Array;
use streamjob_crds::v1alpha1::BadRecordPolicy;
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::keygroups::{key_group_for_key, row_keys, subtask_for_key_group};
use crate::operator::{
    Collector, DataBatch, DynOperator, DynSource, OperatorContext, RestoredState, SourcePoll,
    SubtaskSnapshot,
};
use crate::snapshot::encode_subtask;
use crate::storage::Location;

/// Why a barrier was injected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarrierKind {
    /// A periodic checkpoint; `last` marks the final checkpoint of a bounded job (sources end
    /// their streams after it).
    Checkpoint { last: bool },
    /// A savepoint; with `stop` the sources end their streams after it.
    Savepoint { stop: bool },
}

/// A checkpoint barrier.
#[derive(Clone, Debug)]
pub struct Barrier {
    pub id: u64,
    pub kind: BarrierKind,
    /// Directory the snapshot is written to.
    pub target: Location,
    /// Prefix of the state files inside `target` (`""` or `<run>/`), unique per run, so that a
    /// fenced run that takes a checkpoint of the same number never overwrites another run's
    /// state files (see [`crate::fence`]).
    pub state_prefix: String,
}

impl Barrier {
    /// Whether the job ends after this barrier.
    pub fn ends_stream(&self) -> bool {
        matches!(
            self.kind,
            BarrierKind::Checkpoint { last: true } | BarrierKind::Savepoint { stop: true }
        )
    }
}

/// What flows on the data channels.
#[derive(Clone, Debug)]
pub enum Element {
    Data(DataBatch),
    Watermark(i64),
    Barrier(Barrier),
    /// The upstream subtask ends (after a stop-with-savepoint or the final checkpoint).
    End,
    /// The upstream subtask has no records to give for now (idle Kafka partitions, or none):
    /// it stops holding back the watermark until it sends data or a watermark again (Flink's
    /// idle watermark status).
    Idle,
}

/// Commands from the coordinator to a subtask.
#[derive(Clone, Debug)]
pub enum TaskCommand {
    /// Sources only: inject this barrier.
    TriggerBarrier(Barrier),
    /// Checkpoint `id` completed.
    NotifyComplete(u64),
}

/// Events from subtasks to the coordinator (also sent by workers, hence serde).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TaskEvent {
    Ack {
        checkpoint_id: u64,
        step: usize,
        subtask: usize,
        /// (relative path, bytes) of the state file, if the subtask had state.
        file: Option<(String, u64)>,
    },
    SourceExhausted {
        subtask: usize,
    },
    Finished {
        step: usize,
        subtask: usize,
    },
    Failed {
        step: usize,
        subtask: usize,
        error: String,
    },
}

/// Result of offering a barrier to the aligner.
#[derive(Debug, PartialEq, Eq)]
pub enum Alignment {
    /// Barrier of an older, abandoned checkpoint: ignore.
    Ignore,
    /// Waiting for more inputs; the input that delivered it is blocked.
    Waiting,
    /// All inputs delivered it: snapshot now.
    Aligned,
}

/// Aligned checkpoint barriers over `n` inputs (Flink's exactly-once alignment): after an input
/// delivers the barrier of checkpoint `id`, its further elements wait until every input has
/// delivered that barrier. A newer barrier abandons an alignment in progress.
#[derive(Debug)]
pub struct BarrierAligner {
    arrived: Vec<bool>,
    ended: Vec<bool>,
    current: Option<u64>,
    last_aligned: u64,
}

impl BarrierAligner {
    /// An aligner over `n` inputs.
    pub fn new(n: usize) -> Self {
        Self {
            arrived: vec![false; n],
            ended: vec![false; n],
            current: None,
            last_aligned: 0,
        }
    }

    /// Whether elements of `input` must wait.
    pub fn is_blocked(&self, input: usize) -> bool {
        self.current.is_some() && self.arrived[input]
    }

    fn complete(&self) -> bool {
        self.arrived.iter().zip(&self.ended).all(|(a, e)| *a || *e)
    }

    /// Input `input` delivered the barrier of checkpoint `id`.
    pub fn on_barrier(&mut self, input: usize, id: u64) -> Alignment {
        if id <= self.last_aligned || self.current.is_some_and(|c| id < c) {
            return Alignment::Ignore;
        }
        if self.current != Some(id) {
            self.arrived.iter_mut().for_each(|a| *a = false);
            self.current = Some(id);
        }
        self.arrived[input] = true;
        if self.complete() {
            self.arrived.iter_mut().for_each(|a| *a = false);
            self.current = None;
            self.last_aligned = id;
            Alignment::Aligned
        } else {
            Alignment::Waiting
        }
    }

    /// Input `input` ended; returns `Aligned` if that completes a pending alignment.
    pub fn on_end(&mut self, input: usize) -> Alignment {
        self.ended[input] = true;
        match self.current {
            Some(id) if self.complete() => {
                self.arrived.iter_mut().for_each(|a| *a = false);
                self.current = None;
                self.last_aligned = id;
                Alignment::Aligned
            }
            _ => Alignment::Waiting,
        }
    }

    /// Whether all inputs ended.
    pub fn all_ended(&self) -> bool {
        self.ended.iter().all(|e| *e)
    }

    /// Whether input `input` ended.
    pub fn is_ended(&self, input: usize) -> bool {
        self.ended[input]
    }
}

/// How a subtask sends downstream.
pub struct Output {
    pub targets: Vec<mpsc::Sender<Element>>,
    /// `None`: forward (one target) or rebalance; `Some`: hash by these columns.
    pub hash_columns: Option<Vec<usize>>,
    pub max_parallelism: u32,
    next: usize,
}

impl Output {
    /// An output to `targets`.
    pub fn new(
        targets: Vec<mpsc::Sender<Element>>,
        hash_columns: Option<Vec<usize>>,
        max_parallelism: u32,
    ) -> Self {
        Self {
            targets,
            hash_columns,
            max_parallelism,
            next: 0,
        }
    }

    async fn send(&self, i: usize, e: Element) -> Result<()> {
        self.targets[i]
            .send(e)
            .await
            .map_err(|_| Error::Cancelled("downstream subtask is gone".into()))
    }

    /// Sends a batch, partitioned as configured.
    pub async fn send_batch(&mut self, batch: DataBatch) -> Result<()> {
        if self.targets.is_empty() || batch.num_rows() == 0 {
            return Ok(());
        }
        match &self.hash_columns {
            Some(cols) if self.targets.len() > 1 => {
                let key_cols: Vec<_> = cols
                    .iter()
                    .map(|c| batch.records.column(*c).clone())
                    .collect();
                let keys = row_keys(&key_cols, batch.num_rows())?;
                let p = self.targets.len() as u32;
                let mut per: Vec<Vec<u32>> = vec![Vec::new(); self.targets.len()];
                for (row, k) in keys.iter().enumerate() {
                    let kg = key_group_for_key(k, self.max_parallelism);
                    let t = subtask_for_key_group(kg, self.max_parallelism, p) as usize;
                    per[t].push(row as u32);
                }
                for (t, rows) in per.into_iter().enumerate() {
                    if rows.is_empty() {
                        continue;
                    }
                    let part = if rows.len() == batch.num_rows() {
                        batch.clone()
                    } else {
                        batch.take(&UInt32Array::from(rows))?
                    };
                    self.send(t, Element::Data(part)).await?;
                }
                Ok(())
            }
            _ => {
                let t = self.next % self.targets.len();
                self.next = self.next.wrapping_add(1);
                self.send(t, Element::Data(batch)).await
            }
        }
    }

    /// Sends an element to every target.
    pub async fn broadcast(&self, e: Element) -> Result<()> {
        for i in 0..self.targets.len() {
            self.send(i, e.clone()).await?;
        }
        Ok(())
    }
}

/// Everything a subtask driver needs.
pub struct TaskSetup {
    pub ctx: OperatorContext,
    pub step: usize,
    pub restored: RestoredState,
    pub output: Output,
    pub commands: mpsc::UnboundedReceiver<TaskCommand>,
    pub events: mpsc::UnboundedSender<TaskEvent>,
    pub dead_letter: Option<Location>,
}

async fn upload_and_ack(setup: &TaskSetup, barrier: &Barrier, snap: SubtaskSnapshot) -> Result<()> {
    let file = if snap.is_empty() {
        None
    } else {
        let rel = format!(
            "{}{}/subtask-{}.state",
            barrier.state_prefix, setup.ctx.uid, setup.ctx.subtask
        );
        let bytes = encode_subtask(&snap);
        let len = bytes.len() as u64;
        barrier.target.put(&rel, bytes).await?;
        Some((rel, len))
    };
    let _ = setup.events.send(TaskEvent::Ack {
        checkpoint_id: barrier.id,
        step: setup.step,
        subtask: setup.ctx.subtask,
        file,
    });
    Ok(())
}

/// Applies the bad-record policy to what the operator reported.
async fn handle_bad_records(setup: &TaskSetup, out: &mut Collector) -> Result<()> {
    if out.bad_records.is_empty() {
        return Ok(());
    }
    let bad = std::mem::take(&mut out.bad_records);
    let m = &setup.ctx.metrics;
    match setup.ctx.bad_record_policy {
        BadRecordPolicy::Fail => {
            m.bad_records_failed
                .fetch_add(bad.len() as u64, Ordering::Relaxed);
            let first = &bad[0];
            Err(Error::BadRecord {
                uid: setup.ctx.uid.clone(),
                message: format!(
                    "{} (record: {}); set onBadRecord: skip or deadLetter to continue past such records",
                    crate::operator::excerpt(&first.reason),
                    crate::operator::excerpt(&first.record)
                ),
            })
        }
        BadRecordPolicy::Skip => {
            m.bad_records_skipped
                .fetch_add(bad.len() as u64, Ordering::Relaxed);
            tracing::debug!(uid = %setup.ctx.uid, count = bad.len(), "skipped bad records");
            Ok(())
        }
        BadRecordPolicy::DeadLetter => {
            m.bad_records_dead_letter
                .fetch_add(bad.len() as u64, Ordering::Relaxed);
            let Some(dl) = &setup.dead_letter else {
                return Err(Error::Other(format!(
                    "step {:?} has onBadRecord: deadLetter but spec.deadLetterPath is not set",
                    setup.ctx.uid
                )));
            };
            crate::dead_letter::write(dl, &setup.ctx.uid, setup.ctx.subtask, &bad).await
        }
    }
}

async fn emit(setup: &mut TaskSetup, out: &mut Collector) -> Result<()> {
    handle_bad_records(setup, out).await?;
    for b in out.take_batches() {
        setup
            .ctx
            .metrics
            .records_out
            .fetch_add(b.num_rows() as u64, Ordering::Relaxed);
        setup.output.send_batch(b).await?;
    }
    Ok(())
}

/// Runs a source subtask until it ends (stop-with-savepoint or final checkpoint) or fails.
pub async fn run_source(mut setup: TaskSetup, mut source: Box<dyn DynSource>) -> Result<()> {
    let span = tracing::info_span!("source", uid = %setup.ctx.uid, subtask = setup.ctx.subtask);
    async move {
        let ctx = setup.ctx.clone();
        source
            .initialize_state(&ctx, std::mem::take(&mut setup.restored))
            .await?;
        let mut exhausted = false;
        let mut ending: Option<u64> = None;
        let mut watermark = i64::MIN;
        let mut idle_sent = false;
        let mut out = Collector::default();
        loop {
            // serve commands first
            let cmd = if exhausted || ending.is_some() {
                match setup.commands.recv().await {
                    Some(c) => Some(c),
                    None => return Err(Error::Cancelled("coordinator is gone".into())),
                }
            } else {
                setup.commands.try_recv().ok()
            };
            if let Some(cmd) = cmd {
                match cmd {
                    TaskCommand::TriggerBarrier(b) => {
                        if ending.is_some() {
                            continue;
                        }
                        let snap = source.snapshot_state(&ctx, b.id).await?;
                        setup.output.broadcast(Element::Barrier(b.clone())).await?;
                        upload_and_ack(&setup, &b, snap).await?;
                        if b.ends_stream() {
                            setup.output.broadcast(Element::End).await?;
                            ending = Some(b.id);
                        }
                    }
                    TaskCommand::NotifyComplete(id) => {
                        source.notify_checkpoint_complete(&ctx, id).await?;
                        if ending.is_some_and(|e| id >= e) {
                            let _ = setup.events.send(TaskEvent::Finished {
                                step: setup.step,
                                subtask: ctx.subtask,
                            });
                            return Ok(());
                        }
                    }
                }
                continue;
            }
            match source.poll_next(&ctx, &mut out).await? {
                SourcePoll::Batch(batch, wm) => {
                    idle_sent = false;
                    emit(&mut setup, &mut out).await?;
                    ctx.metrics
                        .records_out
                        .fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
                    setup.output.send_batch(batch).await?;
                    if let Some(wm) = wm
                        && wm > watermark
                    {
                        watermark = wm;
                        setup.output.broadcast(Element::Watermark(wm)).await?;
                    }
                }
                SourcePoll::Idle(wait) => {
                    emit(&mut setup, &mut out).await?;
                    let now = chrono::Utc::now().timestamp_millis();
                    if let Some(wm) = source.watermark(now)
                        && wm > watermark
                    {
                        idle_sent = false;
                        watermark = wm;
                        setup.output.broadcast(Element::Watermark(wm)).await?;
                    } else if !idle_sent && source.is_idle(now) {
                        idle_sent = true;
                        setup.output.broadcast(Element::Idle).await?;
                    }
                    tokio::select! {
                        c = setup.commands.recv() => {
                            // put it back by handling it on the next iteration
                            match c {
                                Some(TaskCommand::TriggerBarrier(b)) => {
                                    let snap = source.snapshot_state(&ctx, b.id).await?;
                                    setup.output.broadcast(Element::Barrier(b.clone())).await?;
                                    upload_and_ack(&setup, &b, snap).await?;
                                    if b.ends_stream() {
                                        setup.output.broadcast(Element::End).await?;
                                        ending = Some(b.id);
                                    }
                                }
                                Some(TaskCommand::NotifyComplete(id)) => {
                                    source.notify_checkpoint_complete(&ctx, id).await?;
                                }
                                None => return Err(Error::Cancelled("coordinator is gone".into())),
                            }
                        }
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
                SourcePoll::Finished => {
                    emit(&mut setup, &mut out).await?;
                    if watermark < i64::MAX {
                        watermark = i64::MAX;
                        setup.output.broadcast(Element::Watermark(i64::MAX)).await?;
                    }
                    exhausted = true;
                    let _ = setup.events.send(TaskEvent::SourceExhausted {
                        subtask: ctx.subtask,
                    });
                }
            }
        }
    }
    .instrument(span)
    .await
}

/// Polls the non-blocked inputs round robin.
async fn next_input(
    inputs: &mut [mpsc::Receiver<Element>],
    aligner: &BarrierAligner,
    start: &mut usize,
) -> (usize, Option<Element>) {
    let n = inputs.len();
    std::future::poll_fn(|cx| {
        for k in 0..n {
            let i = (*start + k) % n;
            if aligner.is_blocked(i) || aligner.is_ended(i) {
                continue;
            }
            if let Poll::Ready(e) = inputs[i].poll_recv(cx) {
                *start = (i + 1) % n;
                return Poll::Ready((i, e));
            }
        }
        Poll::Pending
    })
    .await
}

/// Runs an operator subtask.
pub async fn run_operator(
    mut setup: TaskSetup,
    mut op: Box<dyn DynOperator>,
    mut inputs: Vec<mpsc::Receiver<Element>>,
) -> Result<()> {
    let span = tracing::info_span!("operator", uid = %setup.ctx.uid, subtask = setup.ctx.subtask);
    async move {
        let ctx = setup.ctx.clone();
        op.initialize_state(&ctx, std::mem::take(&mut setup.restored))
            .await?;
        let n = inputs.len();
        let mut aligner = BarrierAligner::new(n);
        let mut inputs_wm = InputWatermarks::new(n);
        let mut idle_sent = false;
        let mut watermark = i64::MIN;
        let mut start = 0usize;
        let mut out = Collector::default();
        let mut last_barrier: Option<u64> = None;
        // The notification of the final checkpoint can overtake the `End` markers that follow its
        // barrier (commands are served first); remember it so the subtask still ends.
        let mut notified: Option<u64> = None;
        let timer_every = op.timer_interval();
        let mut timer = tokio::time::interval(timer_every.unwrap_or(Duration::from_secs(3600)));
        timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        timer.tick().await;
        loop {
            if aligner.all_ended() {
                if let (Some(n), Some(b)) = (notified, last_barrier)
                    && n >= b
                {
                    let _ = setup.events.send(TaskEvent::Finished {
                        step: setup.step,
                        subtask: ctx.subtask,
                    });
                    return Ok(());
                }
                // wait for the notification of the last snapshot, then end
                match setup.commands.recv().await {
                    Some(TaskCommand::NotifyComplete(id)) => {
                        op.notify_checkpoint_complete(&ctx, id).await?;
                        if last_barrier.is_none_or(|b| id >= b) {
                            let _ = setup.events.send(TaskEvent::Finished {
                                step: setup.step,
                                subtask: ctx.subtask,
                            });
                            return Ok(());
                        }
                    }
                    Some(TaskCommand::TriggerBarrier(_)) => {}
                    None => return Err(Error::Cancelled("coordinator is gone".into())),
                }
                continue;
            }
            let (i, elem) = tokio::select! {
                biased;
                c = setup.commands.recv() => {
                    match c {
                        Some(TaskCommand::NotifyComplete(id)) => {
                            op.notify_checkpoint_complete(&ctx, id).await?;
                            notified = notified.max(Some(id));
                        }
                        Some(TaskCommand::TriggerBarrier(_)) => {}
                        None => return Err(Error::Cancelled("coordinator is gone".into())),
                    }
                    continue;
                }
                _ = timer.tick(), if timer_every.is_some() => {
                    op.on_timer(&ctx, chrono::Utc::now().timestamp_millis(), &mut out).await?;
                    emit(&mut setup, &mut out).await?;
                    continue;
                }
                r = next_input(&mut inputs, &aligner, &mut start) => r,
            };
            let Some(elem) = elem else {
                return Err(Error::Cancelled("upstream subtask is gone".into()));
            };
            match elem {
                Element::Data(batch) => {
                    inputs_wm.on_data(i);
                    idle_sent = false;
                    ctx.metrics
                        .records_in
                        .fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
                    op.process_batch(&ctx, batch, &mut out).await?;
                    emit(&mut setup, &mut out).await?;
                }
                Element::Watermark(_) | Element::Idle => {
                    if let Element::Watermark(wm) = elem {
                        inputs_wm.on_watermark(i, wm);
                    } else {
                        inputs_wm.on_idle(i);
                    }
                    let Some(combined) = inputs_wm.combined(|j| aligner.is_ended(j)) else {
                        // every input is idle: so is this subtask
                        if !idle_sent {
                            idle_sent = true;
                            setup.output.broadcast(Element::Idle).await?;
                        }
                        continue;
                    };
                    if combined > watermark {
                        idle_sent = false;
                        watermark = combined;
                        op.process_watermark(&ctx, watermark, &mut out).await?;
                        emit(&mut setup, &mut out).await?;
                        setup
                            .output
                            .broadcast(Element::Watermark(watermark))
                            .await?;
                    }
                }
                Element::Barrier(b) => {
                    if aligner.on_barrier(i, b.id) == Alignment::Aligned {
                        snapshot(&mut setup, &mut op, &b).await?;
                        last_barrier = Some(b.id);
                    }
                }
                Element::End => {
                    if aligner.on_end(i) == Alignment::Aligned {
                        // cannot happen for well-formed streams (End follows the barrier)
                        tracing::warn!("input ended during barrier alignment");
                    }
                    if aligner.all_ended() {
                        setup.output.broadcast(Element::End).await?;
                    }
                }
            }
        }
    }
    .instrument(span)
    .await
}

async fn snapshot(setup: &mut TaskSetup, op: &mut Box<dyn DynOperator>, b: &Barrier) -> Result<()> {
    let ctx = setup.ctx.clone();
    let span = tracing::debug_span!("snapshot", checkpoint = b.id);
    async {
        let snap = op.snapshot_state(&ctx, b.id).await?;
        setup.output.broadcast(Element::Barrier(b.clone())).await?;
        upload_and_ack(setup, b, snap).await
    }
    .instrument(span)
    .await
}

/// Default capacity (batches) of a data channel.
pub const CHANNEL_CAPACITY: usize = 16;

/// Keeps the compiler honest about the metrics type.
pub type SharedMetrics = Arc<crate::metrics::OperatorMetrics>;

/// The watermarks of an operator's inputs and which of them are idle.
#[derive(Debug)]
struct InputWatermarks {
    watermark: Vec<i64>,
    idle: Vec<bool>,
}

impl InputWatermarks {
    fn new(n: usize) -> Self {
        Self {
            watermark: vec![i64::MIN; n],
            idle: vec![false; n],
        }
    }

    fn on_watermark(&mut self, i: usize, wm: i64) {
        self.watermark[i] = self.watermark[i].max(wm);
        self.idle[i] = false;
    }

    fn on_idle(&mut self, i: usize) {
        self.idle[i] = true;
    }

    fn on_data(&mut self, i: usize) {
        self.idle[i] = false;
    }

    /// The smallest watermark of the inputs that are neither ended nor idle; `i64::MAX` when
    /// all ended; `None` when every input that has not ended is idle.
    fn combined(&self, ended: impl Fn(usize) -> bool) -> Option<i64> {
        let open: Vec<usize> = (0..self.watermark.len()).filter(|j| !ended(*j)).collect();
        if open.is_empty() {
            return Some(i64::MAX);
        }
        open.iter()
            .filter(|j| !self.idle[**j])
            .map(|j| self.watermark[*j])
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_inputs_stop_holding_back_the_watermark_until_they_speak_again() {
        let mut w = InputWatermarks::new(3);
        let none_ended = |_| false;
        w.on_watermark(0, 100);
        w.on_watermark(1, 50);
        assert_eq!(
            w.combined(none_ended),
            Some(i64::MIN),
            "input 2 has said nothing"
        );
        w.on_idle(2);
        assert_eq!(w.combined(none_ended), Some(50));
        w.on_idle(1);
        assert_eq!(w.combined(none_ended), Some(100));
        w.on_idle(0);
        assert_eq!(w.combined(none_ended), None, "all idle");
        // data from an idle input makes it count again, with its old watermark
        w.on_data(1);
        assert_eq!(w.combined(none_ended), Some(50));
        w.on_watermark(2, 70);
        assert_eq!(w.combined(none_ended), Some(50));
        // ended inputs never count; all ended is the end of event time
        assert_eq!(w.combined(|j| j == 1), Some(70));
        assert_eq!(w.combined(|_| true), Some(i64::MAX));
    }

    #[test]
    fn barriers_align_over_all_inputs() {
        let mut a = BarrierAligner::new(3);
        assert_eq!(a.on_barrier(0, 1), Alignment::Waiting);
        assert!(a.is_blocked(0));
        assert!(!a.is_blocked(1));
        assert_eq!(a.on_barrier(2, 1), Alignment::Waiting);
        assert!(a.is_blocked(2));
        assert_eq!(a.on_barrier(1, 1), Alignment::Aligned);
        assert!(!a.is_blocked(0) && !a.is_blocked(1) && !a.is_blocked(2));
        // a stale barrier is ignored
        assert_eq!(a.on_barrier(0, 1), Alignment::Ignore);
    }

    #[test]
    fn newer_barrier_abandons_older_alignment() {
        let mut a = BarrierAligner::new(2);
        assert_eq!(a.on_barrier(0, 5), Alignment::Waiting);
        assert_eq!(a.on_barrier(1, 6), Alignment::Waiting);
        assert!(
            !a.is_blocked(0),
            "input 0 only delivered the abandoned barrier"
        );
        assert!(a.is_blocked(1));
        assert_eq!(a.on_barrier(1, 5), Alignment::Ignore);
        assert_eq!(a.on_barrier(0, 6), Alignment::Aligned);
    }

    #[test]
    fn ended_inputs_do_not_hold_back_alignment() {
        let mut a = BarrierAligner::new(2);
        assert_eq!(a.on_end(1), Alignment::Waiting);
        assert_eq!(a.on_barrier(0, 1), Alignment::Aligned);
        let mut b = BarrierAligner::new(2);
        assert_eq!(b.on_barrier(0, 1), Alignment::Waiting);
        assert_eq!(b.on_end(1), Alignment::Aligned);
        assert!(!b.all_ended());
        assert_eq!(b.on_end(0), Alignment::Waiting);
        assert!(b.all_ended());
    }

    #[test]
    fn single_input_aligns_immediately() {
        let mut a = BarrierAligner::new(1);
        assert_eq!(a.on_barrier(0, 1), Alignment::Aligned);
        assert_eq!(a.on_barrier(0, 2), Alignment::Aligned);
    }
}
