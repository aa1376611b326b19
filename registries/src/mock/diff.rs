//! What changed between two full views of a registry, per hostname.

use super::file_format::Services;
use crate::registry::Change;

/// The changes that turn `old` into `new`, sorted by hostname. A hostname whose state is equal in
/// both produces nothing, so a no-op reload or resync emits nothing (REG-14).
pub(crate) fn diff(old: &Services, new: &Services) -> Vec<Change> {
    let mut out = Vec::new();
    let mut olds = old.iter().peekable();
    let mut news = new.iter().peekable();
    loop {
        match (olds.peek(), news.peek()) {
            (None, None) => break,
            (Some((h, _)), None) => {
                out.push(Change::Delete((*h).clone()));
                olds.next();
            }
            (None, Some((_, s))) => {
                out.push(Change::Upsert((*s).clone()));
                news.next();
            }
            (Some((ho, so)), Some((hn, sn))) => match ho.cmp(hn) {
                std::cmp::Ordering::Less => {
                    out.push(Change::Delete((*ho).clone()));
                    olds.next();
                }
                std::cmp::Ordering::Greater => {
                    out.push(Change::Upsert((*sn).clone()));
                    news.next();
                }
                std::cmp::Ordering::Equal => {
                    if so != sn {
                        out.push(Change::Upsert((*sn).clone()));
                    }
                    olds.next();
                    news.next();
                }
            },
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::tests::services;
    use crate::model::Hostname;

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
