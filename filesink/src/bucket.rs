//! Bucket assigners: which sub-directory of the base path a record goes to.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array};
use arrow::compute::cast;
use arrow::datatypes::{DataType, TimeUnit, TimestampMillisecondType};
use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use chrono::format::{Item, StrftimeItems};
use chrono::{DateTime, FixedOffset};
use streamjob_crds::v1alpha1::{BucketAssignerSpec, BucketTime};

use crate::error::{Error, Result};

/// Hive's directory name for a null partition value.
pub const HIVE_NULL: &str = "__HIVE_DEFAULT_PARTITION__";

/// Rows of one bucket in a batch: bucket id, row indices, earliest event time (event-time buckets).
pub type BucketRows = (String, Vec<u32>, Option<i64>);

/// Where event-time buckets find each record's event time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventTime<'a> {
    /// Nowhere: `time: event` is refused.
    Missing,
    /// In a column of the records.
    Column(&'a str),
    /// Beside each batch, as the runtime carries it ([`crate::FileSink::write_timed`]).
    BesideBatches,
}

/// Maps records to bucket ids (relative directories, `""` for the base path itself).
#[derive(Clone, Debug)]
pub enum BucketAssigner {
    /// One bucket per formatted date-time.
    DateTime {
        /// strftime format.
        format: String,
        /// Time zone.
        offset: FixedOffset,
        /// Event time (from `event_time_column`) or processing time.
        time: BucketTime,
        /// Column holding the event time (timestamp of any unit, or Int64 epoch milliseconds);
        /// `None`: the event times come beside each batch ([`BucketAssigner::assign_timed`]).
        event_time_column: Option<String>,
    },
    /// Everything into the base path.
    BasePath,
    /// Hive-style `k=v` directories, one level per field.
    Field {
        /// Columns, outermost first.
        fields: Vec<String>,
    },
}

/// Parses `UTC`, `Z` or a fixed offset such as `+02:00`, `-0530`, `+02`.
pub fn parse_timezone(tz: &str) -> Result<FixedOffset> {
    let bad = || {
        Error::Config(format!(
            "timezone {tz:?}: use UTC or a fixed offset like +02:00"
        ))
    };
    let t = tz.trim();
    if t.eq_ignore_ascii_case("utc") || t == "Z" || t.eq_ignore_ascii_case("gmt") {
        return FixedOffset::east_opt(0).ok_or_else(bad);
    }
    let t = t
        .strip_prefix("UTC")
        .or_else(|| t.strip_prefix("GMT"))
        .unwrap_or(t);
    let (sign, rest) = match t.as_bytes().first() {
        Some(b'+') => (1, &t[1..]),
        Some(b'-') => (-1, &t[1..]),
        _ => return Err(bad()),
    };
    let digits: String = rest.chars().filter(|c| *c != ':').collect();
    if digits.is_empty() || digits.len() > 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let (h, m) = if digits.len() <= 2 {
        (digits.parse::<i32>().map_err(|_| bad())?, 0)
    } else {
        let (h, m) = digits.split_at(digits.len() - 2);
        (
            h.parse::<i32>().map_err(|_| bad())?,
            m.parse::<i32>().map_err(|_| bad())?,
        )
    };
    if h > 18 || m > 59 {
        return Err(bad());
    }
    FixedOffset::east_opt(sign * (h * 3600 + m * 60)).ok_or_else(bad)
}

/// Escapes a partition value the way Hive does (`/`, `=`, `%`, control characters, ...).
pub fn escape_partition_value(v: &str) -> String {
    if v.is_empty() {
        return HIVE_NULL.to_string();
    }
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        let needs = c.is_control()
            || matches!(
                c,
                '"' | '#' | '%' | '\'' | '*' | '/' | ':' | '=' | '?' | '\\' | '{' | '[' | ']' | '^'
            );
        if needs {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl BucketAssigner {
    /// Builds the assigner of a manifest (default: processing-time date-time buckets).
    /// `time: event` needs an `event_time` other than [`EventTime::Missing`].
    pub fn from_spec(spec: Option<&BucketAssignerSpec>, event_time: EventTime<'_>) -> Result<Self> {
        let default_dt = streamjob_crds::v1alpha1::DateTimeBucketAssigner::default();
        let spec_dt = match spec {
            None => Some(&default_dt),
            Some(s) => {
                let set = [
                    s.date_time.is_some(),
                    s.base_path.is_some(),
                    s.field.is_some(),
                ]
                .iter()
                .filter(|x| **x)
                .count();
                if set != 1 {
                    return Err(Error::Config(
                        "bucketAssigner: set exactly one of dateTime, basePath or field".into(),
                    ));
                }
                if s.base_path.is_some() {
                    return Ok(BucketAssigner::BasePath);
                }
                if let Some(f) = &s.field {
                    if f.fields.is_empty() {
                        return Err(Error::Config("bucketAssigner.field.fields is empty".into()));
                    }
                    return Ok(BucketAssigner::Field {
                        fields: f.fields.clone(),
                    });
                }
                s.date_time.as_ref()
            }
        };
        let dt = spec_dt.ok_or_else(|| Error::Config("bucketAssigner: nothing set".into()))?;
        if StrftimeItems::new(&dt.format).any(|i| matches!(i, Item::Error)) {
            return Err(Error::Config(format!(
                "bucketAssigner.dateTime.format {:?} is not a valid strftime format",
                dt.format
            )));
        }
        let event_time_column = match event_time {
            EventTime::Column(name) => Some(name.to_string()),
            EventTime::Missing | EventTime::BesideBatches => None,
        };
        if dt.time == BucketTime::Event && event_time == EventTime::Missing {
            return Err(Error::Config(
                "bucketAssigner.dateTime.time is event but the pipeline has no event-time column"
                    .into(),
            ));
        }
        Ok(BucketAssigner::DateTime {
            format: dt.format.clone(),
            offset: parse_timezone(&dt.timezone)?,
            time: dt.time,
            event_time_column,
        })
    }

    /// Whether buckets are event-time date-time buckets (these can be closed by watermarks).
    pub fn is_event_time(&self) -> bool {
        matches!(
            self,
            BucketAssigner::DateTime {
                time: BucketTime::Event,
                ..
            }
        )
    }

    /// The date-time bucket of an instant (epoch milliseconds); `None` for other assigners.
    pub fn bucket_of_time(&self, millis: i64) -> Option<String> {
        match self {
            BucketAssigner::DateTime { format, offset, .. } => {
                let t = DateTime::from_timestamp_millis(millis)?.with_timezone(offset);
                Some(t.format(format).to_string())
            }
            _ => None,
        }
    }

    /// Groups the rows of `batch` by bucket: `(bucket id, row indices, min event time)` in order
    /// of first appearance; row order inside a bucket is kept.
    pub fn assign(&self, batch: &RecordBatch, processing_time: i64) -> Result<Vec<BucketRows>> {
        self.assign_timed(batch, None, processing_time)
    }

    /// [`BucketAssigner::assign`] with the event time of each row beside the batch (epoch
    /// milliseconds), for event-time buckets without an event-time column.
    pub fn assign_timed(
        &self,
        batch: &RecordBatch,
        event_times: Option<&Int64Array>,
        processing_time: i64,
    ) -> Result<Vec<BucketRows>> {
        let n = batch.num_rows();
        let all = || (0..n as u32).collect::<Vec<u32>>();
        match self {
            BucketAssigner::BasePath => Ok(vec![(String::new(), all(), None)]),
            BucketAssigner::DateTime {
                time: BucketTime::Processing,
                ..
            } => {
                let id = self.bucket_of_time(processing_time).ok_or_else(|| {
                    Error::State(format!("processing time {processing_time} out of range"))
                })?;
                Ok(vec![(id, all(), None)])
            }
            BucketAssigner::DateTime {
                event_time_column, ..
            } => {
                let ms: ArrayRef = match (event_time_column, event_times) {
                    (Some(name), _) => {
                        let col = batch.column_by_name(name).ok_or_else(|| {
                            Error::Config(format!("event-time column {name:?} not in the batch"))
                        })?;
                        col.clone()
                    }
                    (None, Some(times)) if times.len() == n => Arc::new(times.clone()),
                    (None, Some(times)) => {
                        return Err(Error::State(format!(
                            "{} event times beside a batch of {n} rows",
                            times.len()
                        )));
                    }
                    (None, None) => {
                        return Err(Error::State(
                            "event-time buckets: the batch came without event times".into(),
                        ));
                    }
                };
                let ms = match ms.data_type() {
                    DataType::Timestamp(TimeUnit::Millisecond, None) => ms,
                    _ => cast(&ms, &DataType::Timestamp(TimeUnit::Millisecond, None))?,
                };
                let ms = ms.as_primitive::<TimestampMillisecondType>();
                let mut groups: Vec<BucketRows> = Vec::new();
                let mut index: HashMap<String, usize> = HashMap::new();
                for i in 0..n {
                    let t = if ms.is_null(i) {
                        processing_time
                    } else {
                        ms.value(i)
                    };
                    let id = self
                        .bucket_of_time(t)
                        .ok_or_else(|| Error::State(format!("event time {t} out of range")))?;
                    let g = match index.get(&id) {
                        Some(g) => *g,
                        None => {
                            index.insert(id.clone(), groups.len());
                            groups.push((id, Vec::new(), None));
                            groups.len() - 1
                        }
                    };
                    groups[g].1.push(i as u32);
                    groups[g].2 = Some(groups[g].2.map_or(t, |m: i64| m.min(t)));
                }
                Ok(groups)
            }
            BucketAssigner::Field { fields } => {
                let opts = FormatOptions::default();
                let cols = fields
                    .iter()
                    .map(|f| {
                        batch.column_by_name(f).ok_or_else(|| {
                            Error::Config(format!("bucket field {f:?} not in the batch"))
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                let fmts = cols
                    .iter()
                    .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                let mut groups: Vec<BucketRows> = Vec::new();
                let mut index: HashMap<String, usize> = HashMap::new();
                for i in 0..n {
                    let mut id = String::new();
                    for (k, (f, c)) in fields.iter().zip(cols.iter()).enumerate() {
                        if k > 0 {
                            id.push('/');
                        }
                        let v = if c.is_null(i) {
                            HIVE_NULL.to_string()
                        } else {
                            escape_partition_value(&fmts[k].value(i).to_string())
                        };
                        id.push_str(&escape_partition_value(f));
                        id.push('=');
                        id.push_str(&v);
                    }
                    let g = match index.get(&id) {
                        Some(g) => *g,
                        None => {
                            index.insert(id.clone(), groups.len());
                            groups.push((id, Vec::new(), None));
                            groups.len() - 1
                        }
                    };
                    groups[g].1.push(i as u32);
                }
                Ok(groups)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use arrow::array::{Int64Array, StringArray, TimestampMicrosecondArray};
    use arrow::datatypes::{Field, Schema};
    use std::sync::Arc;
    use streamjob_crds::v1alpha1::{DateTimeBucketAssigner, EmptySpec, FieldBucketAssigner};

    fn dt_spec(format: &str, tz: &str, time: BucketTime) -> BucketAssignerSpec {
        BucketAssignerSpec {
            date_time: Some(DateTimeBucketAssigner {
                format: format.into(),
                timezone: tz.into(),
                time,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn timezones() {
        assert_eq!(parse_timezone("UTC").unwrap().local_minus_utc(), 0);
        assert_eq!(parse_timezone("+02:00").unwrap().local_minus_utc(), 7200);
        assert_eq!(parse_timezone("-0530").unwrap().local_minus_utc(), -19800);
        assert_eq!(parse_timezone("+05").unwrap().local_minus_utc(), 18000);
        assert!(parse_timezone("Europe/Paris").is_err());
        assert!(parse_timezone("+25:00").is_err());
    }

    #[test]
    fn default_is_processing_time_hourly_utc() {
        let a = BucketAssigner::from_spec(None, EventTime::Missing).unwrap();
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)])),
            vec![Arc::new(Int64Array::from(vec![1, 2]))],
        )
        .unwrap();
        // 2024-03-01T13:45:00Z
        let g = a.assign(&batch, 1_709_300_700_000).unwrap();
        assert_eq!(g, vec![("2024-03-01--13".to_string(), vec![0, 1], None)]);
    }

    #[test]
    fn event_times_beside_the_batch_as_the_runtime_carries_them() {
        let a = BucketAssigner::from_spec(
            Some(&dt_spec("%Y%m%d/%H", "UTC", BucketTime::Event)),
            EventTime::BesideBatches,
        )
        .unwrap();
        let batch = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)])),
            vec![Arc::new(Int64Array::from(vec![1, 2, 3]))],
        )
        .unwrap();
        // 23:30Z, 00:10Z next day, 23:59Z
        let times = Int64Array::from(vec![
            1_709_335_800_000,
            1_709_338_200_000,
            1_709_337_540_000,
        ]);
        let g = a.assign_timed(&batch, Some(&times), 0).unwrap();
        assert_eq!(
            g,
            vec![
                (
                    "20240301/23".to_string(),
                    vec![0, 2],
                    Some(1_709_335_800_000)
                ),
                ("20240302/00".to_string(), vec![1], Some(1_709_338_200_000)),
            ]
        );
        assert!(a.assign(&batch, 0).is_err(), "no event times, no buckets");
        let short = Int64Array::from(vec![1_709_335_800_000]);
        assert!(a.assign_timed(&batch, Some(&short), 0).is_err());
    }

    #[test]
    fn event_time_with_offset_and_micro_timestamps() {
        let a = BucketAssigner::from_spec(
            Some(&dt_spec("%Y%m%d/%H", "+02:00", BucketTime::Event)),
            EventTime::Column("ts"),
        )
        .unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            true,
        )]));
        // 23:30Z, 00:10Z next day, null (processing time), 23:59Z
        let batch = RecordBatch::try_new(
            schema,
            vec![Arc::new(TimestampMicrosecondArray::from(vec![
                Some(1_709_335_800_000_000),
                Some(1_709_338_200_000_000),
                None,
                Some(1_709_337_540_000_000),
            ]))],
        )
        .unwrap();
        let g = a.assign(&batch, 0).unwrap();
        let ids: Vec<_> = g.iter().map(|(b, r, _)| (b.as_str(), r.clone())).collect();
        assert_eq!(
            ids,
            vec![
                ("20240302/01", vec![0, 3]),
                ("20240302/02", vec![1]),
                ("19700101/02", vec![2]),
            ]
        );
        assert_eq!(g[0].2, Some(1_709_335_800_000));
        assert!(
            BucketAssigner::from_spec(
                Some(&dt_spec("%Y", "UTC", BucketTime::Event)),
                EventTime::Missing
            )
            .is_err()
        );
        assert!(
            BucketAssigner::from_spec(
                Some(&dt_spec("%Q", "UTC", BucketTime::Processing)),
                EventTime::Missing
            )
            .is_err()
        );
    }

    #[test]
    fn field_buckets_hive_style() {
        let spec = BucketAssignerSpec {
            field: Some(FieldBucketAssigner {
                fields: vec!["country".into(), "n".into()],
            }),
            ..Default::default()
        };
        let a = BucketAssigner::from_spec(Some(&spec), EventTime::Missing).unwrap();
        let schema = Arc::new(Schema::new(vec![
            Field::new("country", DataType::Utf8, true),
            Field::new("n", DataType::Int64, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec![
                    Some("fr"),
                    Some("a/b"),
                    None,
                    Some("fr"),
                ])),
                Arc::new(Int64Array::from(vec![Some(1), Some(2), Some(3), Some(1)])),
            ],
        )
        .unwrap();
        let g = a.assign(&batch, 0).unwrap();
        let ids: Vec<_> = g.iter().map(|(b, r, _)| (b.as_str(), r.clone())).collect();
        assert_eq!(
            ids,
            vec![
                ("country=fr/n=1", vec![0, 3]),
                ("country=a%2Fb/n=2", vec![1]),
                ("country=__HIVE_DEFAULT_PARTITION__/n=3", vec![2]),
            ]
        );
        let base = BucketAssigner::from_spec(
            Some(&BucketAssignerSpec {
                base_path: Some(EmptySpec {}),
                ..Default::default()
            }),
            EventTime::Missing,
        )
        .unwrap();
        assert_eq!(base.assign(&batch, 0).unwrap()[0].0, "");
        let both = BucketAssignerSpec {
            base_path: Some(EmptySpec {}),
            field: spec.field.clone(),
            ..Default::default()
        };
        assert!(BucketAssigner::from_spec(Some(&both), EventTime::Missing).is_err());
    }
}
