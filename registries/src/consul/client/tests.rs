//! The client's request building and header parsing (the wire itself is tested against the
//! fake Consul in `fake/tests.rs`).

use super::*;

#[test]
fn blocking_timeouts_cover_consul_jitter() {
    let q = Query {
        index: 7,
        wait: Duration::from_secs(160),
    };
    assert_eq!(q.timeout(), Duration::from_secs(160 + 10) + TIMEOUT_GRACE);
    let q = Query { index: 0, ..q };
    assert_eq!(q.timeout(), TIMEOUT_GRACE, "a non-blocking read");
}

#[test]
fn headers_parse_with_safe_defaults() {
    let mut h = HeaderMap::new();
    assert_eq!(
        query_meta(&h),
        QueryMeta {
            index: 0,
            known_leader: true,
            last_contact: Duration::ZERO
        }
    );
    h.insert("X-Consul-Index", HeaderValue::from_static("42"));
    h.insert("X-Consul-KnownLeader", HeaderValue::from_static("false"));
    h.insert("X-Consul-LastContact", HeaderValue::from_static("1500"));
    let m = query_meta(&h);
    assert_eq!(m.index, 42);
    assert!(!m.known_leader);
    assert_eq!(m.last_contact, Duration::from_millis(1500));
}

#[test]
fn optional_parameters_are_sent_only_when_configured() {
    let c = Client::new(&ConsulConfig::default()).unwrap();
    assert!(c.common.is_empty(), "{:?}", c.common);
    let config: ConsulConfig = serde_yaml::from_str(
        "datacenter: dc2\nnamespace: team\npartition: p1\nstale: true\naddress: https://c:8501/prefix",
    )
    .unwrap();
    let c = Client::new(&config).unwrap();
    let keys: Vec<&str> = c.common.iter().map(|(k, _)| *k).collect();
    assert_eq!(keys, ["dc", "ns", "partition", "stale"]);
    assert_eq!(
        c.url(&["health", "service", "a b/c"]).as_str(),
        "https://c:8501/prefix/v1/health/service/a%20b%2Fc"
    );
}

#[test]
fn unreadable_tls_files_are_setup_errors() {
    let config: ConsulConfig = serde_yaml::from_str("tls: {ca_file: /nonexistent/ca.pem}").unwrap();
    let e = Client::new(&config).unwrap_err().to_string();
    assert!(
        e.contains("tls.ca_file") && e.contains("/nonexistent/ca.pem"),
        "{e}"
    );
}

// Something that is not Consul (no X-Consul-Index) is an error, never an empty catalog (REG-5).
#[tokio::test]
async fn an_answer_without_an_index_is_an_error() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 4096];
        let _ = s.read(&mut buf).await;
        let reply = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}";
        s.write_all(reply.as_bytes()).await.unwrap();
    });
    let config = ConsulConfig {
        address: Some(format!("http://{addr}")),
        ..ConsulConfig::default()
    };
    let c = Client::new(&config).unwrap();
    let e = c
        .services(Query {
            index: 0,
            wait: Duration::from_secs(1),
        })
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::NoIndex { .. }), "{e}");
    assert!(e.to_string().contains("X-Consul-Index"), "{e}");
    server.await.unwrap();
}
