//! The release path of the reentrant lock: the release script call and
//! its resends, reading its answer into the owner's state, finishing a
//! release in the background when its caller went away or Redis stopped
//! answering ([`settle`]), and undoing a grant whose reply was never
//! read ([`undo_grant`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

use super::contract::{Announce, ReleaseRequest, Successor};
use super::handoff::Offer;
use super::{Lock, Shared};
use crate::engine::batch::Call;
use crate::engine::counted::{apply_release as apply_answer, released, HoldState, Sends};
use crate::engine::undo::{self, Armed, UndoFuture};
use crate::error::{Error, Result};

/// What the release script is asked to do, and what a resend must repeat.
#[derive(Clone)]
pub(in crate::lock) struct ReleaseCall {
    /// KEYS and ARGV of one request.
    call: Call,
    /// The lease a remaining hold is re-armed to.
    lease: Duration,
    /// The hold count sent.
    expected: u32,
}

impl ReleaseCall {
    pub(in crate::lock) fn new(
        shared: &Shared,
        lease: Duration,
        expected: u32,
        episode: u64,
        successor: Option<&Offer>,
    ) -> Self {
        let request = ReleaseRequest {
            key: shared.name.clone(),
            channel: shared.channel.clone(),
            token_key: shared.token_key.clone(),
            lease,
            owner: shared.owner.clone(),
            expected,
            successor: successor.map(|offer| Successor {
                owner: offer.lock().shared.owner.clone(),
                lease: offer.lock().lease(),
                if_alone: offer.if_alone(),
            }),
            announce: Announce::Mode(shared.client.notify_mode().code()),
            episode,
            receipt_ttl_ms: shared.client.receipt_ttl_ms(),
        };
        ReleaseCall {
            call: request.call(),
            lease,
            expected,
        }
    }

    async fn send(
        &self,
        shared: &Shared,
        tracker: Option<crate::engine::batch::Tracker>,
    ) -> redis::RedisResult<(i64, i64)> {
        let client = &shared.client;
        let (reply, acked) = shared.room.release.call(self.call.clone(), tracker).await?;
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

/// What finishing a release in the background is, for a warning when it
/// cannot run.
const FINISHING: (&str, &str) = (
    "finishing a release whose reply was lost",
    "the hold runs out with its lease",
);

/// A release started by a future that may be dropped before it holds the
/// owner's state: armed until then, it sends the release from a
/// background task instead.
pub(in crate::lock) fn pending_release(
    lock: &Lock,
    episode: u64,
) -> Armed<(), impl FnOnce(()) -> UndoFuture + Send + 'static> {
    let lock = lock.clone();
    let tasks = lock.shared.client.tasks().clone();
    let undo = undo::closure(move |()| {
        Box::pin(async move {
            let state = lock.shared.state.clone().lock_owned().await;
            let (lease, until) = (lock.lease(), Instant::now());
            let result =
                release_locked(&lock.shared, state, lease, false, until, Some(episode)).await;
            tracing::debug!(lock = %lock.shared.name, ?result, "released for a cancelled release call");
        })
    });
    let what = (
        "releasing for a cancelled release call",
        "the hold runs out with its lease",
    );
    Armed::new(&tasks, what, (), undo)
}

/// The release script, resent on a lost reply, with the owner's state
/// locked. Updates the local state from the answer. With `Some(episode)`
/// (a guard's release) only a hold of that episode is released (see
/// [`HoldState::is_episode`]). With `handoff`, a
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
pub(in crate::lock) async fn release_locked(
    shared: &Arc<Shared>,
    state: OwnedMutexGuard<HoldState>,
    lease: Duration,
    handoff: bool,
    until: Instant,
    episode: Option<u64>,
) -> Result<()> {
    let expected = state.count;
    if !state.is_episode(episode) {
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
        shared.room.handoffs.offer(&shared.name)
    } else {
        None
    };
    let yielding = offer.as_ref().is_some_and(Offer::if_alone);
    if yielding {
        // Past the streak limit this release may free the lock for the
        // other clients: hold this client's waiters back from before the
        // release message can reach them (shortened once the answer is in).
        shared
            .room
            .handoffs
            .yield_to_others(&shared.name, Instant::now() + YIELD_MAX);
    }
    let episode = state.episode;
    let call = ReleaseCall::new(shared, lease, expected, episode, offer.as_ref());
    // A release call on the wire holds the owner's state. Kept once the
    // answer is in; dropped unresolved (the releasing future was cancelled
    // mid-call, or no answer came), it finishes the release in the
    // background (see [`finish`]) once the call in flight has settled, so
    // the owner's next call never sees a count the server no longer has.
    let plain = ReleaseCall::new(shared, lease, expected, episode, None);
    let finishing = shared.clone();
    let undo = undo::closure(
        move |(state, mut sends): (OwnedMutexGuard<HoldState>, Sends)| {
            sends.resent = true;
            Box::pin(finish(finishing, state, plain, sends, until))
        },
    );
    let sends = Sends::start(shared.client.release_rules());
    let mut flight = Armed::new(client.tasks(), FINISHING, (state, sends), undo);
    let mut attempt = 0;
    let (status, value) = loop {
        attempt += 1;
        flight.state().1.answered = Instant::now();
        let (tracker, tracked) = crate::engine::batch::tracker();
        flight.after(tracked);
        match call.send(shared, Some(tracker)).await {
            Ok(reply) => break reply,
            Err(e) => {
                let e = client.map_err(e, Some(&shared.name));
                let lost_reply = e.is_reply_lost();
                if e.may_resend(attempt) {
                    tracing::debug!(lock = %shared.name, error = %e, "release reply lost; resending");
                    flight.state().1.resent = true;
                    continue;
                }
                // Dropping the offer tells the successor the outcome is
                // unknown; its own idempotent attempt sorts it out.
                drop(offer);
                if yielding {
                    shared.room.handoffs.clear_yield(&shared.name);
                }
                if !lost_reply {
                    // Redis refused the script: nothing was released, and
                    // resending cannot help. Give the hold up locally.
                    flight.keep().0.forget();
                }
                // Otherwise dropping the flight settles it in the
                // background.
                return Err(e);
            }
        }
    };
    let (mut state, sends) = flight.keep();
    if yielding {
        if status == released::LAST {
            // Freed for real at the streak limit because other clients
            // wait: give their woken waiter about two round trips.
            let pause = (sends.answered.elapsed() * 2).clamp(Duration::from_millis(1), YIELD_MAX);
            shared
                .room
                .handoffs
                .yield_to_others(&shared.name, sends.answered + pause);
        } else {
            shared.room.handoffs.clear_yield(&shared.name);
        }
    }
    match (status, offer.take()) {
        (released::HANDED_OFF, Some(offer)) => {
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

/// Applies a release answer to the owner's state (see `engine::counted`;
/// status 3, a hand-off, ends this owner's hold like a release).
fn apply_release(
    shared: &Shared,
    state: &mut HoldState,
    call: &ReleaseCall,
    status: i64,
    value: i64,
    sends: Sends,
) -> Result<()> {
    if status == released::LAST {
        shared.room.handoffs.freed(&shared.name);
    }
    let status = if status == released::HANDED_OFF {
        released::LAST
    } else {
        status
    };
    apply_answer(state, status, value, sends, Some(call.lease)).answer(&shared.name)
}

/// Finishes a release whose outcome is unknown (see [`settle`]); run once
/// the call in flight has settled. `until` is the end of the hold if the
/// owner has no registration. The state is the returned future's from the
/// call on: dropped unrun (its runtime ended), it forgets the hold.
fn finish(
    shared: Arc<Shared>,
    mut state: OwnedMutexGuard<HoldState>,
    call: ReleaseCall,
    sends: Sends,
    until: Instant,
) -> impl std::future::Future<Output = ()> + Send + 'static {
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
    let settling = Settling(Some(state));
    settle(shared, settling, call, sends, deadline)
}

/// The owner's state held by a background task. If the task is dropped
/// before it finishes (its runtime ended), the hold is forgotten rather
/// than left with a count the server may not have.
struct Settling(Option<OwnedMutexGuard<HoldState>>);

impl Drop for Settling {
    fn drop(&mut self) {
        if let Some(mut state) = self.0.take() {
            state.forget();
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
        match call.send(&shared, None).await {
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
                if !e.is_reply_lost() {
                    tracing::warn!(lock = %shared.name, error = %e, "Redis refused a release; the lease runs out by itself");
                    return; // Settling's drop forgets the hold.
                }
            }
        }
    }
}

/// Undoes a grant whose reply was never read (its caller went away, or
/// too few replicas saw it): the release script with the post-grant count
/// `expected_after` undoes a grant that landed and answers "nothing
/// changed" for one that did not; either way it leaves the local count at
/// the server's. `until` is when a grant that landed expires at the
/// latest: how long the undo may keep trying if Redis does not answer.
///
/// The owner's state is taken at once, so no other call of the owner
/// interleaves; if the returned future is dropped before it ran (its
/// runtime ended), the hold is forgotten rather than left half-known.
pub(in crate::lock) fn undo_grant(
    shared: Arc<Shared>,
    state: OwnedMutexGuard<HoldState>,
    expected_after: u32,
    lease: Duration,
    until: Instant,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let mut settling = Settling(Some(state));
    async move {
        let Some(mut state) = settling.0.take() else {
            return;
        };
        state.undoing(expected_after);
        let result = release_locked(&shared, state, lease, false, until, None).await;
        tracing::debug!(lock = %shared.name, ?result, "undid a grant nobody took");
    }
}

/// [`undo_grant`], run in the client's background work.
pub(in crate::lock) fn undo_grant_in_background(
    shared: Arc<Shared>,
    state: OwnedMutexGuard<HoldState>,
    expected_after: u32,
    lease: Duration,
    until: Instant,
) {
    let tasks = shared.client.tasks().clone();
    tasks.detach(
        "undoing a grant nobody took",
        "the hold stays until its lease runs out",
        undo_grant(shared, state, expected_after, lease, until),
    );
}
