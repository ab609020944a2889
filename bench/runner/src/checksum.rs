//! Reads every finished Parquet part file of an output directory back and computes the
//! engine-independent summary of `bench/README.md`: record count and one checksum per column
//! (wrapping int64): INT64 → sum of values; DOUBLE → sum of `Math.round(v * 1000)`;
//! STRING → sum of UTF-8 byte lengths. Hidden files (`.…`, in-progress/pending parts) and
//! `_…` files are skipped, at any depth.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Float64Type, Int64Type};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::query::{ColType, Query};

/// What an engine wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputSummary {
    /// Finished part files read.
    pub files: usize,
    /// Rows in them.
    pub records: u64,
    /// Columns (name, type as read back: int64, double, string, or the Arrow type otherwise);
    /// empty when there is no file.
    pub columns: Vec<(String, String)>,
    /// Checksum per column.
    pub column_sums: BTreeMap<String, i64>,
}

impl OutputSummary {
    /// Checksum of one column.
    pub fn sum(&self, column: &str) -> Option<i64> {
        self.column_sums.get(column).copied()
    }
}

/// Java's `Math.round(double)`: `floor(x + 0.5)`, saturating, NaN → 0.
pub fn java_round(x: f64) -> i64 {
    // `as` saturates and maps NaN to 0, as Java does
    (x + 0.5).floor() as i64
}

/// The finished part files under `dir`, sorted.
pub fn finished_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    if !dir.exists() {
        return Ok(out);
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).map_err(|e| Error::io(&d, e))? {
            let entry = entry.map_err(|e| Error::io(&d, e))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') || name.starts_with('_') {
                continue;
            }
            let path = entry.path();
            let ft = entry.file_type().map_err(|e| Error::io(&path, e))?;
            if ft.is_dir() {
                stack.push(path);
            } else if ft.is_file() {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Type name of a column as the checksum sees it.
pub fn type_name(t: &DataType) -> String {
    match t {
        DataType::Int64 => ColType::Int64.name().to_string(),
        DataType::Float64 => ColType::Double.name().to_string(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            ColType::String.name().to_string()
        }
        other => other.to_string(),
    }
}

fn column_sum(path: &Path, name: &str, array: &ArrayRef) -> Result<i64> {
    let mut sum = 0i64;
    match array.data_type() {
        DataType::Float64 | DataType::Float32 => {
            let a = cast(array, &DataType::Float64).map_err(|e| Error::arrow(path, e))?;
            for v in a.as_primitive::<Float64Type>().iter().flatten() {
                sum = sum.wrapping_add(java_round(v * 1000.0));
            }
        }
        DataType::Utf8 => {
            let a = array.as_string::<i32>();
            for v in a.iter().flatten() {
                sum = sum.wrapping_add(v.len() as i64);
            }
        }
        DataType::LargeUtf8 => {
            let a = array.as_string::<i64>();
            for v in a.iter().flatten() {
                sum = sum.wrapping_add(v.len() as i64);
            }
        }
        DataType::Utf8View => {
            for v in array.as_string_view().iter().flatten() {
                sum = sum.wrapping_add(v.len() as i64);
            }
        }
        // integers and timestamps: the int64 value (a timestamp column is reported with its type,
        // so a type difference shows up even when the values agree)
        t if t.is_integer() || matches!(t, DataType::Timestamp(_, _)) => {
            let a = match t {
                DataType::Timestamp(_, _) => {
                    let plain = cast(
                        array,
                        &DataType::Timestamp(arrow::datatypes::TimeUnit::Millisecond, None),
                    )
                    .map_err(|e| Error::arrow(path, e))?;
                    cast(&plain, &DataType::Int64).map_err(|e| Error::arrow(path, e))?
                }
                _ => cast(array, &DataType::Int64).map_err(|e| Error::arrow(path, e))?,
            };
            for v in a.as_primitive::<Int64Type>().iter().flatten() {
                sum = sum.wrapping_add(v);
            }
        }
        other => {
            return Err(Error::Other(format!(
                "{}: column {name:?} has type {other}: no checksum is defined for it",
                path.display()
            )));
        }
    }
    Ok(sum)
}

/// Reads back every finished part file under `dir`.
pub fn summarize_dir(dir: &Path) -> Result<OutputSummary> {
    let mut summary = OutputSummary::default();
    for path in finished_files(dir)? {
        let file = File::open(&path).map_err(|e| Error::io(&path, e))?;
        let builder =
            ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| Error::parquet(&path, e))?;
        let schema = builder.schema().clone();
        let columns: Vec<(String, String)> = schema
            .fields()
            .iter()
            .map(|f| (f.name().clone(), type_name(f.data_type())))
            .collect();
        if summary.files == 0 {
            summary.columns = columns.clone();
            for (name, _) in &columns {
                summary.column_sums.insert(name.clone(), 0);
            }
        } else if summary.columns != columns {
            return Err(Error::Other(format!(
                "{}: columns {columns:?} differ from the other part files' {:?}",
                path.display(),
                summary.columns
            )));
        }
        summary.files += 1;
        let reader = builder
            .with_batch_size(64 * 1024)
            .build()
            .map_err(|e| Error::parquet(&path, e))?;
        for batch in reader {
            let batch = batch.map_err(|e| Error::arrow(&path, e))?;
            summary.records += batch.num_rows() as u64;
            for (i, field) in schema.fields().iter().enumerate() {
                let s = column_sum(&path, field.name(), batch.column(i))?;
                let acc = summary.column_sums.entry(field.name().clone()).or_insert(0);
                *acc = acc.wrapping_add(s);
            }
        }
    }
    Ok(summary)
}

/// Differences between an output and what the query must produce (column names and types in
/// order; nothing when the output is empty and no rows were expected).
pub fn schema_problems(query: Query, summary: &OutputSummary) -> Vec<String> {
    if summary.files == 0 {
        return vec![];
    }
    let want: Vec<(String, String)> = query
        .output_columns()
        .iter()
        .map(|(n, t)| ((*n).to_string(), t.name().to_string()))
        .collect();
    if summary.columns == want {
        vec![]
    } else {
        vec![format!(
            "columns {} (expected {})",
            describe_columns(&summary.columns),
            describe_columns(&want)
        )]
    }
}

/// `a int64, b string`.
pub fn describe_columns(cols: &[(String, String)]) -> String {
    cols.iter()
        .map(|(n, t)| format!("{n} {t}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Float64Array, Int64Array, StringArray, TimestampMillisecondArray};
    use arrow::datatypes::{Field, Schema, TimeUnit};
    use arrow::record_batch::RecordBatch;
    use parquet::arrow::ArrowWriter;

    use super::*;

    fn write(path: &Path, batch: &RecordBatch) {
        let f = File::create(path).expect("create");
        let mut w = ArrowWriter::try_new(f, batch.schema(), None).expect("writer");
        w.write(batch).expect("write");
        w.close().expect("close");
    }

    #[test]
    fn java_rounding() {
        assert_eq!(java_round(2.5), 3);
        assert_eq!(java_round(-2.5), -2);
        assert_eq!(java_round(-2.6), -3);
        assert_eq!(java_round(f64::NAN), 0);
        assert_eq!(java_round(1e300), i64::MAX);
    }

    #[test]
    fn sums_skip_hidden_files_and_check_types() {
        let dir = tempfile::tempdir().expect("tempdir");
        let schema = Arc::new(Schema::new(vec![
            Field::new("auction", DataType::Int64, false),
            Field::new("bidder", DataType::Int64, false),
            Field::new("price_eur", DataType::Float64, false),
            Field::new("date_time", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(Int64Array::from(vec![10, 20])),
                Arc::new(Float64Array::from(vec![0.908, 1.0005])),
                Arc::new(Int64Array::from(vec![i64::MAX, 1])),
            ],
        )
        .expect("batch");
        write(&dir.path().join("part-0-0.parquet"), &batch);
        write(&dir.path().join("part-1-0.parquet"), &batch);
        write(&dir.path().join(".part-1-1.parquet.inprogress"), &batch);
        std::fs::write(dir.path().join("_SUCCESS"), b"").expect("marker");
        let s = summarize_dir(dir.path()).expect("summary");
        assert_eq!(s.files, 2);
        assert_eq!(s.records, 4);
        assert_eq!(s.sum("auction"), Some(6));
        // 908 + round(1000.5) = 908 + 1001, twice
        assert_eq!(s.sum("price_eur"), Some(2 * (908 + 1001)));
        // wrapping
        assert_eq!(
            s.sum("date_time"),
            Some(i64::MAX.wrapping_add(1).wrapping_mul(2))
        );
        assert!(schema_problems(Query::Q1, &s).is_empty());
        assert_eq!(schema_problems(Query::Q2, &s).len(), 1);
    }

    #[test]
    fn strings_and_timestamps() {
        let dir = tempfile::tempdir().expect("tempdir");
        let schema = Arc::new(Schema::new(vec![
            Field::new("key", DataType::Utf8, true),
            Field::new(
                "window_start",
                DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
                false,
            ),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec![Some("key-1"), Some("é"), None])),
                Arc::new(
                    TimestampMillisecondArray::from(vec![1000, 2000, 3000]).with_timezone("UTC"),
                ),
            ],
        )
        .expect("batch");
        write(&dir.path().join("part-0-0.parquet"), &batch);
        let s = summarize_dir(dir.path()).expect("summary");
        assert_eq!(s.sum("key"), Some(5 + 2));
        assert_eq!(s.sum("window_start"), Some(6000));
        assert_ne!(s.columns[1].1, "int64");
    }

    #[test]
    fn missing_dir_is_empty() {
        let s = summarize_dir(Path::new("/nonexistent/bench-out")).expect("summary");
        assert_eq!(s, OutputSummary::default());
    }
}
