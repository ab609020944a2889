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
use streamjob_crds::v1alpha1::{FieldType, FilesSource as FilesSpec, RowCompression, StorageSpec};

use crate::error::{Error, Result};
use crate::keygroups::{FNV_OFFSET_BASIS, stable_hash};
use crate::operator::{
    Collector, DataBatch, OperatorContext, RestoredState, SourceOperator, SourcePoll,
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
            (Some(fields), _) => Arc::new(Schema::new(
                fields
                    .iter()
                    .map(|f| Field::new(&f.name, arrow_type(f.field_type), f.nullable))
                    .collect::<Vec<_>>(),
            )),
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
                let bytes = location.get(first).await?;
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

async fn list_data_files(loc: &Location) -> Result<Vec<String>> {
    Ok(loc
        .list_files()
        .await?
        .into_iter()
        .map(|(f, _)| f)
        .filter(|f| {
            !f.split('/')
                .any(|part| part.starts_with('.') || part.starts_with('_'))
        })
        .collect())
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SplitState {
    done: BTreeSet<String>,
    current: Option<(String, u64)>,
}

/// A files source subtask.
pub struct FilesSource {
    plan: FilesSourcePlan,
    splits: BTreeMap<u32, SplitState>,
    /// (split, file) queue of discovered files not yet read.
    queue: Vec<(u32, String)>,
    /// The file being read: (split, file, remaining batches, rows emitted).
    reading: Option<(u32, String, Vec<RecordBatch>, u64)>,
    last_discovery: Option<Instant>,
    max_ts: i64,
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
        }
    }

    async fn discover(&mut self, ctx: &OperatorContext) -> Result<()> {
        self.last_discovery = Some(Instant::now());
        let files = list_data_files(&self.plan.location).await?;
        for f in files {
            let split = (stable_hash(f.as_bytes(), FNV_OFFSET_BASIS)
                % u64::from(ctx.max_parallelism)) as u32;
            let Some(state) = self.splits.get(&split) else {
                continue;
            };
            let busy = self.reading.as_ref().is_some_and(|r| r.1 == f)
                || self.queue.iter().any(|q| q.1 == f);
            if !state.done.contains(&f) && !busy {
                self.queue.push((split, f));
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

    fn parse(&self, file: &str, bytes: Bytes, out: &mut Collector) -> Result<Vec<RecordBatch>> {
        let schema = self.plan.schema.clone();
        match &self.plan.format {
            FileFormat::Parquet => {
                let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)?.build()?;
                let mut out_batches = Vec::new();
                for b in reader {
                    out_batches.push(b?);
                }
                Ok(out_batches)
            }
            FileFormat::JsonLines => {
                let whole = arrow::json::ReaderBuilder::new(schema.clone())
                    .build(Cursor::new(bytes.clone()))
                    .and_then(|r| r.collect::<std::result::Result<Vec<_>, _>>());
                match whole {
                    Ok(b) => Ok(b),
                    Err(_) => {
                        // line by line, reporting the bad ones
                        let mut good = Vec::new();
                        for line in bytes.split(|b| *b == b'\n') {
                            if line.iter().all(u8::is_ascii_whitespace) {
                                continue;
                            }
                            let r = arrow::json::ReaderBuilder::new(schema.clone())
                                .build(Cursor::new(line.to_vec()))
                                .and_then(|r| r.collect::<std::result::Result<Vec<_>, _>>());
                            match r {
                                Ok(b) => good.extend(b),
                                Err(e) => out.bad_record(
                                    String::from_utf8_lossy(line).to_string(),
                                    format!("{file}: {e}"),
                                ),
                            }
                        }
                        Ok(good)
                    }
                }
            }
            FileFormat::Csv { header, delimiter } => {
                let r = arrow::csv::ReaderBuilder::new(schema)
                    .with_header(*header)
                    .with_delimiter(*delimiter)
                    .build(Cursor::new(bytes))?;
                let mut v = Vec::new();
                for b in r {
                    match b {
                        Ok(b) => v.push(b),
                        Err(e) => out.bad_record(String::new(), format!("{file}: {e}")),
                    }
                }
                Ok(v)
            }
        }
    }

    fn event_times(&mut self, batch: &RecordBatch) -> Result<Int64Array> {
        match self.plan.event_time_column {
            Some(i) => {
                let col = batch.column(i);
                let c = match col.data_type() {
                    DataType::Timestamp(_, _) => cast(
                        &cast(col, &DataType::Timestamp(TimeUnit::Millisecond, None))?,
                        &DataType::Int64,
                    )?,
                    _ => cast(col, &DataType::Int64)?,
                };
                let a = c.as_primitive::<Int64Type>().clone();
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
            if let Some((split, file, batches, rows)) = &mut self.reading {
                if batches.is_empty() {
                    let (split, file) = (*split, file.clone());
                    if let Some(s) = self.splits.get_mut(&split) {
                        s.done.insert(file);
                        s.current = None;
                    }
                    self.reading = None;
                    continue;
                }
                let batch = batches.remove(0);
                *rows += batch.num_rows() as u64;
                let (split, file, rows) = (*split, file.clone(), *rows);
                if let Some(s) = self.splits.get_mut(&split) {
                    s.current = Some((file, rows));
                }
                let ts = self.event_times(&batch)?;
                let wm = self
                    .max_ts
                    .saturating_sub(self.plan.out_of_orderness_ms + 1);
                return Ok(SourcePoll::Batch(DataBatch::new(batch, ts)?, Some(wm)));
            }
            if !self.queue.is_empty() {
                let (split, file) = self.queue.remove(0);
                let bytes = self.plan.location.get(&file).await?;
                let mut batches = self.parse(&file, bytes, out)?;
                let skip = self
                    .splits
                    .get(&split)
                    .and_then(|s| s.current.as_ref())
                    .filter(|c| c.0 == file)
                    .map_or(0, |c| c.1);
                // drop the rows emitted before the restored position
                let mut to_skip = skip as usize;
                let mut rest = Vec::new();
                for b in batches.drain(..) {
                    if to_skip >= b.num_rows() {
                        to_skip -= b.num_rows();
                    } else {
                        rest.push(b.slice(to_skip, b.num_rows() - to_skip));
                        to_skip = 0;
                    }
                }
                self.reading = Some((split, file, rest, skip));
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
