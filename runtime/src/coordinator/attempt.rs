//! One attempt of a session: the subtasks run until they finish, the job is stopped or
//! cancelled, or something fails. [`AttemptLoop::run`] waits on the event sources of an attempt
//! and hands each to its own method: subtask events ([`AttemptLoop::on_task_event`]), control
//! requests ([`AttemptLoop::on_request`]), the checkpoint interval ([`AttemptLoop::on_interval`]),
//! the pending checkpoint's deadline ([`AttemptLoop::on_deadline`]), the rate ticker and the
//! subtasks' joins. A method returning `Some` ends the attempt.

use super::*;

/// How an attempt ended, with the latest checkpoint it completed (its session's next restart
/// point) either way.
pub(super) type AttemptEnd =
    std::result::Result<(Outcome, Option<Location>), (Error, Option<Location>)>;

/// What an attempt takes from its session, fixed for the attempt.
pub(super) struct AttemptConfig<'a> {
    pub(super) graph: &'a JobGraph,
    pub(super) shared: &'a Arc<Shared>,
    pub(super) ckpt_dir: &'a Location,
    pub(super) interval: Duration,
    pub(super) timeout: Duration,
    pub(super) retained: usize,
    /// What this run's checkpoints descend from (recorded in their metadata).
    pub(super) lineage: &'a [String],
}

/// The state of one attempt.
pub(super) struct AttemptLoop<'a, 'f> {
    cfg: AttemptConfig<'a>,
    attempt: Attempt,
    /// Requests that arrived while a checkpoint was pending, served in order.
    queued: &'a mut Vec<ControlRequest>,
    /// The next checkpoint id (shared by the attempts of a session, never reused).
    next_id: &'a mut u64,
    commits: &'a mut Commits<'f>,
    /// The latest completed checkpoint (restart point) known so far.
    latest: Option<Location>,
    /// Sources, and how many of them are exhausted (bounded input).
    sources: usize,
    exhausted: usize,
    /// Subtasks that finished.
    finished: usize,
    pending: Option<Pending>,
    /// A stream-ending barrier completed: the subtasks are finishing.
    ending: bool,
    ended_with: Option<Outcome>,
    /// Unique per attempt: state files of two runs never share a name (see `Barrier`).
    state_prefix: String,
    /// (when, records in) at the last rate sample.
    last_in: (Instant, u64),
}

impl<'a, 'f> AttemptLoop<'a, 'f> {
    pub(super) fn new(
        cfg: AttemptConfig<'a>,
        attempt: Attempt,
        queued: &'a mut Vec<ControlRequest>,
        next_id: &'a mut u64,
        commits: &'a mut Commits<'f>,
        restart_point: Option<Location>,
    ) -> Self {
        let state_prefix = format!("e{}-{:08x}/", commits.fence.epoch(), rand::random::<u32>());
        let last_in = (Instant::now(), cfg.shared.metrics.totals().0);
        Self {
            sources: attempt.commands.first().map(Vec::len).unwrap_or(0),
            cfg,
            attempt,
            queued,
            next_id,
            commits,
            latest: restart_point,
            exhausted: 0,
            finished: 0,
            pending: None,
            ending: false,
            ended_with: None,
            state_prefix,
            last_in,
        }
    }

    pub(super) async fn run(
        mut self,
        requests: &mut mpsc::UnboundedReceiver<ControlRequest>,
    ) -> AttemptEnd {
        let mut interval = tokio::time::interval(self.cfg.interval);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        interval.tick().await;
        let mut rate = tokio::time::interval(Duration::from_secs(1));
        loop {
            self.start_due();
            let deadline = self
                .pending
                .as_ref()
                .map(|p| p.deadline)
                .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(3600));
            let idle = self.pending.is_none() && !self.ending && self.queued.is_empty();
            let pending = self.pending.is_some();
            let joining = !self.attempt.tasks.is_empty();
            let end = tokio::select! {
                ev = self.attempt.events.recv() => self.on_task_event(ev).await,
                req = requests.recv() => self.on_request(req),
                _ = interval.tick(), if idle => {
                    self.on_interval();
                    None
                }
                _ = tokio::time::sleep_until(deadline), if pending => self.on_deadline(),
                _ = rate.tick() => {
                    self.on_rate();
                    None
                }
                j = self.attempt.tasks.join_next(), if joining => on_join(j, &self.latest),
            };
            if let Some(end) = end {
                return end;
            }
        }
    }

    fn next_checkpoint_id(&mut self) -> u64 {
        let id = *self.next_id;
        *self.next_id += 1;
        id
    }

    /// Injects a barrier at every source.
    fn trigger(
        &self,
        kind: BarrierKind,
        target: Location,
        request: Option<String>,
        id: u64,
    ) -> Pending {
        let barrier = Barrier {
            id,
            kind,
            target,
            state_prefix: self.state_prefix.clone(),
        };
        tracing::info!(checkpoint = id, kind = ?kind, "triggering");
        if let Some(srcs) = self.attempt.commands.first() {
            for c in srcs {
                let _ = c.send(TaskCommand::TriggerBarrier(barrier.clone()));
            }
        }
        Pending {
            barrier,
            started: Instant::now(),
            deadline: tokio::time::Instant::now() + self.cfg.timeout,
            acks: BTreeMap::new(),
            request,
            standby: false,
            stop_checkpoint: false,
        }
    }

    /// A checkpoint into `chk-<id>` of the checkpoint directory.
    fn trigger_checkpoint(&mut self, last: bool) -> Pending {
        let id = self.next_checkpoint_id();
        let target = self.cfg.ckpt_dir.child(&format!("chk-{id}"));
        self.trigger(BarrierKind::Checkpoint { last }, target, None, id)
    }

    /// Starts what is due when nothing is in flight: a queued stop or savepoint, else the final
    /// checkpoint once every source is exhausted.
    fn start_due(&mut self) {
        if self.pending.is_some() || self.ending {
            return;
        }
        let next = (!self.queued.is_empty()).then(|| self.queued.remove(0));
        match next {
            Some(ControlRequest::StopWithCheckpoint) => {
                self.cfg.shared.set_state(RunState::Stopping);
                let mut p = self.trigger_checkpoint(true);
                tracing::info!(
                    checkpoint = p.barrier.id,
                    "stopping with a final checkpoint (--resume restores it)"
                );
                p.stop_checkpoint = true;
                self.pending = Some(p);
            }
            Some(ControlRequest::Savepoint {
                id: req,
                dir,
                stop,
                standby,
            }) => self.start_savepoint(req, dir, stop, standby),
            // bounded input read to its end: the final checkpoint
            _ if self.sources > 0 && self.exhausted == self.sources => {
                self.pending = Some(self.trigger_checkpoint(true));
            }
            _ => {}
        }
    }

    fn start_savepoint(&mut self, req: String, dir: Option<String>, stop: bool, standby: bool) {
        let graph = self.cfg.graph;
        let dir = dir.unwrap_or_else(|| graph.spec.savepoint_dir());
        let id = self.next_checkpoint_id();
        let name = format!(
            "savepoint-{id}-{}",
            chrono::Utc::now().format("%Y%m%dT%H%M%S")
        );
        match Location::parse(&dir, graph.spec.storage.as_ref()) {
            Ok(loc) => {
                if stop {
                    self.cfg.shared.set_state(RunState::Stopping);
                }
                let mut p = self.trigger(
                    BarrierKind::Savepoint { stop },
                    loc.child(&name),
                    Some(req),
                    id,
                );
                p.standby = stop && standby;
                self.pending = Some(p);
            }
            Err(e) => self.cfg.shared.finish_request(&req, Err(e.to_string())),
        }
    }

    async fn on_task_event(&mut self, ev: Option<TaskEvent>) -> Option<AttemptEnd> {
        let Some(ev) = ev else {
            return Some(Err((
                Error::Cancelled("all subtasks are gone".into()),
                self.latest.clone(),
            )));
        };
        match ev {
            TaskEvent::Failed { error, .. } => {
                if let Some(r) = self.pending.take().and_then(|p| p.request) {
                    self.cfg
                        .shared
                        .finish_request(&r, Err(format!("job failed: {error}")));
                }
                Some(Err((Error::Other(error), self.latest.clone())))
            }
            TaskEvent::SourceExhausted { .. } => {
                self.exhausted += 1;
                None
            }
            TaskEvent::Finished { .. } => {
                self.finished += 1;
                if self.finished < self.attempt.subtasks {
                    return None;
                }
                Some(match self.ended_with.take() {
                    Some(o) => Ok((o, self.latest.clone())),
                    None => Err((
                        Error::Other("subtasks ended unexpectedly".into()),
                        self.latest.clone(),
                    )),
                })
            }
            TaskEvent::Ack {
                checkpoint_id,
                step,
                subtask,
                file,
            } => {
                let p = self.pending.as_mut()?;
                if p.barrier.id != checkpoint_id {
                    return None;
                }
                p.acks.insert((step, subtask), file);
                if p.acks.len() < self.attempt.subtasks {
                    return None;
                }
                let p = self.pending.take()?;
                self.on_all_acked(p).await
            }
        }
    }

    /// Every subtask acked `p`: complete it, then tell the subtasks (their sinks commit).
    async fn on_all_acked(&mut self, p: Pending) -> Option<AttemptEnd> {
        let span = tracing::info_span!("checkpoint", id = p.barrier.id);
        let AttemptConfig {
            graph,
            shared,
            ckpt_dir,
            retained,
            lineage,
            ..
        } = self.cfg;
        let done = complete(
            graph,
            &p,
            shared,
            (ckpt_dir, retained),
            lineage,
            self.commits,
        )
        .instrument(span)
        .await;
        match done {
            Ok(path) => {
                let notify = match p.barrier.kind {
                    BarrierKind::Checkpoint { .. } => {
                        self.latest = Some(p.barrier.target.clone());
                        true
                    }
                    BarrierKind::Savepoint { stop } => stop,
                };
                if p.barrier.ends_stream() {
                    self.ending = true;
                    self.ended_with = Some(match p.barrier.kind {
                        BarrierKind::Savepoint { .. } if p.standby => Outcome::StoppedToStandby {
                            savepoint: path.clone(),
                        },
                        BarrierKind::Savepoint { .. } => Outcome::Stopped {
                            savepoint: path.clone(),
                        },
                        BarrierKind::Checkpoint { .. } if p.stop_checkpoint => {
                            Outcome::Checkpointed {
                                checkpoint: path.clone(),
                            }
                        }
                        BarrierKind::Checkpoint { .. } => Outcome::Finished,
                    });
                }
                if notify {
                    for c in self.attempt.commands.iter().flatten() {
                        let _ = c.send(TaskCommand::NotifyComplete(p.barrier.id));
                    }
                }
                if let Some(r) = &p.request {
                    shared.finish_request(r, Ok(path));
                }
                None
            }
            Err(e) => {
                shared
                    .metrics
                    .checkpoints_failed
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(checkpoint = p.barrier.id, error = %e, "checkpoint failed");
                if let Some(r) = &p.request {
                    shared.finish_request(r, Err(e.to_string()));
                }
                // fenced: this attempt must not go on producing output
                let fenced = matches!(e, Error::Superseded { .. } | Error::LostCommit { .. });
                if fenced || p.barrier.ends_stream() {
                    return Some(Err((e, self.latest.clone())));
                }
                None
            }
        }
    }

    fn on_request(&mut self, req: Option<ControlRequest>) -> Option<AttemptEnd> {
        let shared = self.cfg.shared;
        match req? {
            ControlRequest::Start { reply, .. } => {
                let _ = reply.send(Err("the job is running, not in standby".into()));
            }
            ControlRequest::Savepoint { id, .. } if self.ending => {
                shared.finish_request(&id, Err("the job is ending".into()));
            }
            // the job ends anyway
            ControlRequest::StopWithCheckpoint if self.ending => {}
            ControlRequest::Cancel => {
                if let Some(r) = self.pending.take().and_then(|p| p.request) {
                    shared.finish_request(&r, Err("the job was cancelled".into()));
                }
                tracing::warn!("cancel requested: stopping without a checkpoint or any commit");
                return Some(Ok((Outcome::Cancelled, self.latest.clone())));
            }
            req => self.queued.push(req),
        }
        None
    }

    /// The checkpoint interval elapsed with nothing in flight.
    fn on_interval(&mut self) {
        self.pending = Some(self.trigger_checkpoint(false));
    }

    /// The pending checkpoint expired.
    fn on_deadline(&mut self) -> Option<AttemptEnd> {
        let p = self.pending.take()?;
        let shared = self.cfg.shared;
        shared
            .metrics
            .checkpoints_failed
            .fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            checkpoint = p.barrier.id,
            "checkpoint expired before completing"
        );
        if let Some(r) = &p.request {
            let timeout = self.cfg.timeout;
            shared.finish_request(r, Err(format!("savepoint timed out after {timeout:?}")));
        }
        if !p.barrier.ends_stream() {
            return None;
        }
        let e = Error::Other("stop/final checkpoint timed out".into());
        Some(Err((e, self.latest.clone())))
    }

    /// Samples the input rate for `/v1/status`.
    fn on_rate(&mut self) {
        let now = (Instant::now(), self.cfg.shared.metrics.totals().0);
        let secs = now.0.duration_since(self.last_in.0).as_secs_f64();
        if secs > 0.0 {
            let r = (now.1.saturating_sub(self.last_in.1)) as f64 / secs;
            self.cfg
                .shared
                .update(|s| s.records_in_per_second = (r * 10.0).round() / 10.0);
        }
        self.last_in = now;
    }
}

/// A subtask's task ended: a panic fails the attempt; a normal end is reported by its events.
fn on_join(
    joined: Option<std::result::Result<(), tokio::task::JoinError>>,
    latest: &Option<Location>,
) -> Option<AttemptEnd> {
    match joined {
        Some(Err(e)) if e.is_panic() => Some(Err((
            Error::Other(format!("a subtask panicked: {e}")),
            latest.clone(),
        ))),
        _ => None,
    }
}
