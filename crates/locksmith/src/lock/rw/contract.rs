//! The contract of `acquire.lua`, written once: a request's KEYS and ARGV
//! as a Rust type that builds the [`Call`], and the reply's status numbers
//! by name. (The release script is sent from one place, `run_release`; its
//! replies are `engine::counted`'s.)

use std::sync::Arc;
use std::time::Duration;

use super::Side;
use crate::engine::batch::{Arg, Call};

/// Status of an `acquire.lua` reply (its first field): `NOW`
/// `{1, token, count}` and `EARLIER` `{2, token, count, pttl}` granted (by
/// this send, or by an earlier one); `BUSY` `{0, pttl, 0}` busy for `pttl`
/// more milliseconds at most; `LOST` `{-1, count-on-server, 0}` the owner's
/// holds were lost; `UPGRADE` `{-3, 0, 0}` a write hold asked by an owner
/// holding read holds (an upgrade, which would deadlock).
pub(super) mod acquired {
    pub(in crate::lock) use crate::engine::acquire::status::{EARLIER, LOST, NOT_NOW as BUSY, NOW};
    /// See the module.
    pub(in crate::lock) const UPGRADE: i64 = -3;
}

/// One `acquire.lua` request: one more read or write hold of `owner`.
pub(super) struct AcquireRequest {
    /// The lock hash.
    pub(super) key: Arc<str>,
    /// The fencing counter.
    pub(super) token_key: Arc<str>,
    /// The waiting writers' claims, `{NAME}:locksmith_writers`.
    pub(super) writers: Arc<str>,
    /// Which hold.
    pub(super) side: Side,
    /// The owner field, `<client-uuid>:<holder-id>`.
    pub(super) owner: Arc<str>,
    /// The holds of that side the owner believes it has before this one.
    pub(super) expected: u32,
    /// The lease to set.
    pub(super) lease: Duration,
    /// This handle prefers writers (its writers claim while they wait).
    pub(super) prefer_writers: bool,
    /// How long this writer's claim lasts unless renewed; `None`: no claim
    /// (a single try, or a reader).
    pub(super) claim: Option<Duration>,
}

impl AcquireRequest {
    /// The request as the script reads it.
    pub(super) fn call(self) -> Call {
        Call::new(
            3,
            [
                Arg::Text(self.key),
                Arg::Text(self.token_key),
                Arg::Text(self.writers),
                Arg::Static(self.side.code()),
                Arg::Text(self.owner),
                Arg::Int(u64::from(self.expected)),
                Arg::Int(self.lease.as_millis() as u64),
                Arg::Static(if self.prefer_writers { "1" } else { "0" }),
                Arg::Int(self.claim.map_or(0, |c| c.as_millis() as u64)),
            ],
        )
    }
}
