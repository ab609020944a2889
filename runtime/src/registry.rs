//! Named operators: how a user binary adds its own operators (and how the file sink plugs in).
//!
//! ```no_run
//! use streamjob_runtime::registry::{OperatorPlan, Registry};
//! # use streamjob_runtime::operator::*;
//! # struct Upper;
//! # impl Operator for Upper {
//! #   async fn initialize_state(&mut self, _: &OperatorContext, _: RestoredState) -> streamjob_runtime::Result<()> { Ok(()) }
//! #   async fn process_batch(&mut self, _: &OperatorContext, b: DataBatch, out: &mut Collector) -> streamjob_runtime::Result<()> { out.emit(b); Ok(()) }
//! # }
//! let mut registry = Registry::with_builtins();
//! registry.register("upper", |cx| {
//!     Ok(OperatorPlan::stateless("custom:upper", cx.input_schema.clone(), |_ctx| Ok(Upper)))
//! });
//! // then: streamjob_runtime::cli::main_with_registry(registry)
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use streamjob_crds::v1alpha1::{FileSinkSpec, StreamJobSpec};

use crate::error::{Error, Result};
use crate::operator::{DynOperator, Operator, OperatorContext, StateDescriptor};

/// Builds one subtask of an operator.
pub type BuildOperator =
    Arc<dyn Fn(&OperatorContext) -> Result<Box<dyn DynOperator>> + Send + Sync>;

/// The planned operator: its output schema, state, input partitioning and subtask builder.
#[derive(Clone)]
pub struct OperatorPlan {
    /// Kind recorded in `_metadata` (for custom operators `custom:<name>`).
    pub kind: String,
    /// Schema of the records it emits.
    pub output_schema: SchemaRef,
    /// Its state (empty for stateless operators); compared on restore.
    pub state: StateDescriptor,
    /// Partition the input by these input columns (key groups); `None`: forward/rebalance.
    pub key_by: Option<Vec<usize>>,
    /// Subtask builder.
    pub build: BuildOperator,
}

impl OperatorPlan {
    /// A stateless, non-keyed operator.
    pub fn stateless<O: Operator>(
        kind: &str,
        output_schema: SchemaRef,
        build: impl Fn(&OperatorContext) -> Result<O> + Send + Sync + 'static,
    ) -> Self {
        Self {
            kind: kind.to_string(),
            output_schema,
            state: StateDescriptor::stateless(),
            key_by: None,
            build: Arc::new(move |ctx| Ok(Box::new(build(ctx)?) as Box<dyn DynOperator>)),
        }
    }

    /// Any operator.
    pub fn new<O: Operator>(
        kind: &str,
        output_schema: SchemaRef,
        state: StateDescriptor,
        key_by: Option<Vec<usize>>,
        build: impl Fn(&OperatorContext) -> Result<O> + Send + Sync + 'static,
    ) -> Self {
        Self {
            kind: kind.to_string(),
            output_schema,
            state,
            key_by,
            build: Arc::new(move |ctx| Ok(Box::new(build(ctx)?) as Box<dyn DynOperator>)),
        }
    }
}

/// What a custom operator factory gets.
pub struct CustomContext<'a> {
    pub uid: &'a str,
    /// `custom.config` of the step.
    pub config: &'a BTreeMap<String, String>,
    /// `custom.stateful` of the step.
    pub stateful: bool,
    /// Schema of the step's input.
    pub input_schema: &'a SchemaRef,
    pub spec: &'a StreamJobSpec,
}

/// What the file sink factory gets.
pub struct FileSinkContext<'a> {
    pub uid: &'a str,
    pub sink: &'a FileSinkSpec,
    pub input_schema: &'a SchemaRef,
    pub spec: &'a StreamJobSpec,
}

type CustomFactory = Arc<dyn Fn(&CustomContext<'_>) -> Result<OperatorPlan> + Send + Sync>;
type FileSinkFactory = Arc<dyn Fn(&FileSinkContext<'_>) -> Result<OperatorPlan> + Send + Sync>;

/// The operators a binary knows by name.
#[derive(Clone, Default)]
pub struct Registry {
    custom: HashMap<String, CustomFactory>,
    file_sink: Option<FileSinkFactory>,
}

impl Registry {
    /// The built-in operators only.
    pub fn with_builtins() -> Self {
        let mut r = Self::default();
        crate::operators::register_builtins(&mut r);
        r
    }

    /// Registers a custom operator under `name` (referenced as `custom: {name: ...}`).
    pub fn register(
        &mut self,
        name: &str,
        factory: impl Fn(&CustomContext<'_>) -> Result<OperatorPlan> + Send + Sync + 'static,
    ) -> &mut Self {
        self.custom.insert(name.to_string(), Arc::new(factory));
        self
    }

    /// Sets the factory of `fileSink` steps.
    pub fn register_file_sink(
        &mut self,
        factory: impl Fn(&FileSinkContext<'_>) -> Result<OperatorPlan> + Send + Sync + 'static,
    ) -> &mut Self {
        self.file_sink = Some(Arc::new(factory));
        self
    }

    /// Plans a custom step.
    pub fn plan_custom(&self, name: &str, cx: &CustomContext<'_>) -> Result<OperatorPlan> {
        let f = self.custom.get(name).ok_or_else(|| {
            let mut known: Vec<_> = self.custom.keys().cloned().collect();
            known.sort();
            Error::plan(
                cx.uid,
                format!(
                    "no custom operator named {name:?} is registered in this binary (registered: [{}]); build your job binary with Registry::register(\"{name}\", ...)",
                    known.join(", ")
                ),
            )
        })?;
        f(cx)
    }

    /// Plans a file sink step.
    pub fn plan_file_sink(&self, cx: &FileSinkContext<'_>) -> Result<OperatorPlan> {
        match &self.file_sink {
            Some(f) => f(cx),
            None => Err(Error::Unsupported(format!(
                "step {:?}: this registry has no file sink (build it with Registry::with_builtins)",
                cx.uid
            ))),
        }
    }
}
