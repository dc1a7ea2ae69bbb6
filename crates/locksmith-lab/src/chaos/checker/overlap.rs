//! Rule 3, overlap: no grant inside another hold of the same name that
//! the server still kept, by the name's kind (a lock, a read-write lock, a
//! semaphore's capacity), unless a restart or failover wiped the earlier
//! hold.

use super::record::mode_name;
use super::record::{Hold, Window};
use super::report::Violation;
use crate::chaos::history::{Mode, ReleaseOutcome};

/// What tells a hold the lock server lost (rule 3) from one it kept.
pub(super) struct Wipes<'a> {
    /// Each restart or failover.
    pub(super) faults: &'a [Window],
    /// When the lock's acquires were sent, in order.
    pub(super) invokes: &'a [u64],
    /// Processes in the run: each may have had one acquire in flight
    /// before the earlier hold's acquire was sent.
    pub(super) processes: u64,
}

impl Wipes<'_> {
    /// True when `later`'s grant shows `earlier` was wiped: a data-losing
    /// fault was under way between `earlier`'s send and `later`'s grant,
    /// and the token jumped by more than the grants possible in between
    /// (every acquire sent meanwhile, plus one in flight per process).
    fn wiped(&self, earlier: &Hold, later: &Hold) -> bool {
        let (from, to) = (earlier.invoked, later.granted);
        let under_way = Window::any_meets(self.faults, from, to);
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
pub(super) fn overlaps(
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
                .map(|w| w.began)
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

#[cfg(test)]
mod tests {
    use super::super::testing::*;

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
}
