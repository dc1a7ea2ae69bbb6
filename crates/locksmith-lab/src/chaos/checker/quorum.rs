//! Rule 9, Redlock without a quorum.

use std::time::Duration;

use super::record::{Span, Window};
use super::report::Violation;

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
pub(super) fn quorum(spans: &[Span], faults: &[Window], out: &mut Vec<Violation>) {
    let bound = NO_QUORUM_ANSWER.as_nanos() as u64;
    // A round sent just before the majority went down may have had its
    // grants and be answered up to a per-node timeout later.
    let round = ROUND_SLACK.as_nanos() as u64;
    for Span {
        p,
        lock,
        sent,
        ended,
        granted,
    } in spans
    {
        let Some(healed) = faults
            .iter()
            .find(|w| (w.began < *sent || w.began + round < *ended) && *sent < w.healed)
            .map(|w| w.healed)
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

#[cfg(test)]
mod tests {
    use super::super::testing::*;

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
}
