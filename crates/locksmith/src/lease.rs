//! What a holder knows locally about its lease: when it runs out (by the
//! monotonic clock) and whether it has been lost.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Allowance for the server's clock running faster than ours and for the
/// time the grant took to reach Redis: `lease * 1% + 2 ms`, as in Redlock.
pub(crate) fn drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// The local view of one hold's lease, shared by the guard(s) of the hold
/// and the renewal task.
#[derive(Debug)]
pub(crate) struct LeaseState {
    /// The latest instant at which the lease is still certainly valid:
    /// measured from when the granting or renewing command was *sent*, so it
    /// is never later than the server's own expiry.
    deadline: Mutex<Instant>,
    /// Cancelled once the lease is known (or must be assumed) lost.
    lost: CancellationToken,
}

impl LeaseState {
    /// A lease granted by a command sent at `sent_at`.
    pub(crate) fn new(sent_at: Instant, lease: Duration) -> Self {
        LeaseState {
            deadline: Mutex::new(valid_until(sent_at, lease)),
            lost: CancellationToken::new(),
        }
    }

    /// Records a renewal sent at `sent_at` that the server confirmed.
    pub(crate) fn renewed(&self, sent_at: Instant, lease: Duration) {
        let mut deadline = self.deadline.lock().unwrap_or_else(|e| e.into_inner());
        *deadline = (*deadline).max(valid_until(sent_at, lease));
    }

    /// The instant after which the lease must be assumed gone.
    pub(crate) fn deadline(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Time left until [`LeaseState::deadline`], zero once lost.
    pub(crate) fn remaining(&self) -> Duration {
        if self.is_lost() {
            return Duration::ZERO;
        }
        self.deadline().saturating_duration_since(Instant::now())
    }

    /// Marks the lease lost and fires every [`LostSignal`].
    pub(crate) fn mark_lost(&self) {
        self.lost.cancel();
    }

    /// True once the lease has been lost.
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    /// A signal that fires when this lease is lost.
    pub(crate) fn signal(&self) -> LostSignal {
        LostSignal {
            token: self.lost.clone(),
        }
    }
}

fn valid_until(sent_at: Instant, lease: Duration) -> Instant {
    sent_at + lease.saturating_sub(drift(lease))
}

/// Fires when a held lock's lease is lost: a renewal found the lock gone,
/// or the lease ran out locally before a renewal could be confirmed.
///
/// Cheap to clone; all clones observe the same event. Once fired it stays
/// fired.
///
/// ```no_run
/// # async fn demo(client: locksmith::Client) -> locksmith::Result<()> {
/// let guard = client.lock("reports")?.lock().await?;
/// let lost = guard.lost();
/// tokio::select! {
///     _ = lost.wait() => eprintln!("lease lost; stop writing"),
///     _ = tokio::time::sleep(std::time::Duration::from_secs(5)) => {}
/// }
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LostSignal {
    /// Shared with the lease state; cancelled exactly once, on loss.
    token: CancellationToken,
}

impl LostSignal {
    /// True once the lease has been lost.
    pub fn is_lost(&self) -> bool {
        self.token.is_cancelled()
    }

    /// A future that completes when the lease is lost (at once if it
    /// already was). It owns what it needs, so it can be moved into a task
    /// or used straight in `tokio::select!`.
    pub fn wait(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.token.clone().cancelled_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn deadline_is_conservative_and_only_moves_forward() {
        let start = Instant::now();
        let lease = Duration::from_secs(30);
        let state = LeaseState::new(start, lease);
        assert_eq!(state.deadline(), start + lease - drift(lease));
        state.renewed(start - Duration::from_secs(10), lease);
        assert_eq!(state.deadline(), start + lease - drift(lease));
        tokio::time::advance(Duration::from_secs(10)).await;
        state.renewed(Instant::now(), lease);
        assert!(state.remaining() > Duration::from_secs(29));
        let signal = state.signal();
        assert!(!signal.is_lost());
        state.mark_lost();
        assert!(signal.is_lost());
        assert_eq!(state.remaining(), Duration::ZERO);
        signal.wait().await;
    }
}
