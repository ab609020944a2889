//! `filter` and `project`: SQL expressions compiled once per subtask with DataFusion and
//! evaluated as physical expressions on each batch.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray};
use arrow::compute::prep_null_mask_filter;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::json::writer::LineDelimitedWriter;
use arrow::record_batch::RecordBatch;
use datafusion::common::DFSchema;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::prelude::SessionContext;

use crate::error::{Error, Result};
use crate::operator::{Collector, DataBatch, Operator, OperatorContext, RestoredState};

/// A compiled SQL expression.
#[derive(Clone, Debug)]
pub struct CompiledExpr {
    pub sql: String,
    pub expr: Arc<dyn PhysicalExpr>,
    pub data_type: DataType,
    pub nullable: bool,
}

/// Parses and plans `sql` against `schema`.
pub fn compile(uid: &str, sql: &str, schema: &SchemaRef) -> Result<CompiledExpr> {
    let ctx = SessionContext::new();
    let df_schema = DFSchema::try_from(schema.as_ref().clone())
        .map_err(|e| Error::plan(uid, format!("schema: {e}")))?;
    let logical = ctx
        .parse_sql_expr(sql, &df_schema)
        .map_err(|e| Error::plan(uid, format!("expression {sql:?}: {e}")))?;
    let expr = ctx
        .create_physical_expr(logical, &df_schema)
        .map_err(|e| Error::plan(uid, format!("expression {sql:?}: {e}")))?;
    let data_type = expr
        .data_type(schema)
        .map_err(|e| Error::plan(uid, format!("expression {sql:?}: {e}")))?;
    let nullable = expr.nullable(schema).unwrap_or(true);
    Ok(CompiledExpr {
        sql: sql.to_string(),
        expr,
        data_type,
        nullable,
    })
}

impl CompiledExpr {
    /// Evaluates on a batch.
    pub fn eval(&self, batch: &RecordBatch) -> Result<ArrayRef> {
        Ok(self.expr.evaluate(batch)?.into_array(batch.num_rows())?)
    }
}

/// The JSON text of row `row`, for bad-record reports.
pub fn row_json(batch: &RecordBatch, row: usize) -> String {
    let mut buf = Vec::new();
    {
        let mut w = LineDelimitedWriter::new(&mut buf);
        if w.write(&batch.slice(row, 1)).is_err() || w.finish().is_err() {
            return format!("<row {row}>");
        }
    }
    String::from_utf8_lossy(&buf).trim_end().to_string()
}

/// Evaluates `f` on the whole batch; if that fails, row by row, reporting failing rows as bad
/// records and returning the rows that succeeded (as a mask) with their results.
fn eval_rows<T>(
    batch: &DataBatch,
    out: &mut Collector,
    f: impl Fn(&RecordBatch) -> Result<T>,
) -> Result<(Option<BooleanArray>, Vec<T>)> {
    match f(&batch.records) {
        Ok(v) => Ok((None, vec![v])),
        Err(first) => {
            if batch.num_rows() <= 1 {
                if batch.num_rows() == 1 {
                    out.bad_record(row_json(&batch.records, 0), first.to_string());
                }
                return Ok((
                    Some(BooleanArray::from(vec![false; batch.num_rows()])),
                    vec![],
                ));
            }
            let mut ok = Vec::with_capacity(batch.num_rows());
            let mut results = Vec::new();
            for row in 0..batch.num_rows() {
                match f(&batch.records.slice(row, 1)) {
                    Ok(v) => {
                        ok.push(true);
                        results.push(v);
                    }
                    Err(e) => {
                        ok.push(false);
                        out.bad_record(row_json(&batch.records, row), e.to_string());
                    }
                }
            }
            Ok((Some(BooleanArray::from(ok)), results))
        }
    }
}

/// `filter: <sql>`.
pub struct FilterOperator {
    expr: CompiledExpr,
}

impl FilterOperator {
    /// Compiles the predicate.
    pub fn new(uid: &str, sql: &str, input: &SchemaRef) -> Result<Self> {
        let expr = compile(uid, sql, input)?;
        if expr.data_type != DataType::Boolean {
            return Err(Error::plan(
                uid,
                format!("filter {sql:?} is of type {}, not boolean", expr.data_type),
            ));
        }
        Ok(Self { expr })
    }
}

fn to_mask(a: &ArrayRef) -> Result<BooleanArray> {
    let b = a
        .as_boolean_opt()
        .ok_or_else(|| Error::Other("filter did not return booleans".into()))?;
    Ok(if b.null_count() > 0 {
        prep_null_mask_filter(b)
    } else {
        b.clone()
    })
}

impl Operator for FilterOperator {
    async fn initialize_state(&mut self, _ctx: &OperatorContext, _r: RestoredState) -> Result<()> {
        Ok(())
    }

    async fn process_batch(
        &mut self,
        _ctx: &OperatorContext,
        batch: DataBatch,
        out: &mut Collector,
    ) -> Result<()> {
        let (ok_rows, results) = eval_rows(&batch, out, |b| to_mask(&self.expr.eval(b)?))?;
        match ok_rows {
            None => {
                if let Some(mask) = results.first() {
                    out.emit(batch.filter(mask)?);
                }
            }
            Some(ok) => {
                let keep: Vec<bool> = {
                    let mut it = results.iter();
                    (0..batch.num_rows())
                        .map(|i| ok.value(i) && it.next().is_some_and(|m| m.value(0)))
                        .collect()
                };
                out.emit(batch.filter(&BooleanArray::from(keep))?);
            }
        }
        Ok(())
    }
}

/// `project: [{name, expr}]`.
pub struct ProjectOperator {
    exprs: Vec<CompiledExpr>,
    schema: SchemaRef,
}

impl ProjectOperator {
    /// Compiles the projection.
    pub fn new(uid: &str, columns: &[(String, String)], input: &SchemaRef) -> Result<Self> {
        let mut exprs = Vec::new();
        let mut fields = Vec::new();
        for (name, sql) in columns {
            let e = compile(uid, sql, input)?;
            fields.push(Field::new(name, e.data_type.clone(), e.nullable));
            exprs.push(e);
        }
        Ok(Self {
            exprs,
            schema: Arc::new(Schema::new(fields)),
        })
    }

    /// Output schema.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn project(&self, b: &RecordBatch) -> Result<RecordBatch> {
        let cols = self
            .exprs
            .iter()
            .map(|e| e.eval(b))
            .collect::<Result<Vec<_>>>()?;
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            cols,
            &arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(b.num_rows())),
        )?)
    }
}

impl Operator for ProjectOperator {
    async fn initialize_state(&mut self, _ctx: &OperatorContext, _r: RestoredState) -> Result<()> {
        Ok(())
    }

    async fn process_batch(
        &mut self,
        _ctx: &OperatorContext,
        batch: DataBatch,
        out: &mut Collector,
    ) -> Result<()> {
        let (ok_rows, results) = eval_rows(&batch, out, |b| self.project(b))?;
        match ok_rows {
            None => {
                if let Some(records) = results.into_iter().next() {
                    out.emit(DataBatch::new(records, batch.event_time.clone())?);
                }
            }
            Some(ok) => {
                if results.is_empty() {
                    return Ok(());
                }
                let ts = batch.filter(&ok)?.event_time;
                let records = arrow::compute::concat_batches(&self.schema, &results)?;
                out.emit(DataBatch::new(records, ts)?);
            }
        }
        Ok(())
    }
}
