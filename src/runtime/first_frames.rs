//! Notices when a connection has sent its first HTTP/2 frames, so that one which never speaks can
//! be closed (docs/hardening.md, "Accepting connections").
//!
//! hyper does not say when a server connection's preface has arrived, so the transport is wrapped
//! and counts what it reads: an HTTP/2 client starts with the 24-byte connection preface and a
//! SETTINGS frame (9-byte header), so [`GREETING_BYTES`] read means the client spoke. It also notes
//! when anything was last read, for the keepalive (`liveness.rs`).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tonic::transport::server::Connected;

use super::forward_io::forward_async_write;
use super::liveness::LastRead;

/// The client connection preface (24 bytes) plus a SETTINGS frame header (9 bytes).
pub(crate) const GREETING_BYTES: usize = 24 + 9;

/// Set once the peer has sent [`GREETING_BYTES`].
#[derive(Debug, Default)]
pub(crate) struct Greeted(Notify);

impl Greeted {
    /// Returns once the peer has greeted.
    pub(crate) async fn wait(&self) {
        self.0.notified().await;
    }
}

/// A transport that signals [`Greeted`] once enough has been read from it.
pub(crate) struct Watched<IO> {
    io: IO,
    /// Bytes read so far, until the greeting is complete (then no longer counted).
    read: usize,
    greeted: Arc<Greeted>,
    last_read: Arc<LastRead>,
}

impl<IO> Watched<IO> {
    /// `io`, with what tells when the peer greeted and when it was last read from.
    pub(crate) fn new(io: IO) -> (Self, Arc<Greeted>, Arc<LastRead>) {
        let greeted = Arc::new(Greeted::default());
        let last_read = LastRead::new();
        let watched = Self {
            io,
            read: 0,
            greeted: greeted.clone(),
            last_read: last_read.clone(),
        };
        (watched, greeted, last_read)
    }
}

impl<IO: Connected> Connected for Watched<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Watched<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        if read > 0 {
            self.last_read.touch();
        }
        if self.read < GREETING_BYTES {
            self.read += read;
            if self.read >= GREETING_BYTES {
                // A stored permit: the waiter sees it even if it starts waiting later.
                self.greeted.0.notify_one();
            }
        }
        polled
    }
}

forward_async_write!(impl[IO: AsyncWrite + Unpin] for Watched<IO>);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn greeted_only_after_the_preface_and_settings_header() {
        let (mut client, server) = tokio::io::duplex(1024);
        let (mut watched, greeted, _) = Watched::new(server);
        let mut buf = [0u8; GREETING_BYTES - 1];
        client.write_all(&[0u8; GREETING_BYTES - 1]).await.unwrap();
        watched.read_exact(&mut buf).await.unwrap();
        let early = tokio::time::timeout(Duration::from_millis(50), greeted.wait()).await;
        assert!(
            early.is_err(),
            "not greeted after {} bytes",
            GREETING_BYTES - 1
        );
        client.write_all(&[0u8; 1]).await.unwrap();
        watched.read_exact(&mut buf[..1]).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), greeted.wait())
            .await
            .expect("greeted once the greeting is complete");
    }
}
