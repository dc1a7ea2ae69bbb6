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

use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::Slot;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{Cmd, IntoConnectionInfo, Pipeline, RedisFuture, Value};

use crate::engine::conn::{Acks, Timing};
use crate::engine::nodes::{self, Across, NodeMap};
use crate::engine::security::{is_tls_url, redact, Credentials, Security};
use tokio::sync::watch;

use crate::error::{Error, Result};

/// A parsed deployment address: what [`Topology::connect`] dials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Address {
    /// One server: any URL redis-rs accepts (`redis://`, `redis+unix://`).
    Single(String),
    /// Sentinels (`redis://host:port` each), the monitored service name,
    /// and credentials and database for the data nodes.
    Sentinel {
        sentinels: Vec<String>,
        service: String,
        username: Option<String>,
        password: Option<String>,
        db: i64,
    },
    /// Seed nodes of a cluster (`redis://[user:pass@]host:port` each).
    Cluster { seeds: Vec<String> },
}

impl Address {
    /// Parses the URL forms locksmith accepts:
    ///
    /// - `redis://[[user]:pass@]host[:port][/db]` (and anything else
    ///   redis-rs accepts for one server),
    /// - `redis+sentinel://[[user]:pass@]host:port[,host:port…]/service[/db]`,
    /// - `redis+cluster://[[user]:pass@]host:port[,host:port…]`,
    ///
    /// each also as `rediss…` (TLS), and `valkey…`/`valkeys…` as aliases.
    /// With `force_tls`, a plain scheme is taken as its TLS form.
    ///
    /// Credentials in the Sentinel form are for the data nodes; the
    /// Sentinels themselves are contacted without, unless given apart
    /// ([`Address::with_sentinel_credentials`]).
    pub(crate) fn parse(url: &str, force_tls: bool) -> Result<Address> {
        let bad = |why: &str| Error::invalid(format!("bad Redis URL {:?}: {why}", redact(url)));
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("expected scheme://..."))?;
        let (topology, tls) = match scheme {
            "redis" | "valkey" => ("single", force_tls),
            "rediss" | "valkeys" => ("single", true),
            "redis+sentinel" | "valkey+sentinel" => ("sentinel", force_tls),
            "rediss+sentinel" | "valkeys+sentinel" => ("sentinel", true),
            "redis+cluster" | "valkey+cluster" => ("cluster", force_tls),
            "rediss+cluster" | "valkeys+cluster" => ("cluster", true),
            _ if force_tls => {
                return Err(bad(
                    "TLS was asked for, but this URL's scheme has no TLS form (use rediss://, rediss+sentinel:// or rediss+cluster://)",
                ))
            }
            _ => {
                url.into_connection_info()
                    .map_err(|e| bad(&e.to_string()))?;
                return Ok(Address::Single(url.to_owned()));
            }
        };
        let node_scheme = if tls { "rediss" } else { "redis" };
        if topology == "single" {
            let url = format!("{node_scheme}://{rest}");
            url.as_str()
                .into_connection_info()
                .map_err(|e| bad(&e.to_string()))?;
            return Ok(Address::Single(url));
        }
        let (userinfo, rest) = match rest.rsplit_once('@') {
            Some((user, rest)) => (Some(user), rest),
            None => (None, rest),
        };
        let (hosts, path) = match rest.split_once('/') {
            Some((hosts, path)) => (hosts, path),
            None => (rest, ""),
        };
        let hosts: Vec<&str> = hosts.split(',').filter(|h| !h.is_empty()).collect();
        if hosts.is_empty() {
            return Err(bad("no host:port given"));
        }
        for host in &hosts {
            let (h, port) = host
                .rsplit_once(':')
                .ok_or_else(|| bad(&format!("{host:?} needs a port (host:port)")))?;
            if h.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
                return Err(bad(&format!("{host:?} is not host:port")));
            }
        }
        let (username, password) = match userinfo {
            None => (None, None),
            Some(info) => match info.split_once(':') {
                Some((u, p)) => (
                    (!u.is_empty()).then(|| u.to_owned()),
                    (!p.is_empty()).then(|| p.to_owned()),
                ),
                None => ((!info.is_empty()).then(|| info.to_owned()), None),
            },
        };
        if topology == "cluster" {
            if !path.is_empty() && path != "0" {
                return Err(bad("a cluster has only database 0"));
            }
            let auth = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
            let seeds = hosts
                .iter()
                .map(|h| format!("{node_scheme}://{auth}{h}"))
                .collect();
            return Ok(Address::Cluster { seeds });
        }
        let mut parts = path.split('/').filter(|p| !p.is_empty());
        let service = parts
            .next()
            .ok_or_else(|| {
                bad("the Sentinel form needs the service name: redis+sentinel://host:port/SERVICE")
            })?
            .to_owned();
        let db = match parts.next() {
            Some(db) => db
                .parse::<i64>()
                .map_err(|_| bad(&format!("database {db:?} is not a number")))?,
            None => 0,
        };
        if parts.next().is_some() {
            return Err(bad("expected /service[/db] after the hosts"));
        }
        Ok(Address::Sentinel {
            sentinels: hosts
                .iter()
                .map(|h| format!("{node_scheme}://{h}"))
                .collect(),
            service,
            username,
            password,
            db,
        })
    }

    /// The same address with `credentials` for the Sentinels themselves
    /// (a Sentinel with `requirepass` or ACL users); other topologies are
    /// returned as they are.
    pub(crate) fn with_sentinel_credentials(self, credentials: &Credentials) -> Address {
        let Address::Sentinel {
            sentinels,
            service,
            username,
            password,
            db,
        } = self
        else {
            return self;
        };
        let user = credentials.username.as_deref().unwrap_or("");
        let userinfo = match &credentials.password {
            Some(p) => format!("{}:{}@", encode(user), encode(p)),
            None if !user.is_empty() => format!("{}@", encode(user)),
            None => String::new(),
        };
        let sentinels = sentinels
            .iter()
            .map(|s| match s.split_once("://") {
                Some((scheme, host)) => format!("{scheme}://{userinfo}{host}"),
                None => s.clone(),
            })
            .collect();
        Address::Sentinel {
            sentinels,
            service,
            username,
            password,
            db,
        }
    }

    /// `scheme://[user info@]` of a data node's URL: what a node's
    /// `host:port` is appended to, for a connection with this address's
    /// credentials and TLS.
    pub(crate) fn node_prefix(&self) -> String {
        let scheme = if self.is_tls() { "rediss" } else { "redis" };
        let userinfo = match self {
            Address::Single(url) => url
                .split_once("://")
                .and_then(|(_, rest)| rest.split('/').next())
                .and_then(|hosts| hosts.rsplit_once('@'))
                .map(|(info, _)| format!("{info}@"))
                .unwrap_or_default(),
            Address::Cluster { seeds } => seeds
                .first()
                .and_then(|s| s.split_once("://"))
                .and_then(|(_, rest)| rest.rsplit_once('@'))
                .map(|(info, _)| format!("{info}@"))
                .unwrap_or_default(),
            Address::Sentinel {
                username, password, ..
            } => match (username, password) {
                (u, Some(p)) => format!("{}:{}@", encode(u.as_deref().unwrap_or("")), encode(p)),
                (Some(u), None) => format!("{}@", encode(u)),
                (None, None) => String::new(),
            },
        };
        format!("{scheme}://{userinfo}")
    }

    /// True when this address's connections use TLS.
    pub(crate) fn is_tls(&self) -> bool {
        match self {
            Address::Single(url) => is_tls_url(url),
            Address::Sentinel { sentinels, .. } => sentinels.iter().any(|s| is_tls_url(s)),
            Address::Cluster { seeds } => seeds.iter().any(|s| is_tls_url(s)),
        }
    }

    /// A short description for errors and diagnostics.
    pub(crate) fn describe(&self) -> String {
        match self {
            Address::Single(url) => match url.as_str().into_connection_info() {
                Ok(info) => info.addr().to_string(),
                Err(_) => url.clone(),
            },
            Address::Sentinel {
                sentinels, service, ..
            } => format!(
                "sentinel service {service:?} via {}",
                sentinels
                    .iter()
                    .map(|s| strip_scheme(s.rsplit('@').next().unwrap_or(s)))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            Address::Cluster { seeds } => format!(
                "cluster via {}",
                seeds
                    .iter()
                    .map(|s| strip_scheme(s.rsplit('@').next().unwrap_or(s)))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        }
    }
}

/// `host:port` of a node URL (no scheme, no credentials).
fn strip_scheme(url: &str) -> &str {
    url.split_once("://").map_or(url, |(_, rest)| rest)
}

/// Percent-encodes what a URL's user info cannot carry as it is.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The command connection of a client, whatever the topology. Cheap to
/// clone: clones share one multiplexed connection.
#[derive(Clone)]
pub(crate) enum Conn {
    /// One server.
    Single(ConnectionManager),
    /// The primary named by Sentinels, followed across failovers.
    Sentinel(SentinelConn),
    /// A Redis Cluster.
    Cluster(ClusterConn),
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Conn::Single(_) => "Conn::Single",
            Conn::Sentinel(_) => "Conn::Sentinel",
            Conn::Cluster(_) => "Conn::Cluster",
        })
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Sentinel(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Sentinel(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

impl Conn {
    /// The same connection for a call that is not idempotent (one that
    /// adds or subtracts): no layer may send it twice. On a
    /// single server and behind Sentinel every connection already answers
    /// a lost reply with an error and resends nothing; on a cluster this
    /// is the connection that never resends (see [`ClusterConn`]).
    pub(crate) fn at_most_once(&self) -> Conn {
        match self {
            Conn::Cluster(c) => Conn::Cluster(ClusterConn {
                at_most_once: true,
                ..c.clone()
            }),
            other => other.clone(),
        }
    }

    /// True for a Redis Cluster: script calls and renewals must be grouped
    /// by slot.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Conn::Cluster(_))
    }

    /// The group a key's script calls go in: its slot on a cluster, one
    /// group otherwise.
    pub(crate) fn group_of(&self, key: &str) -> Option<Slot> {
        self.is_cluster().then(|| Slot::for_key(key))
    }

    /// Where a batcher queues a key's requests (see [`Destination`]).
    pub(crate) fn destination_of(&self, key: &str) -> Destination {
        match self {
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

    /// The cluster connection, on a cluster.
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
    Node(Arc<str>),
    /// A cluster slot whose primary is not known yet.
    Slot(Slot),
}

/// Connects to `address`; the first connection must succeed within about
/// one connect timeout.
/// `key_prefix` is the client's (see `ClientBuilder::key_prefix`): on a
/// cluster, the keys the connection makes up itself start with it too.
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
            Address::Sentinel { .. } => SentinelConn::connect(address, timing, security)
                .await
                .map(Conn::Sentinel),
            Address::Cluster { seeds } => {
                let retrying = cluster_client(seeds, timing, None, security)?
                    .get_async_connection()
                    .await
                    .map_err(fail)?;
                let once = cluster_client_with(seeds, timing, None, 0, security)?
                    .get_async_connection()
                    .await
                    .map_err(fail)?;
                let conn = ClusterConn {
                    retrying,
                    once,
                    at_most_once: false,
                    nodes: Arc::default(),
                    across: Arc::new(Across::new(key_prefix)),
                };
                conn.refresh_nodes();
                Ok(Conn::Cluster(conn))
            }
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
    let mut builder = redis::cluster::ClusterClientBuilder::new(seeds.to_vec())
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

impl ConnectionLike for ClusterConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        if !self.at_most_once {
            return self.retrying.req_packed_command(cmd);
        }
        Box::pin(async move {
            let mut replies = self.once(Payload::Cmd(cmd)).await?;
            replies.pop().ok_or_else(|| {
                redis::RedisError::from(std::io::Error::other("a command got no reply"))
            })
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        if !self.at_most_once {
            return self.retrying.req_packed_commands(pipeline, offset, count);
        }
        Box::pin(self.once(Payload::Pipeline(pipeline, offset, count)))
    }

    fn get_db(&self) -> i64 {
        self.retrying.get_db()
    }
}

fn manager_config(timing: Timing) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timing.connect))
        .set_response_timeout(Some(timing.command))
        .set_number_of_retries(2)
        .set_max_delay(Duration::from_millis(500))
}

/// The primary named by a group of Sentinels, followed across failovers.
#[derive(Clone)]
pub(crate) struct SentinelConn {
    /// Shared by all clones.
    shared: Arc<SentinelShared>,
}

/// What clones of a [`SentinelConn`] share.
struct SentinelShared {
    /// The connection to the current primary and its address.
    current: RwLock<(ConnectionManager, String)>,
    /// Asks the Sentinels; behind an async lock so one re-resolution runs
    /// at a time while the others wait for its outcome.
    resolver: tokio::sync::Mutex<SentinelClient>,
    /// Bumped on every switch to another primary; the notify hub watches
    /// it to move its pub/sub connection too.
    epoch: watch::Sender<u64>,
    /// Connection options for a new primary.
    timing: Timing,
    /// TLS of the connections to the Sentinels.
    security: Security,
    /// The Sentinels and the service, for a fresh lookup.
    address: Address,
}

impl SentinelConn {
    async fn connect(
        address: &Address,
        timing: Timing,
        security: &Security,
    ) -> Result<SentinelConn> {
        let mut resolver = sentinel_client(address, security)?;
        let describe = address.describe();
        let Address::Sentinel { sentinels, .. } = address else {
            return Err(Error::invalid("not a Sentinel address"));
        };
        let client = resolver
            .async_get_client()
            .await
            .map_err(|source| sentinel_error(&describe, source))?;
        let addr = client.get_connection_info().addr().to_string();
        let conn = ConnectionManager::new_with_config(
            client,
            security.manager_config(manager_config(timing)),
        )
        .await
        .map_err(|source| Error::Connect {
            addr: format!("{addr} (primary of {describe})"),
            source,
        })?;
        let conn = SentinelConn {
            shared: Arc::new(SentinelShared {
                current: RwLock::new((conn, addr)),
                resolver: tokio::sync::Mutex::new(resolver),
                epoch: watch::channel(0).0,
                timing,
                security: security.clone(),
                address: address.clone(),
            }),
        };
        tokio::spawn(watch_switches(
            Arc::downgrade(&conn.shared),
            sentinels.clone(),
        ));
        Ok(conn)
    }

    /// The connections' TLS and credentials.
    pub(crate) fn security(&self) -> &Security {
        &self.shared.security
    }

    /// The current primary's connection and the epoch it belongs to.
    fn current(&self) -> (ConnectionManager, u64) {
        let current = self
            .shared
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner());
        (current.0.clone(), *self.shared.epoch.borrow())
    }

    /// A receiver that changes whenever the primary changes.
    pub(crate) fn epochs(&self) -> watch::Receiver<u64> {
        self.shared.epoch.subscribe()
    }

    /// A `redis::Client` for the current primary (the notify hub's pub/sub
    /// connection), asking the Sentinels afresh.
    pub(crate) async fn primary_client(&self) -> redis::RedisResult<redis::Client> {
        let mut resolver = self.shared.resolver.lock().await;
        if self.shared.security.rotates() {
            // The lookup checks the named node's role with the data
            // nodes' credentials: the latest ones.
            if let Ok(fresh) = sentinel_client(&self.shared.address, &self.shared.security) {
                *resolver = fresh;
            }
        }
        resolver.async_get_client().await
    }

    /// After a failure seen at `epoch`: asks the Sentinels which node is
    /// the primary and switches to it if it changed. One re-resolution at
    /// a time; callers that queued behind one that switched do nothing.
    async fn follow(&self, epoch: u64) {
        let mut resolver = self.shared.resolver.lock().await;
        if *self.shared.epoch.borrow() != epoch {
            return;
        }
        if self.shared.security.rotates() {
            // The lookup checks the named node's role with the data
            // nodes' credentials: the latest ones.
            if let Ok(fresh) = sentinel_client(&self.shared.address, &self.shared.security) {
                *resolver = fresh;
            }
        }
        let Ok(Ok(client)) =
            tokio::time::timeout(self.shared.timing.command, resolver.async_get_client()).await
        else {
            return;
        };
        let addr = client.get_connection_info().addr().to_string();
        if addr
            == self
                .shared
                .current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .1
        {
            return;
        }
        let connecting = ConnectionManager::new_with_config(
            client,
            self.shared
                .security
                .manager_config(manager_config(self.shared.timing)),
        );
        let Ok(Ok(conn)) = tokio::time::timeout(self.shared.timing.connect, connecting).await
        else {
            return;
        };
        tracing::info!(primary = %addr, "Sentinel named a new primary; switching to it");
        *self
            .shared
            .current
            .write()
            .unwrap_or_else(|e| e.into_inner()) = (conn, addr);
        self.shared.epoch.send_modify(|e| *e += 1);
    }

    /// Runs `op` on the current primary; a failure that may mean a
    /// failover makes the connection follow the Sentinels before the error
    /// is returned (so the caller's resend goes to the new primary), and a
    /// `READONLY` answer is reported as a dropped connection: nothing was
    /// written, and a resend is what the caller should do.
    fn call<'a, T: Send + 'a>(
        &'a mut self,
        op: impl FnOnce(ConnectionManager) -> RedisFuture<'a, T> + Send + 'a,
    ) -> RedisFuture<'a, T> {
        Box::pin(async move {
            let (conn, epoch) = self.current();
            match op(conn).await {
                Ok(value) => Ok(value),
                Err(e) if is_demoted(&e) => {
                    self.follow(epoch).await;
                    Err(redis::RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::ConnectionReset,
                        format!(
                            "the primary was demoted ({e}); switched to the one Sentinel names"
                        ),
                    )))
                }
                Err(e)
                    if e.is_io_error()
                        || e.is_connection_dropped()
                        || e.is_connection_refusal()
                        || e.is_timeout() =>
                {
                    self.follow(epoch).await;
                    Err(e)
                }
                Err(e) => Err(e),
            }
        })
    }
}

impl ConnectionLike for SentinelConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.call(move |mut conn| Box::pin(async move { conn.req_packed_command(cmd).await }))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.call(move |mut conn| {
            Box::pin(async move { conn.req_packed_commands(pipeline, offset, count).await })
        })
    }

    fn get_db(&self) -> i64 {
        self.current().0.get_db()
    }
}

/// Listens for the Sentinels' `+switch-master` announcements and follows
/// each one at once, so the client does not wait for an error to notice a
/// failover (a demoted primary that comes back on its old address would
/// otherwise answer reads as a stale replica). Tries the Sentinels in turn;
/// on every (re)connection it also checks the primary, in case a switch was
/// missed. Ends when the connection is dropped.
async fn watch_switches(shared: std::sync::Weak<SentinelShared>, sentinels: Vec<String>) {
    use futures_util::StreamExt;
    let mut next = 0;
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let timing = strong.timing;
        let client = strong.security.client(&sentinels[next % sentinels.len()]);
        drop(strong);
        next += 1;
        let opened = async {
            let client = client
                .map_err(|e| redis::RedisError::from(std::io::Error::other(e.to_string())))?;
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe("+switch-master").await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        let Ok(Ok(pubsub)) = tokio::time::timeout(timing.connect, opened).await else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        let follow = |shared: &std::sync::Weak<SentinelShared>| {
            let shared = shared.upgrade();
            async move {
                if let Some(shared) = shared {
                    let conn = SentinelConn { shared };
                    let epoch = *conn.shared.epoch.borrow();
                    conn.follow(epoch).await;
                    true
                } else {
                    false
                }
            }
        };
        if !follow(&shared).await {
            return;
        }
        let mut messages = pubsub.into_on_message();
        while messages.next().await.is_some() {
            tracing::debug!("Sentinel announced a new primary");
            if !follow(&shared).await {
                return;
            }
        }
    }
}

/// True for the answers a demoted primary gives: a write refused
/// (`READONLY`), or `WAIT` refused on a replica.
fn is_demoted(e: &redis::RedisError) -> bool {
    let text = e.to_string();
    e.code() == Some("READONLY")
        || text.contains("READONLY")
        || text.contains("cannot be used with replica")
}

/// The redis-rs Sentinel client for a Sentinel address: the Sentinels'
/// own credentials come from their URLs, the data nodes' from the
/// address, TLS (both) from `security`.
fn sentinel_client(address: &Address, security: &Security) -> Result<SentinelClient> {
    let Address::Sentinel {
        sentinels,
        service,
        username,
        password,
        db,
    } = address
    else {
        return Err(Error::invalid("not a Sentinel address"));
    };
    let bad = |e: redis::RedisError| {
        let sentinels: Vec<String> = sentinels.iter().map(|s| redact(s)).collect();
        Error::invalid(format!("bad Sentinel list {sentinels:?}: {e}"))
    };
    let infos = sentinels
        .iter()
        .map(|s| s.as_str().into_connection_info())
        .collect::<redis::RedisResult<Vec<_>>>()
        .map_err(bad)?;
    let mut builder = SentinelClientBuilder::new(
        infos.iter().map(|i| i.addr().clone()),
        service.clone(),
        SentinelServerType::Master,
    )
    .map_err(bad)?
    .set_client_to_redis_db(*db);
    let (username, password) = match security.current_credentials() {
        Some(c) => (
            c.username.or_else(|| Some("default".to_owned())),
            c.password,
        ),
        None => (username.clone(), password.clone()),
    };
    if let Some(u) = username {
        builder = builder.set_client_to_redis_username(u);
    }
    if let Some(p) = password {
        builder = builder.set_client_to_redis_password(p);
    }
    if let Some(first) = infos.first() {
        if let Some(u) = first.redis_settings().username() {
            builder = builder.set_client_to_sentinel_username(u);
        }
        if let Some(p) = first.redis_settings().password() {
            builder = builder.set_client_to_sentinel_password(p);
        }
    }
    security
        .sentinel(builder, address.is_tls())
        .build()
        .map_err(bad)
}

/// A clear error for a failed Sentinel lookup: none reachable, or the
/// service unknown to all of them.
fn sentinel_error(describe: &str, source: redis::RedisError) -> Error {
    Error::Connect {
        addr: format!(
            "{describe} (no Sentinel answered with a primary: check the addresses and that they monitor this service name)"
        ),
        source,
    }
}

/// Turns a failed first connection into an error that says what to fix.
pub(crate) fn explain_connect(address: &Address, err: Error) -> Error {
    let Error::Connect { addr, source } = err else {
        return err;
    };
    let text = source.to_string();
    if matches!(address, Address::Cluster { .. })
        && (text.contains("cluster support disabled") || text.contains("ERR This instance"))
    {
        return Error::invalid(format!(
            "{addr} is a standalone server, not a cluster node: use redis://host:port for it"
        ));
    }
    Error::Connect { addr, source }
}

/// Checks that the deployment is what the URL says and is usable: a
/// `redis://` URL must not point at a cluster node (every command would be
/// redirected), and a cluster must serve all of its slots.
pub(crate) async fn check_deployment(address: &Address, conn: &Conn) -> Result<()> {
    let describe = address.describe();
    let cluster = matches!(address, Address::Cluster { .. });
    // CLUSTER INFO on a cluster (one node answers), INFO cluster elsewhere.
    let mut query = if cluster {
        redis::cmd("CLUSTER")
    } else {
        redis::cmd("INFO")
    };
    query.arg(if cluster { "INFO" } else { "cluster" });
    let text: String = query
        .query_async(&mut conn.clone())
        .await
        .map_err(|source| Error::Connect {
            addr: describe.clone(),
            source,
        })?;
    let field = |name: &str| -> String {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
            .unwrap_or_default()
    };
    if cluster {
        let (assigned, state) = (field("cluster_slots_assigned"), field("cluster_state"));
        if assigned != "16384" || state != "ok" {
            return Err(Error::invalid(format!(
                "{describe}: the cluster serves {assigned} of 16384 slots (state {state}); assign every slot (redis-cli --cluster fix) before using it"
            )));
        }
    } else if field("cluster_enabled") == "1" {
        return Err(Error::invalid(format!(
            "{describe} is a Redis Cluster node: use redis+cluster://host:port[,host:port…] for it"
        )));
    }
    Ok(())
}

/// Which server (or cluster) `conn` reaches, whatever address named it:
/// the server's `run_id` (one server, or the primary a Sentinel group
/// named at connect), or for a cluster the smallest node id of its nodes.
/// Two clients that answer the same id talk to the same data, however
/// their URLs differ (`localhost` and `127.0.0.1`, two DNS names).
pub(crate) async fn server_identity(address: &Address, conn: &Conn) -> Result<String> {
    let describe = address.describe();
    let fail = |source: redis::RedisError| Error::Connect {
        addr: describe.clone(),
        source,
    };
    let (cmd, arg) = match address {
        Address::Cluster { .. } => ("CLUSTER", "NODES"),
        _ => ("INFO", "server"),
    };
    let text: String = redis::cmd(cmd)
        .arg(arg)
        .query_async(&mut conn.clone())
        .await
        .map_err(fail)?;
    if matches!(address, Address::Cluster { .. }) {
        let smallest = text
            .lines()
            .filter_map(|line| line.split_whitespace().next())
            .min()
            .unwrap_or_default();
        return Ok(format!("cluster:{smallest}"));
    }
    let run_id = text
        .lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .map(str::trim)
        .unwrap_or_default();
    Ok(format!("server:{run_id}"))
}

/// Resolves the replica acknowledgement policy against the deployment:
/// the fewest replicas any primary has (`connected_slaves`) decides the
/// default, and caps what may be asked for.
pub(crate) async fn replica_acks(
    address: &Address,
    conn: &Conn,
    wanted: Option<Acks>,
    command_timeout: Duration,
) -> Result<(Acks, Option<String>)> {
    let acks = replica_acks_wanted(address, conn, wanted, command_timeout).await?;
    if acks.min == 0 {
        return Ok((acks, None));
    }
    // Proxies, serverless offerings and ACL users may refuse WAIT
    // (renamed away, "unknown command", NOPERM). `WAIT 0 0` answers at
    // once where it is allowed.
    let mut probe = conn.clone();
    let refused = match redis::cmd("WAIT")
        .arg(0)
        .arg(0)
        .query_async::<Value>(&mut probe)
        .await
    {
        Ok(_) => return Ok((acks, None)),
        Err(e) if is_refusal(&e) => e,
        Err(e) => return Err(Error::Redis(e)),
    };
    if wanted.is_some() {
        return Err(Error::invalid(format!(
            "replica_acks needs the WAIT command, which {} refuses ({refused}): allow WAIT, or pass 0 to turn acknowledgement off",
            address.describe()
        )));
    }
    let note = format!(
        "replica acknowledgement is off: {} refuses WAIT ({refused})",
        address.describe()
    );
    tracing::warn!(addr = %address.describe(), error = %refused, "replica acknowledgement turned off: the server refuses WAIT");
    metrics::counter!("locksmith_capability_missing_total", "capability" => "wait").increment(1);
    Ok((Acks::default(), Some(note)))
}

/// True unless the deployment refuses sharded pub/sub (a proxy that does
/// not know `SPUBLISH`, an ACL user without the right).
pub(crate) async fn sharded_pubsub(conn: &Conn) -> bool {
    // SPUBLISH is routed to the one node of its channel's slot, whose
    // answer comes back as it is (nobody listens to the probe channel).
    let mut probe = conn.clone();
    !matches!(
        redis::cmd("SPUBLISH")
            .arg("redisson_locksmith_probe")
            .arg("")
            .query_async::<Value>(&mut probe)
            .await,
        Err(e) if is_refusal(&e)
    )
}

/// True when the server refuses a command outright (unknown, renamed
/// away, or not permitted to this user): nothing ran.
fn is_refusal(e: &redis::RedisError) -> bool {
    let text = e.to_string().to_ascii_lowercase();
    e.code() == Some("NOPERM")
        || text.contains("unknown command")
        || text.contains("not allowed")
        || text.contains("cannot be used")
}

/// The acknowledgement the options and the deployment ask for, before
/// checking that the server takes `WAIT`.
async fn replica_acks_wanted(
    address: &Address,
    conn: &Conn,
    wanted: Option<Acks>,
    command_timeout: Duration,
) -> Result<Acks> {
    if wanted.is_some_and(|a| a.min == 0) {
        return Ok(Acks::default());
    }
    let mut conn = conn.clone();
    let reply: Value = redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut conn)
        .await
        .map_err(Error::Redis)?;
    let texts: Vec<String> = match reply {
        Value::Map(nodes) => nodes
            .into_iter()
            .filter_map(|(_, v)| redis::from_redis_value(v).ok())
            .collect(),
        other => vec![redis::from_redis_value(other).unwrap_or_default()],
    };
    let replicas = texts
        .iter()
        .map(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("connected_slaves:"))
                .and_then(|v| v.trim().parse::<u32>().ok())
                .unwrap_or(0)
        })
        .min()
        .unwrap_or(0);
    match wanted {
        // WAIT travels with the call it follows, so it must leave that
        // call room within the command timeout.
        None if replicas > 0 => Ok(Acks {
            min: 1,
            timeout: crate::engine::conn::DEFAULT_ACK_TIMEOUT.min(command_timeout / 2),
        }),
        None => Ok(Acks::default()),
        Some(acks) if acks.timeout.as_millis() == 0 || acks.timeout >= command_timeout => {
            Err(Error::invalid(format!(
                "replica_acks timeout must be at least 1 ms and shorter than the command timeout ({command_timeout:?}), got {:?}",
                acks.timeout
            )))
        }
        Some(acks) if acks.min > replicas => Err(Error::invalid(format!(
            "replica_acks asks for {} acknowledgement(s) but {} has {replicas} connected replica(s){}: lower the minimum, or pass 0 to turn acknowledgement off",
            acks.min,
            address.describe(),
            if matches!(address, Address::Cluster { .. }) { " on its smallest shard" } else { "" },
        ))),
        Some(acks) => Ok(acks),
    }
}

/// The text of an `INFO` reply; on a cluster, where redis-rs asks every
/// primary and answers with a map by node, the first node's.
fn info_text(reply: Value) -> String {
    let value = match reply {
        Value::Map(mut nodes) if !nodes.is_empty() => nodes.swap_remove(0).1,
        other => other,
    };
    redis::from_redis_value::<String>(value).unwrap_or_default()
}

/// The major version of the server `conn` reaches (a random node on a
/// cluster; the nodes of one cluster run one version).
pub(crate) async fn server_major_version(conn: &Conn) -> Result<u32> {
    let mut conn = conn.clone();
    let reply: Value = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await
        .map_err(Error::Redis)?;
    Ok(info_text(reply)
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .and_then(|v| v.trim().split('.').next()?.parse().ok())
        .unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn url_forms() {
        assert_eq!(
            Address::parse("redis://127.0.0.1:6379/2", false).unwrap(),
            Address::Single("redis://127.0.0.1:6379/2".into())
        );
        assert_eq!(
            Address::parse("redis+sentinel://u:pw@h1:26379,h2:26380/mymaster/3", false).unwrap(),
            Address::Sentinel {
                sentinels: vec!["redis://h1:26379".into(), "redis://h2:26380".into()],
                service: "mymaster".into(),
                username: Some("u".into()),
                password: Some("pw".into()),
                db: 3,
            }
        );
        assert_eq!(
            Address::parse("redis+cluster://:pw@h1:7000,h2:7001", false).unwrap(),
            Address::Cluster {
                seeds: vec!["redis://:pw@h1:7000".into(), "redis://:pw@h2:7001".into()]
            }
        );
        for bad in [
            "nonsense",
            "redis+sentinel://h1:26379",
            "redis+sentinel://h1/mymaster",
            "redis+sentinel:///mymaster",
            "redis+cluster://h1:0",
            "redis+cluster://h1:7000/3",
            "redis+sentinel://h1:1/s/x",
        ] {
            let err = Address::parse(bad, false).unwrap_err();
            assert!(err.is_invalid_argument(), "{bad}: {err}");
        }
        let err = Address::parse("redis+unix:///tmp/r.sock", true).unwrap_err();
        assert!(err.to_string().contains("no TLS form"), "{err}");
    }

    #[test]
    fn tls_and_valkey_forms() {
        assert_eq!(
            Address::parse("valkeys://u:p@h:6380/1", false).unwrap(),
            Address::Single("rediss://u:p@h:6380/1".into())
        );
        assert_eq!(
            Address::parse("redis://h:6379", true).unwrap(),
            Address::Single("rediss://h:6379".into())
        );
        assert_eq!(
            Address::parse("valkey://h:6379", false).unwrap(),
            Address::Single("redis://h:6379".into())
        );
        let cluster = Address::parse("rediss+cluster://:pw@h1:7000,h2:7001", false).unwrap();
        assert_eq!(
            cluster,
            Address::Cluster {
                seeds: vec!["rediss://:pw@h1:7000".into(), "rediss://:pw@h2:7001".into()]
            }
        );
        assert!(cluster.is_tls());
        assert_eq!(cluster.describe(), "cluster via h1:7000,h2:7001");
        let sentinel = Address::parse("valkey+sentinel://h1:26379/svc", true)
            .unwrap()
            .with_sentinel_credentials(&Credentials {
                username: Some("sen".into()),
                password: Some("p@ss:w".into()),
            });
        let Address::Sentinel { sentinels, .. } = &sentinel else {
            panic!("{sentinel:?}");
        };
        assert_eq!(
            sentinels,
            &vec!["rediss://sen:p%40ss%3Aw@h1:26379".to_owned()]
        );
        assert!(sentinel.is_tls());
        assert_eq!(sentinel.node_prefix(), "rediss://");
        assert_eq!(cluster.node_prefix(), "rediss://:pw@");
        assert_eq!(
            Address::parse("redis://app:pw@h:1/2", false)
                .unwrap()
                .node_prefix(),
            "redis://app:pw@"
        );
        assert!(
            !sentinel.describe().contains("p%40ss"),
            "{}",
            sentinel.describe()
        );
    }
}
