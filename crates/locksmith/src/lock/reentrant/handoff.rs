//! Local hand-off: a release that would free a lock some owner of the same
//! client is waiting for grants it to that owner in the same script call.
//!
//! Without it, a contended hand-off inside one client costs the release,
//! the release message's trip through pub/sub, and the woken waiter's own
//! acquire. With it, the release script deletes the old holder's field,
//! writes the successor's with a fresh fencing token and lease, and the
//! successor is woken in-process already holding the lock.
//!
//! Waiters queue a [`Ticket`] per lock name in arrival order (FIFO within
//! the client). A ticket is only offered while its waiter is parked (not
//! in the middle of its own attempt) and while its owner's hold state can
//! be locked, which keeps the owner's other handles from interleaving and
//! makes a resent hand-off recognizable on the server.
//!
//! Fairness to other clients: a hand-off publishes no release message, so
//! waiters elsewhere (other processes, Redisson) do not get a chance while a
//! chain of hand-offs runs. After `max_local_handoffs` consecutive
//! hand-offs of one lock, the next hand-off only happens if no other
//! connection listens on the lock's release channel (checked inside the
//! release script with `PUBSUB NUMSUB`); otherwise the release frees the
//! lock for real and publishes. The streak counts hand-offs since the lock
//! was last freed for real, whatever happens to the queue in between (two
//! owners taking turns empty and refill it at every hand-off). After such
//! a forced release this client's own waiters hold back for about two
//! round trips of the release call, so the woken waiter of the other client
//! gets a real chance instead of losing the race to a waiter that is one
//! network hop closer.
//! Clients that poll instead of subscribing are not seen by that check;
//! a lock that is never free starves them whoever holds it.
//!
//! Cancellation: a waiter that goes away while offered marks its ticket
//! abandoned; the releaser then undoes a hand-off that may have landed. A
//! grant parked in a ticket is a [`LockGuard`], so dropping it releases the
//! lock like any other guard.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, OwnedMutexGuard};
use tokio::time::Instant;

use super::{HoldState, Lock, LockGuard};

/// Per-client registry of parked waiters, by lock name.
#[derive(Debug)]
pub(crate) struct Handoffs {
    /// Queues, streaks and yields, under one lock.
    registry: Mutex<Registry>,
    /// Consecutive hand-offs allowed per lock before a real release.
    limit: u32,
    /// Hand-offs that landed, over the client's life.
    completed: AtomicU64,
}

/// What the registry tracks per lock name. A name appears only while it
/// has waiters, an unbroken hand-off streak, or a yield in force.
#[derive(Debug, Default)]
struct Registry {
    /// Tickets in arrival order.
    queues: HashMap<String, VecDeque<Arc<Ticket>>>,
    /// Hand-offs since the lock was last freed for real. Kept apart from
    /// the queue: the queue empties whenever its last waiter is granted,
    /// while the streak must run until the lock is really freed.
    streaks: HashMap<String, u32>,
    /// Until when this client's waiters hold back after the lock was freed
    /// for real because the streak limit was reached.
    yields: HashMap<String, Instant>,
}

/// A parked waiter's place in the queue, and its mailbox for a grant.
#[derive(Debug)]
pub(in crate::lock) struct Ticket {
    /// The waiter's handle: owner, name and lease of the grant to make.
    lock: Lock,
    /// Where the waiter is in the hand-off protocol.
    state: Mutex<State>,
    /// Wakes the waiter when an offer is resolved.
    notify: Notify,
}

/// The protocol state of one ticket.
#[derive(Debug)]
enum State {
    /// Parked; may be offered the lock.
    Open,
    /// The waiter is running its own acquire attempt; not offered.
    Attempting,
    /// A releaser is handing the lock over; the waiter must wait for the
    /// outcome instead of attempting.
    Offered,
    /// The lock was handed over; the waiter takes the guard.
    Granted(LockGuard),
    /// The waiter went away while offered; the releaser cleans up.
    Abandoned,
}

/// What a waiter may do next, from [`TicketGuard::claim`].
pub(in crate::lock) enum Claim {
    /// Run an own acquire attempt, then call [`TicketGuard::reopen`].
    Attempt,
    /// A hand-off is in progress: wait for the ticket's notification.
    Pending,
    /// The lock was handed over.
    Granted(LockGuard),
}

impl Handoffs {
    /// A registry allowing `limit` consecutive hand-offs per lock (0
    /// disables hand-off).
    pub(crate) fn new(limit: u32) -> Self {
        Handoffs {
            registry: Mutex::new(Registry::default()),
            limit,
            completed: AtomicU64::new(0),
        }
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Number of tickets queued across all locks (diagnostics and tests).
    /// Parked waiters: queued and not in the middle of an attempt of their
    /// own (a release may hand them the lock, or is doing so).
    pub(crate) fn len(&self) -> usize {
        self.registry()
            .queues
            .values()
            .flatten()
            .filter(|ticket| !matches!(*ticket.lock_state(), State::Attempting))
            .count()
    }

    /// Hand-offs that landed so far (diagnostics and tests).
    pub(crate) fn completed(&self) -> u64 {
        self.completed.load(Ordering::Relaxed)
    }

    /// Picks the first parked waiter of `name` whose owner holds nothing
    /// and is not busy, and marks it offered. `None` when there is none or
    /// hand-off is disabled. Past the streak limit the offer is only
    /// good if no other client listens for the lock ([`Offer::if_alone`]).
    pub(in crate::lock) fn offer(&self, name: &str) -> Option<Offer> {
        if self.limit == 0 {
            return None;
        }
        let mut registry = self.registry();
        let Registry {
            queues, streaks, ..
        } = &mut *registry;
        let if_alone = streaks.get(name).is_some_and(|n| *n >= self.limit);
        let Some(queue) = queues.get(name) else {
            streaks.remove(name);
            return None;
        };
        for ticket in queue {
            let mut state = ticket.lock_state();
            if !matches!(*state, State::Open) {
                continue;
            }
            let Ok(hold) = ticket.lock.shared.state.clone().try_lock_owned() else {
                continue;
            };
            if hold.count != 0 {
                continue;
            }
            *state = State::Offered;
            let streak = streaks.entry(name.to_owned()).or_default();
            *streak = streak.saturating_add(1);
            return Some(Offer {
                successor: ticket.lock.clone(),
                ticket: Some(ticket.clone()),
                hold: Some(hold),
                if_alone,
            });
        }
        streaks.remove(name);
        None
    }

    /// The lock `name` was freed for real (or lost): a new streak starts.
    pub(in crate::lock) fn freed(&self, name: &str) {
        self.registry().streaks.remove(name);
    }

    /// The lock `name` is (about to be) freed for real because the streak
    /// limit was reached while other clients wait: this client's waiters
    /// hold back until `until` so one of those gets it.
    pub(in crate::lock) fn yield_to_others(&self, name: &str, until: Instant) {
        let mut registry = self.registry();
        // Forget yields that are over, so the map does not grow per name.
        let now = Instant::now();
        registry.yields.retain(|_, t| *t > now);
        registry.yields.insert(name.to_owned(), until);
    }

    /// The release did not free the lock after all: no yield.
    pub(in crate::lock) fn clear_yield(&self, name: &str) {
        self.registry().yields.remove(name);
    }

    /// Until when an acquire of `name` from this client should hold back,
    /// if a yield is in force.
    pub(in crate::lock) fn yielding_until(&self, name: &str) -> Option<Instant> {
        let mut registry = self.registry();
        let until = *registry.yields.get(name)?;
        if until <= Instant::now() {
            registry.yields.remove(name);
            return None;
        }
        Some(until)
    }
}

impl Ticket {
    fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A waiter's ticket; leaves the queue on drop.
pub(in crate::lock) struct TicketGuard {
    /// The ticket, shared with the registry and any releaser offering it.
    ticket: Arc<Ticket>,
}

impl TicketGuard {
    /// Queues a ticket for `lock` at the back of its lock's queue.
    pub(in crate::lock) fn join(lock: &Lock) -> TicketGuard {
        let ticket = Arc::new(Ticket {
            lock: lock.clone(),
            state: Mutex::new(State::Open),
            notify: Notify::new(),
        });
        let handoffs = &lock.shared.room.handoffs;
        handoffs
            .registry()
            .queues
            .entry(lock.shared.name.to_string())
            .or_default()
            .push_back(ticket.clone());
        TicketGuard { ticket }
    }

    /// Decides the waiter's next step; see [`Claim`].
    pub(in crate::lock) fn claim(&self) -> Claim {
        let mut state = self.ticket.lock_state();
        match std::mem::replace(&mut *state, State::Attempting) {
            State::Granted(guard) => Claim::Granted(guard),
            State::Offered => {
                *state = State::Offered;
                Claim::Pending
            }
            _ => Claim::Attempt,
        }
    }

    /// The waiter's own attempt is over: it may be offered the lock again.
    pub(in crate::lock) fn reopen(&self) {
        let mut state = self.ticket.lock_state();
        if matches!(*state, State::Attempting) {
            *state = State::Open;
        }
    }

    /// A grant that arrived while parked, if any.
    pub(in crate::lock) fn take_granted(&self) -> Option<LockGuard> {
        let mut state = self.ticket.lock_state();
        if !matches!(*state, State::Granted(_)) {
            return None;
        }
        match std::mem::replace(&mut *state, State::Open) {
            State::Granted(guard) => Some(guard),
            _ => None,
        }
    }

    /// Resolves when an offer of this ticket was resolved (granted or
    /// declined) since the last call.
    pub(in crate::lock) async fn notified(&self) {
        self.ticket.notify.notified().await;
    }
}

impl Drop for TicketGuard {
    fn drop(&mut self) {
        let lock = &self.ticket.lock;
        {
            let mut registry = lock.shared.room.handoffs.registry();
            if let Some(queue) = registry.queues.get_mut(&*lock.shared.name) {
                queue.retain(|t| !Arc::ptr_eq(t, &self.ticket));
                if queue.is_empty() {
                    registry.queues.remove(&*lock.shared.name);
                }
            }
        }
        let granted = {
            let mut state = self.ticket.lock_state();
            match std::mem::replace(&mut *state, State::Abandoned) {
                State::Granted(guard) => Some(guard),
                State::Offered => None,
                other => {
                    *state = other;
                    None
                }
            }
        };
        // A grant nobody will take: dropping the guard releases it.
        drop(granted);
    }
}

/// A releaser's offer to one waiter, holding that waiter's hold state
/// locked until the outcome is known. Dropped unresolved (the releasing
/// future was cancelled), it counts as an unknown outcome.
pub(in crate::lock) struct Offer {
    /// The successor's handle (the ticket's).
    successor: Lock,
    /// The offered ticket; taken when resolved.
    ticket: Option<Arc<Ticket>>,
    /// The successor owner's hold state.
    hold: Option<OwnedMutexGuard<HoldState>>,
    /// Hand off only if no other client listens for the lock.
    if_alone: bool,
}

impl Offer {
    /// The successor's handle.
    pub(in crate::lock) fn lock(&self) -> &Lock {
        &self.successor
    }

    /// Whether the hand-off must only happen when no other client listens
    /// on the lock's channel (the streak limit was reached).
    pub(in crate::lock) fn if_alone(&self) -> bool {
        self.if_alone
    }

    /// The hand-off landed with fencing token `token` (the granting call was
    /// sent at `sent_at`): record the grant in the successor's hold state
    /// and deliver its guard.
    pub(in crate::lock) fn complete(mut self, token: i64, sent_at: Instant) {
        let guard = match self.hold.as_mut() {
            Some(hold) => self.successor.grant(hold, token, 1, sent_at),
            None => return self.decline(true),
        };
        match guard {
            Ok(guard) => self.grant(guard),
            Err(_) => self.decline(true),
        }
    }

    /// Deliver `guard` to the waiter, or release it if the waiter went away.
    fn grant(mut self, guard: LockGuard) {
        self.successor
            .shared
            .room
            .handoffs
            .completed
            .fetch_add(1, Ordering::Relaxed);
        // Unlock the successor's state first: releasing an unwanted guard
        // needs it.
        self.hold = None;
        let Some(ticket) = self.ticket.take() else {
            return;
        };
        let unwanted = {
            let mut state = ticket.lock_state();
            if matches!(*state, State::Offered) {
                *state = State::Granted(guard);
                None
            } else {
                Some(guard)
            }
        };
        ticket.notify.notify_one();
        drop(unwanted);
    }

    /// The hand-off did not happen (`maybe_landed` false) or its outcome is
    /// unknown (true). The waiter goes back to waiting: when the outcome is
    /// unknown it is woken to try by itself, and its idempotent acquire
    /// picks up a hand-off that did land; otherwise it is not woken (if the
    /// release freed the lock, its message wakes waiters here and elsewhere
    /// alike, which keeps the race fair). If the waiter went away, a
    /// hand-off that may have landed is undone.
    pub(in crate::lock) fn decline(mut self, maybe_landed: bool) {
        self.resolve_declined(maybe_landed);
    }

    fn resolve_declined(&mut self, maybe_landed: bool) {
        let Some(ticket) = self.ticket.take() else {
            return;
        };
        let hold = self.hold.take();
        let abandoned = {
            let mut state = ticket.lock_state();
            if matches!(*state, State::Offered) {
                *state = State::Open;
                false
            } else {
                matches!(*state, State::Abandoned)
            }
        };
        if maybe_landed {
            ticket.notify.notify_one();
        }
        if let (true, true, Some(hold)) = (abandoned, maybe_landed, hold) {
            // Release the successor's hold with the count it has if the
            // hand-off landed; the release script answers "not held"
            // harmlessly if it did not.
            let until = Instant::now() + ticket.lock.lease();
            ticket.lock.undo_grant_later(hold, 1, until);
        }
    }
}

impl Drop for Offer {
    fn drop(&mut self) {
        self.resolve_declined(true);
    }
}
