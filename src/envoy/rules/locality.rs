//! `localityLbSetting` → EDS priorities and locality weights relative to the proxy's own locality.
//!
//! istiod does this per proxy when it builds EDS (`pilot/pkg/networking/core/loadbalancer`); here
//! the inputs are kept next to the load assignment ([`LocalityInput`]) and the snapshot applies
//! them once per distinct proxy locality (`crate::snapshot`), so every proxy of one locality
//! shares one encoding. What applies, as in istiod:
//!
//! - `enabled: false` turns it off; there is no mesh-wide default (istiod's MeshConfig enables it
//!   for every rule with outlier detection; tributary has no MeshConfig, so only rules that write
//!   `localityLbSetting` get it);
//! - `distribute`: for the first entry whose `from` matches the proxy, each locality group matching
//!   a `to` gets `ceil(its weight × to-weight / sum of matching weights)`; groups matching no `to`
//!   lose their endpoints. The cluster gets locality-weighted balancing (`policy.rs`);
//! - failover, only when the cluster has outlier detection (without it Envoy never moves down a
//!   priority): `failoverPriority` splits each group by how many of the listed labels the endpoint
//!   shares with the proxy, then region/zone/subzone proximity (0 same subzone … 3 other region,
//!   4 a region that `failover` does not name for the proxy's region) refines it, and priorities
//!   are renumbered 0..N without gaps.
//!
//! The proxy's labels are its locality's topology labels (`topology.kubernetes.io/region`,
//! `topology.kubernetes.io/zone`, `topology.istio.io/subzone`) or a `label=value` override in the
//! rule; other node labels are not read, so the variant depends on the locality alone.

use std::collections::BTreeMap;

use envoy_types::pb::envoy::config::core::v3::Locality as PbLocality;
use envoy_types::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, LbEndpoint, LocalityLbEndpoints,
};
use envoy_types::pb::google::protobuf::UInt32Value;
use tributary_registries::Locality;
use tributary_registries::rules::{Distribute, Failover, LocalityLbSetting};

/// Kubernetes' region label, which istiod also sets on proxies and endpoints from their locality.
pub(crate) const REGION_LABEL: &str = "topology.kubernetes.io/region";
/// Kubernetes' zone label.
pub(crate) const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// Istio's subzone label.
pub(crate) const SUBZONE_LABEL: &str = "topology.istio.io/subzone";

/// Separates a label from the value the proxy is taken to have in `failoverPriority` (`key=value`).
const PRIORITY_OVERRIDE_SEPARATOR: char = '=';

/// How many priorities locality failover alone assigns (0..=4); failoverPriority's levels are
/// multiplied by it so both orderings combine, as istiod does.
const FAILOVER_LEVELS: u32 = 5;

/// The priority locality failover gives a region that `failover` does not name.
const UNNAMED_REGION_PRIORITY: u32 = 4;

/// What a load assignment needs to be specialised for a proxy locality.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalityInput {
    /// The assignment as proxies without a locality get it.
    pub cla: ClusterLoadAssignment,
    /// The rule's setting for this cluster (after port and subset overrides).
    pub setting: LocalityLbSetting,
    /// Whether the cluster has outlier detection, without which failover is not applied.
    pub failover: bool,
    /// Per locality group, per endpoint: the endpoint's value of each `failoverPriority` label.
    pub priority_values: Vec<Vec<Vec<String>>>,
}

impl LocalityInput {
    /// The input for `cla` when `setting` changes anything for some proxy; `None` when it never
    /// does (disabled, or only failover without outlier detection). `labels` gives the labels of
    /// an endpoint of `cla`.
    pub fn new(
        cla: &ClusterLoadAssignment,
        setting: &LocalityLbSetting,
        failover: bool,
        labels: impl Fn(&LbEndpoint) -> BTreeMap<String, String>,
    ) -> Option<Self> {
        if setting.enabled == Some(false) || (setting.distribute.is_empty() && !failover) {
            return None;
        }
        let keys: Vec<&str> = setting
            .failover_priority
            .iter()
            .map(|p| priority_key(p).0)
            .collect();
        let priority_values = cla
            .endpoints
            .iter()
            .map(|group| {
                let locality = group.locality.clone().unwrap_or_default();
                group
                    .lb_endpoints
                    .iter()
                    .map(|ep| {
                        let mut l = labels(ep);
                        add_topology(&mut l, &from_pb(&locality));
                        keys.iter()
                            .map(|k| l.get(*k).cloned().unwrap_or_default())
                            .collect()
                    })
                    .collect()
            })
            .collect();
        Some(Self {
            cla: cla.clone(),
            setting: setting.clone(),
            failover,
            priority_values,
        })
    }

    /// A fingerprint of everything but the assignment itself, so that a change of the setting
    /// or of a priority label is a new version even when the default bytes are the same.
    pub fn fingerprint(&self) -> String {
        format!(
            "{:?}|{}|{:?}",
            self.setting, self.failover, self.priority_values
        )
    }

    /// The assignment as a proxy in `proxy` gets it.
    pub fn apply(&self, proxy: &Locality) -> ClusterLoadAssignment {
        let mut cla = self.cla.clone();
        if !self.setting.distribute.is_empty() {
            distribute(&mut cla, proxy, &self.setting.distribute);
        } else if self.failover {
            if !self.setting.failover_priority.is_empty() {
                failover_priority(&mut cla, proxy, self);
            }
            failover(&mut cla, proxy, &self.setting.failover);
        }
        cla
    }
}

/// `key=value` → (`key`, the value to use for the proxy); `key` → (`key`, none).
fn priority_key(p: &str) -> (&str, Option<&str>) {
    match p.split_once(PRIORITY_OVERRIDE_SEPARATOR) {
        Some((k, v)) => (k, Some(v)),
        None => (p, None),
    }
}

fn from_pb(l: &PbLocality) -> Locality {
    Locality {
        region: l.region.clone(),
        zone: l.zone.clone(),
        subzone: l.sub_zone.clone(),
    }
}

/// The topology labels istiod derives from a locality, unless `labels` already has them.
fn add_topology(labels: &mut BTreeMap<String, String>, l: &Locality) {
    for (key, value) in [
        (REGION_LABEL, &l.region),
        (ZONE_LABEL, &l.zone),
        (SUBZONE_LABEL, &l.subzone),
    ] {
        if !value.is_empty() {
            labels
                .entry(key.to_string())
                .or_insert_with(|| value.clone());
        }
    }
}

/// Whether `proxy` is in `rule` (`region/zone/subzone`, `*` or a missing part matching anything
/// below the region; the region itself must be given or `*`).
pub fn locality_matches(proxy: &Locality, rule: &str) -> bool {
    let mut parts = rule.splitn(3, '/');
    let (region, zone, subzone) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let part = |want: &str, have: &str| want == "*" || want.is_empty() || want == have;
    (region == "*" || region == proxy.region)
        && part(zone, &proxy.zone)
        && part(subzone, &proxy.subzone)
}

fn group_weight(g: &LocalityLbEndpoints) -> u32 {
    g.load_balancing_weight.as_ref().map_or(1, |w| w.value)
}

fn distribute(cla: &mut ClusterLoadAssignment, proxy: &Locality, rules: &[Distribute]) {
    let Some(rule) = rules.iter().find(|d| locality_matches(proxy, &d.from)) else {
        return;
    };
    let mut unmatched: Vec<bool> = vec![true; cla.endpoints.len()];
    for (to, weight) in &rule.to {
        let matched: Vec<usize> = (0..cla.endpoints.len())
            .filter(|&i| unmatched[i])
            .filter(|&i| {
                let l = from_pb(&cla.endpoints[i].locality.clone().unwrap_or_default());
                locality_matches(&l, to)
            })
            .collect();
        let total: u64 = matched
            .iter()
            .map(|&i| u64::from(group_weight(&cla.endpoints[i])))
            .sum();
        for &i in &matched {
            unmatched[i] = false;
            let share = u64::from(group_weight(&cla.endpoints[i])) * u64::from(*weight);
            let value = share.div_ceil(total.max(1));
            if value > 0 {
                cla.endpoints[i].load_balancing_weight = Some(UInt32Value {
                    value: u32::try_from(value).unwrap_or(u32::MAX),
                });
            }
        }
    }
    for (group, gone) in cla.endpoints.iter_mut().zip(unmatched) {
        if gone {
            group.lb_endpoints.clear();
        }
    }
}

/// Region/zone/subzone proximity: 0 all equal, 1 same zone, 2 same region, 3 other region.
fn proximity(proxy: &Locality, ep: &Locality) -> u32 {
    match (
        proxy.region == ep.region,
        proxy.zone == ep.zone,
        proxy.subzone == ep.subzone,
    ) {
        (true, true, true) => 0,
        (true, true, false) => 1,
        (true, false, _) => 2,
        (false, _, _) => 3,
    }
}

fn failover(cla: &mut ClusterLoadAssignment, proxy: &Locality, rules: &[Failover]) {
    for group in &mut cla.endpoints {
        let ep = from_pb(&group.locality.clone().unwrap_or_default());
        let mut p = proximity(proxy, &ep);
        if p == 3
            && let Some(rule) = rules.iter().find(|f| f.from == proxy.region)
            && (group.locality.is_none() || ep.region != rule.to)
        {
            p = UNNAMED_REGION_PRIORITY;
        }
        group.priority = group.priority * FAILOVER_LEVELS + p;
    }
    renumber(&mut cla.endpoints);
}

fn failover_priority(cla: &mut ClusterLoadAssignment, proxy: &Locality, input: &LocalityInput) {
    let mut proxy_labels = BTreeMap::new();
    add_topology(&mut proxy_labels, proxy);
    let wanted: Vec<String> = input
        .setting
        .failover_priority
        .iter()
        .map(|p| match priority_key(p) {
            (_, Some(v)) => v.to_string(),
            (k, None) => proxy_labels.get(k).cloned().unwrap_or_default(),
        })
        .collect();
    let lowest = u32::try_from(wanted.len()).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(cla.endpoints.len());
    for (group, values) in cla.endpoints.iter().zip(&input.priority_values) {
        // Priority of each endpoint: lowest − (index of the first label that differs).
        let mut by_priority: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, v) in values.iter().enumerate() {
            let first_diff = wanted.iter().zip(v).position(|(w, have)| w != have);
            let p = first_diff.map_or(0, |j| lowest - u32::try_from(j).unwrap_or(lowest));
            by_priority.entry(p).or_default().push(i);
        }
        for (p, members) in by_priority {
            let lb_endpoints: Vec<_> = members
                .iter()
                .filter_map(|&i| group.lb_endpoints.get(i).cloned())
                .collect();
            let weight = lb_endpoints
                .iter()
                .filter_map(|e| e.load_balancing_weight.as_ref())
                .fold(0u32, |acc, w| acc.saturating_add(w.value));
            out.push(LocalityLbEndpoints {
                locality: group.locality.clone(),
                lb_endpoints,
                load_balancing_weight: Some(UInt32Value { value: weight }),
                priority: p,
                ..Default::default()
            });
        }
    }
    renumber(&mut out);
    cla.endpoints = out;
}

/// Priorities must run 0..N without gaps: map the distinct ones used, in order, onto 0..N.
fn renumber(groups: &mut [LocalityLbEndpoints]) {
    let used: std::collections::BTreeSet<u32> = groups.iter().map(|g| g.priority).collect();
    let rank: BTreeMap<u32, u32> = used.into_iter().zip(0..).collect();
    for g in groups {
        g.priority = rank.get(&g.priority).copied().unwrap_or(g.priority);
    }
}

#[cfg(test)]
mod tests;
