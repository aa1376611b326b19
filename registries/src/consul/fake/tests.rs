//! The fake Consul itself: blocking, faults, scripts, ACLs and the agent API, read through the
//! registry's own client (so both sides of the wire are exercised).

use std::time::{Duration, Instant};

use super::*;
use crate::consul::ConsulConfig;
use crate::consul::client::{Client, ClientError, Query, TIMEOUT_GRACE};

fn client(fake: &FakeConsul, yaml: &str) -> Client {
    let mut config: ConsulConfig = serde_yaml::from_str(yaml).unwrap();
    config.address = Some(fake.url());
    Client::new(&config).unwrap()
}

fn blocking(index: u64, wait_ms: u64) -> Query {
    Query {
        index,
        wait: Duration::from_millis(wait_ms),
    }
}

async fn put(fake: &FakeConsul, path: &str, body: &str) -> u16 {
    reqwest::Client::new()
        .put(format!("{}{path}", fake.url()))
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn reads_block_until_the_index_moves() {
    let fake = FakeConsul::start().await;
    fake.register(Instance::new("web", "w1", "10.0.0.1", 80));
    let c = client(&fake, "{}");
    let first = c.health("web", blocking(0, 0)).await.unwrap();
    assert_eq!(first.body.len(), 1);
    assert!(first.meta.index > 0 && first.meta.known_leader);

    // No change: the read waits out its wait (plus jitter) and returns the same index.
    let t = Instant::now();
    let same = c
        .health("web", blocking(first.meta.index, 300))
        .await
        .unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(same.meta.index, first.meta.index);

    // A change wakes it long before the wait.
    let waiter = {
        let c = c.clone();
        let index = first.meta.index;
        tokio::spawn(async move { c.health("web", blocking(index, 60_000)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t = Instant::now();
    fake.register(Instance::new("web", "w2", "10.0.0.2", 80));
    let changed = waiter.await.unwrap().unwrap();
    assert!(t.elapsed() < Duration::from_secs(2));
    assert!(changed.meta.index > first.meta.index);
    assert_eq!(changed.body.len(), 2);

    // A change to another service does not wake it (per-service indexes).
    let index = changed.meta.index;
    let t = Instant::now();
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { c.health("web", blocking(index, 400)).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    fake.register(Instance::new("db", "d1", "10.0.0.3", 5432));
    let r = waiter.await.unwrap().unwrap();
    assert_eq!(r.meta.index, index);
    assert!(t.elapsed() >= Duration::from_millis(400));
}

#[tokio::test]
async fn services_list_and_checks() {
    let fake = FakeConsul::start().await;
    fake.register(Instance::new("web", "w1", "10.0.0.1", 80).tag("v1"));
    let c = client(&fake, "{}");
    let list = c.services(blocking(0, 0)).await.unwrap();
    assert_eq!(list.body.keys().collect::<Vec<_>>(), ["consul", "web"]);
    let list_index = list.meta.index;
    assert!(fake.set_service_check("w1", CheckStatus::Critical));
    assert!(fake.set_maintenance("w1", true));
    let h = c.health("web", blocking(0, 0)).await.unwrap();
    let statuses: Vec<(&str, &str)> = h.body[0]
        .checks
        .iter()
        .map(|c| (c.check_id.as_str(), c.status.as_str()))
        .collect();
    assert_eq!(
        statuses,
        [
            ("serfHealth", "passing"),
            ("_service_maintenance:w1", "critical"),
            ("service:w1", "critical")
        ]
    );
    let again = c.services(blocking(0, 0)).await.unwrap();
    assert_eq!(
        again.meta.index, list_index,
        "checks do not move the services list"
    );
}

#[tokio::test]
async fn persistent_faults() {
    let fake = FakeConsul::start().await;
    let c = client(&fake, "{}");
    fake.fail(Fault::Status(503));
    let e = c.services(blocking(0, 0)).await.unwrap_err();
    assert!(
        matches!(e, ClientError::Status { ref status, .. } if status.as_u16() == 503),
        "{e}"
    );

    fake.fail(Fault::Refuse);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let e = c.services(blocking(0, 0)).await.unwrap_err();
    assert!(matches!(e, ClientError::Connect { .. }), "{e}");
    assert!(e.to_string().contains("is it running"), "{e}");

    fake.heal();
    let ok = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if c.services(blocking(0, 0)).await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(ok.is_ok(), "listening again after heal");

    fake.fail(Fault::NoLeader);
    let e = c.services(blocking(0, 0)).await.unwrap_err().to_string();
    assert!(e.contains("No cluster leader"), "{e}");
    let stale = client(&fake, "stale: true");
    let r = stale.services(blocking(0, 0)).await.unwrap();
    assert!(!r.meta.known_leader);
    fake.fail(Fault::LastContact(Duration::from_millis(2500)));
    let r = stale.services(blocking(0, 0)).await.unwrap();
    assert_eq!(r.meta.last_contact, Duration::from_millis(2500));
    fake.heal();
}

#[tokio::test]
async fn a_hang_is_a_timeout_and_a_fault_reaches_blocked_reads() {
    let fake = FakeConsul::start().await;
    let c = client(&fake, "{}");
    let index = c.services(blocking(0, 0)).await.unwrap().meta.index;
    // Blocked, then the server starts failing: the blocked read gets the error at once.
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { c.services(blocking(index, 60_000)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t = Instant::now();
    fake.fail(Fault::Status(500));
    let e = waiter.await.unwrap().unwrap_err().to_string();
    assert!(e.contains("500"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(2));

    fake.fail(Fault::Hang);
    let t = Instant::now();
    let e = c.services(blocking(index, 200)).await.unwrap_err();
    assert!(matches!(e, ClientError::Timeout { .. }), "{e}");
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(200) + TIMEOUT_GRACE && took < Duration::from_secs(9),
        "{took:?}"
    );
}

// REG-6 scripts: any index, including backwards and 0.
#[tokio::test]
async fn scripted_answers_override_once() {
    let fake = FakeConsul::start().await;
    let c = client(&fake, "{}");
    fake.script(
        Route::Services,
        Scripted {
            index: Some(100),
            ..Default::default()
        },
    );
    fake.script(
        Route::Services,
        Scripted {
            index: Some(0),
            known_leader: Some(false),
            ..Default::default()
        },
    );
    fake.script(
        Route::Services,
        Scripted {
            status: Some(502),
            ..Default::default()
        },
    );
    let a = c.services(blocking(5, 10_000)).await.unwrap();
    assert_eq!(a.meta.index, 100, "at once, despite the blocking index");
    let b = c.services(blocking(100, 10_000)).await.unwrap();
    assert_eq!((b.meta.index, b.meta.known_leader), (0, false));
    assert!(c.services(blocking(0, 0)).await.is_err());
    let d = c.services(blocking(0, 0)).await.unwrap();
    assert!(d.meta.index > 0, "back to the real index");
}

#[tokio::test]
async fn acl_datacenter_and_partition_are_checked() {
    let fake = FakeConsul::start().await;
    fake.require_token(Some("s3cr3t"));
    let e = client(&fake, "{}")
        .services(blocking(0, 0))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("403") && e.contains("ACL"), "{e}");
    let c = client(&fake, "token: s3cr3t\ndatacenter: dc1");
    c.services(blocking(0, 0)).await.unwrap();
    let last = fake.requests().pop().unwrap();
    assert_eq!(last.token.as_deref(), Some("s3cr3t"));
    assert_eq!(last.query.get("dc").map(String::as_str), Some("dc1"));
    assert!(!last.query.contains_key("partition") && !last.query.contains_key("ns"));
    let e = client(&fake, "token: s3cr3t\ndatacenter: dc9")
        .services(blocking(0, 0))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("No path to datacenter"), "{e}");
    let e = client(&fake, "token: s3cr3t\npartition: p1")
        .services(blocking(0, 0))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("Enterprise"), "{e}");
}

#[tokio::test]
async fn the_agent_api_writes_like_a_real_agent() {
    let fake = FakeConsul::start().await;
    let c = client(&fake, "{}");
    let body = r#"{"ID": "vm-1", "Name": "billing", "Address": "10.9.0.1", "Port": 9000,
        "Meta": {"protocol": "http"}, "Check": {"TTL": "1h", "Status": "passing"}}"#;
    assert_eq!(put(&fake, "/v1/agent/service/register", body).await, 200);
    let h = c.health("billing", blocking(0, 0)).await.unwrap();
    assert_eq!(h.body[0].service.address, "10.9.0.1");
    assert_eq!(h.body[0].checks[1].status, "passing");
    assert_eq!(
        put(&fake, "/v1/agent/check/fail/service:vm-1", "").await,
        200
    );
    let h = c.health("billing", blocking(0, 0)).await.unwrap();
    assert_eq!(h.body[0].checks[1].status, "critical");
    assert_eq!(
        put(&fake, "/v1/agent/service/maintenance/vm-1?enable=true", "").await,
        200
    );
    assert_eq!(
        put(&fake, "/v1/agent/service/deregister/vm-1", "").await,
        200
    );
    assert_eq!(
        put(&fake, "/v1/agent/service/deregister/vm-1", "").await,
        404
    );
    assert!(
        c.health("billing", blocking(0, 0))
            .await
            .unwrap()
            .body
            .is_empty()
    );
    let counts = fake.request_counts();
    assert_eq!(counts.writes, 5);
    assert_eq!(counts.health, 3);
}

/// An HTTP endpoint whose answer status can be changed; stops when dropped.
struct Endpoint {
    url: String,
    status: std::sync::Arc<std::sync::atomic::AtomicU16>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn endpoint(status: u16) -> Endpoint {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/healthz/ready", listener.local_addr().unwrap());
    let status = std::sync::Arc::new(std::sync::atomic::AtomicU16::new(status));
    let answer = std::sync::Arc::clone(&status);
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                continue;
            };
            let code = answer.load(std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let reply =
                    format!("HTTP/1.1 {code} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                let _ = s.write_all(reply.as_bytes()).await;
            });
        }
    });
    Endpoint { url, status, task }
}

// HTTP checks registered through the agent API are run: 2xx passing, 429 warning, anything else
// or no answer critical; deregistration stops them.
#[tokio::test]
async fn http_checks_run_like_a_real_agent() {
    let fake = FakeConsul::start().await;
    let c = client(&fake, "{}");
    let ep = endpoint(200).await;
    let body = format!(
        r#"{{"ID": "vm-1", "Name": "billing", "Address": "10.9.0.1", "Port": 9000,
        "Check": {{"HTTP": "{}", "Interval": "50ms", "Timeout": "1s"}}}}"#,
        ep.url
    );
    assert_eq!(put(&fake, "/v1/agent/service/register", &body).await, 200);
    assert_eq!(fake.http_checks()[0].url, ep.url);
    let status = || async {
        let h = c.health("billing", blocking(0, 0)).await.unwrap();
        h.body[0]
            .checks
            .iter()
            .find(|k| k.check_id == "service:vm-1")
            .map(|k| k.status.clone())
            .unwrap_or_default()
    };
    let until = |want: &'static str| {
        let status = &status;
        async move {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                let got = status().await;
                if got == want {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "check stayed {got}, wanted {want}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    until("passing").await;
    ep.status.store(429, std::sync::atomic::Ordering::SeqCst);
    until("warning").await;
    ep.status.store(503, std::sync::atomic::Ordering::SeqCst);
    until("critical").await;
    ep.status.store(200, std::sync::atomic::Ordering::SeqCst);
    until("passing").await;
    drop(ep);
    until("critical").await;
    assert_eq!(
        put(&fake, "/v1/agent/service/deregister/vm-1", "").await,
        200
    );
    assert!(fake.http_checks().is_empty());
}
