//! The checker: reads a merged history and reports every violation of the
//! lock's promises, and the run's figures.
//!
//! Every name has a kind (recorded by the nemesis at the start): a lock
//! (reentrant, fair, a MultiLock's member), a read-write lock, or a
//! semaphore with a capacity (its permits).
//!
//! Rules (times are the machine-wide monotonic clock):
//! 1. **token order**: per lock, a grant completed before another grant was
//!    invoked has a smaller fencing token (a read may have the same token:
//!    readers joining a read hold share it, and never write with it);
//!    semaphores have no tokens;
//! 2. **stale write**: per lock, the fenced store never accepts a token
//!    lower than one it had accepted before the write was sent;
//! 3. **overlap**: a grant inside another hold of the same name (for a
//!    read-write lock: unless both are reads, or one is its owner's
//!    downgrade of the other; for a semaphore: when the permits of the
//!    holds it is inside and its own add up to more than the capacity) is
//!    a violation when the server confirmed that hold at its release (the
//!    release answered `Ok`), or when the earlier holder's own view of its
//!    lease (`valid_until`, never later than the server's expiry) had not
//!    ended at the grant, unless the earlier hold was **wiped**: a restart
//!    or failover was under way at some point between the earlier acquire's
//!    send and the later grant, and the later token jumped past the earlier
//!    one by more than the acquires that could have been granted in between
//!    (the counter was lost with the hold and re-seeded from the server's
//!    clock; a failover that loses only the last writes rolls the counter
//!    back instead, which no jump excuses). A fault alone excuses nothing:
//!    an acquire sent before a
//!    restart and granted by the restarted server holds on that server,
//!    and a later grant inside it is an overlap;
//! 4. **unsignalled loss**: a holder still holding when its own lease view
//!    ends must hear its lost signal by then (within [`SIGNAL_SLACK`] for
//!    timers and scheduling, or that long after the process was resumed if
//!    the nemesis had it stopped across that instant); and no write goes
//!    out after its lease view ended unless it had been told;
//! 5. **recovery**: after each fault heals, every live worker is granted a
//!    lock again within lease + 1 s;
//! 6. **permits accounted for**: after the run, with every worker gone and
//!    every lease over, each semaphore has its permits back, less a
//!    counting semaphore's permits a killed holder kept and the nemesis did
//!    not give back, within the range that acquires and releases without an
//!    answer leave open (see [`Accounting::check`]). Holds without fencing
//!    tokens (semaphores) cannot show a re-seeded counter, so for them a
//!    restart or failover under way between the two grants excuses an
//!    overlap (rule 3), and the permits are not accounted after one: the
//!    count itself may be gone;
//! 7. **first come, first served** (fair locks): a waiter whose acquire
//!    was sent [`QUEUE_SLACK`] before another's is granted first, unless a
//!    fault, or its recovery time, was under way while it waited (see
//!    [`first_come_first_served`]);
//! 8. **latch**: no waiter is let go before the count reached zero, and
//!    every waiter is let go within [`LATCH_WAKE`] after it did (see
//!    [`LatchCalls::check`]);
//! 9. **Redlock without a quorum**: while a majority of its servers is
//!    down, nothing is granted and every acquire is answered (`NoQuorum`)
//!    within [`NO_QUORUM_ANSWER`] (see [`quorum`]).
//!
//! A fault that could not be injected, and a worker that failed by itself,
//! are reported too: such a run proves less than it claims.
//!
//! Acquires that time out or fail, writes and releases without an answer
//! are indeterminate: they neither prove nor break a rule.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::Serialize;

use super::history::{Event, Mode, ReleaseOutcome, WriteOutcome, CANCELLED};

/// How late after its lease view ended a lost signal may be recorded
/// (timer resolution, scheduling on a loaded machine, the record itself).
pub(crate) const SIGNAL_SLACK: Duration = Duration::from_millis(250);

/// One broken promise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Violation {
    /// Which rule: `token-order`, `stale-write`, `overlap`,
    /// `unsignalled-loss`, `write-after-expiry`, `no-recovery`,
    /// `permits-accounting`, `fifo`, `latch-early`, `latch-late`,
    /// `grant-without-quorum`, `no-quorum-hang`; and `fault-failed`,
    /// `worker-failed` for a run that proves less than it claims.
    pub(crate) rule: &'static str,
    /// When (monotonic ns) the offending event happened.
    pub(crate) t: u64,
    /// What happened, for a reader.
    pub(crate) detail: String,
}

/// What the checker found, and the run's figures.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Report {
    /// Events in the history.
    pub(crate) events: usize,
    /// Acquires sent.
    pub(crate) acquires: usize,
    /// Grants.
    pub(crate) grants: usize,
    /// Acquires that timed out, were refused or failed.
    pub(crate) indeterminate_acquires: usize,
    /// Fenced writes accepted / refused as stale / without an answer.
    pub(crate) writes_accepted: usize,
    pub(crate) writes_stale: usize,
    pub(crate) writes_indeterminate: usize,
    /// Holds whose holder heard its lost signal while it held.
    pub(crate) losses_signalled: usize,
    /// Holds whose holder learned of a loss while it held (signal, or
    /// `is_lost` before a write or the release).
    pub(crate) losses_noticed: usize,
    /// Releases the server answered "not held".
    pub(crate) releases_not_held: usize,
    /// Faults begun, by kind.
    pub(crate) faults: BTreeMap<String, usize>,
    /// Longest time from a fault healing to the last live worker's next
    /// grant, in milliseconds.
    pub(crate) longest_recovery_ms: u64,
    /// Longest time from a fault's start to its heal, by kind, in
    /// milliseconds (how long the nemesis kept the system impaired).
    pub(crate) longest_fault_ms: BTreeMap<String, u64>,
    /// Kill and pause faults whose target held a lock when hit.
    pub(crate) holder_faults: usize,
    /// Of those, the pauses.
    pub(crate) holder_pauses: usize,
    /// Fault heals whose recovery window was checked / skipped (another
    /// fault inside it, or the run ended first).
    pub(crate) recoveries_checked: usize,
    pub(crate) recoveries_skipped: usize,
    /// Acquires, grants and violations by kind of name.
    pub(crate) per_kind: BTreeMap<String, KindFigures>,
    /// Each semaphore's permits accounted for after the run.
    pub(crate) permits: Vec<PermitsLine>,
    /// Every violation found.
    pub(crate) violations: Vec<Violation>,
}

/// One kind's figures.
#[derive(Debug, Default, Serialize)]
pub(crate) struct KindFigures {
    pub(crate) acquires: usize,
    pub(crate) grants: usize,
    pub(crate) violations: usize,
}

/// A semaphore's permits after the run against what its history allows.
#[derive(Debug, Serialize)]
pub(crate) struct PermitsLine {
    pub(crate) lock: String,
    pub(crate) kind: String,
    pub(crate) capacity: u64,
    /// Permits available after the run.
    pub(crate) available: i64,
    /// What the history allows: `[low, high]`, or `None` when a restart
    /// or failover may have wiped the semaphore (its count is then
    /// whatever the first call after it made it).
    pub(crate) expected: Option<(i64, i64)>,
    #[serde(skip)]
    violation: Option<Violation>,
}

/// One hold, assembled from its events.
#[derive(Debug)]
struct Hold {
    p: String,
    lock: String,
    token: u64,
    invoked: u64,
    granted: u64,
    /// Release sent, process killed or exited; `u64::MAX` if never.
    end: u64,
    /// (when recorded, lease valid until), in order.
    valid: Vec<(u64, u64)>,
    /// First time the holder learned of a loss (signal or poll).
    lost: Option<u64>,
    /// First time its lost signal fired.
    signalled: Option<u64>,
    release: Option<ReleaseOutcome>,
    /// Its release was sent.
    release_sent: bool,
    /// How it holds the name, and how many permits.
    mode: Mode,
    permits: u64,
    /// Whether `token` is a fencing token (else an id of the hold).
    fenced: bool,
    /// A read hold its owner took while holding the write hold.
    downgrade: bool,
    /// Its process was killed while it held (no release sent).
    killed: bool,
}

impl Hold {
    /// The holder's most recent view of its lease end recorded at or
    /// before `t` (views can move earlier as well as later).
    fn valid_until_at(&self, t: u64) -> u64 {
        self.valid
            .iter()
            .filter(|(at, _)| *at <= t)
            .max_by_key(|(at, _)| *at)
            .map_or(0, |(_, until)| *until)
    }

    /// Its last lease view.
    fn last_view(&self) -> u64 {
        self.valid_until_at(u64::MAX)
    }
}

/// Checks `events` (any order) from a run with leases of `lease`.
pub(crate) fn check(events: &[Event], lease: Duration) -> Report {
    let mut events: Vec<&Event> = events.iter().collect();
    events.sort_by_key(|e| e.t());
    let mut report = Report {
        events: events.len(),
        ..Report::default()
    };
    let history_end = events.last().map_or(0, |e| e.t());

    // Holds, and the facts the rules need.
    let mut holds: Vec<Hold> = Vec::new();
    // Holds by (process, lock, token): a downgrade's read hold shares its
    // write hold's token, so a key may name two holds; events go to the
    // first one they still apply to (see `find`).
    let mut by_key: HashMap<(String, String, u64), Vec<usize>> = HashMap::new();
    let find = |by_key: &HashMap<(String, String, u64), Vec<usize>>,
                holds: &[Hold],
                p: &str,
                lock: &str,
                token: u64,
                applies: fn(&Hold) -> bool| {
        let list = by_key.get(&(p.to_owned(), lock.to_owned(), token))?;
        list.iter()
            .copied()
            .find(|&i| applies(&holds[i]))
            .or(list.last().copied())
    };
    let mut last_invoke: HashMap<(String, String), u64> = HashMap::new();
    let mut writes: BTreeMap<String, Vec<(u64, u64, u64, String)>> = BTreeMap::new();
    let mut ended: HashMap<String, u64> = HashMap::new();
    let mut started: HashMap<String, u64> = HashMap::new();
    let mut fault_began: HashMap<String, u64> = HashMap::new();
    // (process, stopped, resumed) of each pause fault.
    let mut pauses: Vec<(String, u64, u64)> = Vec::new();
    // (began, healed) of each fault that may lose the lock server's data
    // (restart, failover); healed is u64::MAX while under way.
    let mut data_loss: Vec<(u64, u64)> = Vec::new();
    // When acquires of each lock were sent, in order.
    let mut invokes: HashMap<String, Vec<u64>> = HashMap::new();
    // Each name's kind and capacity (a name without one: a lock).
    let mut resources: HashMap<String, (String, u64)> = HashMap::new();
    // The last acquire of each (process, lock): (sent, permits, open).
    let mut pending: HashMap<(String, String), (u64, u64, bool)> = HashMap::new();
    // Acquires whose outcome is unknown (lock, when, permits); permits
    // given back by the nemesis; the permits each semaphore had at the end.
    let mut uncertain: Vec<(String, u64, u64)> = Vec::new();
    // Acquires dropped on purpose: (lock, sent, dropped, permits).
    let mut cancelled: Vec<(String, u64, u64, u64)> = Vec::new();
    // (began, healed) of the faults that can lose a reply: all but the
    // kills and pauses of workers.
    let mut reply_faults: Vec<(u64, u64)> = Vec::new();
    let mut reclaimed: Vec<(String, u64, u64)> = Vec::new();
    let mut finals: Vec<(String, u64, i64)> = Vec::new();
    // (began, healed) of every fault; healed is u64::MAX while under way.
    let mut windows: Vec<(u64, u64)> = Vec::new();
    // Each latch's calls.
    let mut latches: BTreeMap<String, LatchCalls> = BTreeMap::new();
    // (began, healed) of each fault that leaves a minority of Redlock's
    // servers up; and each acquire's (process, lock, sent, ended, granted).
    let mut no_quorum: Vec<(u64, u64)> = Vec::new();
    let mut spans: Vec<(String, String, u64, u64, bool)> = Vec::new();
    // When processes were killed.
    let mut kills: Vec<u64> = Vec::new();
    for event in &events {
        match event {
            Event::Start { t, p, .. } => {
                started.entry(p.clone()).or_insert(*t);
            }
            Event::Exit { t, p } | Event::Killed { t, p } => {
                ended.entry(p.clone()).or_insert(*t);
                let killed = matches!(event, Event::Killed { .. });
                if killed {
                    kills.push(*t);
                }
                for hold in holds.iter_mut().filter(|h| h.p == *p && h.end == u64::MAX) {
                    hold.end = *t;
                    hold.killed = killed;
                }
                // An acquire in flight when its process ended may have
                // been granted.
                if killed {
                    for ((q, lock), (_, permits, open)) in pending.iter_mut() {
                        if q == p && *open {
                            *open = false;
                            uncertain.push((lock.clone(), *t, *permits));
                        }
                    }
                }
            }
            Event::Resource {
                lock,
                kind,
                capacity,
                ..
            } => {
                resources.insert(lock.clone(), (kind.clone(), *capacity));
            }
            Event::Reclaimed {
                t, lock, permits, ..
            } => {
                reclaimed.push((lock.clone(), *t, *permits));
            }
            Event::Quorum { t, lost: true } => no_quorum.push((*t, u64::MAX)),
            Event::Quorum { t, lost: false } => {
                if let Some(w) = no_quorum.iter_mut().find(|w| w.1 == u64::MAX) {
                    w.1 = *t;
                }
            }
            // A probe stood the worker still: a window for the rules that
            // excuse a disturbed waiter.
            Event::Probe { t, until, .. } => windows.push((*t, *until)),
            Event::LatchArm {
                invoked,
                t,
                lock,
                set,
                ..
            } => {
                latches
                    .entry(lock.clone())
                    .or_default()
                    .arms
                    .push((*invoked, *t, *set));
            }
            Event::CountDown {
                invoked,
                t,
                lock,
                left,
                ..
            } => {
                latches
                    .entry(lock.clone())
                    .or_default()
                    .downs
                    .push((*invoked, *t, *left));
            }
            Event::LatchWait {
                invoked,
                t,
                p,
                lock,
                opened,
            } => {
                latches.entry(lock.clone()).or_default().waits.push((
                    *invoked,
                    *t,
                    p.clone(),
                    *opened,
                ));
            }
            Event::Permits { t, lock, available } => {
                finals.push((lock.clone(), *t, *available));
            }
            Event::AcquireInvoke {
                t,
                p,
                lock,
                permits,
            } => {
                report.acquires += 1;
                report
                    .per_kind
                    .entry(kind_of(&resources, lock))
                    .or_default()
                    .acquires += 1;
                last_invoke.insert((p.clone(), lock.clone()), *t);
                pending.insert((p.clone(), lock.clone()), (*t, *permits, true));
                invokes.entry(lock.clone()).or_default().push(*t);
            }
            Event::AcquireFail {
                t, p, lock, error, ..
            } => {
                report.indeterminate_acquires += 1;
                if let Some((sent, _, true)) = pending.get(&(p.clone(), lock.clone())) {
                    spans.push((p.clone(), lock.clone(), *sent, *t, false));
                }
                if let Some((sent, permits, open)) = pending.get_mut(&(p.clone(), lock.clone())) {
                    // Not granted within the wait: nothing taken. Dropped on
                    // purpose: nothing left behind, if the reply that
                    // undoes a grant could arrive (see `Accounting`). Any
                    // other error: the outcome is unknown.
                    if *open && error == CANCELLED {
                        cancelled.push((lock.clone(), *sent, *t, *permits));
                    } else if *open && !error.starts_with("not granted") {
                        uncertain.push((lock.clone(), *t, *permits));
                    }
                    *open = false;
                }
            }
            Event::AcquireOk {
                t,
                p,
                lock,
                token,
                valid_until,
                mode,
                permits,
                fenced,
                downgrade,
            } => {
                report.grants += 1;
                report
                    .per_kind
                    .entry(kind_of(&resources, lock))
                    .or_default()
                    .grants += 1;
                if let Some(pending) = pending.get_mut(&(p.clone(), lock.clone())) {
                    if pending.2 {
                        spans.push((p.clone(), lock.clone(), pending.0, *t, true));
                    }
                    pending.2 = false;
                }
                let invoked = last_invoke
                    .get(&(p.clone(), lock.clone()))
                    .copied()
                    .unwrap_or(*t);
                by_key
                    .entry((p.clone(), lock.clone(), *token))
                    .or_default()
                    .push(holds.len());
                holds.push(Hold {
                    p: p.clone(),
                    lock: lock.clone(),
                    token: *token,
                    invoked,
                    granted: *t,
                    end: u64::MAX,
                    valid: vec![(*t, *valid_until)],
                    lost: None,
                    signalled: None,
                    release: None,
                    release_sent: false,
                    mode: *mode,
                    permits: *permits,
                    fenced: *fenced,
                    downgrade: *downgrade,
                    killed: false,
                });
            }
            Event::Valid {
                t,
                p,
                lock,
                token,
                valid_until,
            } => {
                if let Some(i) = find(&by_key, &holds, p, lock, *token, |h| !h.release_sent) {
                    holds[i].valid.push((*t, *valid_until));
                }
            }
            Event::Lost {
                t,
                p,
                lock,
                token,
                source,
            } => {
                if let Some(i) = find(&by_key, &holds, p, lock, *token, |h| !h.release_sent) {
                    let hold = &mut holds[i];
                    // Only while it held: some kinds fire their signal when
                    // a release begins or ends, which is no loss.
                    if *t < hold.end {
                        if hold.lost.is_none() {
                            report.losses_noticed += 1;
                        }
                        if source == "signal" && hold.signalled.is_none() {
                            report.losses_signalled += 1;
                            hold.signalled = Some(*t);
                        }
                    }
                    hold.lost.get_or_insert(*t);
                }
            }
            Event::Write {
                invoked,
                t,
                p,
                lock,
                token,
                outcome,
            } => {
                match outcome {
                    WriteOutcome::Accepted => {
                        report.writes_accepted += 1;
                        writes.entry(lock.clone()).or_default().push((
                            *invoked,
                            *t,
                            *token,
                            p.clone(),
                        ));
                    }
                    WriteOutcome::Stale => report.writes_stale += 1,
                    WriteOutcome::Error => report.writes_indeterminate += 1,
                }
                // Rule 4b: no write after the holder's own lease view ran
                // out, unless it had been told.
                if let Some(i) = find(&by_key, &holds, p, lock, *token, |h| !h.release_sent) {
                    let hold = &holds[i];
                    let until = hold.valid_until_at(*invoked);
                    let told = hold.lost.is_some_and(|l| l <= *invoked);
                    if *invoked > until && !told {
                        report.violations.push(Violation {
                            rule: "write-after-expiry",
                            t: *invoked,
                            detail: format!(
                                "{p} wrote {lock:?} with token {token} {:.1} ms after its lease view ended, without a lost signal",
                                (*invoked - until) as f64 / 1e6
                            ),
                        });
                    }
                }
            }
            Event::ReleaseInvoke { t, p, lock, token } => {
                if let Some(i) = find(&by_key, &holds, p, lock, *token, |h| !h.release_sent) {
                    holds[i].end = holds[i].end.min(*t);
                    holds[i].release_sent = true;
                }
            }
            Event::ReleaseDone {
                p,
                lock,
                token,
                outcome,
                ..
            } => {
                if *outcome == ReleaseOutcome::NotHeld {
                    report.releases_not_held += 1;
                }
                if let Some(i) = find(&by_key, &holds, p, lock, *token, |h| h.release.is_none()) {
                    holds[i].release = Some(*outcome);
                }
            }
            Event::FaultStart {
                t,
                kind,
                target,
                holder,
            } => {
                *report.faults.entry(kind.clone()).or_default() += 1;
                fault_began.insert(kind.clone(), *t);
                windows.push((*t, u64::MAX));
                if !matches!(kind.as_str(), "kill" | "pause") {
                    reply_faults.push((*t, u64::MAX));
                }
                if *holder {
                    report.holder_faults += 1;
                    if kind == "pause" {
                        report.holder_pauses += 1;
                    }
                }
                if kind == "pause" {
                    pauses.push((target.clone(), *t, u64::MAX));
                }
                if loses_data(kind) {
                    data_loss.push((*t, u64::MAX));
                }
            }
            Event::FaultFailed { t, kind, error } => {
                report.violations.push(Violation {
                    rule: "fault-failed",
                    t: *t,
                    detail: format!(
                        "the {kind} fault could not be injected or did not heal: {error}"
                    ),
                });
            }
            Event::WorkerFailed { t, p, status } => {
                report.violations.push(Violation {
                    rule: "worker-failed",
                    t: *t,
                    detail: format!("worker {p} failed by itself: {status}"),
                });
            }
            Event::Spawned { t, p } => {
                started.entry(p.clone()).or_insert(*t);
            }
            Event::FaultHeal { t, kind, target } => {
                if let Some(w) = windows.iter_mut().find(|w| w.1 == u64::MAX) {
                    w.1 = *t;
                }
                if let Some(w) = reply_faults.iter_mut().find(|w| w.1 == u64::MAX) {
                    w.1 = *t;
                }
                if loses_data(kind) {
                    if let Some(fault) = data_loss.iter_mut().rev().find(|f| f.1 == u64::MAX) {
                        fault.1 = *t;
                    }
                }
                if kind == "pause" {
                    if let Some(pause) = pauses
                        .iter_mut()
                        .rev()
                        .find(|(p, _, end)| p == target && *end == u64::MAX)
                    {
                        pause.2 = *t;
                    }
                }
                if let Some(began) = fault_began.remove(kind) {
                    let ms = (*t).saturating_sub(began) / 1_000_000;
                    let longest = report.longest_fault_ms.entry(kind.clone()).or_default();
                    *longest = (*longest).max(ms);
                }
            }
        }
    }

    let mut per_lock: BTreeMap<&str, Vec<&Hold>> = BTreeMap::new();
    for hold in &holds {
        per_lock.entry(&hold.lock).or_default().push(hold);
    }
    // Faults and probes, each stretched by a recovery time (lease + 1 s,
    // as rule 5 allows): a client may still be reconnecting after a heal.
    let settle = (lease + Duration::from_secs(1)).as_nanos() as u64;
    let disturbed: Vec<(u64, u64)> = windows
        .iter()
        .map(|&(began, healed)| (began, healed.saturating_add(settle)))
        .collect();
    for (lock, list) in &per_lock {
        let fenced: Vec<&Hold> = list.iter().copied().filter(|h| h.fenced).collect();
        token_order(lock, &fenced, &mut report.violations);
        let wipes = Wipes {
            faults: &data_loss,
            invokes: invokes.get(*lock).map_or(&[], Vec::as_slice),
            processes: started.len() as u64,
        };
        let (kind, capacity) = resources
            .get(*lock)
            .map_or(("lock", 1), |(k, c)| (k.as_str(), *c));
        let before = report.violations.len();
        overlaps(lock, list, kind, capacity, &wipes, &mut report.violations);
        if kind == "fair-lock" {
            first_come_first_served(lock, list, &disturbed, &mut report.violations);
        }
        report
            .per_kind
            .entry(kind.to_owned())
            .or_default()
            .violations += report.violations.len() - before;
    }
    for (lock, calls) in &latches {
        let count = resources.get(lock).map_or(1, |(_, c)| *c);
        let before = report.violations.len();
        let context = LatchContext {
            data_loss: &data_loss,
            disturbed: &disturbed,
            kills: &kills,
        };
        calls.check(lock, count, &context, &mut report.violations);
        let figures = report.per_kind.entry("latch".to_owned()).or_default();
        figures.violations += report.violations.len() - before;
        figures.acquires += calls.waits.len() + calls.downs.len();
        figures.grants += calls.waits.iter().filter(|w| w.3 == Some(true)).count();
    }
    quorum(&spans, &no_quorum, &mut report.violations);
    let facts = Accounting {
        holds: &holds,
        uncertain: &uncertain,
        cancelled: &cancelled,
        reply_faults: &reply_faults,
        reclaimed: &reclaimed,
        data_loss: &data_loss,
    };
    for (lock, t, available) in &finals {
        let Some((kind, capacity)) = resources.get(lock) else {
            continue;
        };
        let line = facts.check(lock, kind, *capacity, *t, *available);
        if let Some(violation) = &line.violation {
            report.violations.push(violation.clone());
            report.per_kind.entry(kind.clone()).or_default().violations += 1;
        }
        report.permits.push(line);
    }
    for (lock, list) in &writes {
        stale_writes(lock, list, &mut report.violations);
    }
    // Rule 4a: a holder still holding when its lease view ends hears its
    // lost signal by then (or right after being resumed).
    let slack = SIGNAL_SLACK.as_nanos() as u64;
    for hold in &holds {
        let view = hold.last_view();
        if hold.end <= view || view == 0 || view > history_end {
            continue;
        }
        let resumed = pauses
            .iter()
            .filter(|(p, stopped, _)| *p == hold.p && *stopped <= view)
            .map(|(_, _, resumed)| *resumed)
            .find(|resumed| *resumed >= view);
        let limit = resumed.unwrap_or(view).saturating_add(slack);
        // A hold that ended before the limit proves nothing either way
        // (its watcher stops with the release).
        if limit > history_end || hold.end < limit {
            continue;
        }
        if hold.signalled.is_none_or(|s| s > limit) {
            report.violations.push(Violation {
                rule: "unsignalled-loss",
                t: view,
                detail: format!(
                    "{} held {:?} (token {}) past its lease view without its lost signal within {:?}{}",
                    hold.p,
                    hold.lock,
                    hold.token,
                    SIGNAL_SLACK,
                    match hold.signalled {
                        Some(s) => format!(" (it fired {:.1} ms after the limit)", (s - limit) as f64 / 1e6),
                        None => " (it never fired)".into(),
                    }
                ),
            });
        }
    }
    recovery(&events, &started, &ended, history_end, lease, &mut report);
    report.violations.sort_by_key(|v| v.t);
    report
}

/// Rule 1, by a sweep: grants in completion order against grants in
/// invocation order. A read may have the same token as an earlier grant.
fn token_order(lock: &str, holds: &[&Hold], out: &mut Vec<Violation>) {
    let mut done: Vec<&Hold> = holds.to_vec();
    done.sort_by_key(|h| h.granted);
    let mut asked: Vec<&Hold> = holds.to_vec();
    asked.sort_by_key(|h| h.invoked);
    let mut i = 0;
    let mut best: Option<&Hold> = None;
    for g in asked {
        while i < done.len() && done[i].granted < g.invoked {
            if best.is_none_or(|b| done[i].token > b.token) {
                best = Some(done[i]);
            }
            i += 1;
        }
        if let Some(b) = best {
            // A read may share the token of the grant before it (readers
            // joining a read hold, or its writer's downgrade): a read never
            // writes with its token. Anything else needs a larger one.
            if b.token > g.token || b.token == g.token && g.mode != Mode::Read {
                out.push(Violation {
                    rule: "token-order",
                    t: g.granted,
                    detail: format!(
                        "{lock:?}: {} was granted token {} after {} had been granted token {}",
                        g.p, g.token, b.p, b.token
                    ),
                });
            }
        }
    }
}

/// Rule 2: accepted writes against the largest token accepted before each
/// was sent.
fn stale_writes(lock: &str, writes: &[(u64, u64, u64, String)], out: &mut Vec<Violation>) {
    let mut done: Vec<_> = writes.iter().collect();
    done.sort_by_key(|w| w.1);
    let mut asked: Vec<_> = writes.iter().collect();
    asked.sort_by_key(|w| w.0);
    let (mut i, mut best) = (0, None::<&(u64, u64, u64, String)>);
    for w in asked {
        while i < done.len() && done[i].1 < w.0 {
            if best.is_none_or(|b| done[i].2 > b.2) {
                best = Some(done[i]);
            }
            i += 1;
        }
        if let Some(b) = best {
            if b.2 > w.2 {
                out.push(Violation {
                    rule: "stale-write",
                    t: w.1,
                    detail: format!(
                        "{lock:?}: the store accepted token {} from {} after accepting token {} from {}",
                        w.2, w.3, b.2, b.3
                    ),
                });
            }
        }
    }
}

/// Faults that may lose the lock server's data.
fn loses_data(kind: &str) -> bool {
    kind == "restart" || kind == "failover"
}

/// What tells a hold the lock server lost (rule 3) from one it kept.
struct Wipes<'a> {
    /// (began, healed) of each restart or failover.
    faults: &'a [(u64, u64)],
    /// When the lock's acquires were sent, in order.
    invokes: &'a [u64],
    /// Processes in the run: each may have had one acquire in flight
    /// before the earlier hold's acquire was sent.
    processes: u64,
}

impl Wipes<'_> {
    /// True when `later`'s grant shows `earlier` was wiped: a data-losing
    /// fault was under way between `earlier`'s send and `later`'s grant,
    /// and the token jumped by more than the grants possible in between
    /// (every acquire sent meanwhile, plus one in flight per process).
    fn wiped(&self, earlier: &Hold, later: &Hold) -> bool {
        let (from, to) = (earlier.invoked, later.granted);
        let under_way = self
            .faults
            .iter()
            .any(|&(began, healed)| began <= to && healed >= from);
        if !under_way {
            return false;
        }
        // Without fencing tokens nothing tells a wiped hold from a kept
        // one: the fault alone excuses the pair.
        if !earlier.fenced || !later.fenced {
            return true;
        }
        if later.token <= earlier.token {
            return false;
        }
        let first = self.invokes.partition_point(|&t| t < from);
        let last = self.invokes.partition_point(|&t| t <= to);
        let possible = (last - first) as u64 + self.processes;
        later.token - earlier.token > possible
    }
}

/// Rule 3: a later grant inside a hold the server confirmed at release, or
/// before the earlier holder's own lease view ended, unless the earlier
/// hold was wiped (see [`Wipes::wiped`]) or the later grant was dead on
/// arrival: its holder's own lease view had already ended when the grant
/// reached it (a reply slower than the lease, or a holder paused between
/// the server's grant and its record) and its token is the smaller one
/// (the server made it first; without tokens, any dead grant). Such a
/// holder never held the name as far as it knew, so it did nothing under
/// it, and its lease ran out on the server before the next grant. A dead
/// grant with the larger token is still an overlap: the server granted it
/// while the other hold was there.
///
/// What counts as an overlap depends on the name's kind: any two holds of
/// a lock; on a read-write lock, two holds unless both are reads (or one
/// is its owner's downgrade of the other); on a semaphore, holds whose
/// permits add up to more than its capacity.
fn overlaps(
    lock: &str,
    holds: &[&Hold],
    kind: &str,
    capacity: u64,
    wipes: &Wipes<'_>,
    out: &mut Vec<Violation>,
) {
    let mut sorted: Vec<&Hold> = holds.to_vec();
    sorted.sort_by_key(|h| h.granted);
    let semaphore = kind.contains("semaphore");
    for (i, b) in sorted.iter().enumerate() {
        let dead = b.valid_until_at(b.granted) <= b.granted;
        // The earlier holds surely still held at b's grant, with why.
        let mut held: Vec<(&Hold, String)> = Vec::new();
        for a in &sorted[..i] {
            if b.granted >= a.end {
                continue;
            }
            if dead && (!a.fenced || !b.fenced || b.token < a.token) {
                continue;
            }
            let confirmed = a.release == Some(ReleaseOutcome::Ok);
            let view = a.valid_until_at(b.granted);
            let within_view = b.granted < view;
            if !confirmed && !within_view || wipes.wiped(a, b) {
                continue;
            }
            let why = if view == u64::MAX {
                "the earlier hold has no lease and was not released yet".to_owned()
            } else if confirmed {
                "the server confirmed the earlier hold at its release".to_owned()
            } else {
                format!(
                    "the earlier holder's lease view had {:.1} ms left",
                    (view - b.granted) as f64 / 1e6
                )
            };
            held.push((a, why));
        }
        if semaphore {
            let used: u64 = held.iter().map(|(a, _)| a.permits).sum::<u64>() + b.permits;
            // A counting semaphore's release adds its permits whatever the
            // count: a hold granted before a wipe and released after it
            // raised the count above the capacity for good.
            // Only across the latest wipe before this grant: the next one
            // took earlier rises with it.
            let latest = wipes
                .faults
                .iter()
                .map(|&(began, _)| began)
                .filter(|&began| began < b.granted)
                .max();
            let raised: u64 = match latest {
                Some(wipe) if kind == "semaphore" => sorted
                    .iter()
                    .filter(|h| {
                        h.release_sent && h.end < b.granted && h.granted < wipe && wipe <= h.end
                    })
                    .map(|h| h.permits)
                    .sum(),
                _ => 0,
            };
            if used > capacity + raised {
                out.push(Violation {
                    rule: "overlap",
                    t: b.granted,
                    detail: format!(
                        "{lock:?}: {} was granted {} permit(s) while {} held {} of its {capacity}: {}",
                        b.p,
                        b.permits,
                        held.iter().map(|(a, _)| a.p.as_str()).collect::<Vec<_>>().join(", "),
                        used - b.permits,
                        held.iter().map(|(_, why)| why.as_str()).collect::<Vec<_>>().join("; "),
                    ),
                });
            }
            continue;
        }
        for (a, why) in held {
            let both_read = a.mode == Mode::Read && b.mode == Mode::Read;
            // A write and the read its owner took under it: same process,
            // same token, one of them the downgrade.
            let own_downgrade = a.p == b.p && a.token == b.token && (a.downgrade != b.downgrade);
            if both_read || own_downgrade {
                continue;
            }
            out.push(Violation {
                rule: "overlap",
                t: b.granted,
                detail: format!(
                    "{lock:?}: {} was granted ({}, token {}) while {} held it ({}, token {}): {why}",
                    b.p,
                    mode_name(b.mode),
                    b.token,
                    a.p,
                    mode_name(a.mode),
                    a.token,
                ),
            });
        }
    }
}

/// How much earlier one fair-lock acquire must have been sent than
/// another to count as queued first: sends close together may reach the
/// server in either order (batching, scheduling on a loaded machine).
pub(crate) const QUEUE_SLACK: Duration = Duration::from_millis(100);

/// Rule 7, first come, first served (fair locks): a waiter is not
/// overtaken. When `a`'s acquire was sent [`QUEUE_SLACK`] before `b`'s and
/// `b` was granted first, `a` was overtaken, unless a fault (or a probe
/// that froze a worker), stretched by a recovery time, was under way at
/// some point while `a` waited: a restart loses the queue, and a waiter
/// frozen, cut off, slowed or still reconnecting may reach the queue after
/// one sent later. A waiter that gave up and queued again counts from its
/// new send.
fn first_come_first_served(
    lock: &str,
    holds: &[&Hold],
    faults: &[(u64, u64)],
    out: &mut Vec<Violation>,
) {
    let slack = QUEUE_SLACK.as_nanos() as u64;
    for a in holds {
        let disturbed = faults
            .iter()
            .any(|&(began, healed)| began <= a.granted && healed >= a.invoked);
        if disturbed {
            continue;
        }
        if let Some(b) = holds
            .iter()
            .find(|b| b.p != a.p && a.invoked + slack < b.invoked && b.granted < a.granted)
        {
            out.push(Violation {
                rule: "fifo",
                t: b.granted,
                detail: format!(
                    "{lock:?}: {} was granted (token {}) before {} (token {}), which had queued {:.1} ms earlier",
                    b.p,
                    b.token,
                    a.p,
                    a.token,
                    (b.invoked - a.invoked) as f64 / 1e6
                ),
            });
        }
    }
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Exclusive => "exclusive",
        Mode::Read => "read",
        Mode::Write => "write",
    }
}

/// The kind of name `lock` (a lock unless its resource says otherwise).
fn kind_of(resources: &HashMap<String, (String, u64)>, lock: &str) -> String {
    resources
        .get(lock)
        .map_or_else(|| "lock".to_owned(), |(kind, _)| kind.clone())
}

/// How long an acquire may take while a majority of Redlock's servers is
/// down before it counts as hanging: it must fail (`NoQuorum`) at once,
/// after one round's per-node timeout.
pub(crate) const NO_QUORUM_ANSWER: Duration = Duration::from_millis(1500);

/// How long after a majority of Redlock's servers went down a round sent
/// before may still complete (a per-node timeout, with room).
pub(crate) const ROUND_SLACK: Duration = Duration::from_millis(500);

/// Rule 9, Redlock without a quorum: while a majority of its servers is
/// down (from the last one's stop to the first one's return, recorded by
/// the nemesis), nothing is granted (to an acquire sent meanwhile, or
/// answered more than [`ROUND_SLACK`] after the majority went), and every
/// acquire sent at least [`NO_QUORUM_ANSWER`] before the majority returned
/// is answered within it (a `NoQuorum` error, not a hang).
fn quorum(
    spans: &[(String, String, u64, u64, bool)],
    faults: &[(u64, u64)],
    out: &mut Vec<Violation>,
) {
    let bound = NO_QUORUM_ANSWER.as_nanos() as u64;
    // A round sent just before the majority went down may have had its
    // grants and be answered up to a per-node timeout later.
    let round = ROUND_SLACK.as_nanos() as u64;
    for (p, lock, sent, ended, granted) in spans {
        let Some(&(_, healed)) = faults
            .iter()
            .find(|&&(began, healed)| (began < *sent || began + round < *ended) && *sent < healed)
        else {
            continue;
        };
        if *granted && *ended < healed {
            out.push(Violation {
                rule: "grant-without-quorum",
                t: *ended,
                detail: format!(
                    "{lock:?}: {p} was granted while a majority of the servers was down"
                ),
            });
        } else if *ended > sent + bound && sent + bound < healed {
            out.push(Violation {
                rule: "no-quorum-hang",
                t: *ended,
                detail: format!(
                    "{lock:?}: {p}'s acquire took {:.0} ms while a majority of the servers was down (limit {NO_QUORUM_ANSWER:?})",
                    (ended - sent) as f64 / 1e6
                ),
            });
        }
    }
}

/// How long after the count-down that opened a latch each of its waiters
/// must have been let go.
pub(crate) const LATCH_WAKE: Duration = Duration::from_secs(1);

/// What the latch rule needs of the rest of the run.
struct LatchContext<'a> {
    /// Restarts and failovers: (began, healed).
    data_loss: &'a [(u64, u64)],
    /// Faults and probes, stretched by a recovery time.
    disturbed: &'a [(u64, u64)],
    /// When processes were killed.
    kills: &'a [u64],
}

/// A latch's calls: arms (invoked, answered, set), count-downs (invoked,
/// answered, count left) and waits (invoked, returned, process, opened).
#[derive(Default)]
struct LatchCalls {
    arms: Vec<(u64, u64, Option<bool>)>,
    downs: Vec<(u64, u64, Option<u64>)>,
    waits: Vec<(u64, u64, String, Option<bool>)>,
}

impl LatchCalls {
    /// Rule 8, the latch: (a) no waiter is let go before the count reached
    /// zero: a wait that answered "opened" needs `count` count-downs that
    /// may have landed after the last arm that surely set the count before
    /// the wait began (sent before the wait returned, answered after the
    /// arm was sent)
    /// (unless an arm without an answer, or a restart or failover, leaves
    /// the count unknown in between); (b) every waiter is let go within
    /// [`LATCH_WAKE`] after a count-down answered 0 while it waited, unless
    /// the latch was armed again meanwhile or a fault was under way.
    fn check(&self, lock: &str, count: u64, context: &LatchContext<'_>, out: &mut Vec<Violation>) {
        let LatchContext {
            data_loss,
            disturbed: faults,
            kills,
        } = *context;
        let overlaps = |list: &[(u64, u64)], from: u64, to: u64| {
            list.iter()
                .any(|&(began, healed)| began <= to && healed >= from)
        };
        for (invoked, returned, p, opened) in &self.waits {
            if *opened == Some(true) {
                // The last arm that set the count before the wait was sent.
                let Some(&(armed, _, _)) = self
                    .arms
                    .iter()
                    .filter(|a| a.2 == Some(true) && a.1 < *invoked)
                    .max_by_key(|a| a.1)
                else {
                    continue;
                };
                // An arm without an answer, or a process killed with a
                // latch call in flight (recorded only once answered), leaves
                // the count unknown.
                let unknown = self
                    .arms
                    .iter()
                    .any(|a| a.2.is_none() && a.0 > armed && a.0 < *returned)
                    || kills.iter().any(|&k| k > armed && k < *returned);
                if unknown || overlaps(data_loss, armed, *returned) {
                    continue;
                }
                // A count-down may have reached the server after the arm
                // when it was answered after the arm was sent (requests of
                // two processes can arrive in either order).
                let downs = self
                    .downs
                    .iter()
                    .filter(|d| d.1 >= armed && d.0 < *returned)
                    .count() as u64;
                if downs < count {
                    out.push(Violation {
                        rule: "latch-early",
                        t: *returned,
                        detail: format!(
                            "{lock:?}: {p}'s wait returned opened after {downs} of {count} count-downs since the latch was armed"
                        ),
                    });
                }
            } else if *opened == Some(false) {
                // A count-down that opened the latch while this one waited.
                let wake = LATCH_WAKE.as_nanos() as u64;
                let Some(&(sent, zero, _)) = self
                    .downs
                    .iter()
                    .filter(|d| d.2 == Some(0) && d.1 > *invoked && d.1 + wake < *returned)
                    .min_by_key(|d| d.1)
                else {
                    continue;
                };
                // Armed again after it opened: the waiter may have seen the
                // new count before the news of the opening.
                let rearmed = self
                    .arms
                    .iter()
                    .any(|a| a.2 != Some(false) && a.1 > sent && a.0 < *returned);
                if rearmed || overlaps(faults, *invoked, *returned) {
                    continue;
                }
                out.push(Violation {
                    rule: "latch-late",
                    t: zero,
                    detail: format!(
                        "{lock:?}: {p}'s wait was not let go within {LATCH_WAKE:?} of the count-down that opened the latch ({:.0} ms later it timed out)",
                        (*returned - zero) as f64 / 1e6
                    ),
                });
            }
        }
    }
}

/// What the history says about a semaphore's permits after the run.
struct Accounting<'a> {
    holds: &'a [Hold],
    /// Acquires whose outcome is unknown: (lock, when, permits).
    uncertain: &'a [(String, u64, u64)],
    /// Acquires dropped on purpose: (lock, sent, dropped, permits).
    cancelled: &'a [(String, u64, u64, u64)],
    /// Faults that can lose a reply: (began, healed).
    reply_faults: &'a [(u64, u64)],
    /// Permits the nemesis gave back: (lock, when, permits).
    reclaimed: &'a [(String, u64, u64)],
    data_loss: &'a [(u64, u64)],
}

impl Accounting<'_> {
    /// Rule 6, permits accounted for: after the run, with every worker
    /// gone and every lease over, a semaphore has all its permits back,
    /// less what its history leaves unknown: permits of a counting
    /// semaphore held by a killed process that the nemesis did not give
    /// back, and (as a range) permits of acquires and releases whose
    /// outcome is unknown. An acquire dropped on purpose must leave nothing
    /// behind (its grant is given back when the reply arrives), unless a
    /// fault may have lost that reply. A permit semaphore's permits all come back with
    /// their leases. Not checked after a restart or failover: it may have
    /// wiped the count.
    fn check(&self, lock: &str, kind: &str, capacity: u64, t: u64, available: i64) -> PermitsLine {
        let mut line = PermitsLine {
            lock: lock.to_owned(),
            kind: kind.to_owned(),
            capacity,
            available,
            expected: None,
            violation: None,
        };
        if !self.data_loss.is_empty() {
            return line;
        }
        let n = capacity as i64;
        let (mut low, mut high) = (n, n);
        if kind == "semaphore" {
            for h in self.holds.iter().filter(|h| h.lock == lock) {
                let p = h.permits as i64;
                match h.release {
                    Some(ReleaseOutcome::Ok) => {}
                    // Released without an answer: given back or not.
                    Some(_) => low -= p,
                    None if h.killed => {
                        low -= p;
                        high -= p;
                    }
                    // Killed while its release was in flight.
                    None if h.release_sent => low -= p,
                    None => {}
                }
            }
            for (_, _, p) in self.uncertain.iter().filter(|u| u.0 == lock) {
                low -= *p as i64;
            }
            // A dropped acquire leaves nothing behind: its grant, if one
            // landed, is given back when the reply arrives. Only a fault
            // that may have lost that reply leaves it open.
            for (_, sent, dropped, p) in self.cancelled.iter().filter(|c| c.0 == lock) {
                // The undo waits for the reply: up to a command timeout
                // after the drop (a second, with room).
                let faulted = self
                    .reply_faults
                    .iter()
                    .any(|&(began, healed)| began <= *dropped + 1_000_000_000 && healed >= *sent);
                if faulted {
                    low -= *p as i64;
                }
            }
            for (_, _, p) in self.reclaimed.iter().filter(|r| r.0 == lock) {
                low += *p as i64;
                high += *p as i64;
            }
        }
        line.expected = Some((low, high));
        if available < low || available > high {
            line.violation = Some(Violation {
                rule: "permits-accounting",
                t,
                detail: format!(
                    "{lock:?} ({kind}, {capacity} permits): {available} available after the run, its history allows {low} to {high}"
                ),
            });
        }
        line
    }
}

/// Rule 5: after each heal, every live worker's next grant.
fn recovery(
    events: &[&Event],
    started: &HashMap<String, u64>,
    ended: &HashMap<String, u64>,
    history_end: u64,
    lease: Duration,
    report: &mut Report,
) {
    let window = (lease + Duration::from_secs(1)).as_nanos() as u64;
    let heals: Vec<(u64, &str, &str)> = events
        .iter()
        .filter_map(|e| match e {
            Event::FaultHeal { t, kind, target } => Some((*t, kind.as_str(), target.as_str())),
            _ => None,
        })
        .collect();
    let fault_starts: Vec<u64> = events
        .iter()
        .filter(|e| matches!(e, Event::FaultStart { .. }))
        .map(|e| e.t())
        .collect();
    let mut grants: HashMap<&str, Vec<u64>> = HashMap::new();
    // Progress: a grant, or a latch call the server answered.
    for e in events {
        match e {
            Event::AcquireOk { t, p, .. }
            | Event::CountDown {
                t,
                p,
                left: Some(_),
                ..
            }
            | Event::LatchWait {
                t,
                p,
                opened: Some(_),
                ..
            } => grants.entry(p.as_str()).or_default().push(*t),
            _ => {}
        }
    }
    for (healed, kind, target) in heals {
        let deadline = healed + window;
        // The run must have gone on long enough, and no other fault may
        // start inside the window.
        if deadline > history_end || fault_starts.iter().any(|&s| s > healed && s < deadline) {
            report.recoveries_skipped += 1;
            continue;
        }
        report.recoveries_checked += 1;
        for (p, &start) in started {
            if start > deadline || ended.get(p).is_some_and(|&e| e < deadline) {
                continue;
            }
            let from = healed;
            let next = grants
                .get(p.as_str())
                .and_then(|ts| ts.iter().copied().find(|&t| t >= from));
            match next {
                Some(t) if t <= from + window => {
                    report.longest_recovery_ms = report.longest_recovery_ms.max((t - healed) / 1_000_000);
                }
                _ => report.violations.push(Violation {
                    rule: "no-recovery",
                    t: healed,
                    detail: format!(
                        "{p} was not granted a lock within {:?} after the {kind} fault on {target} healed",
                        lease + Duration::from_secs(1)
                    ),
                }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const LEASE: Duration = Duration::from_millis(1000);

    fn s(x: &str) -> String {
        x.to_owned()
    }

    /// A complete, correct hold of `lock` by `p` from `at` (ms) for 50 ms.
    fn hold(p: &str, lock: &str, token: u64, at: u64, release: ReleaseOutcome) -> Vec<Event> {
        let t = at * MS;
        vec![
            Event::AcquireInvoke {
                t,
                p: s(p),
                lock: s(lock),
                permits: 1,
            },
            Event::AcquireOk {
                t: t + MS,
                p: s(p),
                lock: s(lock),
                token,
                valid_until: t + 900 * MS,
                mode: Mode::Exclusive,
                permits: 1,
                fenced: true,
                downgrade: false,
            },
            Event::Write {
                invoked: t + 2 * MS,
                t: t + 3 * MS,
                p: s(p),
                lock: s(lock),
                token,
                outcome: WriteOutcome::Accepted,
            },
            Event::ReleaseInvoke {
                t: t + 50 * MS,
                p: s(p),
                lock: s(lock),
                token,
            },
            Event::ReleaseDone {
                t: t + 51 * MS,
                p: s(p),
                lock: s(lock),
                token,
                outcome: release,
            },
        ]
    }

    fn starts() -> Vec<Event> {
        vec![
            Event::Start {
                t: 0,
                p: s("w1"),
                client: s("a"),
            },
            Event::Start {
                t: 0,
                p: s("w2"),
                client: s("b"),
            },
        ]
    }

    fn rules(events: &[Event]) -> Vec<&'static str> {
        check(events, LEASE)
            .violations
            .iter()
            .map(|v| v.rule)
            .collect()
    }

    #[test]
    fn a_clean_history_passes() {
        let mut h = starts();
        h.extend(hold("w1", "x", 10, 100, ReleaseOutcome::Ok));
        h.extend(hold("w2", "x", 11, 200, ReleaseOutcome::Ok));
        h.extend(hold("w1", "y", 5, 200, ReleaseOutcome::Ok));
        let report = check(&h, LEASE);
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!((report.grants, report.writes_accepted), (3, 3));
    }

    #[test]
    fn overlap_is_reported() {
        let mut h = starts();
        h.extend(hold("w1", "x", 10, 100, ReleaseOutcome::Ok));
        // w2 granted 20 ms into w1's confirmed hold.
        h.extend(hold("w2", "x", 11, 120, ReleaseOutcome::Ok));
        assert!(rules(&h).contains(&"overlap"), "{:?}", rules(&h));
    }

    /// A grant whose reply took longer than the lease: recorded inside a
    /// later holder's confirmed hold, with a smaller token (the server
    /// granted it first) and a lease view that had ended before it arrived.
    fn dead_on_arrival(valid_until_ms: u64, token: u64) -> Vec<Event> {
        let mut h = starts();
        h.extend(hold("w1", "x", 20, 100, ReleaseOutcome::Ok));
        h.extend([
            Event::AcquireInvoke {
                t: 0,
                p: s("w2"),
                lock: s("x"),
                permits: 1,
            },
            Event::AcquireOk {
                t: 120 * MS,
                p: s("w2"),
                lock: s("x"),
                token,
                valid_until: valid_until_ms * MS,
                mode: Mode::Exclusive,
                permits: 1,
                fenced: true,
                downgrade: false,
            },
            Event::Lost {
                t: 120 * MS,
                p: s("w2"),
                lock: s("x"),
                token,
                source: s("poll"),
            },
            Event::ReleaseInvoke {
                t: 121 * MS,
                p: s("w2"),
                lock: s("x"),
                token,
            },
            Event::ReleaseDone {
                t: 122 * MS,
                p: s("w2"),
                lock: s("x"),
                token,
                outcome: ReleaseOutcome::NotHeld,
            },
        ]);
        h
    }

    #[test]
    fn a_grant_dead_on_arrival_is_not_an_overlap() {
        // As the worker records it: the view ends at the grant itself.
        for valid_until in [120, 90] {
            let h = dead_on_arrival(valid_until, 10);
            assert!(!rules(&h).contains(&"overlap"), "{:?}", rules(&h));
        }
        // The same grant with a lease view still running when it arrived
        // is a holder inside a confirmed hold.
        let h = dead_on_arrival(500, 10);
        assert!(rules(&h).contains(&"overlap"), "{:?}", rules(&h));
        // A dead grant with the larger token was made while the confirmed
        // hold was on the server: a double grant, whatever its holder knew.
        let h = dead_on_arrival(120, 30);
        assert!(rules(&h).contains(&"overlap"), "{:?}", rules(&h));
    }

    #[test]
    fn an_overlap_after_a_signalled_loss_is_not_a_violation() {
        let mut h = starts();
        // w1's lease view ends at 115 ms; it hears the signal at 116 ms;
        // its release finds the lock gone. w2 is granted at 121 ms.
        h.extend([
            Event::AcquireInvoke {
                t: 100 * MS,
                p: s("w1"),
                lock: s("x"),
                permits: 1,
            },
            Event::AcquireOk {
                t: 101 * MS,
                p: s("w1"),
                lock: s("x"),
                token: 10,
                valid_until: 115 * MS,
                mode: Mode::Exclusive,
                permits: 1,
                fenced: true,
                downgrade: false,
            },
            Event::Write {
                invoked: 102 * MS,
                t: 103 * MS,
                p: s("w1"),
                lock: s("x"),
                token: 10,
                outcome: WriteOutcome::Accepted,
            },
            Event::Lost {
                t: 116 * MS,
                p: s("w1"),
                lock: s("x"),
                token: 10,
                source: s("signal"),
            },
            Event::ReleaseInvoke {
                t: 150 * MS,
                p: s("w1"),
                lock: s("x"),
                token: 10,
            },
            Event::ReleaseDone {
                t: 151 * MS,
                p: s("w1"),
                lock: s("x"),
                token: 10,
                outcome: ReleaseOutcome::NotHeld,
            },
        ]);
        h.extend(hold("w2", "x", 11, 120, ReleaseOutcome::Ok));
        assert!(rules(&h).is_empty(), "{:?}", rules(&h));
        // The same grant while w1's lease view still had time left is an
        // overlap, whatever w1 learned later...
        let mut early = h.clone();
        if let Event::AcquireOk { valid_until, .. } = &mut early[3] {
            *valid_until = 900 * MS;
        }
        assert!(rules(&early).contains(&"overlap"), "{:?}", rules(&early));
        // ...and a restart in between does not excuse it by itself (w2's
        // token 11 follows w1's 10: the server kept the counter)...
        early.push(Event::FaultStart {
            t: 110 * MS,
            kind: s("restart"),
            target: s("lock server"),
            holder: false,
        });
        assert!(rules(&early).contains(&"overlap"), "{:?}", rules(&early));
        // ...but it does when w2's token shows the counter was re-seeded.
        let mut wiped = early.clone();
        reseed(&mut wiped, "w2", 10 + 5_000_000);
        assert!(!rules(&wiped).contains(&"overlap"), "{:?}", rules(&wiped));
    }

    /// Gives every event of `p` the token `token`.
    fn reseed(h: &mut [Event], p: &str, token: u64) {
        for e in h.iter_mut() {
            match e {
                Event::AcquireOk { p: q, token: t, .. }
                | Event::Write { p: q, token: t, .. }
                | Event::ReleaseInvoke { p: q, token: t, .. }
                | Event::ReleaseDone { p: q, token: t, .. }
                    if q == p =>
                {
                    *t = token;
                }
                _ => {}
            }
        }
    }

    fn fault(t: u64, kind: &str, heal: u64) -> Vec<Event> {
        vec![
            Event::FaultStart {
                t,
                kind: s(kind),
                target: s("lock server"),
                holder: false,
            },
            Event::FaultHeal {
                t: heal,
                kind: s(kind),
                target: s("lock server"),
            },
        ]
    }

    #[test]
    fn a_hold_a_restart_wiped_excuses_both_overlap_branches() {
        // w1's hold (granted 101 ms, confirmed Ok at release 151 ms) is
        // wiped by a restart at 110-130 ms; w2 is granted at 141 ms with a
        // token from the re-seeded counter.
        let mut h = starts();
        h.extend(hold("w1", "x", 10, 100, ReleaseOutcome::Ok));
        h.extend(fault(110 * MS, "restart", 130 * MS));
        h.extend(hold("w2", "x", 10 + 5_000_000, 140, ReleaseOutcome::Ok));
        assert!(rules(&h).is_empty(), "confirmed branch: {:?}", rules(&h));
        // The lease-view branch too: released without an answer.
        let mut unconfirmed = h.clone();
        for e in unconfirmed.iter_mut() {
            if let Event::ReleaseDone { p, outcome, .. } = e {
                if p == "w1" {
                    *outcome = ReleaseOutcome::Error;
                }
            }
        }
        assert!(rules(&unconfirmed).is_empty(), "{:?}", rules(&unconfirmed));
        // A failover counts as a restart does when it re-seeds the counter
        // (the promoted replica had never received it). One that loses
        // only the last writes rolls the counter back instead: no jump, so
        // not excused (and a token-order violation besides).
        let mut failover = starts();
        failover.extend(hold("w1", "x", 10, 100, ReleaseOutcome::Ok));
        failover.extend(fault(110 * MS, "failover", 130 * MS));
        failover.extend(hold("w2", "x", 10 + 5_000_000, 140, ReleaseOutcome::Ok));
        assert!(rules(&failover).is_empty(), "{:?}", rules(&failover));
    }

    #[test]
    fn a_grant_recorded_just_after_the_restart_mark_is_still_wiped() {
        // w1's acquire, sent at 100 ms, is granted by the old server just
        // before the nemesis restarts it (marked 100.2 ms, healed 100.8
        // ms), and the grant is recorded at 101 ms, after the whole fault.
        // The fault was under way between w1's send and w2's grant (a
        // window starting at w1's grant would miss it): excused.
        let mut h = starts();
        h.extend(fault(100 * MS + 200_000, "restart", 100 * MS + 800_000));
        h.extend(hold("w1", "x", 10, 100, ReleaseOutcome::Ok));
        h.extend(hold("w2", "x", 10 + 5_000_000, 140, ReleaseOutcome::Ok));
        assert!(rules(&h).is_empty(), "{:?}", rules(&h));
    }

    #[test]
    fn a_grant_by_the_restarted_server_is_not_excused_by_the_restart() {
        // w1's acquire is sent at 100 ms, before the restart (99.5-100.5
        // ms), and granted by the restarted server (re-seeded token); w2's
        // grant inside w1's confirmed hold follows w1's token by one: the
        // restarted server granted the lock twice.
        let mut h = starts();
        h.extend(fault(99 * MS + 500_000, "restart", 100 * MS + 500_000));
        h.extend(hold("w1", "x", 5_000_010, 100, ReleaseOutcome::Ok));
        h.extend(hold("w2", "x", 5_000_011, 120, ReleaseOutcome::Ok));
        assert!(rules(&h).contains(&"overlap"), "{:?}", rules(&h));
    }

    #[test]
    fn a_token_jump_without_a_data_losing_fault_excuses_nothing() {
        let mut h = starts();
        h.extend(hold("w1", "x", 10, 100, ReleaseOutcome::Ok));
        h.extend(fault(110 * MS, "pause", 130 * MS));
        h.extend(hold("w2", "x", 10 + 5_000_000, 120, ReleaseOutcome::Ok));
        assert!(rules(&h).contains(&"overlap"), "{:?}", rules(&h));
        // Nor does a restart that healed before w1's acquire was sent.
        let mut before = starts();
        before.extend(fault(50 * MS, "restart", 60 * MS));
        before.extend(hold("w1", "x", 10, 100, ReleaseOutcome::Ok));
        before.extend(hold("w2", "x", 10 + 5_000_000, 120, ReleaseOutcome::Ok));
        assert!(rules(&before).contains(&"overlap"), "{:?}", rules(&before));
    }

    #[test]
    fn a_token_going_backwards_is_reported() {
        let mut h = starts();
        h.extend(hold("w1", "x", 10, 100, ReleaseOutcome::Ok));
        h.extend(hold("w2", "x", 9, 200, ReleaseOutcome::Ok));
        let r = rules(&h);
        assert!(r.contains(&"token-order"), "{r:?}");
        // Token 9 written after 10 was accepted: a stale write too.
        assert!(r.contains(&"stale-write"), "{r:?}");
    }

    #[test]
    fn an_accepted_stale_write_is_reported() {
        let mut h = starts();
        h.extend(hold("w2", "x", 11, 100, ReleaseOutcome::Ok));
        // An earlier holder (token 10, lost) writes late and is accepted.
        h.push(Event::Write {
            invoked: 300 * MS,
            t: 301 * MS,
            p: s("w1"),
            lock: s("x"),
            token: 10,
            outcome: WriteOutcome::Accepted,
        });
        assert_eq!(rules(&h), vec!["stale-write"]);
    }

    #[test]
    fn an_unsignalled_loss_is_reported() {
        // w1 holds past its lease view (ends at 1000 ms) until 1500 ms and
        // never hears its lost signal.
        let held_on = |lost: Option<Event>| {
            let mut h = starts();
            h.extend([
                Event::AcquireInvoke {
                    t: 100 * MS,
                    p: s("w1"),
                    lock: s("x"),
                    permits: 1,
                },
                Event::AcquireOk {
                    t: 101 * MS,
                    p: s("w1"),
                    lock: s("x"),
                    token: 10,
                    valid_until: 1_000 * MS,
                    mode: Mode::Exclusive,
                    permits: 1,
                    fenced: true,
                    downgrade: false,
                },
                Event::ReleaseInvoke {
                    t: 1_500 * MS,
                    p: s("w1"),
                    lock: s("x"),
                    token: 10,
                },
                Event::ReleaseDone {
                    t: 1_501 * MS,
                    p: s("w1"),
                    lock: s("x"),
                    token: 10,
                    outcome: ReleaseOutcome::NotHeld,
                },
                // The run goes on a while.
                Event::Exit {
                    t: 3_000 * MS,
                    p: s("w2"),
                },
            ]);
            h.extend(lost);
            h
        };
        assert_eq!(rules(&held_on(None)), vec!["unsignalled-loss"]);
        // Heard in time (a poll does not count as the signal)...
        let signal = |t: u64, source: &str| Event::Lost {
            t: t * MS,
            p: s("w1"),
            lock: s("x"),
            token: 10,
            source: s(source),
        };
        assert!(rules(&held_on(Some(signal(1_010, "signal")))).is_empty());
        assert_eq!(
            rules(&held_on(Some(signal(1_010, "poll")))),
            vec!["unsignalled-loss"]
        );
        // ... too late ...
        assert_eq!(
            rules(&held_on(Some(signal(1_400, "signal")))),
            vec!["unsignalled-loss"]
        );
        // ... or late because the nemesis had the process stopped.
        let mut paused = held_on(Some(signal(1_300, "signal")));
        paused.push(Event::FaultStart {
            t: 500 * MS,
            kind: s("pause"),
            target: s("w1"),
            holder: true,
        });
        paused.push(Event::FaultHeal {
            t: 1_200 * MS,
            kind: s("pause"),
            target: s("w1"),
        });
        assert!(rules(&paused).is_empty(), "{:?}", rules(&paused));
        // A write after the holder's own lease view ended, untold.
        let mut h = starts();
        let mut a = hold("w1", "x", 10, 100, ReleaseOutcome::Ok);
        a.insert(
            3,
            Event::Write {
                invoked: 1_500 * MS,
                t: 1_501 * MS,
                p: s("w1"),
                lock: s("x"),
                token: 10,
                outcome: WriteOutcome::Stale,
            },
        );
        h.extend(a);
        assert!(rules(&h).contains(&"write-after-expiry"), "{:?}", rules(&h));
    }

    #[test]
    fn a_worker_that_never_recovers_is_reported() {
        let mut h = starts();
        h.push(Event::FaultStart {
            t: 100 * MS,
            kind: s("black-hole"),
            target: s("w2"),
            holder: false,
        });
        h.push(Event::FaultHeal {
            t: 1_000 * MS,
            kind: s("black-hole"),
            target: s("w2"),
        });
        // w1 is granted soon after the heal; w2 never again.
        h.extend(hold("w1", "x", 10, 1_200, ReleaseOutcome::Ok));
        h.extend(hold("w1", "x", 11, 3_500, ReleaseOutcome::Ok));
        let report = check(&h, LEASE);
        let r: Vec<_> = report
            .violations
            .iter()
            .map(|v| (v.rule, v.detail.contains("w2")))
            .collect();
        assert_eq!(r, vec![("no-recovery", true)]);
        assert_eq!(report.longest_recovery_ms, 201);
        assert_eq!(report.faults.get("black-hole"), Some(&1));
        // Granted in time: fine. A killed worker is not expected to.
        h.extend(hold("w2", "y", 3, 1_900, ReleaseOutcome::Ok));
        assert!(rules(&h).is_empty(), "{:?}", rules(&h));
    }

    #[test]
    fn indeterminate_operations_prove_nothing() {
        let mut h = starts();
        h.push(Event::AcquireInvoke {
            t: 10 * MS,
            p: s("w1"),
            lock: s("x"),
            permits: 1,
        });
        h.push(Event::AcquireFail {
            t: 2_010 * MS,
            p: s("w1"),
            lock: s("x"),
            error: s("timeout"),
        });
        // w2's lease view ended at 110 ms; its release got no answer.
        h.extend([
            Event::AcquireInvoke {
                t: 100 * MS,
                p: s("w2"),
                lock: s("x"),
                permits: 1,
            },
            Event::AcquireOk {
                t: 101 * MS,
                p: s("w2"),
                lock: s("x"),
                token: 10,
                valid_until: 110 * MS,
                mode: Mode::Exclusive,
                permits: 1,
                fenced: true,
                downgrade: false,
            },
            Event::Write {
                invoked: 105 * MS,
                t: 900 * MS,
                p: s("w2"),
                lock: s("x"),
                token: 10,
                outcome: WriteOutcome::Error,
            },
            Event::ReleaseInvoke {
                t: 150 * MS,
                p: s("w2"),
                lock: s("x"),
                token: 10,
            },
            Event::ReleaseDone {
                t: 2_000 * MS,
                p: s("w2"),
                lock: s("x"),
                token: 10,
                outcome: ReleaseOutcome::Error,
            },
        ]);
        // A grant inside that hold but after its view ended: not proven.
        h.extend(hold("w1", "x", 11, 120, ReleaseOutcome::Ok));
        let report = check(&h, LEASE);
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!(report.indeterminate_acquires, 1);
    }

    /// `hold`, as a hold of `mode` taking `permits`, fenced or not, its
    /// owner's downgrade or not.
    fn hold_as(
        base: Vec<Event>,
        mode: Mode,
        permits: u64,
        fenced: bool,
        downgrade: bool,
    ) -> Vec<Event> {
        base.into_iter()
            .filter(|e| fenced || !matches!(e, Event::Write { .. }))
            .map(|mut e| {
                if let Event::AcquireOk {
                    mode: m,
                    permits: n,
                    fenced: f,
                    downgrade: d,
                    valid_until,
                    ..
                } = &mut e
                {
                    (*m, *n, *f, *d) = (mode, permits, fenced, downgrade);
                    // A counting semaphore's hold has no lease.
                    if !fenced && permits > 0 && mode == Mode::Exclusive {
                        *valid_until = u64::MAX;
                    }
                }
                if let Event::AcquireInvoke { permits: n, .. } = &mut e {
                    *n = permits;
                }
                e
            })
            .collect()
    }

    fn resource(lock: &str, kind: &str, capacity: u64) -> Event {
        Event::Resource {
            t: 0,
            lock: s(lock),
            kind: s(kind),
            capacity,
        }
    }

    #[test]
    fn readers_share_a_read_write_lock_and_writers_do_not() {
        let ok = ReleaseOutcome::Ok;
        let mut h = starts();
        h.push(resource("x", "read-write", 1));
        // Two readers overlap, sharing the token of the read hold.
        h.extend(hold_as(
            hold("w1", "x", 10, 100, ok),
            Mode::Read,
            1,
            true,
            false,
        ));
        h.extend(hold_as(
            hold("w2", "x", 10, 120, ok),
            Mode::Read,
            1,
            true,
            false,
        ));
        assert!(rules(&h).is_empty(), "{:?}", rules(&h));
        // A writer inside a reader's hold is an overlap.
        let mut w = h.clone();
        w.extend(hold_as(
            hold("w2", "x", 11, 130, ok),
            Mode::Write,
            1,
            true,
            false,
        ));
        assert!(rules(&w).contains(&"overlap"), "{:?}", rules(&w));
        // A write hold sharing an earlier grant's token breaks token order.
        let mut same = starts();
        same.push(resource("x", "read-write", 1));
        same.extend(hold_as(
            hold("w1", "x", 10, 100, ok),
            Mode::Write,
            1,
            true,
            false,
        ));
        same.extend(hold_as(
            hold("w2", "x", 10, 300, ok),
            Mode::Write,
            1,
            true,
            false,
        ));
        assert_eq!(rules(&same), ["token-order"]);
    }

    #[test]
    fn a_downgrade_overlaps_only_its_own_write() {
        let ok = ReleaseOutcome::Ok;
        let mut h = starts();
        h.push(resource("x", "read-write", 1));
        h.extend(hold_as(
            hold("w1", "x", 10, 100, ok),
            Mode::Write,
            1,
            true,
            false,
        ));
        // w1's own read hold, taken inside its write hold, same token.
        h.extend(hold_as(
            hold("w1", "x", 10, 120, ok),
            Mode::Read,
            1,
            true,
            true,
        ));
        assert!(rules(&h).is_empty(), "{:?}", rules(&h));
        // Another owner's read inside w1's write is an overlap.
        let mut other = h.clone();
        other.extend(hold_as(
            hold("w2", "x", 10, 130, ok),
            Mode::Read,
            1,
            true,
            false,
        ));
        assert!(rules(&other).contains(&"overlap"), "{:?}", rules(&other));
    }

    #[test]
    fn semaphore_holds_beyond_the_capacity_overlap() {
        let ok = ReleaseOutcome::Ok;
        let sem = |p: &str, id: u64, at: u64, permits: u64| {
            hold_as(
                hold(p, "s", id, at, ok),
                Mode::Exclusive,
                permits,
                false,
                false,
            )
        };
        let mut h = starts();
        h.push(resource("s", "semaphore", 2));
        h.extend(sem("w1", 1, 100, 1));
        h.extend(sem("w2", 1, 110, 1));
        assert!(rules(&h).is_empty(), "two of two: {:?}", rules(&h));
        let mut three = h.clone();
        three.push(Event::Start {
            t: 0,
            p: s("w3"),
            client: s("c"),
        });
        three.extend(sem("w3", 1, 120, 1));
        assert_eq!(rules(&three), ["overlap"]);
        let mut two_and_one = starts();
        two_and_one.push(resource("s", "semaphore", 2));
        two_and_one.extend(sem("w1", 1, 100, 2));
        two_and_one.extend(sem("w2", 1, 110, 1));
        assert_eq!(rules(&two_and_one), ["overlap"]);
        // Without tokens a restart between the grants excuses the pair.
        let mut wiped = starts();
        wiped.push(resource("s", "semaphore", 2));
        wiped.extend(sem("w1", 1, 100, 2));
        wiped.extend(fault(105 * MS, "restart", 106 * MS));
        wiped.extend(sem("w2", 1, 110, 1));
        assert!(rules(&wiped).is_empty(), "{:?}", rules(&wiped));
    }

    fn permits_after(lock: &str, available: i64) -> Event {
        Event::Permits {
            t: 10_000 * MS,
            lock: s(lock),
            available,
        }
    }

    #[test]
    fn permits_are_accounted_for_after_the_run() {
        let ok = ReleaseOutcome::Ok;
        let sem = |p: &str, at: u64, release| {
            hold_as(
                hold(p, "s", 1, at, release),
                Mode::Exclusive,
                1,
                false,
                false,
            )
        };
        let mut h = starts();
        h.push(resource("s", "semaphore", 2));
        h.extend(sem("w1", 100, ok));
        let mut exact = h.clone();
        exact.push(permits_after("s", 2));
        let report = check(&exact, LEASE);
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!(report.permits[0].expected, Some((2, 2)));
        // One permit too many: given back twice somewhere.
        let mut more = h.clone();
        more.push(permits_after("s", 3));
        assert_eq!(rules(&more), ["permits-accounting"]);
        // A holder killed while holding keeps its permit (no lease) ...
        let mut killed = starts();
        killed.push(resource("s", "semaphore", 2));
        killed.extend(sem("w1", 100, ok).into_iter().take(2));
        killed.push(Event::Killed {
            t: 120 * MS,
            p: s("w1"),
        });
        let mut kept = killed.clone();
        kept.push(permits_after("s", 1));
        assert!(rules(&kept).is_empty(), "{:?}", rules(&kept));
        let mut leaked_and_counted = killed.clone();
        leaked_and_counted.push(permits_after("s", 2));
        assert_eq!(rules(&leaked_and_counted), ["permits-accounting"]);
        // ... unless the nemesis gave it back.
        let mut given = killed.clone();
        given.push(Event::Reclaimed {
            t: 130 * MS,
            lock: s("s"),
            permits: 1,
        });
        given.push(permits_after("s", 2));
        assert!(rules(&given).is_empty(), "{:?}", rules(&given));
        // A release without an answer leaves a range.
        let mut unknown = starts();
        unknown.push(resource("s", "semaphore", 2));
        unknown.extend(sem("w1", 100, ReleaseOutcome::Error));
        for available in [1, 2] {
            let mut u = unknown.clone();
            u.push(permits_after("s", available));
            assert!(rules(&u).is_empty(), "{available}: {:?}", rules(&u));
        }
        // After a restart the count is not accounted.
        let mut restarted = h.clone();
        restarted.extend(fault(200 * MS, "restart", 201 * MS));
        for p in ["w1", "w2"] {
            restarted.push(Event::Exit {
                t: 202 * MS,
                p: s(p),
            });
        }
        restarted.push(permits_after("s", 5));
        let report = check(&restarted, LEASE);
        assert!(report.violations.is_empty(), "{:?}", report.violations);
        assert_eq!(report.permits[0].expected, None);
    }

    #[test]
    fn a_waiter_overtaken_on_a_fair_lock_is_reported() {
        let ok = ReleaseOutcome::Ok;
        // w1 holds 100-150 ms; w2 queues at 110 ms, w3 at 300 ms; w3 is
        // granted at 301 ms, w2 only at 400 ms.
        let waited = |p: &str, token: u64, sent: u64, granted: u64| {
            let mut h = hold(p, "f", token, granted, ok);
            if let Event::AcquireInvoke { t, .. } = &mut h[0] {
                *t = sent * MS;
            }
            h
        };
        let mut h = starts();
        h.push(Event::Start {
            t: 0,
            p: s("w3"),
            client: s("c"),
        });
        h.push(resource("f", "fair-lock", 1));
        h.extend(hold("w1", "f", 10, 100, ok));
        h.extend(waited("w2", 12, 110, 400));
        h.extend(waited("w3", 11, 300, 300));
        assert_eq!(rules(&h), ["fifo"]);
        // The same on a plain lock is no violation.
        let plain: Vec<Event> = h
            .iter()
            .filter(|e| !matches!(e, Event::Resource { .. }))
            .cloned()
            .collect();
        assert!(rules(&plain).is_empty(), "{:?}", rules(&plain));
        // Nor while a fault was under way during w2's wait.
        let mut faulted = h.clone();
        faulted.extend(fault(200 * MS, "pause", 250 * MS));
        assert!(!rules(&faulted).contains(&"fifo"), "{:?}", rules(&faulted));
        // Sends closer than the slack may reach the server in either order.
        let mut close = starts();
        close.push(resource("f", "fair-lock", 1));
        close.extend(hold("w1", "f", 10, 100, ok));
        close.extend(waited("w2", 12, 110, 400));
        close.extend({
            let mut h = waited("w1", 11, 150, 300);
            for e in &mut h {
                if let Event::AcquireInvoke { p, .. } | Event::AcquireOk { p, .. } = e {
                    *p = s("w1");
                }
            }
            h
        });
        assert!(!rules(&close).contains(&"fifo"), "{:?}", rules(&close));
    }

    #[test]
    fn a_latch_let_go_early_or_late_is_reported() {
        let arm = |at: u64, set: bool| Event::LatchArm {
            invoked: at * MS,
            t: (at + 1) * MS,
            p: s("w1"),
            lock: s("l"),
            set: Some(set),
        };
        let down = |at: u64, left: u64| Event::CountDown {
            invoked: at * MS,
            t: (at + 1) * MS,
            p: s("w1"),
            lock: s("l"),
            left: Some(left),
        };
        let wait = |from: u64, to: u64, opened: bool| Event::LatchWait {
            invoked: from * MS,
            t: to * MS,
            p: s("w2"),
            lock: s("l"),
            opened: Some(opened),
        };
        let mut base = starts();
        base.push(resource("l", "latch", 2));
        base.push(arm(100, true));
        // Opened after both count-downs: fine.
        let mut ok = base.clone();
        ok.extend([wait(110, 300, true), down(150, 1), down(250, 0)]);
        assert!(rules(&ok).is_empty(), "{:?}", rules(&ok));
        // Opened after one: early.
        let mut early = base.clone();
        early.extend([wait(110, 300, true), down(150, 1)]);
        assert_eq!(rules(&early), ["latch-early"]);
        // Not excused by count-downs before the arm that set the count.
        let mut stale = starts();
        stale.push(resource("l", "latch", 2));
        stale.extend([down(10, 1), down(20, 0), arm(100, true)]);
        stale.extend([wait(110, 300, true), down(150, 1)]);
        assert_eq!(rules(&stale), ["latch-early"]);
        // Still waiting 1.3 s after the count-down that opened it: late.
        let mut late = base.clone();
        late.extend([wait(110, 1610, false), down(150, 1), down(200, 0)]);
        assert_eq!(rules(&late), ["latch-late"]);
        // Unless it was armed again meanwhile.
        let mut rearmed = late.clone();
        rearmed.push(Event::LatchArm {
            invoked: 205 * MS,
            t: 206 * MS,
            p: s("w1"),
            lock: s("l"),
            set: Some(true),
        });
        assert!(rules(&rearmed).is_empty(), "{:?}", rules(&rearmed));
    }

    #[test]
    fn a_release_across_a_wipe_raises_a_counting_semaphore() {
        let ok = ReleaseOutcome::Ok;
        let sem = |p: &str, id: u64, at: u64| {
            hold_as(hold(p, "s", id, at, ok), Mode::Exclusive, 1, false, false)
        };
        let mut h = starts();
        h.push(Event::Start {
            t: 0,
            p: s("w3"),
            client: s("c"),
        });
        h.push(resource("s", "semaphore", 1));
        // w1 holds across a restart (re-seeded to 1); its release adds a
        // permit, so w2 and w3 may then hold one each at once.
        h.extend(sem("w1", 1, 100));
        h.extend(fault(120 * MS, "restart", 121 * MS));
        h.extend(sem("w2", 1, 300));
        h.extend(sem("w3", 1, 310));
        assert!(!rules(&h).contains(&"overlap"), "{:?}", rules(&h));
    }

    #[test]
    fn only_a_writers_own_downgrade_may_overlap_it() {
        let ok = ReleaseOutcome::Ok;
        let mut h = starts();
        h.push(resource("x", "read-write", 1));
        // w1's downgrade read (token 10) and, later, a write of w1 with a
        // new token inside that read's lease: a double grant.
        h.extend(hold_as(
            hold("w1", "x", 10, 100, ok),
            Mode::Read,
            1,
            true,
            true,
        ));
        h.extend(hold_as(
            hold("w1", "x", 11, 120, ok),
            Mode::Write,
            1,
            true,
            false,
        ));
        assert!(rules(&h).contains(&"overlap"), "{:?}", rules(&h));
    }

    #[test]
    fn redlock_without_a_quorum_grants_nothing_and_answers_at_once() {
        let ok = ReleaseOutcome::Ok;
        let mut base = starts();
        base.extend(fault(90 * MS, "node-pause-majority", 2010 * MS));
        base.push(Event::Quorum {
            t: 100 * MS,
            lost: true,
        });
        base.push(Event::Quorum {
            t: 2000 * MS,
            lost: false,
        });
        // A grant whose round began during the fault.
        let mut granted = base.clone();
        granted.extend(hold("w1", "r", 10, 200, ok));
        assert!(
            rules(&granted).contains(&"grant-without-quorum"),
            "{:?}",
            rules(&granted)
        );
        // An acquire answered 1.3 s after its send, while the fault lasted.
        let mut hung = base.clone();
        hung.extend([
            Event::AcquireInvoke {
                t: 150 * MS,
                p: s("w2"),
                lock: s("r"),
                permits: 1,
            },
            Event::AcquireFail {
                t: 1900 * MS,
                p: s("w2"),
                lock: s("r"),
                error: s("no quorum"),
            },
        ]);
        assert!(
            rules(&hung).contains(&"no-quorum-hang"),
            "{:?}",
            rules(&hung)
        );
        // Answered at once: fine. And a grant before the fault: fine.
        let mut prompt = base.clone();
        prompt.extend([
            Event::AcquireInvoke {
                t: 150 * MS,
                p: s("w2"),
                lock: s("r"),
                permits: 1,
            },
            Event::AcquireFail {
                t: 400 * MS,
                p: s("w2"),
                lock: s("r"),
                error: s("no quorum"),
            },
        ]);
        prompt.extend(hold("w1", "r", 10, 50, ok));
        let found = rules(&prompt);
        assert!(
            !found.contains(&"no-quorum-hang") && !found.contains(&"grant-without-quorum"),
            "{found:?}"
        );
    }

    #[test]
    fn a_redlock_round_finishing_late_inside_the_outage_is_reported() {
        let ok = ReleaseOutcome::Ok;
        let mut h = starts();
        h.extend(fault(90 * MS, "node-kill-majority", 3010 * MS));
        h.push(Event::Quorum {
            t: 100 * MS,
            lost: true,
        });
        h.push(Event::Quorum {
            t: 3000 * MS,
            lost: false,
        });
        // Sent at 50 ms, before the outage, granted at 900 ms inside it.
        let mut late = hold("w1", "r", 10, 900, ok);
        if let Event::AcquireInvoke { t, .. } = &mut late[0] {
            *t = 50 * MS;
        }
        let mut with_late = h.clone();
        with_late.extend(late);
        assert!(
            rules(&with_late).contains(&"grant-without-quorum"),
            "{:?}",
            rules(&with_late)
        );
        // Granted at 300 ms: a round that had its grants before the
        // outage, finishing within the slack.
        let mut early = hold("w1", "r", 10, 300, ok);
        if let Event::AcquireInvoke { t, .. } = &mut early[0] {
            *t = 50 * MS;
        }
        let mut with_early = h.clone();
        with_early.extend(early);
        assert!(
            !rules(&with_early).contains(&"grant-without-quorum"),
            "{:?}",
            rules(&with_early)
        );
    }

    #[test]
    fn only_the_latest_wipe_raises_a_counting_semaphore() {
        let ok = ReleaseOutcome::Ok;
        let sem = |p: &str, id: u64, at: u64| {
            hold_as(hold(p, "s", id, at, ok), Mode::Exclusive, 1, false, false)
        };
        let mut h = starts();
        h.push(Event::Start {
            t: 0,
            p: s("w3"),
            client: s("c"),
        });
        h.push(resource("s", "semaphore", 1));
        // w1 held across the first restart (a rise), then a second
        // restart re-seeded the count: w2 and w3 together exceed it.
        h.extend(sem("w1", 1, 100));
        h.extend(fault(120 * MS, "restart", 121 * MS));
        h.extend(fault(3000 * MS, "restart", 3001 * MS));
        h.extend(sem("w2", 1, 5000));
        h.extend(sem("w3", 1, 5010));
        assert!(rules(&h).contains(&"overlap"), "{:?}", rules(&h));
    }

    #[test]
    fn a_dropped_acquire_must_leave_no_permit_behind() {
        let mut h = starts();
        h.push(resource("s", "semaphore", 2));
        h.extend([
            Event::AcquireInvoke {
                t: 100 * MS,
                p: s("w1"),
                lock: s("s"),
                permits: 1,
            },
            Event::AcquireFail {
                t: 110 * MS,
                p: s("w1"),
                lock: s("s"),
                error: s(CANCELLED),
            },
        ]);
        let mut leaked = h.clone();
        leaked.push(permits_after("s", 1));
        assert_eq!(rules(&leaked), ["permits-accounting"]);
        // Unless a fault may have lost the reply that undoes the grant.
        let mut cut = h.clone();
        cut.extend(fault(105 * MS, "cut", 106 * MS));
        cut.push(permits_after("s", 1));
        assert!(
            !rules(&cut).contains(&"permits-accounting"),
            "{:?}",
            rules(&cut)
        );
    }
}
