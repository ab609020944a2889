//! Checkpoint and savepoint storage format.
//!
//! A snapshot directory holds one state file per stateful subtask (`<uid>/subtask-<i>.state`)
//! and `_metadata` (JSON), which is written last: a directory without `_metadata` is an
//! incomplete snapshot and is never restored. All paths inside are relative, so a savepoint can be
//! copied or moved anywhere.
//!
//! # Format versions
//!
//! | formatVersion | runtime | notes                                  |
//! |---------------|---------|----------------------------------------|
//! | 1             | 0.1.x   | first version (golden files in tests/golden/v1) |
//!
//! Fields added within version 1 (optional, so older files still decode and older runtimes
//! ignore them): `commitSeq` — the fencing commit this state includes ([`crate::fence`]);
//! `lineage` — the identities ([`SnapshotMetadata::identity`]) of the snapshots the
//! job's state descends from, oldest first. `--from-savepoint P --resume` uses it to tell this
//! deployment's own checkpoints (taken after restoring P) from older ones in the same directory.
//!
//! State file layout (version 1, little endian): magic `SJS1`, `u32` number of list-state
//! entries, each `u32 len` + bytes, `u32` number of key groups, each `u32 key group`,
//! `u32 len` + bytes.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::operator::{RestoredState, StateDescriptor, SubtaskSnapshot};
use crate::storage::Location;

/// The current snapshot format version.
pub const FORMAT_VERSION: u32 = 1;
/// Name of the metadata file, written last.
pub const METADATA_FILE: &str = "_metadata";
const MAGIC: &[u8; 4] = b"SJS1";

/// Checkpoint or savepoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SnapshotKind {
    Checkpoint,
    Savepoint,
}

/// `_metadata`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotMetadata {
    pub format_version: u32,
    pub kind: SnapshotKind,
    pub checkpoint_id: u64,
    pub job_name: String,
    /// RFC 3339.
    pub created_at: String,
    pub runtime_version: String,
    pub max_parallelism: u32,
    pub parallelism: u32,
    /// The job graph in pipeline order.
    pub operators: Vec<OperatorMeta>,
    /// Identities of the snapshots this state descends from, oldest first (at most
    /// [`MAX_LINEAGE`]); empty for a job started without state and in files written before the
    /// field existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lineage: Vec<String>,
    /// The number of the last commit (see [`crate::fence`]) whose output this state includes:
    /// the commit this snapshot made itself for checkpoints and stops with savepoint, the one
    /// before it for other savepoints; absent in files written before fencing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_seq: Option<u64>,
}

/// Longest lineage kept: one entry per restore, so this is hundreds of restarts; only the newest
/// entries matter (the savepoint a deployment started from is recent).
pub const MAX_LINEAGE: usize = 256;

/// One operator in `_metadata`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperatorMeta {
    pub uid: String,
    /// Operator kind (`source`, `windowAggregate`, `custom:<name>`, ...).
    pub kind: String,
    pub parallelism: u32,
    /// State names and types, and the key type of keyed state.
    pub state: StateDescriptor,
    /// State files, one per subtask that had state.
    #[serde(default)]
    pub subtasks: Vec<SubtaskMeta>,
}

/// One subtask's state file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubtaskMeta {
    pub subtask: u32,
    /// Path relative to the snapshot directory.
    pub file: String,
    pub bytes: u64,
}

impl SnapshotMetadata {
    /// Reads `_metadata` of the snapshot directory `loc`.
    pub async fn read(loc: &Location) -> Result<Self> {
        let bytes = loc.get(METADATA_FILE).await?;
        Self::from_json(loc.display(), &bytes)
    }

    /// Parses `_metadata`, refusing unknown future versions.
    pub fn from_json(path: &str, bytes: &[u8]) -> Result<Self> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Version {
            format_version: u32,
        }
        let v: Version = serde_json::from_slice(bytes).map_err(|e| Error::Corrupt {
            path: path.to_string(),
            message: format!("_metadata is not a snapshot metadata file: {e}"),
        })?;
        if v.format_version == 0 || v.format_version > FORMAT_VERSION {
            return Err(Error::Corrupt {
                path: path.to_string(),
                message: format!(
                    "snapshot format version {} is not supported by this runtime (supports 1..={FORMAT_VERSION}); use a newer runtime",
                    v.format_version
                ),
            });
        }
        serde_json::from_slice(bytes).map_err(|e| Error::Corrupt {
            path: path.to_string(),
            message: format!("_metadata does not decode: {e}"),
        })
    }

    /// Serialised `_metadata`.
    pub fn to_json(&self) -> Result<Vec<u8>> {
        Ok(serde_json::to_vec_pretty(self)?)
    }

    /// The operator entry of `uid`.
    pub fn operator(&self, uid: &str) -> Option<&OperatorMeta> {
        self.operators.iter().find(|o| o.uid == uid)
    }

    /// A name for this snapshot that survives moving it (only fields of `_metadata`, no path) and
    /// that works for files written before lineage existed, like the golden savepoints.
    pub fn identity(&self) -> String {
        let kind = match self.kind {
            SnapshotKind::Checkpoint => "checkpoint",
            SnapshotKind::Savepoint => "savepoint",
        };
        format!(
            "{}/{kind}-{}/{}",
            self.job_name, self.checkpoint_id, self.created_at
        )
    }

    /// The lineage of snapshots taken by a job that restored this one.
    pub fn lineage_of_descendants(&self) -> Vec<String> {
        let mut l = self.lineage.clone();
        l.push(self.identity());
        if l.len() > MAX_LINEAGE {
            l.drain(..l.len() - MAX_LINEAGE);
        }
        l
    }

    /// Whether this snapshot's state continues `ancestor`'s: taken after restoring it, or later
    /// in the same run (same lineage, larger id).
    pub fn continues(&self, ancestor: &SnapshotMetadata) -> bool {
        self.identity() == ancestor.identity()
            || self.descends_from(ancestor)
            || (self.lineage == ancestor.lineage && self.checkpoint_id > ancestor.checkpoint_id)
    }

    /// Whether this snapshot was taken by a job whose state descends from `ancestor`.
    pub fn descends_from(&self, ancestor: &SnapshotMetadata) -> bool {
        let id = ancestor.identity();
        self.lineage.contains(&id)
    }
}

/// What `--from-savepoint P --resume` restores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResumeChoice {
    /// The checkpoint `chk-<id>` of the checkpoint directory.
    Checkpoint { id: u64, reason: String },
    /// The savepoint P itself.
    Savepoint { reason: String },
}

/// Picks what `--from-savepoint P --resume` restores: the newest complete checkpoint (of
/// `checkpoints`, `(id, _metadata)` per `chk-<id>`) taken by a job whose state descends from P —
/// this deployment's own progress since P — else P. A checkpoint that does not record P in its
/// lineage is never taken, whatever its id: it is an older run's (for example the previous
/// version's, which P's stop already committed), and restoring it would emit that output again.
pub fn choose_resume(
    savepoint: &SnapshotMetadata,
    checkpoints: &[(u64, SnapshotMetadata)],
) -> ResumeChoice {
    let mut ignored = 0usize;
    let mut best: Option<u64> = None;
    for (id, meta) in checkpoints {
        // a descendant's id is above P's: the coordinator numbers checkpoints after the restored
        // snapshot; anything else is not P's progress even if its lineage says so
        if meta.kind == SnapshotKind::Checkpoint
            && meta.descends_from(savepoint)
            && *id > savepoint.checkpoint_id
        {
            best = best.max(Some(*id));
        } else {
            ignored += 1;
        }
    }
    match best {
        Some(id) => ResumeChoice::Checkpoint {
            id,
            reason: format!(
                "chk-{id} is the latest checkpoint taken after restoring {} ({ignored} older or unrelated checkpoints ignored)",
                savepoint.identity()
            ),
        },
        None => ResumeChoice::Savepoint {
            reason: format!(
                "no checkpoint was taken after restoring {} ({ignored} older or unrelated checkpoints ignored)",
                savepoint.identity()
            ),
        },
    }
}

/// Encodes a subtask snapshot as a state file.
pub fn encode_subtask(s: &SubtaskSnapshot) -> Vec<u8> {
    let size: usize = 12
        + s.operator.iter().map(|e| e.len() + 4).sum::<usize>()
        + s.keyed.values().map(|e| e.len() + 8).sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(s.operator.len() as u32).to_le_bytes());
    for e in &s.operator {
        out.extend_from_slice(&(e.len() as u32).to_le_bytes());
        out.extend_from_slice(e);
    }
    out.extend_from_slice(&(s.keyed.len() as u32).to_le_bytes());
    for (kg, e) in &s.keyed {
        out.extend_from_slice(&kg.to_le_bytes());
        out.extend_from_slice(&(e.len() as u32).to_le_bytes());
        out.extend_from_slice(e);
    }
    out
}

/// Decodes a state file.
pub fn decode_subtask(path: &str, bytes: &[u8]) -> Result<SubtaskSnapshot> {
    let corrupt = |m: &str| Error::Corrupt {
        path: path.to_string(),
        message: m.to_string(),
    };
    let mut pos = 0usize;
    let mut take = |n: usize| -> Result<&[u8]> {
        let end = pos
            .checked_add(n)
            .filter(|e| *e <= bytes.len())
            .ok_or_else(|| corrupt("truncated state file"))?;
        let s = &bytes[pos..end];
        pos = end;
        Ok(s)
    };
    if take(4)? != MAGIC {
        return Err(corrupt("not a state file (bad magic)"));
    }
    let u32_of = |b: &[u8]| -> Result<u32> {
        Ok(u32::from_le_bytes(
            b.try_into().map_err(|_| corrupt("truncated"))?,
        ))
    };
    let mut snap = SubtaskSnapshot::default();
    let n = u32_of(take(4)?)?;
    for _ in 0..n {
        let len = u32_of(take(4)?)? as usize;
        snap.operator.push(take(len)?.to_vec());
    }
    let n = u32_of(take(4)?)?;
    for _ in 0..n {
        let kg = u32_of(take(4)?)?;
        let len = u32_of(take(4)?)? as usize;
        snap.keyed.insert(kg, take(len)?.to_vec());
    }
    Ok(snap)
}

/// A snapshot loaded for restoring: metadata plus every state file.
#[derive(Clone, Debug)]
pub struct LoadedSnapshot {
    /// Where it was read from.
    pub path: String,
    pub metadata: SnapshotMetadata,
    /// State per uid, per old subtask.
    pub state: HashMap<String, Vec<(u32, SubtaskSnapshot)>>,
}

impl LoadedSnapshot {
    /// Reads `_metadata` and all state files of the snapshot at `loc`.
    pub async fn load(loc: &Location) -> Result<Self> {
        let metadata = SnapshotMetadata::read(loc).await?;
        let mut state = HashMap::new();
        for op in &metadata.operators {
            let mut subtasks = Vec::new();
            for st in &op.subtasks {
                let bytes = loc.get(&st.file).await?;
                let path = format!("{}/{}", loc.display(), st.file);
                subtasks.push((st.subtask, decode_subtask(&path, &bytes)?));
            }
            state.insert(op.uid.clone(), subtasks);
        }
        Ok(Self {
            path: loc.display().to_string(),
            metadata,
            state,
        })
    }

    /// The state subtask `subtask` of `parallelism` of operator `uid` restores: the key groups in
    /// `key_groups`, its share of the list state, and the union of all list state.
    pub fn restored_for(
        &self,
        uid: &str,
        subtask: usize,
        parallelism: usize,
        key_groups: &std::ops::RangeInclusive<u32>,
    ) -> RestoredState {
        let mut r = RestoredState {
            checkpoint_id: Some(self.metadata.checkpoint_id),
            ..Default::default()
        };
        let Some(old) = self.state.get(uid) else {
            return r;
        };
        let old_parallelism = self
            .metadata
            .operator(uid)
            .map(|o| o.parallelism as usize)
            .unwrap_or(0);
        let mut all_list: Vec<(u32, &Vec<u8>)> = Vec::new();
        for (old_subtask, snap) in old {
            for (kg, bytes) in &snap.keyed {
                if key_groups.contains(kg) {
                    r.keyed.insert(*kg, bytes.clone());
                }
            }
            for e in &snap.operator {
                all_list.push((*old_subtask, e));
            }
        }
        all_list.sort_by_key(|(s, _)| *s);
        for (j, (old_subtask, e)) in all_list.iter().enumerate() {
            let mine = if old_parallelism == parallelism {
                *old_subtask as usize == subtask
            } else {
                j % parallelism.max(1) == subtask
            };
            if mine {
                r.operator.push((*e).clone());
            }
            r.union.push((*e).clone());
        }
        r
    }
}

/// Ids of the `chk-<id>` directories under a checkpoint directory, with whether each is complete.
pub async fn list_checkpoints(dir: &Location) -> Result<BTreeMap<u64, bool>> {
    let mut out = BTreeMap::new();
    for name in dir.list_dirs().await? {
        if let Some(id) = name
            .strip_prefix("chk-")
            .and_then(|s| s.parse::<u64>().ok())
        {
            let complete = dir.child(&name).exists(METADATA_FILE).await?;
            out.insert(id, complete);
        }
    }
    Ok(out)
}

/// The latest complete checkpoint under a checkpoint directory.
pub async fn latest_checkpoint(dir: &Location) -> Result<Option<(u64, Location)>> {
    let all = list_checkpoints(dir).await?;
    Ok(all
        .iter()
        .rev()
        .find(|(_, complete)| **complete)
        .map(|(id, _)| (*id, dir.child(&format!("chk-{id}")))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::StateField;

    pub(crate) fn sample_metadata() -> SnapshotMetadata {
        SnapshotMetadata {
            format_version: FORMAT_VERSION,
            kind: SnapshotKind::Savepoint,
            checkpoint_id: 7,
            job_name: "clicks".into(),
            created_at: "2026-01-01T00:00:00Z".into(),
            runtime_version: "0.1.0".into(),
            max_parallelism: 128,
            parallelism: 2,
            operators: vec![OperatorMeta {
                uid: "per-key".into(),
                kind: "windowAggregate".into(),
                parallelism: 2,
                state: StateDescriptor {
                    fields: vec![StateField {
                        name: "count".into(),
                        type_name: "Int64".into(),
                    }],
                    key_type: Some("Utf8".into()),
                },
                subtasks: vec![SubtaskMeta {
                    subtask: 0,
                    file: "per-key/subtask-0.state".into(),
                    bytes: 10,
                }],
            }],
            lineage: Vec::new(),
            commit_seq: None,
        }
    }

    #[tokio::test]
    async fn golden_v1_savepoint_loads_and_restores_into_its_job() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/v1");
        let loc = Location::parse(&format!("{dir}/savepoint"), None).unwrap();
        let snap = LoadedSnapshot::load(&loc).await.unwrap();
        assert_eq!(snap.metadata.format_version, 1);
        assert_eq!(snap.metadata.kind, SnapshotKind::Savepoint);
        let tmp = tempfile::tempdir().unwrap();
        let text = std::fs::read_to_string(format!("{dir}/job.yaml"))
            .unwrap()
            .replace("CHECKPOINTS", &tmp.path().join("ck").display().to_string())
            .replace("SAVEPOINTS", &tmp.path().join("sp").display().to_string());
        let job = streamjob_crds::v1alpha1::StreamJob::from_yaml(&text).unwrap();
        let graph = crate::graph::build_graph(&job, &crate::registry::Registry::with_builtins())
            .await
            .unwrap();
        let report = crate::restore::check_restore(
            &snap.metadata,
            "golden",
            &graph.graph_operators(),
            graph.max_parallelism,
            false,
        );
        assert!(report.compatible, "{}", report.to_text());
        // every key group of every stateful operator restores exactly once at a new parallelism
        for uid in ["gen", "per-key", "recent"] {
            let total: usize = snap.state[uid].iter().map(|(_, s)| s.keyed.len()).sum();
            assert!(total > 0, "{uid} has no state in the golden savepoint");
            let restored: usize = (0..3)
                .map(|i| {
                    let range = crate::keygroups::key_group_range(128, 3, i);
                    snap.restored_for(uid, i as usize, 3, &range).keyed.len()
                })
                .sum();
            assert_eq!(restored, total, "{uid}");
        }
    }

    #[test]
    fn metadata_round_trips_and_refuses_future_versions() {
        let m = sample_metadata();
        let json = m.to_json().unwrap();
        assert_eq!(SnapshotMetadata::from_json("x", &json).unwrap(), m);
        let text = String::from_utf8(json).unwrap();
        assert!(text.contains("\"formatVersion\": 1"));
        assert!(text.contains("\"maxParallelism\": 128"));
        let future = text.replace("\"formatVersion\": 1", "\"formatVersion\": 99");
        let err = SnapshotMetadata::from_json("x", future.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("version 99"), "{err}");
    }

    #[test]
    fn lineage_is_optional_and_round_trips() {
        let m = sample_metadata();
        let text = String::from_utf8(m.to_json().unwrap()).unwrap();
        assert!(!text.contains("lineage"), "empty lineage is not written");
        let mut child = sample_metadata();
        child.kind = SnapshotKind::Checkpoint;
        child.checkpoint_id = 8;
        child.lineage = m.lineage_of_descendants();
        assert!(child.descends_from(&m));
        assert!(!m.descends_from(&child));
        let back = SnapshotMetadata::from_json("x", &child.to_json().unwrap()).unwrap();
        assert_eq!(back, child);
        // the lineage stays bounded and keeps the newest entries
        let mut long = sample_metadata();
        long.lineage = (0..MAX_LINEAGE + 10).map(|i| format!("x{i}")).collect();
        let l = long.lineage_of_descendants();
        assert_eq!(l.len(), MAX_LINEAGE);
        assert_eq!(l.last().unwrap(), &long.identity());
    }

    fn checkpoint(id: u64, lineage: Vec<String>) -> (u64, SnapshotMetadata) {
        let mut m = sample_metadata();
        m.kind = SnapshotKind::Checkpoint;
        m.checkpoint_id = id;
        m.created_at = format!("2026-01-01T00:00:{:02}Z", id % 60);
        m.lineage = lineage;
        (id, m)
    }

    #[test]
    fn resume_after_a_savepoint_never_picks_an_older_runs_checkpoint() {
        // P: savepoint 7 taken by the previous version, which ran from savepoint S0
        let s0 = sample_metadata();
        let mut p = sample_metadata();
        p.lineage = s0.lineage_of_descendants();
        p.created_at = "2026-01-01T01:00:00Z".into();
        // the previous version's checkpoints, one with an id above P's (e.g. written after a
        // rollback), and nothing of ours yet: P itself
        let older = vec![
            checkpoint(5, s0.lineage_of_descendants()),
            checkpoint(6, s0.lineage_of_descendants()),
            checkpoint(40, s0.lineage_of_descendants()),
            checkpoint(41, Vec::new()),
        ];
        assert!(matches!(
            choose_resume(&p, &older),
            ResumeChoice::Savepoint { reason } if reason.contains("4 older or unrelated")
        ));
        // our own checkpoints after P, also one restored from our own checkpoint after a crash
        let (_, ours) = checkpoint(8, p.lineage_of_descendants());
        let mut all = older.clone();
        all.push((8, ours.clone()));
        all.push(checkpoint(9, ours.lineage_of_descendants()));
        assert_eq!(
            choose_resume(&p, &all),
            ResumeChoice::Checkpoint {
                id: 9,
                reason: format!(
                    "chk-9 is the latest checkpoint taken after restoring {} (4 older or unrelated checkpoints ignored)",
                    p.identity()
                )
            }
        );
        // a savepoint in the checkpoint directory or a descendant numbered below P is not taken
        let mut sp = checkpoint(50, p.lineage_of_descendants());
        sp.1.kind = SnapshotKind::Savepoint;
        let low = checkpoint(3, p.lineage_of_descendants());
        assert!(matches!(
            choose_resume(&p, &[sp, low]),
            ResumeChoice::Savepoint { .. }
        ));
        // P restored from a checkpoint directory entry: P's own entry is not its descendant
        let (_, p_as_chk) = checkpoint(7, Vec::new());
        assert!(matches!(
            choose_resume(&p_as_chk, &[(7, p_as_chk.clone())]),
            ResumeChoice::Savepoint { .. }
        ));
    }

    #[test]
    fn state_files_round_trip_and_detect_corruption() {
        let mut s = SubtaskSnapshot::default();
        s.operator.push(b"abc".to_vec());
        s.operator.push(Vec::new());
        s.keyed.insert(3, b"k3".to_vec());
        s.keyed.insert(100, vec![0; 1000]);
        let bytes = encode_subtask(&s);
        assert_eq!(decode_subtask("f", &bytes).unwrap(), s);
        assert!(decode_subtask("f", &bytes[..bytes.len() - 1]).is_err());
        assert!(decode_subtask("f", b"nope").is_err());
    }

    #[test]
    fn rescaling_redistributes_key_groups_and_list_state() {
        let mut a = SubtaskSnapshot::default();
        let mut b = SubtaskSnapshot::default();
        for kg in 0..64 {
            a.keyed.insert(kg, vec![kg as u8]);
        }
        for kg in 64..128 {
            b.keyed.insert(kg, vec![kg as u8]);
        }
        a.operator = vec![b"a0".to_vec(), b"a1".to_vec()];
        b.operator = vec![b"b0".to_vec()];
        let mut meta = sample_metadata();
        meta.operators[0].parallelism = 2;
        let loaded = LoadedSnapshot {
            path: "x".into(),
            metadata: meta,
            state: HashMap::from([("per-key".to_string(), vec![(0, a), (1, b)])]),
        };
        // same parallelism: own entries
        let r = loaded.restored_for(
            "per-key",
            1,
            2,
            &crate::keygroups::key_group_range(128, 2, 1),
        );
        assert_eq!(r.operator, vec![b"b0".to_vec()]);
        assert_eq!(r.keyed.len(), 64);
        assert_eq!(r.union.len(), 3);
        // rescale to 3: all key groups restored exactly once, list entries dealt round robin
        let mut seen = 0;
        let mut list = 0;
        for i in 0..3 {
            let range = crate::keygroups::key_group_range(128, 3, i);
            let r = loaded.restored_for("per-key", i as usize, 3, &range);
            assert!(r.keyed.keys().all(|kg| range.contains(kg)));
            seen += r.keyed.len();
            list += r.operator.len();
        }
        assert_eq!(seen, 128);
        assert_eq!(list, 3);
        // unknown uid: empty
        assert!(loaded.restored_for("other", 0, 1, &(0..=127)).is_empty());
    }
}
