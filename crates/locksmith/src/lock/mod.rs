//! The lock family, one folder per kind: [`reentrant`] (Redisson's
//! `RLock`, the lock every other kind borrows its hold state from),
//! [`fair`], [`rw`], [`simple`], [`multi`] and [`redlock`].
//! The counted kinds (reentrant, fair, read-write) share the engine's
//! acquire and release cores (`engine::acquire`, `engine::hold`).

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

use reentrant::{force_unlock, key_exists, release, NEXT_HOLDER_ID};
