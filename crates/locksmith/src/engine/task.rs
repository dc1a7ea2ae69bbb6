//! Background tasks that follow the caller's runtime.
//!
//! A [`Client`](crate::Client) starts its background tasks (the watchdog,
//! the pub/sub connection) on first use, inside the caller's Tokio runtime.
//! A client can outlive that runtime: a program that calls `block_on` on a
//! fresh runtime per job, or tests sharing a client across their runtimes.
//! When a runtime shuts down it drops its tasks, so a task started once
//! would silently stop. A [`TaskSlot`] remembers whether its task is still
//! alive and starts a new one on the current runtime when it is not.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// One restartable background task, owned by the structure that holds the
/// slot: the task ends when the slot is stopped ([`TaskSlot::stop`]) or
/// dropped, wherever it is waiting. A task that holds only a weak
/// reference to its owner and waits for a timer, a message or a
/// connection would otherwise live on (with the connections it holds)
/// until that wait ends, which may be never.
#[derive(Debug, Default)]
pub(crate) struct TaskSlot {
    /// Points at a token the running task owns: it is dropped with the task
    /// (finished, or dropped by its runtime's shutdown), which tells the
    /// next caller to start a new one.
    alive: Mutex<Weak<()>>,
    /// Cancelled by [`TaskSlot::stop`] and on drop: the task is dropped at
    /// its next wake-up, and none starts again.
    stop: CancellationToken,
}

impl Drop for TaskSlot {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl TaskSlot {
    /// True while the task last started here is alive.
    pub(crate) fn is_running(&self) -> bool {
        self.lock().strong_count() > 0
    }

    /// Ends the task for good: it is dropped at its next wake-up, and
    /// [`TaskSlot::ensure`] starts no other.
    pub(crate) fn stop(&self) {
        self.stop.cancel();
    }

    /// Starts `make()` on the current runtime unless the task is alive or
    /// the slot was stopped. Returns true when it started one. Outside a
    /// runtime nothing starts (the next call from inside one will).
    pub(crate) fn ensure<F>(&self, make: impl FnOnce() -> F) -> bool
    where
        F: Future<Output = ()> + Send + 'static,
    {
        if self.stop.is_cancelled() {
            return false;
        }
        let mut alive = self.lock();
        if alive.strong_count() > 0 {
            return false;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        let token = Arc::new(());
        *alive = Arc::downgrade(&token);
        let task = make();
        let stop = self.stop.clone();
        runtime.spawn(async move {
            let _alive = token;
            // Dropped (not finished) when the owner stops or goes; the
            // token is polled first so a task that is always ready still
            // ends.
            tokio::select! {
                biased;
                () = stop.cancelled() => {}
                () = task => {}
            }
        });
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Weak<()>> {
        self.alive.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The background work of one client: the clean-ups of dropped guards and
/// cancelled calls, the resends of releases whose reply was lost, calls
/// sent for several callers, and the waits under way (each holds a
/// [`Tasks::token`] until it has withdrawn what it put on the server).
/// Each is tracked here so that [`Tasks::wait`] can wait for it
/// ([`Client::close`](crate::Client::close)). The watchdog and the
/// pub/sub connection are not tracked: closing stops them.
/// Cheap to clone: clones share one set.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tasks {
    /// Shared by every clone.
    inner: Arc<TasksInner>,
}

#[derive(Debug, Default)]
struct TasksInner {
    /// Counts the tasks in flight; closed by [`Tasks::close`].
    tracker: TaskTracker,
    /// Cancelled by [`Tasks::close`]: tasks that would otherwise run for
    /// the client's lifetime end on it.
    stop: CancellationToken,
    /// Set by [`Tasks::close`]; read on every acquire attempt (a plain
    /// atomic: the token's own check takes a lock).
    closed: AtomicBool,
}

impl Tasks {
    /// Runs `work` in the background on the current runtime, tracked: the
    /// clean-up of a dropped guard or a cancelled call, which must not
    /// wait for its caller. Outside a runtime nothing can run; `what` then
    /// says in a warning what was left undone (and `left` what becomes of
    /// it). Work started after [`Tasks::close`] is still tracked (a
    /// clean-up may start another), and still runs.
    pub(crate) fn detach<F>(&self, what: &'static str, left: &'static str, work: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(self.inner.tracker.track_future(work));
            }
            Err(_) => tracing::warn!("{what} outside a Tokio runtime; {left}"),
        }
    }

    /// Spawns `work` on the current runtime, tracked, and returns its
    /// handle (a call that must finish even if its caller goes away, and
    /// whose result the caller awaits while it stays).
    pub(crate) fn spawn<F>(&self, work: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.inner.tracker.spawn(work)
    }

    /// Counts as one tracked task until dropped: held by a wait while it
    /// may still have to withdraw something from the server, so closing
    /// waits for a wait it woke to finish.
    pub(crate) fn token(&self) -> tokio_util::task::task_tracker::TaskTrackerToken {
        self.inner.tracker.token()
    }

    /// True once [`Tasks::close`] was called.
    pub(crate) fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// Fires when [`Tasks::close`] is called.
    pub(crate) fn stopped(&self) -> tokio_util::sync::WaitForCancellationFutureOwned {
        self.inner.stop.clone().cancelled_owned()
    }

    /// Tasks still running.
    pub(crate) fn len(&self) -> usize {
        self.inner.tracker.len()
    }

    /// Marks the set closed: [`Tasks::stopped`] fires, and
    /// [`Tasks::wait`] can finish.
    pub(crate) fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
        self.inner.stop.cancel();
        self.inner.tracker.close();
    }

    /// After [`Tasks::close`]: waits up to `within` for every tracked
    /// task, those started meanwhile included. True when all finished in
    /// time.
    pub(crate) async fn wait(&self, within: Duration) -> bool {
        tokio::time::timeout(within, self.inner.tracker.wait())
            .await
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn restarts_after_its_runtime_ends() {
        let slot = TaskSlot::default();
        let first = runtime();
        first.block_on(async {
            assert!(slot.ensure(std::future::pending));
            assert!(!slot.ensure(std::future::pending), "still running");
        });
        assert!(slot.is_running());
        drop(first);
        assert!(!slot.is_running(), "the runtime dropped the task");
        runtime().block_on(async {
            assert!(slot.ensure(std::future::pending));
        });
        assert!(!slot.ensure(std::future::pending), "no runtime here");
    }
}
