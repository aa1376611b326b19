//! `select!` branches that are polled only when their own future woke the task.
//!
//! `tokio::select!` polls every pending branch each time the task wakes. A stream's task wakes for
//! every request and its body for every push, and their rarely ready branches (the drain token,
//! admin push requests, the snapshot watch) each took a lock or two to re-register on every poll:
//! ~5 % of the server's CPU in an endpoint change at 5,000 delta proxies. A branch polled through [`OwnWakers`]
//! hands its future a waker of its own: when the future wakes it, the wake-up is recorded and
//! passed on to the task, and only then does the branch poll the future again. Otherwise the branch
//! answers `Pending` after reading one atomic word; the task registers its waker once per poll for
//! all such branches, with no lock. A branch's waker never changes, so a source that keeps wakers
//! (the snapshot store's listeners) is handed it once ([`OwnWakers::waker`]) and never polled.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;

struct Shared {
    /// One bit per branch: its future woke the task since the branch last polled it.
    woken: AtomicU32,
    task: AtomicWaker,
}

/// The waker one branch hands its future.
struct BranchWaker {
    shared: Arc<Shared>,
    bit: u32,
}

impl Wake for BranchWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.shared.woken.fetch_or(self.bit, Ordering::Release);
        self.shared.task.wake();
    }
}

/// The wakers of `N` branches of one task; see the module doc.
pub(crate) struct OwnWakers<const N: usize> {
    shared: Arc<Shared>,
    wakers: [Waker; N],
}

impl<const N: usize> OwnWakers<N> {
    /// Branches whose first poll polls their future (which registers it).
    pub(crate) fn new() -> Self {
        const { assert!(N <= 32) };
        let shared = Arc::new(Shared {
            woken: AtomicU32::new(u32::MAX),
            task: AtomicWaker::new(),
        });
        let wakers = std::array::from_fn(|i| {
            Waker::from(Arc::new(BranchWaker {
                shared: Arc::clone(&shared),
                bit: 1 << i,
            }))
        });
        Self { shared, wakers }
    }

    /// Registers the task to be woken by the branches' futures. Call it on every poll of the task
    /// before polling any branch: a wake-up uses the registration up.
    pub(crate) fn register(&self, cx: &Context<'_>) {
        self.shared.task.register(cx.waker());
    }

    /// Wakes the task registered by [`Self::register`], for a reason of its caller's own.
    pub(crate) fn wake(&self) {
        self.shared.task.wake();
    }

    /// The next poll of branch `i` polls its future: call it after replacing the future, which
    /// must be polled once to register.
    pub(crate) fn arm(&self, i: usize) {
        self.shared.woken.fetch_or(1 << i, Ordering::Release);
    }

    /// The waker of branch `i`, for a source that keeps it and wakes it whenever it has news
    /// (the snapshot store's listeners); the branch is then read with [`Self::take`].
    pub(crate) fn waker(&self, i: usize) -> Waker {
        self.wakers[i].clone()
    }

    /// Whether branch `i` was woken since this was last asked (or after [`Self::arm`]); asking
    /// clears it.
    pub(crate) fn take(&self, i: usize) -> bool {
        let bit = 1 << i;
        self.shared.woken.load(Ordering::Acquire) & bit != 0
            && self.shared.woken.fetch_and(!bit, Ordering::AcqRel) & bit != 0
    }

    /// Whether branch `i`'s future woke the task since the branch last polled it.
    pub(crate) fn woken(&self, i: usize) -> bool {
        self.shared.woken.load(Ordering::Acquire) & (1 << i) != 0
    }

    /// Polls `fut`, branch `i`'s future, if it woke the task since its last poll (or after
    /// [`Self::arm`]).
    pub(crate) fn poll<F: Future>(&self, i: usize, fut: Pin<&mut F>) -> Poll<F::Output> {
        let bit = 1 << i;
        if self.shared.woken.load(Ordering::Acquire) & bit == 0 {
            return Poll::Pending;
        }
        self.shared.woken.fetch_and(!bit, Ordering::AcqRel);
        fut.poll(&mut Context::from_waker(&self.wakers[i]))
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;
    use std::time::Duration;

    use tokio::sync::Notify;

    use super::*;

    /// Polls branch `i` once, registering the task first, as the stream's loop does.
    fn turn<const N: usize, F: Future>(
        b: &OwnWakers<N>,
        i: usize,
        fut: Pin<&mut F>,
    ) -> impl Future<Output = Poll<F::Output>> {
        let mut fut = Some(fut);
        poll_fn(move |cx| {
            b.register(cx);
            Poll::Ready(b.poll(i, fut.take().expect("polled once").as_mut()))
        })
    }

    #[tokio::test]
    async fn polls_a_future_only_after_it_woke_the_task() {
        let notify = Arc::new(Notify::new());
        let (a, b) = (notify.notified(), notify.notified());
        tokio::pin!(a, b);
        let branches = OwnWakers::<2>::new();
        assert!(
            turn(&branches, 0, a.as_mut()).await.is_pending(),
            "registers"
        );
        assert!(
            turn(&branches, 1, b.as_mut()).await.is_pending(),
            "registers"
        );
        assert!(turn(&branches, 0, a.as_mut()).await.is_pending());
        let n = Arc::clone(&notify);
        tokio::spawn(async move { n.notify_waiters() });
        let woken = poll_fn(|cx| {
            branches.register(cx);
            match (branches.poll(0, a.as_mut()), branches.poll(1, b.as_mut())) {
                (Poll::Ready(()), Poll::Ready(())) => Poll::Ready(()),
                _ => Poll::Pending,
            }
        });
        tokio::time::timeout(Duration::from_secs(5), woken)
            .await
            .expect("both wake-ups reach the task and both futures are polled");
    }

    #[tokio::test]
    async fn an_armed_branch_polls_its_new_future() {
        let branches = OwnWakers::<1>::new();
        let mut pending = std::future::pending::<u8>();
        assert!(
            turn(&branches, 0, Pin::new(&mut pending))
                .await
                .is_pending()
        );
        let mut ready = std::future::ready(7);
        assert!(
            turn(&branches, 0, Pin::new(&mut ready)).await.is_pending(),
            "not woken, not polled"
        );
        branches.arm(0);
        assert_eq!(
            turn(&branches, 0, Pin::new(&mut ready)).await,
            Poll::Ready(7)
        );
    }
}
