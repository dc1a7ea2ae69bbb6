//! The permit-expirable semaphore, laid out like Redisson's
//! `RPermitExpirableSemaphore`: the string `NAME` holds the available
//! permits, the zset `{NAME}:timeout` maps every taken permit's id to the
//! moment its lease runs out, and changes are announced on
//! `redisson_sc:{NAME}` like the plain semaphore's.
//!
//! Each [`Permit`] has an id and a lease. A holder that crashes keeps its
//! permit only until the lease runs out; then the next operation on the
//! semaphore returns it to the pool. Leases are measured on the server's
//! clock (`TIME`), and renewed by the client's watchdog unless fixed.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::Client;
use crate::engine::batch::{Arg, Batcher, Call};
use crate::engine::guard_core::{Held, Holding};
use crate::engine::renewal::{Hold, Registration};
use crate::engine::task::Tasks;
use crate::engine::wait::{Check, Wait};
use crate::engine::{keys, validate};
use crate::error::{Error, Result};
use crate::scripts;
use crate::semaphore::wake_for_permits;

/// A distributed semaphore whose permits have ids and leases (Redisson's
/// `RPermitExpirableSemaphore` layout).
///
/// Use it where a holder may die holding a permit: its permit comes back
/// when its lease runs out, instead of shrinking the pool for good. The
/// watchdog renews the lease of every permit this client holds (every
/// third of the client's lease) unless [`ExpirableSemaphore::with_lease`]
/// fixes it.
///
/// ```no_run
/// # async fn demo(client: locksmith::Client) -> locksmith::Result<()> {
/// let workers = client.expirable_semaphore("encoders")?;
/// workers.try_set_permits(4).await?;
/// let permit = workers.acquire().await?;     // renewed while held
/// println!("permit {}", permit.id());
/// // ... work; permit.lost() fires if the lease could not be kept ...
/// permit.release().await?;                   // Err if the lease had run out
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ExpirableSemaphore {
    /// Name, keys and client; shared by clones.
    shared: Arc<Shared>,
    /// A fixed lease for permits taken through this handle, or `None` for
    /// a watchdog-renewed lease of the client's default length.
    lease: Option<Duration>,
}

/// What clones of an [`ExpirableSemaphore`] share.
#[derive(Debug)]
struct Shared {
    /// The client the semaphore lives in.
    client: Client,
    /// The client's batcher of this kind's acquire script, shared by
    /// every handle of the client so concurrent acquires coalesce.
    acquire: Arc<Batcher>,
    /// The name: also the key holding the available count.
    name: Arc<str>,
    /// The zset of taken permits and their expiry.
    timeouts: Arc<str>,
    /// Where changes of the count are announced.
    channel: Arc<str>,
}

impl Client {
    /// A handle on the permit-expirable semaphore `name` (Redisson's
    /// `RPermitExpirableSemaphore` layout).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `name` is empty or longer than the
    /// client's name limit (or has a broken hash tag on a cluster).
    pub fn expirable_semaphore(&self, name: impl Into<String>) -> Result<ExpirableSemaphore> {
        let name = self.checked_name(name)?;
        Ok(ExpirableSemaphore {
            shared: Arc::new(Shared {
                timeouts: keys::suffixed(&name, "timeout").into(),
                channel: crate::semaphore::semaphore_channel(&name).into(),
                acquire: self.shared_batcher(&scripts::EXPIRABLE_ACQUIRE),
                client: self.clone(),
                name: name.into(),
            }),
            lease: None,
        })
    }
}

/// Outcome of one acquire attempt.
enum Attempt {
    /// A permit was granted.
    Taken(Permit),
    /// None free; the nearest lease runs out at this time, if any is held.
    Short(Option<Instant>),
}

impl ExpirableSemaphore {
    /// The same semaphore with a fixed lease: permits taken through the
    /// returned handle expire after `lease` unless released, and the
    /// watchdog does not renew them.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a lease under 10 ms or beyond what
    /// Redis accepts.
    pub fn with_lease(&self, lease: Duration) -> Result<ExpirableSemaphore> {
        validate::lease(lease)?;
        Ok(ExpirableSemaphore {
            shared: self.shared.clone(),
            lease: Some(lease),
        })
    }

    /// The semaphore's name (also the key of its available count).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Sets the number of permits if the semaphore does not exist yet;
    /// answers whether it did so.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for more than 2^53 permits;
    /// [`Error::WrongType`] when a key holds something else; connection
    /// errors and timeouts.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped after the command was sent, the count may
    /// or may not have been set.
    pub async fn try_set_permits(&self, permits: u64) -> Result<bool> {
        validate::settable(permits, "permits")?;
        Ok(self.update("set", &permits.to_string()).await? == 1)
    }

    /// Adds `delta` permits (negative to take some away), creating the
    /// semaphore at zero first if absent; answers the new available count.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero `delta` or one beyond ±2^53;
    /// [`Error::WrongType`]; connection errors and timeouts.
    ///
    /// # Cancel safety
    /// Not cancel safe, and not resent after a lost reply: the permits may
    /// or may not have been added.
    pub async fn add_permits(&self, delta: i64) -> Result<i64> {
        validate::count(delta.unsigned_abs(), "the permits added or removed")?;
        self.update("add", &delta.to_string()).await
    }

    /// The available permits, after returning those whose lease ran out.
    ///
    /// # Errors
    /// [`Error::WrongType`]; connection errors and timeouts.
    ///
    /// # Cancel safety
    /// Cancel safe: returning expired permits happens whether or not the
    /// reply is read.
    pub async fn available(&self) -> Result<i64> {
        self.update("available", "").await
    }

    /// How many permits are held (taken, lease not run out), by anyone.
    ///
    /// # Errors
    /// [`Error::WrongType`]; connection errors and timeouts.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`ExpirableSemaphore::available`].
    pub async fn held(&self) -> Result<u64> {
        Ok(self.update("held", "").await?.max(0) as u64)
    }

    /// Gives back the permit `id` (as [`Permit::id`] shows it), for a
    /// holder that cannot do it itself, such as a process that was killed
    /// or a Java service's permit. Wakes a waiter.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `id` is not 32 hex digits;
    /// [`Error::PermitNotHeld`] when the permit's lease had run out (it is
    /// back in the pool now) or no such permit exists; connection errors
    /// and timeouts.
    ///
    /// # Cancel safety
    /// Cancel safe: releasing an id twice is harmless (the second answers
    /// that no such permit exists).
    pub async fn release_by_id(&self, id: &str) -> Result<()> {
        if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::invalid(format!(
                "permit id {id:?} is not 32 hex digits"
            )));
        }
        let id = id.to_ascii_lowercase();
        match self.update("release", &id).await? {
            1 => Ok(()),
            answer => Err(Error::PermitNotHeld {
                name: self.shared.name.to_string(),
                id,
                expired: answer == 2,
            }),
        }
    }

    crate::engine::acquire::wait_methods! { observed("permit-semaphore") acquire_inner() -> Permit:
        /// Waits for a free permit and takes it.
        ///
        /// # Errors
        /// [`Error::WrongType`] when a key holds something else;
        /// [`Error::NotReplicated`] when replica acknowledgement is on and too
        /// few replicas saw the grant (the permit was given back); connection
        /// errors and timeouts after three sends (an acquire is resent when
        /// its reply is lost, which is safe: it is idempotent per permit id; a
        /// permit granted to a send whose reply never came expires with its
        /// lease).
        ///
        /// # Cancel safety
        /// Cancel safe: dropping the future leaves its queue place and pub/sub
        /// registration; a request not yet sent is withdrawn, and a permit
        /// granted to a request whose reply was never read is released as soon
        /// as that reply arrives.
        acquire;

        /// Takes a permit if one is free now; `None` otherwise.
        ///
        /// # Errors
        /// As for [`ExpirableSemaphore::acquire`].
        ///
        /// # Cancel safety
        /// Cancel safe, as [`ExpirableSemaphore::acquire`].
        try_acquire;

        /// Waits at most `wait` for a permit; `None` when none came free.
        ///
        /// # Errors
        /// [`Error::InvalidArgument`] when `wait` overflows the clock; others
        /// as for [`ExpirableSemaphore::acquire`].
        ///
        /// # Cancel safety
        /// Cancel safe, as [`ExpirableSemaphore::acquire`].
        try_acquire_for;
    }

    /// Tries, then waits on the channel, re-checking no later than when the
    /// nearest lease runs out (nothing announces an expiry).
    async fn acquire_inner(&self, wait: Option<Duration>) -> Result<Option<Permit>> {
        let deadline = wait.map(validate::deadline).transpose()?;
        let client = &self.shared.client;
        Wait::on(client.hub(), &self.shared.channel)
            .policy(wake_for_permits, 1)
            .until(deadline)
            .recheck(client.config().recheck_interval)
            .run(|| async {
                Ok(match self.attempt().await? {
                    Attempt::Taken(permit) => Check::Done(permit),
                    Attempt::Short(next) => Check::NotYet(next),
                })
            })
            .await
    }

    /// The lease to request: fixed, or the client's watchdog lease.
    fn lease(&self) -> Duration {
        self.lease
            .unwrap_or_else(|| self.shared.client.config().lease)
    }

    /// One acquire with a new permit id, resent on a lost reply.
    async fn attempt(&self) -> Result<Attempt> {
        let shared = &self.shared;
        let client = &shared.client;
        client.admit()?;
        let lease = self.lease();
        let id: Arc<str> = uuid::Uuid::new_v4().simple().to_string().into();
        let call = Call::new(
            2,
            [
                Arg::Text(shared.name.clone()),
                Arg::Text(shared.timeouts.clone()),
                Arg::Text(id.clone()),
                Arg::Int(lease.as_millis() as u64),
                Arg::Text(shared.channel.clone()),
                Arg::Static(client.notify_mode().code()),
            ],
        );
        let first_sent = Instant::now();
        let mut sends = 0;
        let (reply, sent_at, acked) = loop {
            sends += 1;
            let sent_at = Instant::now();
            let undo = (self.clone(), id.clone());
            let reply: redis::RedisResult<(Vec<i64>, Option<u32>)> = shared
                .acquire
                .call_undoable(call.clone(), move |reply| {
                    // Releasing by id is harmless if nothing was granted,
                    // so an unknown outcome (None) is undone too.
                    if reply.as_ref().is_none_or(granted) {
                        let (semaphore, id) = undo;
                        let tasks = semaphore.shared.client.tasks().clone();
                        tasks.detach(
                            "releasing the permit of a cancelled acquire",
                            "it stays taken until its lease runs out",
                            async move {
                                let _ = semaphore.release_by_id(&id).await;
                            },
                        );
                    }
                })
                .await;
            match reply {
                Ok((reply, acked)) => break (reply, sent_at, acked),
                Err(e) => {
                    let e = client.map_err(e, Some(&shared.name));
                    if e.may_resend(sends) {
                        tracing::debug!(semaphore = %shared.name, error = %e, "acquire reply lost; resending");
                    } else {
                        return Err(e);
                    }
                }
            }
        };
        let status = reply.first().copied().unwrap_or(0);
        let value = reply.get(1).copied().unwrap_or(-1);
        if status == 0 {
            let next = u64::try_from(value)
                .ok()
                .map(|ms| Instant::now() + Duration::from_millis(ms));
            return Ok(Attempt::Short(next));
        }
        let acks = client.acks();
        if acks.short(acked) {
            metrics::counter!("locksmith_grants_not_replicated_total").increment(1);
            let _ = self.release_by_id(&id).await;
            return Err(Error::NotReplicated {
                name: shared.name.to_string(),
                acked: acked.unwrap_or(0),
                wanted: acks.min,
            });
        }
        // Granted by this send (the lease runs from it), or by an earlier
        // send of this attempt (from the first send at the latest, capped
        // by what the server says is left).
        let armed_at = if status == 1 { sent_at } else { first_sent };
        let registration = client.renewer().register(
            Hold {
                key: shared.timeouts.clone(),
                script: &scripts::RENEW_PERMIT,
                owner: id.clone(),
                lease,
                renew: self.lease.is_none(),
            },
            armed_at,
        );
        if status == 2 {
            let left = Duration::from_millis(u64::try_from(value).unwrap_or(0));
            registration.maybe_rearmed(sent_at, left);
        }
        let labels = self.shared.client.labels("permit-semaphore", self.name());
        let lease = registration.state().clone();
        let granted = Granted {
            semaphore: self.clone(),
            registration,
            id,
        };
        Ok(Attempt::Taken(Permit {
            held: Held::new(granted, labels, None, lease),
        }))
    }

    /// Runs `expirable_update.lua` with `op` and `arg`.
    async fn update(&self, op: &'static str, arg: &str) -> Result<i64> {
        let shared = &self.shared;
        let keys = [&*shared.name, &*shared.timeouts, &*shared.channel];
        let args = (op, arg, shared.client.notify_mode().code());
        shared
            .client
            .run_script(&scripts::EXPIRABLE_UPDATE, &keys, args)
            .await
    }
}

/// True when a raw acquire reply says a permit was granted.
fn granted(reply: &redis::Value) -> bool {
    matches!(reply, redis::Value::Array(items)
        if matches!(items.first(), Some(redis::Value::Int(1 | 2))))
}

/// A permit of an [`ExpirableSemaphore`]: its id and lease. Released on
/// drop (in the background).
#[derive(Debug)]
#[must_use = "dropping the permit releases it"]
pub struct Permit {
    /// The permit and its lease, until released.
    held: Held<Granted>,
}

/// A permit granted by a semaphore.
#[derive(Debug)]
struct Granted {
    semaphore: ExpirableSemaphore,
    /// Watchdog registration: renews the lease (unless fixed) and marks
    /// it lost when it cannot be kept. Dropped on release.
    registration: Registration,
    /// The permit id, 32 hex digits (Redisson stores the 16 bytes).
    id: Arc<str>,
}

impl Holding for Granted {
    const DROPPED: (&'static str, &'static str) =
        ("permit dropped", "it stays taken until its lease runs out");

    fn name(&self) -> &str {
        self.semaphore.name()
    }

    fn tasks(&self) -> &Tasks {
        self.semaphore.shared.client.tasks()
    }

    /// Runs as a task of its own, so a dropped call does not stop it.
    async fn release(self) -> Result<()> {
        let Granted {
            semaphore,
            registration,
            id,
        } = self;
        // The lease is no longer renewed once the release has started.
        drop(registration);
        let tasks = semaphore.shared.client.tasks().clone();
        let task = tasks.spawn(async move { semaphore.release_by_id(&id).await });
        match task.await {
            Ok(result) => result,
            Err(e) => Err(Error::internal(format!("the release task failed: {e}"))),
        }
    }

    /// A dropped permit whose lease had run out is back in the pool:
    /// nobody is left to tell.
    fn worth_a_warning(error: &Error) -> bool {
        !matches!(error, Error::PermitNotHeld { .. })
    }
}

impl crate::engine::observe::Grant for Permit {}

impl Permit {
    /// The permit id, as [`ExpirableSemaphore::release_by_id`] takes it.
    pub fn id(&self) -> &str {
        self.held.holding().map_or("", |granted| &granted.id)
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        self.held.name()
    }

    /// Moves the permit's lease end forward to `lease` from now (Redisson's
    /// `updateLeaseTime`, except that it never shortens the lease): only
    /// while the permit is still held and unexpired, for a permit taken
    /// through [`ExpirableSemaphore::with_lease`]. The local lease view
    /// follows.
    ///
    /// # Errors
    /// [`Error::PermitNotHeld`] (kind `NotHeld`) when the permit's lease
    /// had run out or the permit is gone; then nothing is extended.
    /// [`Error::InvalidArgument`] for a watchdog-renewed permit or a lease
    /// under 10 ms or beyond what Redis accepts. [`Error::Closed`] once the
    /// client closed. Connection errors and timeouts: the local view is
    /// left as it was.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped call changes nothing locally; if its command
    /// reached Redis the permit's lease ends later than the local view says.
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        let Some(granted) = self.held.holding() else {
            return Err(Error::PermitNotHeld {
                name: self.name().to_owned(),
                id: String::new(),
                expired: false,
            });
        };
        let client = &granted.semaphore.shared.client;
        if granted.registration.extend(client, lease).await? {
            return Ok(());
        }
        Err(Error::PermitNotHeld {
            name: self.name().to_owned(),
            id: granted.id.to_string(),
            expired: true,
        })
    }

    /// Gives the permit back and wakes a waiter.
    ///
    /// # Errors
    /// [`Error::PermitNotHeld`] (kind `NotHeld`) when the lease had run out
    /// before the release (the permit is back in the pool, but another
    /// holder may have had it meanwhile); connection errors and timeouts.
    ///
    /// # Cancel safety
    /// Cancel safe: the release runs as a task of its own, so dropping this
    /// future does not stop it.
    pub async fn release(self) -> Result<()> {
        self.held.release().await
    }
}

crate::engine::guard_core::lease_view!(
    Permit,
    remaining = "A conservative estimate of how long the lease still runs (measured \
        from when the grant or last renewal was sent, minus a drift \
        allowance); zero once lost.",
    lost = "True once the lease is known or presumed lost.",
    signal = "A signal that fires when the lease is lost (renewal refused, or not \
        confirmed before the local deadline).",
);
