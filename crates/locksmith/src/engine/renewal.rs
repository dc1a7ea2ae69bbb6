//! The watchdog: one task per [`Client`](crate::Client) that keeps every
//! held lease alive in batched script calls, and the timer that declares a
//! lease lost when it runs out locally.
//!
//! Each registered hold has a local deadline (see [`LeaseState`]). Renewed
//! holds are refreshed every third of their lease; all holds due around the
//! same time go to Redis in one call of their kind's renewal script (many
//! keys per call; see [`RenewScript`]). A
//! hold the server reports gone is marked lost at once; a hold whose
//! renewal cannot be confirmed is marked lost when its deadline passes, so
//! the signal fires even if Redis never answers.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Duration;

use crate::engine::slot::Slot;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::engine::conn::Acks;
use crate::engine::lease::LeaseState;
use crate::engine::lua::Lua;
use crate::engine::slot;
use crate::engine::task::TaskSlot;
use crate::engine::topology::Conn;
use crate::error::{Error, Result};

/// Most keys sent in one renewal call, so a huge batch does not block the
/// server for long.
const MAX_BATCH: usize = 512;

/// How a kind's holds are renewed: its renewal script, one request per
/// hold (KEYS: the hold's key; ARGV: its owner as the kind records it, the
/// lease in milliseconds; answers 1 renewed, 0 no longer held), built on
/// `each_hold` (`engine/holds.lua`). The kind registers it with each hold;
/// holds due together share one call per script (per slot on a cluster,
/// the slots of one node in one round trip).
pub(crate) type RenewScript = &'static LazyLock<Lua>;

/// What the watchdog needs to know about one hold.
pub(crate) struct Hold {
    /// The lock key to extend (shared with the lock handle).
    pub(crate) key: Arc<str>,
    /// How the hold is renewed (its kind's script).
    pub(crate) script: RenewScript,
    /// The owner field or token the server must still show.
    pub(crate) owner: Arc<str>,
    /// The lease to extend to on each renewal.
    pub(crate) lease: Duration,
    /// False for fixed leases: only the expiry timer runs.
    pub(crate) renew: bool,
}

/// One registered hold inside the watchdog.
struct Entry {
    /// The hold itself.
    hold: Hold,
    /// Shared with the guard: deadline and lost signal.
    state: Arc<LeaseState>,
    /// When the next renewal should be sent.
    next_renewal: Instant,
    /// A renewal for this entry is on the wire; don't send another.
    in_flight: bool,
    /// When the renewal on the wire was prepared (no later than it was
    /// sent): if a lock call re-arms the lease meanwhile, the renewal may
    /// still land after it, with the lease it carries.
    in_flight_since: Instant,
    /// The last renewal failed: `next_renewal` is a retry time and must be
    /// honoured exactly, not pulled forward into a batch.
    retrying: bool,
    /// Bumped whenever a lock call re-arms the lease. A renewal reply
    /// applies only if no re-arm happened since the renewal was sent: a
    /// stale reply must not overwrite the lease a later call set.
    generation: u64,
    /// A fixed lease's hold: when it began, and whether the 80% warning
    /// went out.
    granted: Instant,
    warned: bool,
}

/// State shared by the [`Renewer`] handle and its task.
struct Shared {
    /// Registered holds by id.
    entries: Mutex<HashMap<u64, Entry>>,
    /// Source of entry ids.
    next_id: std::sync::atomic::AtomicU64,
    /// Wakes the task when an entry is added, a call completes, or the
    /// `Renewer` is dropped. Its own `Arc` so the sleeping task does not
    /// keep `Shared` alive.
    wake: Arc<Notify>,
    /// When the task plans to wake next. Written and read only while
    /// `entries` is locked, so a registration either is seen by the task's
    /// scan or sees the plan that scan produced, and wakes the task only if
    /// it needs attention sooner.
    planned_wake: Mutex<Option<Instant>>,
    /// The task; started on first use inside the caller's runtime, and
    /// again if that runtime ends while holds remain.
    task: TaskSlot,
    /// Connection the renewal calls go over.
    conn: Conn,
    /// Replica acknowledgement a renewal must get to count.
    acks: Acks,
    /// Set by [`Renewer::close`]: nothing is renewed any more.
    closed: std::sync::atomic::AtomicBool,
}

/// Handle to a Client's watchdog. Dropping the last handle stops the task.
pub(crate) struct Renewer {
    /// Shared with the task through a weak reference.
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Renewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Renewer")
            .field("holds", &self.len())
            .finish()
    }
}

impl Drop for Renewer {
    fn drop(&mut self) {
        // Let the task notice that it is no longer needed.
        self.shared.wake.notify_one();
    }
}

/// Keeps a hold registered with the watchdog; dropping it unregisters.
#[derive(Debug)]
pub(crate) struct Registration {
    /// The entry id.
    id: u64,
    /// Weak so a leftover registration never keeps the watchdog alive.
    shared: Weak<Shared>,
    /// The hold's lease state, shared with its guards.
    state: Arc<LeaseState>,
}

impl Registration {
    /// The lease state of this hold.
    pub(crate) fn state(&self) -> &Arc<LeaseState> {
        &self.state
    }

    /// A lock call sent at `sent_at` set the lease to `lease` on the server
    /// (a re-entry or a release's re-arm, possibly with another lease than
    /// before): the local deadline follows exactly, and the watchdog
    /// extends to `lease` from now on, next at a third of it.
    pub(crate) fn rearmed(&self, sent_at: Instant, lease: Duration) {
        self.state.armed(sent_at, lease);
        self.update(|entry| {
            if entry.in_flight {
                // A renewal sent before this call may be applied after it
                // (same connection, but sent later than the call was
                // prepared), setting the renewal's lease instead.
                entry
                    .state
                    .maybe_armed(entry.in_flight_since, entry.hold.lease);
            }
            entry.hold.lease = lease;
            entry.next_renewal = sent_at + lease / 3;
            // A fixed lease re-armed starts its 80% clock again.
            entry.granted = sent_at;
            entry.warned = false;
        });
    }

    /// A lock call sent at `sent_at` *may* have set the lease to `lease`
    /// (a resend answered "already done"): the deadline and the next
    /// renewal can only move earlier.
    pub(crate) fn maybe_rearmed(&self, sent_at: Instant, lease: Duration) {
        self.state.maybe_armed(sent_at, lease);
        self.update(|entry| {
            entry.next_renewal = entry.next_renewal.min(sent_at + lease / 3);
        });
    }

    /// Moves a fixed lease's end forward: to `lease` from now, unless the
    /// server's end is later already (the kinds' renewal scripts never
    /// shorten a lease). Answers `Ok(false)` when the server no longer
    /// shows the hold (then marked lost here), an error when Redis did not
    /// confirm the call (then nothing changes locally: the lease view
    /// stays as it was, never later than the server's end).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a hold the watchdog renews (its
    /// lease is kept by the watchdog, not moved by hand), or a bad
    /// `lease`; [`Error::Closed`] once the client closed; Redis errors.
    pub(crate) async fn extend(&self, client: &crate::Client, lease: Duration) -> Result<bool> {
        crate::engine::validate::lease(lease)?;
        client.admit()?;
        if self.state.is_lost() {
            // Lost locally already: the guard says so, and stays lost.
            return Ok(false);
        }
        let closed = || {
            client
                .admit()
                .err()
                .unwrap_or_else(|| Error::internal("no watchdog"))
        };
        let shared = self.shared.upgrade().ok_or_else(closed)?;
        let (key, owner, script) = {
            let entries = shared.lock_entries();
            let Some(entry) = entries.get(&self.id) else {
                // Unregistered: lost (or the client closed).
                return if shared.is_closed() {
                    Err(closed())
                } else {
                    Ok(false)
                };
            };
            if entry.hold.renew {
                return Err(Error::invalid(
                    "this hold is renewed by the watchdog; extend is for holds with a fixed \
                     lease (taken through with_lease)",
                ));
            }
            (
                entry.hold.key.clone(),
                entry.hold.owner.clone(),
                entry.hold.script,
            )
        };
        let mut cmd = script.evalsha(1);
        cmd.arg(&*key).arg(&*owner).arg(lease.as_millis() as u64);
        let sent_at = Instant::now();
        let (reply, acked) = script
            .run(&shared.conn, &cmd, shared.acks)
            .await
            .map_err(|e| Error::from_redis_for_key(e, &key))?;
        if shared.acks.short(acked) {
            return Err(Error::protocol(format!(
                "extend of {key:?} acknowledged by {} replica(s) of {}",
                acked.unwrap_or(0),
                shared.acks.min
            )));
        }
        let renewed: Vec<i64> = redis::from_redis_value(reply)
            .map_err(|e| Error::protocol(format!("extend of {key:?}: {e}")))?;
        if renewed.first() != Some(&1) {
            self.state.mark_lost();
            shared.lock_entries().remove(&self.id);
            return Ok(false);
        }
        self.state.extended(sent_at, lease);
        if self.state.is_lost() {
            // The local deadline passed while the call was out: the guard
            // reported the hold lost, and that answer stands (the server's
            // lease, extended, runs out on its own).
            return Ok(false);
        }
        // The lease now ends at the later of the two ends; the 80% warning
        // of a fixed lease counts towards it from here.
        let left = self.state.deadline().saturating_duration_since(sent_at);
        self.update(|entry| {
            entry.hold.lease = left.max(lease);
            entry.granted = sent_at;
            entry.warned = false;
        });
        Ok(true)
    }

    /// Applies `f` to this hold's entry, invalidates renewal replies in
    /// flight, and wakes the watchdog (restarting it if its runtime ended).
    fn update(&self, f: impl FnOnce(&mut Entry)) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        if let Some(entry) = shared.lock_entries().get_mut(&self.id) {
            f(entry);
            entry.generation += 1;
            entry.retrying = false;
        }
        shared.ensure_task();
        shared.wake.notify_one();
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            shared.lock_entries().remove(&self.id);
        }
    }
}

impl Shared {
    fn is_closed(&self) -> bool {
        self.closed.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn lock_entries(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts the task on the current runtime if it is not running.
    fn ensure_task(self: &Arc<Self>) {
        if self.is_closed() {
            return;
        }
        let restarted = self
            .task
            .ensure(|| run(Arc::downgrade(self), self.conn.clone(), self.acks));
        if restarted {
            let mut entries = self.lock_entries();
            if !entries.is_empty() {
                tracing::debug!("watchdog task (re)started on the current runtime");
            }
            // Renewal calls of the old runtime died with it: none is on the
            // wire any more.
            for entry in entries.values_mut() {
                entry.in_flight = false;
            }
        }
    }
}

impl Renewer {
    /// A watchdog sending its calls over `conn`; its task starts on first
    /// registration.
    pub(crate) fn new(conn: Conn, acks: Acks) -> Self {
        Renewer {
            shared: Arc::new(Shared {
                entries: Mutex::new(HashMap::new()),
                next_id: std::sync::atomic::AtomicU64::new(1),
                wake: Arc::new(Notify::new()),
                planned_wake: Mutex::new(None),
                task: TaskSlot::default(),
                conn,
                acks,
                closed: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    /// Restarts the watchdog task if the runtime it ran on has ended while
    /// holds are registered. Cheap; called on every lock operation.
    pub(crate) fn ensure_running(&self) {
        if !self.shared.task.is_running() && !self.shared.lock_entries().is_empty() {
            self.shared.ensure_task();
        }
    }

    /// Stops the watchdog for good (its client is closing): every hold
    /// registered is marked lost (its guards report it, its lost signal
    /// fires) and forgotten, and a hold registered later is lost from the
    /// start. The task ends.
    pub(crate) fn close(&self) {
        self.shared
            .closed
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let entries = std::mem::take(&mut *self.shared.lock_entries());
        for entry in entries.values() {
            entry.state.mark_lost();
        }
        self.shared.task.stop();
    }

    /// Number of registered holds (renewed or timer-only).
    pub(crate) fn len(&self) -> usize {
        self.shared.lock_entries().len()
    }

    /// Registers a hold granted by a command sent at `sent_at`.
    pub(crate) fn register(&self, hold: Hold, sent_at: Instant) -> Registration {
        self.register_part(hold, sent_at, true)
    }

    /// As [`Renewer::register`], for one node's part of a hold kept on
    /// several (see [`Quorum`](crate::engine::lease::Quorum)); `warn`:
    /// whether this part gives the fixed-lease warning at 80% of the lease
    /// (one part of a hold does, not each).
    pub(crate) fn register_part(&self, hold: Hold, sent_at: Instant, warn: bool) -> Registration {
        let state = Arc::new(LeaseState::new(sent_at, hold.lease));
        let id = self
            .shared
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let first_event = if hold.renew {
            sent_at + hold.lease / 3
        } else {
            state.deadline()
        };
        let entry = Entry {
            next_renewal: sent_at + hold.lease / 3,
            hold,
            state: state.clone(),
            in_flight: false,
            in_flight_since: sent_at,
            retrying: false,
            generation: 0,
            granted: sent_at,
            warned: !warn,
        };
        let wake = {
            let mut entries = self.shared.lock_entries();
            if self.shared.is_closed() {
                // Granted as the client closed: not renewed, so lost.
                state.mark_lost();
                return Registration {
                    id,
                    shared: Arc::downgrade(&self.shared),
                    state,
                };
            }
            entries.insert(id, entry);
            let planned = *self
                .shared
                .planned_wake
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            planned.is_none_or(|p| first_event < p)
        };
        self.shared.ensure_task();
        if wake {
            self.shared.wake.notify_one();
        }
        Registration {
            id,
            shared: Arc::downgrade(&self.shared),
            state,
        }
    }
}

/// The watchdog task: expire, batch due renewals, sleep until the next
/// event. Ends when the Client (and with it the `Renewer`) is gone.
async fn run(shared: Weak<Shared>, conn: Conn, acks: Acks) {
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        if strong.is_closed() {
            return;
        }
        let now = Instant::now();
        let mut batch: Vec<Due> = Vec::new();
        let mut wake_at = now + Duration::from_secs(60);
        {
            let mut entries = strong.lock_entries();
            entries.retain(|_, entry| {
                if entry.state.deadline() <= now && entry.hold.renew {
                    tracing::warn!(key = %entry.hold.key, "lease ran out before renewal was confirmed; marking the hold lost");
                }
                // Marks the lease lost once its deadline has passed.
                !entry.state.is_lost()
            });
            for (id, entry) in entries.iter_mut() {
                wake_at = wake_at.min(entry.state.deadline());
                if !entry.hold.renew && !entry.warned {
                    // A fixed lease: warn once 80% of it has gone by.
                    let warn_at = entry.granted + entry.hold.lease.mul_f64(0.8);
                    if warn_at <= now {
                        entry.warned = true;
                        crate::engine::observe::lease_nearly_over(
                            &entry.hold.key,
                            entry.hold.lease,
                            now - entry.granted,
                        );
                    } else {
                        wake_at = wake_at.min(warn_at);
                    }
                }
                if !entry.hold.renew || entry.in_flight {
                    continue;
                }
                // Renew everything due within half a renewal period now, so
                // holds taken at nearby moments share one call.
                let slack = if entry.retrying {
                    Duration::ZERO
                } else {
                    entry.hold.lease / 6
                };
                if entry.next_renewal <= now + slack {
                    entry.in_flight = true;
                    entry.in_flight_since = now;
                    batch.push(Due {
                        id: *id,
                        key: entry.hold.key.clone(),
                        script: entry.hold.script,
                        owner: entry.hold.owner.clone(),
                        lease: entry.hold.lease,
                        generation: entry.generation,
                    });
                } else {
                    wake_at = wake_at.min(entry.next_renewal);
                }
            }
            // Entries in flight are rescheduled when their call completes,
            // which wakes the task.
            *strong
                .planned_wake
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(wake_at);
        }
        // One round trip per script and node: one call per slot on a
        // cluster (a script's keys must share one), pipelined.
        let mut groups: HashMap<_, Vec<Due>> = HashMap::new();
        for due in batch {
            let script: *const LazyLock<Lua> = due.script;
            groups
                .entry((script as usize, conn.destination_of(&due.key)))
                .or_default()
                .push(due);
        }
        for group in groups.into_values() {
            for chunk in group.chunks(MAX_BATCH) {
                tokio::spawn(renew_batch(
                    Arc::downgrade(&strong),
                    conn.clone(),
                    acks,
                    chunk.to_vec(),
                ));
            }
        }
        let wake = strong.wake.clone();
        drop(strong);
        tokio::select! {
            _ = tokio::time::sleep_until(wake_at) => {}
            _ = wake.notified() => {}
        }
    }
}

/// One hold in a renewal call.
#[derive(Clone)]
struct Due {
    /// The entry id.
    id: u64,
    /// The lock key.
    key: Arc<str>,
    /// How the hold is renewed.
    script: RenewScript,
    /// Field or token that must still own the key.
    owner: Arc<str>,
    /// The lease to extend to.
    lease: Duration,
    /// The entry's generation when the call was prepared.
    generation: u64,
}

/// Sends one renewal round trip (one call per slot on a cluster) and
/// applies its answers.
async fn renew_batch(shared: Weak<Shared>, conn: Conn, acks: Acks, batch: Vec<Due>) {
    // A group shares one script.
    let script = batch[0].script;
    let by_slot = if conn.is_cluster() {
        slot::by_slot(batch, |due| &due.key)
    } else {
        // One server: one call, whatever the slots.
        let slot = Slot::for_key(&*batch[0].key);
        vec![(slot, batch)]
    };
    let command = |batch: &[Due]| {
        let mut cmd = script.evalsha(batch.len());
        for due in batch {
            cmd.arg(&*due.key);
        }
        for due in batch {
            cmd.arg(&*due.owner).arg(due.lease.as_millis() as u64);
        }
        cmd
    };
    let sent_at = Instant::now();
    let replies = match by_slot.as_slice() {
        [(_, batch)] => vec![script.run(&conn, &command(batch), acks).await],
        _ => {
            let calls = by_slot
                .iter()
                .map(|(slot, batch)| (*slot, command(batch)))
                .collect();
            script.run_pipelined(&conn, calls, acks).await
        }
    };
    for ((_, batch), reply) in by_slot.into_iter().zip(replies) {
        apply(&shared, batch, reply, acks, sent_at);
    }
}

/// Applies the answers of one renewal call sent at `sent_at`.
fn apply(
    shared: &Weak<Shared>,
    batch: Vec<Due>,
    reply: redis::RedisResult<(redis::Value, Option<u32>)>,
    acks: Acks,
    sent_at: Instant,
) {
    // A renewal too few replicas saw would not survive a failover: it does
    // not count, and is retried like a failed call.
    let reply: redis::RedisResult<Vec<i64>> = match reply {
        Ok((_, acked)) if acks.short(acked) => {
            Err(redis::RedisError::from(std::io::Error::other(format!(
                "renewal acknowledged by {} replica(s) of {}",
                acked.unwrap_or(0),
                acks.min
            ))))
        }
        Ok((values, _)) => redis::from_redis_value(values).map_err(Into::into),
        Err(e) => Err(e),
    };
    let Some(shared) = shared.upgrade() else {
        return;
    };
    {
        let mut entries = shared.lock_entries();
        match reply {
            Ok(results) => {
                metrics::counter!("locksmith_renewal_calls_total").increment(1);
                for (due, renewed) in batch.iter().zip(results) {
                    let Some(entry) = entries.get_mut(&due.id) else {
                        continue;
                    };
                    entry.in_flight = false;
                    if renewed == 1 && entry.generation != due.generation {
                        // A lock call re-armed the lease after this renewal
                        // was prepared; what it recorded stands (capped
                        // by this renewal's lease then).
                        continue;
                    }
                    entry.retrying = false;
                    if renewed == 1 {
                        entry.state.armed(sent_at, due.lease);
                        entry.next_renewal = sent_at + due.lease / 3;
                    } else {
                        tracing::warn!(key = %due.key, "hold gone at renewal; marking it lost");
                        entry.state.mark_lost();
                        entries.remove(&due.id);
                    }
                }
            }
            Err(err) => {
                metrics::counter!("locksmith_renewal_failures_total").increment(1);
                tracing::warn!(error = %err, holds = batch.len(), "lease renewal failed; retrying");
                let now = Instant::now();
                for due in &batch {
                    if let Some(entry) = entries.get_mut(&due.id) {
                        entry.in_flight = false;
                        if entry.generation != due.generation {
                            continue;
                        }
                        entry.retrying = true;
                        // Retry soon, well before the deadline.
                        entry.next_renewal = now
                            + (due.lease / 10)
                                .clamp(Duration::from_millis(1), Duration::from_secs(1));
                    }
                }
            }
        }
    }
    shared.wake.notify_one();
}
