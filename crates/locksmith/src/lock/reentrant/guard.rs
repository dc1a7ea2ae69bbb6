//! [`LockGuard`]: proof of a held lock, released on drop.

use std::sync::Arc;
use std::time::Duration;

use crate::engine::counted::HoldState;
use crate::engine::guard_core::{Held, Holding};
use crate::engine::lease::LeaseState;
use crate::engine::observe::Grant;
use crate::engine::renewal::Registration;
use crate::engine::task::Tasks;
use crate::error::{Error, Result};
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
    /// The hold: what to release, the fencing token, the lease view.
    held: Held<Holder>,
}

/// The lock a guard holds. A counted kind's guard keeps the episode of the
/// owner's hold it was granted in (see `HoldState::episode`): its release
/// ends a hold of that episode only, never a later one of the same owner.
#[derive(Debug)]
enum Holder {
    /// One hold count of a reentrant lock owner, and its episode.
    Reentrant(Lock, u64),
    /// One hold count of a fair lock owner, and its episode.
    Fair(FairLock, u64),
    /// One read or write hold of a read-write lock owner, and its episode.
    ReadWrite(ReadWriteLock, Side, u64),
    /// A simple lock held under a random token; the registration keeps the
    /// watchdog (or expiry timer) running for it.
    Simple {
        lock: SimpleLock,
        token: String,
        _registration: Registration,
    },
}

impl LockGuard {
    /// A guard of `holder`'s hold, counted as a `kind` hold.
    fn held(holder: Holder, kind: &'static str, token: u64, lease: Arc<LeaseState>) -> Self {
        let labels = holder.client().labels(kind, holder.name());
        LockGuard {
            held: Held::new(holder, labels, Some(token), lease),
        }
    }

    pub(crate) fn reentrant(lock: Lock, token: u64, episode: u64, lease: Arc<LeaseState>) -> Self {
        Self::held(Holder::Reentrant(lock, episode), "lock", token, lease)
    }

    /// The owner's hold episode this guard was granted in (counted kinds).
    pub(crate) fn episode(&self) -> Option<u64> {
        match self.held.holding()? {
            Holder::Reentrant(_, episode) | Holder::Fair(_, episode) => Some(*episode),
            Holder::ReadWrite(_, _, episode) => Some(*episode),
            Holder::Simple { .. } => None,
        }
    }

    pub(crate) fn fair(lock: FairLock, token: u64, episode: u64, lease: Arc<LeaseState>) -> Self {
        Self::held(Holder::Fair(lock, episode), "fair-lock", token, lease)
    }

    pub(crate) fn read_write(
        lock: ReadWriteLock,
        side: Side,
        token: u64,
        episode: u64,
        lease: Arc<LeaseState>,
    ) -> Self {
        let kind = match side {
            Side::Read => "read-lock",
            Side::Write => "write-lock",
        };
        Self::held(Holder::ReadWrite(lock, side, episode), kind, token, lease)
    }

    pub(crate) fn simple(
        lock: SimpleLock,
        token: String,
        fencing: u64,
        registration: Registration,
    ) -> Self {
        let lease = registration.state().clone();
        let holder = Holder::Simple {
            lock,
            token,
            _registration: registration,
        };
        Self::held(holder, "simple-lock", fencing, lease)
    }

    /// The fencing token of this grant: strictly larger than that of every
    /// earlier grant of the same lock from free. Reentrant holds of one
    /// owner share their first grant's token.
    pub fn fencing_token(&self) -> u64 {
        self.held.token()
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.held.name()
    }

    /// Moves the lease's end forward to `lease` from now, for a hold with
    /// a fixed lease (taken through `with_lease`): only while the hold is
    /// still this guard's, and never earlier than the server's current
    /// end. The local lease view ([`LockGuard::remaining_lease`]) follows.
    /// For a counted kind the lease is the owner's, so it covers the
    /// owner's other holds of the lock too (a read-write lock's reader:
    /// its read holds, as the watchdog renews them).
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the hold is lost (its lease ran out, it was
    /// force-unlocked) or this guard's hold has ended; then nothing is
    /// extended. [`Error::InvalidArgument`] for a watchdog-renewed hold
    /// (the watchdog keeps its lease) or a lease under 10 ms or beyond
    /// what Redis accepts. [`Error::Closed`] once the client closed.
    /// Connection errors and timeouts: then the local lease view is left
    /// as it was (the server may or may not have moved its end; the view
    /// never runs past it).
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped call changes nothing locally; if its command
    /// reached Redis the lease on the server ends later than the local
    /// view says, which errs on the safe side.
    ///
    /// ```no_run
    /// # async fn demo(client: locksmith::Client) -> locksmith::Result<()> {
    /// use std::time::Duration;
    /// let lock = client.lock("report")?.with_lease(Duration::from_secs(10))?;
    /// let guard = lock.lock().await?;
    /// // ... the work takes longer than planned:
    /// guard.extend(Duration::from_secs(10)).await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        let Some(holder) = self.held.holding() else {
            return Err(Error::NotHeld {
                name: self.name().to_owned(),
            });
        };
        let extended = match holder {
            Holder::Reentrant(lock, episode) => lock.extend_hold(*episode, lease).await?,
            Holder::Fair(lock, episode) => lock.extend_hold(*episode, lease).await?,
            Holder::ReadWrite(lock, side, episode) => {
                lock.extend_hold(*side, *episode, lease).await?
            }
            Holder::Simple {
                lock,
                _registration: registration,
                ..
            } => registration.extend(lock.client(), lease).await?,
        };
        if extended {
            Ok(())
        } else {
            Err(Error::NotHeld {
                name: self.name().to_owned(),
            })
        }
    }

    /// Releases this hold.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the lock had already been lost (expired or
    /// force-unlocked): whatever it protected may have been touched by
    /// another holder since. That answer stays even when the same handle
    /// has taken the lock again meanwhile: a guard releases only the hold
    /// it was granted, never a later one of its owner. [`Error::Unconfirmed`] when the release's
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
    pub async fn release(self) -> Result<()> {
        self.held.release().await
    }
}

impl Holder {
    /// The client the hold belongs to.
    fn client(&self) -> &crate::Client {
        match self {
            Holder::Reentrant(lock, _) => lock.client(),
            Holder::Fair(lock, _) => lock.client(),
            Holder::ReadWrite(lock, ..) => lock.client(),
            Holder::Simple { lock, .. } => lock.client(),
        }
    }
}

impl Holding for Holder {
    const DROPPED: (&'static str, &'static str) = (
        "lock guard dropped",
        "the lock stays until its lease runs out",
    );

    fn name(&self) -> &str {
        match self {
            Holder::Reentrant(lock, _) => lock.name(),
            Holder::Fair(lock, _) => lock.name(),
            Holder::ReadWrite(lock, ..) => lock.name(),
            Holder::Simple { lock, .. } => lock.name(),
        }
    }

    fn tasks(&self) -> &Tasks {
        self.client().tasks()
    }

    fn abandon(&self) -> bool {
        match self {
            Holder::Reentrant(lock, episode) => {
                HoldState::abandon(&lock.shared.state, HoldState::whole, *episode)
            }
            Holder::Fair(lock, episode) => lock.abandon(*episode),
            Holder::ReadWrite(lock, side, episode) => lock.abandon(*side, *episode),
            // Its watchdog entry goes with the holding.
            Holder::Simple { .. } => true,
        }
    }

    /// Releases the hold. Cancel safe (see [`LockGuard::release`]).
    async fn release(self) -> Result<()> {
        match self {
            Holder::Reentrant(lock, episode) => lock.release_one(episode).await,
            Holder::Fair(lock, episode) => lock.release_one(episode).await,
            Holder::ReadWrite(lock, side, episode) => lock.release_one(side, episode).await,
            Holder::Simple {
                lock,
                token,
                _registration: registration,
            } => {
                // Lost before the release by the same rule as the counted
                // kinds: the lease had run out on the server (its local
                // deadline plus the longest the server's expiry may come
                // after it) before the first send.
                let slack = lock.client().release_rules().expiry_slack;
                let lost_before =
                    registration.state().deadline() + slack <= tokio::time::Instant::now();
                // The registration goes with this future: the lease is no
                // longer renewed once the release has started.
                lock.release_token_cancel_safe(token, lost_before).await
            }
        }
    }
}

impl Grant for LockGuard {
    fn token(&self) -> Option<u64> {
        Some(self.held.token())
    }
}

crate::engine::guard_core::lease_view!(
    LockGuard,
    remaining = "The lease left as known locally (monotonic clock, conservative: \
        measured from when the granting or renewing command was sent). Zero \
        once the lease is lost.",
    lost = "True once the lease is known or assumed lost. Checks the local \
        deadline itself, so it does not depend on the watchdog task running.",
    signal = "A signal that fires when the lease is lost: a renewal found the lock \
        gone, or the lease ran out locally before a renewal was confirmed.",
);
