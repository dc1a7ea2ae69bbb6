//! The library's integration tests, all in one test binary: it is linked
//! once instead of once per file, its tests run concurrently, and the
//! shared Sentinel group and cluster that the topology-parametrized tests
//! use (see `common::on_every_topology!`) start once.
//!
//! A test that needs the whole process to itself (a global metrics
//! recorder or tracing subscriber, a child that is killed) re-runs this
//! binary filtered to itself: see `common::in_own_process`.

#[path = "../common/mod.rs"]
mod common;

mod at_most_once;
mod bad_input;
mod batch_pass;
mod blocking;
mod cancel;
mod cancel_family;
mod client;
mod close;
mod credentials;
mod cross_slot;
mod examples;
mod expirable;
mod extend;
mod failed_release;
mod fair;
mod fault;
mod fenced;
mod future_sizes;
mod handoff;
mod ids;
mod key_prefix;
mod latch;
mod local_lease;
mod lock;
mod metrics_counts;
mod multi;
mod own_client;
mod per_slot_calls;
mod process;
mod protocol;
mod pubsub;
mod redisson;
mod redisson_java;
mod redlock;
mod release_answers;
mod release_gaps;
mod replica_acks;
mod resharding;
mod resilience;
mod runtimes;
mod rw;
mod semaphore;
mod sentinel_auth;
mod shared_handle;
mod simple;
mod stale_guard;
mod tls;
mod topology;
mod tracing_spans;
