//! The response body of one stream: a one-response hand-off slot between the stream task and h2.
//!
//! The stream task is the only writer (TRANS-15). It builds a response only when the slot is empty
//! (the body has taken the previous one), from the newest snapshot at that moment, so a slow client
//! skips intermediate snapshots (TRANS-1). For a client that stopped reading, the server holds at
//! most: the response in h2's send buffer, the next one hyper has already pulled from the body
//! (hyper 1.12 polls one frame ahead of flow control), and one staged in the slot. A response is a
//! few shared [`Bytes`] chunks: a small per-stream header, then the shared resource bytes (one
//! chunk for a wildcard full set, see `cache.rs`). Nothing is copied per stream but a response
//! under 16 KiB, which is one chunk (`response.rs`).
//!
//! A staged response that the body has not started yet can be recalled, so a response for a type
//! the client has since unsubscribed is never delivered (SOTW-35). When the body is dropped (client
//! gone, connection reset) the stream task is aborted with it, and its guard frees its state
//! (TRANS-3).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::HeaderMap;
use http_body::Frame;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::envoy::ResourceType;

/// One framed `DiscoveryResponse`, ready to go on the wire.
#[derive(Debug)]
pub(crate) struct Framed {
    /// Its type, so a staged response can be recalled by type; `None` for an empty answer to a
    /// collection tributary does not serve (never recalled).
    pub ty: Option<ResourceType>,
    /// The gRPC prefix + per-stream fields, then the shared resource entries.
    pub chunks: Vec<Bytes>,
    /// SotW EDS/RDS: the names carried, so a recalled response can be owed again (shared with the
    /// stream's record of the response, not a copy). Dropped as soon as the body takes the response.
    pub names: Arc<[Arc<str>]>,
}

#[derive(Default)]
struct SlotState {
    staged: Option<Framed>,
    end: Option<tonic::Status>,
    body_waker: Option<Waker>,
    body_gone: bool,
}

#[derive(Default)]
struct Shared {
    /// Locked only for a few instructions, never across an await.
    state: Mutex<SlotState>,
    /// Wakes the writer when the slot empties or the body goes away.
    room: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The body went away; the stream must end.
#[derive(Debug, thiserror::Error)]
#[error("the client went away")]
pub(crate) struct BodyGone;

/// The stream task's end of the slot.
pub(crate) struct SlotWriter {
    shared: Arc<Shared>,
}

impl SlotWriter {
    /// Waits until a response can be staged. Cancel-safe.
    pub(crate) async fn room(&self) -> Result<(), BodyGone> {
        // Usually there is room: answer without joining the waiters (a lock to join and another
        // to leave, on every push of every stream).
        if let Some(room) = self.has_room() {
            return room;
        }
        loop {
            let notified = self.shared.room.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(room) = self.has_room() {
                return room;
            }
            notified.await;
        }
    }

    /// `Some` when [`Self::room`] can answer now.
    pub(crate) fn has_room(&self) -> Option<Result<(), BodyGone>> {
        let s = self.shared.lock();
        if s.body_gone {
            Some(Err(BodyGone))
        } else {
            s.staged.is_none().then_some(Ok(()))
        }
    }

    /// Resolves when the body is dropped. Cancel-safe.
    pub(crate) async fn gone(&self) {
        loop {
            let notified = self.shared.room.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.shared.lock().body_gone {
                return;
            }
            notified.await;
        }
    }

    /// Hands `response` to the body. Call only after [`Self::room`]; returns it back if the body is
    /// gone or (a bug) the slot is full.
    pub(crate) fn stage(&self, response: Framed) -> Result<(), Framed> {
        let waker = {
            let mut s = self.shared.lock();
            if s.body_gone || s.staged.is_some() {
                return Err(response);
            }
            s.staged = Some(response);
            s.body_waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        Ok(())
    }

    /// Takes back a staged response of type `ty` the body has not started.
    pub(crate) fn recall(&self, ty: ResourceType) -> Option<Framed> {
        let mut s = self.shared.lock();
        if s.staged.as_ref().is_some_and(|f| f.ty == Some(ty)) {
            let framed = s.staged.take();
            drop(s);
            self.shared.room.notify_waiters();
            return framed;
        }
        None
    }

    /// Ends the stream with `status` once the staged response (if any) has gone out.
    pub(crate) fn finish(&self, status: tonic::Status) {
        let waker = {
            let mut s = self.shared.lock();
            s.end = Some(status);
            s.body_waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl Drop for SlotWriter {
    /// A writer that goes away without [`SlotWriter::finish`] (it should not) still ends the body.
    fn drop(&mut self) {
        let waker = {
            let mut s = self.shared.lock();
            if s.end.is_none() && !s.body_gone {
                s.end = Some(tonic::Status::unavailable("xds stream ended"));
            }
            s.body_waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
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
    current: VecDeque<Bytes>,
    task: Option<OwnedTask>,
    done: bool,
}

/// A connected slot: the writer for the stream task, and a body waiting for its task.
pub(crate) fn slot() -> (SlotWriter, ResponseBody) {
    let shared = Arc::new(Shared::default());
    (
        SlotWriter {
            shared: Arc::clone(&shared),
        },
        ResponseBody {
            shared,
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
        let mut s = this.shared.lock();
        if let Some(framed) = s.staged.take() {
            drop(s);
            this.shared.room.notify_waiters();
            this.current = framed.chunks.into(); // `names` dropped here
            return match this.current.pop_front() {
                Some(chunk) => Poll::Ready(Some(Ok(Frame::data(chunk)))),
                None => {
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
            };
        }
        if let Some(status) = s.end.take() {
            drop(s);
            this.done = true;
            return Poll::Ready(Some(Ok(Frame::trailers(trailers(&status)))));
        }
        s.body_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}

impl Drop for ResponseBody {
    fn drop(&mut self) {
        self.shared.lock().body_gone = true;
        self.shared.room.notify_waiters();
        // `task` (if any) is aborted by its handle's own drop.
    }
}
