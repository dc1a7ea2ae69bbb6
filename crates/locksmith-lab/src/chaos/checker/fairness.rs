//! Rule 7, first come, first served (fair locks).

use std::time::Duration;

use super::record::{Hold, Window};
use super::report::Violation;

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
pub(super) fn first_come_first_served(
    lock: &str,
    holds: &[&Hold],
    faults: &[Window],
    out: &mut Vec<Violation>,
) {
    let slack = QUEUE_SLACK.as_nanos() as u64;
    for a in holds {
        let disturbed = Window::any_meets(faults, a.invoked, a.granted);
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

#[cfg(test)]
mod tests {
    use super::super::testing::*;

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
}
