//! Reads a stream's gRPC-framed request messages from its HTTP/2 body.
//!
//! tonic's `Streaming` reserves room for the largest message it ever received and keeps that
//! buffer for the stream's life: one SotW EDS ACK naming 2,000 clusters (~90 KB) pins ~90 KB per
//! proxy long after it was decoded. This reader copies as little as it can: a message is handed
//! out as the DATA frames' own bytes ([`MessageBytes`]), one part when it lies within one frame
//! (every ACK of a delta client), several when it spans frames (that ACK arrives in six 16 KiB
//! frames); only a small frame that follows others, and what a message carries after its eighth
//! frame, are copied together ([`SMALL_FRAME`], [`MAX_PARTS`]). Only bytes not yet handed out are
//! kept, so an idle stream holds no request bytes at all. A caller that needs the message in one
//! piece copies it then ([`MessageBytes::contiguous`]); a SotW request reads its names across the
//! parts as they lie (`sotw/request.rs`), which spares each such ACK a 90 KB buffer put together
//! (and faulted in) only to be read once.
//!
//! Errors mirror tonic's for the same input, so clients see the same statuses: a message over the
//! limit is `OUT_OF_RANGE` (the stream turns it into `RESOURCE_EXHAUSTED`, TRANS-10), a compressed
//! or badly flagged message is `INTERNAL`, a body cancelled by the client ends the stream quietly.

use bytes::{Buf, Bytes, BytesMut};
use http_body_util::BodyExt;
use tonic::{Code, Status};

/// gRPC message prefix: one compression flag byte plus a big-endian u32 length.
const PREFIX_LEN: usize = 5;

/// A DATA frame under this size that follows other received bytes is copied onto them rather than
/// kept as a part of its own: a client sending a message in tiny frames must not make the server
/// hold a 32-byte handle per byte it sent. A message's first frame is never copied.
const SMALL_FRAME: usize = 1024;

/// Most DATA frames kept as parts; the rest of a longer message is copied together after them.
/// Each part pins the block of h2's read buffer it lies in, so a 1 MB SotW ACK (`large` mesh, 64
/// frames) kept as parts held about twice its size while it arrived, and with a thousand of them
/// arriving at once RSS per proxy more than doubled. Eight frames (128 KiB) cover a `medium`
/// mesh's 90 KB ACK.
const MAX_PARTS: usize = 8;

/// One request message's bytes (without the gRPC prefix), as they arrived: slices of the DATA
/// frames that carried it, in order, none empty unless the message is.
#[derive(Debug, Clone)]
pub(crate) enum MessageBytes {
    /// Within one DATA frame.
    One(Bytes),
    /// Across DATA frames: at least two parts.
    Parts(Vec<Bytes>),
}

impl MessageBytes {
    /// The message's bytes, part by part.
    pub(crate) fn parts(&self) -> &[Bytes] {
        match self {
            MessageBytes::One(bytes) => std::slice::from_ref(bytes),
            MessageBytes::Parts(parts) => parts,
        }
    }

    /// The message in one piece: its only part (shared), or the parts copied together.
    pub(crate) fn contiguous(&self) -> Bytes {
        match self {
            MessageBytes::One(bytes) => bytes.clone(),
            MessageBytes::Parts(parts) => {
                let mut out = BytesMut::with_capacity(parts.iter().map(Bytes::len).sum());
                for part in parts {
                    out.extend_from_slice(part);
                }
                out.freeze()
            }
        }
    }
}

impl From<Bytes> for MessageBytes {
    fn from(bytes: Bytes) -> Self {
        MessageBytes::One(bytes)
    }
}

/// The request messages of one stream.
pub(crate) struct Frames {
    body: tonic::body::Body,
    /// Received bytes not handed out yet, in order, the first starting on a message boundary:
    /// at most one message being received and the start of the next. Empty, without an
    /// allocation, between messages.
    parts: Vec<Bytes>,
    /// Small DATA frames that followed `parts`, copied together (see [`SMALL_FRAME`]); they
    /// come after every part.
    small: BytesMut,
    /// How many bytes `parts` and `small` hold.
    queued: usize,
    /// Largest message accepted.
    limit: usize,
    /// The body ended.
    ended: bool,
}

impl Frames {
    /// Reads `body`, refusing messages over `limit` bytes.
    pub(crate) fn new(body: tonic::body::Body, limit: usize) -> Self {
        Self {
            body,
            parts: Vec::new(),
            small: BytesMut::new(),
            queued: 0,
            limit,
            ended: false,
        }
    }

    /// The next message; `None` when the client closed its side.
    pub(crate) async fn next(&mut self) -> Result<Option<MessageBytes>, Status> {
        loop {
            if let Some(message) = self.split_message()? {
                return Ok(Some(message));
            }
            if self.ended {
                return if self.queued == 0 {
                    Ok(None)
                } else {
                    Err(Status::internal("Unexpected EOF decoding stream."))
                };
            }
            match self.body.frame().await {
                None => self.ended = true,
                // The client reset its side: the stream is over, as tonic reads it.
                Some(Err(status)) if status.code() == Code::Cancelled => return Ok(None),
                Some(Err(status)) => return Err(status),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.receive(data);
                    }
                }
            }
        }
    }

    /// Keeps a DATA frame's bytes: as a part of its own, unless it follows others and is small or
    /// the parts are already [`MAX_PARTS`].
    fn receive(&mut self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        let follows = self.queued > 0;
        self.queued += data.len();
        if follows && (data.len() < SMALL_FRAME || self.parts.len() >= MAX_PARTS) {
            if self.small.is_empty()
                && self.parts.len() >= MAX_PARTS
                && let Some(Ok(whole)) = self.prefix().map(|p| self.message_len(&p))
            {
                // The rest of a long message: one allocation for it (within the limit), not a
                // doubling series.
                self.small
                    .reserve(whole.saturating_sub(self.queued - data.len()));
            }
            self.small.extend_from_slice(&data);
            return;
        }
        self.seal_small();
        self.parts.push(data);
    }

    /// Makes the small frames copied together the last part.
    fn seal_small(&mut self) {
        if !self.small.is_empty() {
            self.parts.push(std::mem::take(&mut self.small).freeze());
        }
    }

    /// Splits the next whole message off the received bytes, if it is all there.
    fn split_message(&mut self) -> Result<Option<MessageBytes>, Status> {
        let Some(prefix) = self.prefix() else {
            return Ok(None);
        };
        let whole = self.message_len(&prefix)?;
        if self.queued < whole {
            return Ok(None);
        }
        self.seal_small();
        self.queued -= whole;
        let message = if self.parts[0].len() >= whole {
            // Within one frame (the usual case): a slice of it.
            let mut one = self.parts[0].split_to(whole);
            one.advance(PREFIX_LEN);
            if self.parts[0].is_empty() {
                self.parts.remove(0);
            }
            MessageBytes::One(one)
        } else {
            let mut parts = self.split_parts(whole);
            match parts.len() {
                0 => MessageBytes::One(Bytes::new()),
                1 => MessageBytes::One(parts.swap_remove(0)),
                _ => MessageBytes::Parts(parts),
            }
        };
        if self.parts.is_empty() {
            // Nothing follows: hold no allocation between messages.
            self.parts = Vec::new();
        }
        Ok(Some(message))
    }

    /// Splits off the first `whole` bytes, which span parts, without the prefix.
    fn split_parts(&mut self, whole: usize) -> Vec<Bytes> {
        let mut spans = 0;
        let mut taken = 0;
        while taken < whole {
            taken += self.parts[spans].len();
            spans += 1;
        }
        let mut message: Vec<Bytes> = self.parts.drain(..spans).collect();
        if taken > whole
            && let Some(last) = message.last_mut()
        {
            // The last part goes on with the next message: put its tail back.
            let next = last.split_off(last.len() - (taken - whole));
            self.parts.insert(0, next);
        }
        // The prefix may itself span parts.
        let mut skip = PREFIX_LEN;
        while skip > 0 {
            let n = skip.min(message[0].len());
            message[0].advance(n);
            skip -= n;
            if message[0].is_empty() {
                message.remove(0);
            }
        }
        message
    }

    /// The next message's prefix, once it is all there.
    fn prefix(&self) -> Option<[u8; PREFIX_LEN]> {
        let mut prefix = [0; PREFIX_LEN];
        let mut have = 0;
        for part in self.parts.iter().map(|p| &p[..]).chain([&self.small[..]]) {
            let n = (PREFIX_LEN - have).min(part.len());
            prefix[have..have + n].copy_from_slice(&part[..n]);
            have += n;
            if have == PREFIX_LEN {
                return Some(prefix);
            }
        }
        None
    }

    /// The framed length (prefix included) of the message `prefix` starts; checks the prefix.
    fn message_len(&self, prefix: &[u8; PREFIX_LEN]) -> Result<usize, Status> {
        match prefix[0] {
            0 => {}
            1 => {
                return Err(Status::internal(
                    "protocol error: received message with compressed-flag but no grpc-encoding was specified",
                ));
            }
            f => {
                return Err(Status::internal(format!(
                    "protocol error: received message with invalid compression flag: {f} (valid flags are 0 and 1), while sending request"
                )));
            }
        }
        let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
        if len > self.limit {
            return Err(Status::out_of_range(format!(
                "Error, decoded message length too large: found {len} bytes, the limit is: {} bytes",
                self.limit
            )));
        }
        Ok(PREFIX_LEN + len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(messages: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for m in messages {
            out.push(0);
            out.extend_from_slice(&(m.len() as u32).to_be_bytes());
            out.extend_from_slice(m);
        }
        out
    }

    fn frames_of(chunks: Vec<Vec<u8>>, limit: usize) -> Frames {
        let stream = futures::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, Status>(http_body::Frame::data(Bytes::from(c)))),
        );
        let body = tonic::body::Body::new(http_body_util::StreamBody::new(stream));
        Frames::new(body, limit)
    }

    /// Every message `f` yields until the client closes, each in one piece.
    async fn all(f: &mut Frames) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while let Some(m) = f.next().await.unwrap() {
            out.push(m.contiguous().to_vec());
        }
        out
    }

    #[tokio::test]
    async fn messages_split_across_and_within_data_frames() {
        // Every way of cutting the stream in two or three frames, the prefixes included.
        let messages: [&[u8]; 3] = [b"first", b"", b"a third, longer message"];
        let all_bytes = framed(&messages);
        let want: Vec<Vec<u8>> = messages.iter().map(|m| m.to_vec()).collect();
        for a in 0..=all_bytes.len() {
            for b in a..=all_bytes.len() {
                let chunks = vec![
                    all_bytes[..a].to_vec(),
                    all_bytes[a..b].to_vec(),
                    all_bytes[b..].to_vec(),
                ];
                assert_eq!(
                    all(&mut frames_of(chunks, 1024)).await,
                    want,
                    "cut at {a}, {b}"
                );
            }
        }
    }

    #[tokio::test]
    async fn messages_are_the_frames_own_bytes() {
        // One whole message, then one whole and the start of another, then the rest of it (a
        // frame too large to be copied, `SMALL_FRAME`).
        let long = vec![3u8; 3 * SMALL_FRAME];
        let second = framed(&[b"second", &long]);
        let (a, b) = second.split_at(20);
        let chunks = [framed(&[b"first"]), a.to_vec(), b.to_vec()].map(Bytes::from);
        let starts: Vec<*const u8> = chunks.iter().map(|c| c.as_ptr()).collect();
        let stream = futures::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, Status>(http_body::Frame::data(c))),
        );
        let body = tonic::body::Body::new(http_body_util::StreamBody::new(stream));
        let mut f = Frames::new(body, 1 << 20);
        let MessageBytes::One(first) = f.next().await.unwrap().unwrap() else {
            panic!("within one frame: one part");
        };
        assert_eq!(first, &b"first"[..]);
        assert_eq!(first.as_ptr(), starts[0].wrapping_add(PREFIX_LEN));
        let MessageBytes::One(second) = f.next().await.unwrap().unwrap() else {
            panic!("within one frame: one part");
        };
        assert_eq!(second, &b"second"[..]);
        assert_eq!(second.as_ptr(), starts[1].wrapping_add(PREFIX_LEN));
        let MessageBytes::Parts(third) = f.next().await.unwrap().unwrap() else {
            panic!("across frames: its parts");
        };
        assert_eq!(third.concat(), long);
        assert_eq!(third[1].as_ptr(), starts[2], "not copied");
        assert!(f.next().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn tiny_frames_are_copied_together_not_kept_one_by_one() {
        // A message in one-byte frames: its first frame, then the rest copied together.
        let body = vec![9u8; 3000];
        let bytes = framed(&[&body, b"next"]);
        let chunks = bytes.chunks(1).map(<[u8]>::to_vec).collect();
        let mut f = frames_of(chunks, 1 << 20);
        let message = f.next().await.unwrap().unwrap();
        assert!(
            message.parts().len() <= 2,
            "{} parts",
            message.parts().len()
        );
        assert_eq!(message.contiguous(), body);
        assert_eq!(f.next().await.unwrap().unwrap().contiguous(), &b"next"[..]);
        assert!(f.next().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_long_message_is_copied_together_after_max_parts() {
        let big = vec![5u8; 40 * 16_384];
        let bytes = framed(&[&big]);
        let chunks = bytes.chunks(16_384).map(<[u8]>::to_vec).collect();
        let mut f = frames_of(chunks, 1 << 21);
        let message = f.next().await.unwrap().unwrap();
        assert_eq!(message.parts().len(), MAX_PARTS + 1);
        assert_eq!(message.contiguous(), big);
    }

    #[tokio::test]
    async fn nothing_is_held_after_a_large_message() {
        let big = vec![7u8; 90_000];
        let bytes = framed(&[&big]);
        let chunks = bytes.chunks(16_384).map(<[u8]>::to_vec).collect();
        let mut f = frames_of(chunks, 1 << 20);
        let message = f.next().await.unwrap().unwrap();
        assert_eq!(message.parts().len(), 6);
        assert_eq!(message.contiguous(), big);
        assert_eq!(
            f.parts.capacity(),
            0,
            "no request bytes kept between messages"
        );
    }

    #[tokio::test]
    async fn over_the_limit_is_out_of_range_and_a_cut_message_is_an_error() {
        let mut f = frames_of(vec![framed(&[&[1u8; 100]])], 99);
        assert_eq!(f.next().await.unwrap_err().code(), Code::OutOfRange);
        let cut = framed(&[b"whole message"]);
        let mut f = frames_of(vec![cut[..8].to_vec()], 1024);
        assert_eq!(f.next().await.unwrap_err().code(), Code::Internal);
    }

    #[tokio::test]
    async fn a_compressed_message_is_refused() {
        let mut bytes = framed(&[b"x"]);
        bytes[0] = 1;
        let mut f = frames_of(vec![bytes], 1024);
        assert_eq!(f.next().await.unwrap_err().code(), Code::Internal);
    }
}
