//! The semaphore family: [`counting`] (Redisson's `RSemaphore`, a number of
//! permits) and [`expirable`] (`RPermitExpirableSemaphore`, permits with
//! ids and leases).

mod counting;
mod expirable;

pub use counting::{Semaphore, SemaphorePermits};
pub use expirable::{ExpirableSemaphore, Permit};

use counting::wake_for_permits;

/// The channel a semaphore's permit changes are announced on (the message
/// is the new number of available permits): Redisson's `redisson_sc:{NAME}`.
pub(crate) fn semaphore_channel(name: &str) -> String {
    crate::engine::keys::prefixed("redisson_sc", name)
}

#[cfg(test)]
mod tests {
    #[test]
    fn redisson_names() {
        assert_eq!(super::semaphore_channel("db"), "redisson_sc:{db}");
    }
}
