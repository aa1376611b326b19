//! A SotW `DiscoveryRequest` read from its frame without decoding `resource_names`.
//!
//! Envoy repeats every EDS name in every EDS ACK: 2,000 clusters make a ~90 KB request per proxy
//! per change, which a full decode turns into 2,000 `String`s only to find the list unchanged. Here
//! the names stay in the frame's bytes: one pass checks the framing and the names (UTF-8, a whole
//! run of short names at a time) and computes the list's count and hash, the subscription compares
//! that with the previous list's, and only a changed list is walked again to build the new set
//! (`subscription.rs`). The small fields (version, node, type, nonce, error) are decoded as usual
//! from their own bytes, which that pass sets apart, so nothing walks the names twice. An unchanged
//! ACK allocates nothing for its names.

use std::str;

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::google::rpc::Status as RpcStatus;
use prost::Message;

use super::super::request::FromFrame;
use super::super::subscription::{ListHasher, SotwNames};

/// `resource_names` in `DiscoveryRequest`.
const NAMES_FIELD: u64 = 3;
/// Protobuf wire types.
const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LEN: u64 = 2;
const FIXED32: u64 = 5;

/// The fields of a `DiscoveryRequest` other than `resource_names` (3) and `resource_locators` (7,
/// not supported, skipped as unknown).
#[derive(Clone, PartialEq, Message)]
struct Fields {
    #[prost(string, tag = "1")]
    version_info: String,
    #[prost(message, optional, tag = "2")]
    node: Option<Node>,
    #[prost(string, tag = "4")]
    type_url: String,
    #[prost(string, tag = "5")]
    response_nonce: String,
    #[prost(message, optional, tag = "6")]
    error_detail: Option<RpcStatus>,
}

/// A SotW request, its names left in the frame.
#[derive(Debug)]
pub(crate) struct SotwRequest {
    pub version_info: String,
    pub node: Option<Node>,
    pub type_url: String,
    pub response_nonce: String,
    pub error_detail: Option<RpcStatus>,
    pub names: NameList,
}

impl FromFrame for SotwRequest {
    const NAME: &'static str = "DiscoveryRequest";

    fn from_frame(frame: Bytes) -> Result<Self, String> {
        let (names, rest) = NameList::parse(frame)?;
        // Only the other fields' bytes: prost does not walk the names a second time to skip them.
        let fields = Fields::decode(rest).map_err(|e| e.to_string())?;
        Ok(Self {
            version_info: fields.version_info,
            node: fields.node,
            type_url: fields.type_url,
            response_nonce: fields.response_nonce,
            error_detail: fields.error_detail,
            names,
        })
    }
}

/// The `resource_names` of a request, as a view over its bytes.
#[derive(Debug)]
pub(crate) struct NameList {
    message: Bytes,
    count: usize,
    hash: u128,
    /// The longest name's length in bytes, so the name checks (SEC-12) need no second pass.
    longest: usize,
}

impl NameList {
    /// Walks the message once: checks its framing and every name (valid UTF-8), counts and hashes
    /// the list and finds its longest name. Returns the list and the bytes of every other field,
    /// in order (what the small fields are decoded from).
    ///
    /// An entry with a one-byte key and a one-byte length (every name under 128 bytes, from any
    /// protobuf encoder) is read without a varint decode, and a contiguous run of them is checked
    /// and hashed whole, as it lies in the message: with one-byte lengths (ASCII) between the
    /// names, the run is valid UTF-8 exactly when every name is. Other entries are read one by one.
    fn parse(message: Bytes) -> Result<(Self, Bytes), String> {
        let mut hasher = ListHasher::default();
        let (mut count, mut longest, mut pos) = (0, 0, 0);
        // The run of one-byte-framed entries not checked and hashed yet: `run.0..run.1`.
        let mut run = (0, 0);
        let mut others = Others::default();
        let msg = &message[..];
        while pos < msg.len() {
            if let [ListHasher::ENTRY_KEY, len, ..] = msg[pos..]
                && len < 0x80
            {
                let end = pos + 2 + usize::from(len);
                if end > msg.len() {
                    return Err("field runs past the message".to_owned());
                }
                if run.1 != pos {
                    flush_run(msg, run, &mut hasher)?;
                    run.0 = pos;
                }
                run.1 = end;
                count += 1;
                longest = longest.max(usize::from(len));
                pos = end;
                continue;
            }
            let entry = pos;
            match next_field(msg, &mut pos)? {
                Some(name) => {
                    let name = str::from_utf8(name).map_err(|e| format!("resource_names: {e}"))?;
                    count += 1;
                    longest = longest.max(name.len());
                    // In list order: the run before it first.
                    flush_run(msg, run, &mut hasher)?;
                    run = (pos, pos);
                    hasher.add(name);
                }
                None => others.add(entry, pos),
            }
        }
        flush_run(msg, run, &mut hasher)?;
        let rest = others.bytes(&message);
        let list = Self {
            hash: hasher.finish(),
            message,
            count,
            longest,
        };
        Ok((list, rest))
    }

    /// The longest name's length in bytes.
    pub(crate) fn longest(&self) -> usize {
        self.longest
    }
}

impl SotwNames for NameList {
    fn count(&self) -> usize {
        self.count
    }

    fn list_key(&self) -> (usize, u128) {
        (self.count, self.hash)
    }

    fn each(&self) -> impl Iterator<Item = &str> {
        let mut pos = 0;
        // `parse` checked the framing and every name, so neither can fail here.
        std::iter::from_fn(move || next_name(&self.message, &mut pos).ok().flatten())
            .filter_map(|n| str::from_utf8(n).ok())
    }
}

/// The next `resource_names` entry at or after `pos`, skipping every other field: the name's bytes.
fn next_name<'a>(msg: &'a [u8], pos: &mut usize) -> Result<Option<&'a [u8]>, String> {
    while *pos < msg.len() {
        if let Some(name) = next_field(msg, pos)? {
            return Ok(Some(name));
        }
    }
    Ok(None)
}

/// Reads the field at `pos` (which must be before the end) and moves past it: the name's bytes
/// when it is a `resource_names` entry, `None` for any other field.
fn next_field<'a>(msg: &'a [u8], pos: &mut usize) -> Result<Option<&'a [u8]>, String> {
    let key = varint(msg, pos)?;
    let (field, wire) = (key >> 3, key & 7);
    if field == 0 {
        return Err("field number 0".to_owned());
    }
    let skip = match wire {
        VARINT => {
            varint(msg, pos)?;
            0
        }
        FIXED64 => 8,
        FIXED32 => 4,
        LEN => usize::try_from(varint(msg, pos)?).map_err(|_| "length overflow".to_owned())?,
        w => return Err(format!("unsupported wire type {w}")),
    };
    let end = pos
        .checked_add(skip)
        .filter(|end| *end <= msg.len())
        .ok_or_else(|| "field runs past the message".to_owned())?;
    let start = std::mem::replace(pos, end);
    Ok((field == NAMES_FIELD && wire == LEN).then(|| &msg[start..end]))
}

/// Checks a run of one-byte-framed entries (`parse`) as UTF-8 and adds it to the hash.
fn flush_run(msg: &[u8], run: (usize, usize), hasher: &mut ListHasher) -> Result<(), String> {
    let entries = msg.get(run.0..run.1).unwrap_or_default();
    if !entries.is_empty() {
        str::from_utf8(entries).map_err(|e| format!("resource_names: {e}"))?;
        hasher.add_encoded(entries);
    }
    Ok(())
}

/// Where a message's fields other than `resource_names` lie, adjacent ones merged.
#[derive(Default)]
struct Others(Vec<(usize, usize)>);

impl Others {
    fn add(&mut self, start: usize, end: usize) {
        match self.0.last_mut() {
            Some(last) if last.1 == start => last.1 = end,
            _ => self.0.push((start, end)),
        }
    }

    /// Their bytes, in order: a slice of `message` when they lie together (before or after the
    /// names), else a copy (small: the names are left out).
    fn bytes(&self, message: &Bytes) -> Bytes {
        match self.0[..] {
            [] => Bytes::new(),
            [(start, end)] => message.slice(start..end),
            ref ranges => {
                let mut out = Vec::with_capacity(ranges.iter().map(|(s, e)| e - s).sum());
                for (s, e) in ranges {
                    out.extend_from_slice(message.get(*s..*e).unwrap_or_default());
                }
                Bytes::from(out)
            }
        }
    }
}

/// A base-128 varint at `pos` (at most 10 bytes).
fn varint(msg: &[u8], pos: &mut usize) -> Result<u64, String> {
    let mut value = 0u64;
    for shift in (0..70).step_by(7) {
        let byte = *msg.get(*pos).ok_or_else(|| "truncated varint".to_owned())?;
        *pos += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("varint over 10 bytes".to_owned())
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;

    use super::*;
    use crate::xds::subscription::{encode_varint, list_hash};

    fn encode(req: &DiscoveryRequest) -> Bytes {
        Bytes::from(req.encode_to_vec())
    }

    #[test]
    fn the_view_reads_what_a_full_decode_reads() {
        let names: Vec<String> = (0..300).map(|i| format!("outbound|80||s{i}.ns")).collect();
        let req = DiscoveryRequest {
            version_info: "v1".into(),
            node: Some(Node {
                id: "sidecar~1".into(),
                ..Default::default()
            }),
            resource_names: names.clone(),
            type_url: "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment".into(),
            response_nonce: "n-1".into(),
            error_detail: Some(RpcStatus {
                code: 3,
                message: "bad".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let view = SotwRequest::from_frame(encode(&req)).unwrap();
        assert_eq!(view.version_info, "v1");
        assert_eq!(view.node.as_ref().unwrap().id, "sidecar~1");
        assert_eq!(view.type_url, req.type_url);
        assert_eq!(view.response_nonce, "n-1");
        assert_eq!(view.error_detail.as_ref().unwrap().message, "bad");
        assert_eq!(view.names.each().collect::<Vec<_>>(), names);
        // The same key as the decoded list's, so either form recognises the other (SOTW-26 ACKs).
        assert_eq!(view.names.list_key(), names[..].list_key());
        assert_eq!(view.names.hash, list_hash(names.iter().map(String::as_str)));
    }

    #[test]
    fn the_hash_does_not_depend_on_how_the_entries_lie() {
        // Entries split by other fields, a 300-byte name (two-byte length) and entries in
        // non-canonical encoding (an overlong key, an overlong length) hash as the decoded list.
        let long = "x".repeat(300);
        let entry = |name: &str| {
            let mut e = vec![ListHasher::ENTRY_KEY];
            let mut len = [0u8; 10];
            let n = encode_varint(name.len() as u64, &mut len);
            e.extend_from_slice(&len[..n]);
            e.extend_from_slice(name.as_bytes());
            e
        };
        let mut msg = entry("a");
        msg.extend(entry(&long));
        msg.extend([(5 << 3) | 2, 1, b'n']); // response_nonce between the names
        msg.extend(entry("b"));
        msg.extend([0x9a, 0x00, 1, b'c']); // key 3/LEN as a two-byte varint
        msg.extend(entry("d"));
        msg.extend([ListHasher::ENTRY_KEY, 0x81, 0x00, b'e']); // length 1 as a two-byte varint
        msg.extend(entry("f"));
        let view = SotwRequest::from_frame(Bytes::from(msg)).unwrap();
        let names = ["a", &long, "b", "c", "d", "e", "f"];
        assert_eq!(view.names.each().collect::<Vec<_>>(), names);
        assert_eq!(view.response_nonce, "n");
        assert_eq!(view.names.longest(), 300);
        assert_eq!(view.names.hash, list_hash(names));
    }

    #[test]
    fn no_names_and_bad_input() {
        let empty = SotwRequest::from_frame(encode(&DiscoveryRequest::default())).unwrap();
        assert_eq!(empty.names.count(), 0);
        // A name that is not UTF-8 is malformed (TRANS-10), as a full decode says.
        let mut bad = vec![(3 << 3) | 2, 2, 0xff, 0xfe];
        assert!(SotwRequest::from_frame(Bytes::from(bad.clone())).is_err());
        // A length past the end is malformed.
        bad[1] = 9;
        assert!(SotwRequest::from_frame(Bytes::from(bad)).is_err());
    }

    #[test]
    fn a_bad_name_inside_a_run_of_good_ones_is_malformed() {
        // TRANS-10: checked a run at a time, still every name: the first, a middle and the last
        // entry of a run; a split multi-byte character; a name after a 200-byte one.
        let ok = |n: &[u8]| [&[ListHasher::ENTRY_KEY, n.len() as u8][..], n].concat();
        let good = [ok(b"a"), ok("é".as_bytes()), ok(b"c")].concat();
        assert_eq!(
            SotwRequest::from_frame(Bytes::from(good.clone()))
                .unwrap()
                .names
                .each()
                .collect::<Vec<_>>(),
            ["a", "é", "c"]
        );
        let bad = ok(&[0xff]);
        for at in [0, 1, 3] {
            let mut runs = vec![ok(b"a"), ok(b"b"), ok(b"c")];
            runs.insert(at, bad.clone());
            let err = SotwRequest::from_frame(Bytes::from(runs.concat())).unwrap_err();
            assert!(err.contains("resource_names"), "{err}");
        }
        let split = [ok(&"é".as_bytes()[..1]), ok(&"é".as_bytes()[1..])].concat();
        assert!(SotwRequest::from_frame(Bytes::from(split)).is_err());
        let long = DiscoveryRequest {
            resource_names: vec!["x".repeat(200), "y".into()],
            ..Default::default()
        };
        let mut msg = long.encode_to_vec();
        let last = msg.len() - 1;
        msg[last] = 0xc3;
        assert!(SotwRequest::from_frame(Bytes::from(msg)).is_err());
    }
}
