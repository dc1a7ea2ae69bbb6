//! The notify hub: one dedicated pub/sub connection per
//! [`Client`](crate::Client), shared by every waiter of that client.
//!
//! Waiters register per channel (reference-counted: the first subscribes,
//! the last unsubscribes). Per channel they form a FIFO queue. What a
//! message wakes is the channel's [`Policy`], chosen by the primitive that
//! owns the channel, from the message payload:
//!
//! - [`Wake::One`] (a release of something one waiter can take): only the
//!   first waiter that is not already awake, so a release causes one retry
//!   per client, not a thundering herd;
//! - [`Wake::All`] (something every waiter can pass now): every waiter;
//! - [`Wake::Units`] (a message carrying how many units are free now):
//!   waiters in queue order as long as the units they ask for fit in what
//!   is free, counting those already awake;
//! - [`Wake::Nobody`]: a message that opens nothing.
//!
//! Each primitive picks the policy of its channel.
//!
//! A waiter that fails its retry simply stays at its place in the queue. A
//! waiter that is cancelled while holding an unconsumed wake-up passes it on.
//!
//! Pub/sub is at-most-once: after a reconnect every waiter is woken (a
//! message may have been missed), and callers always bound their sleep by
//! the lock's remaining lease so a lost message costs a bounded delay.
//!
//! The connection is health-checked with `PING` every `ping_interval`: a
//! half-open connection (the server or a middlebox forgot it, and nothing
//! says so) would otherwise deliver nothing, turning every waiter into a
//! lease-length poller. A failed ping replaces the connection. Reconnects
//! back off exponentially (50 ms to 2 s) while they keep failing.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;

use crate::engine::subscriber::{Event, Source, Subscriber};
use crate::engine::task::{TaskSlot, Tasks};

/// What one message wakes (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// No waiter.
    Nobody,
    /// The first waiter not already awake.
    One,
    /// Every waiter.
    All,
    /// Waiters in queue order while the units they ask for fit in this
    /// many, counting the units of waiters already awake.
    Units(u64),
}

/// Decides what a message on a channel wakes, from its payload. Each
/// primitive names its own (its channel carries only its messages).
pub(crate) type Policy = fn(&[u8]) -> Wake;

/// The policy of a channel whose every message frees something one waiter
/// can take: any message wakes one waiter.
pub(crate) fn wake_one(_: &[u8]) -> Wake {
    Wake::One
}

/// A waiter's mailbox.
#[derive(Debug, Default)]
struct Slot {
    /// A wake-up was delivered and not yet consumed; used to pass it on if
    /// the waiter goes away, and to skip awake waiters when picking whom to
    /// wake.
    woken: AtomicBool,
    /// A wake-up was taken and the check it prompts has not completed
    /// (see [`Waiter::checked`]): if the waiter goes away meanwhile (its
    /// caller cancelled while the attempt still waited its turn to be
    /// sent), the wake-up is handed on, as one never taken is.
    acting: AtomicBool,
    /// Delivers the wake-up; stores it if the waiter is busy retrying.
    notify: Notify,
    /// Units this waiter asks for (1 unless its primitive counts);
    /// [`Wake::Units`] wakes only as many waiters as can be satisfied.
    need: u64,
    /// The waiter stopped waiting for its channel's first confirmation
    /// before it came: the confirmation wakes it to re-check (a waiter that
    /// saw it needs no such wake-up).
    gave_up: AtomicBool,
}

impl Slot {
    fn wake(&self) {
        self.woken.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }
}

/// One subscribed channel.
#[derive(Debug)]
struct Channel {
    /// Waiters in arrival order.
    queue: VecDeque<Arc<Slot>>,
    /// What a message wakes; set by the first waiter's primitive.
    policy: Policy,
    /// Handles that keep the channel subscribed while nobody waits (see
    /// [`NotifyHub::keep`]).
    keepers: usize,
    /// The channel has been confirmed subscribed before: a later
    /// confirmation is a re-subscription, after which every waiter must
    /// re-check (a message may have been missed meanwhile).
    confirmed_once: bool,
    /// Turns true once Redis confirmed the subscription; waiters wait for it
    /// before their re-check, which closes the busy-then-subscribe race.
    ready: watch::Sender<bool>,
    /// Messages received on this channel so far. A caller that saw the same
    /// value before its last attempt and after joining the queue of a ready
    /// channel knows no release slipped in between, and can skip the
    /// re-check.
    seq: u64,
    /// When the lock's current holder's lease runs out, as last reported by
    /// a waiter's busy answer: lets a newcomer queue behind existing waiters
    /// without a round trip, with a bounded fallback wake-up.
    busy_until: Option<Instant>,
}

/// Requests to the connection task.
#[derive(Debug)]
enum Command {
    /// Subscribe to a channel that just got its first waiter.
    Subscribe(String),
    /// Unsubscribe a channel whose last waiter left (skipped if it got a
    /// new waiter meanwhile).
    Unsubscribe(String),
}

/// State shared by the hub handle, its task and its waiters.
#[derive(Debug, Default)]
struct Shared {
    /// Channels with at least one waiter.
    channels: Mutex<HashMap<String, Channel>>,
    /// Command queue of the running connection task; replaced when the task
    /// is restarted (its runtime ended), so waiters send through this slot
    /// rather than keeping a sender of their own.
    commands: Mutex<Option<mpsc::UnboundedSender<Command>>>,
    /// Cancelled by [`NotifyHub::close`].
    closed: tokio_util::sync::CancellationToken,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Channel>> {
        self.channels.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends `command` to the connection task. If the task is gone, the
    /// next one subscribes to every registered channel when it connects.
    fn send(&self, command: Command) {
        if let Some(tx) = self
            .commands
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            let _ = tx.send(command);
        }
    }

    /// Wakes the waiters of `channel` that a message with `payload` is for,
    /// as the channel's policy decides.
    fn deliver(&self, channel: &str, payload: &[u8]) {
        let mut channels = self.lock();
        let Some(ch) = channels.get_mut(channel) else {
            return;
        };
        ch.seq += 1;
        let awake = |s: &Arc<Slot>| s.woken.load(Ordering::SeqCst);
        match (ch.policy)(payload) {
            Wake::Nobody => {}
            Wake::One => {
                if let Some(slot) = ch.queue.iter().find(|s| !awake(s)) {
                    slot.wake();
                }
            }
            Wake::All => ch.queue.iter().for_each(|s| s.wake()),
            Wake::Units(available) => {
                // Waiters already awake will compete for these units too.
                let claimed: u64 = ch.queue.iter().filter(|s| awake(s)).map(|s| s.need).sum();
                let mut left = available.saturating_sub(claimed);
                for slot in ch.queue.iter().filter(|s| !awake(s)) {
                    // Strict queue order: a waiter that does not fit holds
                    // back those behind it, so a large request is not
                    // starved by a stream of small ones.
                    if slot.need > left {
                        break;
                    }
                    left -= slot.need;
                    slot.wake();
                }
            }
        }
    }

    /// The subscription of `channel` was just confirmed: on a first
    /// subscription, wakes the waiters that stopped waiting for it; on a
    /// re-subscription, every waiter.
    fn confirmed(&self, channel: &str) {
        if let Some(ch) = self.lock().get_mut(channel) {
            ch.seq += 1;
            let again = std::mem::replace(&mut ch.confirmed_once, true);
            for slot in &ch.queue {
                if again || slot.gave_up.load(Ordering::SeqCst) {
                    slot.wake();
                }
            }
        }
    }

    /// Wakes every waiter of `channel` (a message may have been missed).
    fn wake_channel(&self, channel: &str) {
        if let Some(ch) = self.lock().get_mut(channel) {
            ch.seq += 1;
            ch.queue.iter().for_each(|s| s.wake());
        }
    }

    /// Marks every channel as not subscribed (its connection is gone).
    fn unready_all(&self) {
        for ch in self.lock().values_mut() {
            ch.ready.send_replace(false);
            ch.seq += 1;
        }
    }

    /// Wakes every waiter of every channel (after a reconnect).
    fn wake_all(&self) {
        for ch in self.lock().values_mut() {
            ch.seq += 1;
            ch.queue.iter().for_each(|s| s.wake());
        }
    }
}

/// Timing of the hub's connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HubTimeouts {
    /// Bounds opening the connection.
    pub(crate) connect: Duration,
    /// Bounds each SUBSCRIBE, UNSUBSCRIBE and PING.
    pub(crate) command: Duration,
    /// How often the connection is checked with PING.
    pub(crate) ping_interval: Duration,
}

/// The per-Client hub. Cheap to hold; its task starts on first use.
#[derive(Debug)]
pub(crate) struct NotifyHub {
    /// Waiter registry, shared with the task and the waiters.
    shared: Arc<Shared>,
    /// Where the dedicated pub/sub connection goes (and is re-opened).
    source: Source,
    /// Connect, command and health-check timing.
    timeouts: HubTimeouts,
    /// The connection task; restarted on the current runtime if the one
    /// it ran on has ended.
    task: TaskSlot,
    /// The client's background work: every waiter counts in it while it
    /// waits (see [`Tasks::token`]).
    tasks: Tasks,
}

impl NotifyHub {
    /// A hub that will connect to `source`.
    pub(crate) fn new(source: Source, timeouts: HubTimeouts, tasks: Tasks) -> Self {
        NotifyHub {
            shared: Arc::new(Shared::default()),
            source,
            timeouts,
            task: TaskSlot::default(),
            tasks,
        }
    }

    /// Closes the hub for good (its client is closing): the connection
    /// task ends (its command queue closes), no new one starts, and every
    /// waiter wakes once at once (its next check fails: the client takes
    /// no new acquires), after which waiters sleep their normal bounds.
    pub(crate) fn close(&self) {
        self.shared.closed.cancel();
        self.task.stop();
        self.shared
            .commands
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        // Registrations still waiting for their subscription stop
        // waiting: none will come.
        for ch in self.shared.lock().values() {
            ch.ready.send_replace(true);
        }
        self.shared.wake_all();
    }

    /// True once the hub was closed (its client is closing).
    pub(crate) fn is_closed(&self) -> bool {
        self.shared.closed.is_cancelled()
    }

    /// Starts the connection task if it is not running.
    fn ensure_task(&self) {
        if self.shared.closed.is_cancelled() {
            return;
        }
        let restarted = self.task.ensure(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            *self
                .shared
                .commands
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(tx);
            run(
                self.source.clone(),
                Arc::downgrade(&self.shared),
                rx,
                self.timeouts,
            )
        });
        if restarted {
            // A task that ended with its runtime left its channels marked
            // subscribed; the new connection subscribes them again, and
            // their waiters re-check meanwhile (a message may be lost).
            self.shared.unready_all();
            self.shared.wake_all();
        }
    }

    /// Number of channels currently subscribed or being subscribed.
    pub(crate) fn channel_count(&self) -> usize {
        self.shared.lock().len()
    }

    /// The message count of `channel` if it is subscribed and confirmed;
    /// `None` otherwise. Purely local.
    pub(crate) fn seq(&self, channel: &str) -> Option<u64> {
        let channels = self.shared.lock();
        channels
            .get(channel)
            .filter(|ch| *ch.ready.borrow())
            .map(|ch| ch.seq)
    }

    /// When other waiters of this client already queue on a confirmed
    /// subscription of `channel`, the holder's lease end they last saw.
    /// A newcomer can then join the queue without trying first: the lock is
    /// known to be held, and a release will wake the queue in order.
    pub(crate) fn busy_until(&self, channel: &str) -> Option<Instant> {
        let channels = self.shared.lock();
        let ch = channels.get(channel)?;
        if !*ch.ready.borrow() || ch.queue.is_empty() {
            return None;
        }
        ch.busy_until.filter(|t| *t > Instant::now())
    }

    /// Joins the queue of `channel`, subscribing if this is its first
    /// waiter, and waits until the subscription is confirmed, but no later
    /// than `deadline` (the caller's own) and no longer than the command
    /// timeout. Re-check the resource after this returns.
    ///
    /// `policy` decides what the channel's messages wake (the first
    /// waiter's policy stays with the channel); `need` is the units this
    /// waiter asks for, 1 where units do not apply.
    ///
    /// Cancel safe: dropping the future leaves the queue again.
    pub(crate) async fn register(
        &self,
        channel: &str,
        policy: Policy,
        need: u64,
        deadline: Option<Instant>,
    ) -> Waiter {
        self.ensure_task();
        let slot = Arc::new(Slot {
            need,
            ..Slot::default()
        });
        let (mut ready, first) = {
            let mut channels = self.shared.lock();
            match channels.get_mut(channel) {
                Some(ch) => {
                    ch.queue.push_back(slot.clone());
                    (ch.ready.subscribe(), false)
                }
                None => {
                    let (tx, rx) = watch::channel(false);
                    channels.insert(
                        channel.to_owned(),
                        Channel {
                            queue: VecDeque::from([slot.clone()]),
                            policy,
                            keepers: 0,
                            confirmed_once: false,
                            ready: tx,
                            seq: 0,
                            busy_until: None,
                        },
                    );
                    (rx, true)
                }
            }
        };
        let waiter = Waiter {
            shared: self.shared.clone(),
            channel: channel.to_owned(),
            slot,
            _waiting: self.tasks.token(),
        };
        if first {
            self.shared.send(Command::Subscribe(channel.to_owned()));
        }
        // If the subscription cannot be confirmed in time, carry on: the
        // caller's bounded sleep still guarantees progress.
        let mut until = later(self.timeouts.command);
        if let Some(d) = deadline {
            until = until.min(d);
        }
        let _ = tokio::time::timeout_at(until, ready.wait_for(|r| *r)).await;
        // Marked before looking, so that a confirmation landing in between
        // either is seen here or finds the mark and wakes this waiter.
        waiter.slot.gave_up.store(true, Ordering::SeqCst);
        if *ready.borrow() {
            waiter.slot.gave_up.store(false, Ordering::SeqCst);
        }
        waiter
    }

    /// Keeps `channel` subscribed while the returned [`Keeper`] lives, even
    /// when nobody waits on it, so waiters that come and go (one owner's
    /// successive acquires on its own channel) do not subscribe and
    /// unsubscribe each time. The first waiter's `policy` still decides
    /// what messages wake; `policy` here applies if the keeper comes first.
    pub(crate) fn keep(&self, channel: &str, policy: Policy) -> Keeper {
        self.ensure_task();
        let mut channels = self.shared.lock();
        match channels.get_mut(channel) {
            Some(ch) => ch.keepers += 1,
            None => {
                channels.insert(
                    channel.to_owned(),
                    Channel {
                        queue: VecDeque::new(),
                        policy,
                        keepers: 1,
                        confirmed_once: false,
                        ready: watch::channel(false).0,
                        seq: 0,
                        busy_until: None,
                    },
                );
                drop(channels);
                self.shared.send(Command::Subscribe(channel.to_owned()));
            }
        }
        Keeper {
            shared: self.shared.clone(),
            channel: channel.to_owned(),
        }
    }
}

/// Keeps a channel subscribed (see [`NotifyHub::keep`]); dropping the last
/// keeper of a channel nobody waits on unsubscribes it.
#[derive(Debug)]
pub(crate) struct Keeper {
    /// Registry to update on drop.
    shared: Arc<Shared>,
    /// The channel kept.
    channel: String,
}

impl Drop for Keeper {
    fn drop(&mut self) {
        let mut channels = self.shared.lock();
        let Some(ch) = channels.get_mut(&self.channel) else {
            return;
        };
        ch.keepers = ch.keepers.saturating_sub(1);
        if ch.keepers == 0 && ch.queue.is_empty() {
            channels.remove(&self.channel);
            drop(channels);
            self.shared.send(Command::Unsubscribe(self.channel.clone()));
        }
    }
}

/// A registration in a channel's queue. Dropping it leaves the queue (and
/// unsubscribes when it was the last waiter).
#[derive(Debug)]
pub(crate) struct Waiter {
    /// Registry to leave on drop, and the way to request the unsubscribe.
    shared: Arc<Shared>,
    /// The channel waited on.
    channel: String,
    /// This waiter's mailbox.
    slot: Arc<Slot>,
    /// Counts this wait in the client's background work, so closing the
    /// client waits for the waits it woke to end.
    _waiting: tokio_util::task::task_tracker::TaskTrackerToken,
}

impl Waiter {
    /// Records a busy answer: the holder's lease runs until `until`.
    pub(crate) fn note_busy(&self, until: Instant) {
        if let Some(ch) = self.shared.lock().get_mut(&self.channel) {
            ch.busy_until = Some(until);
        }
    }

    /// Sleeps until a message wakes this waiter or `until` passes. Returns
    /// true when woken by a message. The hub's closing ends the sleep of a
    /// waiter that began it before (one that begins after sleeps as
    /// usual, so a caller that goes on waiting cannot spin).
    ///
    /// A wake-up it returns stays this waiter's to act on until the check
    /// it prompts completes ([`Waiter::checked`], or the next call here):
    /// dropped before, the waiter hands it on to the next one.
    pub(crate) async fn wait_until(&self, until: Instant) -> bool {
        // Back to sleep: whatever woke it last was acted on.
        self.slot.acting.store(false, Ordering::SeqCst);
        let closed = &self.shared.closed;
        let woken = if closed.is_cancelled() {
            tokio::time::timeout_at(until, self.slot.notify.notified())
                .await
                .is_ok()
        } else {
            tokio::select! {
                woken = tokio::time::timeout_at(until, self.slot.notify.notified()) => woken.is_ok(),
                () = closed.cancelled() => return false,
            }
        };
        if woken {
            // Taken: a later message wakes the next waiter, and this one
            // acts on it until its check completes.
            self.slot.acting.store(true, Ordering::SeqCst);
            self.slot.woken.store(false, Ordering::SeqCst);
        }
        woken
    }

    /// The check a wake-up prompted has completed (its attempt was
    /// answered, whatever the answer): the wake-up was used. Every wait
    /// loop calls it after each check; a loop that did not would hand a
    /// spent wake-up on when it ends (a needless re-check for the next
    /// waiter, never a lost one).
    pub(crate) fn checked(&self) {
        self.slot.acting.store(false, Ordering::SeqCst);
    }
}

impl Waiter {
    /// Hands a wake-up this waiter consumed without using it (its check
    /// failed for a reason of its own, such as another resource it takes
    /// together with this one being busy) to the first waiter queued *behind* it that
    /// is not awake, so a release that woke only one waiter is not lost.
    /// Only later waiters are woken, so waiters that keep failing pass
    /// it down the queue once and never back and forth.
    pub(crate) fn pass_on(&self) {
        self.checked();
        let channels = self.shared.lock();
        let Some(ch) = channels.get(&self.channel) else {
            return;
        };
        if let Some(next) = ch
            .queue
            .iter()
            .skip_while(|s| !Arc::ptr_eq(s, &self.slot))
            .skip(1)
            .find(|s| !s.woken.load(Ordering::SeqCst))
        {
            next.wake();
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut channels = self.shared.lock();
        let Some(ch) = channels.get_mut(&self.channel) else {
            return;
        };
        ch.queue.retain(|s| !Arc::ptr_eq(s, &self.slot));
        if ch.queue.is_empty() && ch.keepers == 0 {
            channels.remove(&self.channel);
            drop(channels);
            self.shared.send(Command::Unsubscribe(self.channel.clone()));
        } else if self.slot.woken.load(Ordering::SeqCst) || self.slot.acting.load(Ordering::SeqCst)
        {
            // We were woken but never acted on it, or went away before the
            // check it prompted was answered (an attempt withdrawn unsent):
            // hand the wake-up on.
            if let Some(next) = ch.queue.iter().find(|s| !s.woken.load(Ordering::SeqCst)) {
                next.wake();
            }
        }
    }
}

/// `d` from now, saturating far in the future instead of overflowing.
fn later(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365))
}

/// Shortest and longest pause between reconnect attempts.
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// A connection that lived at least this long before failing was healthy:
/// reconnect at once, with the back-off reset.
const HEALTHY: Duration = Duration::from_secs(1);

/// The connection task: (re)connects, keeps subscriptions in line with the
/// registry, checks the connection's health, and dispatches messages. Ends
/// when the hub is dropped.
async fn run(
    source: Source,
    shared: Weak<Shared>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    timeouts: HubTimeouts,
) {
    let mut backoff = BACKOFF_MIN;
    let mut reconnecting = false;
    loop {
        if shared.upgrade().is_none_or(|s| s.closed.is_cancelled()) {
            return;
        }
        let connected_at = Instant::now();
        let outcome = session(&source, &shared, &mut commands, timeouts, &mut reconnecting).await;
        if let Session::HubGone = outcome {
            return;
        }
        match shared.upgrade() {
            Some(strong) if !strong.closed.is_cancelled() => strong.unready_all(),
            _ => return,
        }
        if connected_at.elapsed() >= HEALTHY {
            backoff = BACKOFF_MIN;
        } else {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }
}

/// Why a connection session ended.
enum Session {
    /// The hub (and its client) is gone: stop.
    HubGone,
    /// Connecting, subscribing or a health check failed: reconnect.
    Failed,
}

/// One connection's life: connect, subscribe to every registered channel,
/// then serve commands, messages and health checks until something fails.
async fn session(
    source: &Source,
    shared: &Weak<Shared>,
    commands: &mut mpsc::UnboundedReceiver<Command>,
    timeouts: HubTimeouts,
    reconnecting: &mut bool,
) -> Session {
    let Ok(Ok(mut sub)) = tokio::time::timeout(timeouts.connect, Subscriber::open(source)).await
    else {
        return if shared.upgrade().is_none() {
            Session::HubGone
        } else {
            Session::Failed
        };
    };
    let wanted: Vec<String> = match shared.upgrade() {
        Some(strong) => strong.lock().keys().cloned().collect(),
        None => return Session::HubGone,
    };
    if !wanted.is_empty()
        && !matches!(
            tokio::time::timeout(timeouts.command, sub.subscribe(&wanted)).await,
            Ok(Ok(()))
        )
    {
        return Session::Failed;
    }
    {
        let Some(strong) = shared.upgrade() else {
            return Session::HubGone;
        };
        let mut channels = strong.lock();
        // Only what was just subscribed is ready; channels registered since
        // have a Subscribe command queued and become ready when it is done.
        for name in &wanted {
            if let Some(ch) = channels.get_mut(name) {
                ch.ready.send_replace(true);
                ch.confirmed_once = true;
            }
        }
        drop(channels);
        if *reconnecting {
            tracing::debug!("pub/sub reconnected; waking all waiters");
            strong.wake_all();
        }
    }
    *reconnecting = true;
    let mut health =
        tokio::time::interval_at(later(timeouts.ping_interval), timeouts.ping_interval);
    health.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            command = commands.recv() => {
                let Some(command) = command else { return Session::HubGone };
                let ok = match command {
                    Command::Subscribe(channel) => {
                        let ok = matches!(
                            tokio::time::timeout(
                                timeouts.command,
                                sub.subscribe(std::slice::from_ref(&channel)),
                            )
                            .await,
                            Ok(Ok(()))
                        );
                        if ok {
                            if let Some(strong) = shared.upgrade() {
                                let confirmed = strong
                                    .lock()
                                    .get(&channel)
                                    .is_some_and(|ch| !ch.ready.send_replace(true));
                                if confirmed {
                                    strong.confirmed(&channel);
                                }
                            }
                        }
                        ok
                    }
                    Command::Unsubscribe(channel) => {
                        let still_wanted = shared
                            .upgrade()
                            .is_some_and(|s| s.lock().contains_key(&channel));
                        still_wanted
                            || matches!(
                                tokio::time::timeout(timeouts.command, sub.unsubscribe(&channel)).await,
                                Ok(Ok(()))
                            )
                    }
                };
                if !ok {
                    tracing::debug!("pub/sub command failed; reconnecting");
                    return Session::Failed;
                }
            }
            event = sub.next() => {
                let Some(strong) = shared.upgrade() else { return Session::HubGone };
                match event {
                    Event::Message(channel, payload) => {
                        metrics::counter!("locksmith_notifications_total").increment(1);
                        strong.deliver(&channel, &payload)
                    }
                    Event::Resubscribed(channel) => {
                        // Moved with its slot (or confirmed after a node
                        // reconnect): a release may have been missed.
                        let ready = strong
                            .lock()
                            .get(&channel)
                            .is_some_and(|ch| *ch.ready.borrow());
                        if ready {
                            strong.wake_channel(&channel);
                        }
                    }
                    Event::Dropped(channel) => {
                        // A migrated slot takes its sharded subscriptions
                        // with it; unless we asked for this, follow it.
                        let wanted = strong
                            .lock()
                            .get(&channel)
                            .is_some_and(|ch| ch.ready.send_replace(false));
                        if wanted {
                            tracing::debug!(%channel, "sharded subscription moved with its slot; subscribing again");
                            strong.send(Command::Subscribe(channel.clone()));
                            strong.wake_channel(&channel);
                        }
                    }
                    Event::Interrupted => {
                        tracing::debug!("pub/sub connection to a node dropped; waiters re-check");
                        strong.wake_all();
                    }
                    Event::Closed => {
                        tracing::debug!("pub/sub connection closed; reconnecting");
                        return Session::Failed;
                    }
                }
            }
            _ = health.tick() => {
                let pong = tokio::time::timeout(timeouts.command, sub.ping()).await;
                if !matches!(pong, Ok(Ok(()))) {
                    tracing::warn!("pub/sub connection failed its health check; replacing it");
                    return Session::Failed;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A registry with one channel of `policy` whose waiters ask for
    /// `needs` units, in this order.
    fn channel(policy: Policy, needs: &[u64]) -> (Shared, Vec<Arc<Slot>>) {
        let shared = Shared::default();
        let slots: Vec<Arc<Slot>> = needs
            .iter()
            .map(|&need| {
                Arc::new(Slot {
                    need,
                    ..Slot::default()
                })
            })
            .collect();
        shared.lock().insert(
            "ch".into(),
            Channel {
                queue: slots.iter().cloned().collect(),
                policy,
                keepers: 0,
                confirmed_once: true,
                ready: watch::channel(true).0,
                seq: 0,
                busy_until: None,
            },
        );
        (shared, slots)
    }

    fn awake(slots: &[Arc<Slot>]) -> Vec<bool> {
        slots
            .iter()
            .map(|s| s.woken.load(Ordering::SeqCst))
            .collect()
    }

    fn units(payload: &[u8]) -> Wake {
        Wake::Units(std::str::from_utf8(payload).unwrap().parse().unwrap())
    }

    #[test]
    fn one_wakes_the_first_waiter_not_awake() {
        let (shared, slots) = channel(wake_one, &[1, 1, 1]);
        shared.deliver("ch", b"0");
        assert_eq!(awake(&slots), [true, false, false]);
        shared.deliver("ch", b"0");
        assert_eq!(awake(&slots), [true, true, false]);
    }

    #[test]
    fn all_and_nobody() {
        let (shared, slots) = channel(
            |m| if m == b"0" { Wake::All } else { Wake::Nobody },
            &[1, 1],
        );
        shared.deliver("ch", b"1");
        assert_eq!(awake(&slots), [false, false]);
        shared.deliver("ch", b"0");
        assert_eq!(awake(&slots), [true, true]);
    }

    #[test]
    fn units_wake_only_as_many_waiters_as_they_satisfy_in_order() {
        let (shared, slots) = channel(units, &[2, 1, 3, 1]);
        shared.deliver("ch", b"3");
        assert_eq!(awake(&slots), [true, true, false, false]);
        // The two awake waiters will take 3 of these 4: only 1 is left,
        // and the 3-unit waiter holds back the one behind it.
        shared.deliver("ch", b"4");
        assert_eq!(awake(&slots), [true, true, false, false]);
        shared.deliver("ch", b"6");
        assert_eq!(awake(&slots), [true, true, true, false]);
        shared.deliver("ch", b"7");
        assert_eq!(awake(&slots), [true, true, true, true]);
    }

    #[test]
    fn unknown_channels_are_ignored() {
        let (shared, slots) = channel(wake_one, &[1]);
        shared.deliver("other", b"0");
        assert_eq!(awake(&slots), [false]);
    }
}
