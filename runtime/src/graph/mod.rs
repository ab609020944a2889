//! From a StreamJob manifest to a job graph: one [`StepPlan`] per pipeline step, with schemas
//! propagated through the pipeline and expressions compiled, so errors surface before anything
//! runs and `plan` can decide restore compatibility without running.
//!
//! This file walks the pipeline (parallelism, partitioning, the graph's shape); each step kind is
//! planned on its own: sources in `sources.rs` (one function per [`SourceKind`]), the other
//! operators in `steps.rs` (one per [`StepKind`]). Both match exhaustively, so a new kind in the
//! manifest does not compile until it is planned.
//!
//! [`SourceKind`]: streamjob_crds::validation::SourceKind

use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use streamjob_crds::units::parse_duration;
use streamjob_crds::v1alpha1::{BadRecordPolicy, EngineKind, StreamJob, StreamJobSpec};
use streamjob_crds::validation::StepKind;

use crate::error::{Error, Result};
use crate::operator::{DynSource, OperatorContext, StateDescriptor};
use crate::registry::{BuildOperator, Registry};
use crate::restore::GraphOperator;

mod sources;
mod steps;

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

pub(super) fn millis(field: &str, v: &str) -> Result<i64> {
    Ok(parse_duration(field, v)?.as_millis() as i64)
}

pub(super) fn opt_millis(field: &str, v: Option<&String>) -> Result<i64> {
    v.map(|v| millis(field, v))
        .transpose()
        .map(|v| v.unwrap_or(0))
}

/// Plans the job graph of a manifest.
pub async fn build_graph(job: &StreamJob, registry: &Registry) -> Result<JobGraph> {
    let spec = &job.spec;
    spec.validate()?;
    // every engine but ours is refused by name: a new engine is a new arm here
    match spec.engine {
        EngineKind::Runtime => {}
        EngineKind::Flink => {
            return Err(Error::Unsupported(
                "spec.engine: flink: this job runs on Apache Flink; apply it to a cluster with the operator (docs/flink.md)".into(),
            ));
        }
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
        let (kind, output, state, node, key_by) = match step.kind()? {
            StepKind::Source(src) => {
                let plan = sources::plan_source(job, &name, uid, src).await?;
                let build = plan.build;
                (
                    "source".to_string(),
                    plan.schema,
                    plan.state,
                    Node::Source(build),
                    None,
                )
            }
            other => {
                let op = steps::plan_operator(spec, registry, uid, other, &input)?;
                (
                    op.kind,
                    op.output_schema,
                    op.state,
                    Node::Operator(op.build),
                    op.key_by,
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
