//! One acquire request of an owner-based lock kind (fair, read-write),
//! sent through its batcher with the owner's state held: resent when the
//! reply is lost (the scripts are idempotent per owner and hold count),
//! and undone in the background when the caller goes away after sending
//! or the outcome stays unknown, with the state held until the undo is
//! done so no later call of the owner can overtake it.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex as StdMutex};

use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

use super::HoldState;
use crate::client::Client;
use crate::engine::batch::{Batcher, Call};
use crate::engine::lease::LeaseState;
use crate::engine::renewal::{Hold, Ownership};
use crate::engine::task::detach;
use crate::error::{Error, Result};

/// Undoes a grant that may have landed, given the owner's state.
pub(super) type Undo<S> =
    Arc<dyn Fn(OwnedMutexGuard<S>) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// A reply, and when it was asked for.
pub(super) struct Reply<S> {
    /// The script's answer for this request.
    pub(super) fields: Vec<i64>,
    /// When the send that was answered went out.
    pub(super) sent_at: Instant,
    /// When the first send went out (a grant by an earlier send started
    /// no earlier).
    pub(super) first_sent: Instant,
    /// Replicas that acknowledged, if asked.
    pub(super) acked: Option<u32>,
    /// The owner's state, still held.
    pub(super) state: OwnedMutexGuard<S>,
}

/// Sends `call` through `batcher` for lock `name` (see the module docs).
/// Status 1 or 2 in a reply means granted. A wrong-type error is answered
/// without undo (nothing was changed).
pub(super) async fn send<S: Send + 'static>(
    client: &Client,
    name: &str,
    batcher: &Batcher,
    call: Call,
    state: OwnedMutexGuard<S>,
    undo: Undo<S>,
) -> Result<Reply<S>> {
    let slot = Arc::new(StdMutex::new(Some(state)));
    let first_sent = Instant::now();
    let mut sends = 0;
    loop {
        sends += 1;
        let sent_at = Instant::now();
        let (undo_slot, on_reply) = (slot.clone(), undo.clone());
        let reply: redis::RedisResult<(Vec<i64>, Option<u32>)> = batcher
            .call_undoable(call.clone(), move |reply| {
                // The undo is an idempotent release of `expected + 1`
                // holds, harmless if nothing was granted: an unknown
                // outcome (None) is undone too.
                let granted = reply.as_ref().is_none_or(granted);
                if let (Some(state), true) = (take(&undo_slot), granted) {
                    detach(
                        "undoing the grant of a cancelled acquire",
                        "the hold stays until its lease runs out",
                        on_reply(state),
                    );
                }
            })
            .await;
        match reply {
            Ok((fields, acked)) => {
                let Some(state) = take(&slot) else {
                    return Err(Error::invalid("the owner's state went missing"));
                };
                return Ok(Reply {
                    fields,
                    sent_at,
                    first_sent,
                    acked,
                    state,
                });
            }
            Err(e) => {
                let e = client.map_err(e, Some(name));
                if e.may_resend(sends) {
                    tracing::debug!(lock = %name, error = %e, "acquire reply lost; resending");
                    continue;
                }
                if let Some(state) = take(&slot) {
                    if !matches!(e, Error::WrongType { .. }) {
                        // The outcome is unknown: undo a grant that may
                        // have landed.
                        detach(
                            "undoing an acquire whose outcome is unknown",
                            "a grant that landed stays until its lease runs out",
                            undo(state),
                        );
                    }
                }
                return Err(e);
            }
        }
    }
}

fn take<S>(slot: &StdMutex<Option<OwnedMutexGuard<S>>>) -> Option<OwnedMutexGuard<S>> {
    slot.lock().unwrap_or_else(|e| e.into_inner()).take()
}

/// True when a raw acquire reply says granted (status 1 or 2).
fn granted(reply: &redis::Value) -> bool {
    matches!(reply, redis::Value::Array(items)
        if matches!(items.first(), Some(redis::Value::Int(1 | 2))))
}

/// What a grant reply says, for [`record_grant`].
pub(super) struct Granted {
    /// 1: granted by the send answered at `sent_at`; 2: by an earlier send
    /// (no earlier than `first_sent`), with `left_ms` of lease left.
    pub(super) status: i64,
    /// Fencing token of the grant (used for a first hold).
    pub(super) token: i64,
    /// The owner's hold count now.
    pub(super) count: u32,
    /// Lease left on the server (status 2).
    pub(super) left_ms: i64,
    pub(super) sent_at: Instant,
    pub(super) first_sent: Instant,
}

/// Records a grant in the owner's `state`: a first hold registers `hold`
/// with the watchdog (its lease runs from the send that set it); a further
/// hold re-arms the registration. Answers the lease state for the guard,
/// or `None` if the hold has no registration (should not happen).
pub(super) fn record_grant(
    client: &Client,
    state: &mut HoldState,
    grant: Granted,
    hold: Hold,
) -> Option<Arc<LeaseState>> {
    let armed_at = if grant.status == 1 {
        grant.sent_at
    } else {
        grant.first_sent
    };
    let lease = hold.lease;
    if state.count == 0 || state.registration.is_none() {
        state.token = u64::try_from(grant.token).unwrap_or(0);
        state.registration = Some(client.renewer().register(hold, armed_at));
    } else if let Some(reg) = &state.registration {
        reg.rearmed(armed_at, lease);
    }
    if grant.status == 2 {
        if let Some(reg) = &state.registration {
            let left = std::time::Duration::from_millis(u64::try_from(grant.left_ms).unwrap_or(0));
            reg.maybe_rearmed(grant.sent_at, left);
        }
    }
    state.count = grant.count;
    state.registration.as_ref().map(|reg| reg.state().clone())
}

/// The watchdog entry of a hash-field hold.
pub(super) fn hash_hold(
    key: &Arc<str>,
    ownership: Ownership,
    owner: Arc<str>,
    lease: std::time::Duration,
    renew: bool,
) -> Hold {
    Hold {
        key: key.clone(),
        ownership,
        owner,
        lease,
        renew,
    }
}

/// Records a release's answer in the owner's hold: the holds left (none:
/// the hold is over, no longer renewed), or (`None`) not held at all (the
/// hold was lost: forgotten, its lease marked lost).
pub(super) fn record_release(hold: &mut HoldState, left: Option<u32>) {
    match left {
        Some(0) => {
            hold.count = 0;
            hold.registration = None;
        }
        Some(left) => hold.count = left,
        None => super::release::forget(hold),
    }
}

/// Finishes a release whose reply was lost (every resend timed out): keeps
/// resending in the background, with the owner's `state` held so no later
/// call of the owner overtakes it, until Redis answers or `until` passes
/// (by then the hold has run out with its lease). `resend` answers the
/// holds left (`Some`) or that none is held (`None`); `apply` records that
/// in the state, `None` also when time ran out.
pub(super) fn settle<S, R, Fut>(
    state: OwnedMutexGuard<S>,
    until: Instant,
    resend: R,
    apply: fn(&mut S, Option<u32>),
) where
    S: Send + Sync + 'static,
    R: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = Result<Option<u32>>> + Send,
{
    detach(
        "finishing a release whose reply was lost",
        "the hold runs out with its lease",
        async move {
            let mut state = state;
            let mut pause = std::time::Duration::from_millis(100);
            loop {
                let now = Instant::now();
                if now >= until {
                    apply(&mut state, None);
                    return;
                }
                tokio::time::sleep(pause.min(until - now)).await;
                if let Ok(left) = resend().await {
                    apply(&mut state, left);
                    return;
                }
                pause = (pause * 2).min(std::time::Duration::from_secs(2));
            }
        },
    );
}
