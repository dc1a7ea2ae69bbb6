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

/// The error an acquire is recorded with when the worker dropped its
/// future on purpose (the cancel-safety promise: nothing is left behind).
pub(crate) const CANCELLED: &str = "cancelled: the acquire's future was dropped";

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

/// How a hold holds its name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Mode {
    /// Alone (a lock), or as one of at most the name's capacity (permits).
    #[default]
    Exclusive,
    /// A read hold: beside other reads, never beside another owner's write.
    Read,
    /// A write hold: beside nothing of another owner.
    Write,
}

fn one() -> u64 {
    1
}

fn yes() -> bool {
    true
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
    /// The nemesis started a worker process (live from here).
    Spawned { t: u64, p: String },
    /// What a name is: its kind (`lock`, `fair-lock`, `read-write`,
    /// `semaphore`, `permit-semaphore`, `latch`, `redlock`) and capacity
    /// (holders at once; a semaphore's permits; a latch's count). Recorded by the nemesis at the start; a name
    /// without one is an exclusive lock.
    Resource {
        t: u64,
        lock: String,
        kind: String,
        capacity: u64,
    },
    /// An acquire was sent (for `permits` permits).
    AcquireInvoke {
        t: u64,
        p: String,
        lock: String,
        #[serde(default = "one")]
        permits: u64,
    },
    /// An acquire was granted; `valid_until` is the holder's own view of
    /// its lease end (monotonic clock; `u64::MAX` for a hold without a
    /// lease). `token` is the fencing token when `fenced`, else an id of
    /// the hold unique in its process. A `downgrade` is a read hold its
    /// owner took while holding the write hold.
    AcquireOk {
        t: u64,
        p: String,
        lock: String,
        token: u64,
        valid_until: u64,
        #[serde(default)]
        mode: Mode,
        #[serde(default = "one")]
        permits: u64,
        #[serde(default = "yes")]
        fenced: bool,
        #[serde(default)]
        downgrade: bool,
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
    /// The holder learned its lease was lost: `source` is `signal` (the
    /// lost signal fired) or `poll` (`is_lost` said so before a write or
    /// the release).
    Lost {
        t: u64,
        p: String,
        lock: String,
        token: u64,
        source: String,
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
    /// The nemesis began a fault; `holder`: the target process held a lock
    /// when it was hit (kill, pause), checked while it was frozen.
    FaultStart {
        t: u64,
        kind: String,
        target: String,
        #[serde(default)]
        holder: bool,
    },
    /// A fault could not be injected or did not heal: the run is invalid.
    FaultFailed { t: u64, kind: String, error: String },
    /// A worker process ended with an error (not killed by the nemesis).
    WorkerFailed { t: u64, p: String, status: String },
    /// A latch was armed if it was not (`try_set_count`) at `invoked`;
    /// `set`: whether this call set it (`None`: no answer).
    LatchArm {
        invoked: u64,
        t: u64,
        p: String,
        lock: String,
        set: Option<bool>,
    },
    /// A latch count-down sent at `invoked`; `left`: the count it answered
    /// (`None`: no answer, the outcome is unknown).
    CountDown {
        invoked: u64,
        t: u64,
        p: String,
        lock: String,
        left: Option<u64>,
    },
    /// A bounded latch wait sent at `invoked`; `opened`: whether the latch
    /// opened within it (`None`: an error).
    LatchWait {
        invoked: u64,
        t: u64,
        p: String,
        lock: String,
        opened: Option<bool>,
    },
    /// The nemesis froze worker `p` from `t` to `until` to look whether it
    /// held a lock (a probe before a kill or pause), and let it go: not a
    /// fault, but the worker stood still meanwhile.
    Probe { t: u64, p: String, until: u64 },
    /// Redlock's servers: a majority is down from here (`lost`) or a
    /// majority is up again (`!lost`). Recorded inside a node fault's
    /// window: after the last server of the majority stopped, before the
    /// first came back.
    Quorum { t: u64, lost: bool },
    /// The nemesis gave back `permits` permits of a semaphore whose holder
    /// it killed (a counting semaphore has no lease to end them).
    Reclaimed { t: u64, lock: String, permits: u64 },
    /// After the run (every worker gone, every lease over): the permits a
    /// semaphore had available.
    Permits {
        t: u64,
        lock: String,
        available: i64,
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
            | Event::Spawned { t, .. }
            | Event::FaultFailed { t, .. }
            | Event::WorkerFailed { t, .. }
            | Event::AcquireInvoke { t, .. }
            | Event::AcquireOk { t, .. }
            | Event::AcquireFail { t, .. }
            | Event::Valid { t, .. }
            | Event::Write { t, .. }
            | Event::Lost { t, .. }
            | Event::ReleaseInvoke { t, .. }
            | Event::ReleaseDone { t, .. }
            | Event::FaultStart { t, .. }
            | Event::Resource { t, .. }
            | Event::LatchArm { t, .. }
            | Event::Probe { t, .. }
            | Event::Quorum { t, .. }
            | Event::CountDown { t, .. }
            | Event::LatchWait { t, .. }
            | Event::Reclaimed { t, .. }
            | Event::Permits { t, .. }
            | Event::FaultHeal { t, .. } => *t,
        }
    }
}

/// Reads a history file (JSON lines). A torn last line (a process killed
/// mid-write) is skipped; any other line that does not parse is an error.
pub(crate) fn read(path: &std::path::Path) -> std::io::Result<Vec<Event>> {
    let text = std::fs::read_to_string(path)?;
    let lines: Vec<&str> = text.lines().collect();
    let mut events = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        match serde_json::from_str(line) {
            Ok(event) => events.push(event),
            Err(_) if i + 1 == lines.len() => {}
            Err(e) => {
                return Err(std::io::Error::other(format!(
                    "{}:{}: {e}",
                    path.display(),
                    i + 1
                )))
            }
        }
    }
    Ok(events)
}
