//! Fencing (DESIGN §8): of all the runs of a job — an old version rolled back, an upgrade
//! aborted, a pod cut off by a network partition or paused, and its successor — only one line of
//! state ever commits output, on any store and without locks.
//!
//! Under `<checkpoints.dir>/_fence/`:
//!
//! * `epoch-<E>` — written by every run at start. The operator hands each run a new, larger
//!   epoch (`--epoch`, recorded in `status.epoch` before the pod exists). A run that sees a
//!   larger epoch than its own is **superseded**: it stops without committing and without a final
//!   checkpoint (exit code 4).
//! * `commit-<N>` — one per commit point (a completed checkpoint, a stop with savepoint), created
//!   with create-only semantics (`If-None-Match: *` on S3, an exclusive create locally). A state
//!   that includes commit N (`commitSeq` in its `_metadata`) can only be continued by commit
//!   N + 1, and only one run can create it. Output files are committed only after their commit
//!   object exists.
//!
//! Why that is enough: the epoch check before each commit stops a zombie at its next commit; the
//! create-only commit object closes the window between that check and the write. A zombie that
//! passed the check just before its successor started and commits N + 1 first makes the
//! successor's own N + 1 fail ([`crate::error::Error::LostCommit`]): the successor discards its
//! uncommitted output and restarts from the zombie's checkpoint, which descends from the same
//! state, so nothing is lost or written twice. The zombie's next check sees the newer epoch.
//! A restore from a state that a later commit already continued (a rewind, or a rollback racing
//! a commit of the version rolled back) is refused before anything runs
//! ([`crate::error::Error::Rewind`]).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::storage::Location;

/// The fencing directory inside `checkpoints.dir`.
pub const FENCE_DIR: &str = "_fence";
/// Commit objects kept behind the newest (older ones can no longer be raced for: a restore from
/// a state that old is refused by [`check_start`] without them).
const KEEP_COMMITS: u64 = 64;
/// Epoch markers kept behind the newest.
const KEEP_EPOCHS: usize = 16;

/// `commit-<N>`: who made commit N and where its snapshot is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Commit {
    pub seq: u64,
    pub epoch: u64,
    /// The snapshot directory (checkpoint or savepoint), as the job's storage URLs write it.
    pub path: String,
    pub checkpoint_id: u64,
}

fn epoch_name(epoch: u64) -> String {
    format!("epoch-{epoch:020}")
}

fn commit_name(seq: u64) -> String {
    format!("commit-{seq:020}")
}

/// What the fencing directory holds, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// Epoch markers, ascending.
    pub epochs: Vec<u64>,
    /// Commit numbers, ascending.
    pub commits: Vec<u64>,
}

impl Listing {
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        let mut l = Listing::default();
        for n in names {
            let n = n.rsplit('/').next().unwrap_or(n);
            if let Some(e) = n.strip_prefix("epoch-").and_then(|s| s.parse().ok()) {
                l.epochs.push(e);
            } else if let Some(c) = n.strip_prefix("commit-").and_then(|s| s.parse().ok()) {
                l.commits.push(c);
            }
        }
        l.epochs.sort_unstable();
        l.commits.sort_unstable();
        l
    }

    pub fn newest_epoch(&self) -> Option<u64> {
        self.epochs.last().copied()
    }

    pub fn tip(&self) -> Option<u64> {
        self.commits.last().copied()
    }
}

/// What a run does about the state it was asked to restore.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartCheck {
    /// Restore it; the run's first commit is `base + 1`.
    Proceed { base: u64 },
    /// Commits after the state were made while this run was starting (a zombie of the run
    /// before): continue from the newest one instead, if it descends from the state.
    Adopt { seq: u64 },
    /// A commit made before this run started already continued the state.
    Refuse { reason: String },
}

/// Decides about the restored state. `state_seq`: the `commitSeq` of the restored snapshot
/// (`None` when starting empty or from a snapshot written before fencing: the run then simply
/// continues the numbering); `tip`: the newest commit now; `tip_at_start`: the newest commit
/// before this run wrote its epoch marker.
pub fn check_start(
    state_seq: Option<u64>,
    tip: Option<u64>,
    tip_at_start: Option<u64>,
) -> StartCheck {
    let tip_now = tip.unwrap_or(0);
    let Some(state) = state_seq else {
        return StartCheck::Proceed { base: tip_now };
    };
    if tip_now <= state {
        return StartCheck::Proceed { base: state };
    }
    let before = tip_at_start.unwrap_or(0);
    if before > state {
        StartCheck::Refuse {
            reason: format!(
                "its state includes commit {state}, but commit {before} already made later output \
                 visible, so a restore would write that output a second time; restore the latest \
                 checkpoint instead, or point checkpoints.dir at a new directory to reprocess on purpose"
            ),
        }
    } else {
        StartCheck::Adopt { seq: tip_now }
    }
}

/// One run's view of the fencing directory.
#[derive(Clone, Debug)]
pub struct Fence {
    dir: Location,
    epoch: u64,
}

impl Fence {
    /// Opens the fencing directory of `checkpoints` for a run of `epoch` (`None`: a local run
    /// without an operator; it fences nobody but still commits through create-only objects).
    /// Refuses to start a superseded run. Returns the fence and the newest commit before this
    /// run's marker was written.
    pub async fn open(checkpoints: &Location, epoch: Option<u64>) -> Result<(Self, Option<u64>)> {
        let fence = Fence {
            dir: checkpoints.child(FENCE_DIR),
            epoch: epoch.unwrap_or(0),
        };
        let before = fence.listing().await?;
        fence.refuse_if_superseded(&before)?;
        fence.probe_create_only().await?;
        if let Some(e) = epoch {
            let marker = serde_json::json!({
                "epoch": e,
                "startedAt": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                "host": std::env::var("POD_NAME").unwrap_or_default(),
            });
            fence.dir.put(&epoch_name(e), marker.to_string()).await?;
            tracing::info!(epoch = e, dir = %fence.dir.display(), "fencing: epoch marker written");
        }
        Ok((fence, before.tip()))
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Fencing holds only if a create-only write is refused where the object exists. Some
    /// S3-compatible stores ignore `If-None-Match: *` and overwrite: two runs could then both
    /// make commit N and both commit output, silently. Probed once per run in the fencing
    /// directory itself (two requests and a delete): the second create of a new object must be
    /// refused.
    async fn probe_create_only(&self) -> Result<()> {
        let name = format!("probe-{:020}-{:016x}", self.epoch, rand::random::<u64>());
        let mut first = self.dir.put_new(&name, "first").await?;
        if !first {
            // the client may have retried our own create after losing its answer (a 5xx after
            // the store acted): the name is new to this run, so its content tells
            first = self.dir.get_if_exists(&name).await?.as_deref() == Some(b"first".as_slice());
        }
        let second = self.dir.put_new(&name, "second").await;
        if let Err(e) = self.dir.delete(&name).await {
            tracing::debug!(%name, error = %e, "fencing: cannot delete the probe");
        }
        let what = match (first, second?) {
            (true, false) => return Ok(()),
            (true, true) => "a second create-only write of the same new object succeeded",
            (false, _) => "a create-only write of a new object was refused as if it existed",
        };
        Err(Error::NoConditionalWrites {
            dir: self.dir.display().to_string(),
            what: format!("{what} ({name})"),
        })
    }

    pub async fn listing(&self) -> Result<Listing> {
        let files = self.dir.list_files().await?;
        Ok(Listing::from_names(files.iter().map(|(n, _)| n.as_str())))
    }

    fn refuse_if_superseded(&self, l: &Listing) -> Result<()> {
        match l.newest_epoch() {
            Some(newer) if newer > self.epoch => Err(Error::Superseded {
                mine: self.epoch,
                newer,
                dir: self.dir.display().to_string(),
            }),
            _ => Ok(()),
        }
    }

    /// Commit `seq`, or `None` if there is none (or it was cleaned up).
    pub async fn read(&self, seq: u64) -> Result<Option<Commit>> {
        let name = commit_name(seq);
        match self.dir.get_if_exists(&name).await? {
            Some(b) => Ok(Some(serde_json::from_slice(&b).map_err(|e| {
                Error::Corrupt {
                    path: format!("{}/{name}", self.dir.display()),
                    message: e.to_string(),
                }
            })?)),
            None => Ok(None),
        }
    }

    /// The newest commit.
    pub async fn tip(&self) -> Result<Option<Commit>> {
        match self.listing().await?.tip() {
            Some(seq) => self.read(seq).await,
            None => Ok(None),
        }
    }

    /// The newest commit made by this run's epoch: where a container restarted in place resumes.
    pub async fn latest_of_own_epoch(&self) -> Result<Option<Commit>> {
        for seq in self.listing().await?.commits.iter().rev() {
            if let Some(c) = self.read(*seq).await?
                && c.epoch == self.epoch
            {
                return Ok(Some(c));
            }
        }
        Ok(None)
    }

    /// Fails with [`Error::Superseded`] when a newer epoch has started; else returns the listing
    /// for [`Fence::commit`]. Called before a snapshot that commits is written at all.
    pub async fn ensure_current(&self) -> Result<Listing> {
        let listing = self.listing().await?;
        self.refuse_if_superseded(&listing)?;
        Ok(listing)
    }

    /// Makes commit `seq` for the snapshot at `path` (`listing`: from [`Fence::ensure_current`]
    /// just before). Output may be committed after this returns `Ok`, never before.
    pub async fn commit(
        &self,
        listing: &Listing,
        seq: u64,
        path: &str,
        checkpoint_id: u64,
    ) -> Result<()> {
        let ours = Commit {
            seq,
            epoch: self.epoch,
            path: path.to_string(),
            checkpoint_id,
        };
        let bytes = serde_json::to_vec(&ours)?;
        if !self.dir.put_new(&commit_name(seq), bytes).await? {
            match self.read(seq).await? {
                // our own earlier attempt of this request (a retry after a lost response)
                Some(c) if c == ours => {}
                Some(c) if c.epoch > self.epoch => {
                    return Err(Error::Superseded {
                        mine: self.epoch,
                        newer: c.epoch,
                        dir: self.dir.display().to_string(),
                    });
                }
                Some(c) => {
                    return Err(Error::LostCommit {
                        seq,
                        epoch: c.epoch,
                        path: c.path,
                    });
                }
                None => {
                    return Err(Error::Other(format!(
                        "fencing: {}/{} exists but cannot be read",
                        self.dir.display(),
                        commit_name(seq)
                    )));
                }
            }
        }
        tracing::debug!(seq, epoch = self.epoch, %path, "fencing: commit made");
        self.clean_up(listing, seq).await;
        Ok(())
    }

    /// Deletes commits and epoch markers too old to matter (best effort).
    async fn clean_up(&self, l: &Listing, newest: u64) {
        let old_commits = l
            .commits
            .iter()
            .filter(|c| **c + KEEP_COMMITS < newest)
            .map(|c| commit_name(*c));
        let old_epochs = l
            .epochs
            .iter()
            .take(l.epochs.len().saturating_sub(KEEP_EPOCHS))
            .map(|e| epoch_name(*e));
        for name in old_commits.chain(old_epochs) {
            if let Err(e) = self.dir.delete(&name).await {
                tracing::debug!(%name, error = %e, "fencing: cannot clean up");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;

    use super::*;

    #[test]
    fn listing_reads_names_in_numeric_order() {
        let l = Listing::from_names([
            "commit-00000000000000000010",
            "epoch-00000000000000000002",
            "commit-00000000000000000009",
            "epoch-00000000000000000011",
            "stray",
        ]);
        assert_eq!(l.epochs, vec![2, 11]);
        assert_eq!(l.commits, vec![9, 10]);
        assert_eq!(l.tip(), Some(10));
    }

    #[test]
    fn a_restore_of_the_newest_state_proceeds() {
        assert_eq!(
            check_start(Some(7), Some(7), Some(7)),
            StartCheck::Proceed { base: 7 }
        );
        assert_eq!(
            check_start(None, Some(7), Some(7)),
            StartCheck::Proceed { base: 7 }
        );
        assert_eq!(
            check_start(None, None, None),
            StartCheck::Proceed { base: 0 }
        );
        assert_eq!(
            check_start(Some(3), None, None),
            StartCheck::Proceed { base: 3 }
        );
    }

    #[test]
    fn commits_made_while_starting_are_adopted_and_older_ones_refuse_the_restore() {
        // a zombie committed 8 and 9 after this run looked (tip 7 before its marker)
        assert_eq!(
            check_start(Some(7), Some(9), Some(7)),
            StartCheck::Adopt { seq: 9 }
        );
        // commit 9 existed before this run started: restoring 7 would write 8..9 again
        let StartCheck::Refuse { reason } = check_start(Some(7), Some(9), Some(9)) else {
            panic!("a rewind must be refused");
        };
        assert!(reason.contains("commit 9"), "{reason}");
    }

    /// How [`Twisted`] bends create-only writes.
    #[derive(Debug)]
    enum Twist {
        /// Overwrites where it should refuse (some S3-compatible stores ignore
        /// `If-None-Match: *`).
        IgnoresConditions,
        /// Creates, then answers "it existed": a client retrying its own create after the
        /// answer was lost (a 5xx after the store acted).
        LosesCreateAnswers,
    }

    #[derive(Debug)]
    struct Twisted(Arc<dyn streamjob_storage::store::Store>, Twist);

    #[async_trait::async_trait]
    impl streamjob_storage::store::Store for Twisted {
        fn describe(&self) -> String {
            self.0.describe()
        }
        fn supports_multipart(&self) -> bool {
            false
        }
        async fn put(&self, key: &str, data: Bytes) -> streamjob_storage::Result<()> {
            self.0.put(key, data).await
        }
        async fn put_new(&self, key: &str, data: Bytes) -> streamjob_storage::Result<bool> {
            match self.1 {
                Twist::IgnoresConditions => self.0.put(key, data).await.map(|()| true),
                Twist::LosesCreateAnswers => self.0.put_new(key, data).await.map(|_| false),
            }
        }
        async fn get(&self, key: &str) -> streamjob_storage::Result<Bytes> {
            self.0.get(key).await
        }
        async fn head(&self, key: &str) -> streamjob_storage::Result<Option<u64>> {
            self.0.head(key).await
        }
        async fn list(
            &self,
            prefix: &str,
        ) -> streamjob_storage::Result<Vec<streamjob_storage::store::ObjectInfo>> {
            self.0.list(prefix).await
        }
        async fn delete(&self, key: &str) -> streamjob_storage::Result<()> {
            self.0.delete(key).await
        }
    }

    /// Issue #38: fencing on a store that ignores conditional writes would silently not hold; a
    /// run refuses to start there, saying why, and leaves no probe behind.
    #[tokio::test]
    async fn a_store_ignoring_conditional_writes_is_refused_at_start() {
        let tmp = tempfile::tempdir().unwrap();
        let honest = Location::parse(tmp.path().to_str().unwrap(), None).unwrap();
        Fence::open(&honest, Some(1)).await.unwrap();
        let broken = Location::on_store(
            Arc::new(Twisted(honest.store(), Twist::IgnoresConditions)),
            "s3://lax/ck",
        );
        let e = Fence::open(&broken, Some(2)).await.unwrap_err();
        assert!(matches!(e, Error::NoConditionalWrites { .. }), "{e}");
        let msg = e.to_string();
        assert!(
            msg.starts_with("s3://lax/ck/_fence: a second create-only write")
                && msg.contains("If-None-Match"),
            "{msg}"
        );
        // nothing written by the refused run but what the honest one left: its epoch marker
        let names: Vec<String> = honest
            .child(FENCE_DIR)
            .list_files()
            .await
            .unwrap()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, [epoch_name(1)], "{names:?}");
    }

    /// Issue #38: a create whose answer was lost and retried finds its own object. Neither the
    /// probe nor a commit takes that for another run's write.
    #[tokio::test]
    async fn own_creates_retried_after_a_lost_answer_are_recognised() {
        let tmp = tempfile::tempdir().unwrap();
        let honest = Location::parse(tmp.path().to_str().unwrap(), None).unwrap();
        let lossy = Location::on_store(
            Arc::new(Twisted(honest.store(), Twist::LosesCreateAnswers)),
            "s3://lossy/ck",
        );
        let (fence, _) = Fence::open(&lossy, Some(1)).await.unwrap();
        let l = fence.ensure_current().await.unwrap();
        fence.commit(&l, 1, "chk-1", 1).await.unwrap();
        assert_eq!(fence.read(1).await.unwrap().unwrap().path, "chk-1");
        // and a real conflict is still one
        let (newer, _) = Fence::open(&lossy, Some(2)).await.unwrap();
        let e = newer.commit(&l, 1, "chk-9", 9).await.unwrap_err();
        assert_eq!(lost(&e), Some((1, 1)), "{e}");
    }

    /// (seq, epoch of the winner) of a lost commit.
    fn lost(e: &Error) -> Option<(u64, u64)> {
        match e {
            Error::LostCommit { seq, epoch, .. } => Some((*seq, *epoch)),
            _ => None,
        }
    }

    #[tokio::test]
    async fn only_one_run_makes_each_commit_and_a_newer_epoch_fences_the_older() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = Location::parse(tmp.path().to_str().unwrap(), None).unwrap();
        let (old, _) = Fence::open(&dir, Some(1)).await.unwrap();
        let l = old.ensure_current().await.unwrap();
        old.commit(&l, 1, "chk-1", 1).await.unwrap();
        // a retry of the same request is not a conflict
        old.commit(&l, 1, "chk-1", 1).await.unwrap();
        let (new, tip) = Fence::open(&dir, Some(2)).await.unwrap();
        assert_eq!(tip, Some(1));
        // the old run is stopped before it writes a snapshot that commits
        let e = old.ensure_current().await.unwrap_err();
        assert!(
            matches!(
                e,
                Error::Superseded {
                    mine: 1,
                    newer: 2,
                    ..
                }
            ),
            "{e}"
        );
        // ... and if it looked just before the new run started, its commit object tells
        old.commit(&l, 2, "chk-2", 2).await.unwrap();
        let e = new.commit(&l, 2, "chk-3", 3).await.unwrap_err();
        assert_eq!(lost(&e), Some((2, 1)), "{e}");
        let l = new.ensure_current().await.unwrap();
        new.commit(&l, 3, "chk-3", 3).await.unwrap();
        // a commit number is made once, whoever asks
        let (same, _) = Fence::open(&dir, Some(2)).await.unwrap();
        let e = same.commit(&l, 3, "chk-4", 4).await.unwrap_err();
        assert_eq!(lost(&e), Some((3, 2)), "{e}");
        assert_eq!(
            new.latest_of_own_epoch().await.unwrap().unwrap().path,
            "chk-3"
        );
        // an old run cannot even start again
        assert!(matches!(
            Fence::open(&dir, Some(1)).await.unwrap_err(),
            Error::Superseded { .. }
        ));
    }
}
