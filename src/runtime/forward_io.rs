//! Forwarding of `AsyncWrite` to a wrapped transport, for the connection wrappers that only add
//! something on the read side or beside the transport (`first_frames::Watched` counts what is read,
//! `tls::accept::TlsConn` carries the peer's identity): their writes are the transport's, written
//! once here.

/// Implements `tokio::io::AsyncWrite` for a wrapper whose `io` field is the transport, forwarding
/// every method (vectored writes included) to it.
///
/// `forward_async_write!(impl[IO: AsyncWrite + Unpin] for Watched<IO>);` for a generic wrapper,
/// `forward_async_write!(impl for TlsConn);` for a concrete one.
macro_rules! forward_async_write {
    (impl $([$($generics:tt)*])? for $wrapper:ty) => {
        impl $(<$($generics)*>)? ::tokio::io::AsyncWrite for $wrapper {
            fn poll_write(
                mut self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
                buf: &[u8],
            ) -> ::std::task::Poll<::std::io::Result<usize>> {
                ::tokio::io::AsyncWrite::poll_write(::std::pin::Pin::new(&mut self.io), cx, buf)
            }

            fn poll_flush(
                mut self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
            ) -> ::std::task::Poll<::std::io::Result<()>> {
                ::tokio::io::AsyncWrite::poll_flush(::std::pin::Pin::new(&mut self.io), cx)
            }

            fn poll_shutdown(
                mut self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
            ) -> ::std::task::Poll<::std::io::Result<()>> {
                ::tokio::io::AsyncWrite::poll_shutdown(::std::pin::Pin::new(&mut self.io), cx)
            }

            fn poll_write_vectored(
                mut self: ::std::pin::Pin<&mut Self>,
                cx: &mut ::std::task::Context<'_>,
                bufs: &[::std::io::IoSlice<'_>],
            ) -> ::std::task::Poll<::std::io::Result<usize>> {
                ::tokio::io::AsyncWrite::poll_write_vectored(::std::pin::Pin::new(&mut self.io), cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                ::tokio::io::AsyncWrite::is_write_vectored(&self.io)
            }
        }
    };
}

pub(crate) use forward_async_write;
