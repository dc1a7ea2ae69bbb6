//! The history read once, in time order, into named facts: each hold
//! assembled from its events, the fault windows, the acquires in flight
//! and without an answer, the latches' calls. The rules read these facts;
//! none reads the raw events again but rule 5 (recovery).

use std::collections::{BTreeMap, HashMap};

use super::report::{Report, Violation};
use crate::chaos::history::{Event, Mode, ReleaseOutcome, WriteOutcome, CANCELLED};

/// Not yet (a hold not ended, a fault not healed).
pub(super) const NEVER: u64 = u64::MAX;

/// A stretch of the run (monotonic ns): a fault from its start to its heal
/// ([`NEVER`] while under way), a probe's freeze.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Window {
    pub(super) began: u64,
    pub(super) healed: u64,
}

impl Window {
    /// True when the window and `[from, to]` share an instant.
    pub(super) fn meets(&self, from: u64, to: u64) -> bool {
        self.began <= to && self.healed >= from
    }

    /// True when any of `windows` meets `[from, to]`.
    pub(super) fn any_meets(windows: &[Window], from: u64, to: u64) -> bool {
        windows.iter().any(|w| w.meets(from, to))
    }
}

/// Heals the last window of `windows` still under way, if any (`last`:
/// the latest one; else the first one found).
fn heal(windows: &mut [Window], t: u64, last: bool) {
    let open = |w: &&mut Window| w.healed == NEVER;
    let found = if last {
        windows.iter_mut().rev().find(open)
    } else {
        windows.iter_mut().find(open)
    };
    if let Some(w) = found {
        w.healed = t;
    }
}

/// One hold, assembled from its events.
#[derive(Debug)]
pub(super) struct Hold {
    pub(super) p: String,
    pub(super) lock: String,
    pub(super) token: u64,
    pub(super) invoked: u64,
    pub(super) granted: u64,
    /// Release sent, process killed or exited; [`NEVER`] if never.
    pub(super) end: u64,
    /// The holder's lease views, in order.
    pub(super) valid: Vec<LeaseView>,
    /// First time the holder learned of a loss (signal or poll).
    pub(super) lost: Option<u64>,
    /// First time its lost signal fired.
    pub(super) signalled: Option<u64>,
    pub(super) release: Option<ReleaseOutcome>,
    /// Its release was sent.
    pub(super) release_sent: bool,
    /// How it holds the name, and how many permits.
    pub(super) mode: Mode,
    pub(super) permits: u64,
    /// Whether `token` is a fencing token (else an id of the hold).
    pub(super) fenced: bool,
    /// A read hold its owner took while holding the write hold.
    pub(super) downgrade: bool,
    /// Its process was killed while it held (no release sent).
    pub(super) killed: bool,
}

/// What a holder recorded of its lease at one moment.
#[derive(Debug, Clone, Copy)]
pub(super) struct LeaseView {
    /// When it was recorded.
    pub(super) at: u64,
    /// The lease end the holder saw then.
    pub(super) until: u64,
}

impl Hold {
    /// The holder's most recent view of its lease end recorded at or
    /// before `t` (views can move earlier as well as later).
    pub(super) fn valid_until_at(&self, t: u64) -> u64 {
        self.valid
            .iter()
            .filter(|v| v.at <= t)
            .max_by_key(|v| v.at)
            .map_or(0, |v| v.until)
    }

    /// Its last lease view.
    pub(super) fn last_view(&self) -> u64 {
        self.valid_until_at(NEVER)
    }
}

/// A fenced write the store accepted.
#[derive(Debug)]
pub(super) struct AcceptedWrite {
    pub(super) invoked: u64,
    pub(super) t: u64,
    pub(super) token: u64,
    pub(super) p: String,
}

/// A pause fault: the nemesis stopped process `p` at `stopped` and
/// resumed it at `resumed` ([`NEVER`] if it never did).
#[derive(Debug)]
pub(super) struct Pause {
    pub(super) p: String,
    pub(super) stopped: u64,
    pub(super) resumed: u64,
}

/// A name's kind and capacity, as the nemesis recorded it.
#[derive(Debug)]
pub(super) struct Resource {
    pub(super) kind: String,
    pub(super) capacity: u64,
}

/// Permits on `lock`: an acquire without an answer (it may have taken
/// them), or permits the nemesis gave back.
#[derive(Debug)]
pub(super) struct Permits {
    pub(super) lock: String,
    pub(super) permits: u64,
}

/// An acquire dropped on purpose.
#[derive(Debug)]
pub(super) struct Dropped {
    pub(super) lock: String,
    pub(super) sent: u64,
    pub(super) dropped: u64,
    pub(super) permits: u64,
}

/// A semaphore's count after the run.
#[derive(Debug)]
pub(super) struct FinalCount {
    pub(super) lock: String,
    pub(super) t: u64,
    pub(super) available: i64,
}

/// One acquire from its send to its answer, and whether it was granted.
#[derive(Debug)]
pub(super) struct Span {
    pub(super) p: String,
    pub(super) lock: String,
    pub(super) sent: u64,
    pub(super) ended: u64,
    pub(super) granted: bool,
}

/// An arm (`trySetCount`) of a latch: sent, answered, and whether it set
/// the count (`None`: no answer).
#[derive(Debug)]
pub(super) struct LatchArm {
    pub(super) invoked: u64,
    pub(super) answered: u64,
    pub(super) set: Option<bool>,
}

/// A count-down: sent, answered, and the count it left (`None`: no
/// answer).
#[derive(Debug)]
pub(super) struct LatchCountDown {
    pub(super) invoked: u64,
    pub(super) answered: u64,
    pub(super) left: Option<u64>,
}

/// A wait: sent, returned, by whom, and whether it returned opened
/// (`Some(false)`: timed out; `None`: failed).
#[derive(Debug)]
pub(super) struct LatchWaitCall {
    pub(super) invoked: u64,
    pub(super) returned: u64,
    pub(super) p: String,
    pub(super) opened: Option<bool>,
}

/// A latch's calls.
#[derive(Debug, Default)]
pub(super) struct LatchCalls {
    pub(super) arms: Vec<LatchArm>,
    pub(super) downs: Vec<LatchCountDown>,
    pub(super) waits: Vec<LatchWaitCall>,
}

/// A write sent at `invoked` under the hold `hold` (an index into
/// [`Record::holds`]), for rule 4b.
#[derive(Debug)]
pub(super) struct WriteUnder {
    pub(super) hold: usize,
    pub(super) invoked: u64,
}

/// The last acquire of a (process, name) while it waits for its answer.
struct InFlight {
    sent: u64,
    permits: u64,
    /// Not answered yet.
    open: bool,
}

/// Everything the rules read.
#[derive(Debug, Default)]
pub(super) struct Record {
    pub(super) holds: Vec<Hold>,
    /// Accepted fenced writes by name.
    pub(super) writes: BTreeMap<String, Vec<AcceptedWrite>>,
    /// Every write (whatever its outcome) with the hold it went under,
    /// as that hold stood when the write was recorded.
    pub(super) writes_under: Vec<WriteUnder>,
    /// When each process started and ended.
    pub(super) started: HashMap<String, u64>,
    pub(super) ended: HashMap<String, u64>,
    pub(super) pauses: Vec<Pause>,
    /// Faults that may lose the lock server's data (restart, failover).
    pub(super) data_loss: Vec<Window>,
    /// When acquires of each name were sent, in order.
    pub(super) invokes: HashMap<String, Vec<u64>>,
    /// Each name's kind and capacity (a name without one: a lock).
    pub(super) resources: HashMap<String, Resource>,
    /// Acquires whose outcome is unknown.
    pub(super) uncertain: Vec<Permits>,
    /// Acquires dropped on purpose.
    pub(super) cancelled: Vec<Dropped>,
    /// Faults that can lose a reply: all but kills and pauses of workers.
    pub(super) reply_faults: Vec<Window>,
    /// Permits the nemesis gave back.
    pub(super) reclaimed: Vec<Permits>,
    /// The permits each semaphore had at the end.
    pub(super) finals: Vec<FinalCount>,
    /// Every fault and probe.
    pub(super) windows: Vec<Window>,
    /// Each latch's calls.
    pub(super) latches: BTreeMap<String, LatchCalls>,
    /// When a majority of Redlock's servers was down.
    pub(super) no_quorum: Vec<Window>,
    /// Every acquire's span.
    pub(super) spans: Vec<Span>,
    /// When processes were killed.
    pub(super) kills: Vec<u64>,
}

/// Faults that may lose the lock server's data.
pub(super) fn loses_data(kind: &str) -> bool {
    kind == "restart" || kind == "failover"
}

impl Record {
    /// Reads `events` (in time order), counting the run's figures into
    /// `report` and reporting a failed fault or worker.
    pub(super) fn read(events: &[&Event], report: &mut Report) -> Record {
        let mut r = Record::default();
        // Holds by (process, lock, token): a downgrade's read hold shares
        // its write hold's token, so a key may name two holds; events go
        // to the first one they still apply to (see `find`).
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
        let mut fault_began: HashMap<String, u64> = HashMap::new();
        let mut pending: HashMap<(String, String), InFlight> = HashMap::new();
        for event in events {
            match event {
                Event::Start { t, p, .. } | Event::Spawned { t, p } => {
                    r.started.entry(p.clone()).or_insert(*t);
                }
                Event::Exit { t, p } | Event::Killed { t, p } => {
                    r.ended.entry(p.clone()).or_insert(*t);
                    let killed = matches!(event, Event::Killed { .. });
                    if killed {
                        r.kills.push(*t);
                    }
                    for hold in r.holds.iter_mut().filter(|h| h.p == *p && h.end == NEVER) {
                        hold.end = *t;
                        hold.killed = killed;
                    }
                    // An acquire in flight when its process ended may have
                    // been granted.
                    if killed {
                        for ((q, lock), flight) in pending.iter_mut() {
                            if q == p && flight.open {
                                flight.open = false;
                                r.uncertain.push(Permits {
                                    lock: lock.clone(),
                                    permits: flight.permits,
                                });
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
                    r.resources.insert(
                        lock.clone(),
                        Resource {
                            kind: kind.clone(),
                            capacity: *capacity,
                        },
                    );
                }
                Event::Reclaimed { lock, permits, .. } => r.reclaimed.push(Permits {
                    lock: lock.clone(),
                    permits: *permits,
                }),
                Event::Quorum { t, lost: true } => r.no_quorum.push(Window {
                    began: *t,
                    healed: NEVER,
                }),
                Event::Quorum { t, lost: false } => heal(&mut r.no_quorum, *t, false),
                // A probe stood the worker still: a window for the rules
                // that excuse a disturbed waiter.
                Event::Probe { t, until, .. } => r.windows.push(Window {
                    began: *t,
                    healed: *until,
                }),
                Event::LatchArm {
                    invoked,
                    t,
                    lock,
                    set,
                    ..
                } => r
                    .latches
                    .entry(lock.clone())
                    .or_default()
                    .arms
                    .push(LatchArm {
                        invoked: *invoked,
                        answered: *t,
                        set: *set,
                    }),
                Event::CountDown {
                    invoked,
                    t,
                    lock,
                    left,
                    ..
                } => r
                    .latches
                    .entry(lock.clone())
                    .or_default()
                    .downs
                    .push(LatchCountDown {
                        invoked: *invoked,
                        answered: *t,
                        left: *left,
                    }),
                Event::LatchWait {
                    invoked,
                    t,
                    p,
                    lock,
                    opened,
                } => r
                    .latches
                    .entry(lock.clone())
                    .or_default()
                    .waits
                    .push(LatchWaitCall {
                        invoked: *invoked,
                        returned: *t,
                        p: p.clone(),
                        opened: *opened,
                    }),
                Event::Permits { t, lock, available } => r.finals.push(FinalCount {
                    lock: lock.clone(),
                    t: *t,
                    available: *available,
                }),
                Event::AcquireInvoke {
                    t,
                    p,
                    lock,
                    permits,
                } => {
                    report.acquires += 1;
                    report
                        .per_kind
                        .entry(kind_of(&r.resources, lock))
                        .or_default()
                        .acquires += 1;
                    last_invoke.insert((p.clone(), lock.clone()), *t);
                    pending.insert(
                        (p.clone(), lock.clone()),
                        InFlight {
                            sent: *t,
                            permits: *permits,
                            open: true,
                        },
                    );
                    r.invokes.entry(lock.clone()).or_default().push(*t);
                }
                Event::AcquireFail {
                    t, p, lock, error, ..
                } => {
                    report.indeterminate_acquires += 1;
                    if let Some(flight) = pending.get_mut(&(p.clone(), lock.clone())) {
                        if flight.open {
                            r.spans.push(Span {
                                p: p.clone(),
                                lock: lock.clone(),
                                sent: flight.sent,
                                ended: *t,
                                granted: false,
                            });
                        }
                        // Not granted within the wait: nothing taken.
                        // Dropped on purpose: nothing left behind, if the
                        // reply that undoes a grant could arrive (see
                        // `Accounting`). Any other error: the outcome is
                        // unknown.
                        if flight.open && error == CANCELLED {
                            r.cancelled.push(Dropped {
                                lock: lock.clone(),
                                sent: flight.sent,
                                dropped: *t,
                                permits: flight.permits,
                            });
                        } else if flight.open && !error.starts_with("not granted") {
                            r.uncertain.push(Permits {
                                lock: lock.clone(),
                                permits: flight.permits,
                            });
                        }
                        flight.open = false;
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
                        .entry(kind_of(&r.resources, lock))
                        .or_default()
                        .grants += 1;
                    if let Some(flight) = pending.get_mut(&(p.clone(), lock.clone())) {
                        if flight.open {
                            r.spans.push(Span {
                                p: p.clone(),
                                lock: lock.clone(),
                                sent: flight.sent,
                                ended: *t,
                                granted: true,
                            });
                        }
                        flight.open = false;
                    }
                    let invoked = last_invoke
                        .get(&(p.clone(), lock.clone()))
                        .copied()
                        .unwrap_or(*t);
                    by_key
                        .entry((p.clone(), lock.clone(), *token))
                        .or_default()
                        .push(r.holds.len());
                    r.holds.push(Hold {
                        p: p.clone(),
                        lock: lock.clone(),
                        token: *token,
                        invoked,
                        granted: *t,
                        end: NEVER,
                        valid: vec![LeaseView {
                            at: *t,
                            until: *valid_until,
                        }],
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
                    if let Some(i) = find(&by_key, &r.holds, p, lock, *token, |h| !h.release_sent) {
                        r.holds[i].valid.push(LeaseView {
                            at: *t,
                            until: *valid_until,
                        });
                    }
                }
                Event::Lost {
                    t,
                    p,
                    lock,
                    token,
                    source,
                } => {
                    if let Some(i) = find(&by_key, &r.holds, p, lock, *token, |h| !h.release_sent) {
                        let hold = &mut r.holds[i];
                        // Only while it held: some kinds fire their signal
                        // when a release begins or ends, which is no loss.
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
                            r.writes
                                .entry(lock.clone())
                                .or_default()
                                .push(AcceptedWrite {
                                    invoked: *invoked,
                                    t: *t,
                                    token: *token,
                                    p: p.clone(),
                                });
                        }
                        WriteOutcome::Stale => report.writes_stale += 1,
                        WriteOutcome::Error => report.writes_indeterminate += 1,
                    }
                    if let Some(i) = find(&by_key, &r.holds, p, lock, *token, |h| !h.release_sent) {
                        r.writes_under.push(WriteUnder {
                            hold: i,
                            invoked: *invoked,
                        });
                    }
                }
                Event::ReleaseInvoke { t, p, lock, token } => {
                    if let Some(i) = find(&by_key, &r.holds, p, lock, *token, |h| !h.release_sent) {
                        r.holds[i].end = r.holds[i].end.min(*t);
                        r.holds[i].release_sent = true;
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
                    if let Some(i) =
                        find(&by_key, &r.holds, p, lock, *token, |h| h.release.is_none())
                    {
                        r.holds[i].release = Some(*outcome);
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
                    let open = Window {
                        began: *t,
                        healed: NEVER,
                    };
                    r.windows.push(open);
                    if !matches!(kind.as_str(), "kill" | "pause") {
                        r.reply_faults.push(open);
                    }
                    if *holder {
                        report.holder_faults += 1;
                        if kind == "pause" {
                            report.holder_pauses += 1;
                        }
                    }
                    if kind == "pause" {
                        r.pauses.push(Pause {
                            p: target.clone(),
                            stopped: *t,
                            resumed: NEVER,
                        });
                    }
                    if loses_data(kind) {
                        r.data_loss.push(open);
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
                Event::FaultHeal { t, kind, target } => {
                    heal(&mut r.windows, *t, false);
                    heal(&mut r.reply_faults, *t, false);
                    if loses_data(kind) {
                        heal(&mut r.data_loss, *t, true);
                    }
                    if kind == "pause" {
                        if let Some(pause) = r
                            .pauses
                            .iter_mut()
                            .rev()
                            .find(|pause| pause.p == *target && pause.resumed == NEVER)
                        {
                            pause.resumed = *t;
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
        r
    }
}

pub(super) fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Exclusive => "exclusive",
        Mode::Read => "read",
        Mode::Write => "write",
    }
}

/// The kind of name `lock` (a lock unless its resource says otherwise).
pub(super) fn kind_of(resources: &HashMap<String, Resource>, lock: &str) -> String {
    resources
        .get(lock)
        .map_or_else(|| "lock".to_owned(), |r| r.kind.clone())
}
