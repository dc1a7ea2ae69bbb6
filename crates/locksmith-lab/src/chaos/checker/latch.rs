//! Rule 8, the latch.

use std::time::Duration;

use super::record::{LatchCalls, LatchWaitCall, Window};
use super::report::Violation;

/// How long after the count-down that opened a latch each of its waiters
/// must have been let go.
pub(crate) const LATCH_WAKE: Duration = Duration::from_secs(1);

/// What the latch rule needs of the rest of the run.
pub(super) struct LatchContext<'a> {
    /// Restarts and failovers.
    pub(super) data_loss: &'a [Window],
    /// Faults and probes, stretched by a recovery time.
    pub(super) disturbed: &'a [Window],
    /// When processes were killed.
    pub(super) kills: &'a [u64],
}

impl LatchCalls {
    /// Rule 8, the latch: (a) no waiter is let go before the count reached
    /// zero: a wait that answered "opened" needs `count` count-downs that
    /// may have landed after the last arm that surely set the count before
    /// the wait began (sent before the wait returned, answered after the
    /// arm was sent)
    /// (unless an arm without an answer, or a restart or failover, leaves
    /// the count unknown in between); (b) every waiter is let go within
    /// [`LATCH_WAKE`] after a count-down answered 0 while it waited, unless
    /// the latch was armed again meanwhile or a fault was under way.
    pub(super) fn check(
        &self,
        lock: &str,
        count: u64,
        context: &LatchContext<'_>,
        out: &mut Vec<Violation>,
    ) {
        let LatchContext {
            data_loss,
            disturbed: faults,
            kills,
        } = *context;
        for LatchWaitCall {
            invoked,
            returned,
            p,
            opened,
        } in &self.waits
        {
            if *opened == Some(true) {
                // The last arm that set the count before the wait was sent.
                let Some(armed) = self
                    .arms
                    .iter()
                    .filter(|a| a.set == Some(true) && a.answered < *invoked)
                    .max_by_key(|a| a.answered)
                    .map(|a| a.invoked)
                else {
                    continue;
                };
                // An arm without an answer, or a process killed with a
                // latch call in flight (recorded only once answered), leaves
                // the count unknown.
                let unknown = self
                    .arms
                    .iter()
                    .any(|a| a.set.is_none() && a.invoked > armed && a.invoked < *returned)
                    || kills.iter().any(|&k| k > armed && k < *returned);
                if unknown || Window::any_meets(data_loss, armed, *returned) {
                    continue;
                }
                // A count-down may have reached the server after the arm
                // when it was answered after the arm was sent (requests of
                // two processes can arrive in either order).
                let downs = self
                    .downs
                    .iter()
                    .filter(|d| d.answered >= armed && d.invoked < *returned)
                    .count() as u64;
                if downs < count {
                    out.push(Violation {
                        rule: "latch-early",
                        t: *returned,
                        detail: format!(
                            "{lock:?}: {p}'s wait returned opened after {downs} of {count} count-downs since the latch was armed"
                        ),
                    });
                }
            } else if *opened == Some(false) {
                // A count-down that opened the latch while this one waited.
                let wake = LATCH_WAKE.as_nanos() as u64;
                let Some((sent, zero)) = self
                    .downs
                    .iter()
                    .filter(|d| {
                        d.left == Some(0) && d.answered > *invoked && d.answered + wake < *returned
                    })
                    .min_by_key(|d| d.answered)
                    .map(|d| (d.invoked, d.answered))
                else {
                    continue;
                };
                // Armed again after it opened: the waiter may have seen the
                // new count before the news of the opening.
                let rearmed = self
                    .arms
                    .iter()
                    .any(|a| a.set != Some(false) && a.answered > sent && a.invoked < *returned);
                if rearmed || Window::any_meets(faults, *invoked, *returned) {
                    continue;
                }
                out.push(Violation {
                    rule: "latch-late",
                    t: zero,
                    detail: format!(
                        "{lock:?}: {p}'s wait was not let go within {LATCH_WAKE:?} of the count-down that opened the latch ({:.0} ms later it timed out)",
                        (*returned - zero) as f64 / 1e6
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
    fn a_latch_let_go_early_or_late_is_reported() {
        let arm = |at: u64, set: bool| Event::LatchArm {
            invoked: at * MS,
            t: (at + 1) * MS,
            p: s("w1"),
            lock: s("l"),
            set: Some(set),
        };
        let down = |at: u64, left: u64| Event::CountDown {
            invoked: at * MS,
            t: (at + 1) * MS,
            p: s("w1"),
            lock: s("l"),
            left: Some(left),
        };
        let wait = |from: u64, to: u64, opened: bool| Event::LatchWait {
            invoked: from * MS,
            t: to * MS,
            p: s("w2"),
            lock: s("l"),
            opened: Some(opened),
        };
        let mut base = starts();
        base.push(resource("l", "latch", 2));
        base.push(arm(100, true));
        // Opened after both count-downs: fine.
        let mut ok = base.clone();
        ok.extend([wait(110, 300, true), down(150, 1), down(250, 0)]);
        assert!(rules(&ok).is_empty(), "{:?}", rules(&ok));
        // Opened after one: early.
        let mut early = base.clone();
        early.extend([wait(110, 300, true), down(150, 1)]);
        assert_eq!(rules(&early), ["latch-early"]);
        // Not excused by count-downs before the arm that set the count.
        let mut stale = starts();
        stale.push(resource("l", "latch", 2));
        stale.extend([down(10, 1), down(20, 0), arm(100, true)]);
        stale.extend([wait(110, 300, true), down(150, 1)]);
        assert_eq!(rules(&stale), ["latch-early"]);
        // Still waiting 1.3 s after the count-down that opened it: late.
        let mut late = base.clone();
        late.extend([wait(110, 1610, false), down(150, 1), down(200, 0)]);
        assert_eq!(rules(&late), ["latch-late"]);
        // Unless it was armed again meanwhile.
        let mut rearmed = late.clone();
        rearmed.push(Event::LatchArm {
            invoked: 205 * MS,
            t: 206 * MS,
            p: s("w1"),
            lock: s("l"),
            set: Some(true),
        });
        assert!(rules(&rearmed).is_empty(), "{:?}", rules(&rearmed));
    }
}
