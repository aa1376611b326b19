//! The type URLs the serve side answers (`docs/mcp.md`, "Which type URLs are answered").
//!
//! istiod's `xds://` config source subscribes with one request per collection whose type URL is the
//! collection's group/version/kind, and keys its sync state by the `type_url` of each response.
//! Current istiod asks under `v1`, older releases under `v1alpha3` (some tools `v1beta1`); the spec
//! messages are the same, so each of the four kinds is answered under all three, and a response
//! carries the URL the client used. Every other collection-shaped URL (`<group>/<version>/<Kind>`
//! of an Istio or Gateway API group) is answered empty: istiod counts the source synced only when
//! every collection it asked for got a response.

use crate::envoy::ResourceType;

/// The API versions the four served kinds are answered under.
pub const API_VERSIONS: [&str; 3] = ["v1", "v1beta1", "v1alpha3"];

/// Groups outside `*.istio.io` whose collections istiod subscribes to (Gateway API).
const OTHER_GROUPS: [&str; 2] = ["gateway.networking.k8s.io", "gateway.networking.x-k8s.io"];

/// Suffix of every Istio API group (`networking.istio.io`, `security.istio.io`, ...).
const ISTIO_GROUP_SUFFIX: &str = ".istio.io";

/// Every accepted URL of the four served kinds, with its type.
const URLS: [(ResourceType, &str); 12] = [
    (
        ResourceType::ServiceEntry,
        "networking.istio.io/v1/ServiceEntry",
    ),
    (
        ResourceType::ServiceEntry,
        "networking.istio.io/v1beta1/ServiceEntry",
    ),
    (
        ResourceType::ServiceEntry,
        "networking.istio.io/v1alpha3/ServiceEntry",
    ),
    (
        ResourceType::WorkloadEntry,
        "networking.istio.io/v1/WorkloadEntry",
    ),
    (
        ResourceType::WorkloadEntry,
        "networking.istio.io/v1beta1/WorkloadEntry",
    ),
    (
        ResourceType::WorkloadEntry,
        "networking.istio.io/v1alpha3/WorkloadEntry",
    ),
    (
        ResourceType::DestinationRule,
        "networking.istio.io/v1/DestinationRule",
    ),
    (
        ResourceType::DestinationRule,
        "networking.istio.io/v1beta1/DestinationRule",
    ),
    (
        ResourceType::DestinationRule,
        "networking.istio.io/v1alpha3/DestinationRule",
    ),
    (
        ResourceType::VirtualService,
        "networking.istio.io/v1/VirtualService",
    ),
    (
        ResourceType::VirtualService,
        "networking.istio.io/v1beta1/VirtualService",
    ),
    (
        ResourceType::VirtualService,
        "networking.istio.io/v1alpha3/VirtualService",
    ),
];

/// The served MCP type `url` names under any of [`API_VERSIONS`], with the URL as a `'static`
/// string (a response echoes it).
pub fn served(url: &str) -> Option<(ResourceType, &'static str)> {
    URLS.iter().find(|(_, u)| *u == url).copied()
}

/// Whether `url` names a collection istiod may subscribe to: `<group>/<version>/<Kind>` with an
/// Istio or Gateway API group. Such a URL that is not [`served`] is answered empty.
pub fn is_collection(url: &str) -> bool {
    let mut parts = url.split('/');
    let (Some(group), Some(version), Some(kind), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let group_ok = (group.len() > ISTIO_GROUP_SUFFIX.len() && group.ends_with(ISTIO_GROUP_SUFFIX))
        || OTHER_GROUPS.contains(&group);
    let version_ok = version.starts_with('v') && version.bytes().all(|b| b.is_ascii_alphanumeric());
    let kind_ok = kind.starts_with(|c: char| c.is_ascii_uppercase())
        && kind.bytes().all(|b| b.is_ascii_alphanumeric());
    group_ok && version_ok && kind_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_version_of_the_four_kinds_is_served_with_its_own_url() {
        for ty in ResourceType::ALL.into_iter().filter(|t| t.is_mcp()) {
            let kind = ty.type_url().rsplit('/').next().unwrap();
            for v in API_VERSIONS {
                let url = format!("networking.istio.io/{v}/{kind}");
                assert_eq!(
                    served(&url),
                    Some((ty, URLS.iter().find(|(_, u)| *u == url).unwrap().1))
                );
            }
        }
        assert_eq!(served("networking.istio.io/v2/ServiceEntry"), None);
        assert_eq!(
            served("type.googleapis.com/envoy.config.cluster.v3.Cluster"),
            None
        );
    }

    #[test]
    fn collection_shaped_urls_are_recognised() {
        for url in [
            "networking.istio.io/v1/Gateway",
            "security.istio.io/v1/AuthorizationPolicy",
            "telemetry.istio.io/v1/Telemetry",
            "extensions.istio.io/v1alpha1/WasmPlugin",
            "networking.istio.io/v1beta1/ProxyConfig",
            "gateway.networking.k8s.io/v1/HTTPRoute",
            "gateway.networking.x-k8s.io/v1alpha1/XBackendTrafficPolicy",
        ] {
            assert!(is_collection(url), "{url}");
        }
        for url in [
            "type.googleapis.com/envoy.config.cluster.v3.Cluster",
            "/v1alpha1/MeshConfig",
            "example.com/v1/Thing",
            ".istio.io/v1/Thing",
            "networking.istio.io/v1/Gateway/extra",
            "networking.istio.io/1/Gateway",
            "networking.istio.io/v1/gateway",
            "",
        ] {
            assert!(!is_collection(url), "{url}");
        }
    }
}
