//! `files` source: JSON lines, CSV or Parquet files under an object-store prefix, read once or
//! discovered continuously. Files are spread over `maxParallelism` splits by a stable hash of
//! their path; the state of a split is the set of finished files and the position (rows emitted)
//! in the file being read.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Cursor;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Array, AsArray, Int64Array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde::{Deserialize, Serialize};
use streamjob_crds::units::parse_duration;
use streamjob_crds::v1alpha1::{
    FieldSpec, FieldType, FilesSource as FilesSpec, RowCompression, StorageSpec,
};

use crate::error::{Error, Result};
use crate::keygroups::{FNV_OFFSET_BASIS, stable_hash};
use crate::operator::{
    Collector, DataBatch, OperatorContext, RecordOrigin, RestoredState, SourceOperator, SourcePoll,
    StateDescriptor, SubtaskSnapshot, decode_state, encode_state,
};
use crate::storage::Location;

/// File format.
#[derive(Clone, Debug)]
pub enum FileFormat {
    JsonLines,
    Csv { header: bool, delimiter: u8 },
    Parquet,
}

/// The planned source.
#[derive(Clone, Debug)]
pub struct FilesSourcePlan {
    pub uid: String,
    pub location: Location,
    pub format: FileFormat,
    pub schema: SchemaRef,
    pub discovery: Option<Duration>,
    pub event_time_column: Option<usize>,
    pub out_of_orderness_ms: i64,
}

/// The Arrow schema of declared columns (files and Kafka sources).
pub(crate) fn schema_of(fields: &[FieldSpec]) -> SchemaRef {
    Arc::new(Schema::new(
        fields
            .iter()
            .map(|f| Field::new(&f.name, arrow_type(f.field_type), f.nullable))
            .collect::<Vec<_>>(),
    ))
}

/// A timestamp or integer column as epoch milliseconds.
pub(crate) fn event_time_millis(col: &dyn Array) -> Result<Int64Array> {
    let c = match col.data_type() {
        DataType::Timestamp(_, _) => cast(
            &cast(col, &DataType::Timestamp(TimeUnit::Millisecond, None))?,
            &DataType::Int64,
        )?,
        _ => cast(col, &DataType::Int64)?,
    };
    Ok(c.as_primitive::<Int64Type>().clone())
}

fn arrow_type(t: FieldType) -> DataType {
    match t {
        FieldType::String => DataType::Utf8,
        FieldType::Int64 => DataType::Int64,
        FieldType::Uint64 => DataType::UInt64,
        FieldType::Float64 => DataType::Float64,
        FieldType::Bool => DataType::Boolean,
        FieldType::Timestamp => DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
    }
}

impl FilesSourcePlan {
    /// Plans the source; Parquet without a declared schema takes the first file's schema.
    pub async fn new(
        uid: &str,
        spec: &FilesSpec,
        storage: Option<&StorageSpec>,
        out_of_orderness_ms: i64,
    ) -> Result<Self> {
        let location = Location::parse(&spec.path, storage)?;
        let format = if let Some(j) = &spec.format.json_lines {
            if j.compression != RowCompression::None {
                return Err(Error::Unsupported(format!(
                    "step {uid:?}: compressed source files"
                )));
            }
            FileFormat::JsonLines
        } else if let Some(c) = &spec.format.csv {
            if c.compression != RowCompression::None {
                return Err(Error::Unsupported(format!(
                    "step {uid:?}: compressed source files"
                )));
            }
            FileFormat::Csv {
                header: c.header,
                delimiter: c.delimiter.bytes().next().unwrap_or(b','),
            }
        } else if spec.format.parquet.is_some() {
            FileFormat::Parquet
        } else {
            return Err(Error::plan(
                uid,
                "files.format: set one of jsonLines, csv, parquet",
            ));
        };
        let schema: SchemaRef = match (&spec.schema, &format) {
            (Some(fields), _) => schema_of(fields),
            (None, FileFormat::Parquet) => {
                let files = list_data_files(&location).await?;
                let first = files.first().ok_or_else(|| {
                    Error::plan(
                        uid,
                        format!(
                            "files.schema is not set and there is no Parquet file under {} to take it from",
                            spec.path
                        ),
                    )
                })?;
                let bytes = location.get(&first.0).await?;
                ParquetRecordBatchReaderBuilder::try_new(bytes)?
                    .schema()
                    .clone()
            }
            (None, _) => {
                return Err(Error::plan(
                    uid,
                    "files.schema is required for JSON lines and CSV files",
                ));
            }
        };
        let event_time_column = match &spec.event_time_field {
            Some(f) => Some(schema.index_of(f).map_err(|_| {
                Error::plan(
                    uid,
                    format!("eventTimeField {f:?} is not a column of the files"),
                )
            })?),
            None => None,
        };
        Ok(Self {
            uid: uid.to_string(),
            location,
            format,
            schema,
            discovery: spec
                .discovery_interval
                .as_ref()
                .map(|d| parse_duration("files.discoveryInterval", d))
                .transpose()?,
            event_time_column,
            out_of_orderness_ms,
        })
    }

    /// State schema.
    pub fn state(&self) -> StateDescriptor {
        StateDescriptor::stateless()
            .field("files", "FileSplitState")
            .keyed("split")
    }
}

async fn list_data_files(loc: &Location) -> Result<Vec<(String, u64)>> {
    Ok(loc
        .list_files()
        .await?
        .into_iter()
        .filter(|(f, _)| {
            !f.split('/')
                .any(|part| part.starts_with('.') || part.starts_with('_'))
        })
        .collect())
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SplitState {
    done: BTreeSet<String>,
    /// The file being read and the rows of it emitted so far.
    current: Option<(String, u64)>,
    /// Row formats: the byte offset of a line start at or before the position in `current`, and
    /// the rows before it, so a restore seeks there instead of re-reading the file from its start
    /// (absent in state written before it existed: the file is then re-read and rows skipped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    resume_at: Option<(u64, u64)>,
}

/// Row-format files are fetched in ranges of this size, cut at the last line end, so memory stays
/// bounded and a checkpoint barrier never waits behind a whole file's parsing.
const CHUNK_BYTES: u64 = 8 << 20;
/// Rows per emitted batch.
const BATCH_ROWS: usize = 8192;

/// Incremental reader of one file.
struct FileReader {
    split: u32,
    file: String,
    size: u64,
    /// Rows of this file emitted so far.
    rows: u64,
    /// Rows still to drop after a restore (they were emitted before the checkpoint).
    skip: u64,
    /// Row formats: offset of the first byte not yet parsed (the start of `carry`).
    line_offset: u64,
    /// Row formats: offset of the next range to fetch.
    next_offset: u64,
    /// Row formats: a line cut by the previous range.
    carry: Vec<u8>,
    /// Where the batches in `pending` start: (byte offset, rows before it).
    chunk_start: (u64, u64),
    pending: std::collections::VecDeque<RecordBatch>,
    parquet: Option<parquet::arrow::arrow_reader::ParquetRecordBatchReader>,
}

/// A files source subtask.
pub struct FilesSource {
    plan: FilesSourcePlan,
    splits: BTreeMap<u32, SplitState>,
    /// (split, file, size) queue of discovered files not yet read.
    queue: Vec<(u32, String, u64)>,
    /// The file being read.
    reading: Option<FileReader>,
    last_discovery: Option<Instant>,
    max_ts: i64,
    /// Range size of row-format reads ([`CHUNK_BYTES`]; small in tests to cut lines everywhere).
    chunk_bytes: u64,
}

impl FilesSource {
    /// A subtask.
    pub fn new(plan: FilesSourcePlan) -> Self {
        Self {
            plan,
            splits: BTreeMap::new(),
            queue: Vec::new(),
            reading: None,
            last_discovery: None,
            max_ts: i64::MIN,
            chunk_bytes: CHUNK_BYTES,
        }
    }

    async fn discover(&mut self, ctx: &OperatorContext) -> Result<()> {
        self.last_discovery = Some(Instant::now());
        let files = list_data_files(&self.plan.location).await?;
        for (f, size) in files {
            let split = (stable_hash(f.as_bytes(), FNV_OFFSET_BASIS)
                % u64::from(ctx.max_parallelism)) as u32;
            let Some(state) = self.splits.get(&split) else {
                continue;
            };
            let busy = self.reading.as_ref().is_some_and(|r| r.file == f)
                || self.queue.iter().any(|q| q.1 == f);
            if !state.done.contains(&f) && !busy {
                self.queue.push((split, f, size));
            }
        }
        // current (partially read) files first, then by name
        let currents: BTreeSet<String> = self
            .splits
            .values()
            .filter_map(|s| s.current.as_ref().map(|c| c.0.clone()))
            .collect();
        self.queue.sort_by(|a, b| {
            (!currents.contains(&a.1), &a.1).cmp(&(!currents.contains(&b.1), &b.1))
        });
        Ok(())
    }

    /// Parses the complete records of a row-format chunk that starts at byte `base` of `file`;
    /// `at_start`: the chunk begins the file (CSV header). A chunk that does not parse as a whole
    /// is parsed again record by record, so a bad record costs only itself: it is reported with
    /// its byte offset and the good records around it are kept.
    fn parse_rows(
        plan: &FilesSourcePlan,
        file: &str,
        bytes: Bytes,
        base: u64,
        at_start: bool,
        out: &mut Collector,
    ) -> Result<Vec<RecordBatch>> {
        let schema = plan.schema.clone();
        let lines = match &plan.format {
            FileFormat::Parquet => {
                return Err(Error::Unsupported(format!(
                    "{file}: Parquet is not a row format"
                )));
            }
            FileFormat::JsonLines => {
                let lines = json_lines(&bytes);
                // one row per line: two objects on a line parse, but are a bad record
                if let Ok(b) = parse_json(&schema, bytes.clone())
                    && b.iter().map(RecordBatch::num_rows).sum::<usize>() == lines.len()
                {
                    return Ok(b);
                }
                lines
            }
            FileFormat::Csv { header, delimiter } => {
                let header = *header && at_start;
                return Self::parse_csv_rows(plan, file, bytes, base, header, *delimiter, out);
            }
        };
        let mut good = Vec::new();
        for (at, raw) in lines {
            let parsed = parse_json(&schema, bytes.slice(at..at + raw));
            let offset = base + at as u64;
            let reason = match parsed {
                Ok(b) if b.iter().map(RecordBatch::num_rows).sum::<usize>() == 1 => {
                    good.extend(b);
                    continue;
                }
                Ok(b) => format!(
                    "{} rows in one record",
                    b.iter().map(RecordBatch::num_rows).sum::<usize>()
                ),
                Err(e) => e.to_string(),
            };
            report_bad(out, file, base, &bytes[at..at + raw], offset, &reason);
        }
        concat_good(&schema, good)
    }

    /// [`Self::parse_rows`] for CSV. Records are split by [`csv_split`] first, so a quote that
    /// is never closed costs its own line only; a record whose quoted field spans lines and does
    /// not parse is cut back to its first line, and the lines after it are read again (a stray
    /// quote closed by a later one).
    fn parse_csv_rows(
        plan: &FilesSourcePlan,
        file: &str,
        bytes: Bytes,
        base: u64,
        header: bool,
        delimiter: u8,
        out: &mut Collector,
    ) -> Result<Vec<RecordBatch>> {
        let schema = &plan.schema;
        // without quotes, records are lines: the `csv` crate and csv_split agree
        if !bytes.contains(&b'"')
            && let Ok(b) = parse_csv(schema, bytes.clone(), header, delimiter)
        {
            return Ok(b);
        }
        let (spans, _) = csv_split::spans(&bytes, delimiter, true);
        let records = spans.len().saturating_sub(usize::from(header));
        if spans
            .iter()
            .all(|s| matches!(s, csv_split::CsvSpan::Record { .. }))
            && let Ok(b) = parse_csv(schema, bytes.clone(), header, delimiter)
            && b.iter().map(RecordBatch::num_rows).sum::<usize>() == records
        {
            return Ok(b);
        }
        let mut good = Vec::new();
        let mut next = match (header, spans.first()) {
            (true, Some(h)) => h.end(),
            _ => 0,
        };
        while let Some(span) = csv_split::next_span(&bytes, next, delimiter, true) {
            next = span.end();
            let (at, len, reason) = match span {
                csv_split::CsvSpan::StrayQuote { start, len, why } => (start, len, why.to_string()),
                csv_split::CsvSpan::Record {
                    start,
                    len,
                    multiline,
                } => match parse_csv(schema, bytes.slice(start..start + len), false, delimiter) {
                    Ok(b) if b.iter().map(RecordBatch::num_rows).sum::<usize>() == 1 => {
                        good.extend(b);
                        continue;
                    }
                    Ok(b) => {
                        let rows = b.iter().map(RecordBatch::num_rows).sum::<usize>();
                        (start, len, format!("{rows} rows in one record"))
                    }
                    Err(e) if multiline => {
                        let first = csv_split::first_line_len(&bytes[start..]);
                        next = start + first;
                        (
                            start,
                            first,
                            format!(
                                "{e} (read as a quoted field over several lines: its first \
                                 line is the bad record, the lines after it are read again)"
                            ),
                        )
                    }
                    Err(e) => (start, len, e.to_string()),
                },
            };
            report_bad(
                out,
                file,
                base,
                &bytes[at..at + len],
                base + at as u64,
                &reason,
            );
        }
        concat_good(schema, good)
    }

    /// Opens a file at the position its split's state records.
    async fn open(
        plan: &FilesSourcePlan,
        state: Option<SplitState>,
        split: u32,
        file: String,
        size: u64,
    ) -> Result<FileReader> {
        let state = state.as_ref();
        let rows = state
            .and_then(|s| s.current.as_ref())
            .filter(|c| c.0 == file)
            .map_or(0, |c| c.1);
        let (offset, rows_before) = match state.and_then(|s| s.resume_at) {
            Some((offset, before)) if rows > 0 && before <= rows && offset <= size => {
                (offset, before)
            }
            _ => (0, 0),
        };
        let parquet = match plan.format {
            FileFormat::Parquet => {
                let bytes = plan.location.get(&file).await?;
                Some(
                    ParquetRecordBatchReaderBuilder::try_new(bytes)?
                        .with_batch_size(BATCH_ROWS)
                        .build()?,
                )
            }
            _ => None,
        };
        Ok(FileReader {
            split,
            file,
            size,
            rows: rows_before,
            skip: rows - rows_before,
            line_offset: offset,
            next_offset: offset,
            carry: Vec::new(),
            chunk_start: (offset, rows_before),
            pending: std::collections::VecDeque::new(),
            parquet,
        })
    }

    /// Refills `reader.pending`; false when the file is exhausted.
    async fn refill(
        plan: &FilesSourcePlan,
        chunk_bytes: u64,
        reader: &mut FileReader,
        out: &mut Collector,
    ) -> Result<bool> {
        if let Some(p) = &mut reader.parquet {
            return match p.next() {
                Some(b) => {
                    reader.pending.push_back(b?);
                    Ok(true)
                }
                None => Ok(false),
            };
        }
        loop {
            if reader.next_offset >= reader.size {
                if reader.carry.iter().all(u8::is_ascii_whitespace) {
                    return Ok(false);
                }
                // the last line has no line end
                let data = Bytes::from(std::mem::take(&mut reader.carry));
                let base = reader.line_offset;
                reader.chunk_start = (reader.line_offset, reader.rows);
                reader.line_offset = reader.size;
                reader.pending.extend(Self::parse_rows(
                    plan,
                    &reader.file,
                    data,
                    base,
                    base == 0,
                    out,
                )?);
                return Ok(true);
            }
            let end = (reader.next_offset + chunk_bytes).min(reader.size);
            let range = plan
                .location
                .get_range(&reader.file, reader.next_offset..end)
                .await?;
            reader.next_offset = end;
            let mut data = std::mem::take(&mut reader.carry);
            data.extend_from_slice(&range);
            let cut = if end == reader.size {
                data.len()
            } else {
                match complete_records(&plan.format, &data) {
                    Some(i) => i,
                    None => {
                        // a record longer than a chunk: fetch more
                        reader.carry = data;
                        continue;
                    }
                }
            };
            reader.carry = data.split_off(cut);
            let base = reader.line_offset;
            reader.chunk_start = (reader.line_offset, reader.rows);
            reader.line_offset += cut as u64;
            reader.pending.extend(Self::parse_rows(
                plan,
                &reader.file,
                Bytes::from(data),
                base,
                base == 0,
                out,
            )?);
            return Ok(true);
        }
    }

    fn event_times(&mut self, batch: &RecordBatch) -> Result<Int64Array> {
        match self.plan.event_time_column {
            Some(i) => {
                let a = event_time_millis(batch.column(i))?;
                for v in a.iter().flatten() {
                    self.max_ts = self.max_ts.max(v);
                }
                Ok(a)
            }
            None => {
                let now = chrono::Utc::now().timestamp_millis();
                self.max_ts = self.max_ts.max(now);
                Ok(Int64Array::from(vec![now; batch.num_rows()]))
            }
        }
    }
}

/// All rows of JSON lines.
fn parse_json(schema: &SchemaRef, bytes: Bytes) -> Result<Vec<RecordBatch>> {
    Ok(arrow::json::ReaderBuilder::new(schema.clone())
        .with_batch_size(BATCH_ROWS)
        .build(Cursor::new(bytes))?
        .collect::<std::result::Result<Vec<_>, _>>()?)
}

/// Hands a bad record of `file` (its raw bytes, at byte `offset`; `base`: its chunk) to the step's
/// `onBadRecord` policy.
fn report_bad(out: &mut Collector, file: &str, base: u64, raw: &[u8], offset: u64, reason: &str) {
    out.bad_record_at(
        RecordOrigin {
            stream: file.to_string(),
            bucket: base,
            offset,
        },
        String::from_utf8_lossy(raw)
            .trim_end_matches(['\r', '\n'])
            .to_string(),
        format!("{file} at byte {offset}: {reason}"),
    );
}

/// The good rows of a chunk parsed record by record, as one batch (none if there are none).
fn concat_good(schema: &SchemaRef, good: Vec<RecordBatch>) -> Result<Vec<RecordBatch>> {
    if good.is_empty() {
        return Ok(good);
    }
    Ok(vec![arrow::compute::concat_batches(schema, &good)?])
}

/// All rows of CSV records.
fn parse_csv(
    schema: &SchemaRef,
    bytes: Bytes,
    header: bool,
    delimiter: u8,
) -> Result<Vec<RecordBatch>> {
    Ok(arrow::csv::ReaderBuilder::new(schema.clone())
        .with_header(header)
        .with_delimiter(delimiter)
        .with_batch_size(BATCH_ROWS)
        .build(Cursor::new(bytes))?
        .collect::<std::result::Result<Vec<_>, _>>()?)
}

/// The length of the complete records at the start of `data` (a chunk that starts at a record
/// boundary and is not the end of its file), or `None` when it holds no complete record. CSV
/// fields in quotes may hold line ends, so with quotes in the chunk the cut is where
/// [`csv_split`] stops deciding (a quoted field still open may close in the next chunk).
fn complete_records(format: &FileFormat, data: &[u8]) -> Option<usize> {
    let last_line_end = || data.iter().rposition(|b| *b == b'\n').map(|i| i + 1);
    match format {
        FileFormat::Csv { delimiter, .. } if data.contains(&b'"') => {
            let (_, decided) = csv_split::spans(data, *delimiter, false);
            (decided > 0).then_some(decided)
        }
        _ => last_line_end(),
    }
}

/// (start, length) of each line that is not blank.
fn json_lines(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    for line in bytes.split_inclusive(|b| *b == b'\n') {
        if !line.iter().all(u8::is_ascii_whitespace) {
            out.push((start, line.len()));
        }
        start += line.len();
    }
    out
}

impl SourceOperator for FilesSource {
    async fn initialize_state(
        &mut self,
        ctx: &OperatorContext,
        restored: RestoredState,
    ) -> Result<()> {
        for split in ctx.key_groups.clone() {
            let s = match restored.keyed.get(&split) {
                Some(b) => decode_state::<SplitState>(&ctx.uid, b)?,
                None => SplitState::default(),
            };
            self.splits.insert(split, s);
        }
        self.discover(ctx).await
    }

    async fn poll_next(
        &mut self,
        ctx: &OperatorContext,
        out: &mut Collector,
    ) -> Result<SourcePoll> {
        loop {
            if let Some(mut reader) = self.reading.take() {
                let Some(mut batch) = reader.pending.pop_front() else {
                    if Self::refill(&self.plan, self.chunk_bytes, &mut reader, out).await? {
                        self.reading = Some(reader);
                    } else if let Some(s) = self.splits.get_mut(&reader.split) {
                        s.done.insert(reader.file);
                        s.current = None;
                        s.resume_at = None;
                    }
                    continue;
                };
                if reader.skip > 0 {
                    // rows emitted before the restored checkpoint
                    let n = batch.num_rows() as u64;
                    let drop = reader.skip.min(n);
                    reader.skip -= drop;
                    reader.rows += drop;
                    if drop == n {
                        self.reading = Some(reader);
                        continue;
                    }
                    batch = batch.slice(drop as usize, (n - drop) as usize);
                }
                reader.rows += batch.num_rows() as u64;
                if let Some(s) = self.splits.get_mut(&reader.split) {
                    s.current = Some((reader.file.clone(), reader.rows));
                    s.resume_at = reader.parquet.is_none().then_some(reader.chunk_start);
                }
                self.reading = Some(reader);
                let ts = self.event_times(&batch)?;
                let wm = self
                    .max_ts
                    .saturating_sub(self.plan.out_of_orderness_ms + 1);
                return Ok(SourcePoll::Batch(DataBatch::new(batch, ts)?, Some(wm)));
            }
            if !self.queue.is_empty() {
                let (split, file, size) = self.queue.remove(0);
                let state = self.splits.get(&split).cloned();
                self.reading = Some(Self::open(&self.plan, state, split, file, size).await?);
                continue;
            }
            match self.plan.discovery {
                None => return Ok(SourcePoll::Finished),
                Some(interval) => {
                    let due = self.last_discovery.is_none_or(|t| t.elapsed() >= interval);
                    if due {
                        self.discover(ctx).await?;
                        if !self.queue.is_empty() {
                            continue;
                        }
                    }
                    return Ok(SourcePoll::Idle(interval.min(Duration::from_millis(200))));
                }
            }
        }
    }

    async fn snapshot_state(
        &mut self,
        _ctx: &OperatorContext,
        _id: u64,
    ) -> Result<SubtaskSnapshot> {
        let mut snap = SubtaskSnapshot::default();
        for (split, s) in &self.splits {
            snap.keyed.insert(*split, encode_state(s)?);
        }
        Ok(snap)
    }
}

mod csv_split;
#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::metrics::OperatorMetrics;
    use streamjob_crds::v1alpha1::{
        BadRecordPolicy, CsvFormat, FieldSpec, RowFormat, SourceFormat,
    };

    fn ctx() -> OperatorContext {
        OperatorContext {
            uid: "in".into(),
            subtask: 0,
            parallelism: 1,
            max_parallelism: 4,
            key_groups: 0..=3,
            bad_record_policy: BadRecordPolicy::Fail,
            input_schema: Arc::new(Schema::empty()),
            metrics: Arc::new(OperatorMetrics::new("in")),
        }
    }

    async fn plan(dir: &std::path::Path, csv: bool) -> FilesSourcePlan {
        let format = if csv {
            SourceFormat {
                csv: Some(CsvFormat::default()),
                ..Default::default()
            }
        } else {
            SourceFormat {
                json_lines: Some(RowFormat::default()),
                ..Default::default()
            }
        };
        let spec = FilesSpec {
            path: dir.to_str().unwrap().to_string(),
            format,
            schema: Some(vec![
                FieldSpec {
                    name: "id".into(),
                    field_type: FieldType::Int64,
                    nullable: false,
                },
                FieldSpec {
                    name: "name".into(),
                    field_type: FieldType::String,
                    nullable: false,
                },
            ]),
            discovery_interval: None,
            event_time_field: Some("id".into()),
        };
        FilesSourcePlan::new("in", &spec, None, 0).await.unwrap()
    }

    /// Two files of `rows` records each (the last line of one without a line end).
    fn write_files(dir: &std::path::Path, rows: i64, csv: bool) -> Vec<i64> {
        let mut ids = Vec::new();
        for (f, base) in [("a", 0i64), ("b", 1_000_000)] {
            let mut text = if csv {
                "id,name\n".to_string()
            } else {
                String::new()
            };
            for i in 0..rows {
                let id = base + i;
                ids.push(id);
                // names of varying length so ranges cut lines at every position
                let name = format!("n{}", "x".repeat((i % 17) as usize));
                if csv {
                    text.push_str(&format!("{id},{name}\n"));
                } else {
                    text.push_str(&format!("{{\"id\":{id},\"name\":\"{name}\"}}\n"));
                }
            }
            if f == "b" {
                text.pop();
            }
            std::fs::write(dir.join(format!("{f}.data")), text).unwrap();
        }
        ids
    }

    async fn source(p: &FilesSourcePlan, restored: RestoredState) -> FilesSource {
        let mut s = FilesSource::new(p.clone());
        s.chunk_bytes = 61;
        s.initialize_state(&ctx(), restored).await.unwrap();
        s
    }

    /// A checkpoint of `s` now, restored into a new subtask.
    async fn checkpoint_and_restore(p: &FilesSourcePlan, s: &mut FilesSource) -> FilesSource {
        let snap = s.snapshot_state(&ctx(), 1).await.unwrap();
        let restored = RestoredState {
            checkpoint_id: Some(1),
            keyed: snap.keyed,
            ..Default::default()
        };
        source(p, restored).await
    }

    /// Polls up to `limit` batches; the ids read, and whether the source finished.
    async fn read(s: &mut FilesSource, limit: usize) -> (Vec<i64>, bool) {
        let mut ids = Vec::new();
        let mut out = Collector::default();
        for _ in 0..limit {
            match s.poll_next(&ctx(), &mut out).await.unwrap() {
                SourcePoll::Batch(b, _) => {
                    let col = b.records.column(0).as_primitive::<Int64Type>();
                    ids.extend(col.values().iter().copied());
                }
                SourcePoll::Finished => return (ids, true),
                SourcePoll::Idle(_) => unreachable!("no discovery"),
            }
        }
        assert!(out.bad_records.is_empty(), "{:?}", out.bad_records);
        (ids, false)
    }

    async fn restore_everywhere(csv: bool) {
        let dir = tempfile::tempdir().unwrap();
        let expected = write_files(dir.path(), 300, csv);
        let p = plan(dir.path(), csv).await;
        let mut s = source(&p, RestoredState::default()).await;
        let (all, done) = read(&mut s, usize::MAX).await;
        assert!(done);
        assert_eq!(all, expected, "one pass reads every record once, in order");
        // a checkpoint after every number of batches: restore, read on, compare
        for cut in [1, 2, 5, 13, 40, 90] {
            let mut s = source(&p, RestoredState::default()).await;
            let (mut ids, done) = read(&mut s, cut).await;
            if done {
                continue;
            }
            let mut r = checkpoint_and_restore(&p, &mut s).await;
            let (rest, done) = read(&mut r, usize::MAX).await;
            assert!(done);
            ids.extend(rest);
            assert_eq!(ids, expected, "restore after {cut} batches");
        }
    }

    /// One file of good rows with bad ones mixed in (and, in CSV, quoted line ends in good
    /// rows): the ids of the good rows and the byte offsets of the bad ones.
    fn write_mixed(dir: &std::path::Path, csv: bool) -> (Vec<i64>, BTreeSet<u64>) {
        let mut text = if csv {
            "id,name\n".to_string()
        } else {
            String::new()
        };
        let (mut good, mut bad) = (Vec::new(), BTreeSet::new());
        for i in 0..200i64 {
            let line = match (i % 23, csv) {
                (5, true) => "x,abc\n".to_string(),
                (11, true) => format!("{i}\n"),
                (17, true) => format!("{i},a,b\n"),
                (5, false) => "not json\n".to_string(),
                (11, false) => format!("{{\"id\":\"s{i}\",\"name\":\"a\"}}\n"),
                (17, false) => {
                    format!("{{\"id\":{i},\"name\":\"a\"}} {{\"id\":{i},\"name\":\"b\"}}\n")
                }
                (3 | 8 | 14 | 20, true) => format!("{i},\"two\nlines\"\n"),
                (_, true) => format!("{i},n{i}\n"),
                (_, false) => format!("{{\"id\":{i},\"name\":\"n{i}\"}}\n"),
            };
            if matches!(i % 23, 5 | 11 | 17) {
                bad.insert(text.len() as u64);
            } else {
                good.push(i);
            }
            text.push_str(&line);
        }
        std::fs::write(dir.join("m.data"), text).unwrap();
        (good, bad)
    }

    /// Reads up to `limit` batches: the ids read, the offsets of the bad records reported, and
    /// whether the source finished.
    async fn read_mixed(s: &mut FilesSource, limit: usize) -> (Vec<i64>, Vec<u64>, bool) {
        let (mut ids, mut out) = (Vec::new(), Collector::default());
        let mut done = false;
        for _ in 0..limit {
            match s.poll_next(&ctx(), &mut out).await.unwrap() {
                SourcePoll::Batch(b, _) => {
                    let col = b.records.column(0).as_primitive::<Int64Type>();
                    ids.extend(col.values().iter().copied());
                }
                SourcePoll::Finished => {
                    done = true;
                    break;
                }
                SourcePoll::Idle(_) => unreachable!("no discovery"),
            }
        }
        for b in &out.bad_records {
            let o = b.origin.as_ref().unwrap();
            assert_eq!(o.stream, "m.data");
            assert!(
                b.reason
                    .starts_with(&format!("m.data at byte {}: ", o.offset)),
                "{b:?}"
            );
            assert!(!b.record.is_empty() && !b.record.ends_with('\n'), "{b:?}");
        }
        let bad = out
            .bad_records
            .iter()
            .map(|b| b.origin.as_ref().unwrap().offset);
        (ids, bad.collect(), done)
    }

    async fn bad_records_one_by_one(csv: bool) {
        let dir = tempfile::tempdir().unwrap();
        let (good, bad) = write_mixed(dir.path(), csv);
        let p = plan(dir.path(), csv).await;
        let mut s = source(&p, RestoredState::default()).await;
        let (ids, reported, done) = read_mixed(&mut s, usize::MAX).await;
        assert!(done);
        assert_eq!(ids, good, "every good record once, in order");
        assert_eq!(reported.iter().copied().collect::<BTreeSet<_>>(), bad);
        assert_eq!(reported.len(), bad.len(), "each bad record reported once");
        // a restore re-reads from the start of the chunk it was in: every good record still
        // once, and each bad record reported again at the same offset (dead letters merge them)
        for cut in [1, 3, 7, 20, 60] {
            let mut s = source(&p, RestoredState::default()).await;
            let (mut ids, mut reported, done) = read_mixed(&mut s, cut).await;
            if done {
                continue;
            }
            let mut r = checkpoint_and_restore(&p, &mut s).await;
            let (rest, again, done) = read_mixed(&mut r, usize::MAX).await;
            assert!(done);
            ids.extend(rest);
            reported.extend(again);
            assert_eq!(ids, good, "restore after {cut} batches");
            assert_eq!(
                reported.into_iter().collect::<BTreeSet<_>>(),
                bad,
                "cut {cut}"
            );
        }
    }

    #[tokio::test]
    async fn csv_bad_records_cost_only_themselves_across_restores() {
        bad_records_one_by_one(true).await;
    }

    /// 2,000 rows with stray quotes at the start, in the middle and at the end, one closed by a
    /// later field's quote, and good rows with quoted line ends: every good row is read once
    /// (whole and across restores) and each stray quote costs its own line.
    #[tokio::test]
    async fn csv_stray_quotes_cost_only_their_own_line() {
        let dir = tempfile::tempdir().unwrap();
        let mut text = "id,name\n".to_string();
        let (mut good, mut bad) = (Vec::new(), BTreeSet::new());
        for i in 0..2000i64 {
            let stray = matches!(i, 0 | 777 | 1500 | 1999);
            if stray {
                bad.insert(text.len() as u64);
            } else {
                good.push(i);
            }
            text.push_str(&match i {
                _ if stray => format!("{i},\"unterminated\n"),
                // 1503 closes the quote of 1500 if nothing resynchronises
                1503 => format!("{i},\"two\nlines\"\n"),
                _ if i % 100 == 50 => format!("{i},\"a, b\r\nand \"\"c\"\"\"\n"),
                _ => format!("{i},n{i}\n"),
            });
        }
        std::fs::write(dir.path().join("m.data"), &text).unwrap();
        let p = plan(dir.path(), true).await;
        let mut s = source(&p, RestoredState::default()).await;
        let (ids, reported, done) = read_mixed(&mut s, usize::MAX).await;
        assert!(done);
        assert_eq!(ids.len(), 1996);
        assert_eq!(ids, good, "every good row once, in order");
        assert_eq!(reported.iter().copied().collect::<BTreeSet<_>>(), bad);
        assert_eq!(reported.len(), bad.len(), "each stray quote reported once");
        for cut in [1, 10, 100] {
            let mut s = source(&p, RestoredState::default()).await;
            let (mut ids, _, done) = read_mixed(&mut s, cut).await;
            assert!(!done);
            let mut r = checkpoint_and_restore(&p, &mut s).await;
            let (rest, _, done) = read_mixed(&mut r, usize::MAX).await;
            assert!(done);
            ids.extend(rest);
            assert_eq!(ids, good, "restore after {cut} batches");
        }
    }

    #[tokio::test]
    async fn json_bad_records_cost_only_themselves_across_restores() {
        bad_records_one_by_one(false).await;
    }

    #[tokio::test]
    async fn csv_in_ranges_restores_at_every_cut_exactly_once() {
        restore_everywhere(true).await;
    }

    #[tokio::test]
    async fn json_lines_in_ranges_restores_at_every_cut_exactly_once() {
        restore_everywhere(false).await;
    }

    #[tokio::test]
    async fn state_without_resume_offset_rereads_and_skips() {
        let dir = tempfile::tempdir().unwrap();
        let expected = write_files(dir.path(), 50, true);
        let p = plan(dir.path(), true).await;
        let mut s = source(&p, RestoredState::default()).await;
        let (mut ids, _) = read(&mut s, 3).await;
        let mut snap = s.snapshot_state(&ctx(), 1).await.unwrap();
        // state as written before `resumeAt` existed
        for v in snap.keyed.values_mut() {
            let mut st: SplitState = decode_state("in", v).unwrap();
            st.resume_at = None;
            *v = encode_state(&st).unwrap();
        }
        let restored = RestoredState {
            checkpoint_id: Some(1),
            keyed: snap.keyed,
            ..Default::default()
        };
        let mut r = source(&p, restored).await;
        ids.extend(read(&mut r, usize::MAX).await.0);
        assert_eq!(ids, expected);
    }
}
