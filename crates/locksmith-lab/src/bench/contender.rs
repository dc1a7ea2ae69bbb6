//! The two lock libraries under test behind one face, so every workload
//! runs the same code for both.

use std::time::Duration;

/// Lease/TTL for rslock: long enough never to expire during a phase, so
/// its numbers measure locking, not expiry.
const RSLOCK_TTL: Duration = Duration::from_secs(30);

/// A lock library, connected to the benchmark's Redis.
#[derive(Clone)]
pub(crate) enum Contender {
    /// locksmith with default options (watchdog lease, pub/sub waits).
    Locksmith(locksmith::Client),
    /// locksmith's fair lock (first come, first served).
    LocksmithFair(locksmith::Client),
    /// rslock with its defaults (single server, 3 tries, 0..200 ms random
    /// back-off, looping in `acquire`).
    Rslock(rslock::LockManager),
    /// rslock over several servers (its Redlock).
    RslockRedlock(rslock::LockManager),
    /// The `redisson` crate's async reentrant lock, default options.
    RedissonCrate(std::sync::Arc<redisson::AsyncRedissonClient>),
    /// locksmith's Redlock over several servers.
    Redlock(locksmith::RedlockNodes),
    /// A locksmith MultiLock of [`MULTI_MEMBERS`] locks per handle; `true`:
    /// their names share a hash tag (one slot), `false`: spread.
    Multi(locksmith::Client, bool),
}

/// Locks per MultiLock in the benchmark.
pub(crate) const MULTI_MEMBERS: usize = 4;

impl std::fmt::Debug for Contender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

impl Contender {
    /// The library's name, for the report.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Contender::Locksmith(_) => "locksmith",
            Contender::LocksmithFair(_) => "locksmith fair",
            Contender::Rslock(_) => "rslock",
            Contender::RslockRedlock(_) => "rslock redlock",
            Contender::RedissonCrate(_) => "redisson crate",
            Contender::Redlock(_) => "locksmith redlock",
            Contender::Multi(_, true) => "multilock same slot",
            Contender::Multi(_, false) => "multilock spread",
        }
    }

    /// Whether the library sends SET itself to lock (rslock's `SET NX
    /// PX`); the others' SETs run inside their scripts.
    pub(crate) fn sends_sets(&self) -> bool {
        matches!(self, Contender::Rslock(_) | Contender::RslockRedlock(_))
    }

    /// A handle on lock `key` with an owner of its own (one per task, as an
    /// application would have).
    pub(crate) fn handle(&self, key: &str) -> Result<Handle, String> {
        Ok(match self {
            Contender::Locksmith(client) => {
                Handle::Locksmith(client.lock(key).map_err(|e| e.to_string())?)
            }
            Contender::LocksmithFair(client) => {
                Handle::Fair(client.fair_lock(key).map_err(|e| e.to_string())?)
            }
            Contender::Rslock(manager) | Contender::RslockRedlock(manager) => {
                Handle::Rslock(manager.clone(), key.to_owned())
            }
            Contender::Redlock(nodes) => {
                Handle::Redlock(nodes.lock(key).map_err(|e| e.to_string())?)
            }
            Contender::RedissonCrate(client) => Handle::RedissonCrate(client.get_lock(key)),
            Contender::Multi(client, same_slot) => {
                let names = (0..MULTI_MEMBERS).map(|i| {
                    if *same_slot {
                        format!("{{{key}}}:{i}")
                    } else {
                        format!("{key}:{i}")
                    }
                });
                Handle::Multi(client.multi_lock(names).map_err(|e| e.to_string())?)
            }
        })
    }
}

/// One owner's handle on one lock.
pub(crate) enum Handle {
    /// A locksmith lock handle.
    Locksmith(locksmith::Lock),
    /// A locksmith fair lock handle.
    Fair(locksmith::FairLock),
    /// rslock has no handle type; the manager and the key stand in for it.
    Rslock(rslock::LockManager, String),
    /// A locksmith Redlock handle.
    Redlock(locksmith::Redlock),
    /// A locksmith MultiLock.
    Multi(locksmith::MultiLock),
    /// A `redisson` crate lock (it keeps its hold state in the handle).
    RedissonCrate(redisson::AsyncRLock),
}

/// A held lock of either library.
pub(crate) enum Held {
    /// A locksmith guard.
    Locksmith(locksmith::LockGuard),
    /// An rslock grant.
    Rslock(rslock::Lock),
    /// A locksmith Redlock guard.
    Redlock(locksmith::RedlockGuard),
    /// A locksmith MultiLock guard.
    Multi(locksmith::MultiGuard),
    /// A `redisson` crate hold (released through its handle).
    RedissonCrate,
}

impl Handle {
    /// Waits until the lock is acquired.
    pub(crate) async fn acquire(&self) -> Result<Held, String> {
        match self {
            Handle::Locksmith(lock) => lock
                .lock()
                .await
                .map(Held::Locksmith)
                .map_err(|e| e.to_string()),
            Handle::Fair(lock) => lock
                .lock()
                .await
                .map(Held::Locksmith)
                .map_err(|e| e.to_string()),
            Handle::Rslock(manager, key) => manager
                .acquire_no_guard(key.as_str(), RSLOCK_TTL)
                .await
                .map(Held::Rslock)
                .map_err(|e| e.to_string()),
            Handle::Redlock(lock) => lock
                .lock()
                .await
                .map(Held::Redlock)
                .map_err(|e| e.to_string()),
            Handle::Multi(lock) => lock
                .lock()
                .await
                .map(Held::Multi)
                .map_err(|e| e.to_string()),
            Handle::RedissonCrate(lock) => lock
                .lock()
                .await
                .map(|()| Held::RedissonCrate)
                .map_err(|e| e.to_string()),
        }
    }

    /// Releases a lock acquired through this handle.
    pub(crate) async fn release(&self, held: Held) -> Result<(), String> {
        match (self, held) {
            (Handle::Locksmith(_) | Handle::Fair(_), Held::Locksmith(guard)) => {
                guard.release().await.map_err(|e| e.to_string())
            }
            (Handle::Rslock(manager, _), Held::Rslock(lock)) => {
                // rslock's unlock is best effort and reports nothing.
                manager.unlock(&lock).await;
                Ok(())
            }
            (Handle::Redlock(_), Held::Redlock(guard)) => {
                guard.release().await.map_err(|e| e.to_string())
            }
            (Handle::Multi(_), Held::Multi(guard)) => {
                guard.release().await.map_err(|e| e.to_string())
            }
            // Its unlock answers `false` for a full release too (its script
            // returns the holds left, 0, which the crate reads as "not
            // released"), so only an error counts.
            (Handle::RedissonCrate(lock), Held::RedissonCrate) => {
                lock.unlock().await.map(drop).map_err(|e| e.to_string())
            }
            _ => Err("released through the wrong library".into()),
        }
    }
}
