//! The contract of `acquire.lua`, written once: a request's KEYS and ARGV
//! as a Rust type that builds the [`Call`], and the reply's status numbers
//! by name. (The release and leave scripts are each sent from one place,
//! `release_call` and `leave`; their replies are `engine::counted`'s.)

use std::sync::Arc;
use std::time::Duration;

use crate::engine::batch::{Arg, Call};

/// Status of an `acquire.lua` reply (its first field): `NOW`
/// `{1, token, count}` and `EARLIER` `{2, token, count, pttl}` granted (by
/// this send, or by an earlier one); `QUEUED` `{0, wait, position}` queued
/// at `position` (0-based; -1 for a single try, which does not join), to
/// look again within `wait` ms even without a message; `LOST`
/// `{-1, count-on-server, 0}` the owner's holds were lost.
pub(super) mod acquired {
    pub(in crate::lock) use crate::engine::acquire::status::{
        EARLIER, LOST, NOT_NOW as QUEUED, NOW,
    };
}

/// One `acquire.lua` request: one more hold of `owner`, in arrival order.
pub(super) struct AcquireRequest {
    /// The lock hash.
    pub(super) key: Arc<str>,
    /// The queue list, `redisson_lock_queue:{NAME}`.
    pub(super) queue: Arc<str>,
    /// The queue's give-up times, `redisson_lock_timeout:{NAME}`.
    pub(super) timeouts: Arc<str>,
    /// The fencing counter.
    pub(super) token_key: Arc<str>,
    /// locksmith's own queued owners' give-up times,
    /// `{NAME}:locksmith_give_up`.
    pub(super) ours: Arc<str>,
    /// The lease to set.
    pub(super) lease: Duration,
    /// The owner field, `<client-uuid>:<holder-id>`.
    pub(super) owner: Arc<str>,
    /// The holds the owner believes it has before this one.
    pub(super) expected: u32,
    /// How long the owner may stay queued without asking again before it
    /// counts as gone; zero: a single try that does not join the queue.
    pub(super) patience: Duration,
    /// The queue step (Redisson's `fairLockWaitTimeout`, see
    /// `FairLock::with_queue_step`).
    pub(super) step: Duration,
}

impl AcquireRequest {
    /// The request as the script reads it.
    pub(super) fn call(self) -> Call {
        Call::new(
            5,
            [
                Arg::Text(self.key),
                Arg::Text(self.queue),
                Arg::Text(self.timeouts),
                Arg::Text(self.token_key),
                Arg::Text(self.ours),
                Arg::Int(self.lease.as_millis() as u64),
                Arg::Text(self.owner),
                Arg::Int(u64::from(self.expected)),
                Arg::Int(self.patience.as_millis() as u64),
                Arg::Int(self.step.as_millis() as u64),
            ],
        )
    }
}
