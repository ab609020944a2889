//! The contract between the operator and the runtime it drives: one definition of everything
//! both sides must agree on, so neither copies the other's types or strings.
//!
//! * [`status`] — `GET /v1/status`: the run state and what the job reports.
//! * [`requests`] — the other control API calls: savepoints, start, their answers.
//! * [`plan`] — the plan report: whether a new job can restore a snapshot, per operator uid.
//! * [`process`] — how a runtime process is started and how it ends: environment names, ports,
//!   exit codes.
//!
//! Plain serde types only: no engine code, no Kubernetes. Reading is lenient (fields a newer
//! runtime adds are ignored, unknown run states read as [`status::RunState::Unknown`]); writing
//! is what the runtime sends.

pub mod plan;
pub mod process;
pub mod requests;
pub mod status;
