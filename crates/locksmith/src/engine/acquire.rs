//! The acquire core of the counted kinds: one acquire request, sent
//! through the kind's batcher with the owner's state held, resent after a
//! lost reply (the scripts recognize a resend by the hold count the owner
//! sends), and undone in the background when nobody will use what it may
//! have granted.
//!
//! The undo is armed for as long as a grant may exist that no caller has
//! taken: from the first send until the caller keeps the reply
//! ([`Armed::keep`]). Dropped while armed (the caller went away mid-call,
//! between sends, or after reading a grant it cannot use, such as one too
//! few replicas saw), it runs the kind's undo *after* the request it
//! undoes has settled (answered, or withdrawn unsent), so the undo can
//! never reach Redis ahead of the grant. The owner's state stays held
//! until the undo is done, so no later call of the owner overtakes it.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, OwnedMutexGuard};
use tokio::time::Instant;

use crate::client::Client;
use crate::engine::batch::{self, Batcher, Call};
use crate::engine::counted::HoldState;
use crate::engine::lease::LeaseState;
use crate::engine::renewal::Hold;
use crate::engine::task::Tasks;
use crate::engine::undo::{self, UndoFuture};
use crate::error::{Error, ErrorKind, Result};

/// The owner's state with the undo `F` of a grant armed.
pub(crate) type Armed<S, F> = undo::Armed<OwnedMutexGuard<S>, F>;

/// What an undone grant is, for a warning when it cannot run.
const UNDOING: (&str, &str) = (
    "undoing a grant nobody took",
    "the hold stays until its lease runs out",
);

/// An acquire reply, and when it was asked for.
pub(crate) struct Reply<S, F>
where
    S: Send + 'static,
    F: FnOnce(OwnedMutexGuard<S>) -> UndoFuture + Send + 'static,
{
    /// The script's answer for this request: status first (1 granted by
    /// this send, 2 granted by an earlier one, see [`Granted`]).
    pub(crate) fields: Vec<i64>,
    /// When the send that was answered went out.
    pub(crate) sent_at: Instant,
    /// When the first send went out (a grant by an earlier send started
    /// no earlier).
    pub(crate) first_sent: Instant,
    /// Replicas that acknowledged, if asked.
    pub(crate) acked: Option<u32>,
    /// The owner's state; armed when the reply is a grant.
    pub(crate) state: Armed<S, F>,
}

impl<S, F> Reply<S, F>
where
    S: Send + 'static,
    F: FnOnce(OwnedMutexGuard<S>) -> UndoFuture + Send + 'static,
{
    /// Field `i` of the reply (0 when missing).
    pub(crate) fn field(&self, i: usize) -> i64 {
        self.fields.get(i).copied().unwrap_or(0)
    }
}

/// Sends `call` through `batcher` for lock `name` (see the module docs).
/// A reply with status 1 or 2 is a grant, and comes back with the undo
/// armed; any other reply comes back disarmed. A wrong-type error is
/// answered without undo (the script changed nothing).
pub(crate) async fn send<S, F>(
    client: &Client,
    name: &str,
    batcher: &Batcher,
    call: Call,
    state: OwnedMutexGuard<S>,
    undo: F,
) -> Result<Reply<S, F>>
where
    S: Send + 'static,
    F: FnOnce(OwnedMutexGuard<S>) -> UndoFuture + Send + 'static,
{
    let mut armed = Armed::new(batcher.tasks(), UNDOING, state, undo);
    let first_sent = Instant::now();
    let mut sends = 0;
    loop {
        sends += 1;
        let sent_at = Instant::now();
        let (tracker, tracked) = batch::tracker();
        armed.after(tracked);
        match batcher.call::<Vec<i64>>(call.clone(), Some(tracker)).await {
            Ok((fields, acked)) => {
                if !matches!(fields.first(), Some(1 | 2)) {
                    armed.disarm();
                }
                return Ok(Reply {
                    fields,
                    sent_at,
                    first_sent,
                    acked,
                    state: armed,
                });
            }
            Err(e) => {
                let e = client.map_err(e, Some(name));
                if e.may_resend(sends) {
                    tracing::debug!(name = %name, error = %e, "acquire reply lost; resending");
                    continue;
                }
                if sends == 1 && !e.is_reply_lost() && e.kind() != ErrorKind::Protocol {
                    // Redis answered the only send with an error: nothing
                    // was granted. (After a resend, an earlier send may
                    // have granted: the undo stays armed. So it does for an
                    // answer the library cannot read: the script ran, and
                    // may have granted.)
                    armed.disarm();
                }
                // Otherwise the outcome is unknown: dropping `armed` undoes
                // a grant that may have landed.
                return Err(e);
            }
        }
    }
}

/// The first field of every counted kind's acquire reply (the reentrant,
/// fair and read-write locks' scripts, and Redlock's nodes); each kind's
/// `contract.rs` names what the rest of its reply holds.
pub(crate) mod status {
    /// Granted by the send answered (the lease was set then).
    pub(crate) const NOW: i64 = 1;
    /// Granted by an earlier send (a resend whose first send landed, or a
    /// grant left over from an attempt given up on), with the lease left.
    pub(crate) const EARLIER: i64 = 2;
    /// Not granted now (held by another owner, or queued); the next field
    /// says how long to wait.
    pub(crate) const NOT_NOW: i64 = 0;
    /// The server does not know the holds the owner believes it has (they
    /// were lost): `{-1, count-on-server, 0}`.
    pub(crate) const LOST: i64 = -1;
}
pub(crate) use status::{EARLIER as GRANTED_EARLIER, NOW as GRANTED_NOW};

/// What a grant reply says, for [`record_grant`].
pub(crate) struct Granted {
    /// [`GRANTED_NOW`]: granted by the send answered at `sent_at`;
    /// [`GRANTED_EARLIER`]: by an earlier send (no earlier than
    /// `first_sent`), with `left_ms` of lease left.
    pub(crate) status: i64,
    /// Fencing token of the grant (used for a first hold).
    pub(crate) token: i64,
    /// The owner's hold count now.
    pub(crate) count: u32,
    /// Lease left on the server (status 2).
    pub(crate) left_ms: i64,
    pub(crate) sent_at: Instant,
    pub(crate) first_sent: Instant,
}

impl Granted {
    /// Reads the grant fields `{status, token, count, pttl}` of `reply`.
    pub(crate) fn from_reply<S, F>(reply: &Reply<S, F>) -> Granted
    where
        S: Send + 'static,
        F: FnOnce(OwnedMutexGuard<S>) -> UndoFuture + Send + 'static,
    {
        Granted {
            status: reply.field(0),
            token: reply.field(1),
            count: u32::try_from(reply.field(2)).unwrap_or(0),
            left_ms: reply.field(3),
            sent_at: reply.sent_at,
            first_sent: reply.first_sent,
        }
    }
}

/// Records a grant in the owner's `state`: a first hold registers `hold`
/// with the watchdog (its lease runs from the send that set it); a further
/// hold re-arms the registration. Answers the lease state for the guard.
pub(crate) fn record_grant(
    client: &Client,
    state: &mut HoldState,
    grant: Granted,
    hold: Hold,
) -> Arc<LeaseState> {
    let armed_at = if grant.status == GRANTED_NOW {
        grant.sent_at
    } else {
        grant.first_sent
    };
    let lease = hold.lease;
    let reg = match &state.registration {
        Some(reg) if state.count > 0 => {
            reg.rearmed(armed_at, lease);
            reg
        }
        _ => state.begin(grant.token, client.renewer().register(hold, armed_at)),
    };
    if grant.status == GRANTED_EARLIER {
        let left = Duration::from_millis(u64::try_from(grant.left_ms).unwrap_or(0));
        reg.maybe_rearmed(grant.sent_at, left);
    }
    let lease_state = reg.state().clone();
    state.count = grant.count;
    lease_state
}

/// The error of a grant too few replicas acknowledged (the caller drops
/// the armed state with it, which undoes the grant).
pub(crate) fn not_replicated(client: &Client, name: &str, acked: Option<u32>) -> Error {
    metrics::counter!("locksmith_grants_not_replicated_total").increment(1);
    Error::NotReplicated {
        name: name.to_owned(),
        acked: acked.unwrap_or(0),
        wanted: client.acks().min,
    }
}

/// Takes back what a wait put on the server for its owner (a place in a
/// queue, a claim that holds others back): the kind's `withdraw`, run with the owner's
/// state held so it comes after any call of the owner still settling.
pub(crate) type Withdraw = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// The owner's state, its wait counter, a wait's number, its withdrawal.
type Entry<S> = (Arc<Mutex<S>>, Arc<AtomicU64>, u64, Withdraw);

/// A wait's entry on the server, taken back once the wait ends without
/// the lock: inline by [`WaitEntry::end`], or in the background when the
/// wait is dropped midway. A background withdrawal is skipped once a later
/// wait of the same owner has started (that wait owns the entry now);
/// `waits` counts the owner's waits, and only waits that put an entry on
/// the server may count (a single try that skipped would leave it).
pub(crate) struct WaitEntry<S: Send + 'static> {
    /// The owner's state, its wait counter, this wait's number, and how
    /// to withdraw; `None` once ended.
    armed: Option<Entry<S>>,
    /// What is withdrawn, for a warning outside a runtime.
    what: &'static str,
    /// Where a background withdrawal runs; `None` with nothing armed.
    tasks: Option<Tasks>,
    /// Counts the wait in the client's background work until its entry
    /// is withdrawn (inline, or handed to a tracked task), so closing the
    /// client waits for it.
    _waiting: Option<tokio_util::task::task_tracker::TaskTrackerToken>,
}

impl<S: Send + 'static> WaitEntry<S> {
    /// A wait that puts an entry on the server (counted in `waits`).
    pub(crate) fn start(
        tasks: &Tasks,
        state: &Arc<Mutex<S>>,
        waits: &Arc<AtomicU64>,
        what: &'static str,
        withdraw: Withdraw,
    ) -> Self {
        let epoch = waits.fetch_add(1, Ordering::SeqCst) + 1;
        WaitEntry {
            armed: Some((state.clone(), waits.clone(), epoch, withdraw)),
            what,
            tasks: Some(tasks.clone()),
            _waiting: Some(tasks.token()),
        }
    }

    /// A wait that puts nothing on the server.
    pub(crate) fn none() -> Self {
        WaitEntry {
            armed: None,
            what: "",
            tasks: None,
            _waiting: None,
        }
    }

    /// The wait ended: without the lock (out of time, failed), the entry is
    /// withdrawn before returning, so the owner's next wait cannot be
    /// overtaken by it; with the lock, the grant took the entry.
    pub(crate) async fn end(mut self, granted: bool) {
        if let (Some((state, _, _, withdraw)), false) = (self.armed.take(), granted) {
            let state = state.lock_owned().await;
            withdraw().await;
            drop(state);
        }
    }
}

impl<S: Send + 'static> Drop for WaitEntry<S> {
    fn drop(&mut self) {
        if let (Some((state, waits, epoch, withdraw)), Some(tasks)) =
            (self.armed.take(), self.tasks.take())
        {
            tasks.detach(self.what, "it lapses with its give-up time", async move {
                let state = state.lock_owned().await;
                if waits.load(Ordering::SeqCst) == epoch {
                    withdraw().await;
                }
                drop(state);
            });
        }
    }
}

/// The three public ways to ask for what a kind grants, over the kind's
/// one core `self.$core(args.., wait: Option<Duration>) ->
/// Result<Option<$out>>` (`None`: wait as long as it takes; `Some(ZERO)`:
/// one try): the waiting method, the single try and the bounded wait,
/// each with the kind's own doc comment.
///
/// ```ignore
/// wait_methods! { acquire() -> Guard:
///     /// Waits as long as it takes ...
///     take;
///     /// Tries once ...
///     try_take;
///     /// Waits at most `wait` ...
///     try_take_for;
/// }
/// ```
macro_rules! wait_methods {
    // A core of a kind whose acquires are observed (span, metrics) as
    // `$kind`: the core is wrapped once, here, instead of in every kind.
    (
        observed($kind:literal) $core:ident() -> $out:ty: $($rest:tt)*
    ) => {
        // Not an `async fn`: that would hold the core's future twice.
        fn observed_core(
            &self,
            wait: Option<std::time::Duration>,
        ) -> impl std::future::Future<Output = $crate::error::Result<Option<$out>>> + '_ {
            self.shared
                .client
                .observed($kind, self.name(), self.$core(wait))
        }

        $crate::engine::acquire::wait_methods! { observed_core() -> $out: $($rest)* }
    };
    (
        $core:ident($($arg:expr),*) -> $out:ty:
        $(#[$wait_doc:meta])* $wait:ident;
        $(#[$try_doc:meta])* $try:ident;
        $(#[$for_doc:meta])* $try_for:ident;
    ) => {
        $(#[$wait_doc])*
        pub async fn $wait(&self) -> $crate::error::Result<$out> {
            loop {
                // Without a deadline the core only returns with a grant.
                if let Some(granted) = self.$core($($arg,)* None).await? {
                    return Ok(granted);
                }
            }
        }

        $(#[$try_doc])*
        pub async fn $try(&self) -> $crate::error::Result<Option<$out>> {
            self.$core($($arg,)* Some(std::time::Duration::ZERO)).await
        }

        $(#[$for_doc])*
        pub async fn $try_for(
            &self,
            wait: std::time::Duration,
        ) -> $crate::error::Result<Option<$out>> {
            self.$core($($arg,)* Some(wait)).await
        }
    };
}
pub(crate) use wait_methods;
