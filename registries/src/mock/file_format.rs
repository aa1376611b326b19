//! The mock registry's YAML format and its validation.
//!
//! ```yaml
//! services:
//!   - hostname: echo.demo.svc.cluster.local
//!     ports: [{name: http, port: 18080, protocol: HTTP}]   # HTTP | HTTP2 | GRPC | TCP
//!     resolution: STATIC     # optional: STATIC | DNS | DNS_ROUND_ROBIN | PASSTHROUGH
//!     location: MESH_INTERNAL  # optional: MESH_INTERNAL | MESH_EXTERNAL
//!     vips: [10.0.0.1]       # optional, VIPs in the registry's cluster
//!     labels: {app: echo}    # optional, labels of the service itself
//!     service_accounts: [echo]  # optional
//!     endpoints:
//!       - address: 127.0.0.1
//!         ports: {http: 19090}          # service port name -> endpoint port
//!         labels: {version: v1}
//!         locality: us-east/zone-a      # region/zone/subzone
//!         health: healthy               # healthy | unhealthy | draining
//!         weight: 1
//!         network: ""                   # optional
//!         service_account: echo         # optional
//! ```
//!
//! Parsing is strict (unknown fields are errors) and a file is accepted or rejected whole. Every
//! error names the file and line, the service (hostname) and the field: serde_yaml reports where a
//! syntax or type error is, and [`locate`] finds the line of a field that fails a later check.
//!
//! The same [`ServiceSpec`] is what the control API and inline config produce, so one set of
//! checks ([`validate_services`], [`ServiceSpec::to_state`], [`endpoints_to_model`]) serves them
//! all.

mod errors;
pub(crate) mod limits;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::model::{
    Endpoint, Health, Hostname, Locality, MeshLocation, Origin, Protocol, Resolution, Service,
    ServicePort, ServiceState,
};

use crate::support::yaml_locate as locate;
pub(crate) use crate::support::yaml_locate::Seg;
pub use errors::{FieldPath, FileError, InvalidField, SpecError};

/// Every hostname the registry serves, with its full state; the unit the mock diffs.
pub(crate) type Services = BTreeMap<Hostname, ServiceState>;

/// A whole mock registry file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MockFile {
    /// The services the file defines.
    #[serde(default)]
    #[serde(deserialize_with = "limits::seq")]
    pub services: Vec<ServiceSpec>,
}

/// One service as written in a mock file, an inline config or a control-API request.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceSpec {
    /// The fully qualified hostname clients use.
    #[serde(deserialize_with = "limits::string")]
    pub hostname: String,
    /// The service ports: unique names and numbers, at least one.
    #[serde(deserialize_with = "limits::seq")]
    pub ports: Vec<PortSpec>,
    /// How proxies find instances; STATIC unless set.
    #[serde(default)]
    pub resolution: Resolution,
    /// Inside or outside the mesh; MESH_INTERNAL unless set.
    #[serde(default)]
    pub location: MeshLocation,
    /// Virtual IPs of the service in the registry's cluster.
    #[serde(default)]
    #[serde(deserialize_with = "limits::seq")]
    pub vips: Vec<IpAddr>,
    /// Labels of the service itself.
    #[serde(default)]
    #[serde(deserialize_with = "limits::map")]
    pub labels: BTreeMap<String, String>,
    /// Service accounts its workloads run as.
    #[serde(default)]
    #[serde(deserialize_with = "limits::seq")]
    pub service_accounts: Vec<String>,
    /// The instances.
    #[serde(default)]
    #[serde(deserialize_with = "limits::seq")]
    pub endpoints: Vec<EndpointSpec>,
}

/// One service port as written.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PortSpec {
    /// Unique within the service; endpoints refer to it.
    #[serde(deserialize_with = "limits::string")]
    pub name: String,
    /// 1..=65535, unique within the service.
    pub port: u16,
    /// HTTP, HTTP2, GRPC or TCP.
    pub protocol: Protocol,
}

/// One endpoint as written.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointSpec {
    /// IP address (or DNS name for DNS resolution).
    #[serde(deserialize_with = "limits::string")]
    pub address: String,
    /// Service port name → the port this endpoint listens on; unlisted ports use the service
    /// port's number.
    #[serde(default)]
    #[serde(deserialize_with = "limits::map")]
    pub ports: BTreeMap<String, u16>,
    /// Workload labels.
    #[serde(default)]
    #[serde(deserialize_with = "limits::map")]
    pub labels: BTreeMap<String, String>,
    /// `region/zone/subzone`; empty when unknown.
    #[serde(default)]
    #[serde(deserialize_with = "limits::string")]
    pub locality: String,
    /// healthy (default), unhealthy or draining.
    #[serde(default)]
    pub health: Health,
    /// Load-balancing weight, at least 1; 1 unless set.
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// The network it is reachable on; empty means the default network.
    #[serde(default)]
    #[serde(deserialize_with = "limits::string")]
    pub network: String,
    /// The identity it runs as; empty when unknown.
    #[serde(default)]
    #[serde(deserialize_with = "limits::string")]
    pub service_account: String,
}

fn default_weight() -> u32 {
    1
}

impl limits::Weigh for ServiceSpec {}
impl limits::Weigh for PortSpec {}
impl limits::Weigh for EndpointSpec {}

/// Reads and validates a mock registry file. It blocks (file I/O and a parse of up to
/// [`limits::MAX_FILE_BYTES`]): call it off the async runtime (`spawn_blocking`).
pub(crate) fn read_file(path: &Path, origin: &Origin) -> Result<Services, FileError> {
    use std::io::Read;
    let read_error = |source| FileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    // Read one byte past the limit, so a file that grows between a size check and the read is
    // still caught.
    let mut bytes = Vec::new();
    file.take(limits::MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > limits::MAX_FILE_BYTES {
        return Err(FileError::TooLarge {
            path: path.to_path_buf(),
            limit: limits::MAX_FILE_BYTES,
        });
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        read_error(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not UTF-8: {e}"),
        ))
    })?;
    parse_file(path, &text, origin)
}

/// Parses and validates the text of a mock registry file; `path` is only used in errors.
pub(crate) fn parse_file(path: &Path, text: &str, origin: &Origin) -> Result<Services, FileError> {
    let scan = limits::prescan(text).map_err(|(_, line)| FileError::TooDeep {
        path: path.to_path_buf(),
        line,
        limit: limits::MAX_FLOW_DEPTH,
    })?;
    let file: MockFile =
        limits::with_budget(limits::MAX_EXPANDED_BYTES, || serde_yaml::from_str(text))
            .map_err(|e| syntax_error(path, text, &e, scan.has_alias))?;
    let top = [Seg::Key("services".to_string())];
    validate_services(&file.services, origin).map_err(|e| match e {
        SpecError::Invalid { index, source } => {
            let field = source.field.under(&[top[0].clone(), Seg::Index(index)]);
            FileError::Invalid {
                path: path.to_path_buf(),
                line: locate::line_of(text, &field.0),
                hostname: source.hostname,
                field,
                message: source.message,
            }
        }
        SpecError::DuplicateHostname {
            hostname,
            first,
            second,
        } => {
            let line = |i: usize| {
                locate::line_of(
                    text,
                    &[top[0].clone(), Seg::Index(i), Seg::Key("hostname".into())],
                )
            };
            FileError::DuplicateHostname {
                path: path.to_path_buf(),
                hostname,
                first,
                first_line: line(first),
                second,
                second_line: line(second),
            }
        }
    })
}

/// Turns a serde_yaml error into a [`FileError::Syntax`] naming the service it is in. Finding the
/// service re-parses the text without bounds, so it is skipped when aliases could make that costly.
fn syntax_error(path: &Path, text: &str, e: &serde_yaml::Error, has_alias: bool) -> FileError {
    let full = e.to_string();
    // serde_yaml appends " at line L column C"; we print the line ourselves.
    let message = match full.rfind(" at line ") {
        Some(at) if e.location().is_some() => full[..at].to_string(),
        _ => full.clone(),
    };
    FileError::Syntax {
        path: path.to_path_buf(),
        line: e.location().map(|l| l.line()),
        hostname: match has_alias {
            true => None,
            false => service_index(&message).and_then(|i| hostname_at(text, i)),
        },
        message,
    }
}

/// The `N` of a serde_yaml path that starts with `services[N]`.
fn service_index(message: &str) -> Option<usize> {
    let rest = message.strip_prefix("services[")?;
    rest[..rest.find(']')?].parse().ok()
}

/// The hostname written in `services[index]`, if the text is at least valid YAML.
fn hostname_at(text: &str, index: usize) -> Option<String> {
    let value: serde_yaml::Value = serde_yaml::from_str(text).ok()?;
    let host = value.get("services")?.get(index)?.get("hostname")?;
    host.as_str().map(str::to_string)
}

/// Checks a list of services and builds their model, stamped with `origin`.
pub(crate) fn validate_services(
    specs: &[ServiceSpec],
    origin: &Origin,
) -> Result<Services, SpecError> {
    let mut out = Services::new();
    let mut seen: HashMap<Hostname, usize> = HashMap::new();
    for (index, spec) in specs.iter().enumerate() {
        let state = spec
            .to_state(origin)
            .map_err(|source| SpecError::Invalid { index, source })?;
        let host = state.service.hostname.clone();
        if let Some(&first) = seen.get(&host) {
            return Err(SpecError::DuplicateHostname {
                hostname: host.to_string(),
                first,
                second: index,
            });
        }
        seen.insert(host.clone(), index);
        out.insert(host, state);
    }
    Ok(out)
}

impl ServiceSpec {
    /// Checks this service and builds its model, stamped with `origin`.
    pub fn to_state(&self, origin: &Origin) -> Result<ServiceState, InvalidField> {
        let bad = |field: FieldPath, message: String| InvalidField {
            hostname: self.hostname.clone(),
            field,
            message,
        };
        let root = FieldPath::default();
        let hostname = Hostname::new(&self.hostname)
            .map_err(|e| bad(root.clone().key("hostname"), e.to_string()))?;
        check_labels(&self.labels)
            .map_err(|(key, m)| bad(root.clone().key("labels").key(&key), m))?;
        for (i, sa) in self.service_accounts.iter().enumerate() {
            check_name(sa).map_err(|m| bad(root.clone().key("service_accounts").index(i), m))?;
        }
        if self.ports.is_empty() {
            return Err(bad(
                root.key("ports"),
                "a service needs at least one port".into(),
            ));
        }
        let mut ports: Vec<ServicePort> = Vec::with_capacity(self.ports.len());
        for (i, p) in self.ports.iter().enumerate() {
            let at = root.clone().key("ports").index(i);
            if p.name.is_empty() {
                return Err(bad(at.key("name"), "port name is empty".into()));
            }
            check_name(&p.name).map_err(|m| bad(at.clone().key("name"), m))?;
            if p.port == 0 {
                return Err(bad(at.key("port"), "port 0 is not allowed".into()));
            }
            if let Some(j) = ports.iter().position(|q| q.name == p.name) {
                return Err(bad(
                    at.key("name"),
                    format!("port name {:?} is already used by ports[{j}]", p.name),
                ));
            }
            if let Some(j) = ports.iter().position(|q| q.port == p.port) {
                return Err(bad(
                    at.key("port"),
                    format!("port {} is already used by ports[{j}]", p.port),
                ));
            }
            ports.push(ServicePort {
                name: p.name.clone(),
                port: p.port,
                protocol: p.protocol,
                target_port: None,
            });
        }
        let endpoints =
            endpoints_to_model(&ports, &self.endpoints, origin).map_err(|(field, message)| {
                bad(root.clone().key("endpoints").under_self(field), message)
            })?;
        let mut service_accounts = self.service_accounts.clone();
        service_accounts.sort();
        service_accounts.dedup();
        let mut vips = BTreeMap::new();
        if !self.vips.is_empty() {
            vips.insert(origin.cluster.clone(), self.vips.clone());
        }
        Ok(ServiceState {
            service: Service {
                hostname,
                ports,
                vips,
                resolution: self.resolution,
                location: self.location,
                labels: self.labels.clone(),
                service_accounts,
                namespace: String::new(),
                export_to: Vec::new(),
                origin: origin.clone(),
            },
            endpoints,
        })
    }
}

impl FieldPath {
    fn under_self(mut self, rest: FieldPath) -> FieldPath {
        self.0.extend(rest.0);
        self
    }
}

/// Checks endpoints against the service's `ports` and builds their model, stamped with `origin`
/// and sorted by address then ports so that a reordered list is no change (REG-14). Errors carry
/// the path from the endpoint list (`[2].ports.grpc`).
pub(crate) fn endpoints_to_model(
    ports: &[ServicePort],
    specs: &[EndpointSpec],
    origin: &Origin,
) -> Result<Vec<Endpoint>, (FieldPath, String)> {
    let mut out = Vec::with_capacity(specs.len());
    for (i, e) in specs.iter().enumerate() {
        let at = FieldPath::default().index(i);
        check_labels(&e.labels).map_err(|(key, m)| (at.clone().key("labels").key(&key), m))?;
        for (field, value) in [
            ("address", &e.address),
            ("locality", &e.locality),
            ("network", &e.network),
            ("service_account", &e.service_account),
        ] {
            check_name(value).map_err(|m| (at.clone().key(field), m))?;
        }
        if e.address.trim().is_empty() {
            return Err((at.key("address"), "address is empty".into()));
        }
        for (name, &port) in &e.ports {
            if !ports.iter().any(|p| &p.name == name) {
                let known: Vec<&str> = ports.iter().map(|p| p.name.as_str()).collect();
                return Err((
                    at.clone().key("ports").key(name),
                    format!("{name:?} is not a port of the service (its ports: {known:?})"),
                ));
            }
            if port == 0 {
                return Err((
                    at.clone().key("ports").key(name),
                    "port 0 is not allowed".into(),
                ));
            }
        }
        if e.weight == 0 {
            return Err((
                at.key("weight"),
                "weight 0 is not allowed (at least 1)".into(),
            ));
        }
        out.push(Endpoint {
            address: e.address.trim().to_string(),
            ports: e.ports.clone(),
            labels: e.labels.clone(),
            locality: Locality::parse(&e.locality),
            network: e.network.clone(),
            service_account: e.service_account.clone(),
            health: e.health,
            weight: e.weight,
            origin: origin.clone(),
        });
    }
    out.sort_by(|a, b| (&a.address, &a.ports).cmp(&(&b.address, &b.ports)));
    Ok(out)
}

/// A name field within [`limits::MAX_NAME_BYTES`].
fn check_name(value: &str) -> Result<(), String> {
    match value.len() > limits::MAX_NAME_BYTES {
        true => Err(format!(
            "{} bytes long; at most {} are allowed",
            value.len(),
            limits::MAX_NAME_BYTES
        )),
        false => Ok(()),
    }
}

/// Labels within [`limits::MAX_LABELS`] and the key and value length limits; the error names the
/// offending key (shortened) and says what is wrong.
fn check_labels(labels: &BTreeMap<String, String>) -> Result<(), (String, String)> {
    if labels.len() > limits::MAX_LABELS {
        let first = labels.keys().next().cloned().unwrap_or_default();
        return Err((
            first,
            format!(
                "{} labels; at most {} are allowed",
                labels.len(),
                limits::MAX_LABELS
            ),
        ));
    }
    for (key, value) in labels {
        // Enough of the key to recognise it, not a 200 MB error message.
        let shown: String = key.chars().take(64).collect();
        if key.is_empty() {
            return Err((shown, "a label key is empty".into()));
        }
        if key.len() > limits::MAX_LABEL_KEY_BYTES {
            return Err((
                shown,
                format!(
                    "label key is {} bytes long; at most {} are allowed",
                    key.len(),
                    limits::MAX_LABEL_KEY_BYTES
                ),
            ));
        }
        if value.len() > limits::MAX_LABEL_VALUE_BYTES {
            return Err((
                shown,
                format!(
                    "label value is {} bytes long; at most {} are allowed",
                    value.len(),
                    limits::MAX_LABEL_VALUE_BYTES
                ),
            ));
        }
    }
    Ok(())
}
