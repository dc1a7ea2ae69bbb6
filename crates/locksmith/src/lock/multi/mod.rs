//! MultiLock: several locks (of any kind, on any nodes) taken all or
//! nothing, held and released together under one guard.
//!
//! Two ways to acquire:
//! - **One script call**, when every member is a reentrant [`Lock`] of one
//!   client whose keys live on one node (one server, a Sentinel primary,
//!   or one cluster slot, e.g. names sharing a `{hash tag}`): a single
//!   atomic script checks every member and grants all or none, each member
//!   with its own lease (fixed or watchdog), followed by `WAIT` when the
//!   client asks for replica acknowledgements.
//! - **In canonical order** otherwise: members are acquired one after
//!   another in one order (by name, then node address) that every
//!   MultiLock of every client uses, so two MultiLocks over overlapping
//!   members never wait for each other in a cycle. If a member cannot be
//!   had in time, or an error occurs, every member already taken is
//!   released before the call returns.
//!
//! Either way each member keeps its own lease, watchdog renewal and
//! fencing token, and the guard's lost signal fires when any member is
//! lost.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

use super::{FairLock, Lock, LockGuard, ReadWriteLock, SimpleLock};
use crate::client::Client;
use crate::engine::conn::ATTEMPTS;
use crate::engine::counted::{Actor, GATE_POLL};
use crate::engine::validate;
use crate::engine::wait::{Check, Wait};
use crate::error::{Error, Result};
use crate::scripts;

/// Several locks of any kinds taken all or nothing (see the module docs).
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
    members: Vec<Member>,
    /// All members are reentrant locks on one node: one script call.
    together: bool,
}

/// One member of a [`MultiLock`]: a lock of any kind, from any client.
///
/// ```no_run
/// # async fn demo(a: locksmith::Client, b: locksmith::Client) -> locksmith::Result<()> {
/// use locksmith::{Member, MultiLock};
/// let both = MultiLock::new([
///     Member::from(a.lock("ledger")?),
///     Member::Write(b.read_write_lock("catalog")?),
/// ])?;
/// let guard = both.lock().await?;
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Member {
    /// A reentrant lock.
    Lock(Lock),
    /// A fair lock.
    Fair(FairLock),
    /// The read side of a read-write lock.
    Read(ReadWriteLock),
    /// The write side of a read-write lock.
    Write(ReadWriteLock),
    /// A simple (`SET NX PX`) lock.
    Simple(SimpleLock),
}

impl From<Lock> for Member {
    fn from(lock: Lock) -> Self {
        Member::Lock(lock)
    }
}

impl From<FairLock> for Member {
    fn from(lock: FairLock) -> Self {
        Member::Fair(lock)
    }
}

impl From<SimpleLock> for Member {
    fn from(lock: SimpleLock) -> Self {
        Member::Simple(lock)
    }
}

impl Member {
    /// The member's lock name.
    pub fn name(&self) -> &str {
        match self {
            Member::Lock(l) => l.name(),
            Member::Fair(l) => l.name(),
            Member::Read(l) | Member::Write(l) => l.name(),
            Member::Simple(l) => l.name(),
        }
    }

    fn client(&self) -> &Client {
        match self {
            Member::Lock(l) => l.client(),
            Member::Fair(l) => l.client(),
            Member::Read(l) | Member::Write(l) => l.client(),
            Member::Simple(l) => l.client(),
        }
    }

    fn with_lease(&self, lease: Duration) -> Result<Member> {
        Ok(match self {
            Member::Lock(l) => Member::Lock(l.with_lease(lease)?),
            Member::Fair(l) => Member::Fair(l.with_lease(lease)?),
            Member::Read(l) => Member::Read(l.with_lease(lease)?),
            Member::Write(l) => Member::Write(l.with_lease(lease)?),
            Member::Simple(l) => Member::Simple(l.with_lease(lease)?),
        })
    }

    /// Waits for the member as `deadline` says (`None`: as long as it
    /// takes; passed: one try).
    async fn acquire(&self, deadline: Option<Instant>) -> Result<Option<LockGuard>> {
        let wait = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        macro_rules! take {
            ($lock:expr, $forever:ident, $once:ident, $bounded:ident) => {
                match wait {
                    None => $lock.$forever().await.map(Some),
                    Some(w) if w.is_zero() => $lock.$once().await,
                    Some(w) => $lock.$bounded(w).await,
                }
            };
        }
        match self {
            Member::Lock(l) => take!(l, lock, try_lock, try_lock_for),
            Member::Fair(l) => take!(l, lock, try_lock, try_lock_for),
            Member::Read(l) => take!(l, read, try_read, try_read_for),
            Member::Write(l) => take!(l, write, try_write, try_write_for),
            Member::Simple(l) => take!(l, lock, try_lock, try_lock_for),
        }
    }
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
        let names: Vec<String> = names.into_iter().map(Into::into).collect();
        if names.is_empty() {
            return Err(Error::invalid("a MultiLock needs at least one lock name"));
        }
        let members = names
            .into_iter()
            .map(|name| self.lock(name).map(Member::Lock))
            .collect::<Result<Vec<_>>>()?;
        MultiLock::new(members)
    }
}

impl MultiLock {
    /// A MultiLock over `members`, of any kinds and clients.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for no members, or the same lock (name on
    /// one server, whatever address each client was given) twice.
    pub fn new(members: impl IntoIterator<Item = Member>) -> Result<MultiLock> {
        let mut members: Vec<Member> = members.into_iter().collect();
        if members.is_empty() {
            return Err(Error::invalid("a MultiLock needs at least one lock"));
        }
        // The canonical order every MultiLock uses: by name, then node.
        members.sort_by(|a, b| (a.name(), a.client().addr()).cmp(&(b.name(), b.client().addr())));
        // The same lock twice, also through two clients of one server
        // under different addresses (`localhost`, `127.0.0.1`): taken in
        // order it would wait for itself.
        let same = |a: &Member, b: &Member| {
            a.name() == b.name()
                && (a.client().addr() == b.client().addr()
                    || a.client().server_id() == b.client().server_id())
        };
        if let Some(pair) = members
            .iter()
            .enumerate()
            .flat_map(|(i, a)| members[i + 1..].iter().map(move |b| (a, b)))
            .find(|(a, b)| same(a, b))
            .map(|(a, _)| [a])
        {
            return Err(Error::invalid(format!(
                "lock {:?} is given twice to one MultiLock",
                pair[0].name()
            )));
        }
        let first = members[0].client();
        let group = first.conn().group_of(members[0].name());
        let together = members.iter().all(|m| {
            matches!(m, Member::Lock(_))
                && m.client().id() == first.id()
                && first.conn().group_of(m.name()) == group
        });
        Ok(MultiLock { members, together })
    }

    /// The same members with a fixed lease each (not renewed).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a lease under 10 ms or beyond what
    /// Redis accepts.
    pub fn with_lease(&self, lease: Duration) -> Result<MultiLock> {
        Ok(MultiLock {
            members: self
                .members
                .iter()
                .map(|m| m.with_lease(lease))
                .collect::<Result<_>>()?,
            together: self.together,
        })
    }

    /// The member names, in the canonical order they are acquired.
    pub fn names(&self) -> Vec<&str> {
        self.members.iter().map(Member::name).collect()
    }

    /// True when the members are acquired by one atomic script call
    /// (every member a reentrant lock of one client on one node or slot),
    /// false when one after another in canonical order.
    pub fn is_atomic(&self) -> bool {
        self.together
    }

    crate::engine::acquire::wait_methods! { acquire() -> MultiGuard:
        /// Waits as long as it takes and acquires every member.
        ///
        /// # Errors
        /// As for [`Lock::lock`]; members taken before the error are released.
        ///
        /// # Cancel safety
        /// Cancel safe: members already taken are released in the background
        /// (their guards are dropped), and the member being acquired is
        /// cancelled as [`Lock::lock`] is.
        lock;

        /// Takes every member if all are free now; `None` (nothing held)
        /// otherwise.
        ///
        /// # Errors
        /// As for [`MultiLock::lock`].
        ///
        /// # Cancel safety
        /// Cancel safe, as [`MultiLock::lock`].
        try_lock;

        /// Waits at most `wait` for every member; `None` (nothing held) when
        /// they could not all be had in time.
        ///
        /// # Errors
        /// [`Error::InvalidArgument`] when `wait` overflows the clock; others as
        /// for [`MultiLock::lock`].
        ///
        /// # Cancel safety
        /// Cancel safe, as [`MultiLock::lock`].
        try_lock_for;
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
        cancel: Pin<&mut impl Future<Output = ()>>,
    ) -> Result<Option<MultiGuard>> {
        let first = &self.members[0];
        let labels = first.client().labels("multi-lock", first.name());
        crate::engine::observe::acquire(labels, first.name(), self.acquire_inner(wait, cancel))
            .await
    }

    async fn acquire_inner(
        &self,
        wait: Option<Duration>,
        mut cancel: Pin<&mut impl Future<Output = ()>>,
    ) -> Result<Option<MultiGuard>> {
        let deadline = wait.map(validate::deadline).transpose()?;
        if self.together {
            return self.acquire_together(deadline, cancel).await;
        }
        loop {
            let mut held = Vec::with_capacity(self.members.len());
            for member in &self.members {
                let got = tokio::select! {
                    biased;
                    () = cancel.as_mut() => {
                        give_back(held).await;
                        return Ok(None);
                    }
                    got = member.acquire(deadline) => got,
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

    /// The one-script path: attempt; when busy, wait for a release message
    /// on any member's channel (or the longest busy lease) and try again.
    /// `cancel` ends the wait between attempts (an attempt in flight is
    /// finished first, so a grant it gets is released before returning).
    async fn acquire_together(
        &self,
        deadline: Option<Instant>,
        mut cancel: Pin<&mut impl Future<Output = ()>>,
    ) -> Result<Option<MultiGuard>> {
        let locks: Vec<Lock> = self
            .members
            .iter()
            .filter_map(|m| match m {
                Member::Lock(l) => Some(l.clone()),
                _ => None,
            })
            .collect();
        let client = locks[0].client().clone();
        let listen: Vec<_> = locks
            .iter()
            .map(|lock| (client.hub(), &*lock.shared.channel))
            .collect();
        let got = Wait::on_all(listen)
            .until(deadline)
            // A release message wakes one waiter of this client per
            // channel; an attempt it prompted that fails (another member
            // is busy) passes it to a waiter queued behind, which may need
            // only the freed member.
            .pass_on_unused()
            .run_with(
                || {
                    // In its own task: if this future is dropped mid-call,
                    // the task still records the outcome, and guards nobody
                    // takes are dropped, which releases them.
                    let attempt = client.tasks().spawn(attempt_together(
                        locks.clone(),
                        deadline,
                        Actor::current(),
                    ));
                    async move {
                        match attempt.await {
                            Ok(Ok(Together::Granted(guards))) => Ok(Check::Done(guards)),
                            Ok(Ok(Together::Busy(pttl))) => {
                                Ok(Check::NotYet(Some(Instant::now() + pttl)))
                            }
                            Ok(Err(e)) => Err(e),
                            Err(e) => Err(Error::internal(format!(
                                "MultiLock acquire task failed: {e}"
                            ))),
                        }
                    }
                },
                std::future::pending,
                cancel.as_mut(),
            )
            .await?;
        let Some(guards) = got else {
            return Ok(None);
        };
        let cancelled =
            std::future::poll_fn(|cx| Poll::Ready(cancel.as_mut().poll(cx).is_ready())).await;
        if cancelled {
            give_back(guards).await;
            return Ok(None);
        }
        // Each member's hold is this task's (the grant was made in the
        // attempt's own task).
        for (lock, guard) in locks.iter().zip(&guards) {
            if let Some(episode) = guard.episode() {
                lock.shared.gate.given(episode);
            }
        }
        Ok(Some(MultiGuard { guards }))
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
}

/// Undoes a grant of the all-members script that may have landed (its
/// reply was lost, or too few replicas saw it): each member's release with
/// the post-grant count runs in the background, which leaves each owner's
/// count at the server's again.
fn roll_back(
    locks: &[Lock],
    states: Vec<tokio::sync::OwnedMutexGuard<crate::engine::counted::HoldState>>,
    first_sent: Instant,
) {
    for (lock, state) in locks.iter().zip(states) {
        let expected_after = state.count + 1;
        lock.undo_grant_later(state, expected_after, first_sent + lock.lease());
    }
}

/// What one all-members script call found.
enum Together {
    Granted(Vec<LockGuard>),
    /// Some member is held by another owner for up to this long.
    Busy(Duration),
}

/// One call of the all-or-nothing script for reentrant `locks` (one
/// client, one node), resent on a lost reply (the script recognizes a
/// resend), and followed by `WAIT` when the client wants replica
/// acknowledgements (a grant too few replicas saw is undone, as for a
/// single lock). Each owner's state is held for the call, as [`Lock`]'s
/// own acquire does.
/// `actor` is the caller's task: a member whose owner's hold belongs to
/// another task is busy for it (see [`ActorGate`](crate::engine::counted::ActorGate)).
async fn attempt_together(
    locks: Vec<Lock>,
    deadline: Option<Instant>,
    actor: Actor,
) -> Result<Together> {
    let client = locks[0].client().clone();
    client.admit()?;
    // Each owner's state, as its own acquire takes it; waiting for a
    // release of this owner still settling in the background is bounded
    // as there (the deadline, or what one attempt may take), then busy.
    let own = client.config().command_timeout * ATTEMPTS as u32;
    let bound = deadline.map_or(Instant::now() + own, |d| d.max(Instant::now() + own));
    let mut states = Vec::with_capacity(locks.len());
    for lock in &locks {
        let locking = lock.shared.state.clone().lock_owned();
        match tokio::time::timeout_at(bound, locking).await {
            Ok(state) => states.push(state),
            Err(_) => return Ok(Together::Busy(Duration::ZERO)),
        }
    }
    if locks
        .iter()
        .zip(&states)
        .any(|(lock, state)| lock.shared.gate.shuts_out_for(state, actor))
    {
        return Ok(Together::Busy(GATE_POLL));
    }
    // A non-reentrant member already held refuses, as its own acquire does.
    if let Some(lock) = locks
        .iter()
        .zip(&states)
        .find(|(lock, state)| !lock.shared.reentrant && state.count > 0)
        .map(|(lock, _)| lock)
    {
        return Err(Error::Reentry {
            name: lock.shared.name.to_string(),
        });
    }
    let script = &*scripts::MULTI_ACQUIRE;
    let mut cmd = script.evalsha(2 * locks.len());
    for lock in &locks {
        cmd.arg(&*lock.shared.name).arg(&*lock.shared.token_key);
    }
    for (lock, state) in locks.iter().zip(&states) {
        cmd.arg(&*lock.shared.owner)
            .arg(state.count)
            .arg(lock.lease().as_millis() as u64);
    }
    // Followed by WAIT when the client wants replica acknowledgements.
    let acks = client.acks();
    let call = || async {
        script
            .run(&client.conn(), &cmd, acks)
            .await
            .and_then(|(reply, acked)| {
                Ok((redis::from_redis_value::<Vec<redis::Value>>(reply)?, acked))
            })
            .map_err(|e| client.map_err(e, Some(locks[0].name())))
    };
    let first_sent = Instant::now();
    let mut attempt = 0;
    let (reply, sent_at) = loop {
        attempt += 1;
        let sent_at = Instant::now();
        match call().await {
            Ok((reply, acked)) => {
                let granted = matches!(reply.first(), Some(redis::Value::Int(1 | 2)));
                if granted && acks.short(acked) {
                    // Too few replicas saw the grant: undo it.
                    metrics::counter!("locksmith_grants_not_replicated_total").increment(1);
                    roll_back(&locks, states, first_sent);
                    return Err(Error::NotReplicated {
                        name: locks[0].name().to_owned(),
                        acked: acked.unwrap_or(0),
                        wanted: acks.min,
                    });
                }
                break (reply, sent_at);
            }
            Err(e) if e.may_resend(attempt) => {}
            Err(e) => {
                // The grant may have landed: undo it per member, after
                // which each owner's count is the server's again.
                roll_back(&locks, states, first_sent);
                return Err(e);
            }
        }
    };
    let int = |i: usize| match reply.get(i) {
        Some(redis::Value::Int(n)) => *n,
        _ => 0,
    };
    match int(0) {
        status @ (1 | 2) => {
            // 2: an earlier send granted; the lease runs from the first.
            let armed_at = if status == 1 { sent_at } else { first_sent };
            let mut guards = Vec::with_capacity(locks.len());
            for (i, (lock, mut state)) in locks.iter().zip(states).enumerate() {
                let token = int(2 * i + 1);
                let count = u32::try_from(int(2 * i + 2)).unwrap_or(0);
                guards.push(lock.grant(&mut state, token, count, armed_at)?);
            }
            Ok(Together::Granted(guards))
        }
        0 => Ok(Together::Busy(match u64::try_from(int(1)) {
            Ok(ms) if ms > 0 => Duration::from_millis(ms),
            _ => Duration::from_millis(100),
        })),
        status @ (-2 | -3) => {
            let key = match reply.get(1) {
                Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                _ => locks[0].name().to_owned(),
            };
            Err(if status == -2 {
                Error::WrongType { key }
            } else {
                Error::Redis(redis::RedisError::from((
                    redis::ErrorKind::Extension,
                    "fencing counter is not an integer",
                    key,
                )))
            })
        }
        _ => {
            // Member i's owner count disagrees with the server (its hold
            // was lost): that member starts over; the others are intact.
            // 0: one send landed for some members only, which a single
            // atomic call cannot do; nothing is forgotten.
            let member = usize::try_from(int(1)).unwrap_or(0);
            let name = match member.checked_sub(1).and_then(|i| locks.get(i)) {
                Some(lock) => {
                    if let Some(mut state) = states.into_iter().nth(member - 1) {
                        state.forget();
                    }
                    lock.name().to_owned()
                }
                None => locks[0].name().to_owned(),
            };
            Err(Error::NotHeld { name })
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

/// Releases `guards` all at once (members on one node or slot then share
/// a script call); answers the first member's error, in canonical order.
async fn release_all(guards: Vec<LockGuard>) -> Result<()> {
    let results = futures_util::future::join_all(guards.into_iter().map(LockGuard::release)).await;
    results.into_iter().collect()
}

/// Every member of a [`MultiLock`], held. Dropping it releases them all
/// (in the background).
#[derive(Debug)]
#[must_use = "dropping the guard releases every member"]
pub struct MultiGuard {
    /// The members' guards, in canonical order.
    guards: Vec<LockGuard>,
}

impl crate::engine::observe::Grant for MultiGuard {}

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

    /// Releases every member (all at once: members on one node or slot
    /// share a script call); all are released even if one fails.
    ///
    /// # Errors
    /// The first member's error ([`Error::NotHeld`] for a member whose
    /// lease was lost, [`Error::Unconfirmed`] for one whose release reply
    /// was lost and whose resend found it gone, connection errors).
    ///
    /// # Cancel safety
    /// Cancel safe: members not released yet are released in the
    /// background when the future is dropped.
    pub async fn release(self) -> Result<()> {
        release_all(self.guards).await
    }
}
