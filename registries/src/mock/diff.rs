//! What changed between two full views of a registry, per hostname.

use imbl::ordmap::DiffItem;

use super::layers::View;
use crate::registry::Change;

/// The changes that turn `old` into `new`, sorted by hostname. A hostname whose state is equal in
/// both produces nothing, so a no-op reload or resync emits nothing (REG-14). Views derived from
/// one another share structure, so this costs their difference, not their size.
pub(crate) fn diff(old: &View, new: &View) -> Vec<Change> {
    old.diff(new)
        .filter_map(|item| match item {
            DiffItem::Add(_, s) => Some(Change::Upsert((**s).clone())),
            DiffItem::Update { old, new } if old.1 != new.1 => {
                Some(Change::Upsert((**new.1).clone()))
            }
            DiffItem::Update { .. } => None,
            DiffItem::Remove(h, _) => Some(Change::Delete(h.clone())),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::layers::view_of;
    use crate::model::Hostname;

    fn services(yaml: &str) -> View {
        view_of(&crate::mock::tests::services(yaml))
    }

    const BASE: &str = "services:
- {hostname: a.x, ports: [{name: http, port: 80, protocol: HTTP}], endpoints: [{address: 1.1.1.1}, {address: 1.1.1.2}]}
- {hostname: b.x, ports: [{name: http, port: 80, protocol: HTTP}]}
- {hostname: c.x, ports: [{name: tcp, port: 5432, protocol: TCP}]}
";

    #[test]
    fn equal_views_produce_nothing() {
        // REG-14
        assert!(diff(&services(BASE), &services(BASE)).is_empty());
        // Endpoint order is not a change.
        let reordered = BASE.replace(
            "[{address: 1.1.1.1}, {address: 1.1.1.2}]",
            "[{address: 1.1.1.2}, {address: 1.1.1.1}]",
        );
        assert!(diff(&services(BASE), &services(&reordered)).is_empty());
    }

    #[test]
    fn only_real_changes_keyed_by_hostname() {
        let new = "services:
- {hostname: a.x, ports: [{name: http, port: 80, protocol: HTTP}], endpoints: [{address: 1.1.1.1}]}
- {hostname: c.x, ports: [{name: tcp, port: 5432, protocol: TCP}]}
- {hostname: d.x, ports: [{name: http, port: 80, protocol: HTTP}]}
";
        let changes = diff(&services(BASE), &services(new));
        let summary: Vec<String> = changes
            .iter()
            .map(|c| match c {
                Change::Upsert(s) => format!("+{}/{}", s.service.hostname, s.endpoints.len()),
                Change::Delete(h) => format!("-{h}"),
            })
            .collect();
        assert_eq!(summary, ["+a.x/1", "-b.x", "+d.x/0"]);
        assert_eq!(changes[1], Change::Delete(Hostname::new("b.x").unwrap()));
    }
}
