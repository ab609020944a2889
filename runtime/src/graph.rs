//! From a StreamJob manifest to a job graph: one [`StepPlan`] per pipeline step, with schemas
//! propagated through the pipeline and expressions compiled, so errors surface before anything
//! runs and `plan` can decide restore compatibility without running.

use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use streamjob_crds::units::parse_duration;
use streamjob_crds::v1alpha1::{BadRecordPolicy, NexmarkEventKind, StreamJob, StreamJobSpec};
use streamjob_crds::validation::StepKind;

use crate::error::{Error, Result};
use crate::operator::{DynSource, OperatorContext, StateDescriptor};
use crate::operators::dedup::{DedupOperator, dedup_plan};
use crate::operators::expr::{FilterOperator, ProjectOperator};
use crate::operators::files::{FilesSource, FilesSourcePlan};
use crate::operators::generator::{
    DEFAULT_START_MS, GeneratorConfig, GeneratorSource, generator_schema, generator_state,
};
use crate::operators::kafka::{KafkaSource, KafkaSourcePlan};
use crate::operators::nexmark::{NexmarkSettings, NexmarkSource, nexmark_schema, nexmark_state};
use crate::operators::print::PrintSink;
use crate::operators::window::{WindowKind, WindowOperator, WindowPlan};
use crate::registry::{BuildOperator, CustomContext, FileSinkContext, OperatorPlan, Registry};
use crate::restore::GraphOperator;

/// Builds one source subtask.
pub type BuildSource = Arc<dyn Fn(&OperatorContext) -> Result<Box<dyn DynSource>> + Send + Sync>;

/// How a step's input is distributed over its subtasks.
#[derive(Clone, Debug, PartialEq)]
pub enum Partition {
    /// Subtask i of the previous step feeds subtask i (same parallelism).
    Forward,
    /// Round-robin over all subtasks.
    Rebalance,
    /// By key group of these input columns.
    Hash(Vec<usize>),
}

/// How the subtasks of a step are built.
#[derive(Clone)]
pub enum Node {
    Source(BuildSource),
    Operator(BuildOperator),
}

/// One step of the job graph.
#[derive(Clone)]
pub struct StepPlan {
    pub uid: String,
    pub kind: String,
    pub parallelism: usize,
    pub input_schema: SchemaRef,
    pub output_schema: SchemaRef,
    pub state: StateDescriptor,
    pub partition: Partition,
    pub bad_record_policy: BadRecordPolicy,
    pub node: Node,
}

/// The job graph.
#[derive(Clone)]
pub struct JobGraph {
    pub name: String,
    pub max_parallelism: u32,
    pub steps: Vec<StepPlan>,
    pub spec: StreamJobSpec,
}

impl JobGraph {
    /// The operators as the restore rules see them.
    pub fn graph_operators(&self) -> Vec<GraphOperator> {
        self.steps
            .iter()
            .map(|s| GraphOperator {
                uid: s.uid.clone(),
                kind: s.kind.clone(),
                parallelism: s.parallelism as u32,
                state: s.state.clone(),
            })
            .collect()
    }
}

fn millis(field: &str, v: &str) -> Result<i64> {
    Ok(parse_duration(field, v)?.as_millis() as i64)
}

fn opt_millis(field: &str, v: Option<&String>) -> Result<i64> {
    v.map(|v| millis(field, v))
        .transpose()
        .map(|v| v.unwrap_or(0))
}

/// Plans the job graph of a manifest.
pub async fn build_graph(job: &StreamJob, registry: &Registry) -> Result<JobGraph> {
    let spec = &job.spec;
    spec.validate()?;
    if spec.engine == streamjob_crds::v1alpha1::EngineKind::Flink {
        return Err(Error::Unsupported(
            "spec.engine: flink: this job runs on Apache Flink; apply it to a cluster with the operator (docs/flink.md)".into(),
        ));
    }
    let name = job
        .metadata
        .name
        .clone()
        .unwrap_or_else(|| "streamjob".into());
    let mut steps: Vec<StepPlan> = Vec::new();
    let mut schema: SchemaRef = Arc::new(Schema::empty());
    let mut prev_parallelism = 0usize;
    for step in &spec.pipeline {
        let uid = step.uid.as_str();
        let parallelism = step.parallelism.unwrap_or(spec.parallelism).max(1) as usize;
        if parallelism as u32 > spec.max_parallelism {
            return Err(Error::plan(
                uid,
                format!(
                    "parallelism {parallelism} is above maxParallelism {}",
                    spec.max_parallelism
                ),
            ));
        }
        let input = schema.clone();
        let policy = step.on_bad_record.unwrap_or_default();
        let (kind, output, state, node, key_by): (
            String,
            SchemaRef,
            StateDescriptor,
            Node,
            Option<Vec<usize>>,
        ) = match step.kind()? {
            StepKind::Source(src) => {
                let ooo = opt_millis(
                    "watermark.maxOutOfOrderness",
                    src.watermark
                        .as_ref()
                        .and_then(|w| w.max_out_of_orderness.as_ref()),
                )?;
                if let Some(g) = &src.generator {
                    let start_ms = match &g.start_time {
                        Some(t) => chrono::DateTime::parse_from_rfc3339(t)
                            .map_err(|e| {
                                Error::plan(uid, format!("generator.startTime {t:?}: {e}"))
                            })?
                            .timestamp_millis(),
                        None => DEFAULT_START_MS,
                    };
                    let cfg = GeneratorConfig {
                        count: g.count,
                        rate_per_second: g.rate_per_second,
                        keys: g.keys,
                        seed: g.seed,
                        start_ms,
                        interval_ms: g
                            .event_interval
                            .as_ref()
                            .map(|v| millis("generator.eventInterval", v))
                            .transpose()?
                            .unwrap_or(1),
                        out_of_orderness_ms: ooo,
                    };
                    let build: BuildSource = Arc::new(move |_ctx| {
                        Ok(Box::new(GeneratorSource::new(cfg.clone())) as Box<dyn DynSource>)
                    });
                    (
                        "source".into(),
                        generator_schema(),
                        generator_state(),
                        Node::Source(build),
                        None,
                    )
                } else if let Some(n) = &src.nexmark {
                    let settings = NexmarkSettings {
                        events: n.events,
                        rate_per_second: n.rate_per_second,
                        kinds: n.event_kinds.as_ref().map(|k| {
                            k.iter()
                                .map(|k| match k {
                                    NexmarkEventKind::Person => nexmark::event::EventType::Person,
                                    NexmarkEventKind::Auction => nexmark::event::EventType::Auction,
                                    NexmarkEventKind::Bid => nexmark::event::EventType::Bid,
                                })
                                .collect()
                        }),
                        out_of_orderness_ms: ooo,
                    };
                    let build: BuildSource = Arc::new(move |_ctx| {
                        Ok(Box::new(NexmarkSource::new(settings.clone())) as Box<dyn DynSource>)
                    });
                    (
                        "source".into(),
                        nexmark_schema(),
                        nexmark_state(),
                        Node::Source(build),
                        None,
                    )
                } else if let Some(f) = &src.files {
                    let plan = FilesSourcePlan::new(uid, f, spec.storage.as_ref(), ooo).await?;
                    let schema = plan.schema.clone();
                    let state = plan.state();
                    let build: BuildSource = Arc::new(move |_ctx| {
                        Ok(Box::new(FilesSource::new(plan.clone())) as Box<dyn DynSource>)
                    });
                    ("source".into(), schema, state, Node::Source(build), None)
                } else if let Some(k) = &src.kafka {
                    let idle = src
                        .watermark
                        .as_ref()
                        .and_then(|w| w.idle_timeout.as_ref())
                        .map(|v| millis("watermark.idleTimeout", v))
                        .transpose()?;
                    // the default group, streamjob-<namespace>-<name>: jobs of one name in two
                    // namespaces do not share committed offsets
                    let group_base = match &job.metadata.namespace {
                        Some(ns) => format!("{ns}-{name}"),
                        None => name.clone(),
                    };
                    let plan = KafkaSourcePlan::new(uid, &group_base, k, ooo, idle)?;
                    let schema = plan.schema();
                    let state = plan.state();
                    let build: BuildSource = Arc::new(move |_ctx| {
                        Ok(Box::new(KafkaSource::new(plan.clone())) as Box<dyn DynSource>)
                    });
                    ("source".into(), schema, state, Node::Source(build), None)
                } else {
                    return Err(Error::plan(
                        uid,
                        "source: set one of generator, nexmark, files",
                    ));
                }
            }
            StepKind::Filter(sql) => {
                let op = FilterOperator::new(uid, sql, &input)?;
                let sql = sql.to_string();
                let uid2 = uid.to_string();
                let schema_in = input.clone();
                let _ = op;
                let plan = OperatorPlan::stateless("filter", input.clone(), move |_ctx| {
                    FilterOperator::new(&uid2, &sql, &schema_in)
                });
                (
                    "filter".into(),
                    plan.output_schema,
                    plan.state,
                    Node::Operator(plan.build),
                    None,
                )
            }
            StepKind::Project(cols) => {
                let cols: Vec<(String, String)> = cols
                    .iter()
                    .map(|c| (c.name.clone(), c.expr.clone()))
                    .collect();
                let op = ProjectOperator::new(uid, &cols, &input)?;
                let out = op.schema();
                let uid2 = uid.to_string();
                let schema_in = input.clone();
                let plan = OperatorPlan::stateless("project", out, move |_ctx| {
                    ProjectOperator::new(&uid2, &cols, &schema_in)
                });
                (
                    "project".into(),
                    plan.output_schema,
                    plan.state,
                    Node::Operator(plan.build),
                    None,
                )
            }
            StepKind::WindowAggregate {
                key_by,
                window,
                aggregate,
            } => {
                let kind = if let Some(t) = &window.tumbling {
                    WindowKind::Tumbling {
                        size: millis("window.tumbling", t)?.max(1),
                    }
                } else if let Some(s) = &window.sliding {
                    WindowKind::Sliding {
                        size: millis("window.sliding.size", &s.size)?.max(1),
                        slide: millis("window.sliding.slide", &s.slide)?.max(1),
                    }
                } else if let Some(s) = &window.session {
                    WindowKind::Session {
                        gap: millis("window.session.gap", &s.gap)?.max(1),
                    }
                } else {
                    return Err(Error::plan(
                        uid,
                        "window: set one of tumbling, sliding, session",
                    ));
                };
                let lateness =
                    opt_millis("window.allowedLateness", window.allowed_lateness.as_ref())?;
                let plan = WindowPlan::new(
                    uid,
                    &input,
                    key_by,
                    kind,
                    lateness,
                    aggregate.count,
                    &aggregate.sum,
                    &aggregate.min,
                    &aggregate.max,
                    &aggregate.avg,
                )?;
                let out = plan.output_schema.clone();
                let state = plan.state.clone();
                let keys = plan.key_columns.clone();
                let p2 = plan.clone();
                let op =
                    OperatorPlan::new("windowAggregate", out, state, Some(keys), move |_ctx| {
                        Ok(WindowOperator::new(p2.clone()))
                    });
                (
                    "windowAggregate".into(),
                    op.output_schema,
                    op.state,
                    Node::Operator(op.build),
                    op.key_by,
                )
            }
            StepKind::Dedup(d) => {
                let within = millis("dedup.within", &d.within)?;
                let (keys, state) = dedup_plan(uid, &input, &d.keys)?;
                let k2 = keys.clone();
                let op =
                    OperatorPlan::new("dedup", input.clone(), state, Some(keys), move |_ctx| {
                        Ok(DedupOperator::new(k2.clone(), within))
                    });
                (
                    "dedup".into(),
                    op.output_schema,
                    op.state,
                    Node::Operator(op.build),
                    op.key_by,
                )
            }
            StepKind::Custom(c) => {
                let cx = CustomContext {
                    uid,
                    config: &c.config,
                    stateful: c.stateful,
                    input_schema: &input,
                    spec,
                };
                let op = registry.plan_custom(&c.name, &cx)?;
                check_declared_stateful(uid, c.stateful, &op.state)?;
                (
                    op.kind,
                    op.output_schema,
                    op.state,
                    Node::Operator(op.build),
                    op.key_by,
                )
            }
            StepKind::FileSink(sink) => {
                let cx = FileSinkContext {
                    uid,
                    sink,
                    input_schema: &input,
                    spec,
                };
                let op = registry.plan_file_sink(&cx)?;
                (
                    op.kind,
                    op.output_schema,
                    op.state,
                    Node::Operator(op.build),
                    op.key_by,
                )
            }
            StepKind::Print(p) => {
                let limit = p.limit;
                let op = OperatorPlan::stateless("print", input.clone(), move |_ctx| {
                    Ok(PrintSink::new(limit))
                });
                (
                    "print".into(),
                    op.output_schema,
                    op.state,
                    Node::Operator(op.build),
                    None,
                )
            }
        };
        let partition = match (&node, key_by) {
            (Node::Source(_), _) => Partition::Forward,
            (_, Some(keys)) => Partition::Hash(keys),
            (_, None) if parallelism == prev_parallelism => Partition::Forward,
            _ => Partition::Rebalance,
        };
        steps.push(StepPlan {
            uid: uid.to_string(),
            kind,
            parallelism,
            input_schema: input,
            output_schema: output.clone(),
            state,
            partition,
            bad_record_policy: policy,
            node,
        });
        schema = output;
        prev_parallelism = parallelism;
    }
    if !matches!(steps.first().map(|s| &s.node), Some(Node::Source(_))) {
        return Err(Error::Other(
            "spec.pipeline: the first step must be a source".into(),
        ));
    }
    Ok(JobGraph {
        name,
        max_parallelism: spec.max_parallelism,
        steps,
        spec: spec.clone(),
    })
}

/// `custom.stateful` says what the registered operator must be: a step marked stateless whose
/// operator declares state (or the reverse) is refused, so the manifest never lies about which
/// steps carry state across upgrades.
fn check_declared_stateful(uid: &str, stateful: bool, state: &StateDescriptor) -> Result<()> {
    let fields = || {
        state
            .fields
            .iter()
            .map(|f| format!("{}: {}", f.name, f.type_name))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (stateful, state.is_stateful()) {
        (false, true) => Err(Error::plan(
            uid,
            format!(
                "custom.stateful is false but the registered operator declares state [{}]: set custom.stateful: true",
                fields()
            ),
        )),
        (true, false) => Err(Error::plan(
            uid,
            "custom.stateful is true but the registered operator declares no state: remove custom.stateful (or declare the operator's state)",
        )),
        _ => Ok(()),
    }
}
