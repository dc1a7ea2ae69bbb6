//! The checker: reads a merged history and reports every violation of the
//! lock's promises, and the run's figures.
//!
//! Rules (times are the machine-wide monotonic clock):
//! 1. **token order**: per lock, a grant completed before another grant was
//!    invoked has a smaller fencing token;
//! 2. **stale write**: per lock, the fenced store never accepts a token
//!    lower than one it had accepted before the write was sent;
//! 3. **overlap**: a grant inside another hold of the same lock is a
//!    violation when the server confirmed that hold at its release (the
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
//!    lock again within lease + 1 s.
//!
//! A fault that could not be injected, and a worker that failed by itself,
//! are reported too: such a run proves less than it claims.
//!
//! Acquires that time out or fail, writes and releases without an answer
//! are indeterminate: they neither prove nor break a rule.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::Serialize;

use super::history::{Event, ReleaseOutcome, WriteOutcome};

/// How late after its lease view ended a lost signal may be recorded
/// (timer resolution, scheduling on a loaded machine, the record itself).
pub(crate) const SIGNAL_SLACK: Duration = Duration::from_millis(250);

/// One broken promise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Violation {
    /// Which rule: `token-order`, `stale-write`, `overlap`,
    /// `unsignalled-loss`, `write-after-expiry`, `no-recovery`.
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
    /// Holds whose holder heard its lost signal.
    pub(crate) losses_signalled: usize,
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
    /// Fault heals whose recovery window was checked / skipped (another
    /// fault inside it, or the run ended first).
    pub(crate) recoveries_checked: usize,
    pub(crate) recoveries_skipped: usize,
    /// Every violation found.
    pub(crate) violations: Vec<Violation>,
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
    let mut by_key: HashMap<(String, String, u64), usize> = HashMap::new();
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
    for event in &events {
        match event {
            Event::Start { t, p, .. } => {
                started.entry(p.clone()).or_insert(*t);
            }
            Event::Exit { t, p } | Event::Killed { t, p } => {
                ended.entry(p.clone()).or_insert(*t);
                for hold in holds.iter_mut().filter(|h| h.p == *p && h.end == u64::MAX) {
                    hold.end = *t;
                }
            }
            Event::AcquireInvoke { t, p, lock } => {
                report.acquires += 1;
                last_invoke.insert((p.clone(), lock.clone()), *t);
                invokes.entry(lock.clone()).or_default().push(*t);
            }
            Event::AcquireFail { .. } => report.indeterminate_acquires += 1,
            Event::AcquireOk {
                t,
                p,
                lock,
                token,
                valid_until,
            } => {
                report.grants += 1;
                let invoked = last_invoke
                    .get(&(p.clone(), lock.clone()))
                    .copied()
                    .unwrap_or(*t);
                by_key.insert((p.clone(), lock.clone(), *token), holds.len());
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
                });
            }
            Event::Valid {
                t,
                p,
                lock,
                token,
                valid_until,
            } => {
                if let Some(&i) = by_key.get(&(p.clone(), lock.clone(), *token)) {
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
                if let Some(&i) = by_key.get(&(p.clone(), lock.clone(), *token)) {
                    let hold = &mut holds[i];
                    hold.lost.get_or_insert(*t);
                    if source == "signal" && hold.signalled.is_none() {
                        report.losses_signalled += 1;
                        hold.signalled = Some(*t);
                    }
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
                if let Some(&i) = by_key.get(&(p.clone(), lock.clone(), *token)) {
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
                if let Some(&i) = by_key.get(&(p.clone(), lock.clone(), *token)) {
                    holds[i].end = holds[i].end.min(*t);
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
                if let Some(&i) = by_key.get(&(p.clone(), lock.clone(), *token)) {
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
                if *holder {
                    report.holder_faults += 1;
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
    for (lock, list) in &per_lock {
        token_order(lock, list, &mut report.violations);
        let wipes = Wipes {
            faults: &data_loss,
            invokes: invokes.get(*lock).map_or(&[], Vec::as_slice),
            processes: started.len() as u64,
        };
        overlaps(lock, list, &wipes, &mut report.violations);
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
/// invocation order.
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
            if b.token >= g.token {
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
        if !under_way || later.token <= earlier.token {
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
/// (the server made it first). Such a holder never held the lock as far as
/// it knew, so it did nothing under it, and its lease ran out on the server
/// before the next grant. A dead grant with the larger token is still an
/// overlap: the server granted it while the other hold was there.
fn overlaps(lock: &str, holds: &[&Hold], wipes: &Wipes<'_>, out: &mut Vec<Violation>) {
    let mut sorted: Vec<&Hold> = holds.to_vec();
    sorted.sort_by_key(|h| h.granted);
    for (i, a) in sorted.iter().enumerate() {
        for b in &sorted[i + 1..] {
            if b.granted >= a.end {
                break;
            }
            if b.valid_until_at(b.granted) <= b.granted && b.token < a.token {
                continue;
            }
            let confirmed = a.release == Some(ReleaseOutcome::Ok);
            let view = a.valid_until_at(b.granted);
            let within_view = b.granted < view;
            if !confirmed && !within_view || wipes.wiped(a, b) {
                continue;
            }
            out.push(Violation {
                rule: "overlap",
                t: b.granted,
                detail: format!(
                    "{lock:?}: {} was granted (token {}) while {} held it (token {}): {}",
                    b.p,
                    b.token,
                    a.p,
                    a.token,
                    if confirmed {
                        "the server confirmed the earlier hold at its release".to_owned()
                    } else {
                        format!(
                            "the earlier holder's lease view had {:.1} ms left",
                            (view - b.granted) as f64 / 1e6
                        )
                    }
                ),
            });
        }
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
    for e in events {
        if let Event::AcquireOk { t, p, .. } = e {
            grants.entry(p.as_str()).or_default().push(*t);
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
            },
            Event::AcquireOk {
                t: t + MS,
                p: s(p),
                lock: s(lock),
                token,
                valid_until: t + 900 * MS,
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
            },
            Event::AcquireOk {
                t: 120 * MS,
                p: s("w2"),
                lock: s("x"),
                token,
                valid_until: valid_until_ms * MS,
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
            },
            Event::AcquireOk {
                t: 101 * MS,
                p: s("w1"),
                lock: s("x"),
                token: 10,
                valid_until: 115 * MS,
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
                },
                Event::AcquireOk {
                    t: 101 * MS,
                    p: s("w1"),
                    lock: s("x"),
                    token: 10,
                    valid_until: 1_000 * MS,
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
            },
            Event::AcquireOk {
                t: 101 * MS,
                p: s("w2"),
                lock: s("x"),
                token: 10,
                valid_until: 110 * MS,
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
}
