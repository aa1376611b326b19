//! Process metrics under Prometheus' standard names (what client libraries' process collectors
//! export, and what dashboards chart for any control plane): CPU seconds, resident and virtual
//! memory, open and maximum file descriptors, threads. Read from `/proc/self` at every scrape; on
//! a system without it the family is simply absent.
//!
//! Written here rather than taken from a crate: the one that does this (`metrics-process`) pulls
//! macOS-only crates into the lock file, which `build.rs`'s offline `cargo metadata` cannot
//! resolve on a fresh clone.

use std::path::Path;

/// Clock ticks per second of `/proc/<pid>/stat` times: Linux fixes `USER_HZ` at 100 for user
/// space on every architecture it exports it for.
const USER_HZ: f64 = 100.0;
/// Bytes per kB in `/proc/<pid>/status`.
const KIB: f64 = 1024.0;

/// Registers the descriptions (HELP lines).
pub(super) fn describe() {
    metrics::describe_gauge!(
        "process_cpu_seconds_total",
        metrics::Unit::Seconds,
        "Total user and system CPU time spent in seconds."
    );
    metrics::describe_gauge!(
        "process_resident_memory_bytes",
        metrics::Unit::Bytes,
        "Resident memory size in bytes."
    );
    metrics::describe_gauge!(
        "process_virtual_memory_bytes",
        metrics::Unit::Bytes,
        "Virtual memory size in bytes."
    );
    metrics::describe_gauge!("process_open_fds", "Number of open file descriptors.");
    metrics::describe_gauge!(
        "process_max_fds",
        "Maximum number of open file descriptors."
    );
    metrics::describe_gauge!("process_threads", "Number of OS threads in the process.");
}

/// Samples `/proc/self` into the gauges.
pub(super) fn sample() {
    sample_from(Path::new("/proc/self"));
}

fn sample_from(proc_self: &Path) {
    if let Some(cpu) = read(proc_self, "stat").and_then(|s| cpu_seconds(&s)) {
        metrics::gauge!("process_cpu_seconds_total").set(cpu);
    }
    if let Some(status) = read(proc_self, "status") {
        let field = |name: &str| status_field(&status, name);
        if let Some(kb) = field("VmRSS:") {
            metrics::gauge!("process_resident_memory_bytes").set(kb * KIB);
        }
        if let Some(kb) = field("VmSize:") {
            metrics::gauge!("process_virtual_memory_bytes").set(kb * KIB);
        }
        if let Some(n) = field("Threads:") {
            metrics::gauge!("process_threads").set(n);
        }
    }
    if let Ok(fds) = std::fs::read_dir(proc_self.join("fd")) {
        metrics::gauge!("process_open_fds").set(fds.count() as f64);
    }
    if let Some(max) = read(proc_self, "limits").and_then(|l| max_open_files(&l)) {
        metrics::gauge!("process_max_fds").set(max);
    }
}

fn read(dir: &Path, file: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(file)).ok()
}

/// utime + stime (fields 14 and 15) of `/proc/<pid>/stat`, in seconds. The command name (field
/// 2) may hold spaces and parentheses, so fields are counted after its last `)`.
fn cpu_seconds(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: f64 = fields.next()?.parse().ok()?;
    let stime: f64 = fields.next()?.parse().ok()?;
    Some((utime + stime) / USER_HZ)
}

/// The number after `name` on its line of `/proc/<pid>/status`.
fn status_field(status: &str, name: &str) -> Option<f64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// The soft limit of "Max open files" in `/proc/<pid>/limits` (`unlimited`: none reported).
fn max_open_files(limits: &str) -> Option<f64> {
    limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_count_after_the_command_name() {
        // Field 2 with a space and a parenthesis; utime 250, stime 50 ticks.
        let stat = "42 (tri (x) y) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 1 0 0";
        assert_eq!(cpu_seconds(stat), Some(3.0));
        assert_eq!(cpu_seconds("garbage"), None);
    }

    #[test]
    fn status_and_limits_parse() {
        let status = "Name:\ttributary\nVmSize:\t  2048 kB\nVmRSS:\t  1024 kB\nThreads:\t7\n";
        assert_eq!(status_field(status, "VmRSS:"), Some(1024.0));
        assert_eq!(status_field(status, "Threads:"), Some(7.0));
        assert_eq!(status_field(status, "VmSwap:"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(max_open_files(limits), Some(1024.0));
    }

    #[test]
    fn this_process_is_sampled() {
        // Linux only, as the module: /proc/self exists for the test process.
        let dir = Path::new("/proc/self");
        assert!(read(dir, "stat").and_then(|s| cpu_seconds(&s)).is_some());
        let status = read(dir, "status").expect("/proc/self/status");
        assert!(status_field(&status, "Threads:").is_some_and(|n| n >= 1.0));
    }
}
