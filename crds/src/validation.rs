//! Rust-side validation: every rule the CRD's schema and CEL rules enforce, plus what they cannot
//! (durations and sizes parsed, cross-field references). The runtime runs it before it starts a job;
//! the operator runs it before it acts and turns failures into a condition, never a crash loop.

use std::collections::BTreeSet;

use crate::units::{parse_duration, parse_size};
use crate::v1alpha1::{
    AggregateSpec, EngineKind, FileSinkSpec, KafkaSecurityProtocol, KafkaSource,
    KafkaStartingOffsets, RowCompression, SourceSpec, StreamJob, StreamJobSpec, UpgradeStrategy,
    WindowSpec,
};
use crate::{Error, Result};

pub use crate::kinds::{SourceKind, StepKind};

impl StreamJob {
    /// Reads a StreamJob manifest (YAML or JSON) and checks its apiVersion and kind.
    pub fn from_yaml(text: &str) -> Result<StreamJob> {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct TypeMeta {
            #[serde(default)]
            api_version: String,
            #[serde(default)]
            kind: String,
        }
        let meta: TypeMeta = serde_yaml_ng::from_str(text)?;
        if meta.api_version != crate::v1alpha1::API_VERSION || meta.kind != crate::v1alpha1::KIND {
            return Err(Error::WrongKind {
                api_version: meta.api_version,
                kind: meta.kind,
            });
        }
        Ok(serde_yaml_ng::from_str(text)?)
    }
}

impl StreamJobSpec {
    /// Directory savepoints go to: `savepoints.dir`, else `<checkpoints.dir>/savepoints`.
    pub fn savepoint_dir(&self) -> String {
        self.savepoints
            .as_ref()
            .and_then(|s| s.dir.clone())
            .unwrap_or_else(|| format!("{}/savepoints", self.checkpoints.dir.trim_end_matches('/')))
    }

    /// Every pod template of the spec with its field: `spec.podTemplate` (every pod), then the
    /// Flink roles' (`spec.flink.jobManager.podTemplate`, `spec.flink.taskManager.podTemplate`).
    pub fn pod_templates(&self) -> Vec<(&'static str, &crate::pod_template::PodTemplate)> {
        let flink = self.flink.as_ref();
        [
            ("spec.podTemplate", self.pod_template.as_ref()),
            (
                "spec.flink.jobManager.podTemplate",
                flink.and_then(|f| f.job_manager.pod_template.as_ref()),
            ),
            (
                "spec.flink.taskManager.podTemplate",
                flink.and_then(|f| f.task_manager.pod_template.as_ref()),
            ),
        ]
        .into_iter()
        .filter_map(|(at, t)| Some((at, t?)))
        .collect()
    }

    /// Checks the whole spec and lists every broken rule, each naming its field and what to do.
    pub fn validate(&self) -> Result<()> {
        let mut problems = Vec::new();
        let mut push = |result: Result<()>| collect(&mut problems, result);

        if self.image.trim().is_empty() {
            push(invalid(
                "spec.image: must not be empty: set the runtime image",
            ));
        }
        if self.parallelism == 0 {
            push(invalid("spec.parallelism: must be at least 1"));
        }
        for (at, t) in self.pod_templates() {
            push(t.parse_at(at).map(|_| ()));
        }
        if self.max_parallelism == 0 || self.max_parallelism > 32768 {
            push(invalid("spec.maxParallelism: must be between 1 and 32768"));
        }
        if self.max_parallelism < self.parallelism {
            push(invalid(
                "spec.maxParallelism must be at least spec.parallelism: raise maxParallelism or lower parallelism",
            ));
        }
        let widest = self
            .pipeline
            .iter()
            .map(|s| s.parallelism.unwrap_or(self.parallelism))
            .chain([self.parallelism])
            .max()
            .unwrap_or(1);
        if self.workers > 1024 {
            push(invalid("spec.workers: must be at most 1024"));
        } else if self.workers > widest {
            push(invalid(&format!(
                "spec.workers ({}) exceeds the largest parallelism of any step ({widest}): {} worker(s) would run nothing; lower workers or raise parallelism",
                self.workers,
                self.workers - widest
            )));
        }
        let flink = self.engine == EngineKind::Flink;
        if self.workers == 0 && widest > MAX_PARALLELISM_IN_ONE_PROCESS && !flink {
            push(invalid(&format!(
                "spec.parallelism: {widest} subtasks per step in one process (spec.workers: 0) would open {} local channels per exchange; at most {MAX_PARALLELISM_IN_ONE_PROCESS} without workers: set spec.workers to spread the subtasks over worker pods",
                u64::from(widest) * u64::from(widest)
            )));
        }
        let readiness = bounded_duration(
            "spec.upgrade.readinessTimeout",
            &self.upgrade.readiness_timeout,
            SHORTEST_TIMEOUT,
        );
        push(
            bounded_duration(
                "spec.upgrade.savepointTimeout",
                &self.upgrade.savepoint_timeout,
                SHORTEST_TIMEOUT,
            )
            .map(|_| ()),
        );
        let interval = bounded_duration(
            "spec.checkpoints.interval",
            &self.checkpoints.interval,
            SHORTEST_CHECKPOINT_INTERVAL,
        );
        push(
            bounded_duration(
                "spec.checkpoints.timeout",
                &self.checkpoints.timeout,
                SHORTEST_TIMEOUT,
            )
            .map(|_| ()),
        );
        if let (Ok(readiness), Ok(interval)) = (&readiness, &interval)
            && readiness <= interval
        {
            push(invalid(&format!(
                "spec.upgrade.readinessTimeout ({}) must be longer than spec.checkpoints.interval ({}): a new version is ready at its first checkpoint, so every upgrade would roll back; raise readinessTimeout",
                self.upgrade.readiness_timeout, self.checkpoints.interval
            )));
        }
        push(readiness.map(|_| ()));
        push(interval.map(|_| ()));
        if self.checkpoints.dir.trim().is_empty() {
            push(invalid(
                "spec.checkpoints.dir: must not be empty: set where checkpoints are written",
            ));
        }
        push(known_store("spec.checkpoints.dir", &self.checkpoints.dir));
        if let Some(dir) = self.savepoints.as_ref().and_then(|s| s.dir.as_deref()) {
            push(known_store("spec.savepoints.dir", dir));
        }
        if let Some(dir) = &self.dead_letter_path {
            push(known_store("spec.deadLetterPath", dir));
        }
        if let Some(savepoints) = &self.savepoints {
            if let Some(periodic) = &savepoints.periodic {
                // 0s would ask for a savepoint at every reconcile
                push(
                    parse_duration("spec.savepoints.periodic", periodic).and_then(|d| {
                        if d.is_zero() {
                            Err(Error::Invalid(vec![format!(
                                "spec.savepoints.periodic: {periodic} must be longer than 0s (unset it for no periodic savepoints)"
                            )]))
                        } else {
                            Ok(())
                        }
                    }),
                );
            }
            if let Some(max_age) = &savepoints.history.max_age {
                push(duration("spec.savepoints.history.maxAge", max_age));
            }
        }
        if let Some(timeout) = self
            .storage
            .as_ref()
            .and_then(|s| s.limits.as_ref())
            .and_then(|l| l.timeout.as_ref())
        {
            push(duration("spec.storage.limits.timeout", timeout));
        }
        if let Some(budget) = self.storage.as_ref().and_then(|s| s.retry_budget.as_ref()) {
            push(duration("spec.storage.retryBudget", budget));
        }
        if flink {
            push(self.flink_problems());
        } else {
            if self.flink.is_some() {
                push(invalid(
                    "spec.flink: set only with spec.engine: flink (this job runs on our runtime)",
                ));
            }
            push(self.validate_pipeline());
        }
        store_settings_known(self, &mut problems);

        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::Invalid(problems))
        }
    }

    /// A Flink job: `spec.flink` is checked, and what belongs to our runtime is refused.
    fn flink_problems(&self) -> Result<()> {
        let mut out = match &self.flink {
            Some(f) => f.problems(self.parallelism),
            None => vec![
                "spec.flink: required with spec.engine: flink (version, job.entryClass)".into(),
            ],
        };
        if !self.pipeline.is_empty() {
            out.push("spec.pipeline: not used with spec.engine: flink (the Flink job's code is the pipeline): remove it".into());
        }
        if self.workers != 0 {
            out.push("spec.workers: not used with spec.engine: flink: set spec.flink.taskManager.replicas".into());
        }
        if self.upgrade.strategy != UpgradeStrategy::InPlace {
            out.push("spec.upgrade.strategy: Flink jobs upgrade InPlace (a warm Shadow copy needs our runtime's standby mode)".into());
        }
        if self.dead_letter_path.is_some() {
            out.push("spec.deadLetterPath: not used with spec.engine: flink (the job's code handles bad records)".into());
        }
        if out.is_empty() {
            Ok(())
        } else {
            Err(Error::Invalid(out))
        }
    }

    fn validate_pipeline(&self) -> Result<()> {
        let mut problems = Vec::new();
        if self.pipeline.len() < 2 {
            problems.push(
                "spec.pipeline: needs at least a source and a sink: start with a `source` step and end with a `fileSink` or `print` step"
                    .to_string(),
            );
        }
        let mut seen = BTreeSet::new();
        for (index, step) in self.pipeline.iter().enumerate() {
            if step.uid.is_empty() {
                problems.push(format!(
                    "spec.pipeline[{index}].uid: every step needs a uid: its state is matched by uid on restore"
                ));
            } else if !valid_uid(&step.uid) {
                problems.push(format!(
                    "spec.pipeline[{index}].uid: {:?} is not a valid uid: use lowercase letters, digits and '-', at most 63 characters",
                    step.uid
                ));
            }
            if !step.uid.is_empty() && !seen.insert(step.uid.as_str()) {
                problems.push(format!(
                    "spec.pipeline: every step's uid must be unique: rename the duplicate uid {:?}",
                    step.uid
                ));
            }
            if let Some(parallelism) = step.parallelism
                && (parallelism == 0 || parallelism > self.max_parallelism)
            {
                problems.push(format!(
                    "spec.pipeline[{}].parallelism: must be between 1 and spec.maxParallelism ({})",
                    step.uid, self.max_parallelism
                ));
            }
            let kind = match step.kind() {
                Ok(kind) => kind,
                Err(Error::Invalid(mut list)) => {
                    problems.append(&mut list);
                    continue;
                }
                Err(other) => {
                    problems.push(other.to_string());
                    continue;
                }
            };
            let first = index == 0;
            let last = index + 1 == self.pipeline.len();
            match kind {
                StepKind::Source(source) => {
                    if !first {
                        problems.push(format!(
                            "spec.pipeline[{}]: the first step must be the job's only source: put exactly one step with `source` at the head",
                            step.uid
                        ));
                    }
                    validate_source(&step.uid, source, &mut problems);
                }
                kind if kind.is_sink() => {
                    if !last {
                        problems.push(format!(
                            "spec.pipeline[{}]: the last step must be the job's only sink: end the pipeline with exactly one `fileSink` or `print` step",
                            step.uid
                        ));
                    }
                    if let StepKind::FileSink(sink) = kind {
                        validate_file_sink(&step.uid, sink, &mut problems);
                    }
                }
                StepKind::WindowAggregate {
                    key_by,
                    window,
                    aggregate,
                } => validate_window_aggregate(&step.uid, key_by, window, aggregate, &mut problems),
                StepKind::Dedup(dedup) => {
                    if dedup.keys.is_empty() {
                        problems.push(format!("spec.pipeline[{}].dedup.keys: name at least one key column", step.uid));
                    }
                    collect(&mut problems, duration(&format!("spec.pipeline[{}].dedup.within", step.uid), &dedup.within));
                }
                StepKind::Filter(expr) if expr.trim().is_empty() => problems.push(format!(
                    "spec.pipeline[{}].filter: the expression is empty: write a SQL boolean expression such as `amount > 0`",
                    step.uid
                )),
                StepKind::Project(columns) => {
                    if columns.is_empty() {
                        problems.push(format!("spec.pipeline[{}].project: list at least one column", step.uid));
                    }
                    let mut names = BTreeSet::new();
                    for column in columns {
                        if !names.insert(column.name.as_str()) {
                            problems.push(format!(
                                "spec.pipeline[{}].project: column {:?} appears twice: give each output column its own name",
                                step.uid, column.name
                            ));
                        }
                    }
                }
                _ => {}
            }
            if first && !matches!(kind, StepKind::Source(_)) {
                problems.push(format!(
                    "spec.pipeline[{}]: the first step must be the job's only source: put exactly one step with `source` at the head",
                    step.uid
                ));
            }
            if last && !kind.is_sink() {
                problems.push(format!(
                    "spec.pipeline[{}]: the last step must be the job's only sink: end the pipeline with exactly one `fileSink` or `print` step",
                    step.uid
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::Invalid(problems))
        }
    }
}

fn validate_source(uid: &str, source: &SourceSpec, problems: &mut Vec<String>) {
    if let Err(why) = source.kind() {
        problems.push(format!("spec.pipeline[{uid}].source: {why}"));
    }
    if let Some(generator) = &source.generator {
        if let Some(interval) = &generator.event_interval {
            collect(
                problems,
                duration(
                    &format!("spec.pipeline[{uid}].source.generator.eventInterval"),
                    interval,
                ),
            );
        }
        if generator.keys == 0 {
            problems.push(format!(
                "spec.pipeline[{uid}].source.generator.keys: must be at least 1"
            ));
        }
    }
    if let Some(files) = &source.files {
        collect(
            problems,
            known_store(
                &format!("spec.pipeline[{uid}].source.files.path"),
                &files.path,
            ),
        );
        if let Some(interval) = &files.discovery_interval {
            collect(
                problems,
                duration(
                    &format!("spec.pipeline[{uid}].source.files.discoveryInterval"),
                    interval,
                ),
            );
        }
        let needs_schema = files.format.json_lines.is_some() || files.format.csv.is_some();
        if needs_schema && files.schema.as_ref().is_none_or(Vec::is_empty) {
            problems.push(format!(
            "spec.pipeline[{uid}].source.files.schema: JSON lines and CSV files need a schema: list their columns with name and type"
        ));
        }
    }
    if let Some(kafka) = &source.kafka {
        validate_kafka(uid, kafka, problems);
    }
    if let Some(watermark) = &source.watermark {
        if let Some(value) = &watermark.max_out_of_orderness {
            collect(
                problems,
                duration(
                    &format!("spec.pipeline[{uid}].source.watermark.maxOutOfOrderness"),
                    value,
                ),
            );
        }
        if let Some(value) = &watermark.idle_timeout {
            collect(
                problems,
                duration(
                    &format!("spec.pipeline[{uid}].source.watermark.idleTimeout"),
                    value,
                ),
            );
        }
    }
}

/// librdkafka properties the runtime sets itself: a user value would break exactly-once or leak
/// credentials into the manifest.
pub const KAFKA_OWNED_PROPERTIES: [&str; 17] = [
    "bootstrap.servers",
    "group.id",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "auto.offset.reset",
    "isolation.level",
    "enable.partition.eof",
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "ssl.ca.pem",
    "ssl.certificate.pem",
    "ssl.key.pem",
    "ssl.key.password",
    "sasl.jaas.config",
];

fn validate_kafka(uid: &str, kafka: &KafkaSource, problems: &mut Vec<String>) {
    let at = format!("spec.pipeline[{uid}].source.kafka");
    let topics = count_set(&[
        kafka.topic.is_some(),
        kafka.topics.is_some(),
        kafka.topic_pattern.is_some(),
    ]);
    if topics != 1 {
        problems.push(format!(
            "{at}: set exactly one of topic, topics or topicPattern"
        ));
    }
    let empty_name = kafka.topic.as_deref().is_some_and(str::is_empty)
        || kafka.topic_pattern.as_deref().is_some_and(str::is_empty)
        || kafka
            .topics
            .as_ref()
            .is_some_and(|t| t.is_empty() || t.iter().any(String::is_empty));
    if empty_name {
        problems.push(format!(
            "{at}: topic names and patterns must not be empty (topics needs at least one)"
        ));
    }
    if kafka.bootstrap_servers.split(',').any(|s| {
        s.trim()
            .rsplit_once(':')
            .is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
    }) {
        problems.push(format!(
            "{at}.bootstrapServers: {:?} is not a comma-separated list of host:port",
            kafka.bootstrap_servers
        ));
    }
    if kafka.starting_offsets == Some(KafkaStartingOffsets::Timestamp)
        && kafka.starting_timestamp.is_none()
    {
        problems.push(format!(
            "{at}.startingTimestamp: required when startingOffsets is timestamp (RFC 3339, for example 2026-01-01T00:00:00Z)"
        ));
    }
    if let Some(interval) = &kafka.partition_discovery_interval {
        collect(
            problems,
            duration(&format!("{at}.partitionDiscoveryInterval"), interval),
        );
    }
    let format = &kafka.format;
    if format.parquet.is_some() {
        problems.push(format!(
            "{at}.format: Kafka record values are jsonLines (one JSON object) or csv (one row), not parquet"
        ));
    }
    let compressed = format
        .json_lines
        .as_ref()
        .map(|f| f.compression)
        .or(format.csv.as_ref().map(|f| f.compression))
        .is_some_and(|c| c != RowCompression::None);
    if compressed {
        problems.push(format!(
            "{at}.format: compression of single record values is not supported (use the producer's compression.type)"
        ));
    }
    match &kafka.schema {
        None => problems.push(format!(
            "{at}.schema: list the columns of the record values with name and type"
        )),
        Some(fields) if fields.is_empty() => problems.push(format!(
            "{at}.schema: list the columns of the record values with name and type"
        )),
        Some(fields) => {
            if let Some(f) = &kafka.event_time_field
                && !fields.iter().any(|c| &c.name == f)
            {
                problems.push(format!(
                    "{at}.eventTimeField: {f:?} is not a column of kafka.schema"
                ));
            }
        }
    }
    for key in kafka.properties.keys() {
        if KAFKA_OWNED_PROPERTIES.contains(&key.as_str()) {
            problems.push(format!(
                "{at}.properties.{key}: set by the runtime from the manifest's own fields (bootstrapServers, groupId, startingOffsets, isolationLevel, security); remove it"
            ));
        }
    }
    if let Some(security) = &kafka.security {
        let sasl = matches!(
            security.protocol,
            KafkaSecurityProtocol::SaslPlaintext | KafkaSecurityProtocol::SaslSsl
        );
        let tls = matches!(
            security.protocol,
            KafkaSecurityProtocol::Ssl | KafkaSecurityProtocol::SaslSsl
        );
        if sasl != security.sasl.is_some() {
            problems.push(format!(
                "{at}.security.sasl: set it exactly when protocol is SASL_PLAINTEXT or SASL_SSL"
            ));
        }
        if security.tls.is_some() && !tls {
            problems.push(format!(
                "{at}.security.tls: only used with protocol SSL or SASL_SSL"
            ));
        }
    }
}

fn validate_window_aggregate(
    uid: &str,
    key_by: &[String],
    window: &WindowSpec,
    aggregate: &AggregateSpec,
    problems: &mut Vec<String>,
) {
    if key_by.is_empty() {
        problems.push(format!(
            "spec.pipeline[{uid}].keyBy: name at least one key column"
        ));
    }
    let kinds = count_set(&[
        window.tumbling.is_some(),
        window.sliding.is_some(),
        window.session.is_some(),
    ]);
    if kinds != 1 {
        problems.push(format!(
            "spec.pipeline[{uid}].window: set exactly one of tumbling, sliding or session"
        ));
    }
    if let Some(size) = &window.tumbling {
        collect(
            problems,
            positive_duration(&format!("spec.pipeline[{uid}].window.tumbling"), size),
        );
    }
    if let Some(sliding) = &window.sliding {
        let size = positive_duration(
            &format!("spec.pipeline[{uid}].window.sliding.size"),
            &sliding.size,
        );
        let slide = positive_duration(
            &format!("spec.pipeline[{uid}].window.sliding.slide"),
            &sliding.slide,
        );
        if let (Ok(size), Ok(slide)) = (&size, &slide)
            && slide > size
        {
            problems.push(format!(
                "spec.pipeline[{uid}].window.sliding: slide ({}) must not exceed size ({}): records would fall between windows",
                sliding.slide, sliding.size
            ));
        }
        collect(problems, size);
        collect(problems, slide);
    }
    if let Some(session) = &window.session {
        collect(
            problems,
            positive_duration(
                &format!("spec.pipeline[{uid}].window.session.gap"),
                &session.gap,
            ),
        );
    }
    if let Some(lateness) = &window.allowed_lateness {
        collect(
            problems,
            duration(
                &format!("spec.pipeline[{uid}].window.allowedLateness"),
                lateness,
            ),
        );
    }
    let any = aggregate.count
        || !aggregate.sum.is_empty()
        || !aggregate.min.is_empty()
        || !aggregate.max.is_empty()
        || !aggregate.avg.is_empty();
    if !any {
        problems.push(format!(
            "spec.pipeline[{uid}].aggregate: choose at least one aggregate (count, sum, min, max or avg)"
        ));
    }
}

fn validate_file_sink(uid: &str, sink: &FileSinkSpec, problems: &mut Vec<String>) {
    collect(
        problems,
        known_store(&format!("spec.pipeline[{uid}].fileSink.path"), &sink.path),
    );
    let formats = count_set(&[
        sink.format.json_lines.is_some(),
        sink.format.csv.is_some(),
        sink.format.parquet.is_some(),
    ]);
    if formats != 1 {
        problems.push(format!(
            "spec.pipeline[{uid}].fileSink.format: set exactly one of jsonLines, csv or parquet"
        ));
    }
    if let Some(csv) = &sink.format.csv
        && csv.delimiter.chars().count() != 1
    {
        problems.push(format!(
            "spec.pipeline[{uid}].fileSink.format.csv.delimiter: must be exactly one character"
        ));
    }
    if let Some(assigner) = &sink.bucket_assigner {
        let kinds = count_set(&[
            assigner.date_time.is_some(),
            assigner.base_path.is_some(),
            assigner.field.is_some(),
        ]);
        if kinds != 1 {
            problems.push(format!(
                "spec.pipeline[{uid}].fileSink.bucketAssigner: set exactly one of dateTime, basePath or field"
            ));
        }
        if let Some(field) = &assigner.field
            && field.fields.is_empty()
        {
            problems.push(format!(
                "spec.pipeline[{uid}].fileSink.bucketAssigner.field.fields: name at least one column"
            ));
        }
        if let Some(date_time) = &assigner.date_time
            && !valid_timezone(&date_time.timezone)
        {
            problems.push(format!(
                "spec.pipeline[{uid}].fileSink.bucketAssigner.dateTime.timezone: {:?} is not supported: use UTC or a fixed offset such as +02:00",
                date_time.timezone
            ));
        }
    }
    if let Some(policy) = &sink.rolling_policy {
        if policy.default.is_some() == policy.on_checkpoint.is_some() {
            problems.push(format!(
            "spec.pipeline[{uid}].fileSink.rollingPolicy: set exactly one of default or onCheckpoint"
        ));
        }
        if let Some(default) = &policy.default {
            let field =
                |name: &str| format!("spec.pipeline[{uid}].fileSink.rollingPolicy.default.{name}");
            collect(
                problems,
                size(&field("maxPartSize"), &default.max_part_size),
            );
            collect(
                problems,
                positive_duration(&field("rolloverInterval"), &default.rollover_interval),
            );
            collect(
                problems,
                positive_duration(&field("inactivityInterval"), &default.inactivity_interval),
            );
            collect(
                problems,
                positive_duration(
                    &field("bucketCheckInterval"),
                    &default.bucket_check_interval,
                ),
            );
        }
    }
    if let Some(compaction) = &sink.compaction {
        collect(
            problems,
            size(
                &format!("spec.pipeline[{uid}].fileSink.compaction.targetSize"),
                &compaction.target_size,
            ),
        );
    }
    if let Some(marker) = &sink.success_marker
        && let Some(lateness) = &marker.allowed_lateness
    {
        collect(
            problems,
            duration(
                &format!("spec.pipeline[{uid}].fileSink.successMarker.allowedLateness"),
                lateness,
            ),
        );
    }
}

/// `UTC`, `Z`, or a fixed offset `+HH:MM` / `-HH:MM`.
pub fn valid_timezone(timezone: &str) -> bool {
    if matches!(timezone, "UTC" | "Z") {
        return true;
    }
    let bytes = timezone.as_bytes();
    bytes.len() == 6
        && matches!(bytes[0], b'+' | b'-')
        && bytes[1..3].iter().all(u8::is_ascii_digit)
        && bytes[3] == b':'
        && bytes[4..6].iter().all(u8::is_ascii_digit)
        // the offsets the sink accepts (filesink::bucket::parse_timezone): hours up to 18,
        // minutes below 60 (found by filesink's fuzz target on timezones)
        && timezone[1..3].parse::<u32>().is_ok_and(|h| h <= 18)
        && timezone[4..6].parse::<u32>().is_ok_and(|m| m < 60)
}

fn valid_uid(uid: &str) -> bool {
    let bytes = uid.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

fn invalid(message: &str) -> Result<()> {
    Err(Error::Invalid(vec![message.to_string()]))
}

fn duration(field: &str, value: &str) -> Result<()> {
    parse_duration(field, value).map(|_| ())
}

/// Subtasks per step one process holds without workers: exchanges between steps open p² local
/// channels.
pub const MAX_PARALLELISM_IN_ONE_PROCESS: u32 = 128;
/// The shortest checkpoint interval (a zero interval used to panic the runtime at start).
const SHORTEST_CHECKPOINT_INTERVAL: std::time::Duration = std::time::Duration::from_millis(10);
/// The shortest timeout of a checkpoint, savepoint or readiness wait.
const SHORTEST_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(100);
/// The longest interval or timeout (a week: anything longer is a unit mistake).
const LONGEST: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// A duration between `min` and a week.
fn bounded_duration(
    field: &str,
    value: &str,
    min: std::time::Duration,
) -> Result<std::time::Duration> {
    let d = parse_duration(field, value)?;
    if d < min || d > LONGEST {
        return Err(Error::Invalid(vec![format!(
            "{field}: {value} is out of range: use between {min:?} and 7d"
        )]));
    }
    Ok(d)
}

/// A path names a store of [`crate::stores::STORES`] (the file sink's path also its aliases, as
/// `s3a://`), or is a local path.
fn known_store(field: &str, path: &str) -> Result<()> {
    match path.split_once("://") {
        None => Ok(()),
        Some((scheme, _))
            if crate::stores::store_of(scheme, field.ends_with("fileSink.path")).is_some() =>
        {
            Ok(())
        }
        Some((scheme, _)) => invalid(&format!(
            "{field}: {path:?}: unknown scheme {scheme}://: {}",
            crate::stores::use_hint()
        )),
    }
}

/// What a path needs from `spec.storage`: `hdfs:///path` a name node, `az://` an account,
/// `abfss://` a `container@account.dfs.core.windows.net` authority; a GCS endpoint needs a key
/// (which carries it) or anonymous access.
fn store_settings_known(spec: &StreamJobSpec, problems: &mut Vec<String>) {
    let storage = spec.storage.as_ref();
    if let Some(gcs) = storage.and_then(|s| s.gcs.as_ref())
        && gcs.endpoint.is_some()
        && gcs.service_account_key_secret.is_none()
        && !gcs.anonymous
    {
        problems.push(
            "spec.storage.gcs.endpoint: set serviceAccountKeySecret or anonymous: true with it (Application Default Credentials always go to Google)".into(),
        );
    }
    let has_name_node = storage.and_then(|s| s.hdfs.as_ref()).is_some();
    let has_account = storage
        .and_then(|s| s.azure.as_ref())
        .and_then(|a| a.account.as_ref())
        .is_some();
    let mut paths = vec![("spec.checkpoints.dir".to_string(), &spec.checkpoints.dir)];
    if let Some(dir) = spec.savepoints.as_ref().and_then(|s| s.dir.as_ref()) {
        paths.push(("spec.savepoints.dir".into(), dir));
    }
    if let Some(dir) = &spec.dead_letter_path {
        paths.push(("spec.deadLetterPath".into(), dir));
    }
    for step in &spec.pipeline {
        if let Some(files) = step.source.as_ref().and_then(|s| s.files.as_ref()) {
            paths.push((
                format!("spec.pipeline[{}].source.files.path", step.uid),
                &files.path,
            ));
        }
        if let Some(sink) = &step.file_sink {
            paths.push((
                format!("spec.pipeline[{}].fileSink.path", step.uid),
                &sink.path,
            ));
        }
    }
    for (field, path) in paths {
        if path.starts_with("hdfs:///") && !has_name_node {
            problems.push(format!(
                "{field}: {path:?} names no name node: write hdfs://namenode:port/path or set spec.storage.hdfs.nameNode"
            ));
        }
        if path.starts_with("az://") && !has_account {
            problems.push(format!(
                "{field}: {path:?} names no storage account: set spec.storage.azure.account or write abfss://container@account.dfs.core.windows.net/path"
            ));
        }
        if let Some(rest) = path
            .strip_prefix("abfss://")
            .or_else(|| path.strip_prefix("abfs://"))
        {
            let authority = rest.split('/').next().unwrap_or_default();
            let ok = authority
                .split_once('@')
                .is_some_and(|(c, host)| !c.is_empty() && host.contains('.'));
            if !ok {
                problems.push(format!(
                    "{field}: {path:?}: write abfss://container@account.dfs.core.windows.net/path"
                ));
            }
        }
    }
}

fn positive_duration(field: &str, value: &str) -> Result<std::time::Duration> {
    let duration = parse_duration(field, value)?;
    if duration.is_zero() {
        return Err(Error::Invalid(vec![format!(
            "{field}: must be longer than 0s"
        )]));
    }
    Ok(duration)
}

fn size(field: &str, value: &str) -> Result<()> {
    parse_size(field, value).map(|_| ())
}

fn collect<T>(problems: &mut Vec<String>, result: Result<T>) {
    match result {
        Ok(_) => {}
        Err(Error::Invalid(mut list)) => problems.append(&mut list),
        Err(other) => problems.push(other.to_string()),
    }
}

/// How many of a set of "exactly one of" options are set.
fn count_set(options: &[bool]) -> usize {
    options.iter().filter(|set| **set).count()
}
