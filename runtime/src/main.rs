//! `streamjob-runtime`: see [`streamjob_runtime::cli`].

use std::process::ExitCode;

fn main() -> ExitCode {
    streamjob_runtime::cli::main()
}
