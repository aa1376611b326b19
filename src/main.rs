//! The `tributary` binary: parse flags, start telemetry, run.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = tributary::cli::Cli::parse();
    if !matches!(cli.command, Some(tributary::cli::Command::Bootstrap(_))) {
        cli.init_tracing();
    }
    cli.run().await
}
