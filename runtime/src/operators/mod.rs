//! Built-in operators.

pub mod dedup;
pub mod expr;
pub mod files;
#[cfg(feature = "file-sink")]
pub mod filesink;
pub mod generator;
pub mod kafka;
pub mod nexmark;
pub mod print;
pub mod window;

use crate::registry::Registry;

/// Registers the built-in pluggable operators (the file sink).
pub fn register_builtins(registry: &mut Registry) {
    #[cfg(feature = "file-sink")]
    registry.register_file_sink(filesink::plan_file_sink);
    let _ = registry;
}
