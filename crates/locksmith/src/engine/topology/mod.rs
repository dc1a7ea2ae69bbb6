//! Where a [`Client`](crate::Client) sends its commands: one server, the
//! primary a group of Redis Sentinels names, or a Redis Cluster.
//!
//! Everything above this module talks to a [`Conn`]: a cheap clone of one
//! shared multiplexed connection that implements redis-rs's
//! `ConnectionLike`, so the batchers, the watchdog and every primitive work
//! the same on all three. What differs lives here:
//!
//! - **Single**: redis-rs's `ConnectionManager` (reconnects by itself).
//! - **Sentinel**: a `ConnectionManager` to the primary the Sentinels name
//!   (redis-rs's `SentinelClient` does the asking). A failover shows up as a
//!   dropped connection or a `READONLY` answer from the demoted primary;
//!   either makes the connection ask the Sentinels again and, if they name
//!   another primary, switch to it and bump an epoch that the notify hub
//!   watches (its pub/sub connection must follow too).
//! - **Cluster**: redis-rs's async `ClusterConnection`, which routes each
//!   command by its first key's slot and follows `MOVED`/`ASK` and slot
//!   migrations itself. Every key of one primitive shares a slot (see
//!   `keys.rs`), so a script never fails with `CROSSSLOT`.
//!
//! One file per job: `address.rs` (the URL forms), this file (the
//! connection every caller uses, and the single server), `sentinel.rs`,
//! `cluster.rs` (each behind its cargo feature) and `probe.rs` (the
//! checks of a first connection).

mod address;
#[cfg(feature = "cluster")]
mod cluster;
mod probe;
#[cfg(feature = "sentinel")]
mod sentinel;

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::engine::conn::Timing;
use crate::engine::security::Security;
use crate::engine::slot::Slot;
use crate::error::{Error, Result};

pub(crate) use address::Address;
#[cfg(feature = "cluster")]
pub(crate) use cluster::{cluster_client, did_not_run, ClusterConn};
pub(crate) use probe::{
    check_deployment, explain_connect, replica_acks, server_identity, server_version,
    sharded_pubsub,
};
#[cfg(feature = "sentinel")]
pub(crate) use sentinel::SentinelConn;

/// The command connection of a client, whatever the topology. Cheap to
/// clone: clones share one multiplexed connection.
#[derive(Clone)]
pub(crate) enum Conn {
    /// One server.
    Single(ConnectionManager),
    /// The primary named by Sentinels, followed across failovers.
    #[cfg(feature = "sentinel")]
    Sentinel(SentinelConn),
    /// A Redis Cluster.
    #[cfg(feature = "cluster")]
    Cluster(ClusterConn),
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Conn::Single(_) => "Conn::Single",
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(_) => "Conn::Sentinel",
            #[cfg(feature = "cluster")]
            Conn::Cluster(_) => "Conn::Cluster",
        })
    }
}

crate::engine::conn::connection_like!(Conn {
    command(this, cmd) => match this {
        Conn::Single(c) => c.req_packed_command(cmd),
        #[cfg(feature = "sentinel")]
        Conn::Sentinel(c) => c.req_packed_command(cmd),
        #[cfg(feature = "cluster")]
        Conn::Cluster(c) => c.req_packed_command(cmd),
    },
    pipeline(this, pipeline, offset, count) => match this {
        Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
        #[cfg(feature = "sentinel")]
        Conn::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
        #[cfg(feature = "cluster")]
        Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
    },
    db(this) => match this {
        Conn::Single(c) => c.get_db(),
        #[cfg(feature = "sentinel")]
        Conn::Sentinel(c) => c.get_db(),
        #[cfg(feature = "cluster")]
        Conn::Cluster(c) => c.get_db(),
    },
});

impl Conn {
    /// The same connection for a call that is not idempotent (one that
    /// adds or subtracts): no layer may send it twice. On a
    /// single server and behind Sentinel every connection already answers
    /// a lost reply with an error and resends nothing; on a cluster this
    /// is the connection that never resends (see [`ClusterConn`]).
    pub(crate) fn at_most_once(&self) -> Conn {
        match self {
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => Conn::Cluster(c.at_most_once()),
            other => other.clone(),
        }
    }

    /// Stops what the connection runs in the background for itself (the
    /// Sentinel watcher), when the client closes.
    pub(crate) fn close(&self) {
        match self {
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(c) => c.close(),
            _ => {}
        }
    }

    /// True for a Redis Cluster: script calls and renewals must be grouped
    /// by slot.
    pub(crate) fn is_cluster(&self) -> bool {
        match self {
            #[cfg(feature = "cluster")]
            Conn::Cluster(_) => true,
            _ => false,
        }
    }

    /// The group a key's script calls go in: its slot on a cluster, one
    /// group otherwise.
    pub(crate) fn group_of(&self, key: &str) -> Option<Slot> {
        self.is_cluster().then(|| Slot::for_key(key))
    }

    /// Where a batcher queues a key's requests (see [`Destination`]).
    #[cfg_attr(not(feature = "cluster"), allow(unused_variables))]
    pub(crate) fn destination_of(&self, key: &str) -> Destination {
        match self {
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => {
                let slot = Slot::for_key(key);
                match c.node_of(slot) {
                    Some(node) => Destination::Node(node),
                    None => Destination::Slot(slot),
                }
            }
            _ => Destination::One,
        }
    }

    /// True when `e` proves a call on this connection did not run, so it
    /// may be sent again: a cluster's redirects and refusals (see
    /// [`ClusterConn`]); never elsewhere.
    pub(crate) fn proves_not_run(&self, e: &redis::RedisError) -> bool {
        match self {
            #[cfg(feature = "cluster")]
            Conn::Cluster(_) => did_not_run(e),
            _ => {
                let _ = e;
                false
            }
        }
    }

    /// The cluster connection, on a cluster.
    #[cfg(feature = "cluster")]
    pub(crate) fn cluster(&self) -> Option<&ClusterConn> {
        match self {
            Conn::Cluster(c) => Some(c),
            _ => None,
        }
    }
}

/// Where a batcher queues a key's requests: one queue on a single server
/// or behind Sentinel; on a cluster, the queue of the primary serving the
/// key's slot (requests of several slots travel together, see
/// `engine::nodes`), or of the slot itself while that is not known.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Destination {
    /// The one server.
    One,
    /// A cluster primary, as `host:port`.
    #[cfg(feature = "cluster")]
    Node(std::sync::Arc<str>),
    /// A cluster slot whose primary is not known yet.
    #[cfg(feature = "cluster")]
    Slot(Slot),
}

/// Connects to `address`; the first connection must succeed within about
/// one connect timeout.
/// `key_prefix` is the client's (see `ClientBuilder::key_prefix`): on a
/// cluster, the keys the connection makes up itself start with it too.
#[cfg_attr(not(feature = "cluster"), allow(unused_variables))]
pub(crate) async fn connect(
    address: &Address,
    timing: Timing,
    security: &Security,
    key_prefix: &str,
) -> Result<Conn> {
    let describe = address.describe();
    let fail = |source: redis::RedisError| Error::Connect {
        addr: describe.clone(),
        source,
    };
    let limit = timing.connect * 2;
    let work = async {
        match address {
            Address::Single(url) => {
                let client = security.client(url)?;
                let conn = ConnectionManager::new_with_config(
                    client,
                    security.manager_config(manager_config(timing)),
                )
                .await
                .map_err(fail)?;
                Ok(Conn::Single(conn))
            }
            #[cfg(feature = "sentinel")]
            Address::Sentinel { .. } => SentinelConn::connect(address, timing, security)
                .await
                .map(Conn::Sentinel),
            #[cfg(feature = "cluster")]
            Address::Cluster { seeds } => {
                ClusterConn::connect(seeds, timing, security, key_prefix, fail)
                    .await
                    .map(Conn::Cluster)
            }
            // A form this build left out: `Address::parse` refuses it
            // first, naming the cargo feature.
            #[allow(unreachable_patterns)]
            _ => Err(address.unsupported()),
        }
    };
    match tokio::time::timeout(limit, work).await {
        Ok(result) => result,
        Err(_) => Err(Error::Connect {
            source: redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no connection within {limit:?}"),
            )),
            addr: address.describe(),
        }),
    }
}

pub(crate) fn manager_config(timing: Timing) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timing.connect))
        .set_response_timeout(Some(timing.command))
        .set_number_of_retries(2)
        .set_max_delay(Duration::from_millis(500))
}
