//! A `select!` branch that is polled only when its own future woke the task.
//!
//! `tokio::select!` polls every pending branch each time the task wakes. A stream task wakes for
//! every request and every push, and its rarely ready branches (the drain token, the snapshot
//! watch, admin push requests) each took a lock or two to re-register on every poll: ~5 % of the
//! server's CPU in an endpoint change at 5,000 delta proxies. A branch polled through [`OwnWaker`]
//! hands its future a waker of its own: when the future wakes it, the wake-up is recorded and
//! passed on to the task, and only then does the branch poll the future again. Otherwise the branch
//! answers `Pending` at the cost of re-registering the task's waker, which takes no lock.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;

struct Flag {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

/// The waker of one branch; see the module doc.
pub(crate) struct OwnWaker {
    flag: Arc<Flag>,
    waker: Waker,
}

impl OwnWaker {
    /// A branch whose first poll polls its future (which registers it).
    pub(crate) fn new() -> Self {
        let flag = Arc::new(Flag {
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        Self {
            waker: Waker::from(Arc::clone(&flag)),
            flag,
        }
    }

    /// The next poll polls the future: call it after replacing the future, which must be polled
    /// once to register.
    pub(crate) fn arm(&self) {
        self.flag.woken.store(true, Ordering::Release);
    }

    /// Polls `fut` if it woke the task since its last poll (or after [`Self::arm`]).
    pub(crate) fn poll<F: Future>(&self, cx: &mut Context<'_>, fut: Pin<&mut F>) -> Poll<F::Output> {
        // Register first: a wake-up between the check and the poll below is then not lost.
        self.flag.task.register(cx.waker());
        if !self.flag.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        fut.poll(&mut Context::from_waker(&self.waker))
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;
    use std::time::Duration;

    use tokio::sync::Notify;

    use super::*;

    #[tokio::test]
    async fn polls_its_future_only_after_the_future_woke_it() {
        let notify = Notify::new();
        let notified = notify.notified();
        tokio::pin!(notified);
        let branch = OwnWaker::new();
        let mut polls = 0;
        let mut poll = |cx: &mut Context<'_>| {
            polls += 1;
            branch.poll(cx, notified.as_mut())
        };
        let first = poll_fn(|cx| Poll::Ready(poll(cx))).await;
        assert!(first.is_pending(), "the first poll registers the future");
        let second = poll_fn(|cx| Poll::Ready(poll(cx))).await;
        assert!(second.is_pending());
        notify.notify_waiters();
        tokio::time::timeout(Duration::from_secs(5), poll_fn(&mut poll))
            .await
            .expect("the wake-up reaches the task and the future is polled");
        assert_eq!(polls, 3);
    }

    #[tokio::test]
    async fn a_wake_up_before_the_next_poll_is_kept() {
        let notify = Arc::new(Notify::new());
        let notified = notify.notified();
        tokio::pin!(notified);
        let branch = OwnWaker::new();
        assert!(poll_fn(|cx| Poll::Ready(branch.poll(cx, notified.as_mut())))
            .await
            .is_pending());
        let n = Arc::clone(&notify);
        tokio::spawn(async move { n.notify_waiters() });
        tokio::time::timeout(
            Duration::from_secs(5),
            poll_fn(|cx| branch.poll(cx, notified.as_mut())),
        )
        .await
        .expect("woken from another task");
    }

    #[tokio::test]
    async fn an_armed_branch_polls_its_new_future() {
        let branch = OwnWaker::new();
        let mut pending = std::future::pending::<u8>();
        assert!(poll_fn(|cx| Poll::Ready(branch.poll(cx, Pin::new(&mut pending))))
            .await
            .is_pending());
        let mut ready = std::future::ready(7);
        assert!(
            poll_fn(|cx| Poll::Ready(branch.poll(cx, Pin::new(&mut ready))))
                .await
                .is_pending(),
            "not woken, not polled"
        );
        branch.arm();
        assert_eq!(poll_fn(|cx| branch.poll(cx, Pin::new(&mut ready))).await, 7);
    }
}
