//! One session: a run of the job graph from its restore point, with restarts from its own
//! latest checkpoint, inside the fencing sequence.

use super::*;

/// Loads and checks the snapshot a run starts from.
pub async fn resolve_restore(
    graph: &JobGraph,
    restore: &RestoreFrom,
) -> Result<Option<(LoadedSnapshot, Location)>> {
    let storage = graph.spec.storage.as_ref();
    let loc = match restore {
        RestoreFrom::Empty => return Ok(None),
        RestoreFrom::Path(p) => Location::parse(p, storage)?,
        RestoreFrom::LatestCheckpoint => {
            let dir = Location::parse(&graph.spec.checkpoints.dir, storage)?;
            match latest_checkpoint(&dir).await? {
                Some((_, loc)) => loc,
                None => {
                    tracing::info!(dir = %dir.display(), "no completed checkpoint to resume from: starting empty");
                    return Ok(None);
                }
            }
        }
        RestoreFrom::ResumeAfter(p) => {
            let sp_loc = Location::parse(p, storage)?;
            let sp = SnapshotMetadata::read(&sp_loc).await?;
            let dir = Location::parse(&graph.spec.checkpoints.dir, storage)?;
            let mut checkpoints = Vec::new();
            for (id, complete) in list_checkpoints(&dir).await? {
                if !complete {
                    continue;
                }
                let loc = dir.child(&format!("chk-{id}"));
                match SnapshotMetadata::read(&loc).await {
                    Ok(m) => checkpoints.push((id, m)),
                    // an unreadable checkpoint cannot be proven to be ours: never restore it
                    Err(e) => {
                        tracing::warn!(checkpoint = %loc.display(), error = %e, "ignoring an unreadable checkpoint")
                    }
                }
            }
            match choose_resume(&sp, &checkpoints) {
                ResumeChoice::Checkpoint { id, reason } => {
                    let loc = dir.child(&format!("chk-{id}"));
                    tracing::info!(chosen = %loc.display(), savepoint = %sp_loc.display(), %reason, "resuming from a checkpoint taken after the savepoint");
                    loc
                }
                ResumeChoice::Savepoint { reason } => {
                    tracing::info!(chosen = %sp_loc.display(), %reason, "resuming from the savepoint");
                    sp_loc
                }
            }
        }
    };
    let snap = LoadedSnapshot::load(&loc).await?;
    let report = check_restore(
        &snap.metadata,
        loc.display(),
        &graph.graph_operators(),
        graph.max_parallelism,
        graph.spec.upgrade.allow_non_restored_state,
    );
    if !report.compatible {
        return Err(Error::Incompatible {
            path: loc.display().to_string(),
            reasons: report.refusals(),
        });
    }
    Ok(Some((snap, loc)))
}

/// A run's place in the fencing commit sequence: its next commit is `base + 1`.
pub(super) struct Commits<'a> {
    pub(super) fence: &'a Fence,
    pub(super) base: u64,
}

/// How a session runs: fencing, restarts, where its subtasks run.
pub(super) struct SessionSettings<'a> {
    pub(super) fencing: Fencing,
    pub(super) max_restarts: u32,
    pub(super) workers: Option<&'a Arc<crate::cluster::workers::Workers>>,
}

/// A run's fencing settings (see [`RunOptions`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Fencing {
    pub(super) epoch: Option<u64>,
    pub(super) resume_own: bool,
}

/// What a run restores, decided with the fencing directory: its own latest commit when a
/// container restarted in place, the newest commit for "latest", else `restore`; then checked
/// against commits made after that state ([`check_start`]).
pub(super) async fn restore_point(
    graph: &JobGraph,
    restore: &RestoreFrom,
    fencing: Fencing,
    fence: &Fence,
    tip_at_start: Option<u64>,
) -> Result<(Option<(LoadedSnapshot, Location)>, u64)> {
    let own = if fencing.resume_own {
        fence.latest_of_own_epoch().await?
    } else {
        None
    };
    let restore = match (own, restore) {
        (Some(c), _) => {
            tracing::info!(path = %c.path, seq = c.seq, epoch = c.epoch, "resuming this run's own latest commit (the container restarted)");
            RestoreFrom::Path(c.path)
        }
        (None, RestoreFrom::LatestCheckpoint) => match fence.tip().await? {
            // the newest commit may be a stop with savepoint, newer than any checkpoint
            Some(c) if restorable(graph, &c.path).await => RestoreFrom::Path(c.path),
            _ => RestoreFrom::LatestCheckpoint,
        },
        (None, r) => r.clone(),
    };
    let resolved = resolve_restore(graph, &restore).await?;
    let state_seq = resolved.as_ref().and_then(|(s, _)| s.metadata.commit_seq);
    let tip = fence.listing().await?.tip();
    match check_start(state_seq, tip, tip_at_start) {
        StartCheck::Proceed { base } => Ok((resolved, base)),
        StartCheck::Refuse { reason } => Err(Error::Rewind {
            path: resolved
                .map(|(_, l)| l.display().to_string())
                .unwrap_or_default(),
            reason,
        }),
        StartCheck::Adopt { seq } => {
            let adopted = adopt(graph, fence, seq, resolved.as_ref().map(|(s, _)| s)).await?;
            Ok((Some(adopted), seq))
        }
    }
}

async fn restorable(graph: &JobGraph, path: &str) -> bool {
    match Location::parse(path, graph.spec.storage.as_ref()) {
        Ok(l) => l.exists(METADATA_FILE).await.unwrap_or(false),
        Err(_) => false,
    }
}

/// Continues from commit `seq`, made by another run from the same state as `from` (a zombie of
/// the run before this one), so that its output is neither lost nor written again. Refused when
/// that commit does not continue `from` or this job graph cannot restore it.
async fn adopt(
    graph: &JobGraph,
    fence: &Fence,
    seq: u64,
    from: Option<&LoadedSnapshot>,
) -> Result<(LoadedSnapshot, Location)> {
    let Some(commit) = fence.read(seq).await? else {
        return Err(Error::Other(format!(
            "fencing: commit {seq} vanished while this run adopted it"
        )));
    };
    let refuse = |reason: String| Error::Rewind {
        path: from.map(|s| s.path.clone()).unwrap_or_default(),
        reason,
    };
    let (snap, loc) = resolve_restore(graph, &RestoreFrom::Path(commit.path.clone()))
        .await
        .map_err(|e| {
            refuse(format!(
                "commit {seq} by epoch {} ({}) continued this state meanwhile and cannot be restored by this job: {e}",
                commit.epoch, commit.path
            ))
        })?
        .ok_or_else(|| refuse(format!("commit {seq} names no snapshot")))?;
    if let Some(from) = from
        && !snap.metadata.continues(&from.metadata)
    {
        return Err(refuse(format!(
            "commit {seq} by epoch {} ({}) does not continue this state",
            commit.epoch, commit.path
        )));
    }
    tracing::warn!(seq, epoch = commit.epoch, path = %commit.path, "another run committed this state's continuation first: continuing from its commit, so its output is neither lost nor written twice");
    Ok((snap, loc))
}

/// One run of the job graph from `restore`, with restarts from its own latest checkpoint.
pub(super) async fn run_session(
    graph: &JobGraph,
    restore: &RestoreFrom,
    settings: SessionSettings<'_>,
    shared: &Arc<Shared>,
    requests: &mut mpsc::UnboundedReceiver<ControlRequest>,
    next_id: &mut u64,
) -> Result<Outcome> {
    let spec = graph.spec.clone();
    let storage = spec.storage.as_ref();
    let ckpt_dir = Location::parse(&spec.checkpoints.dir, storage)?;
    let interval =
        streamjob_crds::units::parse_duration("checkpoints.interval", &spec.checkpoints.interval)?;
    let timeout =
        streamjob_crds::units::parse_duration("checkpoints.timeout", &spec.checkpoints.timeout)?;
    let retained = spec.checkpoints.retained.max(1) as usize;

    shared.set_state(RunState::Restoring);
    // a run from standby reports only its own progress (the operator promotes a new version at
    // its first checkpoint that is not the one it restored)
    shared.update(|s| {
        s.restored_from = None;
        s.latest_checkpoint = None;
        s.failure = None;
    });
    let (fence, tip_at_start) = Fence::open(&ckpt_dir, settings.fencing.epoch).await?;
    let SessionSettings {
        fencing,
        max_restarts,
        workers,
    } = settings;
    let (resolved, base) = restore_point(graph, restore, fencing, &fence, tip_at_start).await?;
    let mut commits = Commits {
        fence: &fence,
        base,
    };
    // checkpoints of this run record what their state descends from
    let mut lineage = resolved
        .as_ref()
        .map(|(s, _)| s.metadata.lineage_of_descendants())
        .unwrap_or_default();
    // where a failed attempt restarts from: the latest checkpoint completed by this run, else
    // the snapshot the run started from (never an older run's checkpoint)
    let mut restart_point: Option<Location> = resolved.as_ref().map(|(_, l)| l.clone());
    let mut snapshot = resolved.map(|(s, _)| s);
    shared.update(|s| {
        s.restored_from = Some(match &snapshot {
            Some(sn) => RestoredFrom {
                kind: match sn.metadata.kind {
                    SnapshotKind::Checkpoint => "checkpoint".into(),
                    SnapshotKind::Savepoint => "savepoint".into(),
                },
                path: Some(sn.path.clone()),
            },
            None => RestoredFrom {
                kind: "empty".into(),
                path: None,
            },
        })
    });
    let existing = list_checkpoints(&ckpt_dir).await?;
    *next_id = (*next_id).max(existing.keys().next_back().copied().unwrap_or(0) + 1);
    if let Some(s) = &snapshot {
        *next_id = (*next_id).max(s.metadata.checkpoint_id + 1);
        tracing::info!(path = %s.path, checkpoint = s.metadata.checkpoint_id, "restoring");
    }
    let metrics: Vec<Arc<OperatorMetrics>> = graph
        .steps
        .iter()
        .map(|s| Arc::new(OperatorMetrics::new(&s.uid)))
        .collect();
    if let Ok(mut m) = shared.metrics.operators.lock() {
        *m = metrics.clone();
    }
    let mut restarts = Restarts::new(RestartPolicy::exponential(max_restarts));
    let mut queued: Vec<ControlRequest> = Vec::new();
    // a restarted attempt's restart point, still to be read
    let mut reload: Option<Location> = None;
    loop {
        let started = std::time::Instant::now();
        let loaded = match reload.take() {
            Some(loc) => match LoadedSnapshot::load(&loc).await {
                Ok(s) => {
                    snapshot = Some(s);
                    Ok(())
                }
                Err(e) => {
                    reload = Some(loc);
                    Err(e)
                }
            },
            None => Ok(()),
        };
        let attempt = match (loaded, workers) {
            (Err(e), _) => Err(e),
            (Ok(()), None) => spawn_attempt(graph, snapshot.as_ref(), &metrics),
            (Ok(()), Some(w)) => w
                .deploy(graph, snapshot.as_ref().map(|s| s.path.as_str()), &metrics)
                .await
                .map(Attempt::from),
        };
        let result = match attempt {
            Ok(attempt) => {
                shared.set_state(RunState::Running);
                tracing::info!(subtasks = attempt.subtasks, "job running");
                let cfg = AttemptConfig {
                    graph,
                    shared,
                    ckpt_dir: &ckpt_dir,
                    interval,
                    timeout,
                    retained,
                    lineage: &lineage,
                };
                AttemptLoop::new(
                    cfg,
                    attempt,
                    &mut queued,
                    next_id,
                    &mut commits,
                    restart_point.clone(),
                )
                .run(requests)
                .await
            }
            // e.g. too few workers registered: counts as a failed attempt
            Err(e) => Err((e, None)),
        };
        if let (Some(w), Err(_)) = (workers, &result) {
            w.cancel_attempt();
        }
        match result {
            Ok((outcome, _)) => {
                shared.set_state(match outcome {
                    Outcome::StoppedToStandby { .. } => RunState::Standby,
                    Outcome::Cancelled => RunState::Cancelled,
                    _ => RunState::Finished,
                });
                return Ok(outcome);
            }
            Err((
                e @ (Error::Superseded { .. }
                | Error::Rewind { .. }
                | Error::NoConditionalWrites { .. }),
                _,
            )) => {
                shared.update(|s| s.failure = Some(e.to_string()));
                shared.set_state(RunState::Failed);
                return Err(e);
            }
            Err((e, latest)) => {
                shared.update(|s| s.failure = Some(e.to_string()));
                // a run a newer epoch superseded while this attempt ran (a paused zombie whose
                // files its successor cleaned up) stops here instead of restarting from
                // checkpoints its successor may have retired
                if let Err(fenced @ Error::Superseded { .. }) = fence.ensure_current().await {
                    tracing::warn!(error = %e, "attempt failed after the run was superseded");
                    shared.update(|s| s.failure = Some(fenced.to_string()));
                    shared.set_state(RunState::Failed);
                    return Err(fenced);
                }
                let decision = restarts.on_failure(started.elapsed(), rand::random::<f64>());
                let (delay, restart) = match decision {
                    // a process asked to shut down does not restart: the next one resumes
                    RestartDecision::Restart { delay, restart }
                        if !shared.shutdown.load(Ordering::SeqCst) =>
                    {
                        (delay, restart)
                    }
                    RestartDecision::Restart { restart, .. } => {
                        return Err(gave_up(shared, restart - 1, &e));
                    }
                    RestartDecision::GiveUp { restarts } => {
                        return Err(gave_up(shared, restarts, &e));
                    }
                };
                shared.metrics.restarts.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, ?decision, "job failed: restarting from the latest completed checkpoint");
                shared.set_state(RunState::Restarting);
                // requests that arrive while waiting go to the next attempt; a shutdown ends
                // the wait (and the run)
                let wake = tokio::time::Instant::now() + delay;
                loop {
                    tokio::select! {
                        () = tokio::time::sleep_until(wake) => break,
                        r = requests.recv() => match r {
                            Some(r) => queued.push(r),
                            None => break,
                        },
                    }
                    if shared.shutdown.load(Ordering::SeqCst) {
                        // the restarts before this one happened; this one will not
                        return Err(gave_up(shared, restart - 1, &e));
                    }
                }
                if latest.is_some() {
                    restart_point = latest;
                }
                if let Error::LostCommit { seq, .. } = e {
                    snapshot = match &restart_point {
                        Some(loc) => Some(LoadedSnapshot::load(loc).await?),
                        None => None,
                    };
                    // this attempt's output is uncommitted and goes; the winner's stays
                    match &snapshot {
                        // a run started empty (stateless) starts empty again after it
                        None => commits.base = seq,
                        Some(current) => {
                            let (snap, loc) = adopt(graph, &fence, seq, Some(current)).await?;
                            lineage = snap.metadata.lineage_of_descendants();
                            restart_point = Some(loc);
                            snapshot = Some(snap);
                            commits.base = seq;
                        }
                    }
                } else {
                    // read at the next attempt's start: a store that is still away fails that
                    // attempt (and restarts again with backoff), not the run
                    reload = restart_point.clone();
                    if reload.is_none() {
                        snapshot = None;
                    }
                }
            }
        }
    }
}

/// The run fails for good after `restarts` restarts in a row; `last` is the last failure.
pub(super) fn gave_up(shared: &Shared, restarts: u32, last: &Error) -> Error {
    shared.set_state(RunState::Failed);
    Error::TooManyRestarts {
        restarts,
        last: last.to_string(),
    }
}
