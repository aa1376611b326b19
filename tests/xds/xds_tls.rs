//! xDS over mTLS (section E): a real rustls handshake against tributary's 15012-style port with
//! certificates made at test time. SEC-1 (client certificate required, verified against the
//! bundle), SEC-2 (node bound to the SPIFFE ID), SEC-3 (identity fixed for the stream), SEC-15
//! (certificate and bundle reload without dropping streams).

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use tokio::sync::mpsc;
use tonic::transport::Channel;
use tonic::{Code, Status, Streaming};
use tributary::config::Config;
use tributary::runtime::Running;
use tributary::tls::{IdentityMapping, TlsConfig};

use crate::support;
use crate::support::pki;
use crate::support::pki::{Ca, Leaf};
use crate::support::raw_ads;
use crate::support::type_url::{CDS, LDS};

const WAIT: Duration = Duration::from_secs(10);
const SHOP_CART: &str = "spiffe://cluster.local/ns/shop/sa/cart";
/// An Istio-style node id in namespace `shop`.
const SHOP_NODE: &str = "sidecar~127.0.0.1~cart-1.shop~shop.svc.cluster.local";

struct Fixture {
    dir: tempfile::TempDir,
    ca: Ca,
    running: Running,
}

fn write_server(dir: &Path, ca: &Ca, bundle: &str) -> TlsConfig {
    let server = ca.server();
    TlsConfig {
        addr: "127.0.0.1:0".parse().unwrap(),
        cert: pki::write(dir, "tls.crt", &server.cert),
        key: pki::write(dir, "tls.key", &server.key),
        client_ca: pki::write(dir, "ca.crt", bundle),
        identity: IdentityMapping::Istio,
        trust_domain: Some("cluster.local".into()),
        reload_interval: Duration::from_millis(50),
        handshake_timeout: Duration::from_secs(2),
    }
}

async fn start() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("mesh root");
    let tls = write_server(dir.path(), &ca, &ca.pem);
    let config = Config {
        xds_addr: "127.0.0.1:0".parse().unwrap(),
        admin_addr: "127.0.0.1:0".parse().unwrap(),
        tls: Some(tls),
        ..Config::default()
    };
    let running = support::start_runtime(config).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while !running.store.is_ready() {
        assert!(tokio::time::Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Fixture { dir, ca, running }
}

impl Fixture {
    fn channel(&self, server_ca: &str, leaf: Option<&Leaf>) -> Channel {
        let addr = self.running.xds_tls_addr.expect("tls port");
        pki::channel(addr, pki::client_config(server_ca, leaf))
    }
}

fn node(id: &str) -> Node {
    Node {
        id: id.into(),
        cluster: "test".into(),
        ..Default::default()
    }
}

struct Ads {
    tx: mpsc::Sender<DiscoveryRequest>,
    rx: Streaming<DiscoveryResponse>,
}

/// Opens ADS, asks for all clusters as `node_id`, and returns the stream with its first response.
async fn ads(ch: Channel, node_id: &str) -> Result<(Ads, DiscoveryResponse), Status> {
    let (tx, rx, first) = raw_ads::open_first(ch, node(node_id), WAIT).await?;
    Ok((Ads { tx, rx }, first))
}

#[tokio::test]
async fn client_certificate_is_required_and_verified() {
    // SEC-1: no certificate, a foreign CA's certificate and an expired certificate are all refused
    // at the handshake; a valid one gets config.
    let f = start().await;
    let foreign = Ca::new("someone else");
    let cases = [
        ("no client certificate", None),
        ("foreign CA", Some(foreign.client(SHOP_CART))),
        ("expired", Some(f.ca.expired_client(SHOP_CART))),
    ];
    for (what, leaf) in &cases {
        let r = ads(f.channel(&f.ca.pem, leaf.as_ref()), SHOP_NODE).await;
        let e = r
            .err()
            .unwrap_or_else(|| panic!("{what}: served over mTLS"));
        assert!(
            matches!(e.code(), Code::Unavailable | Code::Unknown),
            "{what}: refused at the transport, got {e:?}"
        );
    }
    let good = f.ca.client(SHOP_CART);
    let (_s, first) = ads(f.channel(&f.ca.pem, Some(&good)), SHOP_NODE)
        .await
        .expect("a valid certificate is served");
    assert_eq!(first.type_url, CDS);
    assert!(!first.resources.is_empty(), "the demo mesh's clusters");
    f.running.stop().await;
}

#[tokio::test]
async fn claimed_identity_must_match_the_certificate() {
    // SEC-2: a node of namespace `bank` on a `shop` certificate is refused with PERMISSION_DENIED
    // before any response.
    let f = start().await;
    let leaf = f.ca.client(SHOP_CART);
    let other_ns = "sidecar~127.0.0.1~vault-1.bank~bank.svc.cluster.local";
    let e = ads(f.channel(&f.ca.pem, Some(&leaf)), other_ns)
        .await
        .err()
        .expect("mismatch refused");
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("does not match"), "{}", e.message());
    // A certificate with no SPIFFE ID of the trust domain is refused too.
    let alien = f.ca.client("spiffe://elsewhere/ns/shop/sa/cart");
    let e = ads(f.channel(&f.ca.pem, Some(&alien)), SHOP_NODE)
        .await
        .err()
        .expect("foreign trust domain refused");
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");

    // SEC-3: the identity holds for the stream: a later request naming another node ends it.
    let (mut s, _) = ads(f.channel(&f.ca.pem, Some(&leaf)), SHOP_NODE)
        .await
        .unwrap();
    s.tx.send(DiscoveryRequest {
        node: Some(node(other_ns)),
        type_url: LDS.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let end = tokio::time::timeout(WAIT, s.rx.message()).await.unwrap();
    let status = end.expect_err("stream ended with a status");
    assert_ne!(status.code(), Code::Ok);
    f.running.stop().await;
}

#[tokio::test]
async fn certificate_and_bundle_reload_without_dropping_streams() {
    // SEC-15: rotate to a new CA (bundle holds old + new during the overlap), then drop the old.
    let f = start().await;
    let old_leaf = f.ca.client(SHOP_CART);
    let (mut live, _) = ads(f.channel(&f.ca.pem, Some(&old_leaf)), SHOP_NODE)
        .await
        .unwrap();

    let new_ca = Ca::new("mesh root 2");
    let new_leaf = new_ca.client(SHOP_CART);
    let both = format!("{}{}", f.ca.pem, new_ca.pem);
    write_server(f.dir.path(), &new_ca, &both);
    // New handshakes see the new server certificate (signed by the new CA) and accept both CAs.
    wait_served(&f, &new_ca.pem, &new_leaf).await;
    ads(f.channel(&new_ca.pem, Some(&old_leaf)), SHOP_NODE)
        .await
        .expect("old client CA still trusted during the overlap");

    // The bundle drops the old CA: old client certificates are refused on new connections...
    write_server(f.dir.path(), &new_ca, &new_ca.pem);
    let deadline = tokio::time::Instant::now() + WAIT;
    while ads(f.channel(&new_ca.pem, Some(&old_leaf)), SHOP_NODE)
        .await
        .is_ok()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "old CA still trusted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // ...while the stream opened before any reload still works.
    live.tx
        .send(DiscoveryRequest {
            type_url: LDS.into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let resp = tokio::time::timeout(WAIT, live.rx.message())
        .await
        .expect("the old stream still answers")
        .expect("no error")
        .expect("not ended");
    assert_eq!(resp.type_url, LDS);

    // Unusable new files keep the current material.
    pki::write(f.dir.path(), "tls.key", "not a key");
    tokio::time::sleep(Duration::from_millis(200)).await;
    ads(f.channel(&new_ca.pem, Some(&new_leaf)), SHOP_NODE)
        .await
        .expect("a broken key file does not replace the working one");
    f.running.stop().await;
}

async fn wait_served(f: &Fixture, server_ca: &str, leaf: &Leaf) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while ads(f.channel(server_ca, Some(leaf)), SHOP_NODE)
        .await
        .is_err()
    {
        assert!(tokio::time::Instant::now() < deadline, "reload not seen");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_silent_client_is_dropped_after_the_handshake_timeout() {
    // SEC-11: a connection that never finishes its handshake costs only until the timeout (2 s
    // here), and does not stop others from being served meanwhile.
    use tokio::io::AsyncReadExt;
    let f = start().await;
    let addr = f.running.xds_tls_addr.unwrap();
    let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let leaf = f.ca.client(SHOP_CART);
    ads(f.channel(&f.ca.pem, Some(&leaf)), SHOP_NODE)
        .await
        .expect("served while another handshake hangs");
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(6), silent.read(&mut buf))
        .await
        .expect("closed by the handshake timeout");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    f.running.stop().await;
}
