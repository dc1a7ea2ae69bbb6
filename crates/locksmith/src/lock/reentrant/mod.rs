//! The reentrant distributed lock, laid out like Redisson's `RLock`.
//!
//! A [`Lock`] is a handle: a lock name plus an *owner*. The owner is this
//! client's UUID plus a holder id (`<uuid>:<holder-id>`, the shape of
//! Redisson's `<uuid>:<thread-id>`). Every call to [`Client::lock`] makes a
//! new owner; clones of a handle share it. Within the owner, a hold belongs
//! to the tokio task it was given to (the thread, outside any task), as
//! Redisson's belongs to a thread (`engine::counted::ActorGate`): that task
//! re-enters it, and another task using the same handle waits like any
//! other owner.

pub(in crate::lock) mod contract;
mod guard;
mod handoff;
pub(in crate::lock) mod release;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::client::Client;
use crate::engine::acquire;
use crate::engine::batch::Batcher;
use crate::engine::conn::ATTEMPTS;
use crate::engine::counted::{ActorGate, HoldState, GATE_POLL};
use crate::engine::renewal::Hold;
use crate::engine::undo;
use crate::engine::validate;
use crate::engine::wait::{Check, Wait};
use crate::error::{Error, Result};
use crate::scripts;
use tokio::sync::OwnedMutexGuard;

pub use guard::LockGuard;
use handoff::Handoffs;

use contract::{acquired, AcquireRequest};
use handoff::{Claim, TicketGuard};
use release::{release_locked, undo_grant};

/// While a local release is handing the lock to a waiter, the waiter's
/// fallback re-check comes no sooner than this (the outcome normally
/// arrives through its ticket first).
const OFFER_POLL: Duration = Duration::from_millis(20);

/// Source of holder ids, unique within this process.
pub(in crate::lock) static NEXT_HOLDER_ID: AtomicU64 = AtomicU64::new(1);

/// A reentrant distributed lock handle.
///
/// A handle is a lock name plus an *owner*: this client's UUID and a holder
/// id (`<uuid>:<holder-id>`, the shape of Redisson's `<uuid>:<thread-id>`).
/// Every [`Client::lock`] call makes a new owner; clones of a handle share
/// it. Within the owner a hold belongs to the tokio task that took it (the
/// thread, outside any task), as Redisson's belongs to a thread: that task
/// re-enters it, and another task acquiring through the same handle waits
/// like any other owner. A handle kept in shared state therefore excludes
/// the requests that use it at once. See
/// [`guides::locks`](crate::guides::locks#owners).
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
    pub(in crate::lock) shared: Arc<Shared>,
    /// A fixed lease for acquisitions through this handle, or `None` for a
    /// watchdog-renewed lease of the client's default length.
    pub(in crate::lock) lease: Option<Duration>,
}

/// What every reentrant lock of one client shares: its script batchers
/// (the client's own, which Redlock rounds on this client share too) and
/// its local hand-off registry. Lives in the client as the lock's room (see
/// [`Client::room`]), made on the first `client.lock(...)`.
#[derive(Debug)]
pub(crate) struct LockRoom {
    /// Coalesces concurrent acquires into shared script calls.
    acquire: Arc<Batcher>,
    /// Coalesces concurrent releases into shared script calls.
    release: Arc<Batcher>,
    /// Waiters parked for local hand-off, by lock name.
    handoffs: Handoffs,
}

impl LockRoom {
    fn new(client: &Client) -> Self {
        LockRoom {
            acquire: client.shared_batcher(&scripts::LOCK_ACQUIRE),
            release: client.shared_batcher(&scripts::LOCK_RELEASE),
            handoffs: Handoffs::new(client.config().max_local_handoffs),
        }
    }
}

/// What clones of a [`Lock`] share.
#[derive(Debug)]
pub(in crate::lock) struct Shared {
    /// The client the lock lives in.
    pub(in crate::lock) client: Client,
    /// The client's state for all its reentrant locks.
    pub(in crate::lock) room: Arc<LockRoom>,
    /// The lock name: also the key of the lock hash. Shared (`Arc`) with
    /// the script calls that carry it, so a call copies no names.
    pub(in crate::lock) name: Arc<str>,
    /// Fencing counter key.
    pub(in crate::lock) token_key: Arc<str>,
    /// Release channel.
    pub(in crate::lock) channel: Arc<str>,
    /// This owner's field in the lock hash.
    pub(in crate::lock) owner: Arc<str>,
    /// Serializes acquire and release of this owner, so the hold count sent
    /// with each script call matches the server's.
    pub(in crate::lock) state: Arc<Mutex<HoldState>>,
    /// Which task the owner's hold belongs to (see [`ActorGate`]).
    pub(in crate::lock) gate: ActorGate,
    /// False for [`Client::non_reentrant_lock`]: a second acquire while
    /// the owner holds is refused ([`Error::Reentry`]).
    pub(in crate::lock) reentrant: bool,
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
    /// Number of lock waiters parked for local hand-off (queued, and not in
    /// the middle of an acquire attempt of their own), for diagnostics and
    /// tests.
    pub fn parked_waiter_count(&self) -> usize {
        self.room(LockRoom::new).handoffs.len()
    }

    /// Number of locks this client has handed from one of its owners
    /// straight to another (see [`ClientBuilder::max_local_handoffs`]), for
    /// diagnostics and tests.
    ///
    /// [`ClientBuilder::max_local_handoffs`]: crate::ClientBuilder::max_local_handoffs
    pub fn local_handoff_count(&self) -> u64 {
        self.room(LockRoom::new).handoffs.completed()
    }

    /// A handle on the reentrant lock `name`, with a new owner.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `name` is empty or longer than the
    /// client's name limit.
    pub fn lock(&self, name: impl Into<String>) -> Result<Lock> {
        self.reentrant_lock(name, true)
    }

    /// A handle on the lock `name`, with a new owner, that refuses
    /// re-entry: Redisson's `getNonReentrantLock` (Redisson 4.4 and
    /// later). The layout is the reentrant lock's (hash `NAME`, field
    /// `<uuid>:<holder-id>` = 1), so it shares the lock with Redisson's
    /// `RLock` and non-reentrant lock, and with [`Client::lock`] handles.
    ///
    /// An acquire (`lock`, `try_lock`, `try_lock_for`) by the task already
    /// holding it through this handle fails with [`Error::Reentry`] at
    /// once, sending nothing, where a reentrant lock would count a second
    /// hold; another task of the same handle waits, as it does for a
    /// reentrant lock (see [`Lock`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `name` is empty or longer than the
    /// client's name limit.
    pub fn non_reentrant_lock(&self, name: impl Into<String>) -> Result<Lock> {
        self.reentrant_lock(name, false)
    }

    fn reentrant_lock(&self, name: impl Into<String>, reentrant: bool) -> Result<Lock> {
        let name = self.checked_name(name)?;
        let holder = NEXT_HOLDER_ID.fetch_add(1, Ordering::Relaxed);
        Ok(Lock {
            shared: Arc::new(Shared {
                client: self.clone(),
                room: self.room(LockRoom::new),
                token_key: crate::lock::lock_token(&name).into(),
                channel: crate::lock::lock_channel(&name).into(),
                owner: format!("{}:{holder}", self.id().hyphenated()).into(),
                name: name.into(),
                state: Arc::new(Mutex::new(HoldState::default())),
                gate: ActorGate::default(),
                reentrant,
            }),
            lease: None,
        })
    }
}

impl Lock {
    /// The client the lock lives in (for MultiLock's ordering and routing).
    pub(crate) fn client(&self) -> &Client {
        &self.shared.client
    }

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

    crate::engine::acquire::wait_methods! { observed("lock") acquire_inner() -> LockGuard:
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
        lock;

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
        try_lock;

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
        try_lock_for;
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
        let keys = [&*self.shared.name, &*self.shared.token_key];
        let (holders, ttl, counter): (Vec<(String, u64)>, i64, Option<u64>) = self
            .shared
            .client
            .run_script(&scripts::LOCK_INFO, &keys, crate::client::NO_ARGS)
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
    /// Connection errors and timeouts. [`Error::WrongType`] when the key
    /// holds no lock of this kind, which is left alone: not a hash (a
    /// semaphore, a latch, a simple lock), a read-write lock's hash (see
    /// [`ReadWriteLock::force_unlock`](crate::ReadWriteLock::force_unlock)),
    /// or a key without an expiry (every lock has a lease). A fair lock's
    /// waiters are not woken here: use
    /// [`FairLock::force_unlock`](crate::FairLock::force_unlock).
    ///
    /// # Cancel safety
    /// Not cancel safe: if the future is dropped after the command was sent,
    /// the lock may or may not have been deleted (and its waiters woken);
    /// [`Lock::is_locked`] shows where it stands. Nothing else is left behind.
    pub async fn force_unlock(&self) -> Result<bool> {
        force_unlock(
            &self.shared.client,
            &self.shared.name,
            &self.shared.channel,
            "hash",
        )
        .await
    }

    fn map_err(&self, err: redis::RedisError) -> Error {
        self.shared.client.map_err(err, Some(&self.shared.name))
    }

    /// The lease to request: fixed, or the client's watchdog lease.
    pub(in crate::lock) fn lease(&self) -> Duration {
        self.lease
            .unwrap_or_else(|| self.shared.client.config().lease)
    }

    /// Try (or, when this client's waiters already queue for the lock,
    /// join them directly); if busy, wait in the engine's loop (see
    /// [`Lock::wait_for_grant`]).
    async fn acquire_inner(&self, wait: Option<Duration>) -> Result<Option<LockGuard>> {
        let deadline = wait.map(validate::deadline).transpose()?;
        // Before joining this client's waiters without a round trip.
        self.shared.client.admit()?;
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
        let busy_until = match queued {
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
        // The waiting path's future is boxed: the uncontended path (one
        // attempt above) keeps a small future, which every caller's future
        // holds.
        Box::pin(self.wait_for_grant(deadline, seen, busy_until)).await
    }

    /// The waiting path of [`Lock::acquire_inner`], through the engine's
    /// wait loop: parked in this client's hand-off queue too, so a local
    /// holder's release may grant the lock directly (the ticket's
    /// notification then ends the sleep). `seen` is the channel's message
    /// counter before the first attempt, `busy_until` the holder's lease
    /// end that attempt saw.
    async fn wait_for_grant(
        &self,
        deadline: Option<Instant>,
        seen: Option<u64>,
        busy_until: Instant,
    ) -> Result<Option<LockGuard>> {
        let hub = self.shared.client.hub();
        let channel = &*self.shared.channel;
        let ticket = TicketGuard::join(self);
        let ticket = &ticket;
        Wait::on(hub, channel)
            .until(deadline)
            .after_check(vec![seen], Some(busy_until))
            .note_busy()
            .run_with(
                || async move {
                    // Closed meanwhile: a grant parked on the ticket is
                    // released with it.
                    self.shared.client.admit()?;
                    if let Some(guard) = ticket.take_granted() {
                        return Ok(Check::Done(self.given(guard)));
                    }
                    match ticket.claim() {
                        Claim::Granted(guard) => Ok(Check::Done(self.given(guard))),
                        // A local release is handing the lock to us: its
                        // outcome arrives through the ticket within a round
                        // trip; until then look again no sooner than
                        // OFFER_POLL (a lease end already past must not
                        // turn the wait into a spin).
                        Claim::Pending => {
                            let now = Instant::now();
                            let busy = hub.busy_until(channel).unwrap_or(now);
                            Ok(Check::Pending(Some(busy.max(now + OFFER_POLL))))
                        }
                        Claim::Attempt => {
                            let result = self.attempt_unless_yielding(deadline).await;
                            ticket.reopen();
                            Ok(match result? {
                                Attempt::Granted(guard) => Check::Done(guard),
                                // A lost message costs at most the holder's
                                // remaining lease.
                                Attempt::Busy(pttl) => Check::NotYet(Some(Instant::now() + pttl)),
                            })
                        }
                    }
                },
                || ticket.notified(),
                std::future::pending(),
            )
            .await
    }

    /// A grant handed over by a local release reaches its waiter: the hold
    /// is the waiter's task's (the releasing task made the guard).
    fn given(&self, guard: LockGuard) -> LockGuard {
        if let Some(episode) = guard.episode() {
            self.shared.gate.given(episode);
        }
        guard
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
        if let Some(mut until) = self.shared.room.handoffs.yielding_until(&self.shared.name) {
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
        client.admit()?;
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
        if self.shared.gate.shuts_out(&state) {
            // Held through this handle by another task: that task's hold,
            // not ours to re-enter.
            return Ok(Attempt::Busy(GATE_POLL));
        }
        if !self.shared.reentrant && state.count > 0 {
            return Err(Error::Reentry {
                name: self.shared.name.to_string(),
            });
        }
        let expected = state.count;
        // Armed from the first send until the reply is kept: if this
        // future is dropped while the call is in flight (or an error leaves
        // its outcome unknown), the grant may have landed; the undo
        // releases it, after the call settled.
        let until = Instant::now() + lease;
        let shared = self.shared.clone();
        let undo = undo::closure(move |state: OwnedMutexGuard<HoldState>| {
            Box::pin(undo_grant(shared, state, expected + 1, lease, until))
        });
        let call = AcquireRequest {
            key: self.shared.name.clone(),
            token_key: self.shared.token_key.clone(),
            lease,
            owner: self.shared.owner.clone(),
            expected,
        }
        .call();
        let name = &self.shared.name;
        let room = &self.shared.room;
        let reply = match acquire::send(client, name, &room.acquire, call, state, undo).await {
            Ok(reply) => reply,
            Err(e) => return Err(Box::pin(self.name_wrong_type(e)).await),
        };
        let status = reply.field(0);
        if matches!(status, acquired::NOW | acquired::EARLIER) && client.acks().short(reply.acked) {
            // Too few replicas saw the grant: a failover now could lose
            // it. Dropping the armed reply undoes it (this owner's count
            // goes back to what it was).
            return Err(acquire::not_replicated(client, name, reply.acked));
        }
        match status {
            // Granted by this send (the lease runs from it), or earlier: by
            // an earlier send of this attempt, or a grant left over from an
            // attempt given up on (the server's remaining TTL caps it).
            acquired::NOW | acquired::EARLIER => {
                let grant = acquire::Granted::from_reply(&reply);
                let mut state = reply.state.keep();
                let lease = acquire::record_grant(client, &mut state, grant, self.hold());
                // This task's hold (a grant made elsewhere, by a local
                // release's hand-off or a MultiLock's task, is recorded
                // where its waiter takes it).
                self.shared.gate.given(state.episode);
                Ok(Attempt::Granted(LockGuard::reentrant(
                    self.clone(),
                    state.token,
                    state.episode,
                    lease,
                )))
            }
            acquired::BUSY => Ok(Attempt::Busy(match u64::try_from(reply.field(1)) {
                Ok(ms) if ms > 0 => Duration::from_millis(ms),
                // No expiry on the key (set by someone else without a
                // lease): re-check periodically.
                _ => Duration::from_millis(100),
            })),
            _ => {
                // The server does not know this owner's holds: they were
                // lost. Start over from nothing, so the handle can acquire
                // afresh once the lock is free.
                reply.state.keep().forget();
                Err(self.not_held())
            }
        }
    }

    /// How this owner's holds are renewed.
    fn hold(&self) -> Hold {
        Hold {
            key: self.shared.name.clone(),
            script: &scripts::RENEW_FIELD,
            owner: self.shared.owner.clone(),
            lease: self.lease(),
            renew: self.lease.is_none(),
        }
    }

    /// A wrong-type error of an acquire names the lock key; if it is the
    /// fencing counter that holds something else, name that instead.
    async fn name_wrong_type(&self, err: Error) -> Error {
        let token_key = &*self.shared.token_key;
        self.shared
            .client
            .name_wrong_key(err, &[(token_key, "string")])
            .await
    }

    /// Records a grant confirmed by the server (a hold count of `count`,
    /// `token` for a first hold) in this owner's state and makes its guard.
    /// `armed_at` is when the call that set the lease was sent; the local
    /// lease runs from there.
    pub(in crate::lock) fn grant(
        &self,
        state: &mut HoldState,
        token: i64,
        count: u32,
        armed_at: Instant,
    ) -> Result<LockGuard> {
        let grant = acquire::Granted {
            status: acquired::NOW,
            token,
            count,
            left_ms: 0,
            sent_at: armed_at,
            first_sent: armed_at,
        };
        let lease = acquire::record_grant(&self.shared.client, state, grant, self.hold());
        Ok(LockGuard::reentrant(
            self.clone(),
            state.token,
            state.episode,
            lease,
        ))
    }

    /// Undoes, in the background, a grant this owner may hold without
    /// having read it (see [`release::undo_grant`]): `state` is the owner's
    /// state, `expected_after` its hold count if the grant landed, `until`
    /// when such a grant expires at the latest.
    pub(in crate::lock) fn undo_grant_later(
        &self,
        state: tokio::sync::OwnedMutexGuard<HoldState>,
        expected_after: u32,
        until: Instant,
    ) {
        release::undo_grant_in_background(
            self.shared.clone(),
            state,
            expected_after,
            self.lease(),
            until,
        );
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
    /// finished in the background (see [`release_locked`]).
    /// Only a hold of `episode` (the guard's) is released.
    async fn release_one(&self, episode: u64) -> Result<()> {
        let pending = release::pending_release(self, episode);
        let state = self.shared.state.clone().lock_owned().await;
        pending.keep();
        let (lease, until) = (self.lease(), Instant::now());
        release_locked(&self.shared, state, lease, true, until, Some(episode)).await
    }

    /// Moves the lease end of this owner's hold of `episode` forward (used
    /// by [`LockGuard::extend`]); `Ok(false)` when that hold is gone.
    pub(in crate::lock) async fn extend_hold(&self, episode: u64, lease: Duration) -> Result<bool> {
        let state = self.shared.state.lock().await;
        state.extend(episode, &self.shared.client, lease).await
    }

    /// The lock's name (also its key).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// This handle's owner id, `<client-uuid>:<holder-id>`.
    pub fn owner(&self) -> &str {
        &self.shared.owner
    }
}

/// Whether the lock key exists (shared by both lock kinds).
pub(in crate::lock) async fn key_exists(client: &Client, name: &str) -> Result<bool> {
    let mut conn = client.connection();
    let n: i64 = redis::cmd("EXISTS")
        .arg(name)
        .query_async(&mut conn)
        .await
        .map_err(|e| client.map_err(e, Some(name)))?;
    Ok(n == 1)
}

/// Deletes a lock key whoever holds it and publishes the release message
/// (shared by both lock kinds). `layout` is the key's type for the kind
/// (`hash` for a lock, `string` for a simple lock): any other key under
/// the name is left alone with [`Error::WrongType`].
pub(in crate::lock) async fn force_unlock(
    client: &Client,
    name: &str,
    channel: &str,
    layout: &str,
) -> Result<bool> {
    let args = (
        crate::lock::UNLOCK_MESSAGE,
        client.notify_mode().code(),
        layout,
    );
    let deleted: i64 = client
        .run_script(&scripts::FORCE_UNLOCK, &[name, channel], args)
        .await?;
    Ok(deleted == 1)
}
