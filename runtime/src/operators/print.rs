//! `print`: the debug sink. Writes each record as one JSON line to standard output (not
//! transactional: after a failure, records since the last checkpoint are printed again).
//! It is also the smallest example of a sink against the [`Operator`] trait.

use std::io::Write;

use arrow::json::writer::LineDelimitedWriter;

use crate::error::Result;
use crate::operator::{Collector, DataBatch, Operator, OperatorContext, RestoredState};

/// A print subtask.
pub struct PrintSink {
    limit: Option<usize>,
}

impl PrintSink {
    /// Prints at most `limit` records of each batch (all when `None`).
    pub fn new(limit: Option<u64>) -> Self {
        Self {
            limit: limit.map(|l| l as usize),
        }
    }
}

impl Operator for PrintSink {
    async fn initialize_state(&mut self, _ctx: &OperatorContext, _r: RestoredState) -> Result<()> {
        Ok(())
    }

    async fn process_batch(
        &mut self,
        _ctx: &OperatorContext,
        batch: DataBatch,
        _out: &mut Collector,
    ) -> Result<()> {
        let rows = self
            .limit
            .map_or(batch.num_rows(), |l| l.min(batch.num_rows()));
        let mut buf = Vec::new();
        {
            let mut w = LineDelimitedWriter::new(&mut buf);
            w.write(&batch.records.slice(0, rows))?;
            w.finish()?;
        }
        let stdout = std::io::stdout();
        let mut lock = stdout.lock();
        lock.write_all(&buf)?;
        lock.flush()?;
        Ok(())
    }
}
