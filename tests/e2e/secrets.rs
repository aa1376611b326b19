//! SEC-7 / INV-6 with the real binary: the secrets tributary holds (Consul ACL tokens from the
//! config file and from `CONSUL_HTTP_TOKEN`, the mTLS server's private key) never appear in any
//! debug view, in `/metrics`, or in the log, even at `RUST_LOG=debug` for every crate and while
//! errors are being reported (a refused token, a failed handshake, a broken config reload).

#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::Duration;

use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use tokio::sync::mpsc;
use tonic::Streaming;
use tributary_registries::consul::fake::{FakeConsul, Instance};

use crate::support::harness::{Tributary, eventually, free_port, http_get, loopback, replace_file};
use crate::support::pki;
use crate::support::pki::Ca;
use crate::support::raw_ads;

const FILE_TOKEN: &str = "file-token-5d1c0b7e-0f4e-4c1a-9a57-2f3c8e1d6b90";
const ENV_TOKEN: &str = "env-token-8a2e4f61-77c3-4b0d-b1e9-6c5d3a2f1e08";
const SHOP_CART: &str = "spiffe://cluster.local/ns/shop/sa/cart";
const SHOP_NODE: &str = "sidecar~127.0.0.1~cart-1.shop~shop.svc.cluster.local";

/// Every admin page: the index, each handler it lists (with a proxy id where one is needed), the
/// metrics and readiness.
async fn every_admin_page(t: &Tributary) -> Vec<(String, String)> {
    let list = t.get("/debug/list").await;
    let handlers: Vec<String> = serde_json::from_str(&list).unwrap();
    assert!(handlers.len() >= 7, "{list}");
    let mut paths = vec![
        "/debug".to_string(),
        "/metrics".to_string(),
        "/ready".to_string(),
    ];
    // config_dump needs a proxy: the mTLS one that connected.
    paths.extend(handlers.into_iter().map(|p| match p.as_str() {
        "/debug/config_dump" => format!("{p}?proxyID={SHOP_NODE}"),
        _ => p,
    }));
    let mut pages = Vec::new();
    for path in paths {
        let (status, body) = http_get(t.admin, "localhost", &path).await.unwrap();
        assert_eq!(status, 200, "{path}: {body}");
        pages.push((path, body));
    }
    pages
}

fn assert_no_secret(what: &str, text: &str, secrets: &[(&str, &str)]) {
    for (name, secret) in secrets {
        assert!(!text.contains(secret), "{name} appears in {what}:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_never_reach_debug_views_metrics_or_logs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (dc1, dc2) = (FakeConsul::start().await, FakeConsul::start().await);
    dc1.require_token(Some(FILE_TOKEN));
    dc2.require_token(Some(ENV_TOKEN));
    dc1.register(Instance::new("web", "web-1", "127.0.0.2", 8080).meta("protocol", "http"));
    dc2.register(Instance::new("db", "db-1", "127.0.0.3", 5432));

    let ca = Ca::new("mesh root");
    let server = ca.server();
    let config_text = format!(
        "sync_timeout: 20s\n\
         tls:\n  addr: {tls}\n  cert: {cert}\n  key: {key}\n  client_ca: {ca}\n  trust_domain: cluster.local\n\
         registries:\n\
         \x20 - type: consul\n    name: dc1\n    address: {dc1}\n    token: {FILE_TOKEN}\n\
         \x20 - type: consul\n    name: dc2\n    address: {dc2}\n",
        tls = loopback(free_port()),
        cert = pki::write(d, "tls.crt", &server.cert).display(),
        key = pki::write(d, "tls.key", &server.key).display(),
        ca = pki::write(d, "ca.crt", &ca.pem).display(),
        dc1 = dc1.url(),
        dc2 = dc2.url(),
    );
    let config = d.join("tributary.yaml");
    std::fs::write(&config, &config_text).unwrap();
    let tls_addr: std::net::SocketAddr = config_text
        .lines()
        .find_map(|l| l.trim().strip_prefix("addr: "))
        .unwrap()
        .parse()
        .unwrap();
    let mut t = Tributary::start_with_env(
        d,
        loopback(free_port()),
        loopback(free_port()),
        &["--config", config.to_str().unwrap()],
        &[("RUST_LOG", "debug"), ("CONSUL_HTTP_TOKEN", ENV_TOKEN)],
    )
    .await;

    // The tokens were really used: both datacenters' services are served.
    eventually(Duration::from_secs(10), "both Consul services", || async {
        let body = t.get("/debug/registryz").await;
        (body.contains("web.service.consul") && body.contains("db.service.consul")).then_some(())
    })
    .await;
    assert!(t.get("/debug/configz").await.contains("<redacted>"));

    // An mTLS proxy is served; a foreign certificate is refused.
    let good = ca.client(SHOP_CART);
    let served = ads(pki::channel(
        tls_addr,
        pki::client_config(&ca.pem, Some(&good)),
    ))
    .await;
    assert!(served.is_some(), "a valid client certificate is served");
    let stranger = Ca::new("someone else").client(SHOP_CART);
    let refused = ads(pki::channel(
        tls_addr,
        pki::client_config(&ca.pem, Some(&stranger)),
    ))
    .await;
    assert!(refused.is_none(), "a foreign client certificate is refused");

    // Errors while the secrets are in use: Consul refuses the token, a reload is broken.
    dc1.require_token(Some("another-token"));
    dc1.register(Instance::new("web", "web-2", "127.0.0.4", 8080));
    let status = eventually(Duration::from_secs(10), "dc1 degraded", || async {
        let view: serde_json::Value =
            serde_json::from_str(&t.get("/debug/registryz").await).ok()?;
        let status = view["registries"]
            .as_array()?
            .iter()
            .find(|r| r["id"] == "dc1")?["status"]
            .as_str()?
            .to_string();
        status.starts_with("degraded").then_some(status)
    })
    .await;
    println!("dc1: {status}");
    replace_file(&config, &config_text.replace("type: consul", "type: nope"));
    let ok = Command::new("kill")
        .args(["-HUP", &t.proc_id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());

    let key_lines: Vec<&str> = server
        .key
        .lines()
        .filter(|l| !l.starts_with("-----") && l.len() > 16)
        .collect();
    assert!(!key_lines.is_empty());
    let mut secrets = vec![("the file token", FILE_TOKEN), ("the env token", ENV_TOKEN)];
    secrets.extend(key_lines.iter().map(|l| ("the TLS private key", *l)));

    for (path, body) in every_admin_page(&t).await {
        assert_no_secret(&path, &body, &secrets);
    }
    let log = eventually(Duration::from_secs(10), "the reload failure logged", || {
        let log = std::fs::read_to_string(&t.proc.log).unwrap();
        async move { log.contains("config reload failed").then_some(log) }
    })
    .await;
    assert!(log.contains("DEBUG"), "the log is at debug level");
    assert!(t.proc.alive());
    assert_no_secret("the log", &log, &secrets);
}

/// An ADS stream over `ch` that got its first response, kept open; `None` if refused.
async fn ads(
    ch: tonic::transport::Channel,
) -> Option<(mpsc::Sender<DiscoveryRequest>, Streaming<DiscoveryResponse>)> {
    let opened = raw_ads::open_first(ch, raw_ads::node(SHOP_NODE), Duration::from_secs(10)).await;
    opened.ok().map(|(tx, s, _)| (tx, s))
}
