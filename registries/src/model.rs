//! The abstract service model every registry translates into.
//!
//! Plain data, no I/O. Everything Envoy will eventually need is here, so the rest of tributary never
//! asks a platform anything: a service (hostname, ports with protocol, VIPs per cluster, resolution,
//! mesh location) and its endpoints (address, ports, labels, locality, network, service account,
//! health, weight), each tagged with the registry and cluster it came from.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// A fully qualified service name such as `echo.demo.svc.cluster.local`.
///
/// Always lower case and validated as a DNS name on construction, so that a hostname that reaches
/// the aggregate can be used verbatim in cluster names, virtual-host domains and EDS names.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Hostname(Arc<str>);

/// Why a string is not a usable hostname.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostnameError {
    /// The name is empty.
    #[error("hostname is empty")]
    Empty,
    /// The name is longer than DNS allows (253 characters).
    #[error("hostname is {0} characters long; at most 253 are allowed")]
    TooLong(usize),
    /// A label is empty, longer than 63 characters, or has a character DNS does not allow.
    #[error("hostname label {label:?} is not a DNS label (letters, digits and '-', 1 to 63 long)")]
    BadLabel {
        /// The offending label.
        label: String,
    },
    /// Wildcard hosts cannot name a cluster.
    #[error("wildcard hostnames ('*') cannot be served as a service")]
    Wildcard,
}

impl Hostname {
    /// Validates and lower-cases `name`.
    pub fn new(name: &str) -> Result<Self, HostnameError> {
        let name = name.trim_end_matches('.');
        if name.is_empty() {
            return Err(HostnameError::Empty);
        }
        if name.len() > 253 {
            return Err(HostnameError::TooLong(name.len()));
        }
        if name.contains('*') {
            return Err(HostnameError::Wildcard);
        }
        for label in name.split('.') {
            let ok = !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !ok {
                return Err(HostnameError::BadLabel {
                    label: label.to_string(),
                });
            }
        }
        Ok(Self(Arc::from(name.to_ascii_lowercase())))
    }

    /// The hostname as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Hostname {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Hostname {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

impl<'de> Deserialize<'de> for Hostname {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Hostname::new(&s).map_err(serde::de::Error::custom)
    }
}

/// The application protocol of a service port; it decides which listener filter serves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Protocol {
    /// HTTP/1.1 (and HTTP/2 with prior knowledge from the client side).
    Http,
    /// HTTP/2 to the upstream.
    Http2,
    /// gRPC, which is HTTP/2 to the upstream.
    Grpc,
    /// Opaque TCP.
    Tcp,
}

impl Protocol {
    /// Whether the port is served by an HTTP connection manager with routes.
    pub fn is_http(self) -> bool {
        !matches!(self, Protocol::Tcp)
    }

    /// Whether the upstream connection must speak HTTP/2.
    pub fn is_http2_upstream(self) -> bool {
        matches!(self, Protocol::Http2 | Protocol::Grpc)
    }
}

/// One port of a service.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ServicePort {
    /// The port's name; endpoints map it to their own port number.
    pub name: String,
    /// The port clients connect to.
    pub port: u16,
    /// The application protocol.
    pub protocol: Protocol,
    /// The port on the destination when it differs from `port` and an endpoint does not name its
    /// own (a ServiceEntry's `targetPort`). For passthrough services it becomes the ORIGINAL_DST
    /// cluster's `upstream_port_override`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_port: Option<u16>,
}

/// How the proxy finds the instances of a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Resolution {
    /// Endpoints are IP addresses delivered by EDS.
    #[default]
    Static,
    /// Endpoint addresses are DNS names the proxy resolves, every address used (STRICT_DNS).
    Dns,
    /// One DNS name, one address used at a time (LOGICAL_DNS).
    DnsRoundRobin,
    /// The proxy forwards to the original destination address (ORIGINAL_DST).
    Passthrough,
}

/// Whether a service is part of the mesh or outside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum MeshLocation {
    /// Workloads with proxies of this mesh.
    #[default]
    MeshInternal,
    /// An external API or database.
    MeshExternal,
}

/// Where an endpoint runs: `region/zone/subzone`, each part possibly empty.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
pub struct Locality {
    /// The region, e.g. `us-east`.
    pub region: String,
    /// The zone within the region, e.g. `zone-a`.
    pub zone: String,
    /// The subzone within the zone.
    pub subzone: String,
}

impl Locality {
    /// Parses `region/zone/subzone`; missing trailing parts are empty.
    pub fn parse(s: &str) -> Self {
        let mut parts = s.splitn(3, '/').map(str::to_string);
        Self {
            region: parts.next().unwrap_or_default(),
            zone: parts.next().unwrap_or_default(),
            subzone: parts.next().unwrap_or_default(),
        }
    }

    /// Whether no part is set.
    pub fn is_empty(&self) -> bool {
        self.region.is_empty() && self.zone.is_empty() && self.subzone.is_empty()
    }
}

impl fmt::Display for Locality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.region, self.zone, self.subzone)
    }
}

impl<'de> Deserialize<'de> for Locality {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Locality::parse(&String::deserialize(d)?))
    }
}

/// The health of one endpoint as its registry reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    /// Ready to receive traffic.
    #[default]
    Healthy,
    /// Failing checks; not sent to proxies unless configured.
    Unhealthy,
    /// Shutting down: finishes what it has, gets no new traffic.
    Draining,
}

/// The name of one configured registry instance, e.g. `mock`, `consul-dc1`, `kube-east`.
///
/// Registries are merged in configured order; this is how an endpoint or service says where it came
/// from.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RegistryId(Arc<str>);

impl RegistryId {
    /// Wraps a registry name.
    pub fn new(name: &str) -> Self {
        Self(Arc::from(name))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RegistryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for RegistryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

/// The platform cluster (Kubernetes cluster, Consul datacenter, ...) a service or endpoint lives in.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ClusterId(Arc<str>);

impl ClusterId {
    /// Wraps a cluster id.
    pub fn new(id: &str) -> Self {
        Self(Arc::from(id))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

/// Which registry, and which cluster within it, produced a service or an endpoint.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Origin {
    /// The registry instance.
    pub registry: RegistryId,
    /// The cluster within that registry.
    pub cluster: ClusterId,
}

/// A service: a hostname clients address, with its ports and how to reach its instances.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Service {
    /// The fully qualified name clients use.
    pub hostname: Hostname,
    /// The ports, each with a unique name and number.
    pub ports: Vec<ServicePort>,
    /// Virtual IPs of the service, per cluster (a Kubernetes ClusterIP per cluster, say).
    pub vips: BTreeMap<ClusterId, Vec<IpAddr>>,
    /// How proxies find instances.
    pub resolution: Resolution,
    /// Inside or outside the mesh.
    pub location: MeshLocation,
    /// Labels of the service object itself (not of its endpoints).
    pub labels: BTreeMap<String, String>,
    /// Service accounts its workloads run as, sorted.
    pub service_accounts: Vec<String>,
    /// The namespace of the object that defined it (a Kubernetes Service or a ServiceEntry);
    /// empty for registries without namespaces.
    pub namespace: String,
    /// Namespaces the service is exported to (Istio's `exportTo`: `.` for its own, `*` for all,
    /// `~` for none); empty means all. Recorded for `/debug/registryz`; proxies are not yet
    /// filtered by namespace.
    pub export_to: Vec<String>,
    /// Where this service definition came from.
    pub origin: Origin,
}

impl Service {
    /// A static, mesh-internal service with nothing else set (no ports, VIPs, labels, accounts,
    /// namespace or `exportTo`): the base a registry or a test fills in with struct update syntax,
    /// `Service { ports, ..Service::new(hostname, origin) }`.
    pub fn new(hostname: Hostname, origin: Origin) -> Self {
        Self {
            hostname,
            ports: Vec::new(),
            vips: BTreeMap::new(),
            resolution: Resolution::default(),
            location: MeshLocation::default(),
            labels: BTreeMap::new(),
            service_accounts: Vec::new(),
            namespace: String::new(),
            export_to: Vec::new(),
            origin,
        }
    }

    /// The port with this name, if any.
    pub fn port_named(&self, name: &str) -> Option<&ServicePort> {
        self.ports.iter().find(|p| p.name == name)
    }
}

/// One instance of a service.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Endpoint {
    /// An IP address (static resolution), a DNS name (DNS resolution) or `unix://` path.
    pub address: String,
    /// Service port name → the port this endpoint listens on for it. A service port missing here
    /// is served on its `target_port`, or else on the service port's own number.
    pub ports: BTreeMap<String, u16>,
    /// Workload labels.
    pub labels: BTreeMap<String, String>,
    /// Where it runs.
    pub locality: Locality,
    /// The network it is reachable on; empty means the default network.
    pub network: String,
    /// The identity it runs as; empty when unknown.
    pub service_account: String,
    /// Its health.
    pub health: Health,
    /// Load-balancing weight, at least 1.
    pub weight: u32,
    /// The registry and cluster that reported it.
    pub origin: Origin,
}

impl Endpoint {
    /// A healthy endpoint of weight 1 at `address` with nothing else set (no per-port numbers,
    /// labels, locality, network or identity): the base a registry or a test fills in with struct
    /// update syntax, `Endpoint { labels, ..Endpoint::new(address, origin) }`.
    pub fn new(address: impl Into<String>, origin: Origin) -> Self {
        Self {
            address: address.into(),
            ports: BTreeMap::new(),
            labels: BTreeMap::new(),
            locality: Locality::default(),
            network: String::new(),
            service_account: String::new(),
            health: Health::default(),
            weight: 1,
            origin,
        }
    }

    /// The port this endpoint serves `port` on: its own port for that name, else the service
    /// port's `target_port`, else the service port's number (Istio's order for WorkloadEntries).
    ///
    /// `port` must be a port of the service this endpoint's own registry reported: the fallbacks
    /// are only meaningful there. Endpoints joining another registry's service are first renamed
    /// onto its ports by the aggregate, which never falls back to a number nothing listens on.
    pub fn port_for(&self, port: &ServicePort) -> u16 {
        self.ports
            .get(&port.name)
            .copied()
            .or(port.target_port)
            .unwrap_or(port.port)
    }
}

/// Everything one registry knows about one hostname: the service and its endpoints.
///
/// This is the unit registries emit. Emitting the whole state of a hostname (rather than field
/// patches) keeps every registry simple and lets the aggregate decide what really changed, so a
/// no-op resync costs no push (REG-14).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ServiceState {
    /// The service definition.
    pub service: Service,
    /// Its instances, in a stable order chosen by the registry.
    pub endpoints: Vec<Endpoint>,
}
