//! Verdicts (are both outputs equal?) and the printed / JSON table.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::checksum::{OutputSummary, describe_columns, schema_problems};
use crate::engine::{EngineRun, Status};
use crate::query::Query;

/// What `bench/tools/expected.py` computes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Expected {
    pub output_records: u64,
    pub column_sums: BTreeMap<String, i64>,
}

/// Whether the outputs agree.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "verdict", content = "details", rename_all = "camelCase")]
pub enum Verdict {
    /// Both engines (and the reference, when computed) agree.
    Equal,
    /// Flink agrees with the reference (when computed); ours did not run.
    FlinkOnly,
    /// Something differs or Flink failed.
    Mismatch(Vec<String>),
}

/// One query at one parallelism.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueryRow {
    pub query: Query,
    pub parallelism: u32,
    pub manifest: String,
    pub ours: EngineRun,
    pub flink: EngineRun,
    pub expected: Option<Expected>,
    pub verdict: Verdict,
    /// ours / Flink events per second per core (only when the outputs are equal).
    pub ratio: Option<f64>,
}

fn diff_summary(
    what: &str,
    a_name: &str,
    a: &OutputSummary,
    b_name: &str,
    b_records: u64,
    b_sums: &BTreeMap<String, i64>,
) -> Vec<String> {
    let mut out = Vec::new();
    if a.records != b_records {
        out.push(format!(
            "{what}: records {a_name}={} {b_name}={b_records}",
            a.records
        ));
    }
    if &a.column_sums != b_sums {
        let keys: std::collections::BTreeSet<&String> =
            a.column_sums.keys().chain(b_sums.keys()).collect();
        let diffs: Vec<String> = keys
            .into_iter()
            .filter(|k| a.column_sums.get(*k) != b_sums.get(*k))
            .map(|k| {
                let show = |v: Option<&i64>| v.map_or("missing".to_string(), i64::to_string);
                format!(
                    "{k} {a_name}={} {b_name}={}",
                    show(a.column_sums.get(k)),
                    show(b_sums.get(k))
                )
            })
            .collect();
        out.push(format!("{what}: checksums differ: {}", diffs.join("; ")));
    }
    out
}

/// Compares the outputs.
pub fn verdict(
    query: Query,
    ours: &EngineRun,
    flink: &EngineRun,
    expected: Option<&Expected>,
) -> Verdict {
    let mut problems = Vec::new();
    match (&flink.status, &flink.output) {
        (Status::Ok, Some(f)) => {
            for p in schema_problems(query, f) {
                problems.push(format!("Flink output {p}"));
            }
            if let Some(r) = &flink.reported {
                problems.extend(diff_summary(
                    "Flink read-back vs Flink's own report",
                    "readback",
                    f,
                    "reported",
                    r.output_records,
                    &r.column_sums,
                ));
            }
            if let Some(e) = expected {
                problems.extend(diff_summary(
                    "Flink vs expected.py",
                    "flink",
                    f,
                    "expected",
                    e.output_records,
                    &e.column_sums,
                ));
            }
            if let (Status::Ok, Some(o)) = (&ours.status, &ours.output) {
                for p in schema_problems(query, o) {
                    problems.push(format!("ours output {p}"));
                }
                problems.extend(diff_summary(
                    "ours vs Flink",
                    "ours",
                    o,
                    "flink",
                    f.records,
                    &f.column_sums,
                ));
            }
        }
        (Status::Ok, None) => problems.push("Flink output was not read back".to_string()),
        (Status::Unsupported(e) | Status::Failed(e), _) => {
            problems.push(format!("Flink did not finish: {e}"));
        }
    }
    if !problems.is_empty() {
        Verdict::Mismatch(problems)
    } else if ours.status.is_ok() {
        Verdict::Equal
    } else {
        Verdict::FlinkOnly
    }
}

/// A physical-limit measurement.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LimitRow {
    pub name: String,
    pub status: Status,
    pub events: u64,
    pub seconds: f64,
    /// One thread / parallelism 1: per core = total.
    pub events_per_second: f64,
    pub peak_rss_mib: Option<f64>,
    pub note: String,
}

/// `1234567.8` → `1,234,568`.
pub fn thousands(v: f64) -> String {
    let n = v.round() as i128;
    let s = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let line = |cells: &[String]| -> String {
        let mut s = String::from("|");
        for (i, c) in cells.iter().enumerate() {
            let w = widths.get(i).copied().unwrap_or(0);
            let pad = w.saturating_sub(c.chars().count());
            let _ = write!(s, " {c}{} |", " ".repeat(pad));
        }
        s
    };
    let mut out = line(&header.iter().map(|h| (*h).to_string()).collect::<Vec<_>>());
    out.push('\n');
    out.push('|');
    for w in &widths {
        let _ = write!(out, "{}|", "-".repeat(w + 2));
    }
    out.push('\n');
    for r in rows {
        out.push_str(&line(r));
        out.push('\n');
    }
    out
}

/// Notes (footnotes) collected while rendering: identical errors share one number.
#[derive(Default)]
struct Notes {
    items: Vec<(String, Vec<String>)>,
}

impl Notes {
    fn add(&mut self, text: String, wher: String) -> usize {
        if let Some(i) = self.items.iter().position(|(t, _)| *t == text) {
            if let Some(item) = self.items.get_mut(i) {
                item.1.push(wher);
            }
            return i + 1;
        }
        self.items.push((text, vec![wher]));
        self.items.len()
    }
}

fn engine_cell(run: &EngineRun, who: &str, wher: &str, notes: &mut Notes) -> String {
    match &run.status {
        Status::Ok => thousands(run.events_per_second_per_core),
        Status::Unsupported(e) => {
            let n = notes.add(format!("{who}: unsupported ({e})"), wher.to_string());
            format!("unsupported [{n}]")
        }
        Status::Failed(e) => {
            let n = notes.add(format!("{who}: failed ({e})"), wher.to_string());
            format!("failed [{n}]")
        }
    }
}

fn opt_ms(run: &EngineRun) -> String {
    match (&run.status, run.checkpoint_p99_ms) {
        (Status::Ok, Some(v)) => format!("{v} ms ({})", run.checkpoint_durations_ms.len()),
        (Status::Ok, None) => "none".to_string(),
        _ => "-".to_string(),
    }
}

fn rss(run: &EngineRun) -> String {
    if run.peak_rss_mib > 0.0 {
        format!("{:.0} MiB", run.peak_rss_mib)
    } else {
        "-".to_string()
    }
}

/// The printed comparison table, its footnotes and the limits table.
pub fn render_tables(rows: &[QueryRow], limits: &[LimitRow]) -> String {
    let mut notes = Notes::default();
    let mut cells = Vec::new();
    for r in rows {
        let wher = format!("{} P={}", r.query, r.parallelism);
        let ours = engine_cell(&r.ours, "ours", &wher, &mut notes);
        let flink = engine_cell(&r.flink, "Flink", &wher, &mut notes);
        let records = r
            .flink
            .output
            .as_ref()
            .or(r.ours.output.as_ref())
            .map_or("-".to_string(), |o| thousands(o.records as f64));
        let check = match &r.verdict {
            Verdict::Equal => {
                if r.expected.is_some() {
                    "✓ (= expected.py)".to_string()
                } else {
                    "✓".to_string()
                }
            }
            Verdict::FlinkOnly => {
                if r.expected.is_some() {
                    "Flink = expected.py; ours n/a".to_string()
                } else {
                    "ours n/a".to_string()
                }
            }
            Verdict::Mismatch(d) => {
                let n = notes.add(format!("MISMATCH: {}", d.join(" / ")), wher.clone());
                format!("✗ MISMATCH [{n}]")
            }
        };
        cells.push(vec![
            r.query.to_string(),
            r.parallelism.to_string(),
            ours,
            flink,
            r.ratio.map_or("-".to_string(), |x| format!("{x:.2}×")),
            opt_ms(&r.ours),
            opt_ms(&r.flink),
            rss(&r.ours),
            rss(&r.flink),
            records,
            check,
        ]);
    }
    let mut out = render(
        &[
            "query",
            "P",
            "ours ev/s/core",
            "Flink ev/s/core",
            "ratio",
            "ckpt p99 ours (n)",
            "ckpt p99 Flink (n)",
            "RSS ours",
            "RSS Flink",
            "output records",
            "checksums equal",
        ],
        &cells,
    );
    for (i, (text, wher)) in notes.items.iter().enumerate() {
        let _ = writeln!(out, "[{}] {}: {text}", i + 1, wher.join(", "));
    }
    out.push('\n');
    let limit_cells: Vec<Vec<String>> = limits
        .iter()
        .map(|l| {
            vec![
                l.name.clone(),
                thousands(l.events as f64),
                match &l.status {
                    Status::Ok => format!("{:.2}", l.seconds),
                    _ => "-".to_string(),
                },
                match &l.status {
                    Status::Ok => thousands(l.events_per_second),
                    Status::Unsupported(e) => format!("unsupported ({e})"),
                    Status::Failed(e) => format!("failed ({e})"),
                },
                l.peak_rss_mib
                    .map_or("-".to_string(), |m| format!("{m:.0} MiB")),
                l.note.clone(),
            ]
        })
        .collect();
    out.push_str(&render(
        &[
            "physical limit (P=1, one core)",
            "events",
            "seconds",
            "events/s",
            "peak RSS",
            "note",
        ],
        &limit_cells,
    ));
    out
}

/// Short description of an output for logs.
pub fn describe_output(o: &OutputSummary, sum_column: &str) -> String {
    format!(
        "{} files, {} records, {sum_column}={}, columns [{}]",
        o.files,
        o.records,
        o.sum(sum_column).map_or("-".to_string(), |v| v.to_string()),
        describe_columns(&o.columns)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(status: Status, out: Option<OutputSummary>) -> EngineRun {
        EngineRun {
            status,
            events: 10,
            seconds: 1.0,
            seconds_basis: String::new(),
            process_seconds: 1.0,
            events_per_second_per_core: 10.0,
            checkpoint_durations_ms: vec![5],
            checkpoint_p99_ms: Some(5),
            peak_rss_mib: 1.0,
            output: out,
            reported: None,
            stderr_log: String::new(),
        }
    }

    fn q2(records: u64, price: i64) -> OutputSummary {
        OutputSummary {
            files: 1,
            records,
            columns: vec![
                ("auction".into(), "int64".into()),
                ("price".into(), "int64".into()),
            ],
            column_sums: [("auction".to_string(), 246), ("price".to_string(), price)]
                .into_iter()
                .collect(),
        }
    }

    #[test]
    fn verdicts() {
        let f = run(Status::Ok, Some(q2(2, 5)));
        let e = Expected {
            output_records: 2,
            column_sums: q2(2, 5).column_sums,
        };
        assert_eq!(
            verdict(Query::Q2, &run(Status::Ok, Some(q2(2, 5))), &f, Some(&e)),
            Verdict::Equal
        );
        assert_eq!(
            verdict(
                Query::Q2,
                &run(Status::Unsupported("x".into()), None),
                &f,
                Some(&e)
            ),
            Verdict::FlinkOnly
        );
        let Verdict::Mismatch(d) = verdict(Query::Q2, &run(Status::Ok, Some(q2(3, 6))), &f, None)
        else {
            panic!("expected a mismatch");
        };
        assert!(d[0].contains("records ours=3 flink=2"), "{d:?}");
        assert!(d[1].contains("price ours=6 flink=5"), "{d:?}");
        assert!(matches!(
            verdict(Query::Q0, &run(Status::Ok, Some(q2(2, 5))), &f, None),
            Verdict::Mismatch(_)
        ));
    }

    #[test]
    fn table_renders_notes_once() {
        let f = run(Status::Ok, Some(q2(2, 5)));
        let o = run(Status::Unsupported("error: no sink".into()), None);
        let row = |p| QueryRow {
            query: Query::Q2,
            parallelism: p,
            manifest: String::new(),
            ours: o.clone(),
            flink: f.clone(),
            expected: None,
            verdict: Verdict::FlinkOnly,
            ratio: None,
        };
        let t = render_tables(&[row(1), row(2)], &[]);
        assert!(
            t.contains("[1] q2 P=1, q2 P=2: ours: unsupported (error: no sink)"),
            "{t}"
        );
        assert_eq!(thousands(1234567.4), "1,234,567");
        assert_eq!(thousands(999.0), "999");
    }
}
