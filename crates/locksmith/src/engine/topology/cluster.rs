//! Redis Cluster (cargo feature `cluster`): the cluster clients, and
//! [`ClusterConn`], whose at-most-once connection follows redirects itself
//! so a call that is not idempotent is never sent twice.

use std::sync::Arc;
use std::time::Duration;

use crate::engine::slot::Slot;
use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, Value};

use crate::engine::conn::Timing;
use crate::engine::nodes::{self, Across, NodeMap};
use crate::engine::security::{is_tls_url, redact, Security};
use crate::error::{Error, Result};

/// The cluster client for `seeds`; with `push`, a RESP3 client that
/// delivers pub/sub messages there.
pub(crate) fn cluster_client(
    seeds: &[String],
    timing: Timing,
    push: Option<tokio::sync::mpsc::UnboundedSender<redis::PushInfo>>,
    security: &Security,
) -> Result<redis::cluster::ClusterClient> {
    cluster_client_with(seeds, timing, push, CLUSTER_RETRIES, security)
}

/// How often the cluster connection for idempotent calls resends a
/// command (after a redirect, a dropped connection, ...).
const CLUSTER_RETRIES: u32 = 3;

/// [`cluster_client`] with `retries` resends per command. redis-rs counts
/// redirects (`MOVED`, `ASK`) against the same budget as resends after a
/// lost reply, so the connection for calls that are not idempotent has 0
/// and [`ClusterConn`] follows redirects itself.
fn cluster_client_with(
    seeds: &[String],
    timing: Timing,
    push: Option<tokio::sync::mpsc::UnboundedSender<redis::PushInfo>>,
    retries: u32,
    security: &Security,
) -> Result<redis::cluster::ClusterClient> {
    let mut builder = security
        .cluster_base(seeds)
        .connection_timeout(timing.connect)
        .response_timeout(timing.command)
        .retries(retries)
        .min_retry_wait(20)
        .max_retry_wait(500);
    if let Some(tx) = push {
        builder = builder
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(tx);
    }
    security
        .cluster(builder, seeds.iter().any(|s| is_tls_url(s)))
        .build()
        .map_err(|e| {
            let seeds: Vec<String> = seeds.iter().map(|s| redact(s)).collect();
            Error::invalid(format!("bad cluster seed list {seeds:?}: {e}"))
        })
}

/// A Redis Cluster, through two connections: one that resends a command
/// whose reply was lost (redis-rs's own retries, fine for idempotent
/// calls), and one that never does, for calls that must run at most once.
/// The second still follows the cluster's redirects: `MOVED`, `ASK`,
/// `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `READONLY` and a refused
/// connection all say the command did not run, so sending it again (to the
/// node named, after `ASKING` for `ASK`) cannot apply it twice; a dropped
/// connection or a timeout says nothing of the kind and is answered as an
/// error.
#[derive(Clone)]
pub(crate) struct ClusterConn {
    /// redis-rs's retries on: for idempotent calls.
    retrying: ClusterConnection,
    /// No retries: for calls that must not run twice.
    once: ClusterConnection,
    /// Which of the two this handle sends on.
    at_most_once: bool,
    /// Which node serves which slot, for grouping calls by node.
    nodes: Arc<NodeMap>,
    /// Whether one call may carry several slots' requests, and the keys
    /// such calls probe.
    across: Arc<Across>,
}

/// Sends per at-most-once command: the first, then redirects followed.
const ONCE_SENDS: u32 = 6;

/// What an error says about a command sent on the at-most-once
/// connection: `None` when it may have run (or failed for good), otherwise
/// where to send it again.
fn not_run(e: &redis::RedisError) -> Option<Option<(String, u16)>> {
    use redis::{ErrorKind, ServerErrorKind};
    match e.kind() {
        ErrorKind::Server(ServerErrorKind::Ask) => {
            let (addr, _slot) = e.redirect_node()?;
            let (host, port) = addr.rsplit_once(':')?;
            Some(Some((host.to_owned(), port.parse().ok()?)))
        }
        ErrorKind::Server(
            ServerErrorKind::Moved
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ReadOnly,
        ) => Some(None),
        // An ASK to a node this connection has no link to yet (a node
        // that owns no slot before the migration): nothing was sent; the
        // next send asks the source again until the migration is over.
        ErrorKind::ClusterConnectionNotFound => Some(None),
        _ if e.is_connection_refusal() => Some(None),
        _ => None,
    }
}

/// True when `e` proves a command sent to a cluster did not run (a
/// redirect, a refusal, a node not served yet; see [`ClusterConn`]).
pub(crate) fn did_not_run(e: &redis::RedisError) -> bool {
    not_run(e).is_some()
}

impl ClusterConn {
    /// Connects to the cluster seeded by `seeds`: both connections, and
    /// a first load of the slot map in the background.
    pub(crate) async fn connect(
        seeds: &[String],
        timing: Timing,
        security: &Security,
        key_prefix: &str,
        fail: impl Fn(redis::RedisError) -> Error,
    ) -> Result<ClusterConn> {
        let retrying = cluster_client(seeds, timing, None, security)?
            .get_async_connection()
            .await
            .map_err(&fail)?;
        let once = cluster_client_with(seeds, timing, None, 0, security)?
            .get_async_connection()
            .await
            .map_err(&fail)?;
        let conn = ClusterConn {
            retrying,
            once,
            at_most_once: false,
            nodes: Arc::default(),
            across: Arc::new(Across::new(key_prefix)),
        };
        conn.refresh_nodes();
        Ok(conn)
    }

    /// The same cluster through the connection that never resends.
    pub(crate) fn at_most_once(&self) -> ClusterConn {
        ClusterConn {
            at_most_once: true,
            ..self.clone()
        }
    }

    /// The primary serving `slot` as this client last saw it (see
    /// `engine::nodes`); reloads the view in the background when it is
    /// old.
    pub(crate) fn node_of(&self, slot: Slot) -> Option<Arc<str>> {
        if self.nodes.older_than(nodes::REFRESH_EVERY) {
            self.refresh_nodes();
        }
        self.nodes.node_of(slot)
    }

    /// Whether one batch call may carry the requests of several slots
    /// served by one node, with `across` (a batch script's cross-slot
    /// variant, flagged `allow-cross-slot-keys`). The first time, the
    /// script is loaded on every node: a refusal to compile it (Redis 6
    /// does not know the flag) answers no for good, and several slots'
    /// requests then go as one call per slot, pipelined. An attempt that
    /// did not get through (a dropped connection, a node loading or busy,
    /// a user without `SCRIPT LOAD`) is made again [`nodes::RETRY_ACROSS`]
    /// later; calls go per slot meanwhile.
    pub(crate) async fn crosses_slots(&self, across: &redis::Script) -> bool {
        match self.across.state() {
            nodes::YES => true,
            nodes::NO => false,
            _ if !self.across.try_now() => false,
            _ => {
                let mut conn = self.retrying.clone();
                match across.load_async(&mut conn).await {
                    Ok(_) => {
                        self.across.set(nodes::YES);
                        true
                    }
                    Err(e)
                        if e.kind()
                            == redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError) =>
                    {
                        tracing::info!(error = %e, "the cluster does not run scripts that reach several slots (Redis 7 or later does); requests of several slots go as one call per slot");
                        self.across.set(nodes::NO);
                        false
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "loading the cross-slot batch script failed; trying again later");
                        self.across.failed_now();
                        false
                    }
                }
            }
        }
    }

    /// Records that the cluster cannot run a script that reaches several
    /// slots (known at connect from its version), so that no batch tries.
    pub(crate) fn no_cross_slot_scripts(&self) {
        self.across.set(nodes::NO);
    }

    /// Every slot's probe key, for cross-slot calls (see
    /// [`ClusterConn::crosses_slots`] and `across.lua`).
    pub(crate) fn probes(&self) -> &Arc<nodes::Probes> {
        self.across.probes()
    }

    /// A call was answered `MOVED`: the view of the nodes is reloaded
    /// (unless it just was).
    pub(crate) fn moved(&self) {
        if self.nodes.older_than(nodes::REFRESH_AFTER_MOVED) {
            self.refresh_nodes();
        }
    }

    /// Reloads the view of the nodes in the background (one reload at a
    /// time; nothing outside a runtime).
    fn refresh_nodes(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if !self.nodes.start_loading() {
            return;
        }
        let mut conn = self.retrying.clone();
        let nodes = self.nodes.clone();
        runtime.spawn(async move {
            let route = redis::cluster_routing::RoutingInfo::SingleNode(
                redis::cluster_routing::SingleNodeRoutingInfo::RandomPrimary,
            );
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("SLOTS");
            let reply = conn.route_command(cmd, route).await;
            if let Err(e) = &reply {
                tracing::debug!(error = %e, "reading the cluster's slots failed; calls go by slot meanwhile");
            }
            nodes.loaded(reply.ok());
        });
    }

    /// Sends the first `count` commands of `pipeline` in one round trip to
    /// the primary redis-rs has for `slot`, on the connection that never
    /// resends when `once`. Each command's own error comes back as its
    /// reply (`Value::ServerError`); an error of the whole round trip as
    /// `Err`.
    pub(crate) async fn pipeline_to(
        &self,
        slot: Slot,
        pipeline: Pipeline,
        count: usize,
        once: bool,
    ) -> redis::RedisResult<Vec<Value>> {
        let mut conn = if once {
            self.once.clone()
        } else {
            self.retrying.clone()
        };
        let route = redis::cluster_routing::SingleNodeRoutingInfo::SpecificNode(
            redis::cluster_routing::Route::with_slot(
                slot,
                redis::cluster_routing::SlotAddr::Master,
            ),
        );
        conn.route_pipeline(pipeline, 0, count, route).await
    }

    /// Sends `payload` on the at-most-once connection, following redirects
    /// that prove it did not run.
    async fn once(&self, payload: Payload<'_>) -> redis::RedisResult<Vec<Value>> {
        let mut conn = self.once.clone();
        let mut ask: Option<(String, u16)> = None;
        let mut sends = 0;
        loop {
            sends += 1;
            let reply = match (ask.take(), payload) {
                // Routed as redis-rs routes it (by key; a keyless command
                // such as SCRIPT LOAD to where it belongs).
                (None, Payload::Cmd(cmd)) => conn.req_packed_command(cmd).await.map(|v| vec![v]),
                (None, Payload::Pipeline(pipeline, offset, count)) => {
                    conn.req_packed_commands(pipeline, offset, count).await
                }
                (Some((host, port)), payload) => {
                    let mut asking = redis::pipe();
                    asking.cmd("ASKING");
                    let (offset, count) = match payload {
                        Payload::Cmd(cmd) => {
                            asking.add_command(cmd.clone());
                            (0, 1)
                        }
                        Payload::Pipeline(pipeline, offset, count) => {
                            for cmd in pipeline.cmd_iter() {
                                asking.add_command(cmd.clone());
                            }
                            (offset, count)
                        }
                    };
                    let route =
                        redis::cluster_routing::SingleNodeRoutingInfo::ByAddress { host, port };
                    conn.route_pipeline(asking, offset + 1, count, route).await
                }
            };
            let err = match reply {
                Ok(values) => return Ok(values),
                Err(err) => err,
            };
            match not_run(&err) {
                Some(next) if sends < ONCE_SENDS => {
                    if next.is_none() {
                        // The connection refreshes its slot map on MOVED;
                        // give it (or the cluster) a moment.
                        tokio::time::sleep(Duration::from_millis(10 << sends.min(5))).await;
                    }
                    tracing::debug!(error = %err, "at-most-once call did not run; sending it again");
                    ask = next;
                }
                _ => return Err(err),
            }
        }
    }
}

/// What [`ClusterConn::once`] sends.
#[derive(Clone, Copy)]
enum Payload<'a> {
    /// One command.
    Cmd(&'a Cmd),
    /// Replies `offset..offset + count` of a pipeline.
    Pipeline(&'a Pipeline, usize, usize),
}

crate::engine::conn::connection_like!(ClusterConn {
    command(this, cmd) => {
        if !this.at_most_once {
            return this.retrying.req_packed_command(cmd);
        }
        Box::pin(async move {
            let mut replies = this.once(Payload::Cmd(cmd)).await?;
            replies.pop().ok_or_else(|| {
                redis::RedisError::from(std::io::Error::other("a command got no reply"))
            })
        })
    },
    pipeline(this, pipeline, offset, count) => {
        if !this.at_most_once {
            return this.retrying.req_packed_commands(pipeline, offset, count);
        }
        Box::pin(this.once(Payload::Pipeline(pipeline, offset, count)))
    },
    db(this) => this.retrying.get_db(),
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::topology::{connect, Address};

    /// The client's view of the slots names a failed-over slot's new
    /// primary soon after: on the `MOVED` a call meets, or at the latest
    /// on the next scheduled reload.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_view_of_the_slots_follows_a_failover() {
        let mut cluster = tokio::task::spawn_blocking(|| {
            locksmith_testkit::RedisCluster::start().expect("a cluster")
        })
        .await
        .unwrap();
        let address = Address::Cluster {
            seeds: cluster.urls(),
        };
        let timing = Timing {
            connect: Duration::from_secs(2),
            command: Duration::from_secs(2),
        };
        let security = Security::load(&Default::default(), false).unwrap();
        let conn = connect(&address, timing, &security, "").await.unwrap();
        let cluster_conn = conn.cluster().unwrap().clone();
        let key = "{failing}";
        let slot = Slot::for_key(key);
        let old = cluster.node_for_key(key).unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while cluster_conn.node_of(slot).as_deref() != Some(&*cluster.nodes()[old].addr()) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the view was loaded"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let new = tokio::task::spawn_blocking(move || {
            let new = cluster.failover(old).expect("failed over");
            (cluster, new)
        })
        .await
        .unwrap();
        let (cluster, new) = new;
        let wanted = cluster.nodes()[new].addr();
        // A call of the slot: the old primary, a replica now, answers
        // MOVED to the connection that still has it, or redis-rs already
        // knows; either way the view must follow within the reload period.
        let mut probe = conn.clone();
        let _: redis::RedisResult<Value> = redis::cmd("GET").arg(key).query_async(&mut probe).await;
        let deadline = tokio::time::Instant::now() + nodes::REFRESH_EVERY * 2;
        loop {
            let seen = cluster_conn.node_of(slot);
            if seen.as_deref() == Some(&*wanted) {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the view still names {seen:?} for the slot, not the new primary {wanted}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
