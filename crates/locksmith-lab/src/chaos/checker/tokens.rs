//! Rules 1 and 2, fencing tokens: grants get tokens in order, and the
//! fenced store never accepts a token lower than one it accepted before.

use super::record::{AcceptedWrite, Hold};
use super::report::Violation;
use crate::chaos::history::Mode;

/// Rule 1, by a sweep: grants in completion order against grants in
/// invocation order. A read may have the same token as an earlier grant.
pub(super) fn token_order(lock: &str, holds: &[&Hold], out: &mut Vec<Violation>) {
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
            // A read may share the token of the grant before it (readers
            // joining a read hold, or its writer's downgrade): a read never
            // writes with its token. Anything else needs a larger one.
            if b.token > g.token || b.token == g.token && g.mode != Mode::Read {
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
pub(super) fn stale_writes(lock: &str, writes: &[AcceptedWrite], out: &mut Vec<Violation>) {
    let mut done: Vec<&AcceptedWrite> = writes.iter().collect();
    done.sort_by_key(|w| w.t);
    let mut asked: Vec<&AcceptedWrite> = writes.iter().collect();
    asked.sort_by_key(|w| w.invoked);
    let (mut i, mut best) = (0, None::<&AcceptedWrite>);
    for w in asked {
        while i < done.len() && done[i].t < w.invoked {
            if best.is_none_or(|b| done[i].token > b.token) {
                best = Some(done[i]);
            }
            i += 1;
        }
        if let Some(b) = best {
            if b.token > w.token {
                out.push(Violation {
                    rule: "stale-write",
                    t: w.t,
                    detail: format!(
                        "{lock:?}: the store accepted token {} from {} after accepting token {} from {}",
                        w.token, w.p, b.token, b.p
                    ),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;

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
}
