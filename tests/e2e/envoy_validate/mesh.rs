//! The representative mesh the real-Envoy test validates: every resolution and protocol, plus
//! the conflicts generation must defuse (shared short names, a shared VIP, a hostname that is
//! another's short name, TCP services sharing a port, HTTP and TCP on one port).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use tributary_registries::{ClusterId, Health, Locality, Protocol, Resolution};

use tributary::aggregate::MergedService;
use tributary::envoy::fixtures::{ep, merged, port, with_resolution};

/// A mesh with every shape the generator must handle, including the conflicts it must defuse.
pub(super) fn mesh() -> Vec<MergedService> {
    let zone = |ep_: &str, l: &str| {
        let mut e = ep(ep_);
        e.locality = Locality::parse(l);
        e
    };
    let mut echo = merged(
        "echo.demo.svc.cluster.local",
        vec![
            port("http", 80, Protocol::Http),
            port("grpc", 9090, Protocol::Grpc),
        ],
        vec![
            zone("10.1.0.2", "us-east/a/"),
            zone("10.1.0.1", "us-west/b/"),
            ep("echo.not-an-ip.example"), // REG-17: dropped from EDS
            ep("unix:///var/run/echo.sock"),
        ],
    );
    echo.service.vips.insert(
        ClusterId::new("c1"),
        vec![IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))],
    );
    echo.service.vips.insert(
        ClusterId::new("c2"),
        vec![IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1))],
    );
    let mut draining = ep("10.1.0.3");
    draining.health = Health::Draining;
    let mut sick = ep("10.1.0.4");
    sick.health = Health::Unhealthy;
    echo.endpoints.extend([draining, sick]);
    // Short name `echo` collides with echo.demo.svc...; `echo.demo` is this one's own hostname.
    let echo_other = merged(
        "echo.other.svc.cluster.local",
        vec![port("http", 80, Protocol::Http)],
        vec![],
    );
    let echo_short = merged(
        "echo.demo",
        vec![port("web", 80, Protocol::Http)],
        vec![ep("10.2.0.1")],
    );
    let mut h2 = merged(
        "h2.demo.svc.cluster.local",
        vec![port("h2", 9090, Protocol::Http2)],
        vec![ep("10.3.0.1")],
    );
    // Same VIP as echo on 9090: an ambiguous name.
    h2.service.vips.insert(
        ClusterId::new("c1"),
        vec![IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))],
    );
    let db = merged(
        "db.demo.svc.cluster.local",
        vec![port("pg", 5432, Protocol::Tcp)],
        vec![ep("10.4.0.1")],
    );
    let db2 = merged(
        "db2.demo.svc.cluster.local",
        vec![port("pg", 5432, Protocol::Tcp)],
        vec![],
    );
    let web = merged("web.demo", vec![port("http", 8080, Protocol::Http)], vec![]);
    let raw = merged("raw.demo", vec![port("raw", 8080, Protocol::Tcp)], vec![]);
    let mut dns_ep = ep("localhost");
    dns_ep.ports.insert("https".to_string(), 8443);
    let dns = with_resolution(
        merged(
            "ext.example.com",
            vec![
                port("https", 443, Protocol::Tcp),
                port("h2", 8444, Protocol::Http2),
            ],
            vec![dns_ep, ep("127.0.0.1"), ep("unix:///x")],
        ),
        Resolution::Dns,
    );
    let dns_empty = with_resolution(
        merged(
            "empty.example.com",
            vec![port("http", 8081, Protocol::Http)],
            vec![],
        ),
        Resolution::Dns,
    );
    let logical = with_resolution(
        merged(
            "one.example.com",
            vec![port("grpc", 8082, Protocol::Grpc)],
            vec![ep("localhost"), ep("example.com")],
        ),
        Resolution::DnsRoundRobin,
    );
    let logical_empty = with_resolution(
        merged(
            "none.example.com",
            vec![port("tcp", 8083, Protocol::Tcp)],
            vec![],
        ),
        Resolution::DnsRoundRobin,
    );
    let passthrough = with_resolution(
        merged(
            "headless.demo.svc.cluster.local",
            vec![
                port("mysql", 3306, Protocol::Tcp),
                port("http", 3307, Protocol::Http),
            ],
            vec![ep("10.5.0.1")],
        ),
        Resolution::Passthrough,
    );
    vec![
        echo,
        echo_other,
        echo_short,
        h2,
        db,
        db2,
        web,
        raw,
        dns,
        dns_empty,
        logical,
        logical_empty,
        passthrough,
    ]
}
