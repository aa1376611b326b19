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

use std::cell::OnceCell;
use std::str;

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::google::rpc::Status as RpcStatus;
use prost::Message;

use super::super::request::{FromFrame, MessageBytes};
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

    fn from_frame(message: MessageBytes) -> Result<Self, String> {
        let (names, rest) = NameList::parse(message)?;
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
    message: MessageBytes,
    /// The message in one piece, put together the first time the names are walked when it spans
    /// frames (a changed list; an unchanged ACK never walks them).
    contiguous: OnceCell<Bytes>,
    count: usize,
    hash: u128,
    /// The longest name's length in bytes, so the name checks (SEC-12) need no second pass.
    longest: usize,
}

impl NameList {
    /// Walks the message once, part by part as it arrived: checks its framing and every name
    /// (valid UTF-8), counts and hashes the list and finds its longest name. Returns the list and
    /// the bytes of every other field, in order (what the small fields are decoded from).
    ///
    /// Fields are read in place within each part; only a field that straddles two parts (at most
    /// one per frame boundary) is copied, on its own. The hash is the same however the list is cut
    /// (`ListHasher` hashes the concatenation).
    fn parse(message: MessageBytes) -> Result<(Self, Bytes), String> {
        let mut scan = Scan::default();
        let parts = message.parts();
        let (mut i, mut pos) = (0, 0);
        while let Some(part) = parts.get(i) {
            let stop = scan.part(part, pos)?;
            if stop == part.len() {
                (i, pos) = (i + 1, 0);
                continue;
            }
            // The field at `stop` goes on in the next part(s): read it from a copy of its bytes.
            let (field, next) = straddling_field(parts, (i, stop))?;
            scan.part(&field, 0)?;
            (i, pos) = next;
        }
        let Scan {
            hasher,
            count,
            longest,
            others,
        } = scan;
        let list = Self {
            hash: hasher.finish(),
            message,
            contiguous: OnceCell::new(),
            count,
            longest,
        };
        Ok((list, Bytes::from(others)))
    }

    /// The longest name's length in bytes.
    pub(crate) fn longest(&self) -> usize {
        self.longest
    }

    fn bytes(&self) -> &[u8] {
        match &self.message {
            MessageBytes::One(bytes) => bytes,
            MessageBytes::Parts(_) => self.contiguous.get_or_init(|| self.message.contiguous()),
        }
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
        let msg = self.bytes();
        let mut pos = 0;
        // `parse` checked the framing and every name, so neither can fail here.
        std::iter::from_fn(move || {
            while let Ok(Some(field)) = field_at(msg, pos) {
                pos = field.end;
                if let Some(name) = field.name(msg) {
                    return Some(name);
                }
            }
            None
        })
        .filter_map(|n| str::from_utf8(n).ok())
    }
}

/// What one pass over a message has found so far.
#[derive(Default)]
struct Scan {
    hasher: ListHasher,
    count: usize,
    longest: usize,
    /// The bytes of every field but the names, in order (a few small fields).
    others: Vec<u8>,
}

impl Scan {
    /// Reads the fields of `part` from `pos` on, up to one that goes on past the part's end;
    /// returns where that one starts (the part's length when none does).
    ///
    /// An entry with a one-byte key and a one-byte length (every name under 128 bytes, from any
    /// protobuf encoder) is read without a varint decode, and a contiguous run of them is checked
    /// and hashed whole, as it lies in the message: with one-byte lengths (ASCII) between the
    /// names, the run is valid UTF-8 exactly when every name is. Other fields are read one by one.
    fn part(&mut self, part: &[u8], mut pos: usize) -> Result<usize, String> {
        // The run of one-byte-framed entries not checked and hashed yet: `run.0..run.1`.
        let mut run = (pos, pos);
        while pos < part.len() {
            if let [ListHasher::ENTRY_KEY, len, ..] = part[pos..]
                && len < 0x80
            {
                let end = pos + 2 + usize::from(len);
                if end > part.len() {
                    break;
                }
                if run.1 != pos {
                    flush_run(part, run, &mut self.hasher)?;
                    run.0 = pos;
                }
                run.1 = end;
                self.count += 1;
                self.longest = self.longest.max(usize::from(len));
                pos = end;
                continue;
            }
            let Some(field) = field_at(part, pos)?.filter(|f| f.end <= part.len()) else {
                break;
            };
            match field.name(part) {
                Some(name) => {
                    let name = str::from_utf8(name).map_err(|e| format!("resource_names: {e}"))?;
                    self.count += 1;
                    self.longest = self.longest.max(name.len());
                    // In list order: the run before it first.
                    flush_run(part, run, &mut self.hasher)?;
                    run = (field.end, field.end);
                    self.hasher.add(name);
                }
                None => self.others.extend_from_slice(&part[pos..field.end]),
            }
            pos = field.end;
        }
        flush_run(part, run, &mut self.hasher)?;
        Ok(pos)
    }
}

/// The bytes of the field that starts at `at` (part, offset) and goes on past that part, copied
/// together, and the position that follows it.
fn straddling_field(
    parts: &[Bytes],
    at: (usize, usize),
) -> Result<(Vec<u8>, (usize, usize)), String> {
    // Its key and length first (two varints: at most 20 bytes), then exactly its bytes.
    let mut head = Vec::with_capacity(MAX_FIELD_HEAD);
    copy_out(parts, at, MAX_FIELD_HEAD, &mut head);
    let field = field_at(&head, 0)?.ok_or_else(|| "truncated field".to_owned())?;
    let mut bytes = Vec::with_capacity(field.end);
    let next = copy_out(parts, at, field.end, &mut bytes);
    if bytes.len() < field.end {
        return Err("field runs past the message".to_owned());
    }
    Ok((bytes, next))
}

/// Copies up to `n` bytes from `at` (part, offset) on into `out`; returns the position after them.
fn copy_out(
    parts: &[Bytes],
    (mut i, mut pos): (usize, usize),
    n: usize,
    out: &mut Vec<u8>,
) -> (usize, usize) {
    let want = out.len() + n;
    while let Some(part) = parts.get(i) {
        let take = (want - out.len()).min(part.len() - pos);
        out.extend_from_slice(&part[pos..pos + take]);
        pos += take;
        if pos < part.len() {
            break;
        }
        (i, pos) = (i + 1, 0);
        if out.len() == want {
            break;
        }
    }
    (i, pos)
}

/// Longest key and length of a field: two 10-byte varints.
const MAX_FIELD_HEAD: usize = 20;

/// Where one field lies.
struct Field {
    /// Where its payload starts.
    start: usize,
    /// Where it ends (may be past the bytes read so far).
    end: usize,
    /// It is a `resource_names` entry.
    is_name: bool,
}

impl Field {
    fn name<'a>(&self, msg: &'a [u8]) -> Option<&'a [u8]> {
        self.is_name.then(|| &msg[self.start..self.end])
    }
}

/// The field at `pos` (before the end of `msg`), from its key and length alone: `None` when
/// those go on past `msg`. Its `end` may lie past `msg`.
fn field_at(msg: &[u8], pos: usize) -> Result<Option<Field>, String> {
    let mut p = pos;
    let Some(key) = varint(msg, &mut p)? else {
        return Ok(None);
    };
    let (field, wire) = (key >> 3, key & 7);
    if field == 0 {
        return Err("field number 0".to_owned());
    }
    let len = match wire {
        VARINT => match varint(msg, &mut p)? {
            Some(_) => 0,
            None => return Ok(None),
        },
        FIXED64 => 8,
        FIXED32 => 4,
        LEN => match varint(msg, &mut p)? {
            Some(len) => usize::try_from(len).map_err(|_| "length overflow".to_owned())?,
            None => return Ok(None),
        },
        w => return Err(format!("unsupported wire type {w}")),
    };
    let end = p
        .checked_add(len)
        .ok_or_else(|| "field runs past the message".to_owned())?;
    Ok(Some(Field {
        start: p,
        end,
        is_name: field == NAMES_FIELD && wire == LEN,
    }))
}

/// Checks a run of one-byte-framed entries (`Scan::part`) as UTF-8 and adds it to the hash.
fn flush_run(msg: &[u8], run: (usize, usize), hasher: &mut ListHasher) -> Result<(), String> {
    let entries = msg.get(run.0..run.1).unwrap_or_default();
    if !entries.is_empty() {
        str::from_utf8(entries).map_err(|e| format!("resource_names: {e}"))?;
        hasher.add_encoded(entries);
    }
    Ok(())
}

/// A base-128 varint at `pos` (at most 10 bytes); `None` when `msg` ends within it.
fn varint(msg: &[u8], pos: &mut usize) -> Result<Option<u64>, String> {
    let mut value = 0u64;
    for shift in (0..70).step_by(7) {
        let Some(byte) = msg.get(*pos) else {
            return Ok(None);
        };
        *pos += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(Some(value));
        }
    }
    Err("varint over 10 bytes".to_owned())
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;

    use super::*;
    use crate::xds::subscription::{encode_varint, list_hash};

    fn encode(req: &DiscoveryRequest) -> MessageBytes {
        Bytes::from(req.encode_to_vec()).into()
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
        let view = SotwRequest::from_frame(Bytes::from(msg).into()).unwrap();
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
        assert!(SotwRequest::from_frame(Bytes::from(bad.clone()).into()).is_err());
        // A length past the end is malformed.
        bad[1] = 9;
        assert!(SotwRequest::from_frame(Bytes::from(bad).into()).is_err());
    }

    #[test]
    fn a_bad_name_inside_a_run_of_good_ones_is_malformed() {
        // TRANS-10: checked a run at a time, still every name: the first, a middle and the last
        // entry of a run; a split multi-byte character; a name after a 200-byte one.
        let ok = |n: &[u8]| [&[ListHasher::ENTRY_KEY, n.len() as u8][..], n].concat();
        let good = [ok(b"a"), ok("é".as_bytes()), ok(b"c")].concat();
        assert_eq!(
            SotwRequest::from_frame(Bytes::from(good.clone()).into())
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
            let err = SotwRequest::from_frame(Bytes::from(runs.concat()).into()).unwrap_err();
            assert!(err.contains("resource_names"), "{err}");
        }
        let split = [ok(&"é".as_bytes()[..1]), ok(&"é".as_bytes()[1..])].concat();
        assert!(SotwRequest::from_frame(Bytes::from(split).into()).is_err());
        let long = DiscoveryRequest {
            resource_names: vec!["x".repeat(200), "y".into()],
            ..Default::default()
        };
        let mut msg = long.encode_to_vec();
        let last = msg.len() - 1;
        msg[last] = 0xc3;
        assert!(SotwRequest::from_frame(Bytes::from(msg).into()).is_err());
    }

    /// `msg` cut into parts at `cuts`.
    fn cut(msg: &[u8], cuts: &[usize]) -> MessageBytes {
        let mut parts = Vec::new();
        let mut from = 0;
        for &at in cuts.iter().chain([&msg.len()]) {
            parts.push(Bytes::copy_from_slice(&msg[from..at]));
            from = at;
        }
        MessageBytes::Parts(parts)
    }

    #[test]
    fn a_request_across_frames_reads_as_in_one_piece() {
        // Short names (read in runs), a 300-byte one (a two-byte length) and other fields before,
        // between and after them, cut at every byte and at every pair of bytes: the same names,
        // hash, longest name and small fields as the request in one piece.
        let mut names: Vec<String> = (0..6).map(|i| format!("c{i}")).collect();
        names.insert(3, "l".repeat(300));
        let req = DiscoveryRequest {
            version_info: "v7".into(),
            resource_names: names.clone(),
            type_url: "t".into(),
            response_nonce: "n9".into(),
            ..Default::default()
        };
        let msg = req.encode_to_vec();
        let whole = SotwRequest::from_frame(encode(&req)).unwrap();
        let check = |view: SotwRequest, at: &[usize]| {
            assert_eq!(
                view.names.each().collect::<Vec<_>>(),
                names,
                "cut at {at:?}"
            );
            assert_eq!(
                view.names.list_key(),
                whole.names.list_key(),
                "cut at {at:?}"
            );
            assert_eq!(view.names.longest(), 300);
            assert_eq!(
                (&*view.version_info, &*view.type_url, &*view.response_nonce),
                ("v7", "t", "n9")
            );
        };
        for a in 0..=msg.len() {
            check(SotwRequest::from_frame(cut(&msg, &[a])).unwrap(), &[a]);
        }
        for a in (0..msg.len()).step_by(3) {
            for b in a..=msg.len() {
                check(
                    SotwRequest::from_frame(cut(&msg, &[a, b])).unwrap(),
                    &[a, b],
                );
            }
        }
    }

    #[test]
    fn a_bad_request_across_frames_is_malformed() {
        // Truncated within a name, within a length, and a name that is not UTF-8 across a cut.
        let ok = DiscoveryRequest {
            resource_names: vec!["abc".into(), "def".into()],
            ..Default::default()
        }
        .encode_to_vec();
        // Every end but the entries' own (after "abc", byte 5) cuts a field short.
        for end in (1..ok.len()).filter(|e| *e != 5) {
            for at in 0..=end {
                assert!(
                    SotwRequest::from_frame(cut(&ok[..end], &[at])).is_err(),
                    "truncated at {end}, cut at {at}"
                );
            }
        }
        let mut bad = ok.clone();
        bad[3] = 0xff;
        for at in 0..=bad.len() {
            assert!(
                SotwRequest::from_frame(cut(&bad, &[at])).is_err(),
                "cut at {at}"
            );
        }
    }
}
