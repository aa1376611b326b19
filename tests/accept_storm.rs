//! At the file-descriptor limit, the xDS accept loop backs off instead of spinning, logs rarely,
//! and serves again once descriptors are free (docs/hardening.md, "Accepting connections").
//!
//! The real binary runs under `ulimit -n` (its own process, so this test's limits are untouched);
//! connections past its limit wait in the listen backlog, where every `accept` fails with EMFILE.

#![allow(clippy::unwrap_used)]
// A test binary is its own edge: it reads where its tools are from the environment and waits on
// child processes from plain threads; its support items are `pub` for every tier, not an API.
#![allow(unreachable_pub, clippy::disallowed_methods)]

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use support::harness::{Proc, free_port, http_get, loopback, tributary_bin};

/// The server's descriptor limit: its runtime, listeners and log take about 25.
const FD_LIMIT: u32 = 64;
/// Connections opened: well past the limit, so some always wait in the backlog.
const CONNECTIONS: usize = 120;
/// How long CPU use and log lines are observed while accepts fail.
const OBSERVE: Duration = Duration::from_secs(3);
/// CPU the server may use meanwhile. Measured here: with backoff 0 ms (three accepts a second at
/// the longest wait); with immediate retries 380 ms and 2,431 log lines in 3 s (a debug build
/// writing a log file; the release binary reached a whole core). 5 % of the window leaves room for
/// a loaded machine.
const CPU_LIMIT: Duration = Duration::from_millis(150);
/// Upper bound on waits that should be short; only paid when the test is about to fail.
const WAIT: Duration = Duration::from_secs(20);
/// Linux's USER_HZ: `/proc/<pid>/stat` times are in these ticks.
const TICKS_PER_SECOND: u64 = 100;
const FAILED: &str = "accepting a connection failed";

/// The HTTP/2 client preface and an empty SETTINGS frame: a connection that spoke, so the
/// first-frames deadline does not close it and free descriptors during the test.
const GREETING: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";

/// User + system CPU time of `pid`.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the name.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 1000 / TICKS_PER_SECOND)
}

fn failures_logged(proc: &Proc) -> usize {
    std::fs::read_to_string(&proc.log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(FAILED))
        .count()
}

fn greet(addr: SocketAddr) -> TcpStream {
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(GREETING).unwrap();
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_fd_limit_accept_backs_off_logs_rarely_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let mesh = dir.path().join("mesh.yaml");
    std::fs::write(
        &mesh,
        "services:\n  - hostname: web.demo\n    ports: [{name: http, port: 80, protocol: HTTP}]\n",
    )
    .unwrap();
    let (xds, admin) = (loopback(free_port()), loopback(free_port()));
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("ulimit -n {FD_LIMIT} && exec \"$0\" \"$@\""))
        .arg(tributary_bin())
        .args(["--mock-file", mesh.to_str().unwrap()])
        .args(["--xds-addr", &xds.to_string()])
        .args(["--admin-addr", &admin.to_string()])
        .env("RUST_LOG", "info");
    let mut proc = Proc::spawn("tributary", &mut cmd, dir.path());
    let deadline = Instant::now() + WAIT;
    while !matches!(http_get(admin, "localhost", "/ready").await, Some((200, _))) {
        assert!(proc.alive(), "tributary exited: {}", proc.tail());
        assert!(Instant::now() < deadline, "never ready: {}", proc.tail());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let mut conns: Vec<TcpStream> = (0..CONNECTIONS).map(|_| greet(xds)).collect();
    let deadline = Instant::now() + WAIT;
    while failures_logged(&proc) == 0 {
        assert!(
            Instant::now() < deadline,
            "accept never failed: {}",
            proc.tail()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (cpu_before, logged_before) = (cpu_time(proc.id()), failures_logged(&proc));
    tokio::time::sleep(OBSERVE).await;
    let cpu = cpu_time(proc.id()) - cpu_before;
    let logged = failures_logged(&proc) - logged_before;
    println!("during {OBSERVE:?} of failing accepts: {cpu:?} CPU, {logged} more log lines");
    assert!(cpu < CPU_LIMIT, "CPU {cpu:?} in {OBSERVE:?}: spinning?");
    assert!(logged <= 1, "{logged} accept-failure lines in {OBSERVE:?}");
    assert!(proc.alive());

    // Descriptors freed: the waiting connections are served within the longest backoff.
    conns.truncate(CONNECTIONS / 4);
    let mut late = greet(xds);
    late.set_read_timeout(Some(WAIT)).unwrap();
    let mut buf = [0u8; 9];
    late.read_exact(&mut buf)
        .unwrap_or_else(|e| panic!("no SETTINGS from the server once fds were free: {e}"));
    assert_eq!(buf[3], 0x04, "the server's first frame is SETTINGS");
    assert!(matches!(
        http_get(admin, "localhost", "/ready").await,
        Some((200, _))
    ));
}
