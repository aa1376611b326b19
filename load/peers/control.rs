//! The control protocol between `tributary-load` and a peer server (`load/peers/<name>/`).
//!
//! Shared as source by the load tool and every peer crate (each compiles it with its own `prost`),
//! so both sides agree on the messages without a common dependency tree. Over one TCP connection
//! the load tool sends frames (a 4-byte big-endian length, then an encoded [`Update`]); the peer
//! applies each update through its library's own snapshot API and answers with a frame that is
//! empty on success or holds the error text.

use std::io::{self, Read, Write};

/// The largest frame either side accepts: a `large` mesh's full config is ~25 MB.
pub(super) const MAX_FRAME: usize = 256 * 1024 * 1024;

/// A new state of the mesh: the resource types listed replace the peer's current set of that type
/// (types not listed keep theirs); `nodes`, when not empty, is the set of node ids to serve.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct Update {
    #[prost(string, repeated, tag = "1")]
    pub nodes: Vec<String>,
    #[prost(message, repeated, tag = "2")]
    pub types: Vec<TypeSet>,
}

/// Every resource of one type, with the version to serve them under.
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct TypeSet {
    #[prost(string, tag = "1")]
    pub type_url: String,
    #[prost(string, tag = "2")]
    pub version: String,
    #[prost(message, repeated, tag = "3")]
    pub resources: Vec<NamedResource>,
}

/// One resource: its name and its encoded message (what an `Any` of `type_url` carries).
#[derive(Clone, PartialEq, prost::Message)]
pub(super) struct NamedResource {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

/// Writes one frame.
pub(super) fn write_frame(w: &mut impl Write, payload: &[u8]) -> io::Result<()> {
    let len = u32::try_from(payload.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame too large"))?;
    w.write_all(&len.to_be_bytes())?;
    w.write_all(payload)?;
    w.flush()
}

/// Reads one frame; `None` when the peer closed the connection between frames.
pub(super) fn read_frame(r: &mut impl Read) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes is over {MAX_FRAME}"),
        ));
    }
    let mut buf = vec![0; len];
    r.read_exact(&mut buf)?;
    Ok(Some(buf))
}
