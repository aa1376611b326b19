//! Which rule applies to which hostname.
//!
//! Istio's host matching: a rule's host is read in the rule's namespace (a name without a dot,
//! `reviews`, is `reviews.<namespace>.svc.cluster.local`); a rule naming the exact hostname wins
//! over wildcards, and among wildcards the most specific (longest) wins. When several
//! VirtualServices name the same host, the oldest (by creation time, then namespace/name) applies,
//! as istiod picks. Several DestinationRules of one host are merged as istiod merges them
//! (`mergeDestinationRule`): taken oldest first, each adds the subsets whose names are new, and its
//! `trafficPolicy` applies only if no older rule had one.

use std::collections::BTreeMap;
use std::sync::Arc;

use tributary_registries::Hostname;
use tributary_registries::rules::{DestinationRule, Rule, RuleSet, VirtualService};

use super::DOMAIN_SUFFIX;

/// The rules of a [`RuleSet`], indexed by the hosts they name.
#[derive(Debug, Default, Clone)]
pub struct RuleIndex {
    destination_rules: HostMap<DestinationRule>,
    virtual_services: HostMap<VirtualService>,
}

impl RuleIndex {
    /// Indexes `rules`.
    pub fn new(rules: &RuleSet) -> Self {
        let mut destination_rules = HostMap::default();
        for rule in ordered(&rules.destination_rules) {
            destination_rules.add_with(&rule.spec.host, rule, merge_destination_rules);
        }
        let mut virtual_services = HostMap::default();
        for rule in ordered(&rules.virtual_services) {
            for host in &rule.spec.hosts {
                virtual_services.add(host, rule);
            }
        }
        Self {
            destination_rules,
            virtual_services,
        }
    }

    /// The DestinationRule that applies to `host`, if any.
    pub fn destination_rule(&self, host: &Hostname) -> Option<&Arc<Rule<DestinationRule>>> {
        self.destination_rules.lookup(host.as_str())
    }

    /// The VirtualService that routes `host`, if any.
    pub fn virtual_service(&self, host: &Hostname) -> Option<&Arc<Rule<VirtualService>>> {
        self.virtual_services.lookup(host.as_str())
    }

    /// The VirtualService naming exactly `name` (not through a wildcard), if any.
    pub fn virtual_service_exact(&self, name: &str) -> Option<&Arc<Rule<VirtualService>>> {
        self.virtual_services.exact.get(name)
    }

    /// Every VirtualService host that is an exact name (not a wildcard), with its rule: the hosts
    /// that may need a virtual host of their own when no registry knows them.
    pub fn virtual_service_names(
        &self,
    ) -> impl Iterator<Item = (&str, &Arc<Rule<VirtualService>>)> {
        self.virtual_services
            .exact
            .iter()
            .map(|(h, r)| (h.as_str(), r))
    }
}

/// Rules oldest first (no creation time counts as oldest), then by namespace and name.
fn ordered<T>(rules: &[Arc<Rule<T>>]) -> Vec<&Arc<Rule<T>>> {
    let mut v: Vec<&Arc<Rule<T>>> = rules.iter().collect();
    v.sort_by(|a, b| {
        (&a.meta.creation_timestamp, &a.meta.namespace, &a.meta.name).cmp(&(
            &b.meta.creation_timestamp,
            &b.meta.namespace,
            &b.meta.name,
        ))
    });
    v
}

/// `newer` merged into `older`, as istiod merges two DestinationRules of one host: `newer`'s
/// subsets whose names `older` lacks are appended, and `newer`'s `trafficPolicy` applies only when
/// `older` has none. The merged rule keeps `older`'s identity.
fn merge_destination_rules(
    older: &Rule<DestinationRule>,
    newer: &Rule<DestinationRule>,
) -> Option<Rule<DestinationRule>> {
    let mut merged = older.clone();
    for subset in &newer.spec.subsets {
        if !merged.spec.subsets.iter().any(|s| s.name == subset.name) {
            merged.spec.subsets.push(subset.clone());
        }
    }
    if merged.spec.traffic_policy.is_none() {
        merged.spec.traffic_policy = newer.spec.traffic_policy.clone();
    }
    Some(merged)
}

/// The full name a host written in a rule of `namespace` stands for.
pub(crate) fn resolve_host(host: &str, namespace: &str) -> String {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if host.contains('.') || host == "*" {
        host
    } else {
        format!("{host}.{namespace}.{DOMAIN_SUFFIX}")
    }
}

/// Hosts → the first rule added for each, exact names apart from wildcard suffixes.
#[derive(Debug)]
struct HostMap<T> {
    exact: BTreeMap<String, Arc<Rule<T>>>,
    /// `*.example.com` is kept as `.example.com`; `*` as the empty suffix.
    wildcards: Vec<(String, Arc<Rule<T>>)>,
}

impl<T> Default for HostMap<T> {
    fn default() -> Self {
        Self {
            exact: BTreeMap::new(),
            wildcards: Vec::new(),
        }
    }
}

impl<T> Clone for HostMap<T> {
    fn clone(&self) -> Self {
        Self {
            exact: self.exact.clone(),
            wildcards: self.wildcards.clone(),
        }
    }
}

impl<T> HostMap<T> {
    /// Adds `rule` for `host`; a host that already has a rule keeps it.
    fn add(&mut self, host: &str, rule: &Arc<Rule<T>>) {
        self.add_with(host, rule, |_, _| None);
    }

    /// Adds `rule` for `host`; when the host already has a rule, `merge(older, rule)` may replace
    /// it (`None` keeps the older one).
    fn add_with(
        &mut self,
        host: &str,
        rule: &Arc<Rule<T>>,
        merge: impl Fn(&Rule<T>, &Rule<T>) -> Option<Rule<T>>,
    ) {
        let full = resolve_host(host, &rule.meta.namespace);
        let slot = match full.strip_prefix('*') {
            Some(suffix) => match self.wildcards.iter().position(|(s, _)| s == suffix) {
                Some(i) => &mut self.wildcards[i].1,
                None => {
                    self.wildcards.push((suffix.to_string(), Arc::clone(rule)));
                    // Most specific first: longer suffixes match fewer names.
                    self.wildcards.sort_by_key(|w| std::cmp::Reverse(w.0.len()));
                    return;
                }
            },
            None => match self.exact.entry(full) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(Arc::clone(rule));
                    return;
                }
            },
        };
        if let Some(merged) = merge(slot, rule) {
            *slot = Arc::new(merged);
        }
    }

    fn lookup(&self, host: &str) -> Option<&Arc<Rule<T>>> {
        self.exact.get(host).or_else(|| {
            self.wildcards
                .iter()
                .find(|(suffix, _)| host.ends_with(suffix.as_str()) && host.len() > suffix.len())
                .map(|(_, r)| r)
        })
    }
}
