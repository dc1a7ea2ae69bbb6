//! The history a chaos run records: one JSON object per line, from every
//! worker process and from the nemesis, merged by time.
//!
//! Times are `CLOCK_MONOTONIC` nanoseconds, one clock for every process on
//! the machine, so events of different processes order in real time.

use serde::{Deserialize, Serialize};

/// Nanoseconds on the machine-wide monotonic clock.
pub(crate) fn now() -> u64 {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map(|t| {
            u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000_000
                + u64::try_from(t.tv_nsec()).unwrap_or(0)
        })
        .unwrap_or(0)
}

/// What a write to the fenced store came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum WriteOutcome {
    /// The store took it.
    Accepted,
    /// The store refused it: a larger token had written.
    Stale,
    /// No answer or another error: indeterminate.
    Error,
}

/// What a release came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ReleaseOutcome {
    /// Released: the server confirms the hold was there.
    Ok,
    /// The server says the hold was gone (lost).
    NotHeld,
    /// No answer or another error: indeterminate.
    Error,
}

/// One recorded event. `p` is the process (a worker generation, `w2.1`, or
/// `nemesis`), `t` when the event happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Event {
    /// A worker process started, with its lock client's id.
    Start { t: u64, p: String, client: String },
    /// A worker process ended by itself.
    Exit { t: u64, p: String },
    /// The nemesis killed a worker process (its holds end here).
    Killed { t: u64, p: String },
    /// An acquire was sent.
    AcquireInvoke { t: u64, p: String, lock: String },
    /// An acquire was granted; `valid_until` is the holder's own view of
    /// its lease end (monotonic clock).
    AcquireOk {
        t: u64,
        p: String,
        lock: String,
        token: u64,
        valid_until: u64,
    },
    /// An acquire timed out, was refused or failed: indeterminate.
    AcquireFail {
        t: u64,
        p: String,
        lock: String,
        error: String,
    },
    /// The holder's view of its lease end, refreshed during the hold.
    Valid {
        t: u64,
        p: String,
        lock: String,
        token: u64,
        valid_until: u64,
    },
    /// A write to the lock's fenced store, sent at `invoked`, answered at `t`.
    Write {
        invoked: u64,
        t: u64,
        p: String,
        lock: String,
        token: u64,
        outcome: WriteOutcome,
    },
    /// The holder's lost signal fired (or `is_lost` said so).
    Lost {
        t: u64,
        p: String,
        lock: String,
        token: u64,
    },
    /// A release was sent.
    ReleaseInvoke {
        t: u64,
        p: String,
        lock: String,
        token: u64,
    },
    /// A release was answered.
    ReleaseDone {
        t: u64,
        p: String,
        lock: String,
        token: u64,
        outcome: ReleaseOutcome,
    },
    /// The nemesis began a fault.
    FaultStart {
        t: u64,
        kind: String,
        target: String,
    },
    /// The fault healed: every live worker must acquire again within
    /// lease + 1 s from here.
    FaultHeal {
        t: u64,
        kind: String,
        target: String,
    },
}

impl Event {
    /// When the event happened.
    pub(crate) fn t(&self) -> u64 {
        match self {
            Event::Start { t, .. }
            | Event::Exit { t, .. }
            | Event::Killed { t, .. }
            | Event::AcquireInvoke { t, .. }
            | Event::AcquireOk { t, .. }
            | Event::AcquireFail { t, .. }
            | Event::Valid { t, .. }
            | Event::Write { t, .. }
            | Event::Lost { t, .. }
            | Event::ReleaseInvoke { t, .. }
            | Event::ReleaseDone { t, .. }
            | Event::FaultStart { t, .. }
            | Event::FaultHeal { t, .. } => *t,
        }
    }
}

/// Reads a history file (JSON lines); a torn last line (a process killed
/// mid-write) is skipped.
pub(crate) fn read(path: &std::path::Path) -> std::io::Result<Vec<Event>> {
    let text = std::fs::read_to_string(path)?;
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}
