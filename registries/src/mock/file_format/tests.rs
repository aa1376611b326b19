use std::path::Path;

use super::*;
use crate::model::{ClusterId, RegistryId};

fn origin() -> Origin {
    Origin {
        registry: RegistryId::new("mock"),
        cluster: ClusterId::new("c1"),
    }
}

fn parse(text: &str) -> Result<Services, FileError> {
    parse_file(Path::new("/etc/mesh/m.yaml"), text, &origin())
}

/// Parses `text`, expects an error, and checks it names file:line, the service and the field.
fn expect_error(text: &str, line: usize, hostname: &str, field: &str) -> String {
    let err = parse(text).expect_err("the file is invalid").to_string();
    assert!(
        err.starts_with(&format!("/etc/mesh/m.yaml:{line}:")),
        "file:line in {err}"
    );
    assert!(
        err.contains(&format!("{hostname:?}")),
        "hostname {hostname} in {err}"
    );
    assert!(err.contains(field), "field {field} in {err}");
    err
}

const GOOD: &str = "services:
  - hostname: Echo.Demo.svc.cluster.local
    ports: [{name: http, port: 18080, protocol: HTTP}, {name: grpc, port: 18090, protocol: GRPC}]
    resolution: STATIC
    location: MESH_EXTERNAL
    vips: [10.0.0.1]
    labels: {app: echo}
    service_accounts: [b, a, a]
    endpoints:
      - address: 127.0.0.2
        ports: {http: 19090}
        labels: {version: v2}
        locality: us-east/zone-a/sub
        health: draining
        weight: 3
        network: n1
        service_account: echo
      - address: 127.0.0.1
";

#[test]
fn a_good_file_becomes_the_model() {
    let services = parse(GOOD).unwrap();
    let host = Hostname::new("echo.demo.svc.cluster.local").unwrap();
    let s = &services[&host];
    assert_eq!(s.service.hostname.as_str(), "echo.demo.svc.cluster.local");
    assert_eq!(s.service.ports.len(), 2);
    assert_eq!(s.service.ports[1].protocol, Protocol::Grpc);
    assert_eq!(s.service.location, MeshLocation::MeshExternal);
    assert_eq!(s.service.service_accounts, ["a", "b"]);
    assert_eq!(
        s.service.vips[&ClusterId::new("c1")],
        ["10.0.0.1".parse::<IpAddr>().unwrap()]
    );
    assert_eq!(s.service.origin, origin());
    // Sorted by address.
    assert_eq!(s.endpoints[0].address, "127.0.0.1");
    assert_eq!(s.endpoints[0].weight, 1);
    assert_eq!(s.endpoints[0].health, Health::Healthy);
    let e = &s.endpoints[1];
    assert_eq!(e.ports["http"], 19090);
    assert_eq!(e.locality.subzone, "sub");
    assert_eq!(e.health, Health::Draining);
    assert_eq!(
        (e.weight, e.network.as_str(), e.service_account.as_str()),
        (3, "n1", "echo")
    );
    assert_eq!(e.origin, origin());
    assert!(parse("services: []").unwrap().is_empty());
    assert!(parse("{}").unwrap().is_empty());
}

#[test]
fn unknown_field_names_line_service_and_field() {
    let text = "services:\n  - hostname: a.demo\n    ports: [{name: http, port: 80, protocol: HTTP}]\n    endpoints:\n      - address: 1.2.3.4\n        wieght: 2\n";
    let err = expect_error(text, 6, "a.demo", "services[0].endpoints[0]");
    assert!(err.contains("unknown field `wieght`"), "{err}");
}

#[test]
fn bad_protocol_names_line_service_and_field() {
    let text = "services:\n  - hostname: a.demo\n    ports:\n      - {name: http, port: 80, protocol: HTTPS}\n";
    let err = expect_error(text, 4, "a.demo", "services[0].ports[0].protocol");
    assert!(err.contains("HTTPS"), "{err}");
}

#[test]
fn bad_hostname_names_line_and_field() {
    let text = "services:\n  - hostname: ok.demo\n    ports: [{name: http, port: 80, protocol: HTTP}]\n  - hostname: bad..name\n    ports: [{name: http, port: 80, protocol: HTTP}]\n";
    expect_error(text, 4, "bad..name", "services[1].hostname");
}

#[test]
fn duplicate_hostname_names_both_occurrences() {
    let text = "services:\n  - hostname: a.demo\n    ports: [{name: http, port: 80, protocol: HTTP}]\n  - hostname: b.demo\n    ports: [{name: http, port: 80, protocol: HTTP}]\n  - hostname: A.demo\n    ports: [{name: http, port: 80, protocol: HTTP}]\n";
    let err = parse(text).unwrap_err().to_string();
    assert!(err.starts_with("/etc/mesh/m.yaml:6:"), "{err}");
    assert!(err.contains("\"a.demo\""), "{err}");
    assert!(err.contains("services[0] (line 2)"), "{err}");
    assert!(err.contains("services[2] (line 6)"), "{err}");
}

#[test]
fn duplicate_port_name_and_number() {
    let text = "services:\n  - hostname: a.demo\n    ports:\n      - {name: http, port: 80, protocol: HTTP}\n      - {name: http, port: 81, protocol: HTTP}\n";
    let err = expect_error(text, 5, "a.demo", "services[0].ports[1].name");
    assert!(err.contains("ports[0]"), "names the other port: {err}");
    let text = "services:\n  - hostname: a.demo\n    ports:\n      - {name: http, port: 80, protocol: HTTP}\n      - {name: web, port: 80, protocol: HTTP}\n";
    expect_error(text, 5, "a.demo", "services[0].ports[1].port");
}

#[test]
fn port_zero_weight_zero_and_unknown_endpoint_port() {
    let text = "services:\n  - hostname: a.demo\n    ports:\n      - {name: http, port: 0, protocol: HTTP}\n";
    expect_error(text, 4, "a.demo", "services[0].ports[0].port");

    let base = "services:\n  - hostname: a.demo\n    ports: [{name: http, port: 80, protocol: HTTP}]\n    endpoints:\n      - address: 1.2.3.4\n";
    let err = expect_error(
        &format!("{base}        weight: 0\n"),
        6,
        "a.demo",
        "services[0].endpoints[0].weight",
    );
    assert!(err.contains("weight 0"), "{err}");
    let err = expect_error(
        &format!("{base}        ports: {{grpc: 9000}}\n"),
        6,
        "a.demo",
        "services[0].endpoints[0].ports.grpc",
    );
    assert!(err.contains("not a port of the service"), "{err}");
    expect_error(
        &format!("{base}        ports: {{http: 0}}\n"),
        6,
        "a.demo",
        "services[0].endpoints[0].ports.http",
    );
}

#[test]
fn a_half_written_file_is_a_parse_error() {
    // Cut inside a flow sequence. (A cut at a line boundary can be valid YAML; the reload
    // debounce is what keeps us from reading a file mid-write.)
    let cut = &GOOD[..GOOD.find("protocol: GRPC").unwrap() + 12];
    let err = parse(cut).expect_err("half a file is rejected").to_string();
    assert!(err.starts_with("/etc/mesh/m.yaml:3:"), "{err}");
    let err = parse("services:\n  - hostname: a.demo\n    ports: [{name: http, port: 80, pro")
        .expect_err("unterminated flow mapping")
        .to_string();
    assert!(err.starts_with("/etc/mesh/m.yaml:"), "{err}");
}

#[test]
fn missing_file_names_the_path() {
    let err = read_file(Path::new("/nonexistent/tributary/m.yaml"), &origin())
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/tributary/m.yaml"), "{err}");
}

/// One anchored service with `endpoints` endpoints, then `refs` aliases of it: a few hundred KB of
/// text that expands to `refs × endpoints` endpoints.
pub(crate) fn alias_bomb(endpoints: usize, refs: usize) -> String {
    let mut text = String::from(
        "services:\n  - &s\n    hostname: a.b\n    ports: [{name: http, port: 80, protocol: HTTP}]\n    endpoints:\n",
    );
    for i in 0..endpoints {
        text.push_str(&format!(
            "      - {{address: 10.0.{}.{}}}\n",
            i / 250,
            i % 250
        ));
    }
    for _ in 0..refs {
        text.push_str("  - *s\n");
    }
    text
}

/// Guards a hostile parse: it must end (rejected) long before this; not a performance bound.
const HOSTILE_PARSE_LIMIT: std::time::Duration = std::time::Duration::from_secs(20);

fn parse_bounded(text: String) -> Result<Services, FileError> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(parse(&text));
    });
    rx.recv_timeout(HOSTILE_PARSE_LIMIT)
        .expect("the parse ended within the bound")
}

#[test]
fn deep_flow_nesting_is_refused_before_parsing() {
    // 100,000 nested `[` (200 KB) used to cost libyaml tens of seconds of CPU.
    let text = format!("services: {}{}", "[".repeat(100_000), "]".repeat(100_000));
    let err = parse_bounded(text).unwrap_err();
    assert!(matches!(err, FileError::TooDeep { line: 1, .. }), "{err}");
    assert!(err.to_string().contains("nested deeper than"), "{err}");
}

#[test]
fn deep_block_nesting_is_refused() {
    // Block nesting costs indentation or `- ` per level and is read linearly; the typed parse
    // stops at the first level that is not a service (serde_yaml's recursion limit behind it).
    let text = format!("services:\n{}x\n", "- ".repeat(100_000));
    let err = parse_bounded(text).unwrap_err().to_string();
    assert!(err.contains("services[0]"), "{err}");
}

#[test]
fn an_alias_bomb_is_refused_without_expanding_it() {
    // 1,000 endpoints referenced 10,000 times: ~150 KB of text, 10 million endpoints expanded.
    let text = alias_bomb(1_000, 10_000);
    assert!(text.len() < 200_000, "{}", text.len());
    let err = parse_bounded(text).unwrap_err();
    let shown = err.to_string();
    assert!(matches!(err, FileError::Syntax { .. }), "{shown}");
    assert!(shown.contains(limits::OVER_BUDGET), "{shown}");
    // Aliases that expand to little are fine (here: a duplicate hostname, found after parsing).
    let err = parse_bounded(alias_bomb(3, 1)).unwrap_err();
    assert!(matches!(err, FileError::DuplicateHostname { .. }), "{err}");
}

#[test]
fn oversized_names_and_labels_are_refused() {
    let big = "v".repeat(200_000);
    let text = format!(
        "services:\n  - hostname: a.b\n    ports: [{{name: http, port: 80, protocol: HTTP}}]\n    endpoints:\n      - address: 10.0.0.1\n        labels: {{app: {big}}}\n"
    );
    let err = expect_error(&text, 6, "a.b", "services[0].endpoints[0].labels.app");
    assert!(err.contains("label value is 200000 bytes"), "{err}");
    assert!(err.len() < 1_000, "the error does not repeat the label");
    let text = format!(
        "services:\n  - hostname: a.b\n    ports: [{{name: {}, port: 80, protocol: HTTP}}]\n",
        "p".repeat(limits::MAX_NAME_BYTES + 1)
    );
    let err = parse(&text).unwrap_err().to_string();
    assert!(
        err.contains("ports[0].name") && err.contains("at most 253"),
        "{err}"
    );
    let labels: String = (0..=limits::MAX_LABELS)
        .map(|i| format!("k{i}: v, "))
        .collect();
    let text = format!(
        "services:\n  - hostname: a.b\n    labels: {{{labels}}}\n    ports: [{{name: http, port: 80, protocol: HTTP}}]\n"
    );
    let err = parse(&text).unwrap_err().to_string();
    assert!(err.contains("65 labels; at most 64"), "{err}");
}

#[test]
fn a_file_past_the_size_limit_is_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.yaml");
    let mut text = String::from("services: []\n");
    while (text.len() as u64) <= limits::MAX_FILE_BYTES {
        text.push_str(&"# padding\n".repeat(100_000));
    }
    std::fs::write(&path, text).unwrap();
    let err = read_file(&path, &origin()).unwrap_err();
    assert!(matches!(err, FileError::TooLarge { .. }), "{err}");
    std::fs::write(&path, "services: []\n").unwrap();
    assert!(read_file(&path, &origin()).unwrap().is_empty());
}
