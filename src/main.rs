//! The `tributary` binary: parse flags, start telemetry, run.

use clap::Parser;

/// mimalloc rather than glibc's malloc: after a churn, glibc kept the peak resident in per-thread
/// arenas long after every client left; mimalloc gives freed pages back (MEM-1).
/// The `system-allocator` feature keeps glibc's malloc instead, so that a heap profiler that
/// intercepts `malloc` (heaptrack) sees every allocation (BENCHMARKS.md, "Memory after churn").
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = tributary::Cli::parse();
    use tributary::Command;
    // Commands that print their answer on stdout start no telemetry of their own.
    if !matches!(
        cli.command,
        Some(Command::Bootstrap(_) | Command::Validate(_) | Command::Mock(_))
    ) {
        cli.init_tracing()?;
    }
    cli.run().await
}
