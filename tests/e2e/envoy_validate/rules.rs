//! The real Envoy judges what traffic rules generate: subset clusters and assignments, every
//! traffic policy field, and every VirtualService route feature (INV-7, REG-12).

use std::collections::BTreeMap;
use std::sync::Arc;

use tributary_registries::rules::{Rule, RuleSet};
use tributary_registries::{Endpoint, Protocol, Resolution};

use super::{bootstrap_with_rules, envoy_validate};
use tributary::envoy::fixtures::{ep, merged, port, rule_meta as meta, with_resolution};

fn labelled(ip: &str, version: &str) -> Endpoint {
    let mut e = ep(ip);
    e.labels = BTreeMap::from([("version".to_string(), version.to_string())]);
    e
}

#[test]
fn real_envoy_accepts_everything_rules_generate() {
    let dir = tempfile::tempdir().expect("temp dir");
    let key = rcgen::generate_simple_self_signed(vec!["reviews.example".to_string()])
        .expect("test certificate");
    let cert = dir.path().join("cert.pem");
    let private = dir.path().join("key.pem");
    std::fs::write(&cert, key.cert.pem()).expect("write cert");
    std::fs::write(&private, key.signing_key.serialize_pem()).expect("write key");
    let (cert, private) = (cert.display(), private.display());

    let reviews = merged(
        "reviews.default.svc.cluster.local",
        vec![
            port("http", 9080, Protocol::Http),
            port("grpc", 9090, Protocol::Grpc),
            port("tcp", 9100, Protocol::Tcp),
        ],
        vec![labelled("10.0.0.1", "v1"), labelled("10.0.0.2", "v2")],
    );
    let dns = with_resolution(
        merged(
            "api.example.com",
            vec![port("https", 443, Protocol::Tcp)],
            vec![labelled("api.example.com", "v1")],
        ),
        Resolution::Dns,
    );
    let dr_reviews = format!(
        r#"
host: reviews
trafficPolicy:
  loadBalancer: {{simple: LEAST_REQUEST}}
  connectionPool:
    tcp: {{maxConnections: 100, connectTimeout: 250ms, maxConnectionDuration: 1h, tcpKeepalive: {{probes: 3, time: 60s, interval: 10s}}}}
    http: {{http1MaxPendingRequests: 10, http2MaxRequests: 1000, maxRequestsPerConnection: 5, maxRetries: 3, idleTimeout: 30s, h2UpgradePolicy: UPGRADE, maxConcurrentStreams: 100}}
  outlierDetection: {{consecutive5xxErrors: 1, consecutiveGatewayErrors: 2, splitExternalLocalOriginErrors: true, consecutiveLocalOriginFailures: 3, interval: 1s, baseEjectionTime: 30s, maxEjectionPercent: 100, minHealthPercent: 50}}
  portLevelSettings:
  - port: {{number: 9100}}
    loadBalancer: {{consistentHash: {{useSourceIp: true, maglev: {{tableSize: 65537}}}}}}
subsets:
- name: v1
  labels: {{version: v1}}
  trafficPolicy:
    tls: {{mode: MUTUAL, clientCertificate: "{cert}", privateKey: "{private}", caCertificates: "{cert}", subjectAltNames: [reviews.example], sni: reviews.example}}
- name: v2
  labels: {{version: v2}}
  trafficPolicy:
    loadBalancer: {{consistentHash: {{httpCookie: {{name: user, ttl: 10s, path: /}}, ringHash: {{minimumRingSize: 1024}}}}}}
"#
    );
    let dr_dns = r#"
host: api.example.com
trafficPolicy:
  tls: {mode: SIMPLE}
  loadBalancer: {simple: RANDOM}
subsets:
- name: v1
  labels: {version: v1}
"#;
    let vs = r#"
hosts: [reviews, "*.wild.example"]
http:
- name: canary
  match:
  - headers: {x-canary: {exact: "true"}}
    uri: {regex: "/api/.*"}
    queryParams: {debug: {regex: "1|true"}, trace: {}}
    withoutHeaders: {x-internal: {}}
    method: {exact: GET}
    authority: {prefix: reviews}
    ignoreUriCase: true
  route: [{destination: {host: reviews, subset: v2}}]
  rewrite: {uriRegexRewrite: {match: "^/api/(.*)$", rewrite: "/\\1"}, authority: reviews.internal}
  fault: {delay: {fixedDelay: 5ms, percentage: {value: 10}}, abort: {grpcStatus: UNAVAILABLE, percentage: {value: 1}}}
  corsPolicy: {allowOrigins: [{exact: "https://c.example"}], allowMethods: [GET]}
- match: [{uri: {exact: /old}}]
  redirect: {uri: /new, authority: example.com, redirectCode: 308, scheme: https, port: 8443}
- match: [{uri: {prefix: /static}}]
  directResponse: {status: 200, body: {string: ok}}
- match: [{uri: {prefix: /cors}}]
  route: [{destination: {host: reviews}}]
  corsPolicy: {allowOrigins: [{exact: "https://a.example"}, {regex: "https://.*\\.b\\.example"}], allowMethods: [GET, POST], allowHeaders: [x-a], exposeHeaders: [x-b], maxAge: 24h, allowCredentials: true}
- route:
  - destination: {host: reviews, subset: v1}
    weight: 90
    headers: {request: {set: {x-subset: v1}}}
  - destination: {host: reviews, subset: v2}
    weight: 10
  timeout: 2s
  retries: {attempts: 3, perTryTimeout: 500ms, retryOn: "5xx,gateway-error,503"}
  mirror: {host: reviews, subset: v1}
  mirrorPercentage: {value: 12.5}
  headers: {request: {set: {x-a: "1"}, add: {x-b: "2"}, remove: [x-c]}, response: {set: {x-d: "3"}, remove: [server]}}
tls:
- match: [{sniHosts: [reviews, a.wild.example, "*.wild.example"], port: 9100}]
  route: [{destination: {host: reviews, subset: v2, port: {number: 9100}}}]
tcp:
- match: [{port: 9100}]
  route:
  - {destination: {host: reviews, subset: v1, port: {number: 9100}}, weight: 70}
  - {destination: {host: reviews, subset: v2, port: {number: 9100}}, weight: 30}
"#;
    // A name no registry knows, routed to the service: a virtual host of its own on 9080.
    let external = r#"
hosts: [partner.example]
http:
- route: [{destination: {host: reviews, port: {number: 9080}}}]
"#;
    let set = RuleSet {
        destination_rules: vec![
            Arc::new(Rule {
                meta: meta("reviews"),
                spec: serde_yaml::from_str(&dr_reviews).expect("reviews rule"),
            }),
            Arc::new(Rule {
                meta: meta("api"),
                spec: serde_yaml::from_str(dr_dns).expect("api rule"),
            }),
        ],
        virtual_services: vec![
            Arc::new(Rule {
                meta: meta("reviews"),
                spec: serde_yaml::from_str(vs).expect("virtual service"),
            }),
            Arc::new(Rule {
                meta: meta("partner"),
                spec: serde_yaml::from_str(external).expect("virtual service"),
            }),
        ],
    };
    for rule in &set.destination_rules {
        let problems = tributary_registries::rules::validate_destination_rule(rule);
        assert!(problems.iter().all(|p| !p.is_error()), "{problems:#?}");
    }
    for rule in &set.virtual_services {
        let problems = tributary_registries::rules::validate_virtual_service(rule);
        assert!(problems.iter().all(|p| !p.is_error()), "{problems:#?}");
    }
    let (bootstrap, issues) = bootstrap_with_rules(&[reviews, dns], &set);
    assert!(issues.is_empty(), "{issues:#?}");
    let names: Vec<&str> = bootstrap
        .static_resources
        .as_ref()
        .expect("statics")
        .clusters
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    for expected in [
        "outbound|9080|v1|reviews.default.svc.cluster.local",
        "outbound|9090|v2|reviews.default.svc.cluster.local",
        "outbound|9100|v1|reviews.default.svc.cluster.local",
        "outbound|443|v1|api.example.com",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    let statics = bootstrap.static_resources.as_ref().expect("statics");
    let tcp = statics
        .listeners
        .iter()
        .find(|l| l.name == "0.0.0.0_9100")
        .expect("the TCP listener");
    assert_eq!(tcp.filter_chains.len(), 2, "an SNI chain and the tcp route");
    if let Err(out) = envoy_validate(&bootstrap, dir.path()) {
        panic!("Envoy rejected what the rules generated:\n{out}");
    }
}

#[test]
fn envoy_rejects_what_validation_keeps_out() {
    // The proof above can fail: a regex RE2 refuses (validation rejects it before translation)
    // makes Envoy reject the route configuration.
    let reviews = merged(
        "reviews.default.svc.cluster.local",
        vec![port("http", 9080, Protocol::Http)],
        vec![labelled("10.0.0.1", "v1")],
    );
    let vs = Arc::new(Rule {
        meta: meta("bad"),
        spec: serde_yaml::from_str(
            "hosts: [reviews]\nhttp:\n- match: [{uri: {regex: \"(?=lookahead)\"}}]\n  route: [{destination: {host: reviews}}]\n",
        )
        .expect("virtual service"),
    });
    let problems = tributary_registries::rules::validate_virtual_service(&vs);
    assert!(
        problems.iter().any(|p| p.is_error()),
        "validation catches it"
    );
    let set = RuleSet {
        destination_rules: Vec::new(),
        virtual_services: vec![vs],
    };
    let (bootstrap, _) = bootstrap_with_rules(&[reviews], &set);
    let dir = tempfile::tempdir().expect("temp dir");
    let err = envoy_validate(&bootstrap, dir.path()).expect_err("Envoy must reject the regex");
    assert!(
        err.contains("regex") || err.contains("lookahead") || err.contains("invalid"),
        "{err}"
    );
}
