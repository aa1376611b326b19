//! The `tributary` binary: parse flags, start telemetry, run.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = tributary::cli::Cli::parse();
    if cli.command.is_none() {
        cli.init_tracing()?;
    }
    cli.run().await
}
