//! Objects as the registry holds them, whatever their source: the newest version's problems, and
//! the last version that was valid.
//!
//! REG-11: an object that becomes invalid keeps being served as its last valid version, and the
//! problem is reported; an object that was never valid is not served. Deleting the object (or its
//! file) ends both.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use super::parse::{Parsed, Problem};
use super::types::ObjectKey;
use super::validate::Valid;
use crate::registry::Rejection;

/// Where an object came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Place {
    /// A manifest file; `line` is where the object's document starts.
    File { path: PathBuf, line: Option<usize> },
    /// A cluster's API: `networking.istio.io/v1 in cluster Kubernetes`.
    Cluster { api: String },
    /// An xDS config server's collection: `xds://host:port networking.istio.io/v1alpha3/...`.
    Xds {
        address: String,
        collection: &'static str,
    },
}

impl Place {
    /// This place, at `line` when known (a file), else at the object's own line.
    pub(crate) fn at(&self, line: Option<usize>) -> String {
        match self {
            Place::File { path, line: start } => match line.or(*start) {
                Some(l) => format!("{}:{l}", path.display()),
                None => path.display().to_string(),
            },
            Place::Cluster { api } => api.clone(),
            Place::Xds {
                address,
                collection,
            } => format!("{address} {collection}"),
        }
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.at(None))
    }
}

/// One object of one source.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    pub(crate) key: ObjectKey,
    pub(crate) place: Place,
    /// The newest valid version: the current one, or the last one before it became invalid.
    pub(crate) valid: Option<Arc<Valid>>,
    /// Why the current version is rejected; empty when it is the valid one.
    pub(crate) problems: Vec<Problem>,
}

impl Entry {
    /// The entry for a freshly read object; if it is invalid, `previous` (the same object as this
    /// source last held it) lends its valid version.
    pub(crate) fn new(parsed: Parsed, place: Place, previous: Option<&Entry>) -> Entry {
        match parsed.result {
            Ok(valid) => Entry {
                key: parsed.key,
                valid: Some(Arc::new(with_source(valid, &place, parsed.line))),
                place,
                problems: Vec::new(),
            },
            Err(problems) => Entry {
                key: parsed.key,
                place,
                valid: previous.and_then(|p| p.valid.clone()),
                problems,
            },
        }
    }

    /// One rejection per problem of the current version.
    pub(crate) fn rejections(&self) -> impl Iterator<Item = Rejection> + '_ {
        self.problems.iter().map(|p| Rejection {
            object: self.key.to_string(),
            source: self.place.at(p.line),
            field: p.field.clone(),
            message: p.message.clone(),
            serving_previous: self.valid.is_some(),
        })
    }
}

/// A traffic rule says where it was read (`/debug` shows it); other kinds are unchanged.
fn with_source(valid: Valid, place: &Place, line: Option<usize>) -> Valid {
    let source = place.at(line);
    match valid {
        Valid::DestinationRule(mut r) => {
            Arc::make_mut(&mut r).meta.source = source;
            Valid::DestinationRule(r)
        }
        Valid::VirtualService(mut r) => {
            Arc::make_mut(&mut r).meta.source = source;
            Valid::VirtualService(r)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serviceentry::parse::{Document, parse_document};

    fn parsed(yaml: &str) -> Parsed {
        match parse_document(yaml, Some(1), "default", true) {
            Ok(Document::Object(p)) => *p,
            other => panic!("not an object: {other:?}"),
        }
    }

    const GOOD: &str = "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: a}\nspec:\n  hosts: [a.example.com]\n  ports: [{number: 80, name: http, protocol: HTTP}]\n  resolution: DNS\n";

    #[test]
    fn an_invalid_update_keeps_the_last_valid_version() {
        // REG-11: the object that becomes invalid keeps its last valid version, reported.
        let place = Place::File {
            path: "se.yaml".into(),
            line: Some(1),
        };
        let good = Entry::new(parsed(GOOD), place.clone(), None);
        assert!(good.valid.is_some() && good.problems.is_empty());
        let bad = Entry::new(
            parsed(&GOOD.replace("number: 80", "number: 0")),
            place.clone(),
            Some(&good),
        );
        assert_eq!(bad.valid, good.valid, "last valid version kept");
        let r: Vec<Rejection> = bad.rejections().collect();
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(r[0].object, "ServiceEntry default/a");
        assert_eq!(r[0].source, "se.yaml:6");
        assert_eq!(r[0].field, "spec.ports[0].number");
        assert!(r[0].serving_previous);
        let never = Entry::new(
            parsed(&GOOD.replace("number: 80", "number: 0")),
            place,
            None,
        );
        assert!(never.valid.is_none());
        assert!(!never.rejections().next().unwrap().serving_previous);
    }
}
