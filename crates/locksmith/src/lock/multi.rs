//! MultiLock: several reentrant locks taken all or nothing, held and
//! released together under one guard.
//!
//! Members are acquired one after another in one canonical order (by
//! name) that every MultiLock of every client uses, so
//! two MultiLocks over overlapping names never wait for each other in a
//! cycle. If a member cannot be had in time, or an error occurs, every
//! member already taken is released before the call returns. Each member
//! keeps its own lease, watchdog renewal and fencing token.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

use super::{Lock, LockGuard};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::validate;

/// Several reentrant locks taken all or nothing (see the module docs).
///
/// ```no_run
/// # async fn demo(client: locksmith::Client) -> locksmith::Result<()> {
/// let transfer = client.multi_lock(["account:17", "account:42"])?;
/// let guard = transfer.lock().await?;        // both, or neither
/// for (name, token) in guard.fencing_tokens() {
///     println!("{name}: token {token}");
/// }
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MultiLock {
    /// The members, in canonical order; each a handle with its own owner.
    locks: Vec<Lock>,
}

impl Client {
    /// A MultiLock over the reentrant locks `names` (each member a new
    /// owner, as from [`Client::lock`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for no names, a name given twice, or a
    /// name that [`Client::lock`] refuses.
    pub fn multi_lock<I, S>(&self, names: I) -> Result<MultiLock>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut names: Vec<String> = names.into_iter().map(Into::into).collect();
        if names.is_empty() {
            return Err(Error::invalid("a MultiLock needs at least one lock name"));
        }
        // The canonical order every MultiLock uses: by name.
        names.sort();
        if let Some(pair) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(Error::invalid(format!(
                "lock name {:?} is given twice to one MultiLock",
                pair[0]
            )));
        }
        let locks = names
            .into_iter()
            .map(|name| self.lock(name))
            .collect::<Result<Vec<_>>>()?;
        Ok(MultiLock { locks })
    }
}

impl MultiLock {
    /// The same members with a fixed lease each (not renewed).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a lease under 10 ms or beyond what
    /// Redis accepts.
    pub fn with_lease(&self, lease: Duration) -> Result<MultiLock> {
        Ok(MultiLock {
            locks: self
                .locks
                .iter()
                .map(|l| l.with_lease(lease))
                .collect::<Result<_>>()?,
        })
    }

    /// The member names, in the canonical order they are acquired.
    pub fn names(&self) -> Vec<&str> {
        self.locks.iter().map(Lock::name).collect()
    }

    /// Waits as long as it takes and acquires every member.
    ///
    /// # Errors
    /// As for [`Lock::lock`]; members taken before the error are released.
    ///
    /// # Cancel safety
    /// Cancel safe: members already taken are released in the background
    /// (their guards are dropped), and the member being acquired is
    /// cancelled as [`Lock::lock`] is.
    pub async fn lock(&self) -> Result<MultiGuard> {
        loop {
            // Without a deadline `acquire` only returns with every member.
            if let Some(guard) = self.acquire(None).await? {
                return Ok(guard);
            }
        }
    }

    /// Takes every member if all are free now; `None` (nothing held)
    /// otherwise.
    ///
    /// # Errors
    /// As for [`MultiLock::lock`].
    ///
    /// # Cancel safety
    /// Cancel safe, as [`MultiLock::lock`].
    pub async fn try_lock(&self) -> Result<Option<MultiGuard>> {
        self.acquire(Some(Duration::ZERO)).await
    }

    /// Waits at most `wait` for every member; `None` (nothing held) when
    /// they could not all be had in time.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `wait` overflows the clock; others as
    /// for [`MultiLock::lock`].
    ///
    /// # Cancel safety
    /// Cancel safe, as [`MultiLock::lock`].
    pub async fn try_lock_for(&self, wait: Duration) -> Result<Option<MultiGuard>> {
        self.acquire(Some(wait)).await
    }

    /// As [`MultiLock::try_lock_for`] (`wait` of `None`: as long as it
    /// takes), but also gives up when `cancel` completes: the members taken
    /// so far are then released, and the release awaited, before this
    /// returns `None`. Use it where a dropped future's background release
    /// might not get to run (a program about to exit on a signal).
    ///
    /// # Errors
    /// As for [`MultiLock::try_lock_for`].
    ///
    /// # Cancel safety
    /// Cancel safe, as [`MultiLock::lock`].
    pub async fn acquire_unless(
        &self,
        wait: Option<Duration>,
        cancel: impl Future<Output = ()>,
    ) -> Result<Option<MultiGuard>> {
        let mut cancel = std::pin::pin!(cancel);
        self.acquire_within(wait, cancel.as_mut()).await
    }

    /// Acquires the members in canonical order; on a member not had in
    /// time, an error or `cancel`, releases those taken. A member whose
    /// (fixed) lease ran out while later members were awaited makes the
    /// whole set start over, so every member of a returned guard is held.
    async fn acquire(&self, wait: Option<Duration>) -> Result<Option<MultiGuard>> {
        let never = std::pin::pin!(std::future::pending::<()>());
        self.acquire_within(wait, never).await
    }

    async fn acquire_within(
        &self,
        wait: Option<Duration>,
        mut cancel: Pin<&mut impl Future<Output = ()>>,
    ) -> Result<Option<MultiGuard>> {
        let deadline = wait.map(validate::deadline).transpose()?;
        loop {
            let mut held = Vec::with_capacity(self.locks.len());
            for lock in &self.locks {
                let step = async {
                    match deadline {
                        None => lock.lock().await.map(Some),
                        Some(d) => {
                            let left = d.saturating_duration_since(Instant::now());
                            if left.is_zero() {
                                lock.try_lock().await
                            } else {
                                lock.try_lock_for(left).await
                            }
                        }
                    }
                };
                let got = tokio::select! {
                    biased;
                    () = cancel.as_mut() => {
                        give_back(held).await;
                        return Ok(None);
                    }
                    got = step => got,
                };
                match got {
                    Ok(Some(guard)) => held.push(guard),
                    Ok(None) => {
                        give_back(held).await;
                        return Ok(None);
                    }
                    Err(e) => {
                        give_back(held).await;
                        return Err(e);
                    }
                }
            }
            if !held.iter().any(LockGuard::is_lost) {
                return Ok(Some(MultiGuard { guards: held }));
            }
            give_back(held).await;
            if deadline.is_some_and(|d| d <= Instant::now()) {
                return Ok(None);
            }
        }
    }
}

/// Releases the members taken by an acquire that failed; a release that
/// fails is finished by the lock's own background settling (see
/// [`LockGuard::release`]), so it is only logged here.
async fn give_back(guards: Vec<LockGuard>) {
    if let Err(e) = release_all(guards).await {
        tracing::debug!(error = %e, "releasing the members of a failed MultiLock acquire");
    }
}

/// Releases `guards` in reverse order; answers the first error.
async fn release_all(guards: Vec<LockGuard>) -> Result<()> {
    let mut first = Ok(());
    for guard in guards.into_iter().rev() {
        if let Err(e) = guard.release().await {
            if first.is_ok() {
                first = Err(e);
            }
        }
    }
    first
}

/// Every member of a [`MultiLock`], held. Dropping it releases them all
/// (in the background).
#[derive(Debug)]
#[must_use = "dropping the guard releases every member"]
pub struct MultiGuard {
    /// The members' guards, in canonical order.
    guards: Vec<LockGuard>,
}

impl MultiGuard {
    /// Each member's name and fencing token, in canonical order.
    pub fn fencing_tokens(&self) -> Vec<(&str, u64)> {
        self.guards
            .iter()
            .map(|g| (g.name(), g.fencing_token()))
            .collect()
    }

    /// The members' guards.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// True once any member's lease is lost.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// A future that completes when any member's lease is lost.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping it changes nothing.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut waits: Vec<Pin<Box<dyn Future<Output = ()> + Send>>> = self
            .guards
            .iter()
            .map(|g| Box::pin(g.lost().wait()) as Pin<Box<dyn Future<Output = ()> + Send>>)
            .collect();
        std::future::poll_fn(move |cx| {
            for wait in &mut waits {
                if wait.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(());
                }
            }
            Poll::Pending
        })
    }

    /// Releases every member (in reverse order); all are released even if
    /// one fails.
    ///
    /// # Errors
    /// The first member's error ([`Error::NotHeld`] for a member whose
    /// lease was lost, connection errors).
    ///
    /// # Cancel safety
    /// Cancel safe: members not released yet are released in the
    /// background when the future is dropped.
    pub async fn release(self) -> Result<()> {
        release_all(self.guards).await
    }
}
