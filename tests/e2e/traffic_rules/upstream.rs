//! Small real HTTP/1.1 upstreams on loopback whose behaviour a test changes while they run: each
//! answers with its name, or with a status, after a delay, or fails every other request (what a
//! retry turns into a 200). Keep-alive is honoured, as Envoy pools upstream connections.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How an upstream answers.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Behaviour {
    /// Answer with this status (0: 200 with the name).
    pub status: u16,
    /// Wait this long before answering.
    pub delay: Duration,
    /// Answer every odd-numbered request (the 1st, 3rd, ...) with `fail_status` first.
    pub fail_every_other: bool,
    /// The status of those failures.
    pub fail_status: u16,
}

/// One upstream.
pub struct Upstream {
    pub addr: SocketAddr,
    behaviour: Arc<Mutex<Behaviour>>,
    hits: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl Upstream {
    /// Starts `name` on `ip`:0.
    pub async fn start(ip: &str, name: &str) -> Upstream {
        let listener = TcpListener::bind((ip, 0)).await.expect("bind upstream");
        let addr = listener.local_addr().expect("upstream address");
        let behaviour = Arc::new(Mutex::new(Behaviour::default()));
        let hits = Arc::new(AtomicU64::new(0));
        let (b, h, n) = (behaviour.clone(), hits.clone(), name.to_string());
        let task = tokio::spawn(async move {
            loop {
                let Ok((s, _)) = listener.accept().await else {
                    continue;
                };
                tokio::spawn(serve(s, n.clone(), b.clone(), h.clone()));
            }
        });
        Upstream {
            addr,
            behaviour,
            hits,
            task,
        }
    }

    /// Changes how it answers from the next request on.
    pub fn set(&self, b: Behaviour) {
        *self.behaviour.lock().unwrap() = b;
    }

    /// Requests it received.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut s: TcpStream, name: String, b: Arc<Mutex<Behaviour>>, hits: Arc<AtomicU64>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        // One request head (the tests send no bodies).
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        buf.drain(..end);
        let close = head.contains("connection: close");
        let n = hits.fetch_add(1, Ordering::SeqCst) + 1;
        let now = *b.lock().unwrap();
        if !now.delay.is_zero() {
            tokio::time::sleep(now.delay).await;
        }
        let (status, body) = match now {
            Behaviour {
                fail_every_other: true,
                fail_status,
                ..
            } if n % 2 == 1 => (fail_status, format!("{name} failed")),
            Behaviour { status: 0, .. } => (200, name.clone()),
            Behaviour { status, .. } => (status, format!("{name} answers {status}")),
        };
        let resp = format!(
            "HTTP/1.1 {status} X\r\ncontent-length: {}\r\n{}\r\n{body}",
            body.len(),
            if close { "connection: close\r\n" } else { "" }
        );
        if s.write_all(resp.as_bytes()).await.is_err() || close {
            return;
        }
    }
}

/// One GET through `proxy` with `host` and extra `headers`, on a fresh connection; (status,
/// body), or `None` when the connection failed. The answer is read by its `content-length` (or
/// to the end of a chunked body), not to the connection's close: Envoy's local replies (a fault
/// abort, a timeout) may leave the connection open.
pub async fn get(proxy: SocketAddr, host: &str, headers: &[(&str, &str)]) -> Option<(u16, String)> {
    let mut s = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(proxy))
        .await
        .ok()?
        .ok()?;
    let mut req = format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req += &format!("{k}: {v}\r\n");
    }
    req += "\r\n";
    s.write_all(req.as_bytes()).await.ok()?;
    tokio::time::timeout(Duration::from_secs(5), read_response(&mut s))
        .await
        .ok()?
}

async fn read_response(s: &mut TcpStream) -> Option<(u16, String)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let complete = |buf: &[u8]| -> Option<(u16, String)> {
        let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let status = head.split(' ').nth(1)?.parse().ok()?;
        let body = &buf[end..];
        let length = head.lines().find_map(|l| {
            l.strip_prefix("content-length:")
                .and_then(|v| v.trim().parse::<usize>().ok())
        });
        match length {
            Some(n) if body.len() >= n => {
                Some((status, String::from_utf8_lossy(&body[..n]).to_string()))
            }
            Some(_) => None,
            None if head.contains("transfer-encoding: chunked") => body
                .windows(5)
                .any(|w| w == b"0\r\n\r\n")
                .then(|| (status, String::new())),
            None => None,
        }
    };
    loop {
        if let Some(done) = complete(&buf) {
            return Some(done);
        }
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => {
                // Closed: whatever came is the answer (a body delimited by the close).
                let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
                let head = String::from_utf8_lossy(&buf[..end]).to_string();
                let status = head.split(' ').nth(1)?.parse().ok()?;
                return Some((status, String::from_utf8_lossy(&buf[end..]).to_string()));
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}
