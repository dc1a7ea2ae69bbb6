//! The fair lock, laid out like Redisson's `RFairLock`: the reentrant
//! lock's hash, plus a queue of waiting owners (`redisson_lock_queue:{NAME}`)
//! and their give-up times (`redisson_lock_timeout:{NAME}`). Waiters are
//! granted in arrival order across all clients; a release wakes only the
//! waiter at the head, on its own channel
//! (`redisson_lock__channel:{NAME}:<owner>`).
//!
//! Where Redisson counts a waiter gone once a fixed time (5 minutes by
//! default) has passed since it joined, a locksmith waiter refreshes its
//! give-up time every third of its wait timeout
//! ([`FairLock::with_wait_timeout`]) while it lives, so a live waiter never
//! loses its place however long the holder keeps the lock, and a dead one
//! delays the queue by at most that timeout once it is at the head. Times
//! come from the server's clock.
//!
//! Give-up times are kept so that Java waiters and ours share one queue:
//! in Redisson's zset, a locksmith waiter's time carries one queue step
//! (Redisson's `fairLockWaitTimeout`, [`FairLock::with_queue_step`]) per
//! waiter ahead of it, which Redisson's grants take off as they happen, so
//! they never make it look gone. Its own give-up time is kept beside, in
//! the zset `{NAME}:locksmith_give_up` (which Redisson does not read), and
//! that is what locksmith's scripts pass a dead waiter by. While Redisson
//! waiters are in line, each grant or give-up takes one step off the
//! waiters behind (Redisson's never below a step from now), as Redisson's
//! own grants do; while every waiter is locksmith's, nothing is walked.
//! (Without this, each Redisson grant, which takes 5 minutes off every
//! waiter's time, made every locksmith waiter behind it look gone, and it
//! lost its place.)

mod contract;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

use super::{LockGuard, LockInfo, NEXT_HOLDER_ID};
use crate::client::Client;
use crate::engine::acquire::{self, WaitEntry};
use crate::engine::batch::Batcher;
use crate::engine::counted::{ActorGate, HoldState, Releaser, GATE_POLL};
use crate::engine::notify::{wake_one, Keeper};
use crate::engine::renewal::Hold;
use crate::engine::undo;
use crate::engine::wait::{Check, Wait};
use crate::engine::{keys, validate};
use crate::error::{Error, Result};
use crate::scripts;
use contract::{acquired, AcquireRequest};
use tokio::sync::OwnedMutexGuard;

/// A fair (first come, first served) reentrant lock handle.
///
/// Like [`Lock`](crate::Lock), a handle is a name plus an owner; every
/// [`Client::fair_lock`] call makes a new owner and clones share it.
/// Waiters from every client are granted in the order they first asked.
///
/// ```no_run
/// # async fn demo(client: locksmith::Client) -> locksmith::Result<()> {
/// let lock = client.fair_lock("payouts")?;
/// let guard = lock.lock().await?;        // queued behind earlier callers
/// guard.release().await?;                // wakes only the next in line
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FairLock {
    /// Owner identity, keys and hold state; shared by clones.
    shared: Arc<Shared>,
    /// A fixed lease, or `None` for the client's watchdog-renewed lease.
    lease: Option<Duration>,
    /// How long a queued waiter that stops refreshing its place keeps it.
    wait_timeout: Duration,
    /// Redisson's `fairLockWaitTimeout`: what each grant takes off every
    /// waiter's give-up time.
    queue_step: Duration,
}

impl FairLock {
    /// Default give-up time of a queued waiter that stops refreshing its
    /// place: 5 seconds.
    pub const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(5);

    /// Default queue step: 5 minutes, Redisson's default
    /// `fairLockWaitTimeout` (see [`FairLock::with_queue_step`]).
    pub const DEFAULT_QUEUE_STEP: Duration = Duration::from_secs(300);
}

/// What clones of a [`FairLock`] share.
#[derive(Debug)]
struct Shared {
    /// The client the lock lives in.
    client: Client,
    /// The client's batcher of this kind's acquire script, shared by
    /// every handle of the client so concurrent acquires coalesce.
    acquire: Arc<Batcher>,
    /// The lock name: also the key of the lock hash.
    name: Arc<str>,
    /// The queue of waiting owners.
    queue: Arc<str>,
    /// Waiting owners' give-up times.
    timeouts: Arc<str>,
    /// locksmith's queued owners' own give-up times
    /// (`{NAME}:locksmith_give_up`, see `common.lua`).
    ours: Arc<str>,
    /// Fencing counter key.
    token_key: Arc<str>,
    /// The lock's release channel; each waiter listens on it plus
    /// `:<owner>`.
    channel_prefix: Arc<str>,
    /// This owner's own release channel.
    channel: Arc<str>,
    /// Keeps that channel subscribed from this owner's first wait until
    /// the handle is dropped, so successive waits cost no SUBSCRIBE.
    keeper: std::sync::OnceLock<Keeper>,
    /// Counts this owner's waits (single tries do not count); a background
    /// leave of a dropped wait is skipped once a later wait has started
    /// (that wait owns the queue entry now).
    waits: Arc<AtomicU64>,
    /// This owner's field in the lock hash and entry in the queue.
    owner: Arc<str>,
    /// Serializes this owner's acquires and releases, so the hold count
    /// sent with each call matches the server's.
    state: Arc<Mutex<HoldState>>,
    /// Which task the owner's hold belongs to (see [`ActorGate`]).
    gate: ActorGate,
}

impl Client {
    /// A handle on the fair lock `name`, with a new owner (Redisson's
    /// `RFairLock` layout).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `name` is empty or longer than the
    /// client's name limit (or has a broken hash tag on a cluster).
    pub fn fair_lock(&self, name: impl Into<String>) -> Result<FairLock> {
        let name = self.checked_name(name)?;
        let holder = NEXT_HOLDER_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let owner = format!("{}:{holder}", self.id().hyphenated());
        let prefix = crate::lock::lock_channel(&name);
        Ok(FairLock {
            shared: Arc::new(Shared {
                client: self.clone(),
                acquire: self.shared_batcher(&scripts::FAIR_ACQUIRE),
                queue: keys::prefixed("redisson_lock_queue", &name).into(),
                timeouts: keys::prefixed("redisson_lock_timeout", &name).into(),
                ours: keys::suffixed(&name, "locksmith_give_up").into(),
                token_key: crate::lock::lock_token(&name).into(),
                channel: format!("{prefix}:{owner}").into(),
                keeper: std::sync::OnceLock::new(),
                waits: Arc::new(AtomicU64::new(0)),
                channel_prefix: prefix.into(),
                owner: owner.into(),
                name: name.into(),
                state: Arc::new(Mutex::new(HoldState::default())),
                gate: ActorGate::default(),
            }),
            lease: None,
            wait_timeout: FairLock::DEFAULT_WAIT_TIMEOUT,
            queue_step: FairLock::DEFAULT_QUEUE_STEP,
        })
    }
}

/// A snapshot of a fair lock, from [`FairLock::info`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FairLockInfo {
    /// Holders, remaining lease and fencing counter, as for a lock.
    pub lock: LockInfo,
    /// Waiting owners, first in line first.
    pub queue: Vec<String>,
}

/// `fair_info.lua`'s answer: holders, PTTL, fencing counter, queue.
type FairInfoReply = (Vec<(String, String)>, i64, Option<u64>, Vec<String>);

impl Shared {
    /// The keys of the release and leave scripts: the lock hash, the
    /// queue, the give-up times and locksmith's own waiters' give-up
    /// times.
    fn queue_keys(&self) -> [&str; 4] {
        [&self.name, &self.queue, &self.timeouts, &self.ours]
    }
}

/// Outcome of one acquire attempt.
enum Attempt {
    /// Granted.
    Granted(LockGuard),
    /// Queued; look again no later than `until`.
    Queued { until: Instant },
}

impl FairLock {
    /// The client the lock lives in (for MultiLock's ordering and routing).
    pub(crate) fn client(&self) -> &Client {
        &self.shared.client
    }

    /// The same owner with a fixed lease (not renewed by the watchdog).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a lease under 10 ms or beyond what
    /// Redis accepts.
    pub fn with_lease(&self, lease: Duration) -> Result<FairLock> {
        validate::lease(lease)?;
        Ok(FairLock {
            lease: Some(lease),
            ..self.clone()
        })
    }

    /// The same owner with another wait timeout (default
    /// [`FairLock::DEFAULT_WAIT_TIMEOUT`]; locksmith's own, beside
    /// Redisson's `fairLockWaitTimeout`, which is
    /// [`FairLock::with_queue_step`]): how long a queued waiter that stopped asking
    /// (its process died or froze) keeps its place before the others pass
    /// it. A live waiter refreshes its place every third of this, so it
    /// never loses it however long the lock is held; a dead one delays the
    /// queue by at most this long. Shorter values cost one acquire per
    /// waiter per third.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a timeout under 30 ms or over a day.
    pub fn with_wait_timeout(&self, timeout: Duration) -> Result<FairLock> {
        if timeout < Duration::from_millis(30) || timeout > Duration::from_secs(86_400) {
            return Err(Error::invalid(format!(
                "fair lock wait timeout must be between 30ms and 1 day, got {timeout:?}"
            )));
        }
        Ok(FairLock {
            wait_timeout: timeout,
            ..self.clone()
        })
    }

    /// The same owner with another queue step (default
    /// [`FairLock::DEFAULT_QUEUE_STEP`]): set it to the
    /// `fairLockWaitTimeout` of the Redisson services that share this lock,
    /// and use the same step in every handle on the lock, as every
    /// Redisson client of a lock uses the same wait (with mixed steps, the
    /// record of locksmith's own give-up times can expire while one of its
    /// waiters still counts on it).
    ///
    /// The queue keeps each waiter's give-up time in Redisson's way: when
    /// a waiter joins, one step per waiter ahead of it is added, and every
    /// grant from the queue, and every waiter that gives up, takes one step
    /// off the waiters behind it. Redisson's grants take off their own wait
    /// (`fairLockWaitTimeout`, or a `tryLock`'s wait time), so with a step
    /// smaller than that a Redisson grant makes a live locksmith waiter
    /// look gone, and it loses its place; with a larger one, a locksmith
    /// waiter that died keeps its place longer (up to the difference per
    /// Redisson grant) before the others pass it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a step over a day.
    pub fn with_queue_step(&self, step: Duration) -> Result<FairLock> {
        if step > Duration::from_secs(86_400) {
            return Err(Error::invalid(format!(
                "fair lock queue step must be at most 1 day, got {step:?}"
            )));
        }
        Ok(FairLock {
            queue_step: step,
            ..self.clone()
        })
    }

    crate::engine::acquire::wait_methods! { observed("fair-lock") acquire_inner() -> LockGuard:
        /// Waits in line as long as it takes and acquires the lock.
        ///
        /// # Errors
        /// Connection errors and timeouts (after resends);
        /// [`Error::WrongType`] when a key holds something else;
        /// [`Error::NotHeld`] when this owner re-enters a hold that was lost;
        /// [`Error::NotReplicated`] when too few replicas saw the grant.
        ///
        /// # Cancel safety
        /// Cancel safe: a dropped future leaves the queue at once (in the
        /// background, after any call in flight settled, so the leave cannot
        /// be overtaken by a late enqueue), waking the next in line if the lock
        /// is free; a grant whose reply was never read is released the same
        /// way, with this owner's state held until then.
        lock;

        /// Tries once; `None` when the lock is held or others are in line.
        ///
        /// # Errors
        /// As for [`FairLock::lock`].
        ///
        /// # Cancel safety
        /// Cancel safe, as [`FairLock::lock`].
        try_lock;

        /// Waits in line at most `wait`; `None` when the lock did not come in
        /// time (the owner then leaves the queue at once).
        ///
        /// # Errors
        /// [`Error::InvalidArgument`] when `wait` overflows the clock; others
        /// as for [`FairLock::lock`].
        ///
        /// # Cancel safety
        /// Cancel safe, as [`FairLock::lock`].
        try_lock_for;
    }

    /// Deletes the lock whoever holds it and wakes the waiter at the head
    /// of the queue, after passing the waiters that gave up (Redisson's
    /// `RFairLock.forceUnlock`). An admin operation: the holder is not
    /// told except through its lost signal at the next renewal. Returns
    /// whether a lock was deleted.
    ///
    /// # Errors
    /// Connection errors and timeouts. [`Error::WrongType`] when the key
    /// holds no lock (another type, a read-write lock's hash, a hash
    /// without an expiry), which is left alone.
    ///
    /// # Cancel safety
    /// Not cancel safe: if the future is dropped after the command was
    /// sent, the lock may or may not have been deleted (and the head
    /// woken); [`FairLock::info`] shows where it stands. The queue is left
    /// as it is, but for the waiters that had given up.
    pub async fn force_unlock(&self) -> Result<bool> {
        let shared = &self.shared;
        let deleted: i64 = shared
            .client
            .run_script(
                &scripts::FAIR_FORCE_UNLOCK,
                &shared.queue_keys(),
                (&*shared.channel_prefix, shared.client.notify_mode().code()),
            )
            .await?;
        Ok(deleted == 1)
    }

    /// Holders, remaining lease, fencing counter and the queue, read
    /// atomically.
    ///
    /// # Errors
    /// Connection errors, timeouts, [`Error::WrongType`].
    ///
    /// # Cancel safety
    /// Cancel safe: a read.
    pub async fn info(&self) -> Result<FairLockInfo> {
        let shared = &self.shared;
        let keys = [&*shared.name, &*shared.queue, &*shared.token_key];
        let (fields, ttl, counter, queue): FairInfoReply = shared
            .client
            .run_script(&scripts::FAIR_INFO, &keys, crate::client::NO_ARGS)
            .await?;
        // Only owner fields count holds; a hash of another lock kind (a
        // read-write lock's `mode`) shows its other fields as nothing held.
        let holders = fields
            .into_iter()
            .filter_map(|(owner, count)| Some((owner, count.parse().ok()?)))
            .collect();
        Ok(FairLockInfo {
            lock: LockInfo {
                holders,
                remaining_lease: u64::try_from(ttl).ok().map(Duration::from_millis),
                fencing_counter: counter.unwrap_or(0),
            },
            queue,
        })
    }

    /// The lease to request: fixed, or the client's watchdog lease.
    fn lease(&self) -> Duration {
        self.lease
            .unwrap_or_else(|| self.shared.client.config().lease)
    }

    /// Try, then wait in line: woken by a message on this owner's channel,
    /// or when the holder's lease (or a dead head's give-up time) runs
    /// out, and in any case every third of the wait timeout, which
    /// refreshes this waiter's give-up time.
    async fn acquire_inner(&self, wait: Option<Duration>) -> Result<Option<LockGuard>> {
        let deadline = wait.map(validate::deadline).transpose()?;
        let client = &self.shared.client;
        let once = wait.is_some_and(|w| w.is_zero());
        // A single try does not join the queue.
        let patience = if once {
            Duration::ZERO
        } else {
            self.wait_timeout
        };
        // The queue entry of a wait (a single try never joins the queue).
        let entry = if once {
            WaitEntry::none()
        } else {
            let this = self.clone();
            WaitEntry::start(
                self.shared.client.tasks(),
                &self.shared.state,
                &self.shared.waits,
                "leaving a fair lock queue",
                Arc::new(move || {
                    let this = this.clone();
                    Box::pin(async move {
                        if let Err(e) = this.leave().await {
                            tracing::debug!(lock = %this.shared.name, error = %e, "leaving the fair lock queue failed; the entry runs out with its give-up time");
                        }
                    })
                }),
            )
        };
        if !once {
            self.shared
                .keeper
                .get_or_init(|| client.hub().keep(&self.shared.channel, wake_one));
        }
        let got = Wait::on(client.hub(), &self.shared.channel)
            .policy(wake_one, 1)
            .until(deadline)
            .recheck(self.wait_timeout / 3)
            .run(|| async {
                Ok(match self.attempt(patience).await? {
                    Attempt::Granted(guard) => Check::Done(guard),
                    Attempt::Queued { until } => Check::NotYet(Some(until)),
                })
            })
            .await;
        entry.end(matches!(got, Ok(Some(_)))).await;
        got
    }

    /// One acquire call (resent on a lost reply), serialized with this
    /// owner's other calls.
    async fn attempt(&self, patience: Duration) -> Result<Attempt> {
        let shared = &self.shared;
        let client = &shared.client;
        client.admit()?;
        let lease = self.lease();
        let state = shared.state.clone().lock_owned().await;
        if shared.gate.shuts_out(&state) {
            // Held through this handle by another task: that task's hold,
            // not ours to re-enter (nor to queue for on the server).
            return Ok(Attempt::Queued {
                until: Instant::now() + GATE_POLL,
            });
        }
        let expected = state.count;
        let call = AcquireRequest {
            key: shared.name.clone(),
            queue: shared.queue.clone(),
            timeouts: shared.timeouts.clone(),
            token_key: shared.token_key.clone(),
            ours: shared.ours.clone(),
            lease,
            owner: shared.owner.clone(),
            expected,
            patience,
            step: self.queue_step,
        }
        .call();
        let this = self.clone();
        let undo = undo::closure(move |mut state: OwnedMutexGuard<HoldState>| {
            Box::pin(async move {
                // The release with the post-grant count undoes a grant that
                // landed and answers "nothing changed" for one that did not.
                state.undoing(expected + 1);
                if let Err(e) = this.releaser().release_locked(state, None).await {
                    tracing::debug!(lock = %this.shared.name, error = %e, "undoing a fair lock grant");
                }
            })
        });
        let mut reply =
            match acquire::send(client, &shared.name, &shared.acquire, call, state, undo).await {
                Ok(reply) => reply,
                Err(e) => return Err(self.name_wrong_key(e).await),
            };
        match reply.field(0) {
            acquired::QUEUED => {
                let wait = Duration::from_millis(u64::try_from(reply.field(1)).unwrap_or(0));
                return Ok(Attempt::Queued {
                    until: Instant::now() + wait,
                });
            }
            acquired::NOW | acquired::EARLIER => {}
            acquired::LOST => {
                reply.state.state().forget();
                return Err(self.not_held());
            }
            _ => {
                return Err(Error::protocol(format!(
                    "unexpected reply {:?} from the fair lock acquire script",
                    reply.fields
                )))
            }
        }
        if client.acks().short(reply.acked) {
            // Dropping the armed state undoes the grant.
            return Err(acquire::not_replicated(client, &shared.name, reply.acked));
        }
        let grant = acquire::Granted::from_reply(&reply);
        let mut state = reply.state.keep();
        let hold = Hold {
            key: shared.name.clone(),
            script: &scripts::RENEW_FIELD,
            owner: shared.owner.clone(),
            lease,
            renew: self.lease.is_none(),
        };
        let lease_state = acquire::record_grant(client, &mut state, grant, hold);
        shared.gate.given(state.episode);
        Ok(Attempt::Granted(LockGuard::fair(
            self.clone(),
            state.token,
            state.episode,
            lease_state,
        )))
    }

    /// How this owner's holds are released (see [`Releaser`]).
    fn releaser(&self) -> Releaser<HoldState> {
        let this = self.clone();
        Releaser {
            state: self.shared.state.clone(),
            hold: HoldState::whole,
            name: self.shared.name.clone(),
            rearm: Some(self.lease()),
            lease: self.lease(),
            send: Arc::new(move |expected, token| {
                let this = this.clone();
                Box::pin(async move { this.release_call(expected, token).await })
            }),
            rules: self.shared.client.release_rules(),
            tasks: self.shared.client.tasks().clone(),
        }
    }

    /// Releases one hold of this owner (used by [`LockGuard`]). Cancel
    /// safe: runs as a task of its own.
    pub(super) async fn release_one(&self, episode: u64) -> Result<()> {
        self.releaser().release_one(episode).await
    }

    /// Gives up this owner's hold of `episode` locally, when a dropped
    /// guard's release cannot run (see `Holding::abandon`).
    pub(super) fn abandon(&self, episode: u64) -> bool {
        HoldState::abandon(&self.shared.state, HoldState::whole, episode)
    }

    /// Moves the lease end of this owner's hold of `episode` forward (used
    /// by [`LockGuard::extend`]); `Ok(false)` when that hold is gone.
    pub(super) async fn extend_hold(&self, episode: u64, lease: Duration) -> Result<bool> {
        let state = self.shared.state.lock().await;
        state.extend(episode, &self.shared.client, lease).await
    }

    /// One release request: answers the script's `(status, value)` (see
    /// `engine::counted`).
    async fn release_call(&self, expected: u32, token: u64) -> Result<(i64, i64)> {
        let shared = &self.shared;
        let client = &shared.client;
        let keys = shared.queue_keys();
        let args = (
            self.lease().as_millis() as u64,
            &*shared.owner,
            expected,
            &*shared.channel_prefix,
            client.notify_mode().code(),
            token,
            client.receipt_ttl_ms(),
        );
        client.run_script(&scripts::FAIR_RELEASE, &keys, args).await
    }

    /// Leaves the queue (idempotent), waking the next in line if the lock
    /// is free.
    async fn leave(&self) -> Result<()> {
        let shared = &self.shared;
        let keys = shared.queue_keys();
        let args = (
            &*shared.owner,
            &*shared.channel_prefix,
            shared.client.notify_mode().code(),
            self.queue_step.as_millis() as u64,
        );
        shared
            .client
            .run_script::<i64>(&scripts::FAIR_LEAVE, &keys, args)
            .await
            .map(drop)
    }

    /// Names the key of the wrong type among the fair lock's keys.
    async fn name_wrong_key(&self, err: Error) -> Error {
        let shared = &self.shared;
        let keys = [
            (&*shared.name, "hash"),
            (&*shared.queue, "list"),
            (&*shared.timeouts, "zset"),
            (&*shared.token_key, "string"),
            (&*shared.ours, "zset"),
        ];
        shared.client.name_wrong_key(err, &keys).await
    }

    fn not_held(&self) -> Error {
        Error::NotHeld {
            name: self.shared.name.to_string(),
        }
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
