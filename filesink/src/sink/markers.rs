//! Markers: every multipart upload (object stores) or temporary part file (rename stores) is
//! recorded under the base path *before* it exists, so a later instance of the subtask finds
//! and removes what a crashed one left, without listing the output. Also the probe for uploads
//! a crash left before their marker was written.

use std::collections::{BTreeSet, HashMap};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::{FileSink, join_key};
use crate::error::{Error, Result};
use crate::store::Store;

/// Where multipart upload markers live, under the base path (hidden from Hive/Spark readers).
pub const UPLOAD_MARKERS: &str = ".streamjob/uploads";

/// Where temporary-file markers live on rename stores (local, HDFS): a sink instance records
/// each temporary part file it creates, so that a later instance deletes those of dead
/// instances (a crash-looping job would otherwise leave one per part per attempt) without
/// listing the output.
pub const TEMP_MARKERS: &str = ".streamjob/temp";

/// A marker of a temporary part file that some sink instance created.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TempMarker {
    /// Key of the temporary file.
    pub temp_key: String,
}

/// A marker of a multipart upload that some sink instance started (see [`FileSink`] docs).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct UploadMarker {
    /// Final key of the upload.
    pub key: String,
    /// Upload id.
    pub upload_id: String,
}

/// The markers of one sink instance.
pub(super) struct Markers {
    /// Names this instance's markers apart from those of earlier (dead) instances.
    pub(super) instance: String,
    pub(super) seq: u64,
    /// Upload id (temporary key on rename stores) → key of the marker this instance wrote.
    pub(super) by_id: HashMap<String, String>,
    /// Whether what dead instances left was cleaned up (once, after the first checkpoint).
    pub(super) orphans_checked: bool,
}

impl Markers {
    pub(super) fn new() -> Self {
        Self {
            instance: uuid::Uuid::new_v4().simple().to_string(),
            seq: 0,
            by_id: HashMap::new(),
            orphans_checked: false,
        }
    }
}

/// How many part counters past the restored floor the orphan cleanup asks for by exact key.
pub(super) const ORPHAN_PROBE: u64 = 8;

/// `(subtask, counter)` of a part file name `{prefix}-{subtask}-{counter}{suffix}`.
pub(super) fn parse_part_name(name: &str, prefix: &str, suffix: &str) -> Option<(u32, u64)> {
    let mid = name
        .strip_prefix(prefix)?
        .strip_prefix('-')?
        .strip_suffix(suffix)?;
    let (sub, counter) = mid.split_once('-')?;
    Some((sub.parse().ok()?, counter.parse().ok()?))
}

/// `(subtask, instance)` of a marker key `<dir>/<subtask>/<instance>-<seq>`. Anything else in
/// the folder — such as the hidden temporary file of a marker being written by a live (or
/// paused) instance, [`parse_marker_put`] — is not a marker.
pub(super) fn parse_marker_key<'a>(dir: &str, key: &'a str) -> Option<(u32, &'a str)> {
    let rest = key.strip_prefix(dir)?.strip_prefix('/')?;
    let (sub, name) = rest.split_once('/')?;
    Some((sub.parse().ok()?, marker_instance(name)?))
}

/// The instance of a marker name `<instance>-<seq>`.
pub(super) fn marker_instance(name: &str) -> Option<&str> {
    let (instance, seq) = name.rsplit_once('-')?;
    let valid = !instance.is_empty()
        && instance.chars().all(|c| c.is_ascii_alphanumeric())
        && seq.parse::<u64>().is_ok();
    valid.then_some(instance)
}

/// `(subtask, instance)` of the hidden temporary file of a marker being written on a rename
/// store, `<dir>/<subtask>/.<instance>-<seq>.put.<id>`: a whole-object write that a killed
/// instance left before its rename.
pub(super) fn parse_marker_put<'a>(dir: &str, key: &'a str) -> Option<(u32, &'a str)> {
    let rest = key.strip_prefix(dir)?.strip_prefix('/')?;
    let (sub, name) = rest.split_once('/')?;
    let (marker, _) = name.strip_prefix('.')?.split_once(".put.")?;
    Some((sub.parse().ok()?, marker_instance(marker)?))
}

/// What a marker records: the upload id, or the temporary key on rename stores.
pub(super) fn marker_id(body: &[u8]) -> Option<String> {
    if let Ok(m) = serde_json::from_slice::<UploadMarker>(body) {
        return Some(m.upload_id);
    }
    serde_json::from_slice::<TempMarker>(body)
        .ok()
        .map(|m| m.temp_key)
}

/// Deletes upload markers. In `initialize` a failure is fatal (the attempt is retried): a marker
/// of a dead instance left on an upload that this instance took over would let the orphan
/// cleanup abort a live upload.
pub(super) async fn drop_markers(store: &dyn Store, keys: Option<Vec<String>>) -> Result<()> {
    for k in keys.unwrap_or_default() {
        store.delete(&k).await?;
    }
    Ok(())
}

impl FileSink {
    /// On restore: aborts the open multipart uploads that dead instances of this subtask
    /// started after the restored checkpoint, found by listing the store (S3
    /// ListMultipartUploads), so also those no marker recorded (the creation answer was lost,
    /// or the instance died between creation and marker). Taken are part names
    /// `{partPrefix}-{i}-{counter}{partSuffix}` with `i` this subtask's index (subtask 0: also
    /// any `i` at or above the parallelism) and `counter` at or above the restored counter floor.
    /// No restored state references such a name (every part a checkpoint knows has a lower
    /// counter) and this instance has not created one yet (it starts at the floor, after this
    /// call), so they are orphans. Best effort: failures are logged, the restore goes on, and
    /// what is left stays for the bucket's lifecycle rule.
    ///
    /// S3 lists every upload under the base path at once; MinIO answers only for an exact key,
    /// so the names a dead instance would have used next (counters `floor..floor + 8` in the
    /// restored buckets, and the base path with the `basePath` assigner) are asked for as well.
    pub(super) async fn abort_unrecorded_orphans(&mut self, floor: u64, buckets: BTreeSet<String>) {
        let mut uploads = match self.store.list_multipart_uploads("").await {
            Ok(u) => u,
            Err(streamjob_storage::Error::Unsupported { .. }) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list open multipart uploads: orphans are left to the bucket lifecycle rule");
                return;
            }
        };
        'probe: for b in &buckets {
            for c in floor..floor.saturating_add(ORPHAN_PROBE) {
                let name = format!(
                    "{}-{}-{c}{}",
                    self.names.prefix, self.names.subtask_index, self.names.suffix
                );
                let key = join_key(b, &name);
                match self.store.list_multipart_uploads(&key).await {
                    Ok(found) => uploads.extend(found.into_iter().filter(|u| u.key == key)),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot list open multipart uploads");
                        break 'probe;
                    }
                }
            }
        }
        let mut seen = BTreeSet::new();
        uploads.retain(|u| seen.insert(u.upload_id.clone()));
        let mut aborted = 0;
        for u in uploads {
            let name = u.key.rsplit('/').next().unwrap_or(&u.key);
            let Some((sub, counter)) =
                parse_part_name(name, &self.names.prefix, &self.names.suffix)
            else {
                continue;
            };
            let owned = sub == self.names.subtask_index
                || (self.names.subtask_index == 0 && sub >= self.names.parallelism);
            let ours = self.markers.by_id.contains_key(&u.upload_id)
                || self
                    .parts
                    .values()
                    .any(|p| p.stream.upload_id() == Some(u.upload_id.as_str()));
            if !owned || counter < floor || ours {
                continue;
            }
            match self.store.abort_multipart(&u.key, &u.upload_id).await {
                Ok(()) => aborted += 1,
                Err(e) => {
                    tracing::warn!(key = %u.key, error = %e, "could not abort an orphaned upload")
                }
            }
        }
        if aborted > 0 {
            tracing::info!(
                aborted,
                "aborted orphaned multipart uploads found by listing"
            );
        }
        self.metrics.orphans_aborted += aborted;
    }

    pub(super) async fn register_upload(&mut self, final_key: &str, upload_id: &str) -> Result<()> {
        let body = serde_json::to_vec(&UploadMarker {
            key: final_key.to_string(),
            upload_id: upload_id.to_string(),
        })
        .map_err(|e| Error::State(format!("upload marker: {e}")))?;
        self.put_marker(upload_id, body).await
    }

    /// Records a temporary part file before it is created (rename stores).
    pub(super) async fn register_temp(&mut self, temp_key: &str) -> Result<()> {
        let body = serde_json::to_vec(&TempMarker {
            temp_key: temp_key.to_string(),
        })
        .map_err(|e| Error::State(format!("temp file marker: {e}")))?;
        self.put_marker(temp_key, body).await
    }

    pub(super) async fn put_marker(&mut self, id: &str, body: Vec<u8>) -> Result<()> {
        if self.markers.by_id.contains_key(id) {
            return Ok(());
        }
        self.markers.seq += 1;
        let key = format!(
            "{}/{}/{}-{}",
            self.marker_dir(),
            self.names.subtask_index,
            self.markers.instance,
            self.markers.seq
        );
        self.store.put(&key, Bytes::from(body)).await?;
        self.markers.by_id.insert(id.to_string(), key);
        Ok(())
    }

    /// Drops this instance's marker of a committed or discarded part. Best effort: a leftover
    /// marker of a finished part is harmless (the cleanup finds the upload or file gone).
    pub(super) async fn forget_marker(&mut self, id: &str) {
        if let Some(m) = self.markers.by_id.remove(id)
            && let Err(e) = self.store.delete(&m).await
        {
            tracing::warn!(key = %m, error = %e, "could not delete a part marker");
        }
    }

    pub(super) fn marker_dir(&self) -> &'static str {
        if self.store.supports_multipart() {
            UPLOAD_MARKERS
        } else {
            TEMP_MARKERS
        }
    }

    /// Cleans up what dead instances of this subtask index left (subtask 0 also takes indices
    /// at or above the parallelism): their multipart uploads are aborted, their temporary files
    /// deleted (rename stores). Runs once, after the first checkpoint of this instance
    /// completed: by then every subtask of the attempt has taken over what the restored state
    /// references (and dropped those markers), and no earlier instance is still running.
    pub(super) async fn clean_orphans(&mut self) -> Result<()> {
        let dir = self.marker_dir();
        let mine: BTreeSet<&str> = self
            .parts
            .values()
            .filter_map(|p| p.stream.upload_id().or_else(|| p.stream.temp_key()))
            .chain(self.markers.by_id.keys().map(String::as_str))
            .collect();
        let mut cleaned = 0;
        for o in self.store.list(dir).await? {
            // markers, and what a killed instance left of a marker it was writing (its body may
            // be torn; no earlier instance is running any more, see above)
            let Some((sub, instance)) =
                parse_marker_key(dir, &o.key).or_else(|| parse_marker_put(dir, &o.key))
            else {
                continue;
            };
            let owned = sub == self.names.subtask_index
                || (self.names.subtask_index == 0 && sub >= self.names.parallelism);
            if !owned || instance == self.markers.instance {
                continue;
            }
            let body = self.store.get(&o.key).await?;
            if let Ok(m) = serde_json::from_slice::<UploadMarker>(&body) {
                if mine.contains(m.upload_id.as_str()) {
                    continue;
                }
                match self.store.abort_multipart(&m.key, &m.upload_id).await {
                    Ok(()) => cleaned += 1,
                    Err(e) if e.is_transient() => return Err(e.into()),
                    Err(e) => tracing::debug!(key = %m.key, error = %e, "orphan already gone"),
                }
            } else if let Ok(m) = serde_json::from_slice::<TempMarker>(&body) {
                if mine.contains(m.temp_key.as_str()) {
                    continue;
                }
                // gone: renamed by the commit of a checkpoint (whose marker was not dropped)
                if self.store.head(&m.temp_key).await?.is_some() {
                    self.store.delete(&m.temp_key).await?;
                    cleaned += 1;
                }
            }
            self.store.delete(&o.key).await?;
        }
        if cleaned > 0 {
            tracing::info!(
                cleaned,
                "aborted orphaned uploads / deleted orphaned temporary files"
            );
        }
        self.metrics.orphans_aborted += cleaned;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_keys_parse_and_a_marker_being_written_is_not_one() {
        assert_eq!(
            parse_marker_key(TEMP_MARKERS, ".streamjob/temp/3/0a1b-12"),
            Some((3, "0a1b"))
        );
        // the hidden temporary file of a local `put` of a marker (found when a live or paused
        // instance is writing one): deleting it would fail that instance's write
        assert_eq!(
            parse_marker_key(
                TEMP_MARKERS,
                ".streamjob/temp/3/.0a1b-12.put.5f0e2b1c-77aa-4c2a-9d1e-0123456789ab"
            ),
            None
        );
        assert_eq!(
            parse_marker_key(UPLOAD_MARKERS, ".streamjob/temp/3/0a1b-12"),
            None
        );
        // ... which the cleanup recognises as such, with its instance (removed once no earlier
        // instance runs: a killed one leaves it behind)
        assert_eq!(
            parse_marker_put(
                TEMP_MARKERS,
                ".streamjob/temp/3/.0a1b-12.put.5f0e2b1c77aa4c2a9d1e0123456789ab"
            ),
            Some((3, "0a1b"))
        );
        assert_eq!(
            parse_marker_put(TEMP_MARKERS, ".streamjob/temp/3/0a1b-12"),
            None
        );
        assert_eq!(
            parse_marker_put(TEMP_MARKERS, ".streamjob/temp/3/.x.part-0-1.json.put.ab"),
            None
        );
        assert_eq!(
            parse_marker_key(UPLOAD_MARKERS, ".streamjob/uploads/0/0a1b-x"),
            None
        );
    }
}
