//! Rule 4, lost signals: a holder still holding when its own lease view
//! ends hears its lost signal by then (or right after being resumed), and
//! no write goes out after its lease view ended unless it had been told.

use std::time::Duration;

use super::record::{Hold, Pause, WriteUnder};
use super::report::Violation;

/// How late after its lease view ended a lost signal may be recorded
/// (timer resolution, scheduling on a loaded machine, the record itself).
pub(crate) const SIGNAL_SLACK: Duration = Duration::from_millis(250);

/// Rule 4b: no write goes out after its holder's lease view ended unless
/// the holder had been told. (A view or loss recorded after the write was
/// sent does not count: both are read as of its send.)
pub(super) fn writes_after_expiry(holds: &[Hold], writes: &[WriteUnder], out: &mut Vec<Violation>) {
    for &WriteUnder { hold, invoked } in writes {
        let hold = &holds[hold];
        let until = hold.valid_until_at(invoked);
        let told = hold.lost.is_some_and(|l| l <= invoked);
        if invoked > until && !told {
            out.push(Violation {
                rule: "write-after-expiry",
                t: invoked,
                detail: format!(
                    "{} wrote {:?} with token {} {:.1} ms after its lease view ended, without a lost signal",
                    hold.p,
                    hold.lock,
                    hold.token,
                    (invoked - until) as f64 / 1e6
                ),
            });
        }
    }
}

/// Rule 4a: a holder still holding when its lease view ends hears its
/// lost signal within [`SIGNAL_SLACK`] (of its resumption, if the nemesis
/// had it stopped across that instant).
pub(super) fn unsignalled_losses(
    holds: &[Hold],
    pauses: &[Pause],
    history_end: u64,
    out: &mut Vec<Violation>,
) {
    let slack = SIGNAL_SLACK.as_nanos() as u64;
    for hold in holds {
        let view = hold.last_view();
        if hold.end <= view || view == 0 || view > history_end {
            continue;
        }
        let resumed = pauses
            .iter()
            .filter(|pause| pause.p == hold.p && pause.stopped <= view)
            .map(|pause| pause.resumed)
            .find(|resumed| *resumed >= view);
        let limit = resumed.unwrap_or(view).saturating_add(slack);
        // A hold that ended before the limit proves nothing either way
        // (its watcher stops with the release).
        if limit > history_end || hold.end < limit {
            continue;
        }
        if hold.signalled.is_none_or(|s| s > limit) {
            out.push(Violation {
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
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

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
}
