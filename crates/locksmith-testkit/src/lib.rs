//! Real `redis-server` processes for locksmith's tests, demo and benchmarks.
//!
//! Every server listens on a free loopback port, keeps no data on disk, and
//! dies with the test process: on `Drop`, and, through the parent-death
//! signal set by `setpriv --pdeathsig`, even if the process aborts.
//!
//! - [`RedisServer`] (`server.rs`): one node that can be restarted, paused
//!   and killed.
#![warn(missing_docs)]

mod process;
mod server;

pub use server::{RedisServer, RedisServerBuilder};
