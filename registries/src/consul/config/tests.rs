//! Config parsing and validation.

use super::*;

fn parse(yaml: &str) -> ConsulConfig {
    serde_yaml::from_str(yaml).unwrap()
}

#[test]
fn defaults_follow_consul_and_the_issue() {
    let c = parse("{}");
    assert_eq!(c, ConsulConfig::default());
    c.validate().unwrap();
    assert_eq!(c.effective_address(), "http://127.0.0.1:8500");
    assert_eq!(c.wait, Duration::from_secs(300), "Consul's default wait");
    assert_eq!(c.hostname("web").unwrap().as_str(), "web.service.consul");
    assert_eq!(c.origin().registry.as_str(), "consul");
    assert_eq!(c.origin().cluster.as_str(), "consul");
    assert_eq!(c.skip_services, ["consul"]);
    assert!(c.include_kinds.is_empty());
    assert_eq!(c.default_protocol, Protocol::Tcp);
}

#[test]
fn cluster_defaults_to_the_datacenter_and_templates_may_use_it() {
    let c = parse("name: east\ndatacenter: dc2\nhostname_template: '{service}.{dc}.consul'");
    c.validate().unwrap();
    assert_eq!(c.origin().cluster.as_str(), "dc2");
    assert_eq!(c.hostname("Web").unwrap().as_str(), "web.dc2.consul");
    let c = parse("datacenter: dc2\ncluster: c9");
    assert_eq!(c.origin().cluster.as_str(), "c9");
}

#[test]
fn addresses_without_scheme_are_http() {
    let c = parse("address: consul.local:8500");
    c.validate().unwrap();
    assert_eq!(c.effective_address(), "http://consul.local:8500");
    let c = parse("address: https://consul:8501");
    assert_eq!(c.effective_address(), "https://consul:8501");
    let e = parse("address: ftp://x")
        .validate()
        .unwrap_err()
        .to_string();
    assert!(e.contains("ftp"), "{e}");
}

#[test]
fn the_token_is_never_serialized() {
    let c = parse("token: s3cr3t");
    let shown = serde_json::to_string(&c).unwrap();
    assert!(!shown.contains("s3cr3t"), "{shown}");
    assert!(shown.contains("<redacted>"), "{shown}");
}

#[test]
fn bad_settings_name_the_field() {
    let cases = [
        ("wait: 11m", "wait"),
        ("wait: 0s", "wait"),
        ("max_concurrent_watches: 0", "max_concurrent_watches"),
        ("min_query_interval: 0s", "min_query_interval"),
        ("max_requests_per_second: 0", "max_requests_per_second"),
        ("backoff: {initial: 1m, max: 1s}", "backoff"),
        ("hostname_template: '{name}.consul'", "{service}"),
        ("hostname_template: '{service}.{dc}.consul'", "datacenter"),
        ("hostname_template: '{service}.{ns}.consul'", "placeholder"),
        ("hostname_template: '{service}..consul'", "valid hostname"),
        ("token: a\ntoken_file: /t", "token_file"),
        ("tls: {cert_file: /c}", "key_file"),
        ("namespace: ''", "namespace"),
        ("name: ''", "name"),
    ];
    for (yaml, want) in cases {
        let e = parse(yaml).validate().unwrap_err().to_string();
        assert!(e.contains(want), "{yaml}: {e}");
    }
    let e = serde_yaml::from_str::<ConsulConfig>("adress: x")
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown field `adress`"), "{e}");
    let e = serde_yaml::from_str::<ConsulConfig>("wait: soon")
        .unwrap_err()
        .to_string();
    assert!(e.contains("soon"), "{e}");
}
