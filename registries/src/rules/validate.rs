//! Istio's validation of DestinationRules and VirtualServices (`pkg/config/validation`
//! `ValidateDestinationRule`, `ValidateVirtualService` and their helpers), with Istio's messages
//! where it has one, plus what tributary cannot serve.
//!
//! Every problem is collected, each with the field it is about. A rule with any
//! [`Severity::Error`] is rejected; warnings (what Istio also only warns about, such as a route
//! that can never match) are reported and the rule is applied.
//!
//! Stricter than Istio, and why: `ISTIO_MUTUAL` TLS (tributary has no mesh CA), gateways other
//! than `mesh` (gateway proxies are out of scope), `delegate` routes, and an HTTP route that is
//! only a mirror are rejected, since ignoring them would silently change traffic.

mod destination_rule;
mod virtual_service;
pub use virtual_service::grpc_status_code;

#[cfg(test)]
mod tests;

use std::fmt;

use super::common::{Duration, Percent, StringMatch};
use super::{DestinationRule, Rule, VirtualService};
use crate::serviceentry::checks::{FieldPath, is_dns1123_label, validate_fqdn, validate_label};
use crate::support::yaml_locate::line_of;

/// How bad a problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The rule is rejected.
    Error,
    /// Reported; the rule is still applied.
    Warning,
}

/// One thing wrong with a rule: the field and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The field, from the top of the object (`spec.http[0].route[1].weight`).
    pub field: String,
    /// What is wrong, in Istio's words where Istio has them.
    pub message: String,
    pub severity: Severity,
    path: FieldPath,
}

impl Problem {
    fn error(path: FieldPath, message: impl Into<String>) -> Problem {
        Problem {
            field: path.to_string(),
            message: message.into(),
            severity: Severity::Error,
            path,
        }
    }

    fn warning(path: FieldPath, message: impl Into<String>) -> Problem {
        Problem {
            severity: Severity::Warning,
            ..Problem::error(path, message)
        }
    }

    /// Whether the rule must be rejected.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// The 1-based line of the field (or of its nearest parent written) in `yaml`, the text of
    /// the one document that holds the rule.
    pub fn line_in(&self, yaml: &str) -> Option<usize> {
        let segs = self.path.segs();
        (1..=segs.len())
            .rev()
            .find_map(|n| line_of(yaml, &segs[..n]))
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tag = match self.severity {
            Severity::Error => "",
            Severity::Warning => "warning: ",
        };
        write!(f, "{tag}{}: {}", self.field, self.message)
    }
}

/// Istio's `ValidateDestinationRule`, plus tributary's own limits.
pub fn validate_destination_rule(rule: &Rule<DestinationRule>) -> Vec<Problem> {
    let mut out = Problems::default();
    validate_meta(&rule.meta.namespace, &rule.meta.name, &mut out);
    destination_rule::validate(&rule.spec, &mut out);
    out.0
}

/// Istio's `ValidateVirtualService`, plus tributary's own limits.
pub fn validate_virtual_service(rule: &Rule<VirtualService>) -> Vec<Problem> {
    let mut out = Problems::default();
    validate_meta(&rule.meta.namespace, &rule.meta.name, &mut out);
    virtual_service::validate(&rule.spec, &mut out);
    out.0
}

/// The problems found so far.
#[derive(Default)]
struct Problems(Vec<Problem>);

impl Problems {
    fn error(&mut self, at: FieldPath, message: impl Into<String>) {
        self.0.push(Problem::error(at, message));
    }

    fn warning(&mut self, at: FieldPath, message: impl Into<String>) {
        self.0.push(Problem::warning(at, message));
    }

    fn check(&mut self, at: FieldPath, result: Result<(), String>) {
        if let Err(message) = result {
            self.error(at, message);
        }
    }
}

fn validate_meta(namespace: &str, name: &str, out: &mut Problems) {
    let at = FieldPath::default().key("metadata");
    if name.is_empty() || name.len() > 253 || !name.split('.').all(is_dns1123_label) {
        out.error(
            at.key("name"),
            format!("{name:?} is not a valid object name (a DNS-1123 subdomain)"),
        );
    }
    if !is_dns1123_label(namespace) {
        out.error(
            at.key("namespace"),
            format!("{namespace:?} is not a valid namespace (a DNS-1123 label)"),
        );
    }
}

/// Istio's `ValidateWildcardDomain`: DNS-1123 labels, where only the first may be a wildcard
/// (`*`, `*foo`, `*-foo`).
fn validate_wildcard_domain(domain: &str) -> Result<(), String> {
    if domain.is_empty() {
        return Err("empty domain name not allowed".into());
    }
    if domain.len() > 255 {
        return Err(format!("domain name {domain:?} too long (max 255)"));
    }
    let (first, rest) = match domain.split_once('.') {
        Some((first, rest)) => (first, Some(rest)),
        None => (domain, None),
    };
    let wildcard_ok = first == "*"
        || first
            .strip_prefix("*-")
            .or_else(|| first.strip_prefix('*'))
            .is_some_and(is_dns1123_label);
    if !wildcard_ok && !is_dns1123_label(first) {
        return Err(format!(
            "domain name {domain:?} invalid (label {first:?} invalid)"
        ));
    }
    match rest {
        Some(rest) if rest.contains('*') => Err(format!(
            "domain name {domain:?} invalid (a wildcard is only allowed as the first label)"
        )),
        Some(rest) => validate_fqdn(rest).map_err(|_| {
            format!("domain name {domain:?} invalid (labels after the first are not DNS-1123)")
        }),
        None => Ok(()),
    }
}

/// Istio's `ValidateDuration`: at least 1ms, to the millisecond.
fn validate_duration(d: Duration) -> Result<(), String> {
    let d = d.get();
    if d < std::time::Duration::from_millis(1) {
        return Err("duration must be greater than 1ms".into());
    }
    if !d.subsec_nanos().is_multiple_of(1_000_000) {
        return Err("only durations to ms precision are supported".into());
    }
    Ok(())
}

/// Istio's `validatePercentage`.
fn validate_percent(p: Percent) -> Result<(), String> {
    if !(0.0..=100.0).contains(&p.value) || p.value.is_nan() {
        return Err(format!("percentage {} is not in range 0..100", p.value));
    }
    Ok(())
}

/// Istio's `ValidatePort`.
fn validate_port(port: u32) -> Result<(), String> {
    if !(1..=65535).contains(&port) {
        return Err(format!("port number {port} must be in the range 1..65535"));
    }
    Ok(())
}

/// A `StringMatch`: exactly one kind (or none, where `empty_ok`), and a regex RE2 accepts.
fn validate_string_match(m: &StringMatch, empty_ok: bool, at: &FieldPath, out: &mut Problems) {
    let set = [&m.exact, &m.prefix, &m.regex]
        .into_iter()
        .filter(|v| v.is_some())
        .count();
    if set > 1 {
        out.error(
            at.clone(),
            "only one of exact, prefix or regex may be set in a string match",
        );
    } else if set == 0 && !empty_ok {
        out.error(at.clone(), "one of exact, prefix or regex must be set");
    }
    if let Some(re) = &m.regex {
        out.check(at.key("regex"), validate_regex(re));
    }
}

/// Istio's `validateStringMatchRegexp`: not empty, and a valid RE2 expression.
fn validate_regex(re: &str) -> Result<(), String> {
    if re.is_empty() {
        return Err("\"\": regex string match should not be empty".into());
    }
    regex::Regex::new(re)
        .map(|_| ())
        .map_err(|e| format!("{re:?}: invalid regex: {e}"))
}

/// Istio's `validateSubsetName` (also used for destination subsets).
fn validate_subset_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("subset name cannot be empty".into());
    }
    if !is_dns1123_label(name) {
        return Err(format!("subset name is invalid: {name}"));
    }
    Ok(())
}

/// Label checks (Istio's `labels.Instance.Validate`).
fn validate_labels<'a>(
    labels: impl IntoIterator<Item = (&'a String, &'a String)>,
    at: &FieldPath,
    out: &mut Problems,
) {
    for (k, v) in labels {
        out.check(at.key(k), validate_label(k, v));
    }
}
