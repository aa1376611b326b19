//! The small checks Istio's validation is built from (`pkg/config/validation`,
//! `pkg/config/labels`, `pkg/config/protocol`), and the field paths errors name.

use std::fmt;
use std::net::IpAddr;

use crate::model::Protocol;
use crate::support::yaml_locate::Seg;

/// A path to a field of an object, from its top (`spec.ports[1].number`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct FieldPath(Vec<Seg>);

impl FieldPath {
    /// This path followed by `key`.
    pub(crate) fn key(&self, key: &str) -> FieldPath {
        let mut segs = self.0.clone();
        segs.push(Seg::Key(key.to_string()));
        FieldPath(segs)
    }

    /// This path followed by `[index]`.
    pub(crate) fn index(&self, index: usize) -> FieldPath {
        let mut segs = self.0.clone();
        segs.push(Seg::Index(index));
        FieldPath(segs)
    }

    /// `spec`, the root of most paths.
    pub(crate) fn spec() -> FieldPath {
        FieldPath::default().key("spec")
    }

    /// The segments, for finding the field's line.
    pub(crate) fn segs(&self) -> &[Seg] {
        &self.0
    }

    /// Reads a path as [`fmt::Display`] writes it (`spec.http[0].route[1].weight`); a key
    /// that is not a plain word stays one segment as best it can.
    pub(crate) fn parse(text: &str) -> FieldPath {
        let mut segs = Vec::new();
        for part in text.split('.').filter(|p| !p.is_empty()) {
            let (key, mut rest) = part.split_once('[').map_or((part, ""), |(k, r)| (k, r));
            if !key.is_empty() {
                segs.push(Seg::Key(key.to_string()));
            }
            while let Some((n, after)) = rest.split_once(']') {
                match n.parse() {
                    Ok(n) => segs.push(Seg::Index(n)),
                    Err(_) => segs.push(Seg::Key(n.to_string())),
                }
                rest = after.strip_prefix('[').unwrap_or(after);
            }
        }
        FieldPath(segs)
    }

    /// Whether the path starts with `key`.
    pub(crate) fn starts_with_key(&self, key: &str) -> bool {
        matches!(self.0.first(), Some(Seg::Key(k)) if k == key)
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::support::yaml_locate::write_path(f, &self.0)
    }
}

#[cfg(test)]
#[test]
fn field_paths_read_back() {
    for p in [
        "spec.http[0].route[1].weight",
        "spec",
        "spec.subsets[2]",
        "metadata.name",
    ] {
        assert_eq!(FieldPath::parse(p).to_string(), p);
    }
    assert_eq!(FieldPath::parse("spec.a[1][2]").segs().len(), 4);
}

/// One thing wrong with one object: the field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation {
    pub(crate) field: FieldPath,
    pub(crate) message: String,
}

impl Violation {
    pub(crate) fn new(field: FieldPath, message: impl Into<String>) -> Self {
        Self {
            field,
            message: message.into(),
        }
    }
}

/// Kubernetes' DNS-1123 label: 1-63 of `[a-z0-9-]`, alphanumeric at both ends.
pub(crate) fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// Istio's `ValidateFQDN`: at most 255 characters, DNS-1123 labels, a top-level label that is not
/// all digits, an optional trailing dot.
pub(crate) fn validate_fqdn(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty domain name not allowed".into());
    }
    if name.len() > 255 {
        return Err(format!("domain name {name:?} too long (max 255)"));
    }
    let parts: Vec<&str> = name.split('.').collect();
    let top = parts[parts.len() - 1];
    if !top.is_empty() && top.bytes().all(|c| c.is_ascii_digit()) {
        return Err(format!(
            "domain name {name:?} invalid (top level domain {top:?} cannot be all-numeric)"
        ));
    }
    for (i, label) in parts.iter().enumerate() {
        if i == parts.len() - 1 && label.is_empty() {
            break;
        }
        if !is_dns1123_label(label) {
            return Err(format!(
                "domain name {name:?} invalid (label {label:?} invalid)"
            ));
        }
    }
    Ok(())
}

/// Whether `s` is an IP address or a CIDR block (Istio's `ValidateIPSubnet`); `Ok(true)` for a
/// CIDR block that is not a single address.
pub(crate) fn validate_ip_subnet(s: &str) -> Result<bool, String> {
    let Some((ip, bits)) = s.split_once('/') else {
        return s
            .parse::<IpAddr>()
            .map(|_| false)
            .map_err(|_| format!("{s} is not a valid IP"));
    };
    let cidr = || format!("{s} is not a valid CIDR block");
    let ip: IpAddr = ip.parse().map_err(|_| cidr())?;
    let bits: u8 = bits.parse().map_err(|_| cidr())?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    if bits > max {
        return Err(cidr());
    }
    Ok(bits != max)
}

/// Istio's `ValidateUnixAddress` for the part after `unix://`.
pub(crate) fn validate_unix_address(path: &str) -> Result<(), String> {
    if path.is_empty() {
        return Err("unix address must not be empty".into());
    }
    if path.starts_with('@') {
        return Ok(());
    }
    if !path.starts_with('/') || path.ends_with('/') {
        return Err(format!("{path} is not an absolute path to a file"));
    }
    Ok(())
}

/// Kubernetes label checks (Istio's `labels.Instance.Validate`): qualified-name keys (an optional
/// DNS subdomain prefix and `/`, then 1-63 alphanumerics, `-`, `_`, `.`), values of at most 63
/// such characters, alphanumeric at both ends.
pub(crate) fn validate_label(key: &str, value: &str) -> Result<(), String> {
    let name_ok = |s: &str| {
        let b = s.as_bytes();
        !b.is_empty()
            && b.len() <= 63
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
    };
    let key_ok = match key.split_once('/') {
        Some((prefix, name)) => {
            prefix.len() <= 253 && prefix.split('.').all(is_dns1123_label) && name_ok(name)
        }
        None => name_ok(key),
    };
    if !key_ok {
        return Err(format!("invalid label key {key:?}"));
    }
    if !value.is_empty() && !name_ok(value) {
        return Err(format!("invalid label value {value:?} for key {key:?}"));
    }
    Ok(())
}

/// A port protocol as Istio's `protocol.Parse` knows it (case-insensitive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SeProtocol {
    Http,
    HttpProxy,
    Http2,
    Grpc,
    GrpcWeb,
    Https,
    Tls,
    Tcp,
    Udp,
    Mongo,
    Redis,
    Mysql,
    /// Not set: Istio sniffs; tributary serves it as opaque TCP.
    Unset,
}

impl SeProtocol {
    /// Parses a protocol name; `None` for one Istio does not know.
    pub(crate) fn parse(s: &str) -> Option<SeProtocol> {
        Some(match s.to_ascii_uppercase().as_str() {
            "" => SeProtocol::Unset,
            "HTTP" => SeProtocol::Http,
            "HTTP_PROXY" => SeProtocol::HttpProxy,
            "HTTP2" => SeProtocol::Http2,
            "GRPC" => SeProtocol::Grpc,
            "GRPC-WEB" => SeProtocol::GrpcWeb,
            "HTTPS" => SeProtocol::Https,
            "TLS" => SeProtocol::Tls,
            "TCP" => SeProtocol::Tcp,
            "UDP" => SeProtocol::Udp,
            "MONGO" => SeProtocol::Mongo,
            "REDIS" => SeProtocol::Redis,
            "MYSQL" => SeProtocol::Mysql,
            _ => return None,
        })
    }

    /// Whether Istio routes it by HTTP `Host`.
    pub(crate) fn is_http(self) -> bool {
        matches!(
            self,
            SeProtocol::Http
                | SeProtocol::HttpProxy
                | SeProtocol::Http2
                | SeProtocol::Grpc
                | SeProtocol::GrpcWeb
        )
    }

    /// Whether Istio can tell hosts apart by TLS SNI.
    pub(crate) fn is_tls(self) -> bool {
        matches!(self, SeProtocol::Https | SeProtocol::Tls)
    }

    /// The model's protocol. HTTPS and TLS are passed through as opaque TCP (the TLS session is
    /// the client's own); UDP has no Envoy listener here, so the port is left out (`None`).
    pub(crate) fn to_model(self) -> Option<Protocol> {
        match self {
            SeProtocol::Http | SeProtocol::HttpProxy | SeProtocol::GrpcWeb => Some(Protocol::Http),
            SeProtocol::Http2 => Some(Protocol::Http2),
            SeProtocol::Grpc => Some(Protocol::Grpc),
            SeProtocol::Udp => None,
            SeProtocol::Https
            | SeProtocol::Tls
            | SeProtocol::Tcp
            | SeProtocol::Mongo
            | SeProtocol::Redis
            | SeProtocol::Mysql
            | SeProtocol::Unset => Some(Protocol::Tcp),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fqdn_and_labels_follow_istio() {
        assert!(validate_fqdn("api.example.com").is_ok());
        assert!(validate_fqdn("api.example.com.").is_ok());
        assert!(validate_fqdn("localhost").is_ok());
        assert!(validate_fqdn("api.example.123").is_err());
        assert!(validate_fqdn("API.example.com").is_err());
        assert!(validate_fqdn("-a.example.com").is_err());
        assert!(validate_fqdn("a..b").is_err());
        assert!(validate_fqdn("").is_err());
        assert!(validate_label("app", "web").is_ok());
        assert!(validate_label("app.kubernetes.io/name", "web-1").is_ok());
        assert!(validate_label("bad key", "x").is_err());
        assert!(validate_label("app", "-x").is_err());
        assert!(validate_label("app", "").is_ok());
    }

    #[test]
    fn subnets_unix_paths_and_protocols() {
        assert_eq!(validate_ip_subnet("10.0.0.1"), Ok(false));
        assert_eq!(validate_ip_subnet("10.0.0.0/8"), Ok(true));
        assert_eq!(validate_ip_subnet("10.0.0.1/32"), Ok(false));
        assert_eq!(validate_ip_subnet("2001:db8::/64"), Ok(true));
        assert!(validate_ip_subnet("10.0.0.0/33").is_err());
        assert!(validate_ip_subnet("example.com").is_err());
        assert!(validate_unix_address("/var/run/a.sock").is_ok());
        assert!(validate_unix_address("@abstract").is_ok());
        assert!(validate_unix_address("relative.sock").is_err());
        assert!(validate_unix_address("/dir/").is_err());
        assert_eq!(SeProtocol::parse("grpc-web"), Some(SeProtocol::GrpcWeb));
        assert_eq!(
            SeProtocol::parse("Mongo").and_then(SeProtocol::to_model),
            Some(Protocol::Tcp)
        );
        assert_eq!(
            SeProtocol::parse("UDP").and_then(SeProtocol::to_model),
            None
        );
        assert_eq!(SeProtocol::parse("SCTP"), None);
        let path = FieldPath::spec().key("ports").index(1).key("number");
        assert_eq!(path.to_string(), "spec.ports[1].number");
    }
}
