//! StreamJob manifests expressing the benchmark queries of `bench/README.md` exactly: one CSV
//! file read by one source subtask (parallelism 1, event time from the file, bounded
//! out-of-orderness 0 ms), the pipeline at parallelism P, the exactly-once file sink writing
//! Parquet (zstd) into one flat directory, checkpoints at the given interval.
//!
//! Built from the CRD types and checked with the CRD's own validation, then written as YAML.

use std::path::Path;

use streamjob_crds::v1alpha1::{
    AggregateSpec, BucketAssignerSpec, CheckpointSpec, CsvFormat, EmptySpec, FieldSpec, FieldType,
    FileSinkSpec, FilesSource, NexmarkSource, OutputFileConfig, ParquetCompression, ParquetFormat,
    PipelineStep, PrintSinkSpec, ProjectColumn, RollingPolicySpec, RowCompression, SinkFormat,
    SlidingWindow, SourceFormat, SourceSpec, StreamJob, StreamJobSpec, UpgradeSpec, WatermarkSpec,
    WindowSpec,
};

use crate::error::Result;
use crate::query::{Query, Table};

/// Image recorded in the manifests (local mode does not use it).
pub const IMAGE: &str = "streamjob/runtime:bench";

/// Where a job's files go.
#[derive(Clone, Debug)]
pub struct JobPaths<'a> {
    /// Directory holding only the table's CSV file (the `files` source reads a prefix).
    pub table_dir: &'a Path,
    /// Output directory of the file sink.
    pub output_dir: &'a Path,
    /// Checkpoint directory.
    pub checkpoint_dir: &'a Path,
}

/// `10000` → `10s`, `2500` → `2500ms`.
pub fn duration_ms(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

fn step(uid: &str) -> PipelineStep {
    PipelineStep {
        uid: uid.to_string(),
        ..Default::default()
    }
}

fn col(name: &str, expr: &str) -> ProjectColumn {
    ProjectColumn {
        name: name.to_string(),
        expr: expr.to_string(),
    }
}

fn project(uid: &str, cols: Vec<ProjectColumn>) -> PipelineStep {
    PipelineStep {
        project: Some(cols),
        ..step(uid)
    }
}

/// The window operator emits `window_start`/`window_end` as Arrow `Timestamp(ms, UTC)`; the
/// benchmark's output columns are plain int64 epoch ms (as Flink writes them), so the step after
/// the window casts them (a no-op should the runtime emit int64 itself).
fn window_bounds_as_int64() -> [ProjectColumn; 2] {
    [
        col("window_start", "CAST(window_start AS BIGINT)"),
        col("window_end", "CAST(window_end AS BIGINT)"),
    ]
}

fn csv_source(table: Table, table_dir: &Path) -> PipelineStep {
    PipelineStep {
        // one reader of the one file, as on the Flink side
        parallelism: Some(1),
        source: Some(SourceSpec {
            files: Some(FilesSource {
                path: table_dir.display().to_string(),
                format: SourceFormat {
                    csv: Some(CsvFormat {
                        compression: RowCompression::None,
                        header: true,
                        delimiter: ",".to_string(),
                    }),
                    ..Default::default()
                },
                schema: Some(
                    table
                        .columns()
                        .iter()
                        .map(|(name, t)| FieldSpec {
                            name: (*name).to_string(),
                            field_type: *t,
                            // the runtime's CSV reader (arrow-csv) reads an empty field as null,
                            // and the input has empty `extra` strings: a non-nullable string
                            // column fails the job. Null and "" both count 0 bytes in the checksum.
                            nullable: *t == FieldType::String,
                        })
                        .collect(),
                ),
                discovery_interval: None,
                event_time_field: Some(table.event_time_column().to_string()),
            }),
            watermark: Some(WatermarkSpec {
                max_out_of_orderness: Some("0s".to_string()),
                idle_timeout: None,
            }),
            ..Default::default()
        }),
        ..step("source")
    }
}

fn parquet_sink(output_dir: &Path) -> PipelineStep {
    PipelineStep {
        file_sink: Some(FileSinkSpec {
            path: output_dir.display().to_string(),
            format: SinkFormat {
                parquet: Some(ParquetFormat {
                    compression: ParquetCompression::Zstd,
                    row_group_size: None,
                }),
                ..Default::default()
            },
            bucket_assigner: Some(BucketAssignerSpec {
                base_path: Some(EmptySpec {}),
                ..Default::default()
            }),
            rolling_policy: Some(RollingPolicySpec {
                on_checkpoint: Some(EmptySpec {}),
                ..Default::default()
            }),
            output_file_config: Some(OutputFileConfig {
                part_prefix: "part".to_string(),
                part_suffix: Some(".parquet".to_string()),
            }),
            compaction: None,
            success_marker: None,
        }),
        ..step("sink")
    }
}

fn window_step(
    uid: &str,
    key_by: &[&str],
    window: WindowSpec,
    aggregate: AggregateSpec,
) -> PipelineStep {
    PipelineStep {
        key_by: Some(key_by.iter().map(|k| (*k).to_string()).collect()),
        window: Some(window),
        aggregate: Some(aggregate),
        ..step(uid)
    }
}

fn tumbling(size: &str) -> WindowSpec {
    WindowSpec {
        tumbling: Some(size.to_string()),
        ..Default::default()
    }
}

/// The pipeline steps between source and sink for a query.
fn query_steps(query: Query) -> Vec<PipelineStep> {
    match query {
        Query::Q0 => vec![],
        Query::Q1 => vec![project(
            "to-eur",
            vec![
                col("auction", "auction"),
                col("bidder", "bidder"),
                col("price_eur", "CAST(price AS DOUBLE) * 0.908"),
                col("date_time", "date_time"),
            ],
        )],
        Query::Q2 => vec![
            PipelineStep {
                filter: Some("auction % 123 = 0".to_string()),
                ..step("auction-filter")
            },
            project(
                "auction-price",
                vec![col("auction", "auction"), col("price", "price")],
            ),
        ],
        Query::Q5 => {
            let [ws, we] = window_bounds_as_int64();
            vec![
                project("auction-only", vec![col("auction", "auction")]),
                window_step(
                    "hot-items",
                    &["auction"],
                    WindowSpec {
                        sliding: Some(SlidingWindow {
                            size: "10s".to_string(),
                            slide: "2s".to_string(),
                        }),
                        ..Default::default()
                    },
                    AggregateSpec {
                        count: true,
                        ..Default::default()
                    },
                ),
                project(
                    "q5-columns",
                    vec![col("auction", "auction"), ws, we, col("count", "count")],
                ),
            ]
        }
        Query::Q7 => {
            let [ws, we] = window_bounds_as_int64();
            vec![
                // one global key (Flink: keyBy a constant), as the runtime has no windowAll
                project(
                    "global-key",
                    vec![col("global", "0"), col("price", "price")],
                ),
                window_step(
                    "highest-bid",
                    &["global"],
                    tumbling("10s"),
                    AggregateSpec {
                        max: vec!["price".to_string()],
                        ..Default::default()
                    },
                ),
                project("q7-columns", vec![ws, we, col("max_price", "max_price")]),
            ]
        }
        Query::GenCount => {
            let [ws, we] = window_bounds_as_int64();
            vec![
                project("key-value", vec![col("key", "key"), col("value", "value")]),
                window_step(
                    "per-key",
                    &["key"],
                    tumbling("1s"),
                    AggregateSpec {
                        count: true,
                        sum: vec!["value".to_string()],
                        ..Default::default()
                    },
                ),
                project(
                    "gen-count-columns",
                    vec![
                        col("key", "key"),
                        ws,
                        we,
                        col("count", "count"),
                        col("sum_value", "sum_value"),
                    ],
                ),
            ]
        }
    }
}

fn job(
    name: &str,
    parallelism: u32,
    checkpoint_dir: &Path,
    interval_ms: u64,
    pipeline: Vec<PipelineStep>,
) -> Result<StreamJob> {
    let spec = StreamJobSpec {
        engine: Default::default(),
        flink: None,
        image: IMAGE.to_string(),
        image_pull_policy: None,
        parallelism,
        max_parallelism: 128,
        workers: 0,
        state: Default::default(),
        upgrade: UpgradeSpec::default(),
        checkpoints: CheckpointSpec {
            interval: duration_ms(interval_ms),
            dir: checkpoint_dir.display().to_string(),
            timeout: "10m".to_string(),
            retained: 3,
        },
        savepoints: None,
        initial_savepoint: None,
        storage: None,
        dead_letter_path: None,
        pipeline,
        pod_template: None,
    };
    spec.validate()?;
    Ok(StreamJob::new(name, spec))
}

/// The manifest of `query` at parallelism `p`.
pub fn query_job(
    query: Query,
    parallelism: u32,
    paths: &JobPaths<'_>,
    interval_ms: u64,
) -> Result<StreamJob> {
    let mut pipeline = vec![csv_source(query.table(), paths.table_dir)];
    pipeline.extend(query_steps(query));
    pipeline.push(parquet_sink(paths.output_dir));
    job(
        &format!("bench-{}-p{parallelism}", query.name()),
        parallelism,
        paths.checkpoint_dir,
        interval_ms,
        pipeline,
    )
}

fn print_sink() -> PipelineStep {
    PipelineStep {
        // one JSON line per batch: the cheapest sink the runtime has
        print: Some(PrintSinkSpec { limit: Some(1) }),
        ..step("sink")
    }
}

/// Physical limit: the runtime's Nexmark generator alone (`events` events of all kinds).
pub fn nexmark_limit_job(
    events: u64,
    checkpoint_dir: &Path,
    interval_ms: u64,
) -> Result<StreamJob> {
    let source = PipelineStep {
        parallelism: Some(1),
        source: Some(SourceSpec {
            nexmark: Some(NexmarkSource {
                events: Some(events),
                rate_per_second: None,
                event_kinds: None,
            }),
            watermark: Some(WatermarkSpec {
                max_out_of_orderness: Some("0s".to_string()),
                idle_timeout: None,
            }),
            ..Default::default()
        }),
        ..step("source")
    };
    job(
        "bench-limit-nexmark",
        1,
        checkpoint_dir,
        interval_ms,
        vec![source, print_sink()],
    )
}

/// Physical limit: the runtime's CSV `files` source alone, on the benchmark input.
pub fn csv_source_limit_job(
    table: Table,
    table_dir: &Path,
    checkpoint_dir: &Path,
    interval_ms: u64,
) -> Result<StreamJob> {
    job(
        &format!("bench-limit-csv-{}", table.name()),
        1,
        checkpoint_dir,
        interval_ms,
        vec![csv_source(table, table_dir), print_sink()],
    )
}

/// YAML text of a manifest.
pub fn to_yaml(job: &StreamJob) -> Result<String> {
    Ok(serde_yaml_ng::to_string(job)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_query_manifest_validates_and_round_trips() {
        let paths = JobPaths {
            table_dir: Path::new("/tmp/in/bids"),
            output_dir: Path::new("/tmp/out"),
            checkpoint_dir: Path::new("/tmp/ckpt"),
        };
        for q in Query::ALL {
            for p in [1, 2] {
                let job = query_job(q, p, &paths, 10_000).expect("manifest");
                let yaml = to_yaml(&job).expect("yaml");
                let back = StreamJob::from_yaml(&yaml).expect("parse back");
                assert_eq!(back.spec, job.spec);
                assert_eq!(back.spec.pipeline[0].parallelism, Some(1));
                assert_eq!(back.spec.parallelism, p);
                assert!(yaml.contains("interval: 10s"), "{yaml}");
                assert!(yaml.contains("compression: zstd"), "{yaml}");
                assert!(
                    back.spec
                        .pipeline
                        .last()
                        .is_some_and(|s| s.file_sink.is_some())
                );
            }
        }
    }

    #[test]
    fn limit_manifests_validate() {
        let ck = Path::new("/tmp/ckpt");
        let y = to_yaml(&nexmark_limit_job(1000, ck, 10_000).expect("job")).expect("yaml");
        assert!(StreamJob::from_yaml(&y).is_ok());
        let y = to_yaml(
            &csv_source_limit_job(Table::Generator, Path::new("/tmp/in/g"), ck, 2500).expect("job"),
        )
        .expect("yaml");
        assert!(y.contains("interval: 2500ms"), "{y}");
        assert!(StreamJob::from_yaml(&y).is_ok());
    }

    #[test]
    fn durations() {
        assert_eq!(duration_ms(10_000), "10s");
        assert_eq!(duration_ms(1500), "1500ms");
    }
}
