//! Built-in operators.

pub mod dedup;
pub mod expr;
pub mod files;
pub mod generator;
pub mod nexmark;
pub mod print;
pub mod window;

use crate::registry::Registry;

/// Registers the built-in named operators (currently none beyond the pipeline step kinds; the
/// file sink is registered by its module once it exists).
pub fn register_builtins(_registry: &mut Registry) {}
