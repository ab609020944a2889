//! Part files: the in-progress → pending → finished state machine on a [`Store`].
//!
//! - **In progress**: being written. Multipart stores: a multipart upload at the final key (parts
//!   of at least [`MIN_PART_SIZE`] uploaded as they fill, the tail kept in memory and, at a
//!   checkpoint, in the state). Other stores: a hidden temporary file `.{name}.inprogress.{uuid}`
//!   next to the final name, fsynced at a checkpoint with its length recorded.
//! - **Pending**: closed ([`PartStream::close`]); everything is durable in the store (the tail
//!   uploaded as the last part / the temporary file synced) and described by a [`Committable`].
//!   A part file smaller than one part on a multipart store is instead written whole as a hidden
//!   staging object ([`PartStream::close_staged`]) and committed by a server-side copy: a copy
//!   that is cut off leaves its source intact, while MinIO deletes an upload's part records
//!   before it moves them, so a CompleteMultipartUpload cut off by a crash can lose the file.
//! - **Finished**: [`commit`] completed the upload / renamed or copied the file; visible under its
//!   final name. Committing again is a no-op, checked by HEAD and size, never by error code.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::retry::retry;
use crate::store::{MIN_PART_SIZE, Store, TempFile};

/// How to continue an in-progress part file after a restore.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Recoverable {
    /// A temporary file and its length at the checkpoint (later bytes are truncated away).
    #[serde(rename_all = "camelCase")]
    TempFile { temp_key: String, len: u64 },
    /// A multipart upload (created once the first part was uploaded), the etags of its uploaded
    /// parts and the bytes not uploaded yet.
    #[serde(rename_all = "camelCase")]
    Multipart {
        upload_id: Option<String>,
        etags: Vec<String>,
        uploaded: u64,
        #[serde(with = "b64")]
        tail: Vec<u8>,
    },
}

impl Recoverable {
    /// Bytes of the part file at the checkpoint.
    pub fn len(&self) -> u64 {
        match self {
            Recoverable::TempFile { len, .. } => *len,
            Recoverable::Multipart { uploaded, tail, .. } => uploaded + tail.len() as u64,
        }
    }
    /// True for an empty part.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// What its marker records: the upload id (once created), or the temporary key.
    pub fn id(&self) -> Option<&str> {
        match self {
            Recoverable::TempFile { temp_key, .. } => Some(temp_key),
            Recoverable::Multipart { upload_id, .. } => upload_id.as_deref(),
        }
    }
}

/// A pending part file: what completes it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Committable {
    /// Rename the temporary file to the final key.
    #[serde(rename_all = "camelCase")]
    Rename { temp_key: String, size: u64 },
    /// Complete the multipart upload with these parts.
    #[serde(rename_all = "camelCase")]
    Multipart {
        upload_id: String,
        etags: Vec<String>,
        size: u64,
    },
    /// Copy the whole file from a hidden staging object to the final key, then delete it.
    #[serde(rename_all = "camelCase")]
    Staged { staging_key: String, size: u64 },
}

impl Committable {
    /// What its marker records: the upload id, or the temporary key.
    pub fn id(&self) -> &str {
        match self {
            Committable::Rename { temp_key, .. } => temp_key,
            Committable::Multipart { upload_id, .. } => upload_id,
            Committable::Staged { staging_key, .. } => staging_key,
        }
    }

    /// Size of the finished file.
    pub fn size(&self) -> u64 {
        match self {
            Committable::Rename { size, .. }
            | Committable::Multipart { size, .. }
            | Committable::Staged { size, .. } => *size,
        }
    }
}

mod b64 {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(v))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        STANDARD.decode(s).map_err(serde::de::Error::custom)
    }
}

/// The temporary key of a part file: hidden, next to the final key.
pub fn temp_key_for(final_key: &str) -> String {
    let (dir, name) = match final_key.rsplit_once('/') {
        Some((d, n)) => (format!("{d}/"), n),
        None => (String::new(), final_key),
    };
    format!("{dir}.{name}.inprogress.{}", uuid::Uuid::new_v4())
}

/// The bytes of an in-progress part file on its way to the store.
pub enum PartStream {
    /// Rename protocol.
    Temp {
        /// Open temporary file.
        file: Box<dyn TempFile>,
        /// Its key.
        temp_key: String,
        /// Bytes written.
        len: u64,
    },
    /// Multipart protocol.
    Multipart {
        /// Upload id once created.
        upload_id: Option<String>,
        /// Etags of uploaded parts.
        etags: Vec<String>,
        /// Bytes uploaded.
        uploaded: u64,
        /// Bytes not uploaded yet (below `part_size` between writes).
        buf: Vec<u8>,
        /// Upload a part once this many bytes are buffered (at least [`MIN_PART_SIZE`]).
        part_size: usize,
    },
}

impl std::fmt::Debug for PartStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PartStream::Temp { temp_key, len, .. } => f
                .debug_struct("Temp")
                .field("temp_key", temp_key)
                .field("len", len)
                .finish(),
            PartStream::Multipart {
                upload_id,
                etags,
                uploaded,
                buf,
                ..
            } => f
                .debug_struct("Multipart")
                .field("upload_id", upload_id)
                .field("parts", &etags.len())
                .field("uploaded", uploaded)
                .field("tail", &buf.len())
                .finish(),
        }
    }
}

impl PartStream {
    /// Starts a new in-progress part file that will be committed as `final_key`.
    pub async fn open(store: &dyn Store, final_key: &str, part_size: usize) -> Result<Self> {
        Self::open_at(store, part_size, temp_key_for(final_key)).await
    }

    /// [`PartStream::open`] with the temporary file's key chosen by the caller (who records it
    /// before the file exists); multipart stores ignore it.
    pub async fn open_at(store: &dyn Store, part_size: usize, temp_key: String) -> Result<Self> {
        if store.supports_multipart() {
            Ok(PartStream::Multipart {
                upload_id: None,
                etags: Vec::new(),
                uploaded: 0,
                buf: Vec::new(),
                part_size: part_size.max(MIN_PART_SIZE),
            })
        } else {
            let file = store.open_temp(&temp_key, None).await?;
            Ok(PartStream::Temp {
                file,
                temp_key,
                len: 0,
            })
        }
    }

    /// Continues an in-progress part file recorded in a checkpoint. `Ok(None)`: it was already
    /// committed (by an earlier recovery from the same checkpoint) and must not be written again.
    pub async fn resume(
        store: &dyn Store,
        final_key: &str,
        rec: &Recoverable,
        part_size: usize,
    ) -> Result<Option<Self>> {
        match rec {
            Recoverable::TempFile { temp_key, len } => {
                if store.head(temp_key).await?.is_none() {
                    return match store.head(final_key).await? {
                        Some(s) if s == *len => Ok(None),
                        other => Err(Error::DataLoss(format!(
                            "in-progress file {temp_key} is gone and {final_key} has size {other:?}, \
                             the checkpoint recorded {len} bytes"
                        ))),
                    };
                }
                let file = store.open_temp(temp_key, Some(*len)).await?;
                Ok(Some(PartStream::Temp {
                    file,
                    temp_key: temp_key.clone(),
                    len: *len,
                }))
            }
            Recoverable::Multipart {
                upload_id,
                etags,
                uploaded,
                tail,
            } => {
                if store.head(final_key).await? == Some(rec.len()) {
                    return Ok(None);
                }
                Ok(Some(PartStream::Multipart {
                    upload_id: upload_id.clone(),
                    etags: etags.clone(),
                    uploaded: *uploaded,
                    buf: tail.clone(),
                    part_size: part_size.max(MIN_PART_SIZE),
                }))
            }
        }
    }

    /// Bytes in the part file so far.
    pub fn len(&self) -> u64 {
        match self {
            PartStream::Temp { len, .. } => *len,
            PartStream::Multipart { uploaded, buf, .. } => uploaded + buf.len() as u64,
        }
    }

    /// True when nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether writing `extra` more bytes (or closing) would upload a part of an upload that does
    /// not exist yet: callers create it first with [`PartStream::ensure_upload`] to record it.
    pub fn needs_upload(&self, extra: usize, closing: bool) -> bool {
        match self {
            PartStream::Multipart {
                upload_id: None,
                buf,
                part_size,
                ..
            } => closing || buf.len() + extra >= *part_size,
            _ => false,
        }
    }

    /// Whether the part file, with `extra` more bytes, can be closed as one staging object
    /// ([`PartStream::close_staged`]): a multipart stream that has not started its upload and
    /// stays below one part.
    pub fn fits_one_object(&self, extra: usize) -> bool {
        match self {
            PartStream::Multipart {
                upload_id: None,
                etags,
                buf,
                part_size,
                ..
            } => etags.is_empty() && buf.len() + extra < *part_size,
            _ => false,
        }
    }

    /// Closes a part that [`PartStream::fits_one_object`]: writes it whole to `staging_key`
    /// (recorded by the caller first) and returns how to copy it to its final key.
    pub async fn close_staged(self, store: &dyn Store, staging_key: &str) -> Result<Committable> {
        match self {
            PartStream::Multipart {
                upload_id: None,
                buf,
                ..
            } => {
                let size = buf.len() as u64;
                let data = Bytes::from(buf);
                retry("put_staged", store.retry_policy(), || {
                    store.put(staging_key, data.clone())
                })
                .await?;
                Ok(Committable::Staged {
                    staging_key: staging_key.to_string(),
                    size,
                })
            }
            other => Err(Error::State(format!(
                "{staging_key}: only an unstarted multipart part can be staged, not {other:?}"
            ))),
        }
    }

    /// Creates the multipart upload if there is none yet; returns the id when it was created.
    pub async fn ensure_upload(
        &mut self,
        store: &dyn Store,
        final_key: &str,
    ) -> Result<Option<String>> {
        match self {
            PartStream::Multipart {
                upload_id: upload_id @ None,
                ..
            } => {
                let id = retry("create_multipart", store.retry_policy(), || {
                    store.create_multipart(final_key)
                })
                .await?;
                *upload_id = Some(id.clone());
                Ok(Some(id))
            }
            _ => Ok(None),
        }
    }

    /// The temporary file's key (rename stores).
    pub fn temp_key(&self) -> Option<&str> {
        match self {
            PartStream::Temp { temp_key, .. } => Some(temp_key),
            PartStream::Multipart { .. } => None,
        }
    }

    /// The multipart upload id, if one was created.
    pub fn upload_id(&self) -> Option<&str> {
        match self {
            PartStream::Multipart { upload_id, .. } => upload_id.as_deref(),
            PartStream::Temp { .. } => None,
        }
    }

    async fn upload_buffer(
        store: &dyn Store,
        final_key: &str,
        upload_id: &mut Option<String>,
        etags: &mut Vec<String>,
        uploaded: &mut u64,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        let id = match upload_id {
            Some(id) => id.clone(),
            None => {
                let id = retry("create_multipart", store.retry_policy(), || {
                    store.create_multipart(final_key)
                })
                .await?;
                *upload_id = Some(id.clone());
                id
            }
        };
        let data = Bytes::from(std::mem::take(buf));
        let idx = etags.len();
        let len = data.len() as u64;
        let etag = retry("put_part", store.retry_policy(), || {
            store.put_part(final_key, &id, idx, data.clone())
        })
        .await?;
        etags.push(etag);
        *uploaded += len;
        Ok(())
    }

    /// Appends bytes (uploading a part when enough are buffered).
    pub async fn write(&mut self, store: &dyn Store, final_key: &str, data: Vec<u8>) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        match self {
            PartStream::Temp { file, len, .. } => {
                file.write(&data).await?;
                *len += data.len() as u64;
                Ok(())
            }
            PartStream::Multipart {
                upload_id,
                etags,
                uploaded,
                buf,
                part_size,
            } => {
                if buf.is_empty() {
                    *buf = data;
                } else {
                    buf.extend_from_slice(&data);
                }
                if buf.len() >= *part_size {
                    Self::upload_buffer(store, final_key, upload_id, etags, uploaded, buf).await?;
                }
                Ok(())
            }
        }
    }

    /// Makes the part durable so that it can be resumed from the returned state.
    pub async fn persist(&mut self) -> Result<Recoverable> {
        match self {
            PartStream::Temp {
                file,
                temp_key,
                len,
            } => {
                file.sync().await?;
                Ok(Recoverable::TempFile {
                    temp_key: temp_key.clone(),
                    len: *len,
                })
            }
            PartStream::Multipart {
                upload_id,
                etags,
                uploaded,
                buf,
                ..
            } => Ok(Recoverable::Multipart {
                upload_id: upload_id.clone(),
                etags: etags.clone(),
                uploaded: *uploaded,
                tail: buf.clone(),
            }),
        }
    }

    /// Closes the part: in progress → pending.
    pub async fn close(self, store: &dyn Store, final_key: &str) -> Result<Committable> {
        match self {
            PartStream::Temp {
                mut file,
                temp_key,
                len,
            } => {
                file.close().await?;
                Ok(Committable::Rename {
                    temp_key,
                    size: len,
                })
            }
            PartStream::Multipart {
                mut upload_id,
                mut etags,
                mut uploaded,
                mut buf,
                ..
            } => {
                if !buf.is_empty() || etags.is_empty() {
                    Self::upload_buffer(
                        store,
                        final_key,
                        &mut upload_id,
                        &mut etags,
                        &mut uploaded,
                        &mut buf,
                    )
                    .await?;
                }
                let upload_id = upload_id
                    .ok_or_else(|| Error::State(format!("{final_key}: no upload after close")))?;
                Ok(Committable::Multipart {
                    upload_id,
                    etags,
                    size: uploaded,
                })
            }
        }
    }
}

/// Pending → finished. Idempotent: if the store says no (the rename or copy source is gone, the
/// upload is unknown — MinIO and AWS answer a second completion differently), the file counts as
/// committed exactly when `final_key` exists with the expected size.
pub async fn commit(store: &dyn Store, final_key: &str, c: &Committable) -> Result<()> {
    let size = c.size();
    retry("commit", store.retry_policy(), || async {
        let attempt = match c {
            Committable::Rename { temp_key, .. } => store.rename(temp_key, final_key).await,
            Committable::Multipart {
                upload_id, etags, ..
            } => store.complete_multipart(final_key, upload_id, etags).await,
            Committable::Staged { staging_key, .. } => store.copy(staging_key, final_key).await,
        };
        match attempt {
            Ok(()) => Ok(()),
            Err(e) => match store.head(final_key).await? {
                Some(s) if s == size => {
                    tracing::debug!(%final_key, "already committed");
                    Ok(())
                }
                Some(s) if !e.is_transient() => Err(Error::DataLoss(format!(
                    "committing {final_key} failed ({e}) and it has {s} bytes instead of {size}"
                ))),
                None if lost_upload(c, &e) => Err(Error::DataLoss(format!(
                    "committing {final_key} failed: the store no longer has the parts of upload \
                     {} ({e}); its {size} bytes cannot be recovered from the store. MinIO loses \
                     them when a CompleteMultipartUpload is cut off (a killed process); restore \
                     the job from a savepoint taken before this file was written",
                    c.id()
                ))),
                _ => Err(e.into()),
            },
        }
    })
    .await?;
    if let Committable::Staged { staging_key, .. } = c {
        // the copy is the commit; a staging object left here is removed by the orphan cleanup
        if let Err(e) = store.delete(staging_key).await {
            tracing::warn!(%staging_key, error = %e, "could not delete a committed staging object");
        }
    }
    Ok(())
}

/// Whether a failed completion says the upload or its parts are gone (S3 `InvalidPart` /
/// `NoSuchUpload`, Azure `InvalidBlockList`, a GCS part object not found), as opposed to a
/// refusal that a retry or another instance could change.
fn lost_upload(c: &Committable, e: &streamjob_storage::Error) -> bool {
    let text = format!("{e:?}");
    matches!(c, Committable::Multipart { .. })
        && (e.is_not_found()
            || text.contains("InvalidPart")
            || text.contains("NoSuchUpload")
            || text.contains("InvalidBlockList"))
}

/// Runs [`commit`] in its own task, so that a restart that drops the caller (a cancelled job
/// attempt) does not cut a completion off halfway; the caller still waits for the outcome.
pub async fn commit_detached(
    store: std::sync::Arc<dyn Store>,
    final_key: String,
    c: Committable,
) -> Result<()> {
    let span = tracing::Span::current();
    tokio::spawn(tracing::Instrument::instrument(
        async move { commit(store.as_ref(), &final_key, &c).await },
        span,
    ))
    .await
    .map_err(|e| Error::State(format!("commit task ended abnormally: {e}")))?
}

/// Drops a part that will never be committed (best effort; missing is fine).
pub async fn discard(store: &dyn Store, final_key: &str, c: &Committable) -> Result<()> {
    match c {
        Committable::Rename { temp_key, .. } => Ok(store.delete(temp_key).await?),
        Committable::Staged { staging_key, .. } => Ok(store.delete(staging_key).await?),
        Committable::Multipart { upload_id, .. } => {
            match store.abort_multipart(final_key, upload_id).await {
                Ok(()) => Ok(()),
                Err(e) if e.is_transient() => Err(e.into()),
                Err(_) => Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::store::LocalStore;

    #[tokio::test]
    async fn temp_file_state_machine_every_transition() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path());
        let fin = "b/part-0-0.json";
        // in-progress: invisible under the final name
        let mut s = PartStream::open(&store, fin, 0).await.unwrap();
        s.write(&store, fin, b"abc".to_vec()).await.unwrap();
        assert_eq!(store.head(fin).await.unwrap(), None);
        let rec = s.persist().await.unwrap();
        assert_eq!(rec.len(), 3);
        s.write(&store, fin, b"LOST".to_vec()).await.unwrap();
        drop(s); // crash: bytes after the checkpoint must disappear
        // in-progress (restored) → resume truncates
        let mut s = PartStream::resume(&store, fin, &rec, 0)
            .await
            .unwrap()
            .unwrap();
        s.write(&store, fin, b"def".to_vec()).await.unwrap();
        // in-progress → pending: still invisible
        let c = s.close(&store, fin).await.unwrap();
        assert_eq!(c.size(), 6);
        assert_eq!(store.head(fin).await.unwrap(), None);
        // pending → finished
        commit(&store, fin, &c).await.unwrap();
        assert_eq!(&store.get(fin).await.unwrap()[..], b"abcdef");
        // recommit: no-op, no error, no duplicate
        commit(&store, fin, &c).await.unwrap();
        assert_eq!(store.list("b").await.unwrap().len(), 1);
        // resuming a part that was committed meanwhile: nothing to resume
        let rec6 = Recoverable::TempFile {
            temp_key: match &c {
                Committable::Rename { temp_key, .. } => temp_key.clone(),
                _ => unreachable!(),
            },
            len: 6,
        };
        assert!(
            PartStream::resume(&store, fin, &rec6, 0)
                .await
                .unwrap()
                .is_none()
        );
        // a pending file whose data vanished is data loss, not success
        let bogus = Committable::Rename {
            temp_key: "b/.gone".into(),
            size: 1,
        };
        assert!(matches!(
            commit(&store, "b/other", &bogus).await,
            Err(Error::DataLoss(_)) | Err(Error::Storage(streamjob_storage::Error::Io { .. }))
        ));
        let bad = Recoverable::TempFile {
            temp_key: "b/.gone".into(),
            len: 3,
        };
        assert!(matches!(
            PartStream::resume(&store, "b/x", &bad, 0).await,
            Err(Error::DataLoss(_))
        ));
    }

    #[test]
    fn state_serialises_tail_compactly() {
        let r = Recoverable::Multipart {
            upload_id: Some("u".into()),
            etags: vec!["e1".into()],
            uploaded: 5,
            tail: vec![0, 1, 2, 255],
        };
        let j = serde_json::to_string(&r).unwrap();
        assert!(j.contains("\"tail\":\"AAEC/w==\""), "{j}");
        assert_eq!(serde_json::from_str::<Recoverable>(&j).unwrap(), r);
        assert!(temp_key_for("a/b/part-1-2.csv").starts_with("a/b/.part-1-2.csv.inprogress."));
        assert!(temp_key_for("p.csv").starts_with(".p.csv.inprogress."));
    }
}
