//! Bounds on what a mock registry file (and a control-API request) may cost to read.
//!
//! A file is read by a parser that trusts its input, so three things are checked before or while
//! it is parsed (docs/hardening.md, "The mock file"):
//!
//! - **size**: the file is not read past [`MAX_FILE_BYTES`];
//! - **flow nesting**: libyaml's scanner does work proportional to the number of open `[`/`{`
//!   for every token, so 100,000 nested `[` cost minutes of CPU before serde_yaml's own depth limit
//!   is reached. [`prescan`] measures flow depth on the raw text first and refuses more than
//!   [`MAX_FLOW_DEPTH`]; block nesting is bounded by serde_yaml's recursion limit;
//! - **expanded size**: YAML aliases repeat a node without repeating its text, so a 158 KB file can
//!   describe gigabytes. While a file is deserialized, every list element, map entry and string is
//!   charged against a budget of [`MAX_EXPANDED_BYTES`] (an estimate of the memory the parsed file
//!   takes, aliases counted each time they are expanded); past it, parsing stops with an error.
//!
//! Names and labels have their own caps ([`MAX_LABEL_KEY_BYTES`], ...), checked for every source of
//! services (file, inline config, control API) in `file_format`.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// Largest mock file read: 16 MiB. A 6 MB mesh (tens of thousands of endpoints) fits with room;
/// a bigger mesh belongs in a real registry.
pub(crate) const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Deepest flow nesting (`[`, `{`) accepted. A mock file needs 2 or 3 (`ports: [{...}]`).
pub(crate) const MAX_FLOW_DEPTH: usize = 32;

/// Estimated memory a parsed file may take, aliases counted at every use: 256 MiB. A 16 MiB file
/// without aliases stays well under it (about 4 bytes of memory per byte of text).
pub(crate) const MAX_EXPANDED_BYTES: usize = 256 * 1024 * 1024;

/// Longest label key: a DNS-subdomain prefix (253), `/`, and a 63-byte name, as Kubernetes allows.
pub(crate) const MAX_LABEL_KEY_BYTES: usize = 317;
/// Longest label value. Kubernetes allows 63; other registries (Consul meta) allow more.
pub(crate) const MAX_LABEL_VALUE_BYTES: usize = 512;
/// Most labels on one service or endpoint.
pub(crate) const MAX_LABELS: usize = 64;
/// Longest name that is not a hostname: port names, service accounts, network, locality, address.
pub(crate) const MAX_NAME_BYTES: usize = 253;

/// What [`prescan`] learned about the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Scan {
    /// Deepest flow nesting seen.
    pub(crate) flow_depth: usize,
    /// Whether the text may hold an alias (`*name`), so re-parsing it is not cheap.
    pub(crate) has_alias: bool,
}

/// Measures the flow nesting of `text` without parsing it, and stops at the first point where it
/// exceeds [`MAX_FLOW_DEPTH`] (returning the depth reached and the 1-based line).
///
/// Every `[` and `{` counts as an opening, even in a quoted string or a comment; a `]` or `}`
/// counts as a closing outside quotes and comments, and inside one only against an opening of the
/// same string or comment. The depth never goes below 0. So the measure can only be above
/// libyaml's real depth, never below it: a string or comment cannot hide nesting.
pub(crate) fn prescan(text: &str) -> Result<Scan, (usize, usize)> {
    #[derive(PartialEq)]
    enum In {
        Plain,
        Single,
        Double,
        Comment,
    }
    let mut state = In::Plain;
    let mut depth = 0usize;
    // Openings inside the current quoted string or comment, which a closing there may cancel.
    let mut local = 0usize;
    let mut scan = Scan::default();
    let mut line = 1usize;
    // The byte before, as YAML sees token boundaries; the start counts as a line break.
    let mut prev = b'\n';
    let mut bytes = text.bytes().peekable();
    while let Some(b) = bytes.next() {
        if b == b'\n' {
            line += 1;
        }
        if b == b'[' || b == b'{' {
            depth += 1;
            if depth > MAX_FLOW_DEPTH {
                return Err((depth, line));
            }
            scan.flow_depth = scan.flow_depth.max(depth);
            if state != In::Plain {
                local += 1;
            }
        }
        if (b == b']' || b == b'}') && state != In::Plain && local > 0 {
            local -= 1;
            depth -= 1;
        }
        let boundary = matches!(
            prev,
            b' ' | b'\t' | b'\n' | b'\r' | b'[' | b'{' | b',' | b':'
        );
        match state {
            In::Plain => match b {
                b']' | b'}' => depth = depth.saturating_sub(1),
                b'\'' if boundary => (state, local) = (In::Single, 0),
                b'"' if boundary => (state, local) = (In::Double, 0),
                b'#' if matches!(prev, b' ' | b'\t' | b'\n' | b'\r') => {
                    (state, local) = (In::Comment, 0);
                }
                b'*' if boundary => scan.has_alias = true,
                _ => {}
            },
            In::Single => {
                if b == b'\'' {
                    if bytes.peek() == Some(&b'\'') {
                        bytes.next();
                    } else {
                        state = In::Plain;
                    }
                }
            }
            In::Double => {
                if b == b'"' {
                    state = In::Plain;
                } else if b == b'\\' && bytes.next() == Some(b'\n') {
                    // An escape takes the next byte with it (an escaped line break too).
                    line += 1;
                }
            }
            In::Comment => {
                if b == b'\n' {
                    state = In::Plain;
                }
            }
        }
        prev = b;
    }
    Ok(scan)
}

thread_local! {
    /// What is left of the expansion budget of the parse running on this thread; `None` when no
    /// bounded parse is running (inline config), so nothing is charged.
    static BUDGET: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The message of the error that ends a parse over budget (recognised to skip costly follow-ups).
pub(crate) const OVER_BUDGET: &str = "the file expands past the size limit";

/// Runs `parse` with an expansion budget of `limit` on this thread.
pub(crate) fn with_budget<R>(limit: usize, parse: impl FnOnce() -> R) -> R {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            BUDGET.with(|b| b.set(None));
        }
    }
    BUDGET.with(|b| b.set(Some(limit)));
    let _reset = Reset;
    parse()
}

/// Takes `cost` from the running parse's budget.
fn charge<E: de::Error>(cost: usize) -> Result<(), E> {
    BUDGET.with(|b| match b.get() {
        None => Ok(()),
        Some(left) if left >= cost => {
            b.set(Some(left - cost));
            Ok(())
        }
        Some(_) => {
            b.set(Some(0));
            Err(E::custom(format_args!(
                "{OVER_BUDGET} ({} MiB once aliases are expanded); write the mesh without \
                 repeating large anchors, or split it",
                MAX_EXPANDED_BYTES / (1024 * 1024)
            )))
        }
    })
}

/// The heap bytes a parsed value owns beyond its own size (its fields are charged as they are read).
pub(crate) trait Weigh {
    /// Heap bytes owned directly.
    fn heap(&self) -> usize {
        0
    }
}

impl Weigh for String {
    fn heap(&self) -> usize {
        self.len()
    }
}
impl Weigh for u16 {}
impl Weigh for std::net::IpAddr {}

/// A string field, charged.
pub(crate) fn string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    charge(s.len())?;
    Ok(s)
}

/// A list field, each element charged as it is read.
pub(crate) fn seq<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Weigh,
{
    struct V<T>(PhantomData<T>);
    impl<'de, T: Deserialize<'de> + Weigh> Visitor<'de> for V<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a sequence")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut out = Vec::new();
            while let Some(item) = seq.next_element::<T>()? {
                charge(size_of::<T>() + item.heap())?;
                out.push(item);
            }
            Ok(out)
        }
    }
    d.deserialize_seq(V(PhantomData))
}

/// A map field, each entry charged as it is read. A repeated key is an error, as serde_yaml's own
/// maps would say.
pub(crate) fn map<'de, D, K, V>(d: D) -> Result<BTreeMap<K, V>, D::Error>
where
    D: Deserializer<'de>,
    K: Deserialize<'de> + Weigh + Ord + fmt::Debug,
    V: Deserialize<'de> + Weigh,
{
    struct M<K, V>(PhantomData<(K, V)>);
    impl<'de, K, V> Visitor<'de> for M<K, V>
    where
        K: Deserialize<'de> + Weigh + Ord + fmt::Debug,
        V: Deserialize<'de> + Weigh,
    {
        type Value = BTreeMap<K, V>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<BTreeMap<K, V>, A::Error> {
            let mut out = BTreeMap::new();
            while let Some((k, v)) = map.next_entry::<K, V>()? {
                // A BTreeMap node holds about two words per entry besides key and value.
                charge(size_of::<(K, V)>() + 2 * size_of::<usize>() + k.heap() + v.heap())?;
                if out.contains_key(&k) {
                    return Err(de::Error::custom(format_args!("duplicate key {k:?}")));
                }
                out.insert(k, v);
            }
            Ok(out)
        }
    }
    d.deserialize_map(M(PhantomData))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prescan_counts_flow_depth_and_cannot_be_fooled_by_strings() {
        let ok = prescan("a: [{b: 1}, [c]]\n# [[[[ comment ]\nd: '[x'\n").unwrap();
        // The comment's and the string's unclosed `[` count (conservative).
        assert_eq!(ok.flow_depth, 4, "{ok:?}");
        // Balanced inside a comment or string: no lasting depth.
        let many = "# see [1]\nx: '[a]'\n".repeat(MAX_FLOW_DEPTH * 2);
        assert_eq!(prescan(&many).unwrap().flow_depth, 1);
        assert!(!ok.has_alias);
        let deep = "[".repeat(MAX_FLOW_DEPTH + 1);
        assert_eq!(prescan(&deep), Err((MAX_FLOW_DEPTH + 1, 1)));
        // Closings hidden in strings do not lower the depth.
        let hidden = "x:\n".to_string() + &"[ \"]\", ".repeat(MAX_FLOW_DEPTH + 1);
        assert!(prescan(&hidden).is_err());
        let hidden = "x:\n".to_string() + &"[ ']', ".repeat(MAX_FLOW_DEPTH + 1);
        assert!(prescan(&hidden).is_err());
        let hidden = "x:\n".to_string() + &"[ # ]\n".repeat(MAX_FLOW_DEPTH + 1);
        assert!(prescan(&hidden).is_err());
        // Balanced brackets never add up, however many.
        let wide = "x: ".to_string() + &"[a], ".repeat(10_000);
        assert_eq!(prescan(&wide).unwrap().flow_depth, 1);
        assert!(prescan("a: &x [1]\nb: *x\n").unwrap().has_alias);
        assert!(!prescan("a: 2*3\n").unwrap().has_alias);
    }

    #[test]
    fn the_budget_is_charged_only_inside_a_bounded_parse() {
        assert!(charge::<serde_yaml::Error>(usize::MAX).is_ok());
        with_budget(10, || {
            assert!(charge::<serde_yaml::Error>(6).is_ok());
            let err = charge::<serde_yaml::Error>(6).unwrap_err().to_string();
            assert!(err.contains(OVER_BUDGET), "{err}");
        });
        assert!(charge::<serde_yaml::Error>(usize::MAX).is_ok());
    }
}
