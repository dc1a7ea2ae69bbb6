//! An owner's counted hold (a hash field whose value counts re-entries)
//! and the release core every counted kind shares: one release request,
//! resent after a lost reply, read into the owner's state, and settled in
//! the background when Redis stops answering.
//!
//! A release script answers one of four statuses (the kinds' scripts agree
//! on them; [`released`] names them, with the reentrant lock's fifth, a
//! hand-off):
//! - `1`: this owner's last hold is released (freed, or found freed by an
//!   earlier send of the same release through its *receipt*, see below);
//! - `2`: one hold released, `value` left, the lease re-armed by this send;
//! - `4`: nothing changed, the owner has `value` holds: a resend whose
//!   first send landed, or the undo of a grant that never landed;
//! - `0`: not held by this owner (`value`: the count the server has).
//!
//! **Gone after a resend.** A release resent by this core after a lost
//! reply that finds no hold of the
//! owner cannot tell by itself whether its first send released the hold or
//! the hold was already gone (expired, force-unlocked, wiped by a restart
//! or a failover). It answers [`Unconfirmed`], except when the answer is
//! exact anyway: the lease had run out on the server before the first send
//! went out ([`NotHeld`]), or, with release receipts on
//! (`ClientBuilder::release_receipts`), a final release, which leaves a
//! receipt (`{NAME}:locksmith_released:<field>` = the hold's episode, for
//! [`receipt_ttl`]): a resend that finds the hold gone answers `1` only
//! when the receipt of this very hold is there, otherwise `0`
//! ([`NotHeld`]).
//!
//! Known gap: on a cluster, redis-rs's own retries may repeat a release
//! unseen after a dropped connection; a repeat that finds the hold gone
//! is read as `NotHeld`, though the unseen first send may have released it
//! (receipts close it for final releases).
//!
//! [`NotHeld`]: crate::Error::NotHeld
//! [`Unconfirmed`]: crate::Error::Unconfirmed

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, OwnedMutexGuard};
use tokio::time::Instant;

use crate::engine::batch::MAX_IN_FLIGHT;
use crate::engine::conn::{Timing, ATTEMPTS};
use crate::engine::lua::RUN_PATIENCE;
use crate::engine::renewal::Registration;
use crate::engine::task::Tasks;
use crate::error::{Error, Result};

/// The statuses a counted kind's release script answers (the first field
/// of `{status, value}`; see the module docs).
pub(crate) mod released {
    /// This owner's last hold released (or found released by an earlier
    /// send, through its receipt).
    pub(crate) const LAST: i64 = 1;
    /// One hold released, `value` left, the lease re-armed by this send.
    pub(crate) const ONE: i64 = 2;
    /// The lock freed and handed to a waiter of the same client, `value`
    /// its new fencing token (the reentrant lock's hand-off).
    pub(crate) const HANDED_OFF: i64 = 3;
    /// Nothing changed, the owner has `value` holds.
    pub(crate) const UNCHANGED: i64 = 4;
    // Anything else (`0`): not held by this owner (`value`: the count the
    // server has).
}

/// Who acts on a handle: the tokio task a call runs in, or the thread for
/// a call outside any task (the blocking API, a `block_on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Actor {
    /// A tokio task.
    Task(tokio::task::Id),
    /// A thread, outside any task.
    Thread(std::thread::ThreadId),
}

impl Actor {
    /// The caller.
    pub(crate) fn current() -> Actor {
        match tokio::task::try_id() {
            Some(id) => Actor::Task(id),
            None => Actor::Thread(std::thread::current().id()),
        }
    }
}

/// How long an acquire shut out by [`ActorGate`] waits before it looks
/// again, when no release message wakes it first.
pub(crate) const GATE_POLL: Duration = Duration::from_millis(50);

/// Which actor an owner's exclusive hold belongs to. One owner (a handle
/// and its clones) re-enters its own hold, as Redisson's owner (a client
/// and a thread) does; the owner's identity on the server stays the
/// handle's, and locally each hold episode belongs to the actor it was
/// given to. Another task (or thread) acquiring through the same handle
/// while that hold lasts is shut out like any other owner, instead of
/// re-entering a hold it does not have: a handle kept in shared state
/// (axum's `State`) excludes the requests that use it at once.
#[derive(Debug, Default)]
pub(crate) struct ActorGate {
    /// The episode last given out, and to whom.
    given: std::sync::Mutex<Option<(u64, Actor)>>,
}

impl ActorGate {
    /// The guard of `episode` was given to the current actor.
    pub(crate) fn given(&self, episode: u64) {
        *self.given.lock().unwrap_or_else(|e| e.into_inner()) = Some((episode, Actor::current()));
    }

    /// Whether the current actor must wait for `state`'s hold to end.
    pub(crate) fn shuts_out(&self, state: &HoldState) -> bool {
        self.shuts_out_for(state, Actor::current())
    }

    /// Whether `actor` must wait for `state`'s hold to end: the owner holds
    /// it, and its episode was given to another actor (or is not given out
    /// yet: a grant on its way to a waiter).
    pub(crate) fn shuts_out_for(&self, state: &HoldState, actor: Actor) -> bool {
        if state.count == 0 {
            return false;
        }
        match *self.given.lock().unwrap_or_else(|e| e.into_inner()) {
            Some((episode, holder)) if episode == state.episode => holder != actor,
            _ => true,
        }
    }
}

/// This owner's hold, as last confirmed by the server.
#[derive(Debug, Default)]
pub(crate) struct HoldState {
    /// Current hold count of this owner.
    pub(crate) count: u32,
    /// Fencing token of the current hold episode.
    pub(crate) token: u64,
    /// This process's id of the current hold episode (from 1; 0 for none):
    /// what its final release's receipt holds. Fencing tokens cannot serve
    /// here, as holds granted side by side may share one.
    pub(crate) episode: u64,
    /// Watchdog registration of the current episode (also for fixed leases,
    /// where it only runs the expiry timer).
    pub(crate) registration: Option<Registration>,
}

impl HoldState {
    /// Forgets the hold locally (it was released, or lost): count zero, no
    /// watchdog entry. Marks the lease lost if it was still live.
    pub(crate) fn forget(&mut self) {
        self.count = 0;
        if let Some(reg) = self.registration.take() {
            reg.state().mark_lost();
        }
    }

    /// A first hold begins a new episode: its fencing token and its
    /// watchdog registration.
    pub(crate) fn begin(&mut self, token: i64, registration: Registration) -> &Registration {
        static EPISODES: AtomicU64 = AtomicU64::new(1);
        self.token = u64::try_from(token).unwrap_or(0);
        self.episode = EPISODES.fetch_add(1, Ordering::Relaxed);
        self.registration.insert(registration)
    }

    /// Whether this owner holds something a release of `episode` may end:
    /// any hold for `None`, a hold of that very episode for `Some`. A
    /// guard outlives its episode when the hold is lost (its lease ran
    /// out, it was force-unlocked) and the owner starts another; the old
    /// guard must not release the new episode.
    pub(crate) fn is_episode(&self, episode: Option<u64>) -> bool {
        self.count > 0 && episode.is_none_or(|e| e == self.episode)
    }

    /// Moves the lease end of the hold of `episode` forward (see
    /// [`Registration::extend`]): `Ok(false)` when this owner no longer
    /// holds that episode, or the server no longer shows it.
    pub(crate) async fn extend(
        &self,
        episode: u64,
        client: &crate::Client,
        lease: Duration,
    ) -> Result<bool> {
        match &self.registration {
            Some(registration) if self.is_episode(Some(episode)) => {
                registration.extend(client, lease).await
            }
            _ => {
                crate::engine::validate::lease(lease)?;
                Ok(false)
            }
        }
    }

    /// Gives up this owner's hold of `episode` locally (its release cannot
    /// run): count zero, no longer renewed, its lease marked lost. `hold`
    /// finds the hold in the owner's state. Answers false when the state is
    /// locked by a call under way.
    pub(crate) fn abandon<S>(
        state: &tokio::sync::Mutex<S>,
        hold: impl FnOnce(&mut S) -> &mut HoldState,
        episode: u64,
    ) -> bool {
        match state.try_lock() {
            Ok(mut state) => {
                hold(&mut state).give_up(episode);
                true
            }
            Err(_) => false,
        }
    }

    /// Forgets the hold of `episode` (see [`HoldState::forget`]), if it is
    /// still this owner's.
    fn give_up(&mut self, episode: u64) {
        if self.is_episode(Some(episode)) {
            self.forget();
        }
    }

    /// Before undoing a grant whose reply was never read: the undo's
    /// release must not take a receipt of an earlier episode for its own
    /// (episode 0 matches no receipt but the undo's own).
    pub(crate) fn undoing(&mut self, count: u32) {
        if self.count == 0 {
            self.episode = 0;
        }
        self.count = count;
    }

    /// The hold itself, for a [`Releaser`] whose owner state is just
    /// this hold.
    pub(crate) fn whole(&mut self) -> &mut HoldState {
        self
    }

    /// The hold is over (released): count zero, no longer renewed.
    fn ended(&mut self) {
        self.count = 0;
        self.registration = None;
    }
}

/// How long a final release's receipt stays: as long as the release may
/// still be resent inline, in the worst case: every one of the library's
/// sends waits behind the calls already in flight and takes the command
/// timeout, redis-rs resends each up to three more times on a cluster, and
/// the connection is re-established twice; on a cluster each send may
/// also be refused as not run (a slot being migrated) for up to
/// [`RUN_PATIENCE`] before it lands. A resend in the background after that
/// finds no receipt and counts the hold as lost, which only ends it sooner
/// locally (its caller was already told the release failed).
pub(crate) fn receipt_ttl(timing: Timing, cluster: bool) -> Duration {
    let per_send = if cluster { 4 } else { 1 };
    let refused = if cluster {
        RUN_PATIENCE * ATTEMPTS as u32
    } else {
        Duration::ZERO
    };
    timing.command * (ATTEMPTS * per_send + MAX_IN_FLIGHT) as u32 + timing.connect * 2 + refused
}

/// When a release's sends went out: what decides how to read its answer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sends {
    /// When the first send went out.
    pub(crate) first: Instant,
    /// When the send that was answered went out.
    pub(crate) answered: Instant,
    /// An earlier send of the same release may have landed.
    pub(crate) resent: bool,
    /// How the client's releases are sent.
    pub(crate) rules: ReleaseRules,
}

/// What a client's releases make of "gone after a resend" (see the module
/// docs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReleaseRules {
    /// Final releases leave receipts, so their resend's "gone" is exact.
    pub(crate) receipts: bool,
    /// The longest the server's expiry of a hold may come after the
    /// owner's local deadline: a grant or renewal is answered within the
    /// command timeout of its send, from which the deadline is measured.
    pub(crate) expiry_slack: Duration,
}

impl Sends {
    /// A release about to be sent for the first time.
    pub(crate) fn start(rules: ReleaseRules) -> Sends {
        let now = Instant::now();
        Sends {
            first: now,
            answered: now,
            resent: false,
            rules,
        }
    }
}

/// Reads a release's answer (`status`, `value`, see the module docs) into
/// the owner's hold. `rearm` is the lease a release re-arms remaining holds
/// to, or `None` when the kind's release does not touch their leases (holds
/// that each keep a lease of their own). A re-arm is measured from the
/// send that did it, and a resend answered "nothing changed" may only move
/// the deadline earlier (the first send re-armed it, no earlier than it
/// went out).
/// Answers what became of the hold.
pub(crate) fn apply_release(
    hold: &mut HoldState,
    status: i64,
    value: i64,
    sends: Sends,
    rearm: Option<Duration>,
) -> Released {
    let left = u32::try_from(value).unwrap_or(0);
    match status {
        released::LAST => hold.ended(),
        released::ONE => {
            hold.count = left;
            if let (Some(lease), Some(reg)) = (rearm, &hold.registration) {
                reg.rearmed(sends.answered, lease);
            }
        }
        released::UNCHANGED => {
            hold.count = left;
            if let (true, Some(lease), Some(reg)) = (sends.resent, rearm, &hold.registration) {
                reg.maybe_rearmed(sends.first, lease);
            }
        }
        _ => {
            // {0, 0}: no hold of the owner's at all. After a resend, that
            // may be the first send's doing as well as a loss, unless the
            // lease had run out on the server before the first send went
            // out, or a final release's receipt was looked for.
            let lost_before = hold.registration.as_ref().is_some_and(|reg| {
                reg.state().deadline() + sends.rules.expiry_slack <= sends.first
            });
            let exact = !sends.resent || lost_before || (sends.rules.receipts && hold.count == 1);
            let unconfirmed = value == 0 && !exact;
            hold.forget();
            return if unconfirmed {
                Released::Unconfirmed
            } else {
                Released::NotHeld
            };
        }
    }
    Released::Yes
}

/// What a release's answer says became of the hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// Released as the owner believed it held it.
    Yes,
    /// The owner did not hold what it released (the hold was lost).
    NotHeld,
    /// Gone, and no telling whether an earlier send released it or it was
    /// lost before ([`Error::Unconfirmed`]).
    Unconfirmed,
}

impl Released {
    /// The caller's answer: `Ok`, [`Error::NotHeld`] or
    /// [`Error::Unconfirmed`] for lock `name`.
    pub(crate) fn answer(self, name: &str) -> Result<()> {
        match self {
            Released::Yes => Ok(()),
            Released::NotHeld => Err(Error::NotHeld {
                name: name.to_string(),
            }),
            Released::Unconfirmed => Err(Error::Unconfirmed {
                name: name.to_string(),
            }),
        }
    }
}

/// Sends one release request of a counted kind: `expected` is the hold
/// count the owner has before it, then the hold's episode (what its
/// receipt holds). Answers `(status, value)`.
pub(crate) type SendRelease =
    Arc<dyn Fn(u32, u64) -> Pin<Box<dyn Future<Output = Result<(i64, i64)>> + Send>> + Send + Sync>;

/// One kind of counted hold, as the release core sees it.
pub(crate) struct Releaser<S> {
    /// The owner's state, which serializes its calls.
    pub(crate) state: Arc<Mutex<S>>,
    /// Which hold in the state this release is about.
    pub(crate) hold: fn(&mut S) -> &mut HoldState,
    /// The lock's name, for errors and logs.
    pub(crate) name: Arc<str>,
    /// The lease remaining holds are re-armed to (see [`apply_release`]).
    pub(crate) rearm: Option<Duration>,
    /// How long a hold with no registration may still be on the server
    /// when a release of it is settled in the background.
    pub(crate) lease: Duration,
    /// The kind's release request.
    pub(crate) send: SendRelease,
    /// How the client's releases are read.
    pub(crate) rules: ReleaseRules,
    /// The client's background work: releases run there.
    pub(crate) tasks: Tasks,
}

impl<S> Clone for Releaser<S> {
    fn clone(&self) -> Self {
        Releaser {
            state: self.state.clone(),
            hold: self.hold,
            name: self.name.clone(),
            rearm: self.rearm,
            lease: self.lease,
            send: self.send.clone(),
            rules: self.rules,
            tasks: self.tasks.clone(),
        }
    }
}

impl<S: Send + 'static> Releaser<S> {
    fn not_held(&self) -> Error {
        Error::NotHeld {
            name: self.name.to_string(),
        }
    }

    /// Releases one hold of `episode` (a guard's: the episode it was
    /// granted in), from a task of its own so a dropped caller does not
    /// interrupt it (cancel safe).
    pub(crate) async fn release_one(self, episode: u64) -> Result<()> {
        let tasks = self.tasks.clone();
        let task = tasks.spawn(async move {
            let state = self.state.clone().lock_owned().await;
            self.release_locked(state, Some(episode)).await
        });
        match task.await {
            Ok(result) => result,
            Err(e) => Err(Error::internal(format!("the release task failed: {e}"))),
        }
    }

    /// Releases one hold with the owner's state held: sends (resending a
    /// lost reply), then reads the answer into the state. When no answer
    /// comes, a last hold stops being renewed at once and the release is
    /// resent in the background until Redis answers or the hold's lease is
    /// over, with the state held meanwhile so no later call of the owner
    /// overtakes it.
    ///
    /// With `Some(episode)` (a guard's release), only a hold of that
    /// episode is released: a guard of an episode that was lost answers
    /// [`NotHeld`](crate::Error::NotHeld) and leaves the owner's later
    /// episode alone. `None` releases whatever this owner holds (undoing a
    /// grant nobody took).
    pub(crate) async fn release_locked(
        &self,
        mut state: OwnedMutexGuard<S>,
        episode: Option<u64>,
    ) -> Result<()> {
        let hold = (self.hold)(&mut state);
        let (expected, token) = (hold.count, hold.episode);
        if !hold.is_episode(episode) {
            return Err(self.not_held());
        }
        let mut sends = Sends::start(self.rules);
        let mut attempt = 0;
        let (status, value) = loop {
            attempt += 1;
            sends.answered = Instant::now();
            match (self.send)(expected, token).await {
                Ok(reply) => break reply,
                Err(e) if e.may_resend(attempt) => {
                    tracing::debug!(name = %self.name, error = %e, "release reply lost; resending");
                    sends.resent = true;
                }
                Err(e) if e.is_reply_lost() => {
                    self.settle(state, expected, token, sends);
                    return Err(e);
                }
                Err(e) => {
                    // Redis refused the script: resending cannot help (an
                    // earlier send may have landed). Give the hold up
                    // locally; the lease runs out on the server.
                    (self.hold)(&mut state).forget();
                    return Err(e);
                }
            }
        };
        apply_release((self.hold)(&mut state), status, value, sends, self.rearm).answer(&self.name)
    }

    /// Finishes a release whose reply was lost (see
    /// [`Releaser::release_locked`]).
    fn settle(&self, mut state: OwnedMutexGuard<S>, expected: u32, token: u64, mut sends: Sends) {
        let hold = (self.hold)(&mut state);
        let until = hold
            .registration
            .as_ref()
            .map_or(sends.first + self.lease, |reg| reg.state().deadline());
        if expected == 1 {
            // The owner let go: the lease runs out by itself whatever
            // becomes of the resends.
            hold.registration = None;
        }
        let this = self.clone();
        sends.resent = true;
        self.tasks.detach(
            "finishing a release whose reply was lost",
            "the hold runs out with its lease",
            async move {
                let mut state = state;
                let mut pause = Duration::from_millis(20);
                loop {
                    let now = Instant::now();
                    if now >= until {
                        tracing::warn!(name = %this.name, "release not confirmed before the lease ended; the lease runs out by itself");
                        (this.hold)(&mut state).forget();
                        return;
                    }
                    tokio::time::sleep(pause.min(until - now)).await;
                    pause = (pause * 2).min(Duration::from_millis(500));
                    sends.answered = Instant::now();
                    match (this.send)(expected, token).await {
                        Ok((status, value)) => {
                            let outcome = apply_release(
                                (this.hold)(&mut state),
                                status,
                                value,
                                sends,
                                this.rearm,
                            );
                            tracing::debug!(name = %this.name, ?outcome, "release settled in the background");
                            return;
                        }
                        Err(e) if e.is_reply_lost() => {}
                        Err(e) => {
                            tracing::warn!(name = %this.name, error = %e, "Redis refused a release; the lease runs out by itself");
                            (this.hold)(&mut state).forget();
                            return;
                        }
                    }
                }
            },
        );
    }
}
