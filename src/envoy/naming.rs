//! Names of generated resources, as Istio spells them.
//!
//! Dashboards, `istioctl proxy-config` habits and Envoy stats all key on these strings, so they are
//! built in one place and nowhere else (docs/ecosystem.md §1.6).

use tributary_registries::Hostname;

/// The outbound cluster of `hostname` on `port`: `outbound|<port>||<hostname>`.
///
/// Istio's `BuildSubsetKey` with direction `outbound` and no subset. The EDS `service_name` and the
/// CLA `cluster_name` are this same string, as in istiod.
pub fn cluster_name(port: u16, hostname: &Hostname) -> String {
    format!("outbound|{port}||{hostname}")
}

/// The cluster of one subset of `hostname` on `port`: `outbound|<port>|<subset>|<hostname>`
/// (Istio's `BuildSubsetKey`); its EDS service name is the same string.
pub fn subset_cluster_name(port: u16, subset: &str, hostname: &Hostname) -> String {
    format!("outbound|{port}|{subset}|{hostname}")
}

/// The logical listener of a port: `0.0.0.0_<port>`, even when the node binds elsewhere, because the
/// name identifies the port, not the socket (a rebound listener must replace, not add, one).
pub(super) fn listener_name(port: u16) -> String {
    format!("0.0.0.0_{port}")
}

/// The route configuration an HTTP listener on `port` asks RDS for: the port number as text.
pub(super) fn route_config_name(port: u16) -> String {
    port.to_string()
}

/// The virtual host of `hostname` inside the route configuration of `port`: `<hostname>:<port>`.
pub(super) fn virtual_host_name(hostname: &Hostname, port: u16) -> String {
    format!("{hostname}:{port}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_istio() {
        let h = Hostname::new("reviews.default.svc.cluster.local").unwrap();
        assert_eq!(
            cluster_name(9080, &h),
            "outbound|9080||reviews.default.svc.cluster.local"
        );
        // IsValidSubsetKey: exactly three '|'.
        assert_eq!(cluster_name(9080, &h).matches('|').count(), 3);
        assert_eq!(listener_name(9080), "0.0.0.0_9080");
        assert_eq!(route_config_name(9080), "9080");
        assert_eq!(
            virtual_host_name(&h, 9080),
            "reviews.default.svc.cluster.local:9080"
        );
    }
}
