//! What one sink subtask checkpoints, and how it is spread over a new parallelism on restore.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::part::{Committable, Recoverable};

/// Version of [`SinkSubtaskState`]'s layout. 2: pending files may be staging objects
/// ([`Committable::Staged`]), which a sink of version 1 cannot commit.
pub const STATE_VERSION: u32 = 2;

/// Checkpointed state of one sink subtask (serde: JSON or any other format).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SinkSubtaskState {
    /// [`STATE_VERSION`] when written.
    pub version: u32,
    /// Subtask that wrote it.
    pub subtask_index: u32,
    /// Checkpoint it belongs to.
    pub checkpoint_id: u64,
    /// Next part counter of that subtask (all its part files have lower counters).
    pub next_counter: u64,
    /// In-progress part files to resume.
    pub in_progress: Vec<InProgressFile>,
    /// Pending part files to commit once a checkpoint at or after theirs completes.
    pub pending: Vec<PendingFile>,
    /// Buckets that received data and have no `_SUCCESS` marker yet (bucket → earliest time seen).
    #[serde(default)]
    pub open_buckets: BTreeMap<String, i64>,
}

/// An in-progress part file in a checkpoint.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct InProgressFile {
    /// Bucket id (`""`: the base path).
    pub bucket: String,
    /// Key of the finished file, relative to the store root.
    pub final_key: String,
    /// Part counter.
    pub counter: u64,
    /// Processing time the part was opened (epoch ms).
    pub created_at: i64,
    /// Processing time of the last write (epoch ms).
    pub last_write_at: i64,
    /// How to continue it.
    pub recoverable: Recoverable,
}

/// A pending part file in a checkpoint.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PendingFile {
    /// Checkpoint whose completion commits it.
    pub checkpoint_id: u64,
    /// Bucket id.
    pub bucket: String,
    /// Key of the finished file.
    pub final_key: String,
    /// How to commit it.
    pub committable: Committable,
}

/// The largest `next_counter` among states: pass it to every subtask's [`FileSink::initialize`]
/// (Flink keeps the max part counter in union state for the same reason).
pub fn max_next_counter(states: &[SinkSubtaskState]) -> u64 {
    states.iter().map(|s| s.next_counter).max().unwrap_or(0)
}

/// Distributes restored states over `parallelism` new subtasks: state of old subtask `i` goes to
/// new subtask `i % parallelism`. Every state must be handed to exactly one subtask.
pub fn redistribute(states: Vec<SinkSubtaskState>, parallelism: u32) -> Vec<Vec<SinkSubtaskState>> {
    let p = parallelism.max(1);
    let mut out = vec![Vec::new(); p as usize];
    for s in states {
        out[(s.subtask_index % p) as usize].push(s);
    }
    out
}
