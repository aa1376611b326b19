//! ServiceEntry manifests for tests, shared with `tributary`'s end-to-end tests (behind the
//! `test-util` feature): the REG-11 table of invalid entries, each with the field and the error it
//! must be rejected with.

/// One ServiceEntry manifest as a YAML document (without `---`).
pub fn service_entry(name: &str, namespace: &str, spec: &str) -> String {
    let spec: String = spec.lines().map(|l| format!("  {l}\n")).collect();
    format!(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: {name}\n  \
         namespace: {namespace}\nspec:\n{spec}"
    )
}

/// ServiceEntry `shop/<name>` for `<name>.example.com`: HTTP on port 80, static, one endpoint at
/// `ip`.
pub fn static_http_entry(name: &str, ip: &str) -> String {
    service_entry(
        name,
        "shop",
        &format!(
            "hosts: [{name}.example.com]\nports: [{{number: 80, name: http, protocol: HTTP}}]\nresolution: STATIC\nendpoints: [{{address: {ip}}}]"
        ),
    )
}

/// One WorkloadEntry manifest as a YAML document (without `---`).
pub fn workload_entry(name: &str, namespace: &str, labels: &[(&str, &str)], spec: &str) -> String {
    let labels: String = labels
        .iter()
        .map(|(k, v)| format!("    {k}: {v}\n"))
        .collect();
    let spec: String = spec.lines().map(|l| format!("  {l}\n")).collect();
    format!(
        "apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata:\n  name: {name}\n  \
         namespace: {namespace}\n  labels:\n{labels}spec:\n{spec}"
    )
}

/// An invalid ServiceEntry and how it must be rejected.
#[derive(Debug, Clone)]
pub struct InvalidCase {
    /// Its `metadata.name`.
    pub name: &'static str,
    /// The whole manifest.
    pub yaml: String,
    /// The field the rejection names (`spec.ports[1].number`).
    pub field: &'static str,
    /// A part of the message it must carry (Istio's wording where Istio has one).
    pub message: &'static str,
}

/// A valid HTTP port 80 named `http`, for cases about something else.
const HTTP: &str = "ports: [{number: 80, name: http, protocol: HTTP}]";

/// The REG-11 table: one ServiceEntry per rule Istio (or tributary) enforces, each invalid for
/// exactly one reason, all in `namespace`.
pub fn invalid_service_entries(namespace: &str) -> Vec<InvalidCase> {
    let case = |name, spec: String, field, message| InvalidCase {
        name,
        yaml: service_entry(name, namespace, &spec),
        field,
        message,
    };
    vec![
        case("no-hosts", format!("hosts: []\n{HTTP}\nresolution: DNS"), "spec.hosts",
            "service entry must have at least one host"),
        case("star-host", format!("hosts: ['*']\n{HTTP}"), "spec.hosts[0]", "invalid host *"),
        case("wildcard-dns", format!("hosts: ['*.example.com']\n{HTTP}\nresolution: DNS"),
            "spec.hosts[0]", "hosts must be FQDN or contain only prefix wildcards"),
        case("duplicate-port-number",
            "hosts: [a.example.com]\nports: [{number: 80, name: http, protocol: HTTP}, {number: 80, name: http-alt, protocol: HTTP}]\nresolution: DNS".into(),
            "spec.ports[1].number", "service entry port 80 already defined"),
        case("duplicate-port-name",
            "hosts: [a.example.com]\nports: [{number: 80, name: http, protocol: HTTP}, {number: 8080, name: http, protocol: HTTP}]\nresolution: DNS".into(),
            "spec.ports[1].name", "service entry port name \"http\" already defined"),
        case("null-port", "hosts: [a.example.com]\nports: [null]\nresolution: DNS".into(),
            "spec.ports[0]", "service entry port may not be null"),
        case("port-zero", "hosts: [a.example.com]\nports: [{number: 0, name: http, protocol: HTTP}]\nresolution: DNS".into(),
            "spec.ports[0].number", "port number 0 must be in the range 1..65535"),
        case("bad-protocol", "hosts: [a.example.com]\nports: [{number: 80, name: http, protocol: QUIC}]\nresolution: DNS".into(),
            "spec.ports[0].protocol", "unsupported protocol: QUIC"),
        case("cidr-with-dns", format!("hosts: [a.example.com]\naddresses: [10.1.0.0/16]\n{HTTP}\nresolution: DNS"),
            "spec.addresses", "CIDR addresses are allowed only for NONE/STATIC resolution types"),
        case("endpoints-with-none", format!("hosts: [a.example.com]\n{HTTP}\nresolution: NONE\nendpoints: [{{address: 10.0.0.1}}]"),
            "spec.endpoints", "no endpoints should be provided for resolution type none"),
        case("round-robin-two-endpoints",
            format!("hosts: [a.example.com]\n{HTTP}\nresolution: DNS_ROUND_ROBIN\nendpoints: [{{address: a1.example.com}}, {{address: a2.example.com}}]"),
            "spec.endpoints", "there must only be 0 or 1 endpoint for resolution mode DNS_ROUND_ROBIN"),
        case("static-name-endpoint", format!("hosts: [a.example.com]\n{HTTP}\nresolution: STATIC\nendpoints: [{{address: backend.example.com}}]"),
            "spec.endpoints[0].address", "is not a valid IP address"),
        case("dns-bad-endpoint", format!("hosts: [a.example.com]\n{HTTP}\nresolution: DNS\nendpoints: [{{address: 'not a host'}}]"),
            "spec.endpoints[0].address", "is not a valid FQDN or an IP address"),
        case("undefined-endpoint-port", format!("hosts: [a.example.com]\n{HTTP}\nresolution: STATIC\nendpoints: [{{address: 10.0.0.1, ports: {{grpc: 9000}}}}]"),
            "spec.endpoints[0].ports.grpc", "endpoint port 9000 is not defined by the service entry"),
        case("selector-and-endpoints",
            format!("hosts: [a.example.com]\n{HTTP}\nresolution: STATIC\nlocation: MESH_INTERNAL\nworkloadSelector: {{labels: {{app: a}}}}\nendpoints: [{{address: 10.0.0.1}}]"),
            "spec.workloadSelector", "only one of WorkloadSelector or Endpoints is allowed"),
        case("multiple-hosts-tcp", "hosts: [a.example.com, b.example.com]\nports: [{number: 5432, name: tcp, protocol: TCP}]\nresolution: DNS".into(),
            "spec.hosts", "multiple hosts provided with non-HTTP, non-TLS ports"),
        case("bad-resolution", format!("hosts: [a.example.com]\n{HTTP}\nresolution: ROUND_ROBIN"),
            "spec.resolution", "unsupported resolution type ROUND_ROBIN"),
        case("export-public-and-private", format!("hosts: [a.example.com]\n{HTTP}\nresolution: DNS\nexportTo: ['*', '.']"),
            "spec.exportTo", "cannot have both public (*) and non-public exportTo values"),
    ]
}
