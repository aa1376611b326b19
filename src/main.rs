//! The `tributary` binary: parse flags, start telemetry, run.

use clap::Parser;

/// mimalloc rather than glibc's malloc: after a churn, glibc kept the peak resident in per-thread
/// arenas long after every client left; mimalloc gives freed pages back (MEM-1).
/// The `system-allocator` feature keeps glibc's malloc instead, so that a heap profiler that
/// intercepts `malloc` (heaptrack) sees every allocation (BENCHMARKS.md, "Memory after churn").
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (its v3 header's option 15; the Rust bindings name no
/// constant for it): how long freed pages stay committed before they go back to the OS.
#[cfg(not(feature = "system-allocator"))]
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Freed pages go back to the OS at once rather than after mimalloc's default 10 ms delay, which
/// an idle process never reaches: after a churn RSS stayed at 1.07–1.24× idle with the delay and
/// came back to 1.08× without, and idle itself fell from 185 to 164 MB (MEM-1, BENCHMARKS.md).
/// An operator's `MIMALLOC_PURGE_DELAY` still wins.
#[cfg(not(feature = "system-allocator"))]
fn purge_freed_pages_at_once() {
    #[allow(
        clippy::disallowed_methods,
        reason = "the process edge: mimalloc's own environment setting decides, as mimalloc would"
    )]
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    #[allow(
        unsafe_code,
        reason = "mimalloc's option API is C; this call only stores an integer in its option table"
    )]
    // SAFETY: `mi_option_set` takes any option id and value and touches no memory of ours;
    // purge_delay is read by mimalloc on every purge decision, so setting it late is allowed.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0);
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    #[cfg(not(feature = "system-allocator"))]
    purge_freed_pages_at_once();
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
