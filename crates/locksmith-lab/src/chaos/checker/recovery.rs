//! Rule 5, recovery: after each fault heals, every live worker is granted
//! a lock again within lease + 1 s.

use std::collections::HashMap;
use std::time::Duration;

use super::report::{Report, Violation};
use crate::chaos::history::Event;

/// Rule 5: after each heal, every live worker's next grant.
pub(super) fn recovery(
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
    // Progress: a grant, or a latch call the server answered.
    for e in events {
        match e {
            Event::AcquireOk { t, p, .. }
            | Event::CountDown {
                t,
                p,
                left: Some(_),
                ..
            }
            | Event::LatchWait {
                t,
                p,
                opened: Some(_),
                ..
            } => grants.entry(p.as_str()).or_default().push(*t),
            _ => {}
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
    use super::super::testing::*;

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
}
