//! Physical limit: a plain write of the same bytes — read the CSV into Arrow and write it as
//! Parquet (zstd, the file sink's codec settings) with `ArrowWriter` to local disk, one thread,
//! no engine. Runs in a child process (`streamjob-bench __plain-write`) so that its peak RSS is
//! measured like the engines'.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use serde::{Deserialize, Serialize};
use streamjob_crds::v1alpha1::FieldType;

use crate::error::{Error, Result};
use crate::query::Table;

/// Hidden sub-command name.
pub const PLAIN_WRITE_COMMAND: &str = "__plain-write";

/// Result of a plain write.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlainWrite {
    pub rows: u64,
    pub csv_bytes: u64,
    pub parquet_bytes: u64,
    /// Time spent parsing CSV into Arrow batches.
    pub read_seconds: f64,
    /// Time spent encoding and writing Parquet (including the footer).
    pub write_seconds: f64,
    pub total_seconds: f64,
}

/// Arrow schema of a table's CSV file.
pub fn table_schema(table: Table) -> SchemaRef {
    Arc::new(Schema::new(
        table
            .columns()
            .iter()
            .map(|(name, t)| {
                let dt = match t {
                    FieldType::Int64 => DataType::Int64,
                    FieldType::Uint64 => DataType::UInt64,
                    FieldType::String => DataType::Utf8,
                    FieldType::Float64 => DataType::Float64,
                    FieldType::Bool => DataType::Boolean,
                    FieldType::Timestamp => DataType::Int64,
                };
                // empty CSV fields read as null (the input has empty `extra` strings)
                Field::new(*name, dt, *t == FieldType::String)
            })
            .collect::<Vec<_>>(),
    ))
}

/// Reads `csv` and writes `out` (Parquet, zstd).
pub fn plain_write(table: Table, csv: &Path, out: &Path) -> Result<PlainWrite> {
    let start = Instant::now();
    let schema = table_schema(table);
    let input = File::open(csv).map_err(|e| Error::io(csv, e))?;
    let csv_bytes = input.metadata().map_err(|e| Error::io(csv, e))?.len();
    let mut reader = arrow::csv::ReaderBuilder::new(schema.clone())
        .with_header(true)
        .with_batch_size(8192)
        .build(input)
        .map_err(|e| Error::arrow(csv, e))?;
    let output = File::create(out).map_err(|e| Error::io(out, e))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build();
    let mut writer =
        ArrowWriter::try_new(output, schema, Some(props)).map_err(|e| Error::parquet(out, e))?;
    let mut result = PlainWrite {
        csv_bytes,
        ..Default::default()
    };
    loop {
        let t = Instant::now();
        let batch = reader.next();
        result.read_seconds += t.elapsed().as_secs_f64();
        let Some(batch) = batch else { break };
        let batch = batch.map_err(|e| Error::arrow(csv, e))?;
        result.rows += batch.num_rows() as u64;
        let t = Instant::now();
        writer.write(&batch).map_err(|e| Error::parquet(out, e))?;
        result.write_seconds += t.elapsed().as_secs_f64();
    }
    let t = Instant::now();
    writer.close().map_err(|e| Error::parquet(out, e))?;
    result.write_seconds += t.elapsed().as_secs_f64();
    result.parquet_bytes = std::fs::metadata(out).map_err(|e| Error::io(out, e))?.len();
    result.total_seconds = start.elapsed().as_secs_f64();
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::summarize_dir;

    #[test]
    fn writes_what_it_reads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let csv = dir.path().join("generator.csv");
        std::fs::write(
            &csv,
            "id,key,value,ts\n0,key-1,5,1000\n1,\"key-2\",-7,1001\n",
        )
        .expect("csv");
        let out_dir = dir.path().join("out");
        std::fs::create_dir(&out_dir).expect("mkdir");
        let r = plain_write(Table::Generator, &csv, &out_dir.join("p.parquet")).expect("write");
        assert_eq!(r.rows, 2);
        let s = summarize_dir(&out_dir).expect("summary");
        assert_eq!(s.records, 2);
        assert_eq!(s.sum("value"), Some(-2));
        assert_eq!(s.sum("key"), Some(10));
    }
}
