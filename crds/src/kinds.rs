//! What one pipeline step is, and what its source reads: exhaustive enums over the manifest's
//! one-of fields, so code that plans or checks a step matches on a kind the compiler keeps
//! complete. A new step or source is a field in `v1alpha1.rs` plus an arm here; the
//! destructuring below does not compile until the field is placed.

use crate::v1alpha1::{
    AggregateSpec, FileSinkSpec, FilesSource, GeneratorSource, KafkaSource, NexmarkSource,
    PipelineStep, SourceSpec, WindowSpec,
};
use crate::{Error, Result};

/// The operator kind of one pipeline step, borrowed from the step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StepKind<'a> {
    Source(&'a SourceSpec),
    Filter(&'a str),
    Project(&'a [crate::v1alpha1::ProjectColumn]),
    WindowAggregate {
        key_by: &'a [String],
        window: &'a WindowSpec,
        aggregate: &'a AggregateSpec,
    },
    Dedup(&'a crate::v1alpha1::DedupSpec),
    Custom(&'a crate::v1alpha1::CustomSpec),
    FileSink(&'a FileSinkSpec),
    Print(&'a crate::v1alpha1::PrintSinkSpec),
}

impl StepKind<'_> {
    /// Name of the kind as written in manifests and savepoint metadata.
    pub fn name(&self) -> &'static str {
        match self {
            StepKind::Source(_) => "source",
            StepKind::Filter(_) => "filter",
            StepKind::Project(_) => "project",
            StepKind::WindowAggregate { .. } => "windowAggregate",
            StepKind::Dedup(_) => "dedup",
            StepKind::Custom(_) => "custom",
            StepKind::FileSink(_) => "fileSink",
            StepKind::Print(_) => "print",
        }
    }

    /// Whether the step is a sink (the pipeline's end).
    pub fn is_sink(&self) -> bool {
        matches!(self, StepKind::FileSink(_) | StepKind::Print(_))
    }
}

/// What a source reads, borrowed from `source`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SourceKind<'a> {
    Generator(&'a GeneratorSource),
    Nexmark(&'a NexmarkSource),
    Files(&'a FilesSource),
    Kafka(&'a KafkaSource),
}

impl SourceKind<'_> {
    /// Every kind's field name, in the order error messages list them.
    pub const NAMES: [&'static str; 4] = ["generator", "nexmark", "files", "kafka"];

    /// The kind's field name in manifests.
    pub fn name(&self) -> &'static str {
        match self {
            SourceKind::Generator(_) => "generator",
            SourceKind::Nexmark(_) => "nexmark",
            SourceKind::Files(_) => "files",
            SourceKind::Kafka(_) => "kafka",
        }
    }
}

impl SourceSpec {
    /// The source's single kind, or what is wrong (none or several set).
    pub fn kind(&self) -> std::result::Result<SourceKind<'_>, String> {
        // every field named: a new one does not compile until it is placed here
        let SourceSpec {
            generator,
            nexmark,
            files,
            kafka,
            watermark: _,
        } = self;
        let kinds: Vec<SourceKind<'_>> = [
            generator.as_ref().map(SourceKind::Generator),
            nexmark.as_ref().map(SourceKind::Nexmark),
            files.as_ref().map(SourceKind::Files),
            kafka.as_ref().map(SourceKind::Kafka),
        ]
        .into_iter()
        .flatten()
        .collect();
        match kinds.as_slice() {
            [kind] => Ok(*kind),
            _ => Err(format!(
                "set exactly one of {}{}",
                one_of(&SourceKind::NAMES),
                match kinds.len() {
                    0 => String::new(),
                    _ => format!(
                        " (set: {})",
                        kinds
                            .iter()
                            .map(SourceKind::name)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                }
            )),
        }
    }
}

impl PipelineStep {
    /// The step's single operator kind, or an error naming the step and what is wrong.
    pub fn kind(&self) -> Result<StepKind<'_>> {
        // every field named: a new one does not compile until it is placed here
        let PipelineStep {
            uid: _,
            name: _,
            parallelism: _,
            on_bad_record: _,
            source,
            filter,
            project,
            key_by,
            window,
            aggregate,
            dedup,
            custom,
            file_sink,
            print,
        } = self;
        let mut kinds = Vec::new();
        if let Some(source) = source {
            kinds.push(StepKind::Source(source));
        }
        if let Some(filter) = filter {
            kinds.push(StepKind::Filter(filter));
        }
        if let Some(project) = project {
            kinds.push(StepKind::Project(project));
        }
        match (key_by, window, aggregate) {
            (Some(key_by), Some(window), Some(aggregate)) => {
                kinds.push(StepKind::WindowAggregate {
                    key_by,
                    window,
                    aggregate,
                })
            }
            (None, None, None) => {}
            _ => {
                return Err(Error::Invalid(vec![format!(
                    "spec.pipeline[{}]: keyBy, window and aggregate go together in one step: set all three or none",
                    self.uid
                )]));
            }
        }
        if let Some(dedup) = dedup {
            kinds.push(StepKind::Dedup(dedup));
        }
        if let Some(custom) = custom {
            kinds.push(StepKind::Custom(custom));
        }
        if let Some(sink) = file_sink {
            kinds.push(StepKind::FileSink(sink));
        }
        if let Some(print) = print {
            kinds.push(StepKind::Print(print));
        }
        match kinds.as_slice() {
            [kind] => Ok(*kind),
            [] => Err(Error::Invalid(vec![format!(
                "spec.pipeline[{}]: the step has no operator: set one of source, filter, project, keyBy (with window and aggregate), dedup, custom, fileSink or print",
                self.uid
            )])),
            many => Err(Error::Invalid(vec![format!(
                "spec.pipeline[{}]: the step has {} operators ({}): each step must have exactly one; split it into several steps",
                self.uid,
                many.len(),
                many.iter()
                    .map(StepKind::name)
                    .collect::<Vec<_>>()
                    .join(", ")
            )])),
        }
    }

    /// Display name: `name` or the uid.
    pub fn display_name(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.uid)
    }
}

/// `a, b, c or d`.
fn one_of(names: &[&str]) -> String {
    match names.split_last() {
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The CRD's CEL rule on `source` names the same kinds as [`SourceKind`], so the API server
    /// and the Rust validation refuse the same manifests.
    #[test]
    fn the_cel_rule_names_every_source_kind() {
        let schema = serde_json::to_value(schemars::schema_for!(SourceSpec)).unwrap();
        let rule = schema["x-kubernetes-validations"][0]["rule"]
            .as_str()
            .unwrap();
        let has: Vec<String> = SourceKind::NAMES
            .iter()
            .map(|n| format!("has(self.{n})"))
            .collect();
        assert_eq!(
            rule,
            format!("[{}].filter(x, x).size() == 1", has.join(", "))
        );
        let message = schema["x-kubernetes-validations"][0]["message"]
            .as_str()
            .unwrap();
        assert!(message.ends_with(&one_of(&SourceKind::NAMES)), "{message}");
    }

    #[test]
    fn a_source_names_what_is_wrong() {
        let none = SourceSpec::default();
        assert_eq!(
            none.kind().unwrap_err(),
            "set exactly one of generator, nexmark, files or kafka"
        );
        let two = SourceSpec {
            generator: Some(GeneratorSource::default()),
            kafka: Some(KafkaSource::default()),
            ..Default::default()
        };
        assert_eq!(
            two.kind().unwrap_err(),
            "set exactly one of generator, nexmark, files or kafka (set: generator, kafka)"
        );
        let one = SourceSpec {
            kafka: Some(KafkaSource::default()),
            ..Default::default()
        };
        assert_eq!(one.kind().unwrap().name(), "kafka");
    }
}
