//! Output formats: JSON lines and CSV (row formats, optionally gzip/zstd) and Parquet (bulk).
//!
//! An [`Encoder`] turns record batches into bytes appended to a part file. Row formats can be
//! persisted mid-file: [`Encoder::end_frame`] ends the current gzip member / zstd frame, so the
//! bytes written so far form a complete compressed stream and writing resumes with a new member
//! after a restore (concatenated gzip members and zstd frames are valid files).

use std::io::Write;
use std::sync::{Arc, Mutex};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, GzipLevel, ZstdLevel};
use parquet::file::properties::WriterProperties;
use streamjob_crds::v1alpha1::{ParquetCompression, RowCompression, SinkFormat};

use crate::error::{Error, Result};

/// What a format is, parsed from the manifest.
#[derive(Clone, Debug, PartialEq)]
pub enum FormatKind {
    /// One JSON object per line.
    JsonLines { compression: RowCompression },
    /// CSV with optional header.
    Csv {
        compression: RowCompression,
        header: bool,
        delimiter: u8,
    },
    /// Parquet with a codec and row-group size.
    Parquet {
        compression: ParquetCompression,
        row_group_size: Option<usize>,
    },
}

impl FormatKind {
    /// Parses the manifest's format (exactly one must be set).
    pub fn from_spec(spec: &SinkFormat) -> Result<Self> {
        match (&spec.json_lines, &spec.csv, &spec.parquet) {
            (Some(j), None, None) => Ok(FormatKind::JsonLines {
                compression: j.compression,
            }),
            (None, Some(c), None) => {
                let d = c.delimiter.as_bytes();
                if d.len() != 1 {
                    return Err(Error::Config(format!(
                        "format.csv.delimiter {:?} must be one ASCII character",
                        c.delimiter
                    )));
                }
                Ok(FormatKind::Csv {
                    compression: c.compression,
                    header: c.header,
                    delimiter: d[0],
                })
            }
            (None, None, Some(p)) => Ok(FormatKind::Parquet {
                compression: p.compression,
                row_group_size: p.row_group_size.map(|n| n as usize),
            }),
            _ => Err(Error::Config(
                "format: set exactly one of jsonLines, csv or parquet".into(),
            )),
        }
    }

    /// Bulk formats roll on every checkpoint (they cannot be persisted mid-file).
    pub fn is_bulk(&self) -> bool {
        matches!(self, FormatKind::Parquet { .. })
    }

    /// The default part-file suffix (`.json`, `.csv.gz`, `.parquet`, ...).
    pub fn default_suffix(&self) -> String {
        let comp = |c: &RowCompression| match c {
            RowCompression::None => "",
            RowCompression::Gzip => ".gz",
            RowCompression::Zstd => ".zst",
        };
        match self {
            FormatKind::JsonLines { compression } => format!(".json{}", comp(compression)),
            FormatKind::Csv { compression, .. } => format!(".csv{}", comp(compression)),
            FormatKind::Parquet { .. } => ".parquet".into(),
        }
    }

    /// A new encoder for a part file. `resumed`: the file already has content (no CSV header).
    pub fn encoder(&self, schema: &SchemaRef, resumed: bool) -> Result<Box<dyn Encoder>> {
        match self {
            FormatKind::JsonLines { compression } => Ok(Box::new(RowEncoder::new(
                RowKind::Json,
                *compression,
                false,
            ))),
            FormatKind::Csv {
                compression,
                header,
                delimiter,
            } => Ok(Box::new(RowEncoder::new(
                RowKind::Csv {
                    delimiter: *delimiter,
                },
                *compression,
                *header && !resumed,
            ))),
            FormatKind::Parquet {
                compression,
                row_group_size,
            } => {
                if resumed {
                    return Err(Error::State("a Parquet part file cannot be resumed".into()));
                }
                Ok(Box::new(ParquetEncoder::new(
                    schema.clone(),
                    *compression,
                    *row_group_size,
                )?))
            }
        }
    }
}

fn decompress(c: RowCompression, data: &[u8]) -> Result<Vec<u8>> {
    use std::io::Read;
    let e = |source| Error::Io {
        op: "decompress",
        path: String::new(),
        source,
    };
    Ok(match c {
        RowCompression::None => data.to_vec(),
        RowCompression::Gzip => {
            let mut out = Vec::new();
            flate2::read::MultiGzDecoder::new(data)
                .read_to_end(&mut out)
                .map_err(e)?;
            out
        }
        RowCompression::Zstd => zstd::decode_all(data).map_err(e)?,
    })
}

impl FormatKind {
    /// Merges whole part files of this format into one (compaction): row formats are
    /// concatenated (CSV headers after the first dropped), Parquet is decoded and re-encoded.
    pub fn merge(&self, schema: &SchemaRef, files: &[bytes::Bytes]) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        match self {
            FormatKind::JsonLines { .. } | FormatKind::Csv { header: false, .. } => {
                // whole files are complete compressed streams: members/frames concatenate
                for f in files {
                    out.extend_from_slice(f);
                }
            }
            FormatKind::Csv {
                compression,
                header: true,
                ..
            } => {
                let mut plain = Vec::new();
                for (i, f) in files.iter().enumerate() {
                    let text = decompress(*compression, f)?;
                    let body = if i == 0 {
                        &text[..]
                    } else {
                        match text.iter().position(|b| *b == b'\n') {
                            Some(nl) => &text[nl + 1..],
                            None => &[][..],
                        }
                    };
                    plain.extend_from_slice(body);
                }
                match Compressor::new(*compression)? {
                    Some(mut c) => {
                        c.write(&plain, &mut out)?;
                        c.finish(&mut out)?;
                    }
                    None => out = plain,
                }
            }
            FormatKind::Parquet { .. } => {
                let mut enc = self.encoder(schema, false)?;
                for f in files {
                    let reader =
                        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                            f.clone(),
                        )?
                        .build()?;
                    for b in reader {
                        enc.write(&b?, &mut out)?;
                    }
                }
                enc.finish(&mut out)?;
            }
        }
        Ok(out)
    }
}

/// Encodes batches into the bytes of one part file.
pub trait Encoder: Send {
    /// Encodes a batch; bytes ready for the file are appended to `out`.
    fn write(&mut self, batch: &RecordBatch, out: &mut Vec<u8>) -> Result<()>;
    /// Makes everything written so far decodable (ends a compression member); row formats only.
    fn end_frame(&mut self, out: &mut Vec<u8>) -> Result<()>;
    /// Ends the file (Parquet footer, last compression member).
    fn finish(self: Box<Self>, out: &mut Vec<u8>) -> Result<()>;
    /// Bytes held in memory that are not yet in `out` (Parquet's open row group).
    fn buffered(&self) -> u64;
}

#[derive(Clone, Copy, Debug)]
enum RowKind {
    Json,
    Csv { delimiter: u8 },
}

enum Compressor {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

impl Compressor {
    fn new(c: RowCompression) -> Result<Option<Self>> {
        Ok(match c {
            RowCompression::None => None,
            RowCompression::Gzip => Some(Compressor::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::default(),
            ))),
            RowCompression::Zstd => Some(Compressor::Zstd(
                zstd::stream::write::Encoder::new(Vec::new(), 3).map_err(|e| Error::Io {
                    op: "zstd",
                    path: String::new(),
                    source: e,
                })?,
            )),
        })
    }

    fn write(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<()> {
        let e = |source| Error::Io {
            op: "compress",
            path: String::new(),
            source,
        };
        match self {
            Compressor::Gzip(g) => {
                g.write_all(data).map_err(e)?;
                out.append(g.get_mut());
            }
            Compressor::Zstd(z) => {
                z.write_all(data).map_err(e)?;
                out.append(z.get_mut());
            }
        }
        Ok(())
    }

    fn finish(self, out: &mut Vec<u8>) -> Result<()> {
        let e = |source| Error::Io {
            op: "compress",
            path: String::new(),
            source,
        };
        let mut rest = match self {
            Compressor::Gzip(g) => g.finish().map_err(e)?,
            Compressor::Zstd(z) => z.finish().map_err(e)?,
        };
        out.append(&mut rest);
        Ok(())
    }
}

struct RowEncoder {
    kind: RowKind,
    compression: RowCompression,
    header: bool,
    compressor: Option<Compressor>,
    scratch: Vec<u8>,
}

impl RowEncoder {
    fn new(kind: RowKind, compression: RowCompression, header: bool) -> Self {
        Self {
            kind,
            compression,
            header,
            compressor: None,
            scratch: Vec::new(),
        }
    }
}

impl Encoder for RowEncoder {
    fn write(&mut self, batch: &RecordBatch, out: &mut Vec<u8>) -> Result<()> {
        self.scratch.clear();
        match self.kind {
            RowKind::Json => {
                let mut w = arrow::json::LineDelimitedWriter::new(&mut self.scratch);
                w.write(batch)?;
                w.finish()?;
            }
            RowKind::Csv { delimiter } => {
                let mut w = arrow::csv::WriterBuilder::new()
                    .with_header(self.header)
                    .with_delimiter(delimiter)
                    .build(&mut self.scratch);
                w.write(batch)?;
                self.header = false;
            }
        }
        if self.compressor.is_none() {
            self.compressor = Compressor::new(self.compression)?;
        }
        match &mut self.compressor {
            Some(c) => c.write(&self.scratch, out),
            None => {
                out.extend_from_slice(&self.scratch);
                Ok(())
            }
        }
    }

    fn end_frame(&mut self, out: &mut Vec<u8>) -> Result<()> {
        match self.compressor.take() {
            Some(c) => c.finish(out),
            None => Ok(()),
        }
    }

    fn finish(mut self: Box<Self>, out: &mut Vec<u8>) -> Result<()> {
        self.end_frame(out)
    }

    fn buffered(&self) -> u64 {
        0
    }
}

/// A `Write` into a shared buffer the sink drains after every write.
#[derive(Clone, Default)]
struct SharedBuf(Arc<Mutex<Vec<u8>>>);

impl SharedBuf {
    fn drain_into(&self, out: &mut Vec<u8>) -> Result<()> {
        let mut g = self
            .0
            .lock()
            .map_err(|_| Error::State("parquet buffer poisoned".into()))?;
        out.append(&mut g);
        Ok(())
    }
}

impl Write for SharedBuf {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut g = self
            .0
            .lock()
            .map_err(|_| std::io::Error::other("parquet buffer poisoned"))?;
        g.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

struct ParquetEncoder {
    writer: ArrowWriter<SharedBuf>,
    buf: SharedBuf,
}

impl ParquetEncoder {
    fn new(
        schema: SchemaRef,
        compression: ParquetCompression,
        row_group_size: Option<usize>,
    ) -> Result<Self> {
        let codec = match compression {
            ParquetCompression::None => Compression::UNCOMPRESSED,
            ParquetCompression::Snappy => Compression::SNAPPY,
            ParquetCompression::Gzip => Compression::GZIP(GzipLevel::default()),
            ParquetCompression::Lz4 => Compression::LZ4_RAW,
            ParquetCompression::Zstd => Compression::ZSTD(ZstdLevel::default()),
        };
        let mut props = WriterProperties::builder().set_compression(codec);
        if let Some(n) = row_group_size {
            props = props.set_max_row_group_row_count(Some(n.max(1)));
        }
        let buf = SharedBuf::default();
        let writer = ArrowWriter::try_new(buf.clone(), schema, Some(props.build()))?;
        Ok(Self { writer, buf })
    }
}

impl Encoder for ParquetEncoder {
    fn write(&mut self, batch: &RecordBatch, out: &mut Vec<u8>) -> Result<()> {
        self.writer.write(batch)?;
        self.buf.drain_into(out)
    }
    fn end_frame(&mut self, _out: &mut Vec<u8>) -> Result<()> {
        Err(Error::State(
            "a Parquet part file cannot be persisted in progress (bulk formats roll on checkpoint)"
                .into(),
        ))
    }
    fn finish(self: Box<Self>, out: &mut Vec<u8>) -> Result<()> {
        let buf = self.buf.clone();
        self.writer.close()?;
        buf.drain_into(out)
    }
    fn buffered(&self) -> u64 {
        self.writer.in_progress_size() as u64
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use std::io::Read;

    fn batch() -> RecordBatch {
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("id", DataType::Int64, false),
                Field::new("s", DataType::Utf8, true),
            ])),
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(StringArray::from(vec![Some("a,b"), None])),
            ],
        )
        .unwrap()
    }

    #[test]
    fn gzip_members_concatenate_across_frames() {
        let f = FormatKind::Csv {
            compression: RowCompression::Gzip,
            header: true,
            delimiter: b',',
        };
        let b = batch();
        let mut out = Vec::new();
        let mut e = f.encoder(&b.schema(), false).unwrap();
        e.write(&b, &mut out).unwrap();
        e.end_frame(&mut out).unwrap();
        // resumed after a restore: new encoder, no header
        let mut e = f.encoder(&b.schema(), true).unwrap();
        e.write(&b, &mut out).unwrap();
        e.finish(&mut out).unwrap();
        let mut s = String::new();
        flate2::read::MultiGzDecoder::new(&out[..])
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "id,s\n1,\"a,b\"\n2,\n1,\"a,b\"\n2,\n");
        assert_eq!(f.default_suffix(), ".csv.gz");
    }

    #[test]
    fn merge_csv_gzip_with_headers_and_parquet() {
        let b = batch();
        let one = |f: &FormatKind| {
            let mut out = Vec::new();
            let mut e = f.encoder(&b.schema(), false).unwrap();
            e.write(&b, &mut out).unwrap();
            e.finish(&mut out).unwrap();
            bytes::Bytes::from(out)
        };
        let csv = FormatKind::Csv {
            compression: RowCompression::Gzip,
            header: true,
            delimiter: b',',
        };
        let merged = csv
            .merge(&b.schema(), &[one(&csv), one(&csv), one(&csv)])
            .unwrap();
        let mut s = String::new();
        flate2::read::MultiGzDecoder::new(&merged[..])
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, format!("id,s\n{}", "1,\"a,b\"\n2,\n".repeat(3)));
        let json = FormatKind::JsonLines {
            compression: RowCompression::Zstd,
        };
        let merged = json.merge(&b.schema(), &[one(&json), one(&json)]).unwrap();
        assert_eq!(
            zstd::decode_all(&merged[..])
                .unwrap()
                .split(|c| *c == b'\n')
                .count(),
            5
        );
        let pq = FormatKind::Parquet {
            compression: ParquetCompression::Snappy,
            row_group_size: None,
        };
        let merged = pq.merge(&b.schema(), &[one(&pq), one(&pq)]).unwrap();
        let rows: usize = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
            bytes::Bytes::from(merged),
        )
        .unwrap()
        .build()
        .unwrap()
        .map(|b| b.unwrap().num_rows())
        .sum();
        assert_eq!(rows, 4);
    }

    #[test]
    fn zstd_json_frames() {
        let f = FormatKind::JsonLines {
            compression: RowCompression::Zstd,
        };
        let b = batch();
        let mut out = Vec::new();
        let mut e = f.encoder(&b.schema(), false).unwrap();
        e.write(&b, &mut out).unwrap();
        e.end_frame(&mut out).unwrap();
        e.write(&b, &mut out).unwrap();
        e.finish(&mut out).unwrap();
        let s = String::from_utf8(zstd::decode_all(&out[..]).unwrap()).unwrap();
        assert_eq!(s.lines().count(), 4);
        assert!(s.starts_with("{\"id\":1,\"s\":\"a,b\"}\n"));
    }

    #[test]
    fn parquet_roundtrip() {
        let f = FormatKind::Parquet {
            compression: ParquetCompression::Zstd,
            row_group_size: Some(1),
        };
        let b = batch();
        let mut out = Vec::new();
        let mut e = f.encoder(&b.schema(), false).unwrap();
        e.write(&b, &mut out).unwrap();
        assert!(e.end_frame(&mut out).is_err());
        e.finish(&mut out).unwrap();
        let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
            bytes::Bytes::from(out),
        )
        .unwrap()
        .build()
        .unwrap();
        let rows: usize = r.map(|b| b.unwrap().num_rows()).sum();
        assert_eq!(rows, 2);
    }
}
