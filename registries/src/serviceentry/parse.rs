//! From manifest text to checked objects: splitting multi-document files, telling documents that
//! cannot be read at all (a half-written file) from objects that are readable but invalid, and
//! naming the field and line of every problem.
//!
//! CRD objects take the same path: the watcher's JSON is YAML too, so one parser and one set of
//! checks serve both sources. They just have no lines, and their unknown fields (which the API
//! server's schema already governs) are logged rather than rejected.

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_yaml::Value;

use super::checks::{FieldPath, Violation};
use super::types::{
    API_VERSIONS, GROUP, Kind, Object, ObjectKey, ServiceEntrySpec, WorkloadEntrySpec,
};
use super::validate::{
    Meta, Valid, validate_meta, validate_service_entry, validate_workload_entry,
};
use crate::rules::{
    DestinationRule, Problem as RuleProblem, Rule, RuleMeta, Severity, VirtualService,
    validate_destination_rule, validate_virtual_service,
};
use crate::support::yaml_locate::line_of;

/// One problem of one object, with the line of its field when the object came from a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    /// `spec.ports[1].number`; empty for the object as a whole.
    pub(crate) field: String,
    pub(crate) line: Option<usize>,
    pub(crate) message: String,
}

/// A readable object: its identity and either its checked form or its problems.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Parsed {
    pub(crate) key: ObjectKey,
    /// The line its document starts on (files only).
    pub(crate) line: Option<usize>,
    pub(crate) result: Result<Valid, Vec<Problem>>,
}

/// What one document holds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Document {
    /// Nothing (comments, an empty document).
    Empty,
    /// Another kind (a Gateway, a Deployment, ...), not for the config store.
    Ignored,
    /// A ServiceEntry, WorkloadEntry, DestinationRule or VirtualService.
    Object(Box<Parsed>),
}

/// A document that cannot be read as an object at all: not YAML, not an object, or one without a
/// kind or name to identify it. The file it is in keeps its last good objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unreadable {
    pub(crate) line: Option<usize>,
    pub(crate) message: String,
}

/// The documents of a multi-document YAML text, each with the 1-based line it starts on.
///
/// A document separator is a line starting with `---` (what kubectl, Helm and kustomize write); a
/// line `...` ends a document. Separators inside block scalars are not told apart, as in most
/// tools that split manifests by line.
pub(crate) fn split_documents(text: &str) -> Vec<(usize, String)> {
    let mut docs = Vec::new();
    let mut current = String::new();
    let mut start = 1;
    let mut ended = false;
    for (i, line) in text.lines().enumerate() {
        let is_separator =
            line.starts_with("---") && line[3..].chars().next().is_none_or(char::is_whitespace);
        if is_separator {
            docs.push((start, std::mem::take(&mut current)));
            start = i + 2;
            ended = false;
            // Content after `--- ` on the same line belongs to the new document.
            let rest = line[3..].trim_start();
            if !rest.is_empty() && !rest.starts_with('#') {
                current.push_str(rest);
                current.push('\n');
                start = i + 1;
            }
            continue;
        }
        if line.trim_end() == "..." {
            ended = true;
            continue;
        }
        if ended {
            continue;
        }
        current.push_str(line);
        current.push('\n');
    }
    docs.push((start, current));
    docs
}

/// Parses one document. `first_line` is the line it starts on in its file (`None` for CRDs);
/// `strict` makes unknown fields errors (files) instead of log lines (CRDs).
pub(crate) fn parse_document(
    text: &str,
    first_line: Option<usize>,
    default_namespace: &str,
    strict: bool,
) -> Result<Document, Unreadable> {
    let abs = |line: usize| first_line.map(|f| f + line - 1);
    let value: Value = serde_yaml::from_str(text).map_err(|e| Unreadable {
        line: e.location().and_then(|l| abs(l.line())),
        message: without_location(&e),
    })?;
    let unreadable = |message: String| Unreadable {
        line: first_line,
        message,
    };
    let map = match value {
        Value::Null => return Ok(Document::Empty),
        Value::Mapping(m) => m,
        _ => {
            return Err(unreadable(
                "a document must be a Kubernetes object (a mapping with apiVersion, kind, \
                 metadata)"
                    .into(),
            ));
        }
    };
    let kind = match map.get("kind").and_then(Value::as_str) {
        Some(k) => k,
        None => return Err(unreadable("the document has no `kind`".into())),
    };
    let Some(kind) = Kind::from_name(kind) else {
        return Ok(Document::Ignored);
    };
    let meta = map.get("metadata");
    let name = meta
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if name.is_empty() {
        return Err(unreadable(format!(
            "a {} without metadata.name cannot be identified",
            kind.name()
        )));
    }
    let namespace = meta
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .unwrap_or(default_namespace);
    let key = ObjectKey {
        kind,
        namespace: namespace.to_string(),
        name: name.to_string(),
    };
    let api_version = map.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let result = match kind {
        Kind::ServiceEntry => typed::<ServiceEntrySpec>(text, strict, &key, |meta, obj| {
            validate_service_entry(meta, &obj.spec).map(Valid::ServiceEntry)
        }),
        Kind::WorkloadEntry => typed::<WorkloadEntrySpec>(text, strict, &key, |meta, obj| {
            validate_workload_entry(meta, &obj.metadata.annotations, &obj.status, &obj.spec)
                .map(Valid::WorkloadEntry)
        }),
        Kind::DestinationRule => typed::<DestinationRule>(text, strict, &key, |meta, obj| {
            let rule = rule_of(&meta, obj);
            let problems = validate_destination_rule(&rule);
            checked(&key, problems, || Valid::DestinationRule(Arc::new(rule)))
        }),
        Kind::VirtualService => typed::<VirtualService>(text, strict, &key, |meta, obj| {
            let rule = rule_of(&meta, obj);
            let problems = validate_virtual_service(&rule);
            checked(&key, problems, || Valid::VirtualService(Arc::new(rule)))
        }),
    };
    let mut problems = Vec::new();
    let version_ok = api_version
        .split_once('/')
        .is_some_and(|(g, v)| g == GROUP && API_VERSIONS.contains(&v));
    if !version_ok {
        problems.push(Problem {
            field: "apiVersion".into(),
            line: first_line.and_then(|f| line_of(text, &[seg("apiVersion")]).map(|l| f + l - 1)),
            message: format!(
                "apiVersion {api_version:?} is not served; use {GROUP}/v1, {GROUP}/v1beta1 or \
                 {GROUP}/v1alpha3"
            ),
        });
    }
    let result = match (result, problems.is_empty()) {
        (Ok(valid), true) => Ok(valid),
        (Ok(_), false) => Err(problems),
        (Err(found), _) => {
            problems.extend(found.into_iter().map(|p| Problem {
                line: p.line.and_then(abs),
                ..p
            }));
            Err(problems)
        }
    };
    Ok(Document::Object(Box::new(Parsed {
        key,
        line: first_line,
        result,
    })))
}

/// A traffic rule with its metadata (`source` is filled in by the store, which knows the place).
fn rule_of<S: Clone>(meta: &Meta, obj: &Object<S>) -> Rule<S> {
    Rule {
        meta: RuleMeta {
            namespace: meta.key.namespace.clone(),
            name: meta.key.name.clone(),
            source: String::new(),
            labels: obj.metadata.labels.clone(),
            annotations: obj.metadata.annotations.clone(),
            resource_version: obj.metadata.resource_version.clone().unwrap_or_default(),
            creation_timestamp: obj.metadata.creation_timestamp.clone(),
        },
        spec: obj.spec.clone(),
    }
}

/// The rules module's problems as violations (its paths start at `spec`), or the valid object.
/// Warnings (what Istio also only warns about) are logged and the rule is applied.
fn checked(
    key: &ObjectKey,
    problems: Vec<RuleProblem>,
    valid: impl FnOnce() -> Valid,
) -> Result<Valid, Vec<Violation>> {
    let (errors, warnings): (Vec<_>, Vec<_>) = problems
        .into_iter()
        .partition(|p| p.severity == Severity::Error);
    for w in warnings {
        tracing::warn!(object = %key, field = %w.field, warning = %w.message,
            "config object applied with a warning");
    }
    if errors.is_empty() {
        return Ok(valid());
    }
    Err(errors
        .into_iter()
        .map(|p| Violation::new(FieldPath::parse(&p.field), p.message))
        .collect())
}

/// Deserializes `text` as an `Object<S>` (collecting unknown fields) and checks it with `check`.
/// Problem lines are relative to `text`.
fn typed<S: DeserializeOwned + Default>(
    text: &str,
    strict: bool,
    key: &ObjectKey,
    check: impl FnOnce(Meta, &Object<S>) -> Result<Valid, Vec<Violation>>,
) -> Result<Valid, Vec<Problem>> {
    let mut unknown = Vec::new();
    let de = serde_yaml::Deserializer::from_str(text);
    let parsed: Result<Object<S>, _> =
        serde_ignored::deserialize(de, |path| unknown.push(field_of(&path)));
    let obj = match parsed {
        Ok(obj) => obj,
        Err(e) => return Err(vec![type_problem(&e)]),
    };
    let mut violations = Vec::new();
    for field in unknown {
        let ours = field.starts_with_key("spec") || field.segs().len() == 1;
        let theirs = field.starts_with_key("metadata") || field.starts_with_key("status");
        if !ours || theirs {
            continue;
        }
        match strict {
            true => violations.push(Violation::new(field, "unknown field")),
            false => tracing::debug!(object = %key, %field, "unknown field ignored"),
        }
    }
    let meta = validate_meta(key.clone(), &obj.metadata, &mut violations);
    let checked = check(meta, &obj);
    match (checked, violations.is_empty()) {
        (Ok(valid), true) => Ok(valid),
        (Ok(_), false) => Err(locate(text, violations)),
        (Err(more), _) => {
            violations.extend(more);
            Err(locate(text, violations))
        }
    }
}

/// Problems with the line of each field, or of its nearest parent that is written.
fn locate(text: &str, violations: Vec<Violation>) -> Vec<Problem> {
    violations
        .into_iter()
        .map(|v| {
            let segs = v.field.segs();
            let line = (0..=segs.len())
                .rev()
                .find_map(|n| line_of(text, &segs[..n]).filter(|_| n > 0));
            Problem {
                field: v.field.to_string(),
                line,
                message: v.message,
            }
        })
        .collect()
}

/// A serde error (wrong type, bad enum, number out of range) as a problem of the field it names.
fn type_problem(e: &serde_yaml::Error) -> Problem {
    let message = without_location(e);
    // serde_yaml starts the message with the path of the field: `spec.ports[0].number: ...`.
    let (field, message) = match message.split_once(": ") {
        Some((path, rest)) if !path.contains(' ') => (path.to_string(), rest.to_string()),
        _ => (String::new(), message),
    };
    Problem {
        field,
        line: e.location().map(|l| l.line()),
        message,
    }
}

/// serde_yaml's message without its trailing " at line L column C" (lines are reported apart).
fn without_location(e: &serde_yaml::Error) -> String {
    let full = e.to_string();
    match full.rfind(" at line ") {
        Some(at) if e.location().is_some() => full[..at].to_string(),
        _ => full,
    }
}

fn seg(key: &str) -> crate::support::yaml_locate::Seg {
    crate::support::yaml_locate::Seg::Key(key.to_string())
}

/// serde_ignored's path of an unknown field as a field path.
fn field_of(path: &serde_ignored::Path<'_>) -> FieldPath {
    use serde_ignored::Path;
    match path {
        Path::Root => FieldPath::default(),
        Path::Seq { parent, index } => field_of(parent).index(*index),
        Path::Map { parent, key } => field_of(parent).key(key),
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => field_of(parent),
    }
}

#[cfg(test)]
mod tests;
