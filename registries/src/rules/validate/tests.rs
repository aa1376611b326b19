//! Validation against Istio's documented rules and messages (REG-11 for traffic rules).

use crate::rules::{
    DestinationRule, Problem, Rule, RuleMeta, VirtualService, validate_destination_rule,
    validate_virtual_service,
};

fn meta() -> RuleMeta {
    RuleMeta {
        namespace: "default".into(),
        name: "r".into(),
        source: "test".into(),
        ..RuleMeta::default()
    }
}

fn dr(yaml: &str) -> Vec<Problem> {
    let spec: DestinationRule = serde_yaml::from_str(yaml).expect("spec parses");
    validate_destination_rule(&Rule { meta: meta(), spec })
}

fn vs(yaml: &str) -> Vec<Problem> {
    let spec: VirtualService = serde_yaml::from_str(yaml).expect("spec parses");
    validate_virtual_service(&Rule { meta: meta(), spec })
}

fn errors(problems: &[Problem]) -> Vec<String> {
    problems
        .iter()
        .filter(|p| p.is_error())
        .map(|p| format!("{}: {}", p.field, p.message))
        .collect()
}

#[track_caller]
fn has(problems: &[Problem], field: &str, text: &str) {
    assert!(
        problems
            .iter()
            .any(|p| p.field == field && p.message.contains(text)),
        "no problem at {field} saying {text:?} in {problems:#?}"
    );
}

#[test]
fn istio_documented_destination_rule_is_valid() {
    // The canary rule from Istio's DestinationRule reference.
    let problems = dr(r#"
host: my-svc
trafficPolicy:
  loadBalancer:
    simple: RANDOM
  connectionPool:
    tcp: {maxConnections: 100, connectTimeout: 30ms, tcpKeepalive: {time: 7200s, interval: 75s}}
    http: {http2MaxRequests: 1000, maxRequestsPerConnection: 10}
  outlierDetection: {consecutive5xxErrors: 7, interval: 5m, baseEjectionTime: 15m}
subsets:
- name: v1
  labels: {version: v1}
- name: v2
  labels: {version: v2}
  trafficPolicy:
    loadBalancer:
      consistentHash: {httpCookie: {name: user, ttl: 0s}}
    portLevelSettings:
    - port: {number: 80}
      loadBalancer: {simple: LEAST_REQUEST}
"#);
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn destination_rule_errors_carry_istio_messages() {
    let problems = dr(r#"
host: "bad_host"
trafficPolicy: {}
subsets:
- {name: v1, labels: {version: v1}}
- {name: v1, labels: {version: v1}}
- {name: Bad_Name}
"#);
    has(&problems, "spec.host", "invalid");
    has(
        &problems,
        "spec.trafficPolicy",
        "traffic policy must have at least one field",
    );
    has(
        &problems,
        "spec.subsets[1].name",
        "duplicate subset names: v1",
    );
    has(
        &problems,
        "spec.subsets[2].name",
        "subset name is invalid: Bad_Name",
    );
}

#[test]
fn traffic_policy_ranges_are_checked() {
    let problems = dr(r#"
host: reviews.prod.svc.cluster.local
trafficPolicy:
  connectionPool: {http: {http1MaxPendingRequests: -1}, tcp: {connectTimeout: 500us}}
  outlierDetection: {maxEjectionPercent: 120, consecutiveErrors: 5}
  loadBalancer:
    consistentHash: {maglev: {tableSize: 1000}, httpHeaderName: x-user}
    localityLbSetting:
      distribute: [{from: "us-west/zone1/*", to: {"us-west/zone1/*": 80, "us-west/zone2/*": 10}}]
      failover: [{from: us-east, to: us-east}]
  tls: {mode: MUTUAL}
"#);
    let p = "spec.trafficPolicy";
    has(
        &problems,
        &format!("{p}.connectionPool.http.http1MaxPendingRequests"),
        "non-negative",
    );
    has(
        &problems,
        &format!("{p}.connectionPool.tcp.connectTimeout"),
        "greater than 1ms",
    );
    has(
        &problems,
        &format!("{p}.outlierDetection.maxEjectionPercent"),
        "[0, 100]",
    );
    has(
        &problems,
        &format!("{p}.outlierDetection.consecutiveErrors"),
        "deprecated",
    );
    has(
        &problems,
        &format!("{p}.loadBalancer.consistentHash.maglev.tableSize"),
        "prime",
    );
    has(
        &problems,
        &format!("{p}.loadBalancer.localityLbSetting"),
        "'distribute' and 'failover'",
    );
    has(
        &problems,
        &format!("{p}.loadBalancer.localityLbSetting.distribute[0].to"),
        "total locality weight 90 != 100",
    );
    has(
        &problems,
        &format!("{p}.loadBalancer.localityLbSetting.failover[0]"),
        "different regions",
    );
    has(
        &problems,
        &format!("{p}.tls.clientCertificate"),
        "client certificate required for mutual tls",
    );
    has(
        &problems,
        &format!("{p}.tls.privateKey"),
        "private key required for mutual tls",
    );
    // The deprecation is a warning, not an error.
    assert!(!errors(&problems).iter().any(|e| e.contains("deprecated")));
}

#[test]
fn istio_mutual_is_refused_not_ignored() {
    let problems = dr("host: a\ntrafficPolicy: {tls: {mode: ISTIO_MUTUAL}}\n");
    has(
        &problems,
        "spec.trafficPolicy.tls.mode",
        "ISTIO_MUTUAL is not supported",
    );
}

#[test]
fn istio_documented_virtual_service_is_valid() {
    // The reviews route from Istio's VirtualService reference, plus the other HTTP features.
    let problems = vs(r#"
hosts: [reviews.prod.svc.cluster.local]
http:
- name: reviews-v2-routes
  match:
  - uri: {prefix: "/wpcatalog"}
  - uri: {prefix: "/consumercatalog"}
    headers: {x-canary: {exact: "true"}}
    ignoreUriCase: true
  rewrite: {uri: "/newcatalog"}
  route:
  - destination: {host: reviews.prod.svc.cluster.local, subset: v2}
  timeout: 10s
  retries: {attempts: 3, perTryTimeout: 2s, retryOn: "gateway-error,connect-failure,503"}
  fault: {abort: {httpStatus: 503, percentage: {value: 50}}}
  mirror: {host: reviews-shadow}
  mirrorPercentage: {value: 10.5}
  corsPolicy: {allowOrigins: [{exact: "https://example.com"}], allowMethods: [GET, POST], maxAge: 24h}
  headers: {request: {set: {x-a: b}}, response: {remove: [x-internal]}}
- name: reviews-v1-route
  route:
  - destination: {host: reviews.prod.svc.cluster.local, subset: v1}
    weight: 90
  - destination: {host: reviews.prod.svc.cluster.local, subset: v2}
    weight: 10
tcp:
- match: [{port: 27017}]
  route: [{destination: {host: mongo.backup.svc.cluster.local, port: {number: 5555}}}]
"#);
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn virtual_service_errors_carry_istio_messages() {
    let problems = vs(r#"
hosts: ["*"]
gateways: [my-gateway]
http:
- match: [{uri: {regex: "(unclosed"}}]
  route:
  - {destination: {host: a}, weight: 0}
  - {destination: {host: b}, weight: 0}
  retries: {attempts: -1, retryOn: "5xx,bogus"}
  fault: {abort: {httpStatus: 700}}
- redirect: {redirectCode: 399}
  route: [{destination: {host: c}}]
tls:
- route: [{destination: {host: a}}]
"#);
    has(&problems, "spec.hosts[0]", "wildcard host * is not allowed");
    has(&problems, "spec.gateways[0]", "only sidecars");
    has(
        &problems,
        "spec.http[0].match[0].uri.regex",
        "invalid regex",
    );
    has(
        &problems,
        "spec.http[0].route",
        "total destination weight = 0",
    );
    has(
        &problems,
        "spec.http[0].retries.attempts",
        "attempts cannot be negative",
    );
    has(
        &problems,
        "spec.http[0].retries.retryOn",
        "\"bogus\" is not a valid retryOn policy",
    );
    has(
        &problems,
        "spec.http[0].fault.abort.httpStatus",
        "HTTP status 700 is not in range 200-599",
    );
    has(
        &problems,
        "spec.http[1]",
        "HTTP route cannot contain both route and redirect",
    );
    has(
        &problems,
        "spec.http[1].redirect.redirectCode",
        "399 is not a valid redirect code",
    );
    has(
        &problems,
        "spec.tls[0].match",
        "TLS route must have at least one match condition",
    );
}

#[test]
fn a_rule_after_the_catch_all_is_a_warning() {
    let problems = vs(r#"
hosts: [a]
http:
- route: [{destination: {host: a}}]
- match: [{uri: {prefix: /x}}]
  route: [{destination: {host: a}}]
"#);
    has(&problems, "spec.http[1]", "rule 1 not used");
    assert!(errors(&problems).is_empty(), "{problems:#?}");
}

#[test]
fn empty_virtual_service_and_sni_outside_hosts() {
    has(&vs("hosts: []\n"), "spec.hosts", "at least one host");
    has(
        &vs("hosts: [a]\n"),
        "spec",
        "http, tcp or tls must be provided",
    );
    let problems = vs(r#"
hosts: ["*.example.com"]
tls:
- match: [{sniHosts: [login.example.com, other.org]}]
  route: [{destination: {host: a}}]
"#);
    assert!(
        !problems
            .iter()
            .any(|p| p.field == "spec.tls[0].match[0].sniHosts[0]")
    );
    has(
        &problems,
        "spec.tls[0].match[0].sniHosts[1]",
        "not a compatible subset",
    );
}

#[test]
fn problems_find_their_line_in_the_document() {
    let yaml = "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {name: r}\nspec:\n  hosts: [a]\n  http:\n  - route:\n    - destination: {host: a}\n      weight: -5\n";
    let doc: serde_yaml::Value = serde_yaml::from_str(yaml).expect("yaml");
    let spec: VirtualService = serde_yaml::from_value(doc["spec"].clone()).expect("spec parses");
    let problems = validate_virtual_service(&Rule { meta: meta(), spec });
    let weight = problems
        .iter()
        .find(|p| p.field == "spec.http[0].route[0].weight")
        .expect("weight problem");
    assert_eq!(weight.line_in(yaml), Some(9));
}

#[test]
fn unknown_istio_fields_load_and_bad_durations_do_not() {
    let spec: DestinationRule = serde_yaml::from_str(
        "host: a\ntrafficPolicy: {tunnel: {protocol: CONNECT, targetHost: x, targetPort: 1}}\nfutureField: 1\n",
    )
    .expect("accepted");
    assert!(spec.traffic_policy.is_some_and(|p| p.tunnel.is_some()));
    let err = serde_yaml::from_str::<VirtualService>("hosts: [a]\nhttp: [{timeout: 10}]\n")
        .expect_err("not a duration");
    assert!(err.to_string().contains("not a duration"), "{err}");
}
