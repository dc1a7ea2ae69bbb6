//! The read-write lock, laid out like Redisson's `RReadWriteLock`: one hash
//! `NAME` with a `mode` field (`read` or `write`), a field per reader owner
//! (`<owner>` = its read hold count) and the writer's field
//! (`<owner>:write`). Every read hold has its own timeout key
//! (`{NAME}:<owner>:rwlock_timeout:<n>`) with its own lease, and the hash
//! lives as long as the longest. Changes are announced on
//! `redisson_rwlock:{NAME}`.
//!
//! Many readers or one writer; both reentrant. The writer may also take
//! read holds (a downgrade: once it releases its write holds, its read
//! holds keep others' writes out). A reader asking for the write lock gets
//! [`Error::Upgrade`] instead of waiting forever for itself.

mod contract;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

use super::{LockGuard, NEXT_HOLDER_ID};
use crate::client::Client;
use crate::engine::acquire::{self, WaitEntry};
use crate::engine::batch::Batcher;
use crate::engine::counted::{ActorGate, HoldState, Releaser, GATE_POLL};
use crate::engine::notify::Wake;
use crate::engine::renewal::Hold;
use crate::engine::undo;
use crate::engine::wait::{Check, Wait};
use crate::engine::{keys, validate};
use crate::error::{Error, Result};
use crate::scripts;
use contract::{acquired, AcquireRequest};
use tokio::sync::OwnedMutexGuard;

/// A distributed read-write lock handle (Redisson's `RReadWriteLock`
/// layout).
///
/// A handle is a name plus an owner, as for [`Lock`](crate::Lock): every
/// [`Client::read_write_lock`] call makes a new owner; clones share it.
///
/// ```no_run
/// # async fn demo(client: locksmith::Client) -> locksmith::Result<()> {
/// let prices = client.read_write_lock("prices")?;
/// let read = prices.read().await?;           // shared with other readers
/// read.release().await?;
/// let write = prices.write().await?;         // alone
/// write.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ReadWriteLock {
    /// Owner identity, keys and hold state; shared by clones.
    shared: Arc<Shared>,
    /// A fixed lease, or `None` for the client's watchdog-renewed lease.
    lease: Option<Duration>,
    /// Readers new to the lock wait while a writer waits.
    prefer_writers: bool,
}

/// Which side of the lock a hold is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// A shared read hold.
    Read,
    /// The exclusive write hold.
    Write,
}

impl Side {
    fn code(self) -> &'static str {
        match self {
            Side::Read => "r",
            Side::Write => "w",
        }
    }
}

/// What clones of a [`ReadWriteLock`] share.
#[derive(Debug)]
struct Shared {
    /// The client the lock lives in.
    client: Client,
    /// The client's batcher of this kind's acquire script, shared by
    /// every handle of the client so concurrent acquires coalesce.
    acquire: Arc<Batcher>,
    /// The lock name: also the key of the lock hash.
    name: Arc<str>,
    /// Fencing counter key.
    token_key: Arc<str>,
    /// Writers waiting with a preference claim (locksmith's own key).
    writers: Arc<str>,
    /// Where unlocks are announced.
    channel: Arc<str>,
    /// This owner's reader field.
    owner: Arc<str>,
    /// This owner's writer field.
    writer_field: Arc<str>,
    /// This owner's read and write holds, serialized.
    state: Arc<Mutex<RwState>>,
    /// Counts this owner's waits; a background withdrawal of a dropped
    /// wait's claim is skipped once a later wait has started.
    waits: Arc<AtomicU64>,
    /// Which task the owner's write hold belongs to (see [`ActorGate`]);
    /// read holds are shared, by tasks as by owners.
    gate: ActorGate,
}

/// One owner's holds on both sides.
#[derive(Debug, Default)]
struct RwState {
    /// Read holds.
    read: HoldState,
    /// Write holds.
    write: HoldState,
}

impl RwState {
    fn read(&mut self) -> &mut HoldState {
        &mut self.read
    }

    fn write(&mut self) -> &mut HoldState {
        &mut self.write
    }

    fn side(&mut self, side: Side) -> &mut HoldState {
        match side {
            Side::Read => &mut self.read,
            Side::Write => &mut self.write,
        }
    }
}

/// The notify policy of a read-write lock channel: every message wakes
/// every waiter of this client (after a write unlock all readers may go;
/// after the last read unlock the writers race, and the losers wait again).
fn wake_everyone(_: &[u8]) -> Wake {
    Wake::All
}

impl Client {
    /// A handle on the read-write lock `name`, with a new owner (Redisson's
    /// `RReadWriteLock` layout).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `name` is empty or longer than the
    /// client's name limit (or has a broken hash tag on a cluster).
    pub fn read_write_lock(&self, name: impl Into<String>) -> Result<ReadWriteLock> {
        let name = self.checked_name(name)?;
        let holder = NEXT_HOLDER_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let owner = format!("{}:{holder}", self.id().hyphenated());
        Ok(ReadWriteLock {
            shared: Arc::new(Shared {
                client: self.clone(),
                acquire: self.shared_batcher(&scripts::RW_ACQUIRE),
                token_key: crate::lock::lock_token(&name).into(),
                writers: keys::suffixed(&name, "locksmith_writers").into(),
                channel: keys::prefixed("redisson_rwlock", &name).into(),
                writer_field: format!("{owner}:write").into(),
                owner: owner.into(),
                name: name.into(),
                state: Arc::new(Mutex::new(RwState::default())),
                waits: Arc::new(AtomicU64::new(0)),
                gate: ActorGate::default(),
            }),
            lease: None,
            prefer_writers: false,
        })
    }
}

/// A snapshot of a read-write lock, from [`ReadWriteLock::info`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReadWriteLockInfo {
    /// `"read"`, `"write"`, or `None` when free.
    pub mode: Option<String>,
    /// Reader owners and their read hold counts.
    pub readers: Vec<(String, u64)>,
    /// The writer owner and its write hold count.
    pub writer: Option<(String, u64)>,
    /// Time to live of the lock hash, if held.
    pub remaining_lease: Option<Duration>,
    /// Current value of the fencing counter.
    pub fencing_counter: u64,
    /// Writers waiting with a preference claim.
    pub waiting_writers: u64,
}

/// `rw_info.lua`'s answer: the hash, PTTL, fencing counter, writers.
type RwInfoReply = (Vec<(String, String)>, i64, Option<u64>, u64);

impl ReadWriteLock {
    /// The client the lock lives in (for MultiLock's ordering and routing).
    pub(crate) fn client(&self) -> &Client {
        &self.shared.client
    }

    /// The same owner with a fixed lease (not renewed by the watchdog).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a lease under 10 ms or beyond what
    /// Redis accepts.
    pub fn with_lease(&self, lease: Duration) -> Result<ReadWriteLock> {
        validate::lease(lease)?;
        Ok(ReadWriteLock {
            lease: Some(lease),
            ..self.clone()
        })
    }

    /// The same owner, preferring writers: while a writer of any locksmith
    /// client waits, readers that hold nothing yet wait too, so a steady
    /// stream of readers cannot starve writers. The cost: readers wait
    /// behind every queued writer (lower read throughput under write
    /// load), a waiting writer refreshes its claim once per lease third,
    /// and each read acquire reads one more key. Redisson readers do not
    /// know the claim and are not held back by it.
    pub fn prefer_writers(&self) -> ReadWriteLock {
        ReadWriteLock {
            prefer_writers: true,
            ..self.clone()
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

    crate::engine::acquire::wait_methods! { acquire(Side::Read) -> LockGuard:
        /// Waits for and takes a read hold (shared with other readers).
        ///
        /// # Errors
        /// Connection errors and timeouts (after resends);
        /// [`Error::WrongType`] when a key holds something else;
        /// [`Error::NotHeld`] when this owner's read holds were lost;
        /// [`Error::NotReplicated`] when too few replicas saw the grant.
        ///
        /// # Cancel safety
        /// Cancel safe: a dropped future leaves its pub/sub registration, and a
        /// grant whose reply was never read is released in the background with
        /// this owner's state held until then.
        read;

        /// Takes a read hold if possible now; `None` otherwise.
        ///
        /// # Errors
        /// As for [`ReadWriteLock::read`].
        ///
        /// # Cancel safety
        /// Cancel safe, as [`ReadWriteLock::read`].
        try_read;

        /// Waits at most `wait` for a read hold.
        ///
        /// # Errors
        /// [`Error::InvalidArgument`] when `wait` overflows the clock; others
        /// as for [`ReadWriteLock::read`].
        ///
        /// # Cancel safety
        /// Cancel safe, as [`ReadWriteLock::read`].
        try_read_for;
    }

    crate::engine::acquire::wait_methods! { acquire(Side::Write) -> LockGuard:
        /// Waits for and takes the write hold (exclusive; reentrant).
        ///
        /// # Errors
        /// [`Error::Upgrade`] when this owner holds read holds and no write
        /// hold (waiting would deadlock: release the read holds first); others
        /// as for [`ReadWriteLock::read`].
        ///
        /// # Cancel safety
        /// Cancel safe, as [`ReadWriteLock::read`]; a preferring writer's
        /// claim is withdrawn in the background.
        write;

        /// Takes the write hold if possible now; `None` otherwise.
        ///
        /// # Errors
        /// As for [`ReadWriteLock::write`].
        ///
        /// # Cancel safety
        /// Cancel safe, as [`ReadWriteLock::write`].
        try_write;

        /// Waits at most `wait` for the write hold.
        ///
        /// # Errors
        /// [`Error::InvalidArgument`] when `wait` overflows the clock; others
        /// as for [`ReadWriteLock::write`].
        ///
        /// # Cancel safety
        /// Cancel safe, as [`ReadWriteLock::write`].
        try_write_for;
    }

    /// Mode, readers, writer, lease, fencing counter and waiting writers,
    /// read atomically.
    ///
    /// # Errors
    /// Connection errors, timeouts, [`Error::WrongType`].
    ///
    /// # Cancel safety
    /// Cancel safe: a read.
    pub async fn info(&self) -> Result<ReadWriteLockInfo> {
        let shared = &self.shared;
        let keys = [&*shared.name, &*shared.token_key, &*shared.writers];
        let (fields, ttl, counter, waiting): RwInfoReply = shared
            .client
            .run_script(&scripts::RW_INFO, &keys, crate::client::NO_ARGS)
            .await?;
        let mut info = ReadWriteLockInfo {
            mode: None,
            readers: Vec::new(),
            writer: None,
            remaining_lease: u64::try_from(ttl).ok().map(Duration::from_millis),
            fencing_counter: counter.unwrap_or(0),
            waiting_writers: waiting,
        };
        for (field, value) in fields {
            if field == "mode" {
                info.mode = Some(value);
            } else if let Some(owner) = field.strip_suffix(":write") {
                info.writer = Some((owner.to_owned(), value.parse().unwrap_or(0)));
            } else {
                info.readers.push((field, value.parse().unwrap_or(0)));
            }
        }
        Ok(info)
    }

    /// Deletes the lock whatever its mode and whoever holds it, and wakes
    /// every waiter, readers and writers (Redisson's read and write
    /// `forceUnlock` each delete the lock in one mode only). An admin
    /// operation: the holders are not told except through their lost
    /// signal at their next renewal (a holder with a fixed lease, which is
    /// not renewed, learns it when that lease ends). Returns whether a
    /// lock was deleted. The read holds' lease keys and waiting writers'
    /// claims stay: they expire on their own, and a claim's writer is still
    /// waiting.
    ///
    /// # Errors
    /// Connection errors and timeouts. [`Error::WrongType`] when the key
    /// holds something else (a lock, a semaphore, a hash without an
    /// expiry: every lock has a lease), which is left alone.
    ///
    /// # Cancel safety
    /// Not cancel safe: if the future is dropped after the command was
    /// sent, the lock may or may not have been deleted (and its waiters
    /// woken); [`ReadWriteLock::info`] shows where it stands.
    pub async fn force_unlock(&self) -> Result<bool> {
        let shared = &self.shared;
        let deleted: i64 = shared
            .client
            .run_script(
                &scripts::RW_FORCE_UNLOCK,
                &[&*shared.name, &*shared.channel],
                (shared.client.notify_mode().code(),),
            )
            .await?;
        Ok(deleted == 1)
    }

    fn lease(&self) -> Duration {
        self.lease
            .unwrap_or_else(|| self.shared.client.config().lease)
    }

    /// Try, then wait on the lock's channel; re-check no later than the
    /// holder's lease end, and (for a preferring writer) every third of the
    /// lease to keep its claim.
    async fn acquire(&self, side: Side, wait: Option<Duration>) -> Result<Option<LockGuard>> {
        let kind = match side {
            Side::Read => "read-lock",
            Side::Write => "write-lock",
        };
        let labels = self.shared.client.labels(kind, self.name());
        crate::engine::observe::acquire(labels, self.name(), self.acquire_inner(side, wait)).await
    }

    async fn acquire_inner(&self, side: Side, wait: Option<Duration>) -> Result<Option<LockGuard>> {
        let deadline = wait.map(validate::deadline).transpose()?;
        let client = &self.shared.client;
        let claim =
            side == Side::Write && self.prefer_writers && !wait.is_some_and(|w| w.is_zero());
        // A preferring writer's claim (reads and single tries claim
        // nothing).
        let entry = if claim {
            let this = self.clone();
            WaitEntry::start(
                self.shared.client.tasks(),
                &self.shared.state,
                &self.shared.waits,
                "withdrawing a waiting writer's claim",
                Arc::new(move || {
                    let this = this.clone();
                    Box::pin(async move {
                        let _ = this.run_release("leave", 0, 0).await;
                    })
                }),
            )
        } else {
            WaitEntry::none()
        };
        let recheck = if claim {
            self.lease() / 3
        } else {
            client.config().lease
        };
        let got = Wait::on(client.hub(), &self.shared.channel)
            .policy(wake_everyone, 1)
            .until(deadline)
            .recheck(recheck)
            .run(|| self.attempt(side, claim))
            .await;
        entry.end(matches!(got, Ok(Some(_)))).await;
        got
    }

    /// One acquire call of `side`; when busy, look again no later than the
    /// holder's lease end.
    async fn attempt(&self, side: Side, claim: bool) -> Result<Check<LockGuard>> {
        let shared = &self.shared;
        let client = &shared.client;
        client.admit()?;
        let lease = self.lease();
        let mut state = shared.state.clone().lock_owned().await;
        if shared.gate.shuts_out(&state.write) {
            // This handle's write hold belongs to another task: neither its
            // write nor a read under it (a downgrade) is ours.
            return Ok(Check::NotYet(Some(Instant::now() + GATE_POLL)));
        }
        let expected = state.side(side).count;
        let call = AcquireRequest {
            key: shared.name.clone(),
            token_key: shared.token_key.clone(),
            writers: shared.writers.clone(),
            side,
            owner: shared.owner.clone(),
            expected,
            lease,
            prefer_writers: self.prefer_writers,
            claim: claim.then_some(lease),
        }
        .call();
        let this = self.clone();
        let undo = undo::closure(move |mut state: OwnedMutexGuard<RwState>| {
            Box::pin(async move {
                // The release with the post-grant count undoes a grant that
                // landed and answers "nothing changed" for one that did not.
                state.side(side).undoing(expected + 1);
                if let Err(e) = this.releaser(side).release_locked(state, None).await {
                    tracing::debug!(lock = %this.shared.name, error = %e, "undoing a read-write lock grant");
                }
            })
        });
        let mut reply =
            match acquire::send(client, &shared.name, &shared.acquire, call, state, undo).await {
                Ok(reply) => reply,
                Err(e) => return Err(self.name_wrong_key(e).await),
            };
        match reply.field(0) {
            acquired::BUSY => {
                let pttl = Duration::from_millis(u64::try_from(reply.field(1)).unwrap_or(0));
                return Ok(Check::NotYet(Some(Instant::now() + pttl)));
            }
            acquired::NOW | acquired::EARLIER => {}
            acquired::LOST => {
                reply.state.state().side(side).forget();
                return Err(self.not_held());
            }
            acquired::UPGRADE => {
                return Err(Error::Upgrade {
                    name: shared.name.to_string(),
                })
            }
            _ => {
                return Err(Error::protocol(format!(
                    "unexpected reply {:?} from the read-write lock acquire script",
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
        let (script, owner) = match side {
            Side::Read => (&scripts::RENEW_READS, shared.owner.clone()),
            Side::Write => (&scripts::RENEW_FIELD, shared.writer_field.clone()),
        };
        let hold = Hold {
            key: shared.name.clone(),
            script,
            owner,
            lease,
            renew: self.lease.is_none(),
        };
        let hold_state = state.side(side);
        let lease_state = acquire::record_grant(client, hold_state, grant, hold);
        let (token, episode) = (hold_state.token, hold_state.episode);
        if side == Side::Write {
            shared.gate.given(episode);
        }
        Ok(Check::Done(LockGuard::read_write(
            self.clone(),
            side,
            token,
            episode,
            lease_state,
        )))
    }

    /// How this owner's holds of `side` are released (see [`Releaser`]).
    /// A write release re-arms the write holds left; read holds keep their
    /// own leases.
    fn releaser(&self, side: Side) -> Releaser<RwState> {
        let this = self.clone();
        Releaser {
            state: self.shared.state.clone(),
            hold: match side {
                Side::Read => RwState::read,
                Side::Write => RwState::write,
            },
            name: self.shared.name.clone(),
            rearm: (side == Side::Write).then(|| self.lease()),
            lease: self.lease(),
            send: Arc::new(move |expected, token| {
                let this = this.clone();
                Box::pin(async move { this.run_release(side.code(), expected, token).await })
            }),
            rules: self.shared.client.release_rules(),
            tasks: self.shared.client.tasks().clone(),
        }
    }

    /// Releases one hold of `side` (used by [`LockGuard`]). Cancel safe:
    /// runs as a task of its own.
    pub(super) async fn release_one(&self, side: Side, episode: u64) -> Result<()> {
        self.releaser(side).release_one(episode).await
    }

    /// Gives up this owner's `side` hold of `episode` locally, when a
    /// dropped guard's release cannot run (see `Holding::abandon`).
    pub(super) fn abandon(&self, side: Side, episode: u64) -> bool {
        HoldState::abandon(&self.shared.state, |state| state.side(side), episode)
    }

    /// Moves the lease end of this owner's `side` hold of `episode`
    /// forward (used by [`LockGuard::extend`]); `Ok(false)` when that hold
    /// is gone.
    pub(super) async fn extend_hold(
        &self,
        side: Side,
        episode: u64,
        lease: Duration,
    ) -> Result<bool> {
        let mut state = self.shared.state.lock().await;
        state
            .side(side)
            .extend(episode, &self.shared.client, lease)
            .await
    }

    /// One release request (`kind` `r`, `w`, or `leave` to withdraw a
    /// writer's claim): answers the script's `(status, value)` (see
    /// `engine::counted`).
    async fn run_release(&self, kind: &str, expected: u32, token: u64) -> Result<(i64, i64)> {
        let shared = &self.shared;
        let client = &shared.client;
        let keys = [&*shared.name, &*shared.writers];
        let args = (
            kind,
            &*shared.owner,
            expected,
            self.lease().as_millis() as u64,
            &*shared.channel,
            client.notify_mode().code(),
            token,
            client.receipt_ttl_ms(),
        );
        client.run_script(&scripts::RW_RELEASE, &keys, args).await
    }

    /// Names the key of the wrong type among the lock's keys.
    async fn name_wrong_key(&self, err: Error) -> Error {
        let shared = &self.shared;
        let keys = [
            (&*shared.name, "hash"),
            (&*shared.token_key, "string"),
            (&*shared.writers, "zset"),
        ];
        shared.client.name_wrong_key(err, &keys).await
    }

    fn not_held(&self) -> Error {
        Error::NotHeld {
            name: self.shared.name.to_string(),
        }
    }
}
