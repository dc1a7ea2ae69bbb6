//! The lock family, one folder per kind: [`reentrant`] (Redisson's
//! `RLock`, the lock every other kind borrows its hold state from),
//! [`fair`], [`rw`], [`simple`], [`multi`] and [`redlock`].
//! The counted kinds (reentrant, fair, read-write) share the engine's
//! acquire and release cores (`engine::acquire`, `engine::counted`).

mod fair;
mod multi;
mod redlock;
mod reentrant;
mod rw;
mod simple;

pub use fair::{FairLock, FairLockInfo};
pub use multi::{Member, MultiGuard, MultiLock};
pub use redlock::{Redlock, RedlockGuard, RedlockNodes};
pub use reentrant::{Lock, LockGuard, LockInfo};
pub use rw::{ReadWriteLock, ReadWriteLockInfo};
pub use simple::SimpleLock;

use reentrant::{force_unlock, key_exists, NEXT_HOLDER_ID};

use crate::engine::keys::prefixed;

/// The pub/sub channel a lock's release is announced on (Redisson's
/// `redisson_lock__channel:{NAME}`; the fair lock derives its own channels
/// from it).
pub(crate) fn lock_channel(name: &str) -> String {
    prefixed("redisson_lock__channel", name)
}

/// The fencing counter of a lock, incremented on every grant from free
/// (the key Redisson's fenced lock counts in).
pub(crate) fn lock_token(name: &str) -> String {
    prefixed("redisson_lock_token", name)
}

/// The message a final release publishes (Redisson's `UNLOCK_MESSAGE`).
pub(crate) const UNLOCK_MESSAGE: &str = "0";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redisson_names() {
        assert_eq!(lock_channel("orders"), "redisson_lock__channel:{orders}");
        assert_eq!(lock_token("orders"), "redisson_lock_token:{orders}");
        assert_eq!(lock_channel("a{b}c"), "redisson_lock__channel:a{b}c");
    }
}
