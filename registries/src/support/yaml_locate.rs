//! Finds the line of a field in YAML text, for errors found after parsing.
//!
//! serde_yaml keeps no spans in its values, but it does put the location of the node being read
//! on every error. So we walk the document along the path with a seed that fails on purpose when
//! it reaches the target node, and read the location off that error.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// One step of a path into a YAML document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seg {
    /// A mapping key.
    Key(String),
    /// A sequence position.
    Index(usize),
}

/// Writes `path` the way error messages show it: `spec.ports[0].number`.
pub(crate) fn write_path(f: &mut fmt::Formatter<'_>, path: &[Seg]) -> fmt::Result {
    for (i, seg) in path.iter().enumerate() {
        match seg {
            Seg::Index(n) => write!(f, "[{n}]")?,
            Seg::Key(k) if i == 0 => f.write_str(k)?,
            Seg::Key(k) => write!(f, ".{k}")?,
        }
    }
    Ok(())
}

/// What the finder's deliberate error says, to tell it from real errors.
const FOUND: &str = "tributary-locate-found";

/// The 1-based line of the node at `path` in `text`, if the path exists.
pub(crate) fn line_of(text: &str, path: &[Seg]) -> Option<usize> {
    let de = serde_yaml::Deserializer::from_str(text);
    match (Finder { path }).deserialize(de) {
        Err(e) if e.to_string().contains(FOUND) => e.location().map(|l| l.line()),
        _ => None,
    }
}

struct Finder<'p> {
    path: &'p [Seg],
}

impl<'de> DeserializeSeed<'de> for Finder<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        match self.path.split_first() {
            None => d.deserialize_any(Found),
            Some((Seg::Index(index), rest)) => d.deserialize_any(InSeq {
                index: *index,
                rest,
            }),
            Some((Seg::Key(key), rest)) => d.deserialize_any(InMap { key, rest }),
        }
    }
}

/// Fails on whatever node it is given: every default `visit_*` is an "invalid type, expected
/// FOUND" error, located at that node.
struct Found;

impl Visitor<'_> for Found {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(FOUND)
    }
}

struct InSeq<'p> {
    index: usize,
    rest: &'p [Seg],
}

impl<'de> Visitor<'de> for InSeq<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        for _ in 0..self.index {
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(());
            }
        }
        seq.next_element_seed(Finder { path: self.rest })?;
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }
}

struct InMap<'p> {
    key: &'p str,
    rest: &'p [Seg],
}

impl<'de> Visitor<'de> for InMap<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a mapping")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<serde_yaml::Value>()? {
            let matches = match &key {
                serde_yaml::Value::String(s) => s == self.key,
                serde_yaml::Value::Number(n) => n.to_string() == self.key,
                _ => false,
            };
            if matches {
                map.next_value_seed(Finder { path: self.rest })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "services:\n  - hostname: a\n    ports:\n      - {name: http, port: 0}\n  - hostname: b\n    endpoints:\n      - address: 1.2.3.4\n        weight: 0\n";

    fn k(s: &str) -> Seg {
        Seg::Key(s.to_string())
    }

    #[test]
    fn finds_lines_of_nested_fields() {
        let svc = |i| vec![k("services"), Seg::Index(i)];
        let mut p = svc(0);
        p.push(k("hostname"));
        assert_eq!(line_of(TEXT, &p), Some(2));
        let mut p = svc(0);
        p.extend([k("ports"), Seg::Index(0), k("port")]);
        assert_eq!(line_of(TEXT, &p), Some(4));
        let mut p = svc(1);
        p.extend([k("endpoints"), Seg::Index(0), k("weight")]);
        assert_eq!(line_of(TEXT, &p), Some(8));
        let mut p = svc(1);
        p.push(k("hostname"));
        assert_eq!(line_of(TEXT, &p), Some(5));
    }

    #[test]
    fn missing_paths_have_no_line() {
        assert_eq!(line_of(TEXT, &[k("services"), Seg::Index(7)]), None);
        assert_eq!(line_of(TEXT, &[k("nope")]), None);
        assert_eq!(line_of("{{{", &[k("services")]), None);
    }
}
