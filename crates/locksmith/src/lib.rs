//! # locksmith
//!
//! Distributed synchronization for Rust services on Redis: reentrant locks
//! with leases, a watchdog and fencing tokens, compatible with Redisson's
//! data layout so Rust and Java services can share one lock.
//!
//! Map of the crate: one folder per primitive, holding its Rust, its Lua
//! scripts (KEYS/ARGV contract at the top of each) and its tests; the
//! machinery they share in `engine/`, which names no primitive.
//! - [`Client`] / [`ClientBuilder`] (`client.rs`): the connection, identity
//!   and defaults every primitive is made from.
//! - [`Error`] / [`ErrorKind`] (`error.rs`): the one error type.
//! - `lock/`: [`Lock`] / [`LockGuard`] (`lock/reentrant/`), the reentrant
//!   lock; [`FairLock`] (`lock/fair/`), first come, first served;
//!   [`ReadWriteLock`] (`lock/rw/`), shared readers or one writer;
//!   [`SimpleLock`] (`lock/simple/`), the `SET NX PX` lock; [`MultiLock`]
//!   (`lock/multi/`), several locks all or nothing; [`RedlockNodes`] /
//!   [`Redlock`] (`lock/redlock/`), one lock over N independent primaries,
//!   held on a majority.
//! - `semaphore/`: [`Semaphore`] / [`SemaphorePermits`]
//!   (`semaphore/counting/`); [`ExpirableSemaphore`] / [`Permit`]
//!   (`semaphore/expirable/`): permits with ids and leases.
//! - [`CountDownLatch`] (`latch/`), [`IdGenerator`] (`id/`),
//!   [`FencedStore`] (`fenced/`): a value that refuses stale fencing tokens.
//! - `blocking` (`blocking.rs`, cargo feature `blocking`): the primitives
//!   for code that is not async, over the same implementation.
//! - `scripts.rs`: the catalogue of every script with the preludes it
//!   declares ([`script_source`] reads one).
//! - `engine/`: `conn.rs` (the connection layer's leaf types, and the
//!   macro through which our connection types implement redis-rs's
//!   `ConnectionLike`),
//!   `topology/` (one file per job: `address.rs` the URL forms, `mod.rs`
//!   the connection every caller uses and the single server,
//!   `sentinel.rs`, `cluster.rs`, `probe.rs` the checks at connect),
//!   `slot.rs` (grouping by cluster slot),
//!   `security.rs` (TLS, credentials), `batch.rs` (coalesced script
//!   calls, grouped by node on a cluster; `nodes.rs`: which node serves
//!   which slot), `acquire.rs` (one acquire request:
//!   send, resend, undo; the wait entry; the three wait methods),
//!   `undo.rs` (undo on drop, after the request it follows settled),
//!   `wait.rs` (the one wait loop every waiting primitive uses),
//!   `counted.rs` (a counted hold and the release core), `guard_core.rs`
//!   (the hold core every guard wraps: release on drop, token, lease view,
//!   metrics),
//!   `notify.rs` + `subscriber.rs` (one pub/sub connection per client,
//!   waiter queues and wake policies), `renewal.rs` (the watchdog),
//!   `lease.rs` (the lease view and [`LostSignal`]), `task.rs`
//!   (background tasks), `observe.rs` (metrics and tracing), `keys.rs`
//!   (Redisson-compatible names), `validate.rs` (input checks) and
//!   `lua.rs` (script composition: preludes, SHA, `NOSCRIPT`).
//!
//! # Cargo features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `tls` | yes | `rediss://` URLs, and the TLS options of [`ClientBuilder`] ([`ClientBuilder::tls`], CA and client certificates; refused at `build()` without the feature); rustls with ring, which builds C code |
//! | `cluster` | yes | `redis+cluster://` URLs: Redis Cluster |
//! | `sentinel` | yes | `redis+sentinel://` URLs: a primary named by Sentinels |
//! | `blocking` | no | `locksmith::blocking`: the primitives for code that is not async |
//! | `macros` | no | `#[locked(..)]`, re-exported from redis-locksmith-macros |
//!
//! The defaults accept every URL form. A service on one plain server can
//! build with `default-features = false` (80 crates in the dependency
//! tree instead of 92); a URL whose form the build left out is refused
//! by [`ClientBuilder::build`] with [`ErrorKind::InvalidArgument`] and a
//! message naming the feature.
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "blocking")]
#[cfg_attr(docsrs, doc(cfg(feature = "blocking")))]
pub mod blocking;
mod client;
mod engine;
mod error;
mod fenced;
mod id;
mod latch;
mod lock;
mod scripts;
mod semaphore;

pub use client::{Client, ClientBuilder, Connection, Topology};
pub use engine::conn::NotifyMode;
pub use engine::lease::LostSignal;
pub use engine::security::{Credentials, CredentialsFuture, CredentialsProvider};
pub use error::{Error, ErrorKind, Result};
pub use fenced::FencedStore;
pub use id::IdGenerator;
pub use latch::CountDownLatch;
pub use lock::{
    FairLock, FairLockInfo, Lock, LockGuard, LockInfo, Member, MultiGuard, MultiLock,
    ReadWriteLock, ReadWriteLockInfo, Redlock, RedlockGuard, RedlockNodes, SimpleLock,
};
pub use scripts::{script_names, script_source};
pub use semaphore::{ExpirableSemaphore, Permit, Semaphore, SemaphorePermits};

/// `#[locked("name {arg}", client = .., wait = "2s")]`: hold a lock for
/// the body of an async fn (cargo feature `macros`). See
/// [redis-locksmith-macros](https://docs.rs/redis-locksmith-macros).
#[cfg(feature = "macros")]
#[cfg_attr(docsrs, doc(cfg(feature = "macros")))]
pub use locksmith_macros::locked;

/// The README's examples, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// Guides, from the repository's `docs/` folder.
pub mod guides {
    #[doc = include_str!("../docs/locks.md")]
    pub mod locks {}
    #[doc = include_str!("../docs/primitives.md")]
    pub mod primitives {}
    #[doc = include_str!("../docs/safety.md")]
    pub mod safety {}
    #[doc = include_str!("../docs/redisson.md")]
    pub mod redisson {}
    #[doc = include_str!("../docs/topologies.md")]
    pub mod topologies {}
    #[doc = include_str!("../docs/performance.md")]
    pub mod performance {}
    #[doc = include_str!("../docs/operations.md")]
    pub mod operations {}
}
