//! Who this proxy is: the node id and node metadata pilot-agent gives a sidecar, for a VM.
//!
//! `sidecar~<ip>~<workload>.<namespace>~<namespace>.svc.cluster.local`, and metadata `NAMESPACE`,
//! `LABELS`, `INSTANCE_IPS`, `WORKLOAD_NAME`, `SERVICE_ACCOUNT` (from the certificate's SPIFFE ID
//! when TLS is on), `CLUSTER_ID`, plus any `ISTIO_META_*` the caller passes in.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::path::Path;

use serde_json::{Value, json};

use super::AgentError;

/// Where the default-route probe "connects" (a UDP connect sends nothing; it only picks the
/// route, and so the source address the host would use).
const ROUTE_PROBE: (Ipv4Addr, u16) = (Ipv4Addr::new(192, 0, 2, 1), 53);

/// The node's identity inputs.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The VM's IP.
    pub ip: IpAddr,
    /// Workload name.
    pub workload: String,
    /// Namespace.
    pub namespace: String,
    /// Labels (`LABELS`).
    pub labels: BTreeMap<String, String>,
    /// `CLUSTER_ID`.
    pub cluster_id: String,
    /// Extra metadata (`ISTIO_META_<KEY>` → `<KEY>`).
    pub extra: BTreeMap<String, String>,
}

impl Identity {
    /// Istio's sidecar node id.
    pub fn node_id(&self) -> String {
        format!(
            "sidecar~{}~{}.{}~{}.svc.cluster.local",
            self.ip, self.workload, self.namespace, self.namespace
        )
    }

    /// The node metadata, with `SERVICE_ACCOUNT` when `service_account` is known.
    pub fn metadata(&self, service_account: Option<&str>) -> BTreeMap<String, Value> {
        let mut m: BTreeMap<String, Value> = self
            .extra
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        m.insert("NAMESPACE".into(), json!(self.namespace));
        m.insert("LABELS".into(), json!(self.labels));
        m.insert("INSTANCE_IPS".into(), json!(self.ip.to_string()));
        m.insert("WORKLOAD_NAME".into(), json!(self.workload));
        m.insert("CLUSTER_ID".into(), json!(self.cluster_id));
        if let Some(sa) = service_account {
            m.insert("SERVICE_ACCOUNT".into(), json!(sa));
        }
        m
    }
}

/// The source address of the host's default route.
pub fn default_route_ip() -> Result<IpAddr, AgentError> {
    let probe = || -> std::io::Result<IpAddr> {
        let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
        s.connect(ROUTE_PROBE)?;
        Ok(s.local_addr()?.ip())
    };
    probe().map_err(|e| AgentError::NoIp(e.to_string()))
}

/// The service account named by the first SPIFFE ID (`spiffe://<td>/ns/<ns>/sa/<sa>`) of the
/// certificate chain in `cert`; `None` if it has none of that shape.
pub(super) fn service_account(cert: &Path) -> Result<Option<String>, AgentError> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let pem = std::fs::read(cert).map_err(|e| AgentError::File {
        path: cert.to_path_buf(),
        error: e.to_string(),
    })?;
    let Some(Ok(first)) = CertificateDer::pem_slice_iter(&pem).next() else {
        return Err(AgentError::File {
            path: cert.to_path_buf(),
            error: "no PEM certificate in it".into(),
        });
    };
    Ok(crate::tls::spiffe_ids(&first)
        .iter()
        .find_map(|id| sa_of(id)))
}

fn sa_of(spiffe: &str) -> Option<String> {
    let rest = spiffe.strip_prefix("spiffe://")?;
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        [_, "ns", _, "sa", sa] if !sa.is_empty() => Some(sa.to_string()),
        _ => None,
    }
}

/// Parses `k=v,k2=v2` (empty: no labels).
pub fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, AgentError> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                Ok((k.trim().to_string(), v.trim().to_string()))
            }
            _ => Err(AgentError::Invalid(format!(
                "label {p:?} is not key=value (--labels app=web,version=v1)"
            ))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> Identity {
        Identity {
            ip: "10.1.2.3".parse().unwrap(),
            workload: "billing".into(),
            namespace: "vms".into(),
            labels: parse_labels("app=billing, version=v2").unwrap(),
            cluster_id: "Kubernetes".into(),
            extra: BTreeMap::from([("MESH_ID".to_string(), "m1".to_string())]),
        }
    }

    #[test]
    fn node_id_and_metadata_follow_istio() {
        let i = id();
        assert_eq!(
            i.node_id(),
            "sidecar~10.1.2.3~billing.vms~vms.svc.cluster.local"
        );
        let m = i.metadata(Some("billing-sa"));
        assert_eq!(m["NAMESPACE"], "vms");
        assert_eq!(m["LABELS"]["version"], "v2");
        assert_eq!(m["INSTANCE_IPS"], "10.1.2.3");
        assert_eq!(m["WORKLOAD_NAME"], "billing");
        assert_eq!(m["SERVICE_ACCOUNT"], "billing-sa");
        assert_eq!(m["CLUSTER_ID"], "Kubernetes");
        assert_eq!(m["MESH_ID"], "m1");
        assert!(!i.metadata(None).contains_key("SERVICE_ACCOUNT"));
    }

    #[test]
    fn labels_and_spiffe_ids_parse() {
        assert!(parse_labels("").unwrap().is_empty());
        assert!(parse_labels("novalue").is_err());
        assert!(parse_labels("=x").is_err());
        assert_eq!(
            sa_of("spiffe://cluster.local/ns/vms/sa/billing").as_deref(),
            Some("billing")
        );
        assert_eq!(sa_of("spiffe://cluster.local/other"), None);
    }

    #[test]
    fn default_route_ip_is_an_address_of_this_host() {
        // A sandbox without a default route is an error that says so, not a panic.
        match default_route_ip() {
            Ok(ip) => assert!(!ip.is_unspecified()),
            Err(e) => assert!(e.to_string().contains("--ip"), "{e}"),
        }
    }
}
