//! [`SimpleLock`]: the non-reentrant `SET NX PX <token>` lock with a
//! compare-and-delete release, for sharing a lock with clients that use
//! that pattern (Redis's documentation, redis-py's `Lock`).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::Client;
use crate::engine::renewal::Hold;
use crate::engine::undo::{self, Armed, UndoFuture};
use crate::engine::validate;
use crate::engine::wait::{Check, Wait};
use crate::error::{Error, Result};
use crate::lock::LockGuard;
use crate::scripts;

/// Shortest and longest pause between re-checks while waiting: clients of
/// this pattern do not announce releases, so waiters poll (with backoff),
/// and are woken early by releases from locksmith clients.
const POLL_MIN: Duration = Duration::from_millis(20);
const POLL_MAX: Duration = Duration::from_millis(500);

/// A non-reentrant lock stored as a string key holding the holder's random
/// token. Each acquisition uses a fresh token, so acquiring twice through
/// the same handle waits for the first hold like any other contender.
///
/// ```no_run
/// # async fn demo(client: locksmith::Client) -> locksmith::Result<()> {
/// let lock = client.simple_lock("nightly-report")?;
/// if let Some(guard) = lock.try_lock().await? {
///     // ... shared with a Python service using redis-py's Lock ...
///     guard.release().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SimpleLock {
    /// Names and client.
    shared: Arc<Shared>,
    /// Fixed lease, or `None` for a watchdog-renewed default lease.
    lease: Option<Duration>,
}

#[derive(Debug)]
struct Shared {
    /// The client the lock lives in.
    client: Client,
    /// Lock key (and name).
    name: String,
    /// Fencing counter key.
    token_key: String,
    /// Channel locksmith releases publish on.
    channel: String,
}

impl Client {
    /// A handle on the simple (non-reentrant, `SET NX PX`) lock `name`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `name` is empty or too long.
    pub fn simple_lock(&self, name: impl Into<String>) -> Result<SimpleLock> {
        let name = self.checked_name(name)?;
        Ok(SimpleLock {
            shared: Arc::new(Shared {
                client: self.clone(),
                token_key: crate::lock::lock_token(&name),
                channel: crate::lock::lock_channel(&name),
                name,
            }),
            lease: None,
        })
    }
}

impl SimpleLock {
    /// The client the lock lives in (for MultiLock's ordering and routing).
    pub(crate) fn client(&self) -> &Client {
        &self.shared.client
    }

    /// This handle with a fixed lease (no watchdog renewal).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a lease under 10 ms or too long.
    pub fn with_lease(&self, lease: Duration) -> Result<SimpleLock> {
        validate::lease(lease)?;
        Ok(SimpleLock {
            shared: self.shared.clone(),
            lease: Some(lease),
        })
    }

    /// The lock's name (also its key).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    crate::engine::acquire::wait_methods! { observed("simple-lock") acquire_inner() -> LockGuard:
        /// Waits as long as it takes and acquires the lock.
        ///
        /// # Errors
        /// Connection errors and timeouts; [`Error::WrongType`].
        ///
        /// # Cancel safety
        /// Cancel safe: a dropped future leaves nothing behind. Its pub/sub
        /// registration goes with it; a sent attempt whose reply was not read is
        /// undone by a background compare-and-delete with that attempt's own token,
        /// so it removes nothing but that attempt's grant. Until the undo lands the
        /// lock may be held by no guard: about one round trip, or until the lease
        /// ends if Redis is unreachable.
        lock;

        /// Tries once; `None` when the lock is held.
        ///
        /// # Errors
        /// As for [`SimpleLock::lock`].
        ///
        /// # Cancel safety
        /// Cancel safe, as [`SimpleLock::lock`]: a sent attempt whose reply was not
        /// read is undone by a background compare-and-delete with its token.
        try_lock;

        /// Waits at most `wait`.
        ///
        /// # Errors
        /// As for [`SimpleLock::lock`], and [`Error::InvalidArgument`] for a
        /// wait that overflows the clock.
        ///
        /// # Cancel safety
        /// Cancel safe, as [`SimpleLock::lock`]: dropping the future leaves no
        /// registration or grant behind.
        try_lock_for;
    }

    /// Whether anyone holds the lock.
    ///
    /// # Errors
    /// Connection errors and timeouts.
    ///
    /// # Cancel safety
    /// Cancel safe: a read; dropping the future changes nothing.
    pub async fn is_locked(&self) -> Result<bool> {
        super::key_exists(&self.shared.client, &self.shared.name).await
    }

    /// Deletes the lock whoever holds it; returns whether it existed.
    ///
    /// # Errors
    /// Connection errors and timeouts. [`Error::WrongType`] when the key
    /// holds no simple lock, which is left alone: a key of another type (a
    /// lock's hash) or a string without an expiry (a semaphore's or a
    /// latch's count, an application's value: a lock always has a lease).
    /// A string with an expiry is a holder's token, whoever wrote it.
    ///
    /// # Cancel safety
    /// Not cancel safe: if the future is dropped after the command was sent,
    /// the lock may or may not have been deleted (and its waiters woken);
    /// [`SimpleLock::is_locked`] shows where it stands. Nothing else is left
    /// behind.
    pub async fn force_unlock(&self) -> Result<bool> {
        super::force_unlock(
            &self.shared.client,
            &self.shared.name,
            &self.shared.channel,
            "string",
        )
        .await
    }

    fn lease(&self) -> Duration {
        self.lease
            .unwrap_or_else(|| self.shared.client.config().lease)
    }

    async fn acquire_inner(&self, wait: Option<Duration>) -> Result<Option<LockGuard>> {
        let deadline = wait.map(validate::deadline).transpose()?;
        let token = uuid::Uuid::new_v4().simple().to_string();
        // Busy answers are checked again after a growing pause (capped by
        // the holder's lease end), message or not.
        let mut poll = POLL_MIN;
        Wait::on(self.shared.client.hub(), &self.shared.channel)
            .until(deadline)
            .run(|| {
                let pause = poll;
                poll = (poll * 2).min(POLL_MAX);
                let token = &token;
                async move {
                    Ok(match self.attempt(token).await? {
                        Ok(guard) => Check::Done(guard),
                        Err(pttl) => Check::NotYet(Some(Instant::now() + pttl.min(pause))),
                    })
                }
            })
            .await
    }

    /// One acquire call with `token`; `Err(pttl)` when busy. Resent on a
    /// lost reply (the script recognizes its own token); if the future is
    /// dropped mid-call, a background compare-and-delete undoes a grant
    /// that may have landed.
    async fn attempt(&self, token: &str) -> Result<std::result::Result<LockGuard, Duration>> {
        self.shared.client.admit()?;
        let lease = self.lease();
        // Armed from the first send until the reply is read: a grant
        // nobody read is undone by a compare-and-delete with this
        // attempt's own token, which removes nothing else.
        let undo = self.release_later(false, false);
        let tasks = self.shared.client.tasks();
        let mut armed = Armed::new(tasks, UNDOING, token.to_owned(), undo);
        let mut invocation = scripts::SIMPLE_ACQUIRE.prepare_invoke();
        invocation
            .key(&self.shared.name)
            .key(&self.shared.token_key)
            .arg(token)
            .arg(lease.as_millis() as u64);
        // A resend may be answered by a grant an earlier send made: the
        // lease runs from the first send at the latest.
        let sent_at = Instant::now();
        let mut attempt = 0;
        let (status, value): (i64, i64) = loop {
            attempt += 1;
            match self
                .shared
                .client
                .invoke(&invocation, &self.shared.name)
                .await
            {
                Ok(reply) => break reply,
                Err(e) if e.may_resend(attempt) => {}
                Err(e) => {
                    if attempt == 1 && !e.is_reply_lost() {
                        // Redis answered the only send with an error:
                        // nothing was granted.
                        armed.disarm();
                    }
                    return Err(e);
                }
            }
        };
        armed.keep();
        if status != 1 {
            return Ok(Err(match u64::try_from(value) {
                Ok(ms) if ms > 0 => Duration::from_millis(ms),
                _ => POLL_MIN,
            }));
        }
        let registration = self.shared.client.renewer().register(
            Hold {
                key: self.shared.name.as_str().into(),
                script: &scripts::RENEW_TOKEN,
                owner: token.into(),
                lease,
                renew: self.lease.is_none(),
            },
            sent_at,
        );
        Ok(Ok(LockGuard::simple(
            self.clone(),
            token.to_owned(),
            u64::try_from(value).unwrap_or(0),
            registration,
        )))
    }

    /// [`SimpleLock::release_token`], finished in the background if the
    /// future is dropped mid-call or no answer came (the compare-and-delete
    /// is safe to resend: it only ever deletes this token's lock).
    pub(crate) async fn release_token_cancel_safe(
        &self,
        token: String,
        lost_before: bool,
    ) -> Result<()> {
        let finish = self.release_later(true, lost_before);
        let tasks = self.shared.client.tasks();
        let pending = Armed::new(tasks, RELEASING, token.clone(), finish);
        let result = self.release_token(&token, false, lost_before).await;
        match &result {
            // No answer after the resends: dropping the armed release
            // sends it once more from the background (the lease runs out
            // on its own if that fails too).
            Err(e) if e.is_reply_lost() => drop(pending),
            _ => {
                pending.keep();
            }
        }
        result
    }

    /// A compare-and-delete of the armed token, sent from the background
    /// (see [`SimpleLock::release_token`] for `resend` and `lost_before`).
    fn release_later(
        &self,
        resend: bool,
        lost_before: bool,
    ) -> impl FnOnce(String) -> UndoFuture + Send + 'static {
        let lock = self.clone();
        undo::closure(move |token: String| {
            Box::pin(async move {
                let _ = lock.release_token(&token, resend, lost_before).await;
            })
        })
    }

    /// Compare-and-delete with `token` (used by [`LockGuard`]). `resend`
    /// when an earlier call may have landed; `lost_before` when the lease
    /// was known lost before this release started.
    ///
    /// A resend that finds the lock not held by `token` cannot tell by
    /// itself whether its first send freed it or the hold was already gone
    /// (expired, deleted, wiped by a restart): it answers
    /// [`Error::Unconfirmed`], unless the lease was lost before the release
    /// started ([`Error::NotHeld`]) or release receipts are on, which make
    /// the answer exact (the first send leaves one; the resend looks for it).
    pub(crate) async fn release_token(
        &self,
        token: &str,
        resend: bool,
        lost_before: bool,
    ) -> Result<()> {
        let client = &self.shared.client;
        let receipt_ttl = client.receipt_ttl_ms();
        let mut invocation = scripts::SIMPLE_RELEASE.prepare_invoke();
        invocation
            .key(&self.shared.name)
            .key(&self.shared.channel)
            .arg(token)
            .arg(crate::lock::UNLOCK_MESSAGE)
            .arg(client.notify_mode().code())
            .arg(receipt_ttl);
        let mut attempt = 0;
        let mut resent = resend;
        loop {
            attempt += 1;
            match client.invoke::<i64>(&invocation, &self.shared.name).await {
                // Freed by this send, or (its receipt says) by an earlier one.
                Ok(1 | 2) => return Ok(()),
                Ok(_) if resent && !lost_before && receipt_ttl == 0 => {
                    return Err(Error::Unconfirmed {
                        name: self.shared.name.clone(),
                    })
                }
                Ok(_) => {
                    return Err(Error::NotHeld {
                        name: self.shared.name.clone(),
                    })
                }
                Err(e) if e.may_resend(attempt) => {
                    resent = true;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// What undoing a grant nobody read is, for a warning when it cannot run.
const UNDOING: (&str, &str) = (
    "undoing a grant nobody took",
    "the lock stays until its lease runs out",
);

/// What finishing a dropped release is, for a warning when it cannot run.
const RELEASING: (&str, &str) = (
    "releasing for a cancelled release call",
    "the lock stays until its lease runs out",
);
