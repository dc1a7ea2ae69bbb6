//! Rule 6, permits accounted for after the run.

use super::record::{Dropped, Hold, Permits, Record, Window};
use super::report::{PermitsLine, Violation};
use crate::chaos::history::ReleaseOutcome;

/// What the history says about a semaphore's permits after the run.
pub(super) struct Accounting<'a> {
    pub(super) holds: &'a [Hold],
    /// Acquires whose outcome is unknown.
    pub(super) uncertain: &'a [Permits],
    /// Acquires dropped on purpose.
    pub(super) cancelled: &'a [Dropped],
    /// Faults that can lose a reply.
    pub(super) reply_faults: &'a [Window],
    /// Permits the nemesis gave back.
    pub(super) reclaimed: &'a [Permits],
    pub(super) data_loss: &'a [Window],
}

impl<'a> Accounting<'a> {
    /// The facts of `record` the rule reads.
    pub(super) fn of(record: &'a Record) -> Self {
        Accounting {
            holds: &record.holds,
            uncertain: &record.uncertain,
            cancelled: &record.cancelled,
            reply_faults: &record.reply_faults,
            reclaimed: &record.reclaimed,
            data_loss: &record.data_loss,
        }
    }
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
    pub(super) fn check(
        &self,
        lock: &str,
        kind: &str,
        capacity: u64,
        t: u64,
        available: i64,
    ) -> PermitsLine {
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
            for u in self.uncertain.iter().filter(|u| u.lock == lock) {
                low -= u.permits as i64;
            }
            // A dropped acquire leaves nothing behind: its grant, if one
            // landed, is given back when the reply arrives. Only a fault
            // that may have lost that reply leaves it open.
            for c in self.cancelled.iter().filter(|c| c.lock == lock) {
                // The undo waits for the reply: up to a command timeout
                // after the drop (a second, with room).
                let faulted =
                    Window::any_meets(self.reply_faults, c.sent, c.dropped + 1_000_000_000);
                if faulted {
                    low -= c.permits as i64;
                }
            }
            for r in self.reclaimed.iter().filter(|r| r.lock == lock) {
                low += r.permits as i64;
                high += r.permits as i64;
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

#[cfg(test)]
mod tests {
    use super::super::testing::*;

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
