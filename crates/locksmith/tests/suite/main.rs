//! The lock suite in one test binary, so the shared Sentinel group and
//! cluster that its topology-parametrized tests use (see
//! `common::on_every_topology!`) start once.

#[path = "../common/mod.rs"]
mod common;

mod cancel;
mod cancel_family;
mod expirable;
mod fair;
mod fenced;
mod handoff;
mod latch;
mod lock;
mod multi;
mod redisson;
mod rw;
mod semaphore;
