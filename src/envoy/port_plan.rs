//! What one port serves, decided once for the listener and the route configuration of that port.
//!
//! Envoy has one listener per port, so every service that exposes a port number shares it. The
//! plan picks a shape Envoy accepts whatever the services want, and says who was left out:
//!
//! - any HTTP (HTTP, HTTP2, gRPC) service → an HTTP listener routing by `Host` to every HTTP
//!   service; TCP services on that port are left out (an opaque TCP proxy cannot share a socket
//!   with an HTTP connection manager without protocol sniffing, which is not generated here);
//! - only TCP services → a TCP proxy to the one with the smallest hostname; the others are left
//!   out (nothing in a raw TCP stream says which service it wants).
//!
//! Each service left out gets a [`ConfigIssue`] (object = hostname, field = `ports[<name>]`); the
//! decision depends only on the set of services, never on their order (REG-10, BUG-14).

use tributary_registries::{Service, ServicePort};

use super::ConfigIssue;
use crate::aggregate::MergedService;

/// One service on the planned port, with its port definition.
#[derive(Debug, Clone, Copy)]
pub(super) struct Member<'a> {
    /// The service.
    pub svc: &'a MergedService,
    /// Its port with the planned number.
    pub port: &'a ServicePort,
}

/// How a port is served.
#[derive(Debug)]
pub(super) enum PortPlan<'a> {
    /// An HTTP connection manager routing to these services, sorted by hostname, hostnames unique.
    Http(Vec<Member<'a>>),
    /// A TCP proxy to this one service.
    Tcp(Member<'a>),
}

/// Plans `port` from `services` (those with a port of that number). Returns `None` when no service
/// has that port, and the issues for every service left out.
pub(super) fn plan<'a>(
    port: u16,
    services: &[&'a MergedService],
) -> (Option<PortPlan<'a>>, Vec<ConfigIssue>) {
    let mut issues = Vec::new();
    let mut members: Vec<Member<'a>> = services
        .iter()
        .filter_map(|svc| port_numbered(&svc.service, port).map(|p| Member { svc, port: p }))
        .collect();
    members.sort_by(|a, b| a.svc.service.hostname.cmp(&b.svc.service.hostname));
    members.dedup_by(|later, first| {
        let same = later.svc.service.hostname == first.svc.service.hostname;
        if same {
            issues.push(left_out(
                later,
                format!("hostname appears twice among the services of port {port}; kept once"),
            ));
        }
        same
    });
    let (http, tcp): (Vec<_>, Vec<_>) =
        members.into_iter().partition(|m| m.port.protocol.is_http());
    let plan = if let Some(first_http) = http.first() {
        let others = http.len() - 1;
        for m in &tcp {
            issues.push(left_out(
                m,
                format!(
                    "port {port} is served as HTTP (for {} and {others} other service(s)); a TCP \
                     service cannot share it, so it gets no listener",
                    first_http.svc.service.hostname
                ),
            ));
        }
        Some(PortPlan::Http(http))
    } else if let Some((winner, rest)) = tcp.split_first() {
        for m in rest {
            issues.push(left_out(
                m,
                format!(
                    "port {port} is already served by TCP service {} (the smallest hostname \
                     wins); it gets no listener",
                    winner.svc.service.hostname
                ),
            ));
        }
        Some(PortPlan::Tcp(*winner))
    } else {
        None
    };
    (plan, issues)
}

fn left_out(m: &Member<'_>, message: String) -> ConfigIssue {
    ConfigIssue {
        object: m.svc.service.hostname.to_string(),
        field: format!("ports[{}]", m.port.name),
        message,
    }
}

/// The first port of `svc` numbered `port`.
pub(super) fn port_numbered(svc: &Service, port: u16) -> Option<&ServicePort> {
    svc.ports.iter().find(|p| p.port == port)
}

/// The ports of `svc` with distinct numbers, in declared order. A repeated number would produce a
/// duplicate cluster name, which Envoy rejects (BUG-14): the first declaration wins, and when
/// `issues` is given the others are reported there (the caller generating clusters reports; the
/// one generating endpoints stays quiet so each problem is told once).
pub(super) fn distinct_ports<'a>(
    svc: &'a Service,
    mut issues: Option<&mut Vec<ConfigIssue>>,
) -> Vec<&'a ServicePort> {
    let mut out: Vec<&ServicePort> = Vec::with_capacity(svc.ports.len());
    for p in &svc.ports {
        if out.iter().any(|q| q.port == p.port) {
            if let Some(issues) = issues.as_deref_mut() {
                issues.push(ConfigIssue {
                    object: svc.hostname.to_string(),
                    field: format!("ports[{}]", p.name),
                    message: format!(
                        "port number {} is declared twice; only the first declaration is served",
                        p.port
                    ),
                });
            }
            continue;
        }
        out.push(p);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envoy::fixtures::{merged, port};
    use tributary_registries::Protocol;

    fn hosts(plan: &PortPlan<'_>) -> Vec<String> {
        match plan {
            PortPlan::Http(ms) => ms
                .iter()
                .map(|m| m.svc.service.hostname.to_string())
                .collect(),
            PortPlan::Tcp(m) => vec![m.svc.service.hostname.to_string()],
        }
    }

    #[test]
    fn http_wins_over_tcp_and_tcp_is_reported() {
        // REG-12: a mixed port still yields one valid listener, the loser is named.
        let a = merged("a.demo", vec![port("tcp", 80, Protocol::Tcp)], vec![]);
        let b = merged("b.demo", vec![port("http", 80, Protocol::Http)], vec![]);
        let (plan, issues) = plan(80, &[&a, &b]);
        let plan = plan.unwrap();
        assert!(matches!(plan, PortPlan::Http(_)));
        assert_eq!(hosts(&plan), ["b.demo"]);
        assert_eq!(issues.len(), 1);
        assert_eq!(issues[0].object, "a.demo");
        assert_eq!(issues[0].field, "ports[tcp]");
    }

    #[test]
    fn smallest_tcp_hostname_wins_whatever_the_order() {
        // REG-10: independent of input order.
        let a = merged("a.demo", vec![port("db", 5432, Protocol::Tcp)], vec![]);
        let b = merged("b.demo", vec![port("pg", 5432, Protocol::Tcp)], vec![]);
        for input in [[&a, &b], [&b, &a]] {
            let (plan, issues) = plan(5432, &input);
            assert_eq!(hosts(&plan.unwrap()), ["a.demo"]);
            assert_eq!(issues.len(), 1);
            assert_eq!(
                (issues[0].object.as_str(), issues[0].field.as_str()),
                ("b.demo", "ports[pg]")
            );
        }
    }

    #[test]
    fn no_service_on_the_port_means_no_plan() {
        let a = merged("a.demo", vec![port("http", 80, Protocol::Http)], vec![]);
        let (plan, issues) = plan(81, &[&a]);
        assert!(plan.is_none());
        assert!(issues.is_empty());
    }

    #[test]
    fn repeated_port_numbers_keep_the_first() {
        // BUG-14: never two clusters with one name.
        let a = merged(
            "a.demo",
            vec![
                port("http", 80, Protocol::Http),
                port("again", 80, Protocol::Tcp),
            ],
            vec![],
        );
        let mut issues = Vec::new();
        let ports = distinct_ports(&a.service, Some(&mut issues));
        assert_eq!(ports.len(), 1);
        assert_eq!(ports[0].name, "http");
        assert_eq!(issues[0].field, "ports[again]");
        assert_eq!(distinct_ports(&a.service, None).len(), 1);
    }
}
