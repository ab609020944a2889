//! The job binary: the built-in steps plus this crate's `window-totals`, behind the same command
//! line as `streamjob-runtime` (the operator runs it as the image's entrypoint).

fn main() -> std::process::ExitCode {
    let mut registry = streamjob_runtime::registry::Registry::with_builtins();
    streamjob_job_template::register(&mut registry);
    streamjob_runtime::cli::main_with_registry(registry)
}
