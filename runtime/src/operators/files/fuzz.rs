//! Fuzz targets of the `files` source's record decoding (JSON lines and CSV), in the module that
//! owns its private parser; the loop and the byte edits are `crate::fuzz`'s.
#![allow(clippy::unwrap_used)]

use arrow::array::{Int64Array, StringArray};
use proptest::prelude::*;

use super::*;
use crate::fuzz::{Edit, apply, edits};
use crate::fuzz_loop::fuzz;
use crate::operator::BadRecord;

fn plan(format: FileFormat) -> FilesSourcePlan {
    FilesSourcePlan {
        uid: "in".into(),
        location: Location::parse("/tmp/streamjob-fuzz-unused", None).unwrap(),
        format,
        schema: Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, false),
        ])),
        discovery: None,
        event_time_column: None,
        out_of_orderness_ms: 0,
    }
}

/// A file of valid records (with blank lines between some) and the rows it holds.
fn file(format: &FileFormat, rows: &[(i64, String, bool)]) -> Vec<u8> {
    let mut out = Vec::new();
    match format {
        FileFormat::Csv { header, delimiter } => {
            let mut w = csv::WriterBuilder::new()
                .delimiter(*delimiter)
                .terminator(csv::Terminator::Any(b'\n'))
                .from_writer(Vec::new());
            if *header {
                w.write_record(["id", "name"]).unwrap();
            }
            for (id, name, _) in rows {
                w.write_record([id.to_string().as_str(), name]).unwrap();
            }
            out = w.into_inner().unwrap();
        }
        _ => {
            for (id, name, blank) in rows {
                if *blank {
                    out.extend_from_slice(b"  \n");
                }
                out.extend_from_slice(
                    serde_json::json!({"id": id, "name": name})
                        .to_string()
                        .as_bytes(),
                );
                out.push(b'\n');
            }
        }
    }
    out
}

/// Rows as (id, name), and bad records.
type Read = (Vec<(i64, String)>, Vec<BadRecord>);

/// (rows as (id, name), bad records) of `bytes` read the way `refill` reads a file: in chunks of
/// `chunk` bytes, each cut at its last complete record (`chunk == 0`: the whole file at once).
fn read(p: &FilesSourcePlan, bytes: &[u8], chunk: usize) -> Result<Read, TestCaseError> {
    let mut out = Collector::default();
    let mut batches = Vec::new();
    let (mut carry, mut pos, mut line_offset) = (Vec::new(), 0usize, 0u64);
    while pos < bytes.len() {
        let end = if chunk == 0 {
            bytes.len()
        } else {
            (pos + chunk).min(bytes.len())
        };
        let mut data = std::mem::take(&mut carry);
        data.extend_from_slice(&bytes[pos..end]);
        pos = end;
        let cut = if end == bytes.len() {
            data.len()
        } else {
            match complete_records(&p.format, &data) {
                Some(i) => i,
                None => {
                    carry = data;
                    continue;
                }
            }
        };
        carry = data.split_off(cut);
        let base = line_offset;
        line_offset += cut as u64;
        let parsed =
            FilesSource::parse_rows(p, "f.data", Bytes::from(data), base, base == 0, &mut out);
        prop_assert!(parsed.is_ok(), "parse_rows failed: {:?}", parsed.err());
        batches.extend(parsed.unwrap_or_default());
    }
    let mut rows = Vec::new();
    for b in batches {
        let ids = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        let names = b.column(1).as_any().downcast_ref::<StringArray>().unwrap();
        for i in 0..b.num_rows() {
            rows.push((ids.value(i), names.value(i).to_string()));
        }
    }
    Ok((rows, out.bad_records))
}

/// File records (JSON lines, CSV with or without header, any delimiter): valid files read back
/// every row, whole or cut into chunks anywhere; edited files never panic, every bad record
/// names the file and the byte offset where the record starts, and — when records are decoded
/// one by one — each record is either a row or a bad record (none lost).
#[test]
fn fuzz_file_records() {
    let format = prop_oneof![
        Just(FileFormat::JsonLines),
        (any::<bool>(), proptest::sample::select(b",;\t|".to_vec()))
            .prop_map(|(header, delimiter)| FileFormat::Csv { header, delimiter }),
    ];
    let rows = proptest::collection::vec(
        (any::<i64>(), "[a-z0-9 ,;|\"\n\r\té]{1,10}", any::<bool>()),
        0..8,
    );
    let edits = prop_oneof![1 => Just(Vec::<Edit>::new()), 3 => edits()];
    let inputs = (format, rows, edits, 1usize..40);
    fuzz(
        "file_records",
        256,
        inputs,
        |(format, rows, edits, chunk)| {
            let p = plan(format.clone());
            let valid = file(&format, &rows);
            let bytes = apply(valid.clone(), &edits);
            let (got, bad) = read(&p, &bytes, 0)?;
            for b in &bad {
                let (at, _) = b.reason.split_once(": ").unwrap_or_default();
                let offset = at
                    .strip_prefix("f.data at byte ")
                    .and_then(|o| o.parse::<usize>().ok());
                prop_assert!(
                    offset.is_some(),
                    "bad record without its place: {}",
                    b.reason
                );
                let offset = offset.unwrap_or_default();
                prop_assert!(offset < bytes.len(), "{}", b.reason);
                let from = String::from_utf8_lossy(&bytes[offset..]);
                prop_assert!(
                    from.starts_with(&b.record),
                    "{} does not start at its offset: {:?}",
                    b.reason,
                    b.record
                );
            }
            if !bad.is_empty() {
                // decoded one by one: every record is a row or a bad record
                match &format {
                    FileFormat::Csv { header, delimiter } => {
                        // ... and a quoted record over several lines that does not parse gives
                        // way to its lines: at least one outcome per record, at most one per
                        // line
                        let header = usize::from(*header);
                        let (spans, _) = csv_split::spans(&bytes, *delimiter, true);
                        let lines = bytes
                            .split(|b| matches!(b, b'\n' | b'\r'))
                            .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
                            .count();
                        let outcomes = got.len() + bad.len();
                        prop_assert!(
                            outcomes >= spans.len().saturating_sub(header)
                                && outcomes <= lines.saturating_sub(header),
                            "{} outcomes, {} records, {} lines; rows {:?}, bad {:?}",
                            outcomes,
                            spans.len(),
                            lines,
                            got,
                            bad
                        );
                    }
                    _ => prop_assert_eq!(
                        got.len() + bad.len(),
                        json_lines(&bytes).len(),
                        "rows {:?}, bad {:?}",
                        got,
                        bad
                    ),
                }
                // each bad record once, at a place of its own
                let mut offsets: Vec<&str> = bad
                    .iter()
                    .filter_map(|b| b.reason.split_once(": ").map(|(at, _)| at))
                    .collect();
                offsets.sort_unstable();
                offsets.dedup();
                prop_assert_eq!(
                    offsets.len(),
                    bad.len(),
                    "bad records at one place: {:?}",
                    bad
                );
            }
            if edits.is_empty() {
                let want: Vec<(i64, String)> =
                    rows.iter().map(|(i, n, _)| (*i, n.clone())).collect();
                prop_assert!(bad.is_empty(), "valid records refused: {:?}", bad);
                prop_assert_eq!(&got, &want);
                let (chunked, bad) = read(&p, &bytes, chunk)?;
                prop_assert!(
                    bad.is_empty(),
                    "valid records refused in chunks of {}: {:?}",
                    chunk,
                    bad
                );
                prop_assert_eq!(&chunked, &want, "chunks of {}", chunk);
            } else {
                read(&p, &bytes, chunk)?;
            }
            Ok(())
        },
    );
}
