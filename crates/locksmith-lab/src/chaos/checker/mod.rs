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
//!    [`record::LatchCalls::check`]);
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
mod report;
mod signals;
#[cfg(test)]
mod testing;
mod tokens;

use std::collections::BTreeMap;
use std::time::Duration;

use self::latch::LatchContext;
use self::overlap::Wipes;
use self::permits::Accounting;
use self::record::{Hold, Record, Resource, Window};
pub(crate) use self::report::Report;
use crate::chaos::history::Event;

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
    signals::writes_after_expiry(&record.holds, &record.writes_under, &mut report.violations);
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
