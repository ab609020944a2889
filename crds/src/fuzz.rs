//! Property tests and time-bounded fuzz targets of what users write: StreamJob manifests
//! (strict and lenient readers, validation) and the durations and sizes in them.
//!
//! `cargo test` runs a few hundred cases per target; with `STREAMJOB_FUZZ_SECONDS=N` (what
//! `cargo xtask fuzz` sets) each target runs batches of cases for N seconds. A failure prints
//! the shrunk input.
#![allow(clippy::unwrap_used)]

use std::fmt::Debug;

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::TestCaseError;

use crate::fuzz_loop::fuzz;
use serde_json::Value;

use crate::Error;
use crate::units::{format_duration, parse_duration, parse_size};
use crate::v1alpha1::StreamJob;

// ---------------------------------------------------------------------------------------------
// The loop (the loop itself: fuzz_loop.rs, shared by every crate)
// ---------------------------------------------------------------------------------------------

/// One edit of a byte string.
#[derive(Clone, Debug)]
enum Edit {
    Flip(Index, u8),
    Insert(Index, u8),
    Delete(Index),
    Truncate(Index),
    /// Copies a slice of the input elsewhere (duplicated keys, repeated lines).
    Splice(Index, Index, u8),
    /// Writes a byte that matters to the grammar (quotes, brackets, separators).
    Special(Index, u8),
}

fn edit() -> impl Strategy<Value = Edit> {
    const SPECIAL: &[u8] = b"\"'{}[]:,-\n\t #&*!|>%@`\\0";
    prop_oneof![
        (any::<Index>(), 0u8..8).prop_map(|(i, b)| Edit::Flip(i, b)),
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Edit::Insert(i, b)),
        any::<Index>().prop_map(Edit::Delete),
        any::<Index>().prop_map(Edit::Truncate),
        (any::<Index>(), any::<Index>(), 1u8..64).prop_map(|(a, b, n)| Edit::Splice(a, b, n)),
        (any::<Index>(), proptest::sample::select(SPECIAL)).prop_map(|(i, b)| Edit::Special(i, b)),
    ]
}

fn apply(mut bytes: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
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

// ---------------------------------------------------------------------------------------------
// Manifests
// ---------------------------------------------------------------------------------------------

const EXAMPLES: [&str; 6] = [
    include_str!("../../examples/local-clicks.yaml"),
    include_str!("../../examples/flink-counting.yaml"),
    include_str!("../../examples/kafka-parquet.yaml"),
    include_str!("../../examples/s3-parquet.yaml"),
    include_str!("../../examples/custom-job.yaml"),
    // every step kind and most optional fields in one manifest
    r#"apiVersion: streamjob.io/v1alpha1
kind: StreamJob
metadata: {name: every-kind, namespace: team-a, labels: {app: x}}
spec:
  image: streamjob/runtime:0.1.0
  parallelism: 2
  maxParallelism: 64
  workers: 2
  deadLetterPath: s3://b/dead
  checkpoints: {dir: s3://b/ck, interval: 10s, timeout: 1m}
  savepoints: {dir: s3://b/sp, periodic: 1h, history: {maxCount: 3, maxAge: 7d}}
  upgrade: {readinessTimeout: 5m, savepointTimeout: 2m}
  podTemplate: {spec: {nodeSelector: {disk: ssd}, containers: [{name: runtime, resources: {limits: {cpu: "2"}}}]}}
  pipeline:
    - uid: in
      source:
        files:
          path: s3://b/in
          format: {csv: {header: true, delimiter: ";"}}
          schema: [{name: id, type: int64}, {name: name, type: string, nullable: true}]
          discoveryInterval: 30s
        watermark: {maxOutOfOrderness: 5s, idleTimeout: 1m}
    - uid: keep
      filter: "id > 0"
    - uid: cols
      project: [{name: id, expr: id}, {name: upper, expr: "upper(name)"}]
    - uid: once
      dedup: {keys: [id], within: 10m}
    - uid: agg
      parallelism: 4
      keyBy: [id]
      window: {sliding: {size: 1m, slide: 10s}, allowedLateness: 5s}
      aggregate: {count: true, sum: [id], min: [id], max: [id], avg: [id]}
    - uid: out
      fileSink:
        path: s3://b/out
        format: {csv: {delimiter: ","}}
        bucketAssigner: {dateTime: {format: "yyyy-MM-dd", timezone: "+02:00"}}
        rollingPolicy: {default: {maxPartSize: 128MiB, rolloverInterval: 15m, inactivityInterval: 1m, bucketCheckInterval: 1s}}
        compaction: {targetSize: 64MiB}
        successMarker: {allowedLateness: 1m}
"#,
];

/// Whether a manifest error says where: a field path, a step uid, a YAML position or the
/// apiVersion/kind it found.
fn names_a_place(e: &Error) -> bool {
    let field = |m: &str| {
        m.starts_with("spec")
            || m.starts_with("metadata")
            || m.starts_with("status")
            || m.contains(": unknown field")
    };
    match e {
        Error::Invalid(list) => !list.is_empty() && list.iter().all(|m| field(m)),
        Error::Duration { field, .. } | Error::Size { field, .. } => field.starts_with("spec"),
        Error::WrongKind { .. } => true,
        Error::Parse(p) => {
            let m = p.to_string();
            p.location().is_some()
                || field(&m)
                || m.contains("missing field `")
                || m.contains("unknown field `")
                || m.contains("unknown variant `")
                // about the whole text: there is no field to name
                || m.contains("more than one document")
        }
        Error::Serialize(_) => false,
    }
}

/// Reads `text` both ways and validates what parses; every error must name a place.
fn check_manifest(text: &str) -> Result<Option<StreamJob>, TestCaseError> {
    let lenient = StreamJob::from_yaml(text);
    let strict = StreamJob::from_yaml_strict(text);
    if let Err(e) = &lenient {
        prop_assert!(names_a_place(e), "lenient error names no field: {e}");
    }
    if let Err(e) = &strict {
        prop_assert!(names_a_place(e), "strict error names no field: {e}");
    }
    // the strict reader refuses at least what the lenient one refuses
    prop_assert!(
        lenient.is_ok() || strict.is_err(),
        "strict reader accepted what the lenient one refused"
    );
    let Ok(job) = lenient else {
        return Ok(None);
    };
    if let Err(e) = job.spec.validate() {
        prop_assert!(names_a_place(&e), "validation error names no field: {e}");
        return Ok(None);
    }
    Ok(Some(job))
}

#[test]
fn examples_are_valid() {
    for text in EXAMPLES {
        let job = StreamJob::from_yaml_strict(text).unwrap();
        job.spec.validate().unwrap();
    }
}

/// Arbitrary bytes and byte-level mutations of valid manifests: no panic, every error names a
/// field (or a YAML position), a manifest that reads and validates survives a JSON round trip.
#[test]
fn fuzz_manifest_bytes() {
    let inputs = prop_oneof![
        1 => proptest::collection::vec(any::<u8>(), 0..512)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        1 => "[a-zA-Z0-9:{}\\[\\],\\- \n\"']{0,300}",
        6 => (0..EXAMPLES.len(), proptest::collection::vec(edit(), 1..6)).prop_map(|(i, edits)| {
            String::from_utf8_lossy(&apply(EXAMPLES[i].as_bytes().to_vec(), &edits)).into_owned()
        }),
    ];
    fuzz("manifest_bytes", 256, inputs, |text| {
        if let Some(job) = check_manifest(&text)? {
            // what the operator writes for its pods reads back the same
            let json = serde_json::to_string(&job).unwrap();
            let again = StreamJob::from_yaml(&json).unwrap();
            prop_assert_eq!(&again.spec, &job.spec);
            prop_assert!(again.spec.validate().is_ok());
        }
        Ok(())
    });
}

/// A structural change of one field of a valid manifest.
#[derive(Clone, Debug)]
enum Change {
    /// Replace the value with one of another type or an extreme.
    Set(Index, Value),
    /// Remove the field.
    Remove(Index),
    /// Add a field next to it (a typo of a known one, or nonsense).
    Add(Index, String, Value),
}

fn odd_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        Just(Value::from(0)),
        Just(Value::from(-1)),
        Just(Value::from(u64::MAX)),
        Just(Value::from(i64::MIN)),
        Just(Value::from(u64::from(u32::MAX) + 1)),
        Just(Value::from(1.5e308)),
        Just(Value::from(-0.5)),
        Just(Value::from("")),
        Just(Value::from("99999999999999999999d")),
        Just(Value::from("18446744073709551615ms")),
        Just(Value::from("1s1ms")),
        Just(Value::from("0s")),
        Just(Value::from("18446744073709551615TiB")),
        Just(Value::from("hdfs://nn/x")),
        Just(Value::from("ftp://x")),
        Just(Value::from("+99:99")),
        Just(Value::from("é")),
        "[a-z0-9:/.+ -]{0,12}".prop_map(Value::from),
        Just(Value::Array(vec![])),
        Just(Value::Array(vec![Value::from(1), Value::from("a")])),
        Just(serde_json::json!({})),
        Just(serde_json::json!({"x": 1})),
    ]
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        3 => (any::<Index>(), odd_value()).prop_map(|(i, v)| Change::Set(i, v)),
        1 => any::<Index>().prop_map(Change::Remove),
        1 => (any::<Index>(), "[a-zA-Z]{1,12}", odd_value()).prop_map(|(i, k, v)| Change::Add(i, k, v)),
    ]
}

/// Paths (`spec.pipeline[0].uid`) of every value, the root excluded.
fn paths(v: &Value, at: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, x) in map {
                let p = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                out.push(p.clone());
                paths(x, &p, out);
            }
        }
        Value::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                let p = format!("{at}[{i}]");
                out.push(p.clone());
                paths(x, &p, out);
            }
        }
        _ => {}
    }
}

/// The parent of the value at `path`, and its last key or index.
fn parent_of<'a>(root: &'a mut Value, path: &str) -> Option<(&'a mut Value, String)> {
    let mut parts: Vec<String> = Vec::new();
    for piece in path.split('.') {
        match piece.split_once('[') {
            Some((key, rest)) => {
                if !key.is_empty() {
                    parts.push(key.to_string());
                }
                for idx in rest.split('[') {
                    parts.push(format!("[{}", idx.trim_end_matches(']')));
                }
            }
            None => parts.push(piece.to_string()),
        }
    }
    let last = parts.pop()?;
    let mut v = root;
    for p in parts {
        v = match p.strip_prefix('[') {
            Some(i) => v.get_mut(i.parse::<usize>().ok()?)?,
            None => v.get_mut(&p)?,
        };
    }
    Some((v, last))
}

/// Changes of single fields of valid manifests: no panic, and an error names the changed field
/// (its key, or the uid of its step).
#[test]
fn fuzz_manifest_fields() {
    let inputs = (0..EXAMPLES.len(), proptest::collection::vec(change(), 1..3));
    fuzz("manifest_fields", 256, inputs, |(example, changes)| {
        let mut doc: Value = serde_yaml_ng::from_str(EXAMPLES[example]).unwrap();
        // (changed path, key) of each change; the first one is checked
        let mut changed: Vec<(String, String)> = Vec::new();
        for c in &changes {
            let mut all = Vec::new();
            paths(&doc, "", &mut all);
            let (i, set, add) = match c {
                Change::Set(i, v) => (i, Some(v.clone()), None),
                Change::Remove(i) => (i, None, None),
                Change::Add(i, k, v) => (i, None, Some((k.clone(), v.clone()))),
            };
            let path = all[i.index(all.len())].clone();
            let Some((parent, last)) = parent_of(&mut doc, &path) else {
                continue;
            };
            match (set, add, last.strip_prefix('[')) {
                (Some(v), _, Some(idx)) => {
                    if let Some(slot) = parent.get_mut(idx.parse::<usize>().unwrap_or(0)) {
                        *slot = v;
                    }
                }
                (Some(v), _, None) => parent[last.as_str()] = v,
                (None, Some((k, v)), _) => {
                    if let Some(map) = parent.as_object_mut() {
                        map.insert(k.clone(), v);
                        changed.push((format!("{path}.{k}"), k));
                        continue;
                    }
                }
                (None, None, Some(idx)) => {
                    if let Some(items) = parent.as_array_mut() {
                        let idx = idx.parse::<usize>().unwrap_or(0);
                        if idx < items.len() {
                            items.remove(idx);
                        }
                    }
                }
                (None, None, None) => {
                    if let Some(map) = parent.as_object_mut() {
                        map.remove(&last);
                    }
                }
            }
            changed.push((path, last));
        }
        let text = serde_yaml_ng::to_string(&doc).unwrap();
        check_manifest(&text)?;
        // a single change that is refused is refused naming its field (or its step's uid)
        let [(path, _)] = changed.as_slice() else {
            return Ok(());
        };
        let key = last_key(path);
        let uid = step_uid(EXAMPLES[example], path);
        let names = |e: &str| e.contains(key) || uid.as_deref().is_some_and(|u| e.contains(u));
        match StreamJob::from_yaml_strict(&text) {
            Err(e) => {
                let e = e.to_string();
                prop_assert!(
                    names(&e),
                    "changing {path} was refused without naming it: {e}"
                );
            }
            Ok(job) => {
                if let Err(e) = job.spec.validate() {
                    let e = e.to_string();
                    prop_assert!(
                        names(&e),
                        "changing {path} failed validation without naming it: {e}"
                    );
                }
            }
        }
        Ok(())
    });
}

/// The last field name of a path: `spec.pipeline[1].keyBy[0]` → `keyBy`.
fn last_key(path: &str) -> &str {
    let last = path.rsplit('.').next().unwrap_or(path);
    last.split('[').next().unwrap_or(last)
}

/// The uid of the step `path` is in (`spec.pipeline[2]...`), from the unchanged manifest.
fn step_uid(example: &str, path: &str) -> Option<String> {
    let rest = path.strip_prefix("spec.pipeline[")?;
    let idx: usize = rest.split(']').next()?.parse().ok()?;
    let doc: Value = serde_yaml_ng::from_str(example).ok()?;
    doc["spec"]["pipeline"][idx]["uid"]
        .as_str()
        .map(String::from)
}

// ---------------------------------------------------------------------------------------------
// Durations and sizes
// ---------------------------------------------------------------------------------------------

/// Durations and sizes: no panic on any text, errors name the field, every duration formats to
/// text that parses back to it.
#[test]
fn fuzz_units() {
    let inputs = (
        prop_oneof![
            "\\PC{0,16}",
            "([0-9]{1,22}(ms|s|m|h|d|B|KB|MB|GB|TB|KiB|MiB|GiB|TiB|x)?){1,4}",
        ],
        0u64..=u64::MAX / 1_000_000,
    );
    fuzz("units", 512, inputs, |(text, millis)| {
        for r in [
            parse_duration("spec.x", &text).map(|_| ()),
            parse_size("spec.x", &text).map(|_| ()),
        ] {
            if let Err(e) = r {
                prop_assert!(e.to_string().starts_with("spec.x: "), "{e}");
            }
        }
        let d = std::time::Duration::from_millis(millis);
        let text = format_duration(d);
        prop_assert_eq!(parse_duration("spec.x", &text).ok(), Some(d), "{}", text);
        Ok(())
    });
}
