//! Streamjob runtime: the dataflow engine behind the `streamjob-runtime` binary.
//!
//! * [`operator`] — the operator contract (sources, transformations, sinks).
//! * [`registry`] — registering custom operators by name.
//! * [`sdk`] — the job SDK: keyed functions with managed state and timers.
//! * [`graph`] — manifest → job graph.
//! * [`coordinator`] — running a job: subtasks, checkpoints, savepoints, restarts.
//! * [`snapshot`] / [`restore`] — the checkpoint format and the restore rules.
//! * [`cluster`] — the coordinator and worker roles over several processes.
//! * [`control`] — the HTTP control API; [`cli`] — the command line.

pub mod bench;
pub mod bench_kafka;
pub mod cli;
pub mod cluster;
pub mod control;
pub mod coordinator;
pub mod dead_letter;
pub mod error;
pub mod fence;
#[cfg(test)]
mod fuzz;
#[cfg(test)]
#[path = "../../crds/src/fuzz_loop.rs"]
mod fuzz_loop;
pub mod graph;
pub mod keygroups;
pub mod metrics;
pub mod operator;
pub mod operators;
pub mod registry;
pub mod restart;
pub mod restore;
pub mod sdk;
pub mod snapshot;
pub mod storage;
pub mod task;
pub mod termination;

pub use error::{Error, Result};
