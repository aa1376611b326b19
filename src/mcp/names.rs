//! Deterministic, valid Kubernetes names for published objects: `metadata.name` is
//! `<namespace>/<name>`, the namespace a DNS-1123 label, the name a DNS-1123 subdomain made from
//! `<registry>-<hostname>` (and `-<address>` for a WorkloadEntry).

/// Longest DNS-1123 subdomain (an object name).
const MAX_SUBDOMAIN: usize = 253;
/// Longest DNS-1123 label (a namespace).
const MAX_LABEL: usize = 63;
/// Hex digits of the hash that keeps a shortened name unique.
const HASH_DIGITS: usize = 12;

/// The MCP resource name of object `name` in `namespace`: `<namespace>/<name>`.
pub fn resource_name(namespace: &str, name: &str) -> String {
    format!("{}/{}", sanitize(namespace, MAX_LABEL, false), name)
}

/// The object name for `parts` joined with `-`, as a DNS-1123 subdomain: lower case, anything but
/// `[a-z0-9.-]` becomes `-`, runs of `-` collapse, ends are alphanumeric; a name over 253 bytes is
/// cut and ends in a hash of the whole, so distinct inputs stay distinct.
pub fn object_name(parts: &[&str]) -> String {
    sanitize(&parts.join("-"), MAX_SUBDOMAIN, true)
}

fn sanitize(raw: &str, max: usize, dots: bool) -> String {
    let mut out = String::with_capacity(raw.len());
    for c in raw.chars() {
        let c = c.to_ascii_lowercase();
        let keep = c.is_ascii_lowercase() || c.is_ascii_digit() || (dots && c == '.');
        let c = if keep { c } else { '-' };
        if c == '-' && out.ends_with('-') {
            continue;
        }
        out.push(c);
    }
    let trimmed = out.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    let mut name = trimmed.to_string();
    if name.len() > max {
        let hash = xxhash_rust::xxh3::xxh3_64(raw.as_bytes());
        name.truncate(max - HASH_DIGITS - 1);
        let head = name.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
        name = format!("{head}-{:0width$x}", hash, width = HASH_DIGITS);
        name.truncate(max);
    }
    if name.is_empty() {
        name = "unnamed".to_string();
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_registry_dash_hostname_in_the_namespace() {
        assert_eq!(
            resource_name("shop", &object_name(&["consul", "api.service.consul"])),
            "shop/consul-api.service.consul"
        );
    }

    #[test]
    fn anything_outside_dns_1123_is_replaced() {
        assert_eq!(
            object_name(&["fs:///etc/Istio", "A_B.example"]),
            "fs-etc-istio-a-b.example"
        );
        assert_eq!(object_name(&["mock", "10.0.0.1"]), "mock-10.0.0.1");
        assert_eq!(object_name(&["m", "fd00::1"]), "m-fd00-1");
        assert_eq!(resource_name("My.NS", "x"), "my-ns/x");
        assert_eq!(resource_name("", "x"), "unnamed/x");
    }

    #[test]
    fn long_names_are_cut_with_a_hash_and_stay_distinct() {
        let long_a = format!("{}.a", "x".repeat(300));
        let long_b = format!("{}.b", "x".repeat(300));
        let a = object_name(&["r", &long_a]);
        let b = object_name(&["r", &long_b]);
        assert!(a.len() <= MAX_SUBDOMAIN, "{}", a.len());
        assert_ne!(a, b);
        assert!(a.chars().last().is_some_and(|c| c.is_ascii_alphanumeric()));
        assert_eq!(a, object_name(&["r", &long_a]), "deterministic");
    }
}
