//! Built-in operators.

pub mod dedup;
pub mod expr;
pub mod files;
pub mod filesink;
pub mod generator;
pub mod kafka;
pub mod nexmark;
pub mod print;
pub mod window;

use crate::registry::Registry;

/// Registers the file sink: always built in, and replaceable only so that the benchmarks and a
/// coordinator test can put a discarding or capturing sink at the pipeline's end (validation
/// requires a `fileSink` or `print` step there).
pub fn register_builtins(registry: &mut Registry) {
    registry.register_file_sink(filesink::plan_file_sink);
}
