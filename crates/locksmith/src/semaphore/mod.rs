//! The semaphore family: [`counting`] (Redisson's `RSemaphore`, a number of
//! permits) and [`expirable`] (`RPermitExpirableSemaphore`, permits with
//! ids and leases).

mod counting;
mod expirable;

pub use counting::{Semaphore, SemaphorePermits};
pub use expirable::{ExpirableSemaphore, Permit};

use counting::wake_for_permits;
