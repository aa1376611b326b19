//! Coalesces a connection's writes, so that a push to the many streams of one HTTP/2 connection
//! goes out in a few system calls rather than one per response.
//!
//! h2 writes every DATA frame over 256 bytes as a write of its own and flushes after it, and the
//! connection task runs as soon as a stream has queued a frame (it is woken straight after that
//! stream's task). An endpoint change pushed to 5,000 streams on 50 connections was 5,000 `writev`
//! calls, one per response. Here a small write is copied into a buffer, and a flush is put off
//! while more keeps arriving (at most [`MAX_DEFERRALS`] times in a row): the task wakes itself and
//! yields, so the other streams of the connection that the same push woke queue their frames
//! first, and a flush that finds nothing new writes them all. A write that would not fit sends the
//! buffer first; a large write (a storm's full configuration) goes straight through after it. What is buffered is bounded by [`CAPACITY`], and the buffer is
//! freed whenever it has been written out.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Most bytes held back per connection.
const CAPACITY: usize = 64 * 1024;
/// Most flushes put off in a row.
const MAX_DEFERRALS: u32 = 16;
/// The buffer's size when a write after a drain allocates it (it grows up to [`CAPACITY`]).
const FIRST_ALLOCATION: usize = 16 * 1024;
/// Writes from this size on are not copied.
const DIRECT: usize = 8 * 1024;

/// A transport whose small writes are gathered and sent together.
pub(crate) struct Coalesced<IO> {
    io: IO,
    buf: Vec<u8>,
    /// How much of `buf` is already written.
    sent: usize,
    /// What was held when the last flush was put off.
    at_deferral: usize,
    /// Flushes put off in a row.
    deferrals: u32,
}

impl<IO> Coalesced<IO> {
    pub(crate) fn new(io: IO) -> Self {
        Self {
            io,
            buf: Vec::new(),
            sent: 0,
            at_deferral: 0,
            deferrals: 0,
        }
    }

    fn held(&self) -> usize {
        self.buf.len() - self.sent
    }

    /// Copies `parts` in, allocating the buffer on the first write after a drain.
    fn hold(&mut self, parts: &[impl std::ops::Deref<Target = [u8]>]) {
        if self.buf.capacity() == 0 {
            self.buf.reserve(FIRST_ALLOCATION);
        }
        for part in parts {
            self.buf.extend_from_slice(part);
        }
    }
}

impl<IO: AsyncWrite + Unpin> Coalesced<IO> {
    /// Writes out everything held.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.buf.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.buf[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        // Freed, not kept: an idle connection holds no buffer (10,000 connections would otherwise
        // keep up to 640 MiB after a storm).
        self.buf = Vec::new();
        self.sent = 0;
        Poll::Ready(Ok(()))
    }

    /// Makes room for `len` more bytes; `false` when they should be written directly.
    fn room_for(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<io::Result<bool>> {
        if len >= DIRECT {
            ready!(self.drain(cx))?;
            return Poll::Ready(Ok(false));
        }
        if self.held() + len > CAPACITY {
            ready!(self.drain(cx))?;
        }
        Poll::Ready(Ok(true))
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Coalesced<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Coalesced<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        if !ready!(self.room_for(cx, data.len()))? {
            return Pin::new(&mut self.io).poll_write(cx, data);
        }
        self.hold(&[data]);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let len = bufs.iter().map(|b| b.len()).sum();
        if !ready!(self.room_for(cx, len))? {
            return Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        }
        self.hold(bufs);
        Poll::Ready(Ok(len))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let held = self.held();
        if held > self.at_deferral && self.deferrals < MAX_DEFERRALS {
            // More came since the last flush was put off: put it off again. The task is polled
            // again after what is already queued to run, and h2 flushes at the end of that poll.
            self.at_deferral = held;
            self.deferrals += 1;
            cx.waker().wake_by_ref();
            return Poll::Ready(Ok(()));
        }
        ready!(self.drain(cx))?;
        self.at_deferral = 0;
        self.deferrals = 0;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Wake, Waker};

    use tokio::io::DuplexStream;

    use super::*;

    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl Wake for Wakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    struct Harness {
        io: Coalesced<DuplexStream>,
        peer: DuplexStream,
        wakes: Arc<Wakes>,
        waker: Waker,
    }

    impl Harness {
        fn new() -> Self {
            let (ours, peer) = tokio::io::duplex(1 << 20);
            let wakes = Arc::new(Wakes::default());
            Self {
                io: Coalesced::new(ours),
                peer,
                waker: Waker::from(Arc::clone(&wakes)),
                wakes,
            }
        }

        fn write(&mut self, data: &[u8]) {
            let mut cx = Context::from_waker(&self.waker);
            let n = Pin::new(&mut self.io).poll_write(&mut cx, data);
            assert!(matches!(n, Poll::Ready(Ok(n)) if n == data.len()));
        }

        fn write_vectored(&mut self, parts: &[&[u8]]) {
            let mut cx = Context::from_waker(&self.waker);
            let slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
            let len: usize = parts.iter().map(|p| p.len()).sum();
            let n = Pin::new(&mut self.io).poll_write_vectored(&mut cx, &slices);
            assert!(matches!(n, Poll::Ready(Ok(n)) if n == len));
        }

        fn flush(&mut self) {
            let mut cx = Context::from_waker(&self.waker);
            assert!(matches!(
                Pin::new(&mut self.io).poll_flush(&mut cx),
                Poll::Ready(Ok(()))
            ));
        }

        fn wakes(&self) -> usize {
            self.wakes.0.load(Ordering::SeqCst)
        }

        /// Everything the peer can read now.
        fn received(&mut self) -> Vec<u8> {
            let mut out = Vec::new();
            let mut chunk = vec![0u8; 1 << 20];
            let mut cx = Context::from_waker(Waker::noop());
            loop {
                let mut buf = ReadBuf::new(&mut chunk);
                match Pin::new(&mut self.peer).poll_read(&mut cx, &mut buf) {
                    Poll::Ready(Ok(())) if !buf.filled().is_empty() => {
                        out.extend_from_slice(buf.filled());
                    }
                    _ => return out,
                }
            }
        }
    }

    #[test]
    fn small_writes_wait_for_a_flush_that_brings_nothing_new() {
        let mut h = Harness::new();
        h.write(b"one ");
        h.flush();
        assert!(h.received().is_empty(), "the first flush is put off");
        assert_eq!(h.wakes(), 1, "and the task is woken to flush again");
        h.write_vectored(&[b"two ", b"three "]);
        h.flush();
        assert!(h.received().is_empty(), "more came: put off again");
        assert_eq!(h.wakes(), 2);
        h.flush();
        assert_eq!(h.received(), b"one two three ");
        assert_eq!(h.io.buf.capacity(), 0, "an idle connection holds no buffer");
        assert_eq!(h.wakes(), 2, "nothing held, nothing to wake for");
        h.flush();
        assert!(h.received().is_empty());
    }

    #[test]
    fn a_flush_is_put_off_a_bounded_number_of_times() {
        let mut h = Harness::new();
        let mut expected = Vec::new();
        for i in 0..MAX_DEFERRALS {
            h.write(&[i as u8]);
            expected.push(i as u8);
            h.flush();
            assert!(h.received().is_empty());
        }
        h.write(b"!");
        expected.push(b'!');
        h.flush();
        assert_eq!(h.received(), expected, "written although more keeps coming");
    }

    #[test]
    fn large_writes_go_straight_through_after_what_is_held() {
        let mut h = Harness::new();
        h.write(b"head");
        let large = vec![7u8; DIRECT];
        h.write_vectored(&[&large[..10], &large[10..]]);
        let mut expected = b"head".to_vec();
        expected.extend_from_slice(&large);
        assert_eq!(h.received(), expected, "in order, without a flush");
    }

    #[test]
    fn what_is_held_never_exceeds_the_capacity() {
        let mut h = Harness::new();
        let part = vec![1u8; DIRECT - 1];
        let mut written = 0;
        while written + part.len() <= CAPACITY {
            h.write(&part);
            written += part.len();
        }
        assert!(h.received().is_empty());
        h.write(&part);
        assert_eq!(h.received().len(), written, "the buffer went out first");
        assert_eq!(h.io.held(), part.len());
    }

    #[test]
    fn a_drain_the_transport_takes_in_parts_resumes_where_it_stopped() {
        let (ours, mut peer) = tokio::io::duplex(8);
        let mut io = Coalesced::new(ours);
        let mut cx = Context::from_waker(Waker::noop());
        assert!(
            Pin::new(&mut io)
                .poll_write(&mut cx, b"0123456789abcdef")
                .is_ready()
        );
        assert!(Pin::new(&mut io).poll_flush(&mut cx).is_ready(), "put off");
        assert!(
            Pin::new(&mut io).poll_flush(&mut cx).is_pending(),
            "the peer holds 8"
        );
        let mut got = Vec::new();
        while got.len() < 16 {
            let mut chunk = [0u8; 8];
            let mut buf = ReadBuf::new(&mut chunk);
            assert!(Pin::new(&mut peer).poll_read(&mut cx, &mut buf).is_ready());
            got.extend_from_slice(buf.filled());
            let _ = Pin::new(&mut io).poll_flush(&mut cx);
        }
        assert_eq!(got, b"0123456789abcdef");
        assert_eq!(io.held(), 0);
    }

    #[tokio::test]
    async fn shutdown_writes_what_is_held() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (ours, mut peer) = tokio::io::duplex(1024);
        let mut io = Coalesced::new(ours);
        io.write_all(b"last words").await.unwrap();
        io.shutdown().await.unwrap();
        let mut got = Vec::new();
        peer.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"last words");
    }
}
