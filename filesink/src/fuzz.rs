//! Property tests and time-bounded fuzz targets of what the file sink reads from outside: its
//! checkpointed state, S3 listing answers (XML) and the bucket time zone of the manifest.
//!
//! `cargo test` runs a modest number of cases per target; with `STREAMJOB_FUZZ_SECONDS=N` (what
//! `cargo xtask fuzz` sets) each target runs batches of cases for N seconds. A failure prints
//! the shrunk input.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use proptest::sample::Index;

use crate::fuzz_loop::fuzz;

use crate::bucket::parse_timezone;
use crate::sink::{STATE_VERSION, SinkSubtaskState, max_next_counter, redistribute};
use streamjob_storage::s3_api::{parse_uploads, uri_encode};

// ---------------------------------------------------------------------------------------------
// The loop (the loop itself: fuzz_loop.rs, shared by every crate)
// ---------------------------------------------------------------------------------------------

fn mutate(mut bytes: Vec<u8>, edits: &[(Index, u8, u8)]) -> Vec<u8> {
    for (i, op, b) in edits {
        let n = bytes.len();
        match op % 4 {
            0 if n > 0 => bytes[i.index(n)] = *b,
            1 => bytes.insert(i.index(n + 1), *b),
            2 if n > 0 => {
                bytes.remove(i.index(n));
            }
            _ => bytes.truncate(i.index(n + 1)),
        }
    }
    bytes
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![3 => "[a-z0-9/_.=-]{0,16}", 1 => "\\PC{0,24}"]
}

/// Sink state: JSON round trip; mutated state reads or is refused, never a panic; a rescale
/// hands every old state to exactly one new subtask and the counter floor covers them all.
#[test]
fn fuzz_sink_state() {
    let state = (
        any::<u32>(),
        any::<u64>(),
        any::<u64>(),
        proptest::collection::btree_map(text(), any::<i64>(), 0..3),
    )
        .prop_map(
            |(subtask_index, checkpoint_id, next_counter, open_buckets)| SinkSubtaskState {
                version: STATE_VERSION,
                subtask_index,
                checkpoint_id,
                next_counter,
                in_progress: Vec::new(),
                pending: Vec::new(),
                open_buckets,
            },
        );
    let inputs = (
        proptest::collection::vec(state, 0..6),
        any::<u32>(),
        proptest::collection::vec((any::<Index>(), any::<u8>(), any::<u8>()), 1..4),
    );
    fuzz("sink_state", 256, inputs, |(states, parallelism, edits)| {
        for s in &states {
            let bytes = serde_json::to_vec(s).unwrap();
            prop_assert_eq!(
                &serde_json::from_slice::<SinkSubtaskState>(&bytes).unwrap(),
                s
            );
            let _ = serde_json::from_slice::<SinkSubtaskState>(&mutate(bytes, &edits));
        }
        let floor = max_next_counter(&states);
        prop_assert!(states.iter().all(|s| s.next_counter <= floor));
        let p = parallelism % 300;
        let dealt = redistribute(states.clone(), p);
        prop_assert_eq!(dealt.len(), p.max(1) as usize);
        let mut all: Vec<SinkSubtaskState> = dealt.into_iter().flatten().collect();
        let mut want = states;
        let key = |s: &SinkSubtaskState| (s.subtask_index, s.checkpoint_id, s.next_counter);
        all.sort_by_key(key);
        want.sort_by_key(key);
        prop_assert_eq!(all, want);
        Ok(())
    });
}

/// S3 `ListMultipartUploads` answers (`encoding-type=url`): every upload's key (any text, sent
/// URL-encoded as S3 does) and id read back as sent; any text (cut, garbage) reads or is refused,
/// never a panic.
#[test]
fn fuzz_s3_listing() {
    let uploads = proptest::collection::vec((text(), "[A-Za-z0-9._~-]{1,40}"), 0..5);
    let inputs = (uploads, "\\PC{0,80}", any::<Index>());
    fuzz("s3_listing", 512, inputs, |(uploads, garbage, cut)| {
        let mut body = String::from("<?xml version=\"1.0\"?><ListMultipartUploadsResult>");
        for (key, id) in &uploads {
            body.push_str(&format!(
                "<Upload><Key>{}</Key><UploadId>{id}</UploadId></Upload>",
                uri_encode(key, true)
            ));
        }
        body.push_str("<IsTruncated>false</IsTruncated></ListMultipartUploadsResult>");
        let (got, next) =
            parse_uploads(&body).map_err(proptest::test_runner::TestCaseError::fail)?;
        let got: Vec<(String, String)> = got.into_iter().map(|u| (u.key, u.upload_id)).collect();
        prop_assert_eq!(got, uploads);
        prop_assert_eq!(next, None);
        for text in [
            garbage.as_str(),
            &body[..body.floor_char_boundary(cut.index(body.len() + 1))],
        ] {
            let _ = parse_uploads(text);
        }
        Ok(())
    });
}

/// Bucket time zones: fixed offsets written as `+HH:MM` read back; any text reads or is refused,
/// never a panic.
#[test]
fn fuzz_timezone() {
    // the sink takes offsets up to ±18:59 (ISO 8601 allows ±18:00)
    let inputs = (-1139i32..=1139, "\\PC{0,10}", "[+-][0-9]{1,2}:?[0-9]{0,3}");
    fuzz("timezone", 1024, inputs, |(minutes, garbage, offset)| {
        let sign = if minutes < 0 { '-' } else { '+' };
        let tz = format!("{sign}{:02}:{:02}", minutes.abs() / 60, minutes.abs() % 60);
        let parsed = parse_timezone(&tz).map(|o| o.local_minus_utc());
        prop_assert_eq!(parsed.ok(), Some(minutes * 60), "{}", tz);
        let _ = parse_timezone(&garbage);
        let _ = parse_timezone(&offset);
        Ok(())
    });
}

/// What validation accepts (`streamjob_crds::validation::valid_timezone`) the sink can use.
#[test]
fn fuzz_timezone_validation_agrees() {
    fuzz(
        "timezone_validation_agrees",
        256,
        "[+-][0-9]{2}:[0-9]{2}",
        |tz| {
            if streamjob_crds::validation::valid_timezone(&tz) {
                let parsed = parse_timezone(&tz);
                prop_assert!(
                    parsed.is_ok(),
                    "validation accepts {:?}, the sink refuses it: {:?}",
                    tz,
                    parsed.err()
                );
            }
            Ok(())
        },
    );
}
