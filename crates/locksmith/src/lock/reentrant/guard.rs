//! [`LockGuard`]: proof of a held lock, released on drop.

use std::sync::Arc;

use crate::engine::lease::LeaseState;
use crate::engine::observe::{Grant, Hold};
use crate::engine::renewal::Registration;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::lock::rw::Side;
use crate::lock::simple::SimpleLock;
use crate::lock::{FairLock, Lock, ReadWriteLock};

/// A held lock. Release it with [`LockGuard::release`] to learn whether the
/// lock was still held; dropping the guard releases it in the background
/// (best effort, needs a Tokio runtime).
///
/// A guard carries the grant's fencing token: pass it to the resource you
/// protect and have it reject tokens smaller than the largest it has seen.
/// That is what keeps a holder that lost its lease (paused, partitioned)
/// from doing damage. See docs/safety.md.
#[derive(Debug)]
#[must_use = "dropping the guard releases the lock"]
pub struct LockGuard {
    /// What to release; `None` once handed to a release.
    holder: Option<Holder>,
    /// Fencing token of this grant.
    token: u64,
    /// Local lease view, shared with the watchdog.
    lease: Arc<LeaseState>,
    /// Metrics of this hold (grant to release).
    hold: Option<Hold>,
}

/// The lock a guard holds.
#[derive(Debug)]
enum Holder {
    /// One hold count of a reentrant lock owner.
    Reentrant(Lock),
    /// One hold count of a fair lock owner.
    Fair(FairLock),
    /// One read or write hold of a read-write lock owner.
    ReadWrite(ReadWriteLock, Side),
    /// A simple lock held under a random token; the registration keeps the
    /// watchdog (or expiry timer) running for it.
    Simple {
        lock: SimpleLock,
        token: String,
        _registration: Registration,
    },
}

impl LockGuard {
    /// A guard of `holder`'s hold, with its metrics `hold`.
    fn held(holder: Holder, hold: Hold, token: u64, lease: Arc<LeaseState>) -> Self {
        LockGuard {
            holder: Some(holder),
            token,
            lease,
            hold: Some(hold),
        }
    }

    pub(crate) fn reentrant(lock: Lock, token: u64, lease: Arc<LeaseState>) -> Self {
        let hold = Hold::new(lock.client().labels("lock", lock.name()), lock.name());
        Self::held(Holder::Reentrant(lock), hold, token, lease)
    }

    pub(crate) fn fair(lock: FairLock, token: u64, lease: Arc<LeaseState>) -> Self {
        let hold = Hold::new(lock.client().labels("fair-lock", lock.name()), lock.name());
        Self::held(Holder::Fair(lock), hold, token, lease)
    }

    pub(crate) fn read_write(
        lock: ReadWriteLock,
        side: Side,
        token: u64,
        lease: Arc<LeaseState>,
    ) -> Self {
        let kind = match side {
            Side::Read => "read-lock",
            Side::Write => "write-lock",
        };
        let hold = Hold::new(lock.client().labels(kind, lock.name()), lock.name());
        Self::held(Holder::ReadWrite(lock, side), hold, token, lease)
    }

    pub(crate) fn simple(
        lock: SimpleLock,
        token: String,
        fencing: u64,
        registration: Registration,
    ) -> Self {
        let hold = Hold::new(
            lock.client().labels("simple-lock", lock.name()),
            lock.name(),
        );
        LockGuard {
            lease: registration.state().clone(),
            hold: Some(hold),
            holder: Some(Holder::Simple {
                lock,
                token,
                _registration: registration,
            }),
            token: fencing,
        }
    }

    /// The fencing token of this grant: strictly larger than that of every
    /// earlier grant of the same lock from free. Reentrant holds of one
    /// owner share their first grant's token.
    pub fn fencing_token(&self) -> u64 {
        self.token
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        match &self.holder {
            Some(Holder::Reentrant(lock)) => lock.name(),
            Some(Holder::Fair(lock)) => lock.name(),
            Some(Holder::ReadWrite(lock, _)) => lock.name(),
            Some(Holder::Simple { lock, .. }) => lock.name(),
            None => "",
        }
    }

    /// Releases this hold.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the lock had already been lost (expired or
    /// force-unlocked): whatever it protected may have been touched by
    /// another holder since. [`Error::Unconfirmed`] when the release's
    /// reply was lost and its resend found the hold gone without a way to
    /// tell whether the first send released it or it had been lost before
    /// (see [`ClientBuilder::release_receipts`](crate::ClientBuilder::release_receipts)
    /// for an exact answer); the lock is not held either way. Connection errors and timeouts when Redis
    /// cannot be reached even after resending: the hold is then given up
    /// locally (the watchdog stops renewing it, so the lease runs out on
    /// its own), and the release keeps being resent in the background until
    /// Redis answers or the lease is over, so the lock is freed as soon as
    /// Redis is reachable again. The handle's next call waits for that.
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped before it completes, the
    /// release is finished in the background, after the call in flight (if
    /// any) has settled; the release scripts recognize a resend, so the
    /// hold is released exactly once and the owner's hold count stays in
    /// step with the server's.
    pub async fn release(mut self) -> Result<()> {
        let hold = self.hold.take();
        let release = async {
            match self.holder.take() {
                Some(holder) => holder.release().await,
                None => Ok(()),
            }
        };
        match hold {
            Some(hold) => hold.release(Some(self.token), release).await,
            None => release.await,
        }
    }
}

impl Holder {
    /// The client the hold belongs to.
    fn client(&self) -> &crate::Client {
        match self {
            Holder::Reentrant(lock) => lock.client(),
            Holder::Fair(lock) => lock.client(),
            Holder::ReadWrite(lock, _) => lock.client(),
            Holder::Simple { lock, .. } => lock.client(),
        }
    }

    /// Releases the hold. Cancel safe (see [`LockGuard::release`]).
    async fn release(self) -> Result<()> {
        match self {
            Holder::Reentrant(lock) => lock.release_one().await,
            Holder::Fair(lock) => lock.release_one().await,
            Holder::ReadWrite(lock, side) => lock.release_one(side).await,
            Holder::Simple {
                lock,
                token,
                _registration: registration,
            } => {
                let lost_before = registration.state().is_lost();
                // The registration goes with this future: the lease is no
                // longer renewed once the release has started.
                lock.release_token_cancel_safe(token, lost_before).await
            }
        }
    }
}

impl Grant for LockGuard {
    fn token(&self) -> Option<u64> {
        Some(self.token)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let Some(holder) = self.holder.take() else {
            return;
        };
        let tasks = holder.client().tasks().clone();
        tasks.detach(
            "lock guard dropped",
            "the lock stays until its lease runs out",
            async move {
                if let Err(e) = holder.release().await {
                    tracing::warn!(error = %e, "release of a dropped lock guard failed");
                }
            },
        );
    }
}

crate::engine::lease::lease_view!(
    LockGuard,
    remaining = "The lease left as known locally (monotonic clock, conservative: \
        measured from when the granting or renewing command was sent). Zero \
        once the lease is lost.",
    lost = "True once the lease is known or assumed lost. Checks the local \
        deadline itself, so it does not depend on the watchdog task running.",
    signal = "A signal that fires when the lease is lost: a renewal found the lock \
        gone, or the lease ran out locally before a renewal was confirmed.",
);
