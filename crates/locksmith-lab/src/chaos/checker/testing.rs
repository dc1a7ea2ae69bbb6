//! What the checker's tests share: histories written by hand (a hold, a
//! fault, the processes' starts) and the rules a history breaks. Each
//! rule's tests sit beside it; the tests of the whole are here.

pub(super) use std::time::Duration;

pub(super) use super::check;
pub(super) use crate::chaos::history::{Event, Mode, ReleaseOutcome, WriteOutcome, CANCELLED};

pub(super) const MS: u64 = 1_000_000;

pub(super) const LEASE: Duration = Duration::from_millis(1000);

pub(super) fn s(x: &str) -> String {
    x.to_owned()
}

/// A complete, correct hold of `lock` by `p` from `at` (ms) for 50 ms.
pub(super) fn hold(
    p: &str,
    lock: &str,
    token: u64,
    at: u64,
    release: ReleaseOutcome,
) -> Vec<Event> {
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

pub(super) fn starts() -> Vec<Event> {
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

pub(super) fn rules(events: &[Event]) -> Vec<&'static str> {
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

pub(super) fn fault(t: u64, kind: &str, heal: u64) -> Vec<Event> {
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
pub(super) fn hold_as(
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

pub(super) fn resource(lock: &str, kind: &str, capacity: u64) -> Event {
    Event::Resource {
        t: 0,
        lock: s(lock),
        kind: s(kind),
        capacity,
    }
}
