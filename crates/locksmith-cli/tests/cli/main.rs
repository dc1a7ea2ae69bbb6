//! The `locksmith` command's tests, in one test binary (linked once; its
//! tests run concurrently): each module drives the built binary against
//! testkit servers.

#[path = "../common/mod.rs"]
mod common;

mod admin;
mod bad_input;
mod completions;
mod cron_example;
mod ids;
mod kinds;
mod latch;
mod list;
mod redisson;
mod redlock;
mod run;
mod semaphore;
mod tls;
mod topologies;
mod watch;
