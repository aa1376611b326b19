//! The response body of one stream: it pulls each response from the stream's push side when h2
//! can take one.
//!
//! hyper polls a body only when the stream has flow-control credit, so a response is built then,
//! from the newest snapshot at that moment: a slow client skips intermediate snapshots (TRANS-1),
//! and for a client that stopped reading the server holds at most the response in h2's send buffer
//! and the one hyper pulled to fill the credit left. A response is a few shared [`Bytes`] chunks:
//! a small per-stream header, then the shared resource bytes (one chunk for a wildcard full set,
//! see `cache.rs`). Nothing is copied per stream but a response under 16 KiB, which is one chunk
//! (`response.rs`).
//!
//! Pulling, rather than a stream task handing responses over, spares every push a task of its own:
//! a snapshot change wakes the body, which builds its response and gives it to h2 in the same
//! poll. A response is built only when the body is polled for it, after every request the stream
//! task applied before, so nothing goes out for a type or a name the client has just dropped
//! (INV-5, SOTW-35). When the body is dropped (client gone, connection reset) the stream task is
//! aborted with it, and its guard frees its state (TRANS-3).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::HeaderMap;
use http_body::Frame;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// One framed `DiscoveryResponse`, ready to go on the wire.
#[derive(Debug)]
pub(crate) struct Framed {
    /// The gRPC prefix + per-stream fields, then the shared resource entries.
    pub chunks: Vec<Bytes>,
}

/// Where the body pulls responses from: the stream's push side, shared with its task.
pub(crate) trait Source: Send {
    /// The next response owed, if one is; otherwise registers `cx` to be woken when one may be.
    /// An error ends the stream with that status.
    fn poll_response(&mut self, cx: &mut Context<'_>) -> Poll<Result<Framed, tonic::Status>>;
}

/// A stream's push side, locked by its task (requests) and by its body (responses).
pub(crate) type SharedSource = Arc<parking_lot::Mutex<dyn Source>>;

#[derive(Default)]
struct BodyState {
    /// Set once the stream's first request was applied; the body takes it on its next poll.
    source: Option<SharedSource>,
    end: Option<tonic::Status>,
    body_waker: Option<Waker>,
    body_gone: bool,
}

#[derive(Default)]
struct Shared {
    /// Locked only for a few instructions, never across an await.
    state: Mutex<BodyState>,
    /// Wakes the stream task when the body goes away.
    gone: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, BodyState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes the state with `f`, then wakes the body.
    fn update(&self, f: impl FnOnce(&mut BodyState)) {
        let waker = {
            let mut s = self.lock();
            f(&mut s);
            s.body_waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// The stream task's end of the body.
pub(crate) struct BodyWriter {
    shared: Arc<Shared>,
}

impl BodyWriter {
    /// Resolves when the body is dropped. Cancel-safe.
    pub(crate) async fn gone(&self) {
        loop {
            let notified = self.shared.gone.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.shared.lock().body_gone {
                return;
            }
            notified.await;
        }
    }

    /// Lets the body pull responses from `source`.
    pub(crate) fn attach(&self, source: SharedSource) {
        self.shared.update(|s| {
            if !s.body_gone {
                s.source = Some(source);
            }
        });
    }

    /// Ends the stream with `status` once the response under way (if any) has gone out.
    pub(crate) fn finish(&self, status: tonic::Status) {
        self.shared.update(|s| s.end = Some(status));
    }
}

impl Drop for BodyWriter {
    /// A writer that goes away without [`BodyWriter::finish`] (it should not) still ends the body.
    fn drop(&mut self) {
        self.shared.update(|s| {
            if s.end.is_none() && !s.body_gone {
                s.end = Some(tonic::Status::unavailable("xds stream ended"));
            }
        });
    }
}

/// The stream task, aborted when the body (its owner) is dropped.
struct OwnedTask(JoinHandle<()>);

impl Drop for OwnedTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The `http_body::Body` of one xDS stream. Owns the stream task: dropping the body aborts it.
pub(crate) struct ResponseBody {
    shared: Arc<Shared>,
    source: Option<SharedSource>,
    current: VecDeque<Bytes>,
    task: Option<OwnedTask>,
    done: bool,
}

/// A connected pair: the writer for the stream task, and a body waiting for its task.
pub(crate) fn pair() -> (BodyWriter, ResponseBody) {
    let shared = Arc::new(Shared::default());
    (
        BodyWriter {
            shared: Arc::clone(&shared),
        },
        ResponseBody {
            shared,
            source: None,
            current: VecDeque::new(),
            task: None,
            done: false,
        },
    )
}

impl ResponseBody {
    /// Ties the stream task's lifetime to this body.
    pub(crate) fn own_task(&mut self, task: JoinHandle<()>) {
        self.task = Some(OwnedTask(task));
    }

    /// Ends the body with `status`.
    fn end(&mut self, status: &tonic::Status) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        self.done = true;
        self.source = None;
        Poll::Ready(Some(Ok(Frame::trailers(trailers(status)))))
    }
}

fn trailers(status: &tonic::Status) -> HeaderMap {
    let mut map = HeaderMap::new();
    if status.add_header(&mut map).is_err() {
        map.insert("grpc-status", http::HeaderValue::from_static("13"));
    }
    map
}

impl http_body::Body for ResponseBody {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        if let Some(chunk) = this.current.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        {
            // The waker is left before the source is asked, so a status or a source set after
            // this look wakes the body.
            let mut s = this.shared.lock();
            if let Some(status) = s.end.take() {
                drop(s);
                return this.end(&status);
            }
            if this.source.is_none() {
                this.source = s.source.take();
            }
            if !s
                .body_waker
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()))
            {
                s.body_waker = Some(cx.waker().clone());
            }
        }
        let Some(source) = &this.source else {
            return Poll::Pending;
        };
        let polled = source.lock().poll_response(cx);
        match polled {
            Poll::Ready(Ok(framed)) => {
                this.current = framed.chunks.into();
                match this.current.pop_front() {
                    Some(chunk) => Poll::Ready(Some(Ok(Frame::data(chunk)))),
                    None => {
                        cx.waker().wake_by_ref();
                        Poll::Pending
                    }
                }
            }
            Poll::Ready(Err(status)) => this.end(&status),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}

impl Drop for ResponseBody {
    fn drop(&mut self) {
        let source = {
            let mut s = self.shared.lock();
            s.body_gone = true;
            s.source.take()
        };
        // Dropped outside the lock: the last handle to the stream frees its state.
        drop(source);
        self.shared.gone.notify_waiters();
        // `task` (if any) is aborted by its handle's own drop.
    }
}
