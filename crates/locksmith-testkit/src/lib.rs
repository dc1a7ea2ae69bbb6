//! Real `redis-server` processes for locksmith's tests, demo and benchmarks.
//!
//! Every server listens on a free loopback port, keeps no data on disk, and
//! dies with the test process: on `Drop`, and, through the parent-death
//! signal set by `setpriv --pdeathsig`, even if the process aborts.
//!
//! - [`RedisServer`] (`server.rs`): one node that can be restarted, paused
//!   and killed.
//! - [`RedisNodes`] (`nodes.rs`): N independent nodes, for Redlock.
//! - [`RedisCluster`] (`cluster.rs`): six nodes in a Redis Cluster, three
//!   primaries with a replica each, with manual and automatic failover (or
//!   the three primaries alone).
//! - [`SentinelGroup`] (`sentinel.rs`): a primary, two replicas and three
//!   Sentinels, with a failover on demand.
//! - [`TlsFiles`] (`tls.rs`): a throwaway CA and certificates for TLS
//!   servers ([`RedisServerBuilder::tls`]) and clients.
//! - [`FaultProxy`] (`proxy.rs`): a TCP proxy in front of any of them that
//!   passes, delays, black-holes or resets traffic on command.
//!
//! Private helpers: `process.rs` spawns children that die with the test
//! process, `admin.rs` asks nodes about their state within bounded waits.
//!
//! Every wait is bounded; a wait that gives up says what state it last saw.
#![warn(missing_docs)]

mod admin;
mod cluster;
mod nodes;
mod process;
mod proxy;
mod redisson;
mod sentinel;
mod server;
mod tls;
mod versions;

pub use cluster::RedisCluster;
pub use nodes::RedisNodes;
pub use proxy::{FaultMode, FaultProxy};
pub use redisson::{Answer, RedissonPeer};
pub use sentinel::SentinelGroup;
pub use server::{RedisServer, RedisServerBuilder, REDIS_SERVER_ENV};
pub use tls::TlsFiles;
pub use versions::{binary, server_id, SERVERS, TEST_SERVER_ENV};
