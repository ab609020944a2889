//! Completing a checkpoint or savepoint: every subtask acked, the commit fenced, `_metadata`
//! written, the retained checkpoints trimmed.

use super::*;

pub(super) struct Pending {
    pub(super) barrier: Barrier,
    pub(super) started: Instant,
    pub(super) deadline: tokio::time::Instant,
    pub(super) acks: BTreeMap<(usize, usize), Option<(String, u64)>>,
    pub(super) request: Option<String>,
    /// A stop-with-savepoint that stands by afterwards.
    pub(super) standby: bool,
    /// A final checkpoint asked for by a stop (not the end of bounded input).
    pub(super) stop_checkpoint: bool,
}

pub(super) async fn complete(
    graph: &JobGraph,
    p: &Pending,
    shared: &Arc<Shared>,
    (ckpt_dir, retained): (&Location, usize),
    lineage: &[String],
    commits: &mut Commits<'_>,
) -> Result<String> {
    let fence = commits.fence;
    // checkpoints and stops with savepoint commit output; other savepoints do not
    let commit = match p.barrier.kind {
        BarrierKind::Checkpoint { .. } => true,
        BarrierKind::Savepoint { stop } => stop,
    };
    let seq = if commit {
        commits.base + 1
    } else {
        commits.base
    };
    // a run fenced off by a newer epoch stops here, before it writes anything that commits
    let listing = if commit {
        Some(fence.ensure_current().await?)
    } else {
        None
    };
    let meta = metadata_for(graph, &p.barrier, &p.acks, lineage, seq);
    // create-only: a run fenced off meanwhile may take a checkpoint of the same number, and
    // must neither replace nor (below) delete another run's metadata
    if !p
        .barrier
        .target
        .put_new(METADATA_FILE, meta.to_json()?)
        .await?
    {
        return Err(Error::Other(format!(
            "{} was completed by another run of this job",
            p.barrier.target.display()
        )));
    }
    if let Some(listing) = &listing {
        match fence
            .commit(listing, seq, p.barrier.target.display(), p.barrier.id)
            .await
        {
            Ok(()) => commits.base = seq,
            Err(e @ (Error::Superseded { .. } | Error::LostCommit { .. })) => {
                // never a completed snapshot: nobody may restore it and commit its output
                if let Err(d) = p.barrier.target.delete(METADATA_FILE).await {
                    tracing::warn!(error = %d, "cannot delete the metadata of a fenced checkpoint");
                }
                return Err(e);
            }
            // e.g. the store is down: the commit object may or may not exist; the metadata
            // stays so that either way the snapshot it names can be restored
            Err(e) => return Err(e),
        }
    }
    let duration = p.started.elapsed();
    let info = Snapshot {
        id: Some(p.barrier.id),
        path: p.barrier.target.display().to_string(),
        completed_at: Some(meta.created_at.clone()),
        duration_ms: Some(duration.as_millis() as u64),
    };
    shared.metrics.observe_checkpoint(duration.as_secs_f64());
    match p.barrier.kind {
        BarrierKind::Checkpoint { .. } => {
            shared
                .metrics
                .last_checkpoint_id
                .store(p.barrier.id, Ordering::Relaxed);
            shared.metrics.last_checkpoint_unix_seconds.store(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
                Ordering::Relaxed,
            );
            shared
                .metrics
                .checkpoints_completed
                .fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                checkpoint = p.barrier.id,
                path = %info.path,
                duration_ms = duration.as_millis() as u64,
                "checkpoint {} completed",
                p.barrier.id
            );
            shared.update(|s| s.latest_checkpoint = Some(info.clone()));
            // retention: keep the newest `retained` complete checkpoints; drop older leftovers
            let all = list_checkpoints(ckpt_dir).await?;
            let complete: Vec<u64> = all.iter().filter(|(_, c)| **c).map(|(id, _)| *id).collect();
            let keep_from = complete
                .len()
                .checked_sub(retained)
                .and_then(|i| complete.get(i))
                .copied()
                .unwrap_or(0);
            for (id, _) in all.iter().filter(|(id, _)| **id < keep_from) {
                ckpt_dir.delete_dir(&format!("chk-{id}")).await?;
            }
        }
        BarrierKind::Savepoint { .. } => {
            tracing::info!(checkpoint = p.barrier.id, path = %info.path, "savepoint {} completed", p.barrier.id);
            shared.update(|s| s.last_savepoint = Some(info.clone()));
        }
    }
    Ok(info.path)
}

fn metadata_for(
    graph: &JobGraph,
    barrier: &Barrier,
    acks: &BTreeMap<(usize, usize), Option<(String, u64)>>,
    lineage: &[String],
    commit_seq: u64,
) -> SnapshotMetadata {
    let operators = graph
        .steps
        .iter()
        .enumerate()
        .map(|(k, s)| OperatorMeta {
            uid: s.uid.clone(),
            kind: s.kind.clone(),
            parallelism: s.parallelism as u32,
            state: s.state.clone(),
            subtasks: acks
                .iter()
                .filter(|((step, _), f)| *step == k && f.is_some())
                .filter_map(|((_, j), f)| {
                    f.as_ref().map(|(file, bytes)| SubtaskMeta {
                        subtask: *j as u32,
                        file: file.clone(),
                        bytes: *bytes,
                    })
                })
                .collect(),
        })
        .collect();
    SnapshotMetadata {
        format_version: FORMAT_VERSION,
        kind: match barrier.kind {
            BarrierKind::Checkpoint { .. } => SnapshotKind::Checkpoint,
            BarrierKind::Savepoint { .. } => SnapshotKind::Savepoint,
        },
        checkpoint_id: barrier.id,
        job_name: graph.name.clone(),
        created_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        runtime_version: env!("CARGO_PKG_VERSION").to_string(),
        max_parallelism: graph.max_parallelism,
        parallelism: graph.spec.parallelism,
        operators,
        lineage: lineage.to_vec(),
        commit_seq: Some(commit_seq),
    }
}
