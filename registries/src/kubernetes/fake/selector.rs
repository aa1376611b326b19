//! Label and field selectors as the API server reads them from `labelSelector` / `fieldSelector`.
//!
//! Set-based and equality-based label requirements (`a=b`, `a==b`, `a!=b`, `a`, `!a`,
//! `a in (x,y)`, `a notin (x,y)`), and the two field selectors every kind supports
//! (`metadata.name`, `metadata.namespace`, with `=`/`==`/`!=`).

use std::collections::BTreeMap;

use serde_json::Value;

/// One parsed requirement.
#[derive(Debug, Clone, PartialEq)]
enum Req {
    Eq(String, String),
    NotEq(String, String),
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// A parsed selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Selector(Vec<Req>);

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

fn set(values: &str) -> Result<Vec<String>, String> {
    let inner = values
        .trim()
        .strip_prefix('(')
        .and_then(|v| v.strip_suffix(')'))
        .ok_or_else(|| format!("expected (a,b) after in/notin, got {values:?}"))?;
    Ok(inner.split(',').map(|v| v.trim().to_string()).collect())
}

impl Selector {
    /// Parses a selector; `None` or an empty string selects everything.
    pub(crate) fn parse(text: Option<&str>) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in split_top(text.unwrap_or("")) {
            let req = if let Some((k, v)) = part.split_once("!=") {
                Req::NotEq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==") {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('=') {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once(" notin ") {
                Req::NotIn(k.trim().into(), set(v)?)
            } else if let Some((k, v)) = part.split_once(" in ") {
                Req::In(k.trim().into(), set(v)?)
            } else if let Some(k) = part.strip_prefix('!') {
                Req::NotExists(k.trim().into())
            } else {
                Req::Exists(part.into())
            };
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    /// Whether `labels` satisfy every requirement.
    pub(crate) fn matches_labels(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => labels.get(k) == Some(v),
            Req::NotEq(k, v) => labels.get(k) != Some(v),
            Req::Exists(k) => labels.contains_key(k),
            Req::NotExists(k) => !labels.contains_key(k),
            Req::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Req::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
        })
    }

    /// Whether `obj` matches, reading this selector as a label selector.
    pub(crate) fn matches_object_labels(&self, obj: &Value) -> bool {
        if self.0.is_empty() {
            return true;
        }
        let labels: BTreeMap<String, String> = obj
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        self.matches_labels(&labels)
    }

    /// Whether `obj` matches, reading this selector as a field selector (`metadata.name`,
    /// `metadata.namespace`; other fields are not indexed by the fake and match everything).
    pub(crate) fn matches_object_fields(&self, obj: &Value) -> bool {
        let field = |k: &str| -> Option<String> {
            let ptr = match k {
                "metadata.name" => "/metadata/name",
                "metadata.namespace" => "/metadata/namespace",
                _ => return None,
            };
            Some(
                obj.pointer(ptr)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            )
        };
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => field(k).is_none_or(|f| &f == v),
            Req::NotEq(k, v) => field(k).is_none_or(|f| &f != v),
            _ => true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn equality_and_set_requirements() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        let ok = |s: &str| Selector::parse(Some(s)).unwrap().matches_labels(&l);
        assert!(ok(""));
        assert!(ok("app=web"));
        assert!(ok("app==web,tier"));
        assert!(!ok("app!=web"));
        assert!(ok("!missing"));
        assert!(!ok("missing"));
        assert!(ok("tier in (back, front)"));
        assert!(!ok("tier notin (back,front)"));
        assert!(ok("env notin (prod)"));
        assert!(Selector::parse(Some("a in b")).is_err());
    }
}
