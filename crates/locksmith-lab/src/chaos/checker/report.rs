//! What the checker reports: the run's figures and every violation.

use std::collections::BTreeMap;

use serde::Serialize;

/// One broken promise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Violation {
    /// Which rule: `token-order`, `stale-write`, `overlap`,
    /// `unsignalled-loss`, `write-after-expiry`, `no-recovery`,
    /// `permits-accounting`, `fifo`, `latch-early`, `latch-late`,
    /// `grant-without-quorum`, `no-quorum-hang`; and `fault-failed`,
    /// `worker-failed` for a run that proves less than it claims.
    pub(crate) rule: &'static str,
    /// When (monotonic ns) the offending event happened.
    pub(crate) t: u64,
    /// What happened, for a reader.
    pub(crate) detail: String,
}

/// What the checker found, and the run's figures.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Report {
    /// Events in the history.
    pub(crate) events: usize,
    /// Acquires sent.
    pub(crate) acquires: usize,
    /// Grants.
    pub(crate) grants: usize,
    /// Acquires that timed out, were refused or failed.
    pub(crate) indeterminate_acquires: usize,
    /// Fenced writes accepted / refused as stale / without an answer.
    pub(crate) writes_accepted: usize,
    pub(crate) writes_stale: usize,
    pub(crate) writes_indeterminate: usize,
    /// Holds whose holder heard its lost signal while it held.
    pub(crate) losses_signalled: usize,
    /// Holds whose holder learned of a loss while it held (signal, or
    /// `is_lost` before a write or the release).
    pub(crate) losses_noticed: usize,
    /// Releases the server answered "not held".
    pub(crate) releases_not_held: usize,
    /// Faults begun, by kind.
    pub(crate) faults: BTreeMap<String, usize>,
    /// Longest time from a fault healing to the last live worker's next
    /// grant, in milliseconds.
    pub(crate) longest_recovery_ms: u64,
    /// Longest time from a fault's start to its heal, by kind, in
    /// milliseconds (how long the nemesis kept the system impaired).
    pub(crate) longest_fault_ms: BTreeMap<String, u64>,
    /// Kill and pause faults whose target held a lock when hit.
    pub(crate) holder_faults: usize,
    /// Of those, the pauses.
    pub(crate) holder_pauses: usize,
    /// Fault heals whose recovery window was checked / skipped (another
    /// fault inside it, or the run ended first).
    pub(crate) recoveries_checked: usize,
    pub(crate) recoveries_skipped: usize,
    /// Acquires, grants and violations by kind of name.
    pub(crate) per_kind: BTreeMap<String, KindFigures>,
    /// Each semaphore's permits accounted for after the run.
    pub(crate) permits: Vec<PermitsLine>,
    /// Every violation found.
    pub(crate) violations: Vec<Violation>,
}

/// One kind's figures.
#[derive(Debug, Default, Serialize)]
pub(crate) struct KindFigures {
    pub(crate) acquires: usize,
    pub(crate) grants: usize,
    pub(crate) violations: usize,
}

/// A semaphore's permits after the run against what its history allows.
#[derive(Debug, Serialize)]
pub(crate) struct PermitsLine {
    pub(crate) lock: String,
    pub(crate) kind: String,
    pub(crate) capacity: u64,
    /// Permits available after the run.
    pub(crate) available: i64,
    /// What the history allows: `[low, high]`, or `None` when a restart
    /// or failover may have wiped the semaphore (its count is then
    /// whatever the first call after it made it).
    pub(crate) expected: Option<(i64, i64)>,
    #[serde(skip)]
    pub(super) violation: Option<Violation>,
}
