//! The lock family, one folder per kind: [`reentrant`] (Redisson's
//! `RLock`, the lock every other kind borrows its hold state from),
//! [`fair`], [`rw`], [`simple`], [`multi`] and [`redlock`]. `attempt.rs`
//! is the acquire request the owner-based kinds (fair, read-write) share.

mod attempt;
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

use reentrant::{force_unlock, key_exists, release, HoldState, NEXT_HOLDER_ID};
