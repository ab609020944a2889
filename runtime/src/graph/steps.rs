//! Planning every step that is not a source: one function per [`StepKind`], each giving the
//! operator's plan (its kind as recorded in savepoints, output schema, state, key columns and how
//! a subtask is built) from the step and the schema of its input.

use arrow::datatypes::SchemaRef;
use streamjob_crds::v1alpha1::{
    AggregateSpec, CustomSpec, DedupSpec, FileSinkSpec, PrintSinkSpec, ProjectColumn,
    StreamJobSpec, WindowSpec,
};
use streamjob_crds::validation::StepKind;

use super::{millis, opt_millis};
use crate::error::{Error, Result};
use crate::operator::StateDescriptor;
use crate::operators::dedup::{DedupOperator, dedup_plan};
use crate::operators::expr::{FilterOperator, ProjectOperator};
use crate::operators::print::PrintSink;
use crate::operators::window::{WindowKind, WindowOperator, WindowPlan};
use crate::registry::{CustomContext, FileSinkContext, OperatorPlan, Registry};

/// Plans step `uid` of kind `kind` reading `input`. Sources are planned in `sources.rs`.
pub(super) fn plan_operator(
    spec: &StreamJobSpec,
    registry: &Registry,
    uid: &str,
    kind: StepKind<'_>,
    input: &SchemaRef,
) -> Result<OperatorPlan> {
    match kind {
        StepKind::Source(_) => Err(Error::plan(
            uid,
            "a source is planned as the pipeline's first step",
        )),
        StepKind::Filter(sql) => filter(uid, sql, input),
        StepKind::Project(cols) => project(uid, cols, input),
        StepKind::WindowAggregate {
            key_by,
            window,
            aggregate,
        } => window_aggregate(uid, key_by, window, aggregate, input),
        StepKind::Dedup(d) => dedup(uid, d, input),
        StepKind::Custom(c) => custom(spec, registry, uid, c, input),
        StepKind::FileSink(sink) => file_sink(spec, registry, uid, sink, input),
        StepKind::Print(p) => Ok(print(p, input)),
    }
}

fn filter(uid: &str, sql: &str, input: &SchemaRef) -> Result<OperatorPlan> {
    // compiled once here, so a bad expression fails the plan rather than a subtask
    FilterOperator::new(uid, sql, input)?;
    let (uid, sql, schema_in) = (uid.to_string(), sql.to_string(), input.clone());
    Ok(OperatorPlan::stateless(
        "filter",
        input.clone(),
        move |_ctx| FilterOperator::new(&uid, &sql, &schema_in),
    ))
}

fn project(uid: &str, cols: &[ProjectColumn], input: &SchemaRef) -> Result<OperatorPlan> {
    let cols: Vec<(String, String)> = cols
        .iter()
        .map(|c| (c.name.clone(), c.expr.clone()))
        .collect();
    let out = ProjectOperator::new(uid, &cols, input)?.schema();
    let (uid, schema_in) = (uid.to_string(), input.clone());
    Ok(OperatorPlan::stateless("project", out, move |_ctx| {
        ProjectOperator::new(&uid, &cols, &schema_in)
    }))
}

fn window_aggregate(
    uid: &str,
    key_by: &[String],
    window: &WindowSpec,
    aggregate: &AggregateSpec,
    input: &SchemaRef,
) -> Result<OperatorPlan> {
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
    let lateness = opt_millis("window.allowedLateness", window.allowed_lateness.as_ref())?;
    let plan = WindowPlan::new(
        uid,
        input,
        key_by,
        kind,
        lateness,
        aggregate.count,
        &aggregate.sum,
        &aggregate.min,
        &aggregate.max,
        &aggregate.avg,
    )?;
    let (out, state, keys) = (
        plan.output_schema.clone(),
        plan.state.clone(),
        plan.key_columns.clone(),
    );
    Ok(OperatorPlan::new(
        "windowAggregate",
        out,
        state,
        Some(keys),
        move |_ctx| Ok(WindowOperator::new(plan.clone())),
    ))
}

fn dedup(uid: &str, d: &DedupSpec, input: &SchemaRef) -> Result<OperatorPlan> {
    let within = millis("dedup.within", &d.within)?;
    let (keys, state) = dedup_plan(uid, input, &d.keys)?;
    let k2 = keys.clone();
    Ok(OperatorPlan::new(
        "dedup",
        input.clone(),
        state,
        Some(keys),
        move |_ctx| Ok(DedupOperator::new(k2.clone(), within)),
    ))
}

fn custom(
    spec: &StreamJobSpec,
    registry: &Registry,
    uid: &str,
    c: &CustomSpec,
    input: &SchemaRef,
) -> Result<OperatorPlan> {
    let cx = CustomContext {
        uid,
        config: &c.config,
        stateful: c.stateful,
        input_schema: input,
        spec,
    };
    let op = registry.plan_custom(&c.name, &cx)?;
    check_declared_stateful(uid, c.stateful, &op.state)?;
    Ok(op)
}

fn file_sink(
    spec: &StreamJobSpec,
    registry: &Registry,
    uid: &str,
    sink: &FileSinkSpec,
    input: &SchemaRef,
) -> Result<OperatorPlan> {
    let cx = FileSinkContext {
        uid,
        sink,
        input_schema: input,
        spec,
    };
    registry.plan_file_sink(&cx)
}

fn print(p: &PrintSinkSpec, input: &SchemaRef) -> OperatorPlan {
    let limit = p.limit;
    OperatorPlan::stateless("print", input.clone(), move |_ctx| {
        Ok(PrintSink::new(limit))
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
