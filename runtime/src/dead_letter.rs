//! Dead letters: the bad records the `deadLetter` policy keeps, as JSON lines under
//! `spec.deadLetterPath`.
//!
//! A record a source can place (a file and a byte offset, a Kafka partition and an offset) is
//! written exactly once: it goes to the object named by its place,
//! `<uid>/<stream>/<bucket>.jsonl`, and a write merges with what that object already holds,
//! keyed by offset. A replay after a restore reports the same records at the same places and adds
//! nothing. Only the subtask that owns a stream (file or partition) writes its objects.
//!
//! Records of other steps (a row an expression cannot evaluate) have no place in a source; they go
//! to one object per batch named by subtask and time, so they are kept at least once across
//! restores.

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::operator::BadRecord;
use crate::storage::Location;

/// Writes `bad`, reported by subtask `subtask` of step `uid`, to the dead-letter store.
pub async fn write(dl: &Location, uid: &str, subtask: usize, bad: &[BadRecord]) -> Result<()> {
    let mut placed: BTreeMap<String, Vec<&BadRecord>> = BTreeMap::new();
    let mut unplaced = Vec::new();
    for b in bad {
        match &b.origin {
            Some(o) => placed
                .entry(format!("{uid}/{}/{:020}.jsonl", o.stream, o.bucket))
                .or_default()
                .push(b),
            None => unplaced.push(b),
        }
    }
    for (name, records) in placed {
        let existing = dl.get_if_exists(&name).await?;
        if let Some(bytes) = merge(&name, existing.as_deref(), uid, subtask, &records)? {
            dl.put(&name, bytes).await?;
        }
    }
    if !unplaced.is_empty() {
        let mut text = String::new();
        for b in unplaced {
            text.push_str(&line(uid, subtask, b).to_string());
            text.push('\n');
        }
        let name = format!(
            "{uid}/subtask-{subtask}-{}.jsonl",
            chrono::Utc::now().format("%Y%m%dT%H%M%S%.6f")
        );
        dl.put(&name, text.into_bytes()).await?;
    }
    Ok(())
}

/// One dead letter: the whole record, why it was rejected and, for sources, where it was read.
fn line(uid: &str, subtask: usize, b: &BadRecord) -> serde_json::Value {
    let mut v = serde_json::json!({
        "uid": uid,
        "subtask": subtask,
        "record": b.record,
        "reason": b.reason,
        "time": chrono::Utc::now().to_rfc3339(),
    });
    if let Some(o) = &b.origin {
        v["stream"] = o.stream.clone().into();
        v["offset"] = o.offset.into();
    }
    v
}

/// The new content of object `name` (holding `existing`) with `records` added, or `None` when
/// every record is already there.
fn merge(
    name: &str,
    existing: Option<&[u8]>,
    uid: &str,
    subtask: usize,
    records: &[&BadRecord],
) -> Result<Option<Vec<u8>>> {
    let mut by_offset: BTreeMap<u64, String> = BTreeMap::new();
    for l in existing
        .unwrap_or_default()
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
    {
        let offset = serde_json::from_slice::<serde_json::Value>(l)
            .ok()
            .and_then(|v| v["offset"].as_u64())
            .ok_or_else(|| {
                Error::Other(format!(
                    "dead-letter object {name} holds a line that is not a dead letter of this job: {}",
                    crate::operator::excerpt(&String::from_utf8_lossy(l))
                ))
            })?;
        by_offset.insert(offset, String::from_utf8_lossy(l).into_owned());
    }
    let before = by_offset.len();
    for r in records {
        if let Some(o) = &r.origin {
            by_offset
                .entry(o.offset)
                .or_insert_with(|| line(uid, subtask, r).to_string());
        }
    }
    if by_offset.len() == before {
        return Ok(None);
    }
    let mut out = Vec::new();
    for l in by_offset.values() {
        out.extend_from_slice(l.as_bytes());
        out.push(b'\n');
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::operator::RecordOrigin;

    fn bad(offset: u64) -> BadRecord {
        BadRecord {
            record: format!("raw {offset}"),
            reason: format!("t/0@{offset}: not JSON"),
            origin: Some(RecordOrigin {
                stream: "t/0".into(),
                bucket: 0,
                offset,
            }),
        }
    }

    fn offsets(bytes: &[u8]) -> Vec<u64> {
        bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| {
                serde_json::from_slice::<serde_json::Value>(l).unwrap()["offset"]
                    .as_u64()
                    .unwrap()
            })
            .collect()
    }

    #[test]
    fn a_replay_adds_only_records_not_yet_written() {
        let (a, b, c) = (bad(3), bad(7), bad(9));
        let first = merge("o", None, "in", 0, &[&a, &b]).unwrap().unwrap();
        assert_eq!(offsets(&first), vec![3, 7]);
        // the same records again (a restore replays them): nothing to write
        assert_eq!(merge("o", Some(&first), "in", 1, &[&b, &a]).unwrap(), None);
        // grouped differently and with one new record: each offset once
        let second = merge("o", Some(&first), "in", 1, &[&b, &c])
            .unwrap()
            .unwrap();
        assert_eq!(offsets(&second), vec![3, 7, 9]);
    }

    #[test]
    fn an_object_that_is_not_ours_is_an_error_naming_it() {
        let e = merge("in/t/0/x.jsonl", Some(b"hello\n"), "in", 0, &[&bad(1)]).unwrap_err();
        assert!(e.to_string().contains("in/t/0/x.jsonl"), "{e}");
    }

    #[tokio::test]
    async fn placed_records_go_to_their_stream_and_the_rest_per_batch() {
        let dir = tempfile::tempdir().unwrap();
        let dl = Location::parse(dir.path().to_str().unwrap(), None).unwrap();
        let loose = BadRecord {
            record: "{}".into(),
            reason: "division by zero".into(),
            origin: None,
        };
        write(&dl, "in", 0, &[bad(1), bad(2), loose.clone()])
            .await
            .unwrap();
        write(&dl, "in", 0, &[bad(2), bad(1)]).await.unwrap();
        let placed = dl.get("in/t/0/00000000000000000000.jsonl").await.unwrap();
        assert_eq!(offsets(&placed), vec![1, 2]);
        let files = dl.list_files().await.unwrap();
        assert_eq!(files.len(), 2, "{files:?}");
    }
}
