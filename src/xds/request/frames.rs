//! Reads a stream's gRPC-framed request messages from its HTTP/2 body.
//!
//! tonic's `Streaming` reserves room for the largest message it ever received and keeps that
//! buffer for the stream's life: one SotW EDS ACK naming 2,000 clusters (~90 KB) pins ~90 KB per
//! proxy long after it was decoded. This reader keeps only bytes not yet consumed: once a message
//! is split off and no partial one follows, the buffer is let go, so an idle stream holds no request
//! bytes at all. Each message is handed out as `Bytes` of its own, which a caller may decode at
//! once or read lazily: a message that lies whole in one DATA frame (every ACK of a delta
//! client) is a slice of that frame, not a copy.
//!
//! Errors mirror tonic's for the same input, so clients see the same statuses: a message over the
//! limit is `OUT_OF_RANGE` (the stream turns it into `RESOURCE_EXHAUSTED`, TRANS-10), a compressed
//! or badly flagged message is `INTERNAL`, a body cancelled by the client ends the stream quietly.

use bytes::{Buf, Bytes, BytesMut};
use http_body_util::BodyExt;
use tonic::{Code, Status};

/// gRPC message prefix: one compression flag byte plus a big-endian u32 length.
const PREFIX_LEN: usize = 5;

/// The request messages of one stream, as framed bytes.
pub(crate) struct Frames {
    body: tonic::body::Body,
    /// The last DATA frame's bytes not yet handed out, while they start on a message boundary:
    /// a message that lies whole in them is handed out as a slice of them, not copied.
    chunk: Bytes,
    /// A message that spans DATA frames, being put together: at most the start of the next
    /// message. Empty, without an allocation, between messages.
    buf: BytesMut,
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
            chunk: Bytes::new(),
            buf: BytesMut::new(),
            limit,
            ended: false,
        }
    }

    /// The next message's bytes (without the gRPC prefix); `None` when the client closed its side.
    pub(crate) async fn next(&mut self) -> Result<Option<Bytes>, Status> {
        loop {
            if let Some(message) = self.split_message()? {
                return Ok(Some(message));
            }
            if self.ended {
                return if self.buf.is_empty() {
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
                        // `chunk` is empty here: `split_message` used it up or moved it to `buf`.
                        if self.buf.is_empty() {
                            self.chunk = data;
                        } else {
                            self.buf.extend_from_slice(&data);
                        }
                    }
                }
            }
        }
    }

    /// Splits the next whole message off the received bytes, if it is all there.
    fn split_message(&mut self) -> Result<Option<Bytes>, Status> {
        if !self.chunk.is_empty() {
            if let Some(whole) = self.message_len(&self.chunk)?
                && whole <= self.chunk.len()
            {
                let mut message = self.chunk.split_to(whole);
                message.advance(PREFIX_LEN);
                return Ok(Some(message));
            }
            // The message goes on in later DATA frames: put it together in `buf`.
            let start = std::mem::take(&mut self.chunk);
            self.buf.extend_from_slice(&start);
        }
        let Some(whole) = self.message_len(&self.buf)? else {
            return Ok(None);
        };
        if self.buf.len() < whole {
            // One allocation for the rest of the message, not a doubling series.
            self.buf.reserve(whole - self.buf.len());
            return Ok(None);
        }
        let mut message = self.buf.split_to(whole);
        message.advance(PREFIX_LEN);
        if self.buf.is_empty() {
            // Nothing follows: let the allocation go with the message.
            self.buf = BytesMut::new();
        }
        Ok(Some(message.freeze()))
    }

    /// The framed length (prefix included) of the message `bytes` start with, once its prefix is
    /// there; checks the prefix.
    fn message_len(&self, bytes: &[u8]) -> Result<Option<usize>, Status> {
        let Some(prefix) = bytes.get(..PREFIX_LEN) else {
            return Ok(None);
        };
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
        Ok(Some(PREFIX_LEN + len))
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

    #[tokio::test]
    async fn messages_split_across_and_within_data_frames() {
        let all = framed(&[b"first", b"", b"a third, longer message"]);
        let (a, b) = all.split_at(7);
        let mut f = frames_of(vec![a.to_vec(), b.to_vec()], 1024);
        assert_eq!(f.next().await.unwrap().unwrap(), &b"first"[..]);
        assert_eq!(f.next().await.unwrap().unwrap(), &b""[..]);
        assert_eq!(
            f.next().await.unwrap().unwrap(),
            &b"a third, longer message"[..]
        );
        assert!(f.next().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_message_within_one_data_frame_is_not_copied() {
        // One whole message, then one whole and the start of another, then the rest of it.
        let second = framed(&[b"second", b"third, in two frames"]);
        let (a, b) = second.split_at(20);
        let chunks = [framed(&[b"first"]), a.to_vec(), b.to_vec()].map(Bytes::from);
        let starts: Vec<*const u8> = chunks.iter().map(|c| c.as_ptr()).collect();
        let stream = futures::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, Status>(http_body::Frame::data(c))),
        );
        let body = tonic::body::Body::new(http_body_util::StreamBody::new(stream));
        let mut f = Frames::new(body, 1024);
        let first = f.next().await.unwrap().unwrap();
        assert_eq!(first, &b"first"[..]);
        assert_eq!(
            first.as_ptr(),
            starts[0].wrapping_add(PREFIX_LEN),
            "a slice of the frame"
        );
        let second = f.next().await.unwrap().unwrap();
        assert_eq!(second, &b"second"[..]);
        assert_eq!(second.as_ptr(), starts[1].wrapping_add(PREFIX_LEN));
        assert_eq!(
            f.next().await.unwrap().unwrap(),
            &b"third, in two frames"[..]
        );
        assert!(f.next().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn the_buffer_is_let_go_after_a_large_message() {
        let big = vec![7u8; 90_000];
        let mut f = frames_of(vec![framed(&[&big])], 1 << 20);
        assert_eq!(f.next().await.unwrap().unwrap().len(), big.len());
        assert_eq!(
            f.buf.capacity(),
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
