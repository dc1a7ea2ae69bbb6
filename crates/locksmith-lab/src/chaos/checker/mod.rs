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
//!    ends must hear its lost signal by then (within [`SIGNAL_SLACK`](signals::SIGNAL_SLACK) for
//!    timers and scheduling, or that long after the process was resumed if
//!    the nemesis had it stopped across that instant); and no write goes
//!    out after its lease view ended unless it had been told;
//! 5. **recovery**: after each fault heals, every live worker is granted a
//!    lock again within lease + 1 s;
//! 6. **permits accounted for**: after the run, with every worker gone and
//!    every lease over, each semaphore has its permits back, less a
//!    counting semaphore's permits a killed holder kept and the nemesis did
//!    not give back, within the range that acquires and releases without an
//!    answer leave open (see [`permits::Accounting::check`]). Holds without fencing
//!    tokens (semaphores) cannot show a re-seeded counter, so for them a
//!    restart or failover under way between the two grants excuses an
//!    overlap (rule 3), and the permits are not accounted after one: the
//!    count itself may be gone;
//! 7. **first come, first served** (fair locks): a waiter whose acquire
//!    was sent [`QUEUE_SLACK`](fairness::QUEUE_SLACK) before another's is granted first, unless a
//!    fault, or its recovery time, was under way while it waited (see
//!    [`fairness::first_come_first_served`]);
//! 8. **latch**: no waiter is let go before the count reached zero, and
//!    every waiter is let go within [`LATCH_WAKE`](latch::LATCH_WAKE) after it did (see
//!    [`latch::LatchCalls::check`]);
//! 9. **Redlock without a quorum**: while a majority of its servers is
//!    down, nothing is granted and every acquire is answered (`NoQuorum`)
//!    within [`NO_QUORUM_ANSWER`](quorum::NO_QUORUM_ANSWER) (see [`quorum::quorum`]).
//!
//! A fault that could not be injected, and a worker that failed by itself,
//! are reported too: such a run proves less than it claims.
//!
//! Acquires that time out or fail, writes and releases without an answer
//! are indeterminate: they neither prove nor break a rule.
//!
//! The history is read once into named facts ([`record::Record`]); each
//! rule lives in a module of its own, with its tests.

mod fairness;
mod latch;
mod overlap;
mod permits;
mod quorum;
mod record;
mod recovery;
mod signals;
#[cfg(test)]
mod testing;
mod tokens;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::Serialize;

use self::latch::LatchContext;
use self::overlap::Wipes;
use self::permits::Accounting;
use self::record::{Hold, Record, Resource, Window};
use crate::chaos::history::{Event, Mode};

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

/// Checks `events` (any order) from a run with leases of `lease`.
pub(crate) fn check(events: &[Event], lease: Duration) -> Report {
    let mut events: Vec<&Event> = events.iter().collect();
    events.sort_by_key(|e| e.t());
    let mut report = Report {
        events: events.len(),
        ..Report::default()
    };
    let history_end = events.last().map_or(0, |e| e.t());
    let record = Record::read(&events, &mut report);

    let mut per_lock: BTreeMap<&str, Vec<&Hold>> = BTreeMap::new();
    for hold in &record.holds {
        per_lock.entry(&hold.lock).or_default().push(hold);
    }
    // Faults and probes, each stretched by a recovery time (lease + 1 s,
    // as rule 5 allows): a client may still be reconnecting after a heal.
    let settle = (lease + Duration::from_secs(1)).as_nanos() as u64;
    let disturbed: Vec<Window> = record
        .windows
        .iter()
        .map(|w| Window {
            began: w.began,
            healed: w.healed.saturating_add(settle),
        })
        .collect();
    for (lock, list) in &per_lock {
        let fenced: Vec<&Hold> = list.iter().copied().filter(|h| h.fenced).collect();
        tokens::token_order(lock, &fenced, &mut report.violations);
        let wipes = Wipes {
            faults: &record.data_loss,
            invokes: record.invokes.get(*lock).map_or(&[], Vec::as_slice),
            processes: record.started.len() as u64,
        };
        let (kind, capacity) = record
            .resources
            .get(*lock)
            .map_or(("lock", 1), |r| (r.kind.as_str(), r.capacity));
        let before = report.violations.len();
        overlap::overlaps(lock, list, kind, capacity, &wipes, &mut report.violations);
        if kind == "fair-lock" {
            fairness::first_come_first_served(lock, list, &disturbed, &mut report.violations);
        }
        report
            .per_kind
            .entry(kind.to_owned())
            .or_default()
            .violations += report.violations.len() - before;
    }
    for (lock, calls) in &record.latches {
        let count = record.resources.get(lock).map_or(1, |r| r.capacity);
        let before = report.violations.len();
        let context = LatchContext {
            data_loss: &record.data_loss,
            disturbed: &disturbed,
            kills: &record.kills,
        };
        calls.check(lock, count, &context, &mut report.violations);
        let figures = report.per_kind.entry("latch".to_owned()).or_default();
        figures.violations += report.violations.len() - before;
        figures.acquires += calls.waits.len() + calls.downs.len();
        figures.grants += calls
            .waits
            .iter()
            .filter(|w| w.opened == Some(true))
            .count();
    }
    quorum::quorum(&record.spans, &record.no_quorum, &mut report.violations);
    let facts = Accounting::of(&record);
    for last in &record.finals {
        let Some(Resource { kind, capacity }) = record.resources.get(&last.lock) else {
            continue;
        };
        let line = facts.check(&last.lock, kind, *capacity, last.t, last.available);
        if let Some(violation) = &line.violation {
            report.violations.push(violation.clone());
            report.per_kind.entry(kind.clone()).or_default().violations += 1;
        }
        report.permits.push(line);
    }
    for (lock, list) in &record.writes {
        tokens::stale_writes(lock, list, &mut report.violations);
    }
    signals::unsignalled_losses(
        &record.holds,
        &record.pauses,
        history_end,
        &mut report.violations,
    );
    recovery::recovery(
        &events,
        &record.started,
        &record.ended,
        history_end,
        lease,
        &mut report,
    );
    report.violations.sort_by_key(|v| v.t);
    report
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Exclusive => "exclusive",
        Mode::Read => "read",
        Mode::Write => "write",
    }
}

/// The kind of name `lock` (a lock unless its resource says otherwise).
fn kind_of(resources: &HashMap<String, Resource>, lock: &str) -> String {
    resources
        .get(lock)
        .map_or_else(|| "lock".to_owned(), |r| r.kind.clone())
}
