//! # locksmith
//!
//! Distributed synchronization for Rust services on Redis: reentrant locks
//! with leases, a watchdog and fencing tokens, compatible with Redisson's
//! data layout so Rust and Java services can share one lock.
//!
//! Map of the crate:
//! - [`Client`] / [`ClientBuilder`] (`client.rs`): the connection, identity
//!   and defaults every primitive is made from.
//! - [`Error`] / [`ErrorKind`] (`error.rs`): the one error type.
//! - [`Lock`] / [`LockGuard`] (`lock/`): the reentrant lock, and
//!   [`SimpleLock`], the `SET NX PX` lock; [`FairLock`] (`lock/fair.rs`),
//!   first come, first served; [`ReadWriteLock`] (`lock/rw.rs`), shared
//!   readers or one writer; [`MultiLock`] (`lock/multi.rs`), several
//!   locks all or nothing.
//! - [`Semaphore`] / [`SemaphorePermits`] (`semaphore/`): the counting
//!   semaphore; [`ExpirableSemaphore`] / [`Permit`]: permits with ids and
//!   leases.
//! - [`CountDownLatch`] (`latch.rs`): the count-down latch.
//! - [`RedlockNodes`] / [`Redlock`] (`redlock.rs`): one lock over N
//!   independent primaries, held on a majority.
//! - [`IdGenerator`] (`id.rs`): unique, time-ordered 64-bit ids.
//! - [`FencedStore`] (`fenced.rs`): a value that refuses stale fencing
//!   tokens.
//! - [`LostSignal`] (`lease.rs`): what a holder knows about its lease.
//! - `blocking` (`blocking.rs`, cargo feature `blocking`): the primitives
//!   for code that is not async, over the same implementation.
//! - `topology.rs`: the command connection for a single server, a
//!   Sentinel-managed primary or a Redis Cluster, and the URL forms.
//! - `batch.rs`: coalesces concurrent script calls (per slot on a cluster).
//! - `notify.rs`: one pub/sub connection per client, waiter queues and
//!   their wake policies (one, all, as many as permits allow);
//!   `subscriber.rs`: that connection on each topology (classic or sharded
//!   pub/sub).
//! - `renewal.rs`: the watchdog, one batched renewal task per client.
//! - `observe.rs`: the metrics and tracing every primitive reports.
//! - `keys.rs`: Redisson-compatible key and channel names.
//! - `scripts/`: the Lua scripts, KEYS/ARGV contract at the top of each.
//! - `validate.rs`: the checks every call runs on its input.
#![warn(missing_docs)]

mod batch;
#[cfg(feature = "blocking")]
pub mod blocking;
mod client;
mod error;
mod fenced;
mod id;
mod keys;
mod latch;
mod lease;
mod lock;
mod notify;
mod observe;
mod redlock;
mod renewal;
mod scripts;
mod semaphore;
mod subscriber;
mod task;
mod topology;
mod validate;

pub use client::{Client, ClientBuilder, Connection, NotifyMode, Topology};
pub use error::{Error, ErrorKind, Result};
pub use fenced::FencedStore;
pub use id::IdGenerator;
pub use latch::CountDownLatch;
pub use lease::LostSignal;
pub use lock::{
    FairLock, FairLockInfo, Lock, LockGuard, LockInfo, Member, MultiGuard, MultiLock,
    ReadWriteLock, ReadWriteLockInfo, SimpleLock,
};
pub use redlock::{Redlock, RedlockGuard, RedlockNodes};
pub use semaphore::{ExpirableSemaphore, Permit, Semaphore, SemaphorePermits};

/// Guides, from the repository's `docs/` folder.
pub mod guides {
    #[doc = include_str!("../../../docs/locks.md")]
    pub mod locks {}
    #[doc = include_str!("../../../docs/primitives.md")]
    pub mod primitives {}
    #[doc = include_str!("../../../docs/safety.md")]
    pub mod safety {}
    #[doc = include_str!("../../../docs/redisson.md")]
    pub mod redisson {}
    #[doc = include_str!("../../../docs/topologies.md")]
    pub mod topologies {}
    #[doc = include_str!("../../../docs/performance.md")]
    pub mod performance {}
    #[doc = include_str!("../../../docs/operations.md")]
    pub mod operations {}
}
