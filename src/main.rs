//! The `tributary` binary: parse flags, start telemetry, run.

use clap::Parser;

/// mimalloc rather than glibc's malloc: after a churn, glibc kept the peak resident in per-thread
/// arenas long after every client left; mimalloc gives freed pages back (MEM-1).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = tributary::cli::Cli::parse();
    if cli.command.is_none() {
        cli.init_tracing()?;
    }
    cli.run().await
}
