//! Property tests and time-bounded fuzz targets of what the runtime reads from outside: network
//! frames and the data elements in them, snapshot metadata and state files, termination
//! messages and Kafka record values (file records: `operators/files/fuzz.rs`).
//!
//! `cargo test` runs a modest number of cases per target; with `STREAMJOB_FUZZ_SECONDS=N` (what
//! `cargo xtask fuzz` sets) each target runs batches of cases for N seconds. A failure prints
//! the shrunk input.
#![allow(clippy::unwrap_used)]

use std::fmt::Debug;
use std::sync::Arc;

use arrow::array::{Array, Int64Array, RecordBatch, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::TestCaseError;

use crate::fuzz_loop::fuzz;

use crate::cluster::wire::{
    ElementDecoder, ElementEncoder, Frame, ToWorker, read_first_json, read_frame, write_frame,
    write_json,
};
use crate::operator::{Collector, DataBatch, SubtaskSnapshot};
use crate::operators::kafka::{RawRecord, ValueDecoder, ValueFormat};
use crate::restore::{OperatorReport, OperatorStatus, PlanReport};
use crate::snapshot::{
    OperatorMeta, SnapshotKind, SnapshotMetadata, SubtaskMeta, decode_subtask, encode_subtask,
};
use crate::storage::Location;
use crate::task::{Barrier, BarrierKind, Element};

// ---------------------------------------------------------------------------------------------
// The loop and byte mutations (the loop itself: fuzz_loop.rs, shared by every crate)
// ---------------------------------------------------------------------------------------------

/// One edit of a byte string.
#[derive(Clone, Debug)]
pub(crate) enum Edit {
    Flip(Index, u8),
    Insert(Index, u8),
    Delete(Index),
    Truncate(Index),
    /// Copies a slice of the input elsewhere.
    Splice(Index, Index, u8),
    /// Overwrites a byte with one that matters to a grammar or a length field.
    Special(Index, u8),
}

pub(crate) fn edits() -> impl Strategy<Value = Vec<Edit>> {
    const SPECIAL: &[u8] = b"\"'{}[],:;\n\r\t \\0-.e\x00\x7f\x80\xff";
    let edit = prop_oneof![
        (any::<Index>(), 0u8..8).prop_map(|(i, b)| Edit::Flip(i, b)),
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Edit::Insert(i, b)),
        any::<Index>().prop_map(Edit::Delete),
        any::<Index>().prop_map(Edit::Truncate),
        (any::<Index>(), any::<Index>(), 1u8..64).prop_map(|(a, b, n)| Edit::Splice(a, b, n)),
        (any::<Index>(), proptest::sample::select(SPECIAL)).prop_map(|(i, b)| Edit::Special(i, b)),
    ];
    proptest::collection::vec(edit, 1..5)
}

pub(crate) fn apply(mut bytes: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        let n = bytes.len();
        match e {
            Edit::Flip(i, bit) if n > 0 => bytes[i.index(n)] ^= 1 << bit,
            Edit::Insert(i, b) => bytes.insert(i.index(n + 1), *b),
            Edit::Delete(i) if n > 0 => {
                bytes.remove(i.index(n));
            }
            Edit::Truncate(i) => bytes.truncate(i.index(n + 1)),
            Edit::Splice(from, to, len) if n > 0 => {
                let a = from.index(n);
                let piece = bytes[a..(a + usize::from(*len)).min(n)].to_vec();
                let at = to.index(n + 1);
                bytes.splice(at..at, piece);
            }
            Edit::Special(i, b) if n > 0 => bytes[i.index(n)] = *b,
            _ => {}
        }
    }
    bytes
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

/// Text that is sometimes plain, sometimes anything.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![3 => "[a-z0-9/_.:-]{0,16}", 1 => "\\PC{0,24}"]
}

// ---------------------------------------------------------------------------------------------
// Network frames
// ---------------------------------------------------------------------------------------------

/// Frames: what is written reads back the same; any byte stream (mutated frames, lengths at
/// their extremes) gives frames, an error or a clean end, never a panic; a first message larger
/// than the unauthenticated limit is refused.
#[test]
fn fuzz_frames() {
    let frames = proptest::collection::vec(
        (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..64)),
        0..5,
    );
    let inputs = (frames, any::<u64>(), edits(), any::<u32>());
    fuzz("frames", 256, inputs, |(frames, attempt, edits, len)| {
        block_on(async {
            let mut bytes = Vec::new();
            for (tag, payload) in &frames {
                write_frame(&mut bytes, *tag, payload).await.unwrap();
            }
            let mut r = bytes.as_slice();
            for (tag, payload) in &frames {
                let f = read_frame(&mut r).await.unwrap().unwrap();
                prop_assert_eq!(
                    &f,
                    &Frame {
                        tag: *tag,
                        payload: payload.clone()
                    }
                );
            }
            prop_assert!(read_frame(&mut r).await.unwrap().is_none());

            let mut hello = Vec::new();
            write_json(&mut hello, &ToWorker::Cancel { attempt })
                .await
                .unwrap();
            let got: Option<ToWorker> = read_first_json(&mut hello.as_slice()).await.unwrap();
            prop_assert_eq!(got, Some(ToWorker::Cancel { attempt }));

            // mutated streams, and one announcing `len` bytes
            let mut mutated = apply([bytes, hello].concat(), &edits);
            let mut r = mutated.as_slice();
            while let Ok(Some(_)) = read_frame(&mut r).await {}
            let mut r = mutated.as_slice();
            let _ = read_first_json::<_, ToWorker>(&mut r).await;
            mutated.splice(0..0, len.to_be_bytes());
            let first = read_first_json::<_, ToWorker>(&mut mutated.as_slice()).await;
            if len > crate::cluster::wire::MAX_UNAUTHENTICATED_FRAME {
                let e = first.unwrap_err().to_string();
                prop_assert!(e.contains("bad frame length"), "{}", e);
            }
            Ok(())
        })
    });
}

#[derive(Clone, Debug)]
enum El {
    Data(Vec<(u64, Option<String>, i64)>),
    Watermark(i64),
    Barrier(u64, u8),
    End,
    Idle,
}

fn element() -> impl Strategy<Value = El> {
    prop_oneof![
        3 => proptest::collection::vec(
            (any::<u64>(), proptest::option::of(text()), any::<i64>()),
            0..6
        )
        .prop_map(El::Data),
        1 => any::<i64>().prop_map(El::Watermark),
        1 => (any::<u64>(), 0u8..4).prop_map(|(id, k)| El::Barrier(id, k)),
        1 => Just(El::End),
        1 => Just(El::Idle),
    ]
}

fn to_element(e: &El, target: &Location) -> Element {
    match e {
        El::Data(rows) => {
            let schema = Arc::new(Schema::new(vec![
                Field::new("id", DataType::UInt64, false),
                Field::new("name", DataType::Utf8, true),
            ]));
            let records = RecordBatch::try_new(
                schema,
                vec![
                    Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.0))),
                    Arc::new(StringArray::from_iter(rows.iter().map(|r| r.1.clone()))),
                ],
            )
            .unwrap();
            let ts = Int64Array::from_iter_values(rows.iter().map(|r| r.2));
            Element::Data(DataBatch::new(records, ts).unwrap())
        }
        El::Watermark(w) => Element::Watermark(*w),
        El::Barrier(id, k) => Element::Barrier(Barrier {
            id: *id,
            kind: match k {
                0 => BarrierKind::Checkpoint { last: false },
                1 => BarrierKind::Checkpoint { last: true },
                2 => BarrierKind::Savepoint { stop: false },
                _ => BarrierKind::Savepoint { stop: true },
            },
            target: target.clone(),
            state_prefix: format!("e{id}-0/"),
        }),
        El::End => Element::End,
        El::Idle => Element::Idle,
    }
}

fn same(a: &Element, b: &Element) -> bool {
    match (a, b) {
        (Element::Data(x), Element::Data(y)) => {
            x.records == y.records && x.event_time == y.event_time
        }
        (Element::Watermark(x), Element::Watermark(y)) => x == y,
        (Element::Barrier(x), Element::Barrier(y)) => {
            x.id == y.id
                && x.kind == y.kind
                && x.state_prefix == y.state_prefix
                && x.target.display() == y.target.display()
        }
        (Element::End, Element::End) | (Element::Idle, Element::Idle) => true,
        _ => false,
    }
}

/// The data port: elements (record batches with event times, watermarks, barriers, ends) read
/// back the same in order; mutated frames decode to elements or errors, never a panic.
#[test]
fn fuzz_data_elements() {
    let dir = tempfile::tempdir().unwrap();
    let target = Location::parse(dir.path().to_str().unwrap(), None).unwrap();
    let inputs = (proptest::collection::vec(element(), 0..6), edits());
    fuzz("data_elements", 128, inputs, |(els, edits)| {
        let elements: Vec<Element> = els.iter().map(|e| to_element(e, &target)).collect();
        let mut enc = ElementEncoder::default();
        let mut bytes = Vec::new();
        for e in &elements {
            enc.encode(e, &mut bytes).unwrap();
        }
        let decode_all = |bytes: &[u8]| -> Vec<crate::Result<Option<Element>>> {
            block_on(async {
                let mut dec = ElementDecoder::new(None);
                let mut out = Vec::new();
                let mut r = bytes;
                while let Ok(Some(f)) = read_frame(&mut r).await {
                    out.push(dec.decode(f));
                }
                out
            })
        };
        let got: Vec<Element> = decode_all(&bytes)
            .into_iter()
            .filter_map(|r| r.unwrap())
            .collect();
        prop_assert_eq!(got.len(), elements.len());
        for (a, b) in elements.iter().zip(&got) {
            prop_assert!(same(a, b), "sent {:?}, got {:?}", a, b);
        }
        // corrupt control frames (watermarks, barriers, ends, unknown tags); Arrow IPC frames
        // (tags 2 and 3) are left out here: see fuzz_data_elements_corrupt_batches
        let _ = decode_all_but_ipc(&apply(bytes, &edits));
        Ok(())
    });
}

fn decode_all_but_ipc(bytes: &[u8]) -> Vec<crate::Result<Option<Element>>> {
    block_on(async {
        let mut dec = ElementDecoder::new(None);
        let mut out = Vec::new();
        let mut r = bytes;
        while let Ok(Some(f)) = read_frame(&mut r).await {
            if f.tag != 2 && f.tag != 3 {
                out.push(dec.decode(f));
            }
        }
        out
    })
}

/// Record batches whose Arrow IPC bytes were corrupted on the way: an error, never a panic.
#[test]
fn fuzz_data_elements_corrupt_batches() {
    let inputs = (proptest::collection::vec(element(), 1..4), edits());
    fuzz(
        "data_elements_corrupt_batches",
        128,
        inputs,
        |(els, edits)| {
            let dir = std::env::temp_dir();
            let target = Location::parse(dir.to_str().unwrap(), None).unwrap();
            let mut enc = ElementEncoder::default();
            let mut bytes = Vec::new();
            for e in &els {
                enc.encode(&to_element(e, &target), &mut bytes).unwrap();
            }
            let bytes = apply(bytes, &edits);
            block_on(async {
                let mut dec = ElementDecoder::new(None);
                let mut r = bytes.as_slice();
                while let Ok(Some(f)) = read_frame(&mut r).await {
                    let _ = dec.decode(f);
                }
            });
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------------
// Snapshot metadata and state files
// ---------------------------------------------------------------------------------------------

fn metadata() -> impl Strategy<Value = SnapshotMetadata> {
    let operator = (
        text(),
        text(),
        any::<u32>(),
        proptest::collection::vec((text(), text()), 0..3),
        proptest::option::of(text()),
        proptest::collection::vec((any::<u32>(), text(), any::<u64>()), 0..3),
    )
        .prop_map(|(uid, kind, parallelism, fields, key, subtasks)| {
            let mut state = crate::operator::StateDescriptor::stateless();
            for (n, t) in fields {
                state = state.field(&n, t);
            }
            state.key_type = key;
            OperatorMeta {
                uid,
                kind,
                parallelism,
                state,
                subtasks: subtasks
                    .into_iter()
                    .map(|(subtask, file, bytes)| SubtaskMeta {
                        subtask,
                        file,
                        bytes,
                    })
                    .collect(),
            }
        });
    (
        any::<bool>(),
        any::<u64>(),
        (text(), text(), text()),
        (any::<u32>(), any::<u32>()),
        proptest::collection::vec(operator, 0..4),
        proptest::collection::vec(text(), 0..3),
        proptest::option::of(any::<u64>()),
    )
        .prop_map(
            |(
                savepoint,
                checkpoint_id,
                (job_name, created_at, runtime_version),
                (mp, p),
                operators,
                lineage,
                commit_seq,
            )| {
                SnapshotMetadata {
                    format_version: crate::snapshot::FORMAT_VERSION,
                    kind: if savepoint {
                        SnapshotKind::Savepoint
                    } else {
                        SnapshotKind::Checkpoint
                    },
                    checkpoint_id,
                    job_name,
                    created_at,
                    runtime_version,
                    max_parallelism: mp,
                    parallelism: p,
                    operators,
                    lineage,
                    commit_seq,
                }
            },
        )
}

/// `_metadata`: written metadata reads back equal; mutated files (and versions at their
/// extremes) read or are refused naming the snapshot, never a panic.
#[test]
fn fuzz_snapshot_metadata() {
    let inputs = (metadata(), edits(), any::<u32>());
    fuzz("snapshot_metadata", 256, inputs, |(m, edits, version)| {
        let path = "s3://b/ck/chk-7";
        let bytes = m.to_json().unwrap();
        prop_assert_eq!(&SnapshotMetadata::from_json(path, &bytes).unwrap(), &m);
        let mut other = m.clone();
        other.format_version = version;
        let r = SnapshotMetadata::from_json(path, &other.to_json().unwrap());
        prop_assert_eq!(
            r.is_ok(),
            (1..=crate::snapshot::FORMAT_VERSION).contains(&version)
        );
        for bytes in [
            apply(bytes, &edits),
            apply(other.to_json().unwrap(), &edits),
        ] {
            if let Err(e) = SnapshotMetadata::from_json(path, &bytes) {
                prop_assert!(e.to_string().contains(path), "{}", e);
            }
        }
        // lineage stays bounded however long it was
        prop_assert!(m.lineage_of_descendants().len() <= crate::snapshot::MAX_LINEAGE);
        Ok(())
    });
}

/// State files: encode → decode is the identity; mutated and arbitrary files decode or are
/// refused naming the file, never a panic (lengths announce more than there is).
#[test]
fn fuzz_state_files() {
    let snapshot = (
        proptest::collection::btree_map(
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 0..32),
            0..4,
        ),
        proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..32), 0..4),
    )
        .prop_map(|(keyed, operator)| SubtaskSnapshot { keyed, operator });
    let inputs = (
        snapshot,
        edits(),
        proptest::collection::vec(any::<u8>(), 0..64),
    );
    fuzz("state_files", 512, inputs, |(s, edits, noise)| {
        let path = "s3://b/ck/chk-7/op-0";
        let bytes = encode_subtask(&s);
        prop_assert_eq!(&decode_subtask(path, &bytes).unwrap(), &s);
        let mut with_magic = b"SJS1".to_vec();
        with_magic.extend_from_slice(&noise);
        for bytes in [apply(bytes, &edits), noise, with_magic] {
            if let Err(e) = decode_subtask(path, &bytes) {
                prop_assert!(e.to_string().contains(path), "{}", e);
            }
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// Termination messages
// ---------------------------------------------------------------------------------------------

/// Termination messages: savepoint/checkpoint messages carry their path back; the plan report is
/// valid JSON of at most 4096 bytes, keeps the verdict, reads back equal when it fits, and
/// otherwise keeps every refusal unless it says how many rows it omitted.
#[test]
fn fuzz_termination_messages() {
    let status = prop_oneof![
        Just(OperatorStatus::Restored),
        Just(OperatorStatus::New),
        Just(OperatorStatus::Dropped),
        Just(OperatorStatus::Incompatible),
    ];
    let reason = prop_oneof![
        3 => text(),
        1 => (any::<char>(), 0usize..3000).prop_map(|(c, n)| c.to_string().repeat(n)),
    ];
    let report = (
        any::<bool>(),
        text(),
        proptest::collection::vec((text(), status, reason.clone()), 0..40),
        proptest::collection::vec(reason, 0..3),
    )
        .prop_map(|(compatible, path, ops, reasons)| PlanReport {
            compatible,
            path,
            operators: ops
                .into_iter()
                .map(|(uid, status, reason)| OperatorReport {
                    uid,
                    status,
                    reason,
                })
                .collect(),
            reasons,
            omitted: 0,
        });
    let inputs = (report, "\\PC{0,64}");
    fuzz("termination_messages", 256, inputs, |(report, path)| {
        for (msg, key) in [
            (crate::termination::savepoint(&path), "savepoint"),
            (crate::termination::checkpoint(&path), "checkpoint"),
        ] {
            let v: serde_json::Value = serde_json::from_str(&msg).unwrap();
            prop_assert_eq!(v[key].as_str(), Some(path.as_str()));
        }
        let text = crate::termination::plan_report(&report);
        prop_assert!(
            text.len() <= crate::termination::MAX_BYTES,
            "{} bytes",
            text.len()
        );
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(v["compatible"].as_bool(), Some(report.compatible));
        let full = serde_json::to_string(&report).unwrap();
        if full.len() <= crate::termination::MAX_BYTES {
            let back: PlanReport = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(&back, &report);
        } else if v.get("omitted").is_none() {
            let back: PlanReport = serde_json::from_str(&text).unwrap();
            for r in report
                .operators
                .iter()
                .filter(|o| o.status == OperatorStatus::Incompatible)
            {
                prop_assert!(
                    back.operators
                        .iter()
                        .any(|o| o.uid == r.uid && o.status == r.status),
                    "refusal of {:?} lost",
                    r.uid
                );
            }
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// Kafka record values
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Value {
    /// A valid record: id and name.
    Row(i64, String),
    /// A valid record, then edited.
    Edited(i64, String, Vec<Edit>),
    /// Anything.
    Bytes(Vec<u8>),
    Tombstone,
}

fn value() -> impl Strategy<Value = Value> {
    let name = "[a-zA-Z0-9 ,;\"é]{1,8}";
    prop_oneof![
        4 => (any::<i64>(), name).prop_map(|(i, n)| Value::Row(i, n)),
        3 => (any::<i64>(), name, edits()).prop_map(|(i, n, e)| Value::Edited(i, n, e)),
        1 => proptest::collection::vec(any::<u8>(), 0..24).prop_map(Value::Bytes),
        1 => Just(Value::Tombstone),
    ]
}

fn encode_value(csv: Option<u8>, id: i64, name: &str) -> Vec<u8> {
    match csv {
        None => serde_json::json!({"id": id, "name": name})
            .to_string()
            .into_bytes(),
        Some(d) => {
            let mut w = csv::WriterBuilder::new()
                .delimiter(d)
                .terminator(csv::Terminator::Any(b'\n'))
                .from_writer(Vec::new());
            w.write_record([id.to_string().as_str(), name]).unwrap();
            w.into_inner().unwrap()
        }
    }
}

/// Kafka record values (JSON objects, CSV rows): every record is either in the batch or reported
/// as a bad record naming its `topic/partition@offset` (none lost, none twice), valid records
/// decode to their values, metadata columns line up with the kept records.
#[test]
fn fuzz_kafka_records() {
    fuzz("kafka_records", 256, kafka_inputs(), |(csv, values)| {
        check_kafka_records(csv, values)
    });
}

/// CSV values with quotes or carriage returns inside: the smallest case the fuzzer found (a stray
/// quote and a `\r` in one value once swallowed the next, valid record), then edited ones.
#[test]
fn fuzz_kafka_csv_quotes() {
    // the smallest case found: value 0 `5;a\r7;"`, value 1 the valid row `0;,`
    let known = vec![
        Value::Bytes(b"5;a\r7;\"".to_vec()),
        Value::Row(0, ",".into()),
    ];
    if let Err(e) = check_kafka_records(Some(b';'), known) {
        panic!("{e}");
    }
    fuzz("kafka_csv_quotes", 256, kafka_inputs(), |(csv, values)| {
        check_kafka_records(csv, values)
    });
}

fn kafka_inputs() -> impl Strategy<Value = (Option<u8>, Vec<Value>)> {
    (
        prop_oneof![
            Just(None),
            Just(Some(b',')),
            Just(Some(b';')),
            Just(Some(b'\t'))
        ],
        proptest::collection::vec(value(), 0..8),
    )
}

/// Every record is either decoded with its values or reported as a bad record naming it.
fn check_kafka_records(csv: Option<u8>, values: Vec<Value>) -> Result<(), TestCaseError> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, false),
    ]));

    let format = match csv {
        None => ValueFormat::Json,
        Some(delimiter) => ValueFormat::Csv { delimiter },
    };
    let d = ValueDecoder::new(
        format,
        schema.clone(),
        &[streamjob_crds::v1alpha1::KafkaMetadataColumn::Offset],
    )
    .unwrap();
    let records: Vec<RawRecord> = values
        .iter()
        .enumerate()
        .map(|(i, v)| RawRecord {
            topic: "t".into(),
            partition: 3,
            offset: i as i64,
            timestamp: None,
            key: None,
            value: match v {
                Value::Row(id, n) => Some(encode_value(csv, *id, n)),
                Value::Edited(id, n, e) => Some(apply(encode_value(csv, *id, n), e)),
                Value::Bytes(b) => Some(b.clone()),
                Value::Tombstone => None,
            },
            headers: Vec::new(),
        })
        .collect();
    let mut out = Collector::default();
    let (batch, kept) = d.decode(&records, &mut out).unwrap();
    prop_assert_eq!(batch.num_rows(), kept.len());
    let mut seen: Vec<i64> = kept.iter().map(|r| r.offset).collect();
    for b in &out.bad_records {
        let at = b.reason.split(": ").next().unwrap_or_default();
        let offset = at.strip_prefix("t/3@").and_then(|o| o.parse::<i64>().ok());
        prop_assert!(
            offset.is_some(),
            "bad record without its position: {}",
            b.reason
        );
        seen.push(offset.unwrap_or(-1));
    }
    seen.sort_unstable();
    prop_assert_eq!(seen, (0..records.len() as i64).collect::<Vec<_>>());
    let ids = batch
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    let names = batch
        .column(1)
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap();
    let offsets = batch
        .column(2)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    for (row, r) in kept.iter().enumerate() {
        prop_assert_eq!(offsets.value(row), r.offset);
        if let Value::Row(id, n) = &values[r.offset as usize] {
            prop_assert_eq!(ids.value(row), *id);
            prop_assert_eq!(names.value(row), n.as_str());
        }
    }
    for (i, v) in values.iter().enumerate() {
        if matches!(v, Value::Row(..)) {
            prop_assert!(
                kept.iter().any(|r| r.offset == i as i64),
                "valid record {} dropped",
                i
            );
        }
    }
    Ok(())
}
