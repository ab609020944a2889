//! `streamjob-operator run`: the StreamJob operator (flags in `cli`, the process in `serve`).

use clap::Parser;
use streamjob_operator::cli::{Cli, Command, init_logging};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_logging();
    match Cli::parse().command {
        Command::Run(args) => Ok(streamjob_operator::serve::run(args).await?),
    }
}
