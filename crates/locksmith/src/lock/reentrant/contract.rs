//! The contracts of `acquire.lua` and `release.lua`, written once: each
//! request's KEYS and ARGV as a Rust type that builds the [`Call`], and
//! each reply's status numbers by name. The reentrant lock and Redlock
//! (whose nodes keep the same hash) both send these scripts through them;
//! a layout change is one edit here and one in the `.lua` beside it.

use std::sync::Arc;
use std::time::Duration;

use crate::engine::batch::{Arg, Call};

/// Status of an `acquire.lua` reply (its first field): `NOW`
/// `{1, token, count}` and `EARLIER` `{2, token, count, pttl}` granted (by
/// this send, or by an earlier one with `pttl` left of the lease); `BUSY`
/// `{0, pttl, 0}` held by another owner for `pttl` more milliseconds;
/// anything else (`{-1, count-on-server, 0}`) the owner's holds were lost.
pub(in crate::lock) mod acquired {
    pub(in crate::lock) use crate::engine::acquire::status::{EARLIER, NOT_NOW as BUSY, NOW};
}

/// One `acquire.lua` request: one more hold of `owner` on `key`.
pub(in crate::lock) struct AcquireRequest {
    /// The lock hash.
    pub(in crate::lock) key: Arc<str>,
    /// The fencing counter.
    pub(in crate::lock) token_key: Arc<str>,
    /// The lease to set.
    pub(in crate::lock) lease: Duration,
    /// The owner field, `<client-uuid>:<holder-id>`.
    pub(in crate::lock) owner: Arc<str>,
    /// The holds the owner believes it has before this one.
    pub(in crate::lock) expected: u32,
}

impl AcquireRequest {
    /// The request as the script reads it.
    pub(in crate::lock) fn call(self) -> Call {
        Call::new(
            2,
            [
                Arg::Text(self.key),
                Arg::Text(self.token_key),
                Arg::Int(self.lease.as_millis() as u64),
                Arg::Text(self.owner),
                Arg::Int(u64::from(self.expected)),
            ],
        )
    }
}

/// Who a final release hands the lock to (a waiter of the same client).
pub(in crate::lock) struct Successor {
    /// The successor's owner field.
    pub(in crate::lock) owner: Arc<str>,
    /// The lease it is granted.
    pub(in crate::lock) lease: Duration,
    /// Hand off only while no other client listens on the channel.
    pub(in crate::lock) if_alone: bool,
}

/// How a release is announced: `release.lua`'s mode argument.
#[derive(Clone, Copy)]
pub(in crate::lock) enum Announce {
    /// As the client's notify mode says (`p`, `s` or `b`).
    Mode(&'static str),
    /// Not at all (`n`): the undo of a grant nobody saw.
    Silently,
}

/// One `release.lua` request: one hold of `owner` on `key` released.
pub(in crate::lock) struct ReleaseRequest {
    /// The lock hash.
    pub(in crate::lock) key: Arc<str>,
    /// Its release channel.
    pub(in crate::lock) channel: Arc<str>,
    /// The fencing counter (a hand-off increments it).
    pub(in crate::lock) token_key: Arc<str>,
    /// The lease remaining holds are re-armed to.
    pub(in crate::lock) lease: Duration,
    /// The owner field.
    pub(in crate::lock) owner: Arc<str>,
    /// The holds the owner believes it has before this release.
    pub(in crate::lock) expected: u32,
    /// A waiter the freed lock goes to directly, if any.
    pub(in crate::lock) successor: Option<Successor>,
    /// How a final release is announced.
    pub(in crate::lock) announce: Announce,
    /// The hold's episode (locksmith's own id of it; 0 for none).
    pub(in crate::lock) episode: u64,
    /// How long a final release's receipt stays, in ms (0: none).
    pub(in crate::lock) receipt_ttl_ms: u64,
}

impl ReleaseRequest {
    /// The request as the script reads it.
    pub(in crate::lock) fn call(self) -> Call {
        let (successor, successor_lease, if_alone) = match self.successor {
            Some(s) => (Arg::Text(s.owner), s.lease.as_millis() as u64, s.if_alone),
            None => (Arg::Static(""), 0, false),
        };
        Call::new(
            3,
            [
                Arg::Text(self.key),
                Arg::Text(self.channel),
                Arg::Text(self.token_key),
                Arg::Int(self.lease.as_millis() as u64),
                Arg::Text(self.owner),
                Arg::Int(u64::from(self.expected)),
                Arg::Static(crate::lock::UNLOCK_MESSAGE),
                successor,
                Arg::Int(successor_lease),
                Arg::Static(if if_alone { "1" } else { "0" }),
                Arg::Static(match self.announce {
                    Announce::Mode(mode) => mode,
                    Announce::Silently => "n",
                }),
                Arg::Int(self.episode),
                Arg::Int(self.receipt_ttl_ms),
            ],
        )
    }
}
