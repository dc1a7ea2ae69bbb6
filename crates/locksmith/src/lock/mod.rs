//! The reentrant distributed lock, laid out like Redisson's `RLock`.
//!
//! A [`Lock`] is a handle: a lock name plus an *owner*. The owner is this
//! client's UUID plus a holder id (`<uuid>:<holder-id>`, the shape of
//! Redisson's `<uuid>:<thread-id>`). Every call to [`Client::lock`] makes a
//! new owner; clones of a handle share it. Async tasks have no stable
//! thread identity, so ownership follows the handle, not the task: two
//! tasks that must exclude each other each call `client.lock(name)`; code
//! that re-enters the lock passes the same handle (or a clone) down.

mod guard;
mod handoff;
mod simple;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, OwnedMutexGuard};
use tokio::time::Instant;

use crate::batch::{Arg, Call};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::renewal::{Hold, Ownership, Registration};
use crate::{keys, scripts, validate};

pub use guard::LockGuard;
pub(crate) use handoff::Handoffs;
pub use simple::SimpleLock;

use handoff::{Claim, Offer, TicketGuard};

/// Attempts per script call when the reply is lost (timeout or dropped
/// connection). Resending is safe because the scripts are idempotent.
const ATTEMPTS: usize = 3;

/// While a local release is handing the lock to a waiter, the waiter's
/// fallback re-check comes no sooner than this (the outcome normally
/// arrives through its ticket first).
const OFFER_POLL: Duration = Duration::from_millis(20);

/// Source of holder ids, unique within this process.
static NEXT_HOLDER_ID: AtomicU64 = AtomicU64::new(1);

/// A reentrant distributed lock handle.
///
/// A handle is a lock name plus an *owner*: this client's UUID and a holder
/// id (`<uuid>:<holder-id>`, the shape of Redisson's `<uuid>:<thread-id>`).
/// Every [`Client::lock`] call makes a new owner; clones of a handle share
/// it. Async tasks have no stable thread identity, so ownership follows the
/// handle, not the task: tasks that must exclude each other each call
/// `client.lock(name)`; code that re-enters the lock passes the same handle
/// (or a clone) down. See [`guides::locks`](crate::guides::locks).
///
/// ```no_run
/// # async fn demo(client: locksmith::Client) -> locksmith::Result<()> {
/// let lock = client.lock("inventory:42")?;
/// let guard = lock.lock().await?;            // waits; lease renewed by the watchdog
/// println!("fencing token {}", guard.fencing_token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Lock {
    /// Owner identity and hold state; shared by clones.
    shared: Arc<Shared>,
    /// A fixed lease for acquisitions through this handle, or `None` for a
    /// watchdog-renewed lease of the client's default length.
    lease: Option<Duration>,
}

/// What clones of a [`Lock`] share.
#[derive(Debug)]
struct Shared {
    /// The client the lock lives in.
    client: Client,
    /// The lock name: also the key of the lock hash. Shared (`Arc`) with
    /// the script calls that carry it, so a call copies no names.
    name: Arc<str>,
    /// Fencing counter key.
    token_key: Arc<str>,
    /// Release channel.
    channel: Arc<str>,
    /// This owner's field in the lock hash.
    owner: Arc<str>,
    /// Serializes acquire and release of this owner, so the hold count sent
    /// with each script call matches the server's.
    state: Arc<Mutex<HoldState>>,
}

/// This owner's hold, as last confirmed by the server.
#[derive(Debug, Default)]
struct HoldState {
    /// Current hold count of this owner.
    count: u32,
    /// Fencing token of the current hold episode.
    token: u64,
    /// Watchdog registration of the current episode (also for fixed leases,
    /// where it only runs the expiry timer).
    registration: Option<Registration>,
}

/// Outcome of one acquire attempt.
enum Attempt {
    Granted(LockGuard),
    Busy(Duration),
}

/// A snapshot of a lock's state on the server, from [`Lock::info`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// Owner fields (`<uuid>:<holder-id>`) and their hold counts.
    pub holders: Vec<(String, u64)>,
    /// Time to live of the lock key, if it is held and has one.
    pub remaining_lease: Option<Duration>,
    /// Current value of the fencing counter (0 if never granted).
    pub fencing_counter: u64,
}

impl LockInfo {
    /// True when anyone holds the lock.
    pub fn is_locked(&self) -> bool {
        !self.holders.is_empty()
    }
}

impl Client {
    /// A handle on the reentrant lock `name`, with a new owner.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `name` is empty or longer than the
    /// client's name limit.
    pub fn lock(&self, name: impl Into<String>) -> Result<Lock> {
        let name = name.into();
        self.check_name(&name)?;
        let holder = NEXT_HOLDER_ID.fetch_add(1, Ordering::Relaxed);
        Ok(Lock {
            shared: Arc::new(Shared {
                client: self.clone(),
                token_key: keys::lock_token(&name).into(),
                channel: keys::lock_channel(&name).into(),
                owner: format!("{}:{holder}", self.id().hyphenated()).into(),
                name: name.into(),
                state: Arc::new(Mutex::new(HoldState::default())),
            }),
            lease: None,
        })
    }
}

impl Lock {
    /// The same owner with a fixed lease: acquisitions through the returned
    /// handle expire after `lease` unless released, and the watchdog does
    /// not renew them (as in Redisson when a lease time is given).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a lease under 10 ms or beyond what
    /// Redis accepts.
    pub fn with_lease(&self, lease: Duration) -> Result<Lock> {
        validate::lease(lease)?;
        Ok(Lock {
            shared: self.shared.clone(),
            lease: Some(lease),
        })
    }

    /// The lock's name (also its key).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// This handle's owner id, `<client-uuid>:<holder-id>`.
    pub fn owner(&self) -> &str {
        &self.shared.owner
    }

    /// Waits as long as it takes and acquires the lock.
    ///
    /// # Errors
    /// Connection errors and timeouts talking to Redis (after retries);
    /// [`Error::WrongType`] when the key holds something else;
    /// [`Error::NotHeld`] when this owner re-enters a hold that was lost.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future leaves nothing behind. Its pub/sub
    /// registration and hand-off ticket go with it; a request not yet sent is
    /// withdrawn; a sent acquire whose reply was not read is undone by a
    /// background release sent only after that call settled, so the grant
    /// cannot overtake it; a hand-off arriving after the drop is released like
    /// a dropped guard. Until the undo lands the lock may be held by no guard:
    /// about one round trip, or until the lease ends if Redis is unreachable.
    pub async fn lock(&self) -> Result<LockGuard> {
        loop {
            // Without a deadline `acquire` only returns with the lock.
            if let Some(guard) = self.acquire(None).await? {
                return Ok(guard);
            }
        }
    }

    /// Tries once; `None` when someone else holds the lock.
    ///
    /// It does not wait for other holders. It may wait for this owner's own
    /// release that is still being resent in the background after Redis
    /// stopped answering (see docs/locks.md, "Lost replies"), at most as
    /// long as one attempt may take (three sends of the command timeout);
    /// then it answers `None`.
    ///
    /// # Errors
    /// As for [`Lock::lock`].
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Lock::lock`]. It does not queue, so only two parts
    /// apply: a request not yet sent is withdrawn, and a sent acquire whose
    /// reply was not read is undone in the background after that call settled.
    pub async fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.acquire(Some(Duration::ZERO)).await
    }

    /// Waits at most `wait`; `None` when the lock could not be acquired in
    /// time. (A wait shorter than one attempt's own time is stretched to
    /// it only while this owner's own release settles in the background,
    /// as for [`Lock::try_lock`].)
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `wait` overflows the clock; others as
    /// for [`Lock::lock`].
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Lock::lock`]: dropping the future (for example on an
    /// outer timeout) leaves no registration, ticket, queued request or grant
    /// behind.
    pub async fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.acquire(Some(wait)).await
    }

    /// Whether anyone holds the lock right now.
    ///
    /// # Errors
    /// Connection errors and timeouts.
    ///
    /// # Cancel safety
    /// Cancel safe: a read; dropping the future changes nothing.
    pub async fn is_locked(&self) -> Result<bool> {
        key_exists(&self.shared.client, &self.shared.name).await
    }

    /// This owner's hold count according to the server (0 when it does
    /// not hold the lock).
    ///
    /// # Errors
    /// Connection errors, timeouts, [`Error::WrongType`].
    ///
    /// # Cancel safety
    /// Cancel safe: a read; dropping the future changes nothing.
    pub async fn hold_count(&self) -> Result<u64> {
        let mut conn = self.shared.client.connection();
        let n: Option<u64> = redis::cmd("HGET")
            .arg(&*self.shared.name)
            .arg(&*self.shared.owner)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.map_err(e))?;
        Ok(n.unwrap_or(0))
    }

    /// The lock key's remaining time to live on the server; `None` when it
    /// is not held (or has no expiry).
    ///
    /// # Errors
    /// Connection errors and timeouts.
    ///
    /// # Cancel safety
    /// Cancel safe: a read; dropping the future changes nothing.
    pub async fn remaining_lease(&self) -> Result<Option<Duration>> {
        let mut conn = self.shared.client.connection();
        let ms: i64 = redis::cmd("PTTL")
            .arg(&*self.shared.name)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.map_err(e))?;
        Ok(u64::try_from(ms).ok().map(Duration::from_millis))
    }

    /// Holders, remaining lease and fencing counter, read atomically.
    ///
    /// # Errors
    /// Connection errors, timeouts, [`Error::WrongType`].
    ///
    /// # Cancel safety
    /// Cancel safe: a read; dropping the future changes nothing.
    pub async fn info(&self) -> Result<LockInfo> {
        let mut invocation = scripts::LOCK_INFO.prepare_invoke();
        invocation
            .key(&*self.shared.name)
            .key(&*self.shared.token_key);
        let (holders, ttl, counter): (Vec<(String, u64)>, i64, Option<u64>) = self
            .shared
            .client
            .invoke(&invocation, &self.shared.name)
            .await?;
        Ok(LockInfo {
            holders,
            remaining_lease: u64::try_from(ttl).ok().map(Duration::from_millis),
            fencing_counter: counter.unwrap_or(0),
        })
    }

    /// Deletes the lock whoever holds it and wakes its waiters. An admin
    /// operation: the holder is not told except through its lost signal at
    /// the next renewal. Returns whether a lock was deleted.
    ///
    /// # Errors
    /// Connection errors and timeouts.
    ///
    /// # Cancel safety
    /// Not cancel safe: if the future is dropped after the command was sent,
    /// the lock may or may not have been deleted (and its waiters woken);
    /// [`Lock::is_locked`] shows where it stands. Nothing else is left behind.
    pub async fn force_unlock(&self) -> Result<bool> {
        force_unlock(&self.shared.client, &self.shared.name, &self.shared.channel).await
    }

    fn map_err(&self, err: redis::RedisError) -> Error {
        self.shared.client.map_err(err, Some(&self.shared.name))
    }

    /// The lease to request: fixed, or the client's watchdog lease.
    fn lease(&self) -> Duration {
        self.lease
            .unwrap_or_else(|| self.shared.client.config().lease)
    }

    /// The acquire loop: try (or, when this client's waiters already queue
    /// for the lock, join them directly); if busy, join the channel's
    /// waiters, try again if a release may have slipped in before joining
    /// (always when the subscription is new), then sleep until woken or until the holder's lease or
    /// our wait runs out, and try again.
    async fn acquire(&self, wait: Option<Duration>) -> Result<Option<LockGuard>> {
        let deadline = wait.map(validate::deadline).transpose()?;
        let hub = self.shared.client.hub();
        let channel = &self.shared.channel;
        let seen = hub.seq(channel);
        // Other waiters of this client queue already: the lock is held, so
        // join them without a round trip (unless only one try is wanted, or
        // this owner holds the lock and is re-entering: that never waits).
        let queued = match wait {
            Some(w) if w.is_zero() => None,
            _ if !self.holds_nothing() => None,
            _ => hub.busy_until(channel),
        };
        let mut busy_until = match queued {
            Some(until) => until,
            None => match self.attempt_unless_yielding(deadline).await? {
                Attempt::Granted(guard) => return Ok(Some(guard)),
                Attempt::Busy(pttl) => Instant::now() + pttl,
            },
        };
        if deadline.is_some_and(|d| d <= Instant::now()) {
            return Ok(None);
        }
        metrics::counter!("locksmith_lock_waits_total").increment(1);
        let waiter = hub.register(channel, deadline).await;
        waiter.note_busy(busy_until);
        // Parked in this client's hand-off queue: a local holder's release
        // may grant us the lock directly.
        let ticket = TicketGuard::join(self);
        // Re-check unless the channel was already subscribed before the
        // attempt and no message arrived since: then no release can have
        // slipped between the attempt and joining the queue.
        let mut recheck = seen.is_none() || hub.seq(channel) != seen;
        loop {
            let mut offered = false;
            if let Some(guard) = ticket.take_granted() {
                return Ok(Some(guard));
            }
            if recheck {
                match ticket.claim() {
                    Claim::Granted(guard) => return Ok(Some(guard)),
                    // A local release is handing the lock to us: its outcome
                    // arrives through the ticket.
                    Claim::Pending => offered = true,
                    Claim::Attempt => {
                        let result = self.attempt_unless_yielding(deadline).await;
                        ticket.reopen();
                        match result? {
                            Attempt::Granted(guard) => return Ok(Some(guard)),
                            Attempt::Busy(pttl) => {
                                busy_until = Instant::now() + pttl;
                                waiter.note_busy(busy_until);
                            }
                        }
                    }
                }
            }
            recheck = true;
            let now = Instant::now();
            if deadline.is_some_and(|d| d <= now) {
                // Out of time; a grant parked meanwhile is released with the
                // ticket.
                return Ok(None);
            }
            // A lost message costs at most the holder's remaining lease.
            // While an offer is pending its outcome comes through the
            // ticket within a round trip: a lease end already past must not
            // turn the wait into a spin.
            let mut until = if offered {
                busy_until.max(now + OFFER_POLL)
            } else {
                busy_until
            };
            if let Some(d) = deadline {
                until = until.min(d);
            }
            tokio::select! {
                _ = waiter.wait_until(until) => {}
                _ = ticket.notified() => {}
            }
        }
    }

    /// True when this owner is known to hold nothing right now (its state
    /// is not locked by a call in progress and its count is zero).
    fn holds_nothing(&self) -> bool {
        self.shared
            .state
            .try_lock()
            .is_ok_and(|state| state.count == 0)
    }

    /// [`Lock::attempt`], after holding back while this client yields the
    /// lock to other clients (see [`handoff`]); never past `deadline`.
    async fn attempt_unless_yielding(&self, deadline: Option<Instant>) -> Result<Attempt> {
        if let Some(mut until) = self
            .shared
            .client
            .handoffs()
            .yielding_until(&self.shared.name)
        {
            if self.holds_nothing() {
                if let Some(d) = deadline {
                    until = until.min(d);
                }
                tokio::time::sleep_until(until).await;
            }
        }
        self.attempt(deadline).await
    }

    /// One acquire script call (resent on a lost reply), serialized with
    /// this owner's other acquires and releases. A release or rollback of
    /// this owner may be settling in the background while Redis is
    /// unreachable; with a `deadline`, the wait for it is bounded by the
    /// deadline or by what one attempt may take anyway (its sends and
    /// resends), whichever is later, and then the answer is busy.
    async fn attempt(&self, deadline: Option<Instant>) -> Result<Attempt> {
        let lease = self.lease();
        let client = &self.shared.client;
        client.ensure_background();
        let locking = self.shared.state.clone().lock_owned();
        let state = match deadline {
            None => locking.await,
            Some(d) => {
                let own = client.config().command_timeout * ATTEMPTS as u32;
                let bound = d.max(Instant::now() + own);
                match tokio::time::timeout_at(bound, locking).await {
                    Ok(state) => state,
                    Err(_) => return Ok(Attempt::Busy(Duration::ZERO)),
                }
            }
        };
        let expected = state.count;
        // Armed before the call: if this future is dropped while the call
        // is in flight (or an error leaves its outcome unknown), the grant
        // may have landed; the rollback undoes it, after the call settled.
        let mut rollback = Rollback {
            shared: self.shared.clone(),
            state: Some(state),
            expected_after: expected + 1,
            lease,
            after: None,
            until: Instant::now() + lease,
        };
        let call = Call::new(
            2,
            [
                Arg::Text(self.shared.name.clone()),
                Arg::Text(self.shared.token_key.clone()),
                Arg::Int(lease.as_millis() as u64),
                Arg::Text(self.shared.owner.clone()),
                Arg::Int(u64::from(expected)),
            ],
        );
        let first_sent = Instant::now();
        let mut attempt = 0;
        let (reply, sent_at, acked): (Vec<i64>, Instant, Option<u32>) = loop {
            attempt += 1;
            let sent_at = Instant::now();
            let (tracker, tracked) = crate::batch::tracker();
            rollback.after = Some(tracked);
            let reply = client
                .acquire_batch()
                .call(call.clone(), Some(tracker))
                .await;
            match reply {
                Ok((reply, acked)) => break (reply, sent_at, acked),
                Err(e) => {
                    let e = client.map_err(e, Some(&self.shared.name));
                    if attempt < ATTEMPTS && (e.is_timeout() || e.is_connection_error()) {
                        tracing::debug!(lock = %self.shared.name, error = %e, "acquire reply lost; resending");
                    } else {
                        // The rollback releases a grant that may have landed.
                        return Err(self.name_wrong_type(e).await);
                    }
                }
            }
        };
        let field = |i: usize| reply.get(i).copied().unwrap_or(0);
        let acks = client.acks();
        if matches!(field(0), 1 | 2) && acks.short(acked) {
            // Too few replicas saw the grant: a failover now could lose
            // it. The armed rollback undoes it (this owner's count goes
            // back to what it was).
            metrics::counter!("locksmith_grants_not_replicated_total").increment(1);
            return Err(Error::NotReplicated {
                name: self.shared.name.to_string(),
                acked: acked.unwrap_or(0),
                wanted: acks.min,
            });
        }
        let Some(mut state) = rollback.state.take() else {
            return Err(self.not_held());
        };
        let (status, value, count) = (field(0), field(1), u32::try_from(field(2)).unwrap_or(0));
        let left = reply.get(3).copied();
        match status {
            // Granted by this send: the lease runs from it.
            1 => self
                .grant(&mut state, value, count, sent_at)
                .map(Attempt::Granted),
            // Granted earlier: by an earlier send of this attempt (the
            // lease then runs from the first send at the latest), or a
            // grant left over from an attempt given up on (older still).
            // The server's remaining TTL, read by this send, caps it.
            2 => {
                let guard = self.grant(&mut state, value, count, first_sent)?;
                if let (Some(reg), Some(ms)) = (&state.registration, left) {
                    let ms = u64::try_from(ms).unwrap_or(0);
                    reg.maybe_rearmed(sent_at, Duration::from_millis(ms));
                }
                Ok(Attempt::Granted(guard))
            }
            0 => Ok(Attempt::Busy(match u64::try_from(value) {
                Ok(ms) if ms > 0 => Duration::from_millis(ms),
                // No expiry on the key (set by someone else without a
                // lease): re-check periodically.
                _ => Duration::from_millis(100),
            })),
            _ => {
                // The server does not know this owner's holds: they were
                // lost. Start over from nothing, so the handle can acquire
                // afresh once the lock is free.
                forget(&mut state);
                Err(self.not_held())
            }
        }
    }

    /// A wrong-type error of an acquire names the lock key; if it is the
    /// fencing counter that holds something else, name that instead.
    async fn name_wrong_type(&self, err: Error) -> Error {
        if !matches!(err, Error::WrongType { .. }) {
            return err;
        }
        let mut conn = self.shared.client.connection();
        let kind: redis::RedisResult<String> = redis::cmd("TYPE")
            .arg(&*self.shared.token_key)
            .query_async(&mut conn)
            .await;
        match kind {
            Ok(kind) if kind != "string" && kind != "none" => Error::WrongType {
                key: self.shared.token_key.to_string(),
            },
            _ => err,
        }
    }

    /// Records a grant confirmed by the server (a hold count of `count`,
    /// `token` for a first hold) in this owner's state and makes its guard.
    /// `armed_at` is when the call that set the lease was sent; the local
    /// lease runs from there.
    fn grant(
        &self,
        state: &mut HoldState,
        token: i64,
        count: u32,
        armed_at: Instant,
    ) -> Result<LockGuard> {
        let lease = self.lease();
        // A count without a registration means a background task that
        // owned the state ended early; the server just granted, so the hold
        // is registered afresh rather than refused.
        if state.count == 0 || state.registration.is_none() {
            state.token = u64::try_from(token).unwrap_or(0);
            state.registration = Some(self.shared.client.renewer().register(
                Hold {
                    key: self.shared.name.clone(),
                    ownership: Ownership::HashField,
                    owner: self.shared.owner.clone(),
                    lease,
                    renew: self.lease.is_none(),
                },
                armed_at,
            ));
        } else if let Some(reg) = &state.registration {
            reg.rearmed(armed_at, lease);
        }
        state.count = count;
        let lease_state = match &state.registration {
            Some(reg) => reg.state().clone(),
            None => return Err(self.not_held()),
        };
        Ok(LockGuard::reentrant(self.clone(), state.token, lease_state))
    }

    fn not_held(&self) -> Error {
        Error::NotHeld {
            name: self.shared.name.to_string(),
        }
    }

    /// Releases one hold of this owner (used by [`LockGuard`]).
    ///
    /// Cancel safe: dropped before it holds the owner's state, a release is
    /// sent in the background; dropped after, the release in flight is
    /// finished in the background (see [`InFlight`]).
    async fn release_one(&self) -> Result<()> {
        let mut pending = PendingRelease(Some(self.clone()));
        let state = self.shared.state.clone().lock_owned().await;
        pending.0 = None;
        release_locked(&self.shared, state, self.lease(), true, Instant::now()).await
    }
}

/// Whether the lock key exists (shared by both lock kinds).
async fn key_exists(client: &Client, name: &str) -> Result<bool> {
    let mut conn = client.connection();
    let n: i64 = redis::cmd("EXISTS")
        .arg(name)
        .query_async(&mut conn)
        .await
        .map_err(|e| client.map_err(e, Some(name)))?;
    Ok(n == 1)
}

/// Deletes a lock key whoever holds it and publishes the release message
/// (shared by both lock kinds).
async fn force_unlock(client: &Client, name: &str, channel: &str) -> Result<bool> {
    let mut invocation = scripts::FORCE_UNLOCK.prepare_invoke();
    invocation
        .key(name)
        .key(channel)
        .arg(keys::UNLOCK_MESSAGE)
        .arg(client.notify_mode().code());
    let deleted: i64 = client.invoke(&invocation, name).await?;
    Ok(deleted == 1)
}

/// Forgets this owner's hold locally (it was released, or lost): count
/// zero, no watchdog entry. Marks the lease lost if it was still live.
fn forget(state: &mut HoldState) {
    state.count = 0;
    if let Some(reg) = state.registration.take() {
        reg.state().mark_lost();
    }
}

/// What the release script is asked to do, and what a resend must repeat.
#[derive(Clone)]
struct ReleaseCall {
    /// KEYS and ARGV of one request.
    call: Call,
    /// The lease a remaining hold is re-armed to.
    lease: Duration,
    /// The hold count sent.
    expected: u32,
}

impl ReleaseCall {
    fn new(shared: &Shared, lease: Duration, expected: u32, successor: Option<&Offer>) -> Self {
        let (successor, successor_lease, if_alone) = match successor {
            Some(offer) => (
                Arg::Text(offer.lock().shared.owner.clone()),
                offer.lock().lease().as_millis() as u64,
                offer.if_alone(),
            ),
            None => (Arg::Static(""), 0, false),
        };
        ReleaseCall {
            call: Call::new(
                3,
                [
                    Arg::Text(shared.name.clone()),
                    Arg::Text(shared.channel.clone()),
                    Arg::Text(shared.token_key.clone()),
                    Arg::Int(lease.as_millis() as u64),
                    Arg::Text(shared.owner.clone()),
                    Arg::Int(u64::from(expected)),
                    Arg::Static(keys::UNLOCK_MESSAGE),
                    successor,
                    Arg::Int(successor_lease),
                    Arg::Static(if if_alone { "1" } else { "0" }),
                    Arg::Static(shared.client.notify_mode().code()),
                ],
            ),
            lease,
            expected,
        }
    }

    async fn send(
        &self,
        client: &Client,
        tracker: Option<crate::batch::Tracker>,
    ) -> redis::RedisResult<(i64, i64)> {
        let (reply, acked) = client
            .release_batch()
            .call(self.call.clone(), tracker)
            .await?;
        if client.acks().short(acked) {
            // The release stands on the primary; a failover before the
            // replicas catch up could bring the hold back until its lease
            // ends. Nothing to undo: say so.
            tracing::warn!(
                acked = acked.unwrap_or(0),
                wanted = client.acks().min,
                "release acknowledged by too few replicas"
            );
        }
        Ok(reply)
    }
}

/// Facts about a release's sends that decide how to read its answer.
#[derive(Clone, Copy)]
struct Sends {
    /// When the first send of this release went out.
    first: Instant,
    /// When the send that was answered went out.
    answered: Instant,
    /// An earlier send of the same release may have landed.
    resent: bool,
    /// The lease was already known lost before the first send.
    lost_before: bool,
}

/// A release started by a future that was dropped before it held the
/// owner's state: the release is sent from a background task instead.
struct PendingRelease(Option<Lock>);

impl Drop for PendingRelease {
    fn drop(&mut self) {
        let Some(lock) = self.0.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let state = lock.shared.state.clone().lock_owned().await;
            let result =
                release_locked(&lock.shared, state, lock.lease(), false, Instant::now()).await;
            tracing::debug!(lock = %lock.shared.name, ?result, "released for a cancelled release call");
        });
    }
}

/// A release call on the wire, holding the owner's state. Resolved, it
/// hands the state back; dropped unresolved (the releasing future was
/// cancelled mid-call, or its runtime is ending), it finishes the release
/// in the background ([`settle`]) once the call in flight has settled, so
/// the owner's next call never sees a count the server no longer has.
struct InFlight {
    /// Whose release.
    shared: Arc<Shared>,
    /// The owner's state; `None` once resolved.
    state: Option<OwnedMutexGuard<HoldState>>,
    /// The same release without a successor: what a background resend
    /// sends.
    plain: ReleaseCall,
    /// What was sent so far.
    sends: Sends,
    /// Settles once the latest send can no longer reach Redis.
    after: Option<crate::batch::Tracked>,
    /// End of the hold when the owner has no watchdog registration (the
    /// rollback of a first grant): how long a background resend may try.
    until: Instant,
}

impl InFlight {
    /// The answer is in: take the owner's state back (disarms the drop).
    fn resolve(&mut self) -> Option<OwnedMutexGuard<HoldState>> {
        self.state.take()
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(state) = self.state.take() {
            let mut sends = self.sends;
            sends.resent = true;
            spawn_settle(
                self.shared.clone(),
                state,
                self.plain.clone(),
                sends,
                self.after.take(),
                self.until,
            );
        }
    }
}

/// The release script, resent on a lost reply, with the owner's state
/// locked. Updates the local state from the answer. With `handoff`, a
/// final release grants the lock to a parked waiter of this client if
/// there is one (see [`handoff`]). `until` bounds background resends when
/// the owner has no watchdog registration.
///
/// If no answer comes (Redis unreachable after the resends), or the future
/// is dropped mid-call, the owner's state goes to a background task that
/// keeps resending until Redis answers or the hold's lease is over (see
/// [`settle`]); a final release stops the watchdog at once, so the lease
/// runs out by itself even if Redis never answers again. An error answer
/// (Redis refused the script) gives the hold up locally: the watchdog stops
/// and the lease runs out.
async fn release_locked(
    shared: &Arc<Shared>,
    state: OwnedMutexGuard<HoldState>,
    lease: Duration,
    handoff: bool,
    until: Instant,
) -> Result<()> {
    let expected = state.count;
    if expected == 0 {
        return Err(Error::NotHeld {
            name: shared.name.to_string(),
        });
    }
    let client = &shared.client;
    client.ensure_background();
    let lost_before = state
        .registration
        .as_ref()
        .is_none_or(|reg| reg.state().is_lost());
    let mut offer = if handoff && expected == 1 && !lost_before {
        client.handoffs().offer(&shared.name)
    } else {
        None
    };
    let yielding = offer.as_ref().is_some_and(Offer::if_alone);
    if yielding {
        // Past the streak limit this release may free the lock for the
        // other clients: hold this client's waiters back from before the
        // release message can reach them (shortened once the answer is in).
        client
            .handoffs()
            .yield_to_others(&shared.name, Instant::now() + YIELD_MAX);
    }
    let call = ReleaseCall::new(shared, lease, expected, offer.as_ref());
    let first = Instant::now();
    let mut flight = InFlight {
        shared: shared.clone(),
        state: Some(state),
        plain: ReleaseCall::new(shared, lease, expected, None),
        sends: Sends {
            first,
            answered: first,
            resent: false,
            lost_before,
        },
        after: None,
        until,
    };
    let mut attempt = 0;
    let (status, value) = loop {
        attempt += 1;
        flight.sends.answered = Instant::now();
        let (tracker, tracked) = crate::batch::tracker();
        flight.after = Some(tracked);
        match call.send(client, Some(tracker)).await {
            Ok(reply) => break reply,
            Err(e) => {
                let e = client.map_err(e, Some(&shared.name));
                let lost_reply = e.is_timeout() || e.is_connection_error();
                if attempt < ATTEMPTS && lost_reply {
                    tracing::debug!(lock = %shared.name, error = %e, "release reply lost; resending");
                    flight.sends.resent = true;
                    continue;
                }
                // Dropping the offer tells the successor the outcome is
                // unknown; its own idempotent attempt sorts it out.
                drop(offer);
                if yielding {
                    client.handoffs().clear_yield(&shared.name);
                }
                if !lost_reply {
                    // Redis refused the script: nothing was released, and
                    // resending cannot help. Give the hold up locally.
                    if let Some(mut state) = flight.resolve() {
                        forget(&mut state);
                    }
                }
                // Otherwise dropping the flight settles it in the
                // background.
                return Err(e);
            }
        }
    };
    let Some(mut state) = flight.resolve() else {
        return Err(Error::NotHeld {
            name: shared.name.to_string(),
        });
    };
    let sends = flight.sends;
    if yielding {
        if status == 1 {
            // Freed for real at the streak limit because other clients
            // wait: give their woken waiter about two round trips.
            let pause = (sends.answered.elapsed() * 2).clamp(Duration::from_millis(1), YIELD_MAX);
            client
                .handoffs()
                .yield_to_others(&shared.name, sends.answered + pause);
        } else {
            client.handoffs().clear_yield(&shared.name);
        }
    }
    match (status, offer.take()) {
        (3, Some(offer)) => {
            state.count = 0;
            state.registration = None;
            // The successor's lease was set by the send that handed off:
            // the last one, or (after a resend) at the latest the first.
            offer.complete(
                value,
                if sends.resent {
                    sends.first
                } else {
                    sends.answered
                },
            );
            metrics::counter!("locksmith_lock_handoffs_total").increment(1);
            return Ok(());
        }
        (_, Some(offer)) => offer.decline(false),
        (_, None) => {}
    }
    apply_release(shared, &mut state, &call, status, value, sends)
}

/// The longest this client's waiters hold back after a release forced by
/// the hand-off streak limit.
const YIELD_MAX: Duration = Duration::from_millis(50);

/// Applies a release answer to the owner's state.
fn apply_release(
    shared: &Shared,
    state: &mut HoldState,
    call: &ReleaseCall,
    status: i64,
    value: i64,
    sends: Sends,
) -> Result<()> {
    let not_held = || Error::NotHeld {
        name: shared.name.to_string(),
    };
    match status {
        1 | 3 => {
            if status == 1 {
                shared.client.handoffs().freed(&shared.name);
            }
            state.count = 0;
            state.registration = None;
            Ok(())
        }
        // One hold released now; the lease was re-armed by this send.
        2 => {
            state.count = u32::try_from(value).unwrap_or(0);
            if let Some(reg) = &state.registration {
                reg.rearmed(sends.answered, call.lease);
            }
            Ok(())
        }
        // Nothing changed now. After a resend the first send did it (and
        // re-armed the lease then); otherwise the hold it would undo was
        // never there (a rollback of an acquire that did not land).
        4 => {
            state.count = u32::try_from(value).unwrap_or(0);
            if let (true, Some(reg)) = (sends.resent, &state.registration) {
                reg.maybe_rearmed(sends.first, call.lease);
            }
            Ok(())
        }
        // Gone after a resend of the final release: the first send freed
        // it, unless the lease was already lost before it went out.
        0 if sends.resent && call.expected == 1 && value == 0 && !sends.lost_before => {
            shared.client.handoffs().freed(&shared.name);
            state.count = 0;
            state.registration = None;
            Ok(())
        }
        _ => {
            forget(state);
            Err(not_held())
        }
    }
}

/// Hands a release whose outcome is unknown to a background task (see
/// [`settle`]), started once `after` (the call in flight) has settled.
/// `until` is the end of the hold if the owner has no registration.
fn spawn_settle(
    shared: Arc<Shared>,
    mut state: OwnedMutexGuard<HoldState>,
    call: ReleaseCall,
    sends: Sends,
    after: Option<crate::batch::Tracked>,
    until: Instant,
) {
    // Until the deadline of the hold the lease may still be on the server.
    let deadline = state
        .registration
        .as_ref()
        .map_or(until, |reg| reg.state().deadline());
    if call.expected == 1 {
        // The owner let go: stop renewing at once, so the lease runs out by
        // itself whatever becomes of the resends.
        state.registration = None;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        forget(&mut state);
        return;
    };
    let settling = Settling(Some(state));
    runtime.spawn(async move {
        if let Some(after) = after {
            after.settled().await;
        }
        settle(shared, settling, call, sends, deadline).await;
    });
}

/// The owner's state held by a background task. If the task is dropped
/// before it finishes (its runtime ended), the hold is forgotten rather
/// than left with a count the server may not have.
struct Settling(Option<OwnedMutexGuard<HoldState>>);

impl Drop for Settling {
    fn drop(&mut self) {
        if let Some(mut state) = self.0.take() {
            forget(&mut state);
        }
    }
}

/// Resends a release whose answer never came until Redis answers, keeping
/// the owner's state locked so no other call of the owner interleaves
/// (its next acquire or release waits, then sees the true count).
///
/// Gives up when the hold is over: for a final release at the lease's
/// local deadline (the lease runs out on the server right after), for an
/// inner one when the remaining hold is lost; also when Redis answers with
/// an error (it refused the script: resending cannot help). The owner's
/// state is then reset to nothing held, so the handle works again
/// afterwards.
async fn settle(
    shared: Arc<Shared>,
    mut settling: Settling,
    call: ReleaseCall,
    mut sends: Sends,
    deadline: Instant,
) {
    let mut backoff = Duration::from_millis(20);
    loop {
        let Some(state) = settling.0.as_mut() else {
            return;
        };
        let over = if call.expected == 1 {
            Instant::now() >= deadline
        } else {
            state
                .registration
                .as_ref()
                .is_none_or(|reg| reg.state().is_lost())
        };
        if over {
            tracing::warn!(lock = %shared.name, "release not confirmed before the lease ended; the lease runs out by itself");
            return; // Settling's drop forgets the hold.
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_millis(250));
        sends.answered = Instant::now();
        match call.send(&shared.client, None).await {
            Ok((status, value)) => {
                let Some(mut state) = settling.0.take() else {
                    return;
                };
                let result = apply_release(&shared, &mut state, &call, status, value, sends);
                tracing::debug!(lock = %shared.name, ?result, "release settled in the background");
                return;
            }
            Err(e) => {
                let e = shared.client.map_err(e, Some(&shared.name));
                if !(e.is_timeout() || e.is_connection_error()) {
                    tracing::warn!(lock = %shared.name, error = %e, "Redis refused a release; the lease runs out by itself");
                    return; // Settling's drop forgets the hold.
                }
            }
        }
    }
}

/// Undoes an acquire whose reply was never read, when the acquiring
/// future is dropped mid-call.
struct Rollback {
    /// Whose hold to undo.
    shared: Arc<Shared>,
    /// The owner's state, locked for the duration of the call; handed to the
    /// rollback task so no other call of this owner interleaves. Taken out
    /// (disarming the rollback) once the reply is in hand.
    state: Option<OwnedMutexGuard<HoldState>>,
    /// The hold count the server has if the grant landed.
    expected_after: u32,
    /// Lease to re-arm if holds remain after undoing.
    lease: Duration,
    /// Settles once the acquire call being undone can no longer reach
    /// Redis; the undo is sent only then, so it cannot be overtaken by the
    /// grant it undoes.
    after: Option<crate::batch::Tracked>,
    /// When a grant that landed would expire at the latest: how long the
    /// undo may keep trying if Redis does not answer.
    until: Instant,
}

impl Drop for Rollback {
    fn drop(&mut self) {
        let Some(mut state) = self.state.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            forget(&mut state);
            return;
        };
        let shared = self.shared.clone();
        let expected_after = self.expected_after;
        let lease = self.lease;
        let after = self.after.take();
        let until = self.until;
        // Held by the task; if the task is dropped before the undo is sent
        // (its runtime ended), the hold is forgotten, not left half-known.
        let mut settling = Settling(Some(state));
        runtime.spawn(async move {
            if let Some(after) = after {
                after.settled().await;
            }
            let Some(mut state) = settling.0.take() else {
                return;
            };
            // The release script with the post-grant count undoes a grant
            // that landed and answers "nothing changed" for one that did
            // not; either way it leaves the local count at the server's.
            state.count = expected_after;
            let result = release_locked(&shared, state, lease, false, until).await;
            tracing::debug!(lock = %shared.name, ?result, "rolled back a cancelled acquire");
        });
    }
}
