//! The counting semaphore, laid out like Redisson's `RSemaphore`: a string
//! key holding the number of available permits, and the channel
//! `redisson_sc:{NAME}` on which every change announces the new count.
//!
//! A [`Semaphore`] is a handle; [`Semaphore::acquire`] returns
//! [`SemaphorePermits`], a guard that gives its permits back when released
//! or dropped (as `tokio::sync::Semaphore` does). Permits carry no owner
//! and no lease: a process that dies holding them keeps them taken for
//! good, exactly as in Redisson. Where that matters (a crashed worker must
//! not shrink the pool), use [`ExpirableSemaphore`], whose permits have
//! ids and leases (`expirable.rs`).

use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use crate::client::Client;
use crate::engine::batch::{Arg, Batcher, Call};
use crate::engine::guard_core::{Held, Holding};
use crate::engine::notify::Wake;
use crate::engine::task::Tasks;
use crate::engine::validate;
use crate::engine::wait::{Check, Wait};
use crate::error::{Error, Result};
use crate::scripts;

/// A distributed counting semaphore (Redisson's `RSemaphore` layout).
///
/// Handles are cheap to clone; clones share the name. Permits are counted
/// on the server: any process (Rust or Java) holding a handle on the same
/// name takes from the same pool.
///
/// ```no_run
/// # async fn demo(client: locksmith::Client) -> locksmith::Result<()> {
/// let pool = client.semaphore("db-connections")?;
/// pool.try_set_permits(8).await?;           // only the first caller sets it
/// let permits = pool.acquire(1).await?;     // waits for a free permit
/// // ... use the connection ...
/// permits.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore {
    /// Name, keys and client; shared by clones.
    shared: Arc<Shared>,
}

/// What clones of a [`Semaphore`] share.
#[derive(Debug)]
struct Shared {
    /// The client the semaphore lives in.
    client: Client,
    /// The client's batcher of this kind's acquire script, shared by
    /// every handle of the client so concurrent acquires coalesce.
    acquire: Arc<Batcher>,
    /// The semaphore's name: also the key holding its count.
    name: Arc<str>,
    /// Where changes of the count are announced.
    channel: Arc<str>,
}

/// The notify policy of a semaphore channel: the message is the new count
/// of available permits, which wakes as many waiters as it can satisfy.
pub(crate) fn wake_for_permits(payload: &[u8]) -> Wake {
    match std::str::from_utf8(payload)
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
    {
        Some(n) if n > 0 => Wake::Units(n as u64),
        Some(_) => Wake::Nobody,
        // Not a count (someone else's message): let one waiter look.
        None => Wake::One,
    }
}

impl Client {
    /// A handle on the semaphore `name` (Redisson's `RSemaphore` layout).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `name` is empty or longer than the
    /// client's name limit (or has a broken hash tag on a cluster).
    pub fn semaphore(&self, name: impl Into<String>) -> Result<Semaphore> {
        let name = self.checked_name(name)?;
        Ok(Semaphore {
            shared: Arc::new(Shared {
                channel: crate::semaphore::semaphore_channel(&name).into(),
                acquire: self.shared_batcher(&scripts::SEMAPHORE_ACQUIRE),
                client: self.clone(),
                name: name.into(),
            }),
        })
    }
}

/// Outcome of one acquire attempt.
enum Attempt {
    /// The permits were taken.
    Taken,
    /// Not enough permits available.
    Short,
}

impl Semaphore {
    /// The semaphore's name (also its key).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Sets the number of permits to `permits` if the semaphore does not
    /// exist yet; answers whether it did so. Every process of a fleet can
    /// call this at start-up: only the first one sets the count.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for more than 2^53 permits;
    /// [`Error::WrongType`] when the key holds something else; connection
    /// errors and timeouts.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped after the command was sent, the count may
    /// or may not have been set; [`Semaphore::available`] shows which.
    pub async fn try_set_permits(&self, permits: u64) -> Result<bool> {
        validate::settable(permits, "permits")?;
        Ok(self.update("set", permits as i64).await? == 1)
    }

    /// Adds `delta` permits (negative to take some away; the count may go
    /// below zero, and then acquires wait until releases bring it back up),
    /// creating the semaphore at zero first if it does not exist. Answers
    /// the new number of available permits and wakes as many waiters as
    /// they can satisfy.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero `delta` or one beyond ±2^53;
    /// [`Error::WrongType`] when the key holds something else; connection
    /// errors and timeouts.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped after the command was sent, the permits may
    /// or may not have been added. Not resent after a lost reply either (an
    /// addition is not idempotent), so a [`Error::Timeout`] leaves the same
    /// doubt.
    pub async fn add_permits(&self, delta: i64) -> Result<i64> {
        validate::count(delta.unsigned_abs(), "the permits added or removed")?;
        self.update("add", delta).await
    }

    /// Gives back `permits` taken earlier and not held by a guard (see
    /// [`SemaphorePermits::forget`]), or released on behalf of another
    /// process, as Redisson's `release(n)` does: no check that they were
    /// taken. Wakes as many waiters as the new count can satisfy.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for zero permits or more than 2^53;
    /// others as for [`Semaphore::add_permits`].
    ///
    /// # Cancel safety
    /// Cancel safe: the release runs as a task of its own, so dropping this
    /// future does not stop it. (If Redis does not answer, the outcome is
    /// unknown and the error says so; the release is not resent.)
    pub async fn release(&self, permits: u64) -> Result<()> {
        validate::count(permits, "permits")?;
        self.give_back(permits).await
    }

    /// The number of available permits (0 when the semaphore does not
    /// exist; negative after [`Semaphore::add_permits`] took away more than
    /// were available).
    ///
    /// # Errors
    /// [`Error::WrongType`] when the key is not a semaphore; connection
    /// errors and timeouts.
    ///
    /// # Cancel safety
    /// Cancel safe: a read.
    pub async fn available(&self) -> Result<i64> {
        let mut conn = self.shared.client.connection();
        let value: Option<String> = redis::cmd("GET")
            .arg(&*self.shared.name)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.map_err(e))?;
        match value {
            None => Ok(0),
            Some(v) => v.parse().map_err(|_| self.not_a_count()),
        }
    }

    /// Takes every available permit at once and answers how many that was
    /// (the permits are not tied to a guard: give them back with
    /// [`Semaphore::release`]).
    ///
    /// # Errors
    /// [`Error::WrongType`] when the key is not a semaphore; connection
    /// errors and timeouts.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped after the command was sent, the permits may
    /// have been taken with nobody told how many.
    pub async fn drain(&self) -> Result<i64> {
        self.update("drain", 0).await
    }

    /// Waits until `permits` permits are available and takes them.
    ///
    /// Waiters of one client queue in order: a release wakes as many of
    /// them as the new count can satisfy, and a large request is not
    /// overtaken by smaller ones behind it in the same client. An acquire
    /// on a semaphore that was never set waits for it to be set.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for zero permits or more than 2^53;
    /// [`Error::WrongType`] when the key is not a semaphore;
    /// [`Error::NotReplicated`] when replica acknowledgement is on and too
    /// few replicas saw the grant (the permits were given back); connection
    /// errors and timeouts. An acquire is never resent: after a timeout the
    /// permits may have been taken with no guard to give them back (as in
    /// Redisson); permits with leases do not have this weakness.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future leaves its queue place and pub/sub
    /// registration; a request not yet sent is withdrawn, and permits taken
    /// by a request whose reply was never read are given back as soon as
    /// that reply arrives.
    pub async fn acquire(&self, permits: u64) -> Result<SemaphorePermits> {
        loop {
            if let Some(taken) = self.acquire_within(permits, None).await? {
                return Ok(taken);
            }
        }
    }

    /// Takes `permits` permits if they are available now; `None` otherwise.
    ///
    /// # Errors
    /// As for [`Semaphore::acquire`].
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Semaphore::acquire`].
    pub async fn try_acquire(&self, permits: u64) -> Result<Option<SemaphorePermits>> {
        self.acquire_within(permits, Some(Duration::ZERO)).await
    }

    /// Waits at most `wait` for `permits` permits; `None` when they did not
    /// become available in time.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `wait` overflows the clock; others as
    /// for [`Semaphore::acquire`].
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Semaphore::acquire`].
    pub async fn try_acquire_for(
        &self,
        permits: u64,
        wait: Duration,
    ) -> Result<Option<SemaphorePermits>> {
        self.acquire_within(permits, Some(wait)).await
    }

    /// Tries, then waits on the channel (see [`NotifyHub::wait_on`]).
    ///
    /// [`NotifyHub::wait_on`]: crate::engine::notify::NotifyHub::wait_on
    async fn acquire_within(
        &self,
        permits: u64,
        wait: Option<Duration>,
    ) -> Result<Option<SemaphorePermits>> {
        let labels = self.shared.client.labels("semaphore", self.name());
        crate::engine::observe::acquire(labels, self.name(), self.acquire_inner(permits, wait))
            .await
    }

    async fn acquire_inner(
        &self,
        permits: u64,
        wait: Option<Duration>,
    ) -> Result<Option<SemaphorePermits>> {
        validate::count(permits, "permits")?;
        let deadline = wait.map(validate::deadline).transpose()?;
        let client = &self.shared.client;
        Wait::on(client.hub(), &self.shared.channel)
            .policy(wake_for_permits, permits)
            .until(deadline)
            .recheck(client.config().recheck_interval)
            .run(|| async {
                Ok(match self.attempt(permits).await? {
                    Attempt::Taken => Check::Done(self.permits(permits)),
                    Attempt::Short => Check::NotYet(None),
                })
            })
            .await
    }

    /// One acquire script call (batched with this client's other acquires).
    async fn attempt(&self, permits: u64) -> Result<Attempt> {
        let shared = &self.shared;
        shared.client.admit()?;
        let call = Call::new(1, [Arg::Text(shared.name.clone()), Arg::Int(permits)]);
        let undo = self.clone();
        let (reply, acked): (Vec<i64>, Option<u32>) = shared
            .acquire
            .call_undoable(call, move |reply| {
                // Unknown outcome (None): nothing safe to do, as the acquire
                // is not idempotent (see the method docs).
                if reply.as_ref().is_some_and(taken) {
                    let tasks = undo.shared.client.tasks().clone();
                    tasks.detach(
                        "giving back the permits of a cancelled acquire",
                        "they stay taken",
                        async move {
                            if let Err(e) = undo.give_back(permits).await {
                                tracing::warn!(semaphore = %undo.name(), error = %e, "giving back the permits of a cancelled acquire failed");
                            }
                        },
                    );
                }
            })
            .await
            .map_err(|e| self.map_err(e))?;
        match reply.as_slice() {
            [1, _] => {
                let acks = shared.client.acks();
                if acks.short(acked) {
                    metrics::counter!("locksmith_grants_not_replicated_total").increment(1);
                    self.give_back(permits).await?;
                    return Err(Error::NotReplicated {
                        name: shared.name.to_string(),
                        acked: acked.unwrap_or(0),
                        wanted: acks.min,
                    });
                }
                Ok(Attempt::Taken)
            }
            [0, _] => Ok(Attempt::Short),
            _ => Err(Error::protocol(format!(
                "unexpected reply {reply:?} from the semaphore acquire script"
            ))),
        }
    }

    /// Adds `permits` back and announces the new count, from a task of its
    /// own so that a dropped caller cannot interrupt it.
    async fn give_back(&self, permits: u64) -> Result<()> {
        let this = self.clone();
        let task = self
            .shared
            .client
            .tasks()
            .spawn(async move { this.update("add", permits as i64).await });
        match task.await {
            Ok(result) => result.map(drop),
            Err(e) => Err(Error::internal(format!("the release task failed: {e}"))),
        }
    }

    /// Runs `semaphore_update.lua` with `op` and `amount`.
    async fn update(&self, op: &'static str, amount: i64) -> Result<i64> {
        let shared = &self.shared;
        let keys = [&*shared.name, &*shared.channel];
        let args = (op, amount, shared.client.notify_mode().code());
        shared
            .client
            .run_script(&scripts::SEMAPHORE_UPDATE, &keys, args)
            .await
    }

    /// A guard for `permits` just taken.
    fn permits(&self, permits: u64) -> SemaphorePermits {
        let labels = self.shared.client.labels("semaphore", self.name());
        let taken = Taken {
            semaphore: self.clone(),
            permits,
        };
        SemaphorePermits {
            held: Held::new(taken, labels, None, ()),
        }
    }

    fn map_err(&self, err: redis::RedisError) -> Error {
        self.shared.client.map_err(err, Some(&self.shared.name))
    }

    fn not_a_count(&self) -> Error {
        Error::WrongType {
            key: self.shared.name.to_string(),
        }
    }
}

/// True when a raw acquire reply says the permits were taken.
fn taken(reply: &Value) -> bool {
    matches!(reply, Value::Array(items) if matches!(items.first(), Some(Value::Int(1))))
}

/// Permits taken from a [`Semaphore`]; given back when released or dropped.
///
/// Plain semaphore permits have no lease, so there is no fencing token or
/// lost signal: nothing on the server can take them away.
#[derive(Debug)]
#[must_use = "dropping the permits gives them back"]
pub struct SemaphorePermits {
    /// The permits, until given back or forgotten.
    held: Held<Taken, ()>,
}

/// Permits taken from a semaphore.
#[derive(Debug)]
struct Taken {
    semaphore: Semaphore,
    permits: u64,
}

impl Holding for Taken {
    const DROPPED: (&'static str, &'static str) = ("semaphore permits dropped", "they stay taken");

    fn name(&self) -> &str {
        self.semaphore.name()
    }

    fn tasks(&self) -> &Tasks {
        self.semaphore.shared.client.tasks()
    }

    async fn release(self) -> Result<()> {
        self.semaphore.give_back(self.permits).await
    }
}

impl crate::engine::observe::Grant for SemaphorePermits {}

impl SemaphorePermits {
    /// How many permits this guard holds.
    pub fn permits(&self) -> u64 {
        self.held.holding().map_or(0, |taken| taken.permits)
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        self.held.name()
    }

    /// Gives the permits back and wakes as many waiters as they satisfy.
    ///
    /// # Errors
    /// Connection errors and timeouts (the outcome is then unknown: the
    /// release is not resent, as it is not idempotent).
    ///
    /// # Cancel safety
    /// Cancel safe: the release runs as a task of its own.
    pub async fn release(self) -> Result<()> {
        self.held.release().await
    }

    /// Keeps the permits taken without a guard (as
    /// `tokio::sync::SemaphorePermit::forget`); give them back later with
    /// [`Semaphore::release`]. Answers how many they were.
    pub fn forget(self) -> u64 {
        self.held.forget().map_or(0, |taken| taken.permits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_wake_by_permits() {
        assert_eq!(wake_for_permits(b"3"), Wake::Units(3));
        assert_eq!(wake_for_permits(b"0"), Wake::Nobody);
        assert_eq!(wake_for_permits(b"-2"), Wake::Nobody);
        assert_eq!(wake_for_permits(b"hello"), Wake::One);
    }
}
