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
}

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
        }
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
            Contender::Rslock(manager) => Handle::Rslock(manager.clone(), key.to_owned()),
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
}

/// A held lock of either library.
pub(crate) enum Held {
    /// A locksmith guard.
    Locksmith(locksmith::LockGuard),
    /// An rslock grant.
    Rslock(rslock::Lock),
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
            _ => Err("released through the wrong library".into()),
        }
    }
}
