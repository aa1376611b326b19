//! Coalesces a connection's writes, so that a push to the many streams of one HTTP/2 connection
//! goes out in a few system calls rather than one per response.
//!
//! h2 writes every DATA frame over 256 bytes as a write of its own and flushes after it, and the
//! connection task runs as soon as a stream has queued a frame (it is woken straight after that
//! stream's task). An endpoint change pushed to 5,000 streams on 50 connections was 5,000 `writev`
//! calls, one per response. Here a small write is copied into a buffer, and the first flush after
//! it is put off once: the task wakes itself and yields, so the other streams of the connection
//! that the same push woke queue their frames first, and the flush after that writes them all. A
//! write that would not fit sends the buffer first; a large write (a storm's full configuration)
//! goes straight through after it. What is buffered is bounded by [`CAPACITY`].

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Most bytes held back per connection.
const CAPACITY: usize = 64 * 1024;
/// Most flushes put off in a row.
const MAX_DEFERRALS: u32 = 16;
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
        self.buf.clear();
        self.sent = 0;
        if self.buf.capacity() > CAPACITY {
            self.buf.shrink_to(CAPACITY);
        }
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
        self.buf.extend_from_slice(data);
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
        for b in bufs {
            self.buf.extend_from_slice(b);
        }
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
