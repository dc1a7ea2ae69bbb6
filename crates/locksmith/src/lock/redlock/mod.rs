//! Redlock: one lock over N independent Redis primaries, held while a
//! majority of them grant it.
//!
//! Each node stores the lock exactly as the reentrant [`Lock`](crate::Lock)
//! does (Redisson's hash layout, a field per owner, the release message on
//! `redisson_lock__channel:{NAME}`), so the per-node state can be inspected
//! with `locksmith status` against any one node.
//!
//! One acquire round, following the algorithm's description on redis.io:
//! 1. note the monotonic time, pick a fresh owner id;
//! 2. send the acquire script to every node at once, each bounded by the
//!    per-node timeout (much shorter than the lease), so a dead or slow node
//!    costs at most that timeout, not the lease;
//! 3. the lock is held when a majority granted it and time is left of the
//!    *validity*: `lease - elapsed - drift`, `drift = lease * 1% + 2 ms`;
//! 4. otherwise the round is undone on *every* node (also those that did
//!    not answer: their grant may have landed), and the next round comes
//!    after a random back-off (or as soon as a release is announced on any
//!    node).
//!
//! Each granting node's part of a hold is kept by that node client's
//! watchdog, as any lock's hold is (a watchdog-renewed lease is extended
//! every third of it, batched with the node's other renewals). The hold is
//! valid while a majority of the nodes' parts are, until the latest end a
//! majority of them confirm; the holder's [`LostSignal`] fires when that
//! runs out, or at once when the parts left fall below a majority (the
//! nodes answered that the hold is gone, or the set was closed).
//!
//! Read docs/safety.md (Redlock and its critique) before choosing this over
//! a fenced single-primary lock: the algorithm's safety rests on bounded
//! process pauses, bounded clock drift and nodes that keep their data
//! across restarts (or stay down for a lease after one).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;

use crate::client::Lane;
use crate::client::{Client, ClientBuilder};
use crate::engine::batch::{Tracked, Tracker};
use crate::engine::counted::released;
use crate::engine::guard_core::{Held, Holding};
use crate::engine::lease::{drift, LeaseState, Quorum};
use crate::engine::renewal::{Hold, Registration};
use crate::engine::task::Tasks;
use crate::engine::undo::{self, Armed};
use crate::engine::validate;
use crate::engine::wait::{Check, Wait};
use crate::error::{Error, Result};
use crate::lock::reentrant::contract::{acquired, AcquireRequest, Announce, ReleaseRequest};
use crate::scripts;

/// Source of owner ids, unique within this process.
static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);

/// A node that could not be connected is tried again no sooner than this.
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);

/// The independent primaries of a Redlock deployment, with the timing every
/// lock over them uses. Cheap to clone.
///
/// ```no_run
/// # async fn demo() -> locksmith::Result<()> {
/// use locksmith::RedlockNodes;
/// let nodes = RedlockNodes::connect([
///     "redis://10.0.0.1:6379",
///     "redis://10.0.0.2:6379",
///     "redis://10.0.0.3:6379",
/// ])
/// .await?;
/// let lock = nodes.lock("billing-run")?;
/// let guard = lock.lock().await?;          // granted by at least 2 of 3
/// println!("valid for {:?}", guard.remaining_lease());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedlockNodes {
    inner: Arc<Nodes>,
}

#[derive(Debug)]
struct Nodes {
    /// The nodes, in the order given.
    nodes: Vec<Arc<Node>>,
    /// Grants needed: a strict majority.
    quorum: usize,
    /// Bound on each node's answer to one request.
    node_timeout: Duration,
    /// Mean pause between acquire rounds (randomized by +-50%).
    retry_delay: Duration,
    /// Lease of watchdog-renewed holds.
    lease: Duration,
    /// Longest lock name accepted.
    max_name_len: usize,
    /// Whether metrics carry lock names (the first node's option).
    metric_names: bool,
    /// Put before every lock name (the nodes' common key prefix).
    key_prefix: String,
    /// Owner prefix: a UUID of this process's Redlock set.
    id: uuid::Uuid,
}

/// One primary: connected, or waiting to be connected again.
#[derive(Debug)]
struct Node {
    /// Its address, for messages.
    addr: String,
    state: Mutex<NodeState>,
    /// The servers of the set's connected nodes (server id -> address),
    /// shared by all nodes of one set: a node that reaches a server
    /// another node already counts (two names of one server) is refused,
    /// at connect and at every reconnect.
    servers: Servers,
    /// The set's background work (shared by its nodes): reconnects,
    /// undos, releases (renewals run on the node clients' watchdogs).
    tasks: Tasks,
}

/// See [`Node::servers`].
type Servers = Arc<Mutex<std::collections::HashMap<String, String>>>;

/// Counts `client` as the server of node `addr` in `servers`; refuses it
/// when another node already reaches the same server.
fn admit(servers: &Servers, addr: &str, client: &Client) -> Result<()> {
    let mut servers = servers.lock().unwrap_or_else(|e| e.into_inner());
    match servers.get(client.server_id()) {
        Some(first) if first != addr => Err(Error::invalid(format!(
            "Redlock nodes {first} and {addr} are the same server (same run_id): it would count twice toward the majority"
        ))),
        _ => {
            servers.insert(client.server_id().to_owned(), addr.to_owned());
            Ok(())
        }
    }
}

#[derive(Debug)]
enum NodeState {
    Up(Client),
    Down {
        builder: Box<ClientBuilder>,
        /// Why the last connection attempt failed.
        error: String,
        /// No new attempt before this.
        retry_at: Instant,
    },
}

impl RedlockNodes {
    /// Default per-node timeout: 50 ms (the algorithm asks for one much
    /// shorter than the lease: a few milliseconds to tens of them).
    pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(50);
    /// Default mean pause between acquire rounds: 50 ms, randomized.
    pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(50);

    /// Redlock over already-connected clients, one per independent primary.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a node count that is not an odd
    /// number of at least 3 (see [`RedlockNodes::connect`]) or the same
    /// client, address or server (two names of one server) twice.
    pub fn new(clients: impl IntoIterator<Item = Client>) -> Result<RedlockNodes> {
        let clients: Vec<Client> = clients.into_iter().collect();
        check_count(clients.len())?;
        let lease = clients[0].config().lease;
        let max_name_len = clients[0].config().max_name_len;
        let metric_names = clients[0].config().metric_names;
        let key_prefix = common_prefix(clients.iter().map(|c| c.config().key_prefix.as_str()))?;
        let servers = Servers::default();
        let tasks = Tasks::default();
        let nodes = clients
            .into_iter()
            .map(|c| {
                let addr = c.addr().to_owned();
                admit(&servers, &addr, &c)?;
                Ok(Arc::new(Node {
                    addr,
                    state: Mutex::new(NodeState::Up(c)),
                    servers: servers.clone(),
                    tasks: tasks.clone(),
                }))
            })
            .collect::<Result<Vec<_>>>()?;
        RedlockNodes::assemble(nodes, lease, max_name_len, metric_names, key_prefix)
    }

    /// Connects to the primaries at `urls` (concurrently, default client
    /// options). Nodes that cannot be reached now are tried again on later
    /// acquire rounds, so a lock can be had while a minority is down.
    ///
    /// The node count must be odd and at least 3. One node is a plain lock
    /// with extra steps (use [`Client::lock`]); an even count N needs
    /// N/2 + 1 grants and so survives no more failures than N - 1 nodes
    /// would (2 nodes survive none), while costing one more round trip.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad node count, a malformed URL or
    /// the same address or server twice (a node down now is checked when
    /// it comes up, and never counted if it is another node's server);
    /// [`Error::NoQuorum`] when fewer than a
    /// majority can be reached now (the lock could not be had anyway).
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is held before it returns.
    pub async fn connect<I, S>(urls: I) -> Result<RedlockNodes>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        RedlockNodes::connect_with(urls.into_iter().map(ClientBuilder::new)).await
    }

    /// [`RedlockNodes::connect`] with a builder per node (timeouts, lease).
    /// The first builder's lease is the default lease of the locks.
    ///
    /// # Errors
    /// As for [`RedlockNodes::connect`].
    ///
    /// # Cancel safety
    /// Cancel safe, as [`RedlockNodes::connect`].
    pub async fn connect_with(
        builders: impl IntoIterator<Item = ClientBuilder>,
    ) -> Result<RedlockNodes> {
        let builders: Vec<ClientBuilder> = builders.into_iter().collect();
        check_count(builders.len())?;
        let addrs = builders
            .iter()
            .map(ClientBuilder::describe_address)
            .collect::<Result<Vec<_>>>()?;
        check_distinct(addrs.iter().map(String::as_str))?;
        let lease = builders[0].config().lease;
        let max_name_len = builders[0].config().max_name_len;
        let metric_names = builders[0].config().metric_names;
        let key_prefix = common_prefix(builders.iter().map(|b| b.config().key_prefix.as_str()))?;
        let now = Instant::now();
        let clients = join_all(builders.iter().map(|b| b.clone().build())).await;
        if let Some(Err(e)) = clients
            .iter()
            .find(|c| matches!(c, Err(e) if e.is_invalid_argument()))
        {
            return Err(Error::invalid(e.to_string()));
        }
        let servers = Servers::default();
        let tasks = Tasks::default();
        let nodes: Vec<Arc<Node>> = builders
            .into_iter()
            .zip(clients)
            .zip(addrs)
            .map(|((builder, client), addr)| {
                let state = match client {
                    Ok(c) => {
                        admit(&servers, &addr, &c)?;
                        NodeState::Up(c)
                    }
                    Err(e) => NodeState::Down {
                        builder: Box::new(builder),
                        error: e.to_string(),
                        retry_at: now + RECONNECT_PAUSE,
                    },
                };
                Ok(Arc::new(Node {
                    addr,
                    state: Mutex::new(state),
                    servers: servers.clone(),
                    tasks: tasks.clone(),
                }))
            })
            .collect::<Result<_>>()?;
        let set = RedlockNodes::assemble(nodes, lease, max_name_len, metric_names, key_prefix)?;
        let errors: Vec<String> = set
            .inner
            .nodes
            .iter()
            .filter_map(|n| n.down_reason().map(|e| format!("{}: {e}", n.addr)))
            .collect();
        let up = set.inner.nodes.len() - errors.len();
        if up < set.inner.quorum {
            return Err(Error::NoQuorum {
                name: String::new(),
                answered: up,
                needed: set.inner.quorum,
                nodes: set.inner.nodes.len(),
                errors: errors.join("; "),
            });
        }
        Ok(set)
    }

    fn assemble(
        nodes: Vec<Arc<Node>>,
        lease: Duration,
        max_name_len: usize,
        metric_names: bool,
        key_prefix: String,
    ) -> Result<RedlockNodes> {
        check_distinct(nodes.iter().map(|n| n.addr.as_str()))?;
        let quorum = nodes.len() / 2 + 1;
        let set = Nodes {
            nodes,
            quorum,
            node_timeout: RedlockNodes::DEFAULT_NODE_TIMEOUT,
            retry_delay: RedlockNodes::DEFAULT_RETRY_DELAY,
            lease,
            max_name_len,
            metric_names,
            key_prefix,
            id: uuid::Uuid::new_v4(),
        };
        check_timing(set.lease, set.node_timeout)?;
        Ok(RedlockNodes {
            inner: Arc::new(set),
        })
    }

    /// The same nodes with another per-node timeout: the bound on each
    /// node's answer to an acquire or release request. (Renewals go
    /// through each node client's watchdog, bounded by that client's
    /// command timeout.)
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero timeout, or one that leaves
    /// the default lease no validity (see [`Redlock::with_lease`]).
    pub fn with_node_timeout(&self, timeout: Duration) -> Result<RedlockNodes> {
        if timeout.is_zero() {
            return Err(Error::invalid(
                "the Redlock per-node timeout must be positive",
            ));
        }
        check_timing(self.inner.lease, timeout)?;
        Ok(self.rebuilt(|n| n.node_timeout = timeout))
    }

    /// The same nodes with another mean pause between acquire rounds
    /// (each pause is drawn at random from 50% to 150% of it, so
    /// contenders that collided spread out).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero or overlong delay.
    pub fn with_retry_delay(&self, delay: Duration) -> Result<RedlockNodes> {
        if delay.is_zero() || delay > crate::client::MAX_PERIOD {
            return Err(Error::invalid(format!(
                "the Redlock retry delay must be positive and at most {:?}, got {delay:?}",
                crate::client::MAX_PERIOD
            )));
        }
        Ok(self.rebuilt(|n| n.retry_delay = delay))
    }

    fn rebuilt(&self, change: impl FnOnce(&mut Nodes)) -> RedlockNodes {
        let mut nodes = Nodes {
            nodes: self.inner.nodes.clone(),
            quorum: self.inner.quorum,
            node_timeout: self.inner.node_timeout,
            retry_delay: self.inner.retry_delay,
            lease: self.inner.lease,
            max_name_len: self.inner.max_name_len,
            metric_names: self.inner.metric_names,
            key_prefix: self.inner.key_prefix.clone(),
            id: self.inner.id,
        };
        change(&mut nodes);
        RedlockNodes {
            inner: Arc::new(nodes),
        }
    }

    /// True once [`RedlockNodes::close`] was called (on this set or any
    /// clone of it, or a set derived from it with `with_...`).
    pub fn is_closed(&self) -> bool {
        self.inner.tasks().is_closed()
    }

    /// Shuts the set down as [`RedlockNodes::close_within`], with a bound
    /// of two of the longest per-node command timeouts plus a connect
    /// timeout (as [`Client::close`] for one client).
    ///
    /// # Errors
    /// As [`RedlockNodes::close_within`].
    pub async fn close(&self) -> Result<()> {
        let within = self
            .inner
            .connected()
            .iter()
            .map(|c| c.config().connect_timeout + c.config().command_timeout * 2)
            .max()
            .unwrap_or(ClientBuilder::DEFAULT_CONNECT_TIMEOUT);
        self.close_within(within).await
    }

    /// Shuts the set down and waits up to `within` for its background
    /// work, as [`Client::close_within`] does for one client: new
    /// acquires and waits fail with [`Error::Closed`] (waits under way
    /// end at once), held Redlocks are no longer renewed and report lost,
    /// down nodes are no longer reconnected, and it waits for the undo of
    /// cancelled rounds and the releases of dropped guards. The nodes'
    /// clients are closed too (with [`RedlockNodes::new`], the clients you
    /// passed). Release what you hold before closing: a guard released
    /// after `close` still sends its release to every node, but answers
    /// [`Error::NotHeld`], as for any Redlock whose validity ended first.
    ///
    /// # Errors
    /// [`Error::Timeout`] with `within` when background work was still
    /// running when the bound ran out.
    ///
    /// # Cancel safety
    /// Cancel safe: the set is closed from the first poll on; dropping the
    /// future only stops the waiting.
    pub async fn close_within(&self, within: Duration) -> Result<()> {
        let until = Instant::now() + within;
        let tasks = self.inner.tasks();
        tasks.close();
        let clients = self.inner.connected();
        for client in &clients {
            // Wakes the set's waiters registered on the nodes' hubs.
            client.shut();
        }
        let mut finished = tasks.wait(within).await;
        // Again: a reconnect that was under way may have brought a node up
        // since (its task is among those just waited for).
        let clients = self.inner.connected();
        for client in &clients {
            let left = until.saturating_duration_since(Instant::now());
            finished &= client.close_within(left).await.is_ok();
        }
        if finished {
            Ok(())
        } else {
            tracing::warn!(
                tasks = tasks.len(),
                "Redlock background work still running when the close bound ran out"
            );
            Err(Error::Timeout(within))
        }
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.inner.nodes.len()
    }

    /// Always false: a Redlock set has at least 3 nodes.
    pub fn is_empty(&self) -> bool {
        self.inner.nodes.is_empty()
    }

    /// Grants needed for a hold: a strict majority of the nodes.
    pub fn quorum(&self) -> usize {
        self.inner.quorum
    }

    /// The nodes' addresses, in the order given.
    pub fn addrs(&self) -> Vec<&str> {
        self.inner.nodes.iter().map(|n| n.addr.as_str()).collect()
    }

    /// The per-node timeout.
    pub fn node_timeout(&self) -> Duration {
        self.inner.node_timeout
    }

    /// A handle on the Redlock `name` (a watchdog-renewed lease of the
    /// first node's default length).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `name` is empty or too long.
    pub fn lock(&self, name: impl Into<String>) -> Result<Redlock> {
        let name = name.into();
        validate::name(&name, self.inner.max_name_len)?;
        let name = format!("{}{name}", self.inner.key_prefix);
        validate::name(&name, self.inner.max_name_len)?;
        Ok(Redlock {
            nodes: self.clone(),
            keys: Arc::new(Keys {
                token: crate::lock::lock_token(&name).into(),
                channel: crate::lock::lock_channel(&name).into(),
                name: name.into(),
            }),
            lease: None,
        })
    }
}

impl Nodes {
    /// The clients of the nodes connected now.
    fn connected(&self) -> Vec<Client> {
        self.nodes.iter().filter_map(|n| n.connected()).collect()
    }

    /// The set's background work (every node shares it; a set has at
    /// least three nodes).
    fn tasks(&self) -> &Tasks {
        &self.nodes[0].tasks
    }
}

impl Node {
    /// The client; `Err` while the node is down. A down node whose pause
    /// is over is reconnected in the background (the round does not wait
    /// for a whole connection setup: it has only the per-node timeout).
    fn client(self: &Arc<Self>) -> Result<Client> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match &mut *state {
            NodeState::Up(c) => Ok(c.clone()),
            NodeState::Down {
                builder,
                error,
                retry_at,
            } => {
                let err = Error::Connect {
                    addr: self.addr.clone(),
                    source: redis::RedisError::from((
                        redis::ErrorKind::Io,
                        "node down",
                        error.clone(),
                    )),
                };
                if Instant::now() >= *retry_at && !self.tasks.is_closed() {
                    // One reconnect at a time: the next is not due before
                    // this one has ended and set a new pause (or, should
                    // its task never finish, after it surely would have).
                    *retry_at =
                        Instant::now() + builder.config().connect_timeout * 2 + RECONNECT_PAUSE;
                    let builder: Box<ClientBuilder> = builder.clone();
                    let node = self.clone();
                    self.tasks.detach(
                        "reconnecting a Redlock node",
                        "the node stays down",
                        async move {
                            // A node down at connect may turn out to be
                            // another node's server under a second name: it
                            // is then never counted.
                            let built = (*builder).clone().build().await.and_then(|client| {
                                admit(&node.servers, &node.addr, &client).map(|()| client)
                            });
                            if let Err(e) = &built {
                                if e.is_invalid_argument() {
                                    tracing::warn!(node = %node.addr, error = %e, "Redlock node refused");
                                }
                            }
                            if let (Ok(client), true) = (&built, node.tasks.is_closed()) {
                                // The set closed while this connected.
                                client.shut();
                            }
                            let mut state = node.state.lock().unwrap_or_else(|e| e.into_inner());
                            *state = match built {
                                Ok(client) => NodeState::Up(client),
                                Err(e) => NodeState::Down {
                                    builder,
                                    error: e.to_string(),
                                    retry_at: Instant::now() + RECONNECT_PAUSE,
                                },
                            };
                        },
                    );
                }
                Err(err)
            }
        }
    }

    fn down_reason(&self) -> Option<String> {
        match &*self.state.lock().unwrap_or_else(|e| e.into_inner()) {
            NodeState::Up(_) => None,
            NodeState::Down { error, .. } => Some(error.clone()),
        }
    }

    /// The connected client, without trying to connect.
    fn connected(&self) -> Option<Client> {
        match &*self.state.lock().unwrap_or_else(|e| e.into_inner()) {
            NodeState::Up(c) => Some(c.clone()),
            NodeState::Down { .. } => None,
        }
    }
}

fn check_distinct<'a>(addrs: impl Iterator<Item = &'a str>) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for addr in addrs {
        if !seen.insert(addr) {
            return Err(Error::invalid(format!(
                "Redlock node {addr} is given twice: one server would count twice toward the majority"
            )));
        }
    }
    Ok(())
}

/// The key prefix every node's client shares (a lock must have one name
/// on all of them).
fn common_prefix<'a>(mut prefixes: impl Iterator<Item = &'a str>) -> Result<String> {
    let first = prefixes.next().unwrap_or_default();
    if prefixes.any(|p| p != first) {
        return Err(Error::invalid(
            "the Redlock nodes' clients have different key prefixes: a lock must have one name on every node",
        ));
    }
    Ok(first.to_owned())
}

fn check_count(n: usize) -> Result<()> {
    if n < 3 {
        return Err(Error::invalid(format!(
            "Redlock needs at least 3 independent primaries, got {n}: with one node it is a plain lock \
             with extra round trips (use Client::lock), and with two a majority is both, so it survives no failure"
        )));
    }
    if n.is_multiple_of(2) {
        return Err(Error::invalid(format!(
            "Redlock needs an odd number of nodes, got {n}: a majority of {n} is {}, which survives {} \
             failure(s), no more than {} nodes would, for one more round trip per request",
            n / 2 + 1,
            n - (n / 2 + 1),
            n - 1
        )));
    }
    Ok(())
}

/// A lease must leave validity after the drift allowance and one per-node
/// timeout (the longest a round can take).
fn check_timing(lease: Duration, node_timeout: Duration) -> Result<()> {
    validate::lease(lease)?;
    let spent = drift(lease) + node_timeout;
    if lease <= spent {
        return Err(Error::invalid(format!(
            "a Redlock lease of {lease:?} leaves no validity: the drift allowance ({:?}, 1% + 2 ms) \
             plus the per-node timeout ({node_timeout:?}) use it all; use a lease many times the per-node timeout",
            drift(lease)
        )));
    }
    Ok(())
}

/// A Redlock handle: a name over a [`RedlockNodes`] set. Cheap to clone.
///
/// Not reentrant: every acquisition uses a fresh owner id, so acquiring
/// again while holding waits for the first hold like any other contender.
#[derive(Debug, Clone)]
pub struct Redlock {
    nodes: RedlockNodes,
    keys: Arc<Keys>,
    /// A fixed lease, or `None` for a watchdog-renewed one.
    lease: Option<Duration>,
}

#[derive(Debug)]
struct Keys {
    /// The lock name: the lock hash's key on every node.
    name: Arc<str>,
    /// Fencing counter key (per node).
    token: Arc<str>,
    /// Release channel (per node).
    channel: Arc<str>,
}

/// What one node answered to an acquire request.
enum NodeGrant {
    /// Granted, with this node's fencing counter.
    Granted(u64),
    /// Held by another owner.
    Busy,
}

impl Redlock {
    /// This handle with a fixed lease (no watchdog renewal): the hold ends
    /// by itself when the lease runs out on the nodes.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a lease under 10 ms, beyond what
    /// Redis accepts, or one the drift allowance (1% + 2 ms) and the
    /// per-node timeout would use up.
    pub fn with_lease(&self, lease: Duration) -> Result<Redlock> {
        check_timing(lease, self.nodes.inner.node_timeout)?;
        Ok(Redlock {
            lease: Some(lease),
            ..self.clone()
        })
    }

    /// The lock's name (its key on every node).
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    fn lease(&self) -> Duration {
        self.lease.unwrap_or(self.nodes.inner.lease)
    }

    crate::engine::acquire::wait_methods! { acquire() -> RedlockGuard:
        /// Waits as long as it takes and acquires the lock on a majority.
        ///
        /// # Errors
        /// [`Error::NoQuorum`] when fewer than a majority of nodes answer a
        /// round (down, unreachable within the per-node timeout, or answering
        /// errors such as a wrong-type key): it fails at once rather than
        /// waiting for nodes to come back.
        ///
        /// # Cancel safety
        /// Cancel safe: a round cut short is undone on every node in the
        /// background (a release with the round's own owner id, sent after its
        /// acquire on the same connection), so nothing stays held but, on a
        /// node that cannot be reached, a grant until its lease runs out.
        lock;

        /// One round: the lock if a majority grants it now, `None` otherwise.
        ///
        /// # Errors
        /// As for [`Redlock::lock`].
        ///
        /// # Cancel safety
        /// Cancel safe, as [`Redlock::lock`].
        try_lock;

        /// Rounds until the lock is had or `wait` has passed.
        ///
        /// # Errors
        /// [`Error::InvalidArgument`] when `wait` overflows the clock; others
        /// as for [`Redlock::lock`].
        ///
        /// # Cancel safety
        /// Cancel safe, as [`Redlock::lock`].
        try_lock_for;
    }

    async fn acquire_inner(
        &self,
        wait: Option<Duration>,
        cancel: impl std::future::Future<Output = ()>,
    ) -> Result<Option<RedlockGuard>> {
        let deadline = wait.map(validate::deadline).transpose()?;
        let mut cancel = std::pin::pin!(cancel);
        let retry_delay = self.nodes.inner.retry_delay;
        let round = || async move {
            Ok(match self.round().await? {
                Some(guard) => Check::Done(guard),
                None => Check::NotYet(Some(Instant::now() + jitter(retry_delay))),
            })
        };
        let got = match round().await? {
            Check::Done(guard) => Some(guard),
            Check::NotYet(hint) | Check::Pending(hint) => {
                // Listen on the nodes the first round reached; between
                // rounds a random pause, cut short by a release announced
                // on any node (undone rounds announce nothing, so
                // contenders that split a round do not wake each other).
                let clients = self.nodes.inner.connected();
                let listen: Vec<_> = clients
                    .iter()
                    .map(|c| (c.hub(), &*self.keys.channel))
                    .collect();
                // It sleeps after joining whatever came meanwhile: no
                // message counters to compare.
                Wait::on_all(listen)
                    .until(deadline)
                    .after_check(Vec::new(), hint)
                    .sleep_after_join()
                    .run_with(round, std::future::pending, cancel.as_mut())
                    .await?
            }
        };
        let Some(guard) = got else {
            return Ok(None);
        };
        let cancelled =
            std::future::poll_fn(|cx| std::task::Poll::Ready(cancel.as_mut().poll(cx).is_ready()))
                .await;
        if cancelled {
            let _ = guard.release().await;
            return Ok(None);
        }
        Ok(Some(guard))
    }

    async fn acquire(&self, wait: Option<Duration>) -> Result<Option<RedlockGuard>> {
        self.acquire_unless(wait, std::future::pending()).await
    }

    /// One acquire round (see the module docs).
    async fn round(&self) -> Result<Option<RedlockGuard>> {
        let inner = &self.nodes.inner;
        if inner.tasks().is_closed() {
            return Err(Error::Closed {
                addr: format!("the Redlock nodes {}", self.nodes.addrs().join(", ")),
            });
        }
        let owner: Arc<str> = format!(
            "{}:{}",
            inner.id,
            NEXT_OWNER.fetch_add(1, Ordering::Relaxed)
        )
        .into();
        let lease = self.lease();
        let (trackers, tracked): (Vec<Tracker>, Vec<Tracked>) = inner
            .nodes
            .iter()
            .map(|_| crate::engine::batch::tracker())
            .unzip();
        // Per node, the round's request while something may have been
        // granted there: a dropped round is undone where it may have
        // granted, each node once its request settled.
        let lock = self.clone();
        let undone = owner.clone();
        let undo = undo::closure(move |after: Vec<Option<Tracked>>| {
            Box::pin(async move { lock.undo_round(undone, after).await })
        });
        let after: Vec<Option<Tracked>> = tracked.into_iter().map(Some).collect();
        let mut undo = Armed::new(inner.tasks(), UNDOING, after, undo);
        let start = Instant::now();
        let replies = join_all(inner.nodes.iter().zip(trackers).map(|(node, tracker)| {
            let owner = &owner;
            async move {
                let acquire = self.acquire_on(node, owner, lease, tracker);
                match tokio::time::timeout(inner.node_timeout, acquire).await {
                    Ok(reply) => reply,
                    Err(_) => Err(Error::Timeout(inner.node_timeout)),
                }
            }
        }))
        .await;
        let mut tokens = Vec::new();
        // The nodes that granted, by index.
        let mut granted_on = Vec::new();
        let mut busy = 0;
        let mut errors = Vec::new();
        for (i, (node, reply)) in inner.nodes.iter().zip(replies).enumerate() {
            match reply {
                Ok(NodeGrant::Granted(token)) => {
                    tokens.push(token);
                    granted_on.push(i);
                }
                Ok(NodeGrant::Busy) => {
                    // Nothing was granted there to this fresh owner.
                    busy += 1;
                    undo.state()[i] = None;
                }
                Err(e) => errors.push(format!("{}: {e}", node.addr)),
            }
        }
        let state = Arc::new(LeaseState::new(start, lease));
        if tokens.len() >= inner.quorum && !state.is_lost() {
            let after = undo.keep();
            let token = tokens.iter().copied().max().unwrap_or(0);
            // Each granting node's watchdog keeps that node's part of the
            // hold (renewing it every third of a watchdog lease, or only
            // timing a fixed one); the hold is valid while a majority of
            // parts are. Closing the set closes the nodes' watchdogs,
            // which marks the parts, and so the hold, lost.
            let renew = self.lease.is_none();
            let renewals: Vec<Registration> = granted_on
                .iter()
                .filter_map(|&i| inner.nodes[i].connected())
                .enumerate()
                .map(|(n, client)| {
                    let hold = Hold {
                        key: self.keys.name.clone(),
                        script: &scripts::RENEW_FIELD,
                        owner: owner.clone(),
                        lease,
                        renew,
                    };
                    // One part warns when a fixed lease nears its end.
                    client.renewer().register_part(hold, start, n == 0)
                })
                .collect();
            let quorum = Quorum::new(
                self.keys.name.clone(),
                state.clone(),
                renewals.iter().map(|r| r.state().clone()).collect(),
                inner.quorum,
            );
            let holding = RedlockHold {
                lock: self.clone(),
                owner,
                after: after.into_iter().flatten().collect(),
                lease: state.clone(),
                _quorum: quorum,
                renewals,
            };
            let labels =
                crate::engine::observe::Labels::of("redlock", self.name(), inner.metric_names);
            return Ok(Some(RedlockGuard {
                held: Held::new(holding, labels, Some(token), state),
                granted: tokens.len(),
            }));
        }
        // Not enough: undo where something may have been granted (nodes
        // that granted, and those that did not answer: theirs may land
        // late, so it waits for their request to settle), silently. The
        // next round waits for the undo at most one per-node timeout; the
        // rest goes on in the background.
        let after = undo.keep();
        let lock = self.clone();
        let undoing = inner
            .tasks()
            .spawn(async move { lock.undo_round(owner, after).await });
        let _ = tokio::time::timeout(inner.node_timeout, undoing).await;
        let answered = tokens.len() + busy;
        if answered < inner.quorum {
            return Err(Error::NoQuorum {
                name: self.keys.name.to_string(),
                answered,
                needed: inner.quorum,
                nodes: inner.nodes.len(),
                errors: errors.join("; "),
            });
        }
        Ok(None)
    }

    /// Releases `owner` on the nodes whose slot in `after` is `Some`, each
    /// once its acquire request settled, without announcing (nobody saw
    /// these grants).
    async fn undo_round(&self, owner: Arc<str>, after: Vec<Option<Tracked>>) {
        join_all(
            self.nodes
                .inner
                .nodes
                .iter()
                .zip(after)
                .filter_map(|(node, tracked)| tracked.map(|t| (node, t)))
                .map(|(node, tracked)| {
                    let owner = &owner;
                    async move {
                        tracked.settled().await;
                        let _ = self.release_on(node, owner, true).await;
                    }
                }),
        )
        .await;
    }

    async fn acquire_on(
        &self,
        node: &Arc<Node>,
        owner: &Arc<str>,
        lease: Duration,
        tracker: Tracker,
    ) -> Result<NodeGrant> {
        let client = node.client()?;
        // The reentrant lock's script and layout, a fresh owner each round.
        let call = AcquireRequest {
            key: self.keys.name.clone(),
            token_key: self.keys.token.clone(),
            lease,
            owner: owner.clone(),
            expected: 0,
        }
        .call();
        // The node client's batcher of the script for rounds: concurrent
        // rounds share script calls per node, in a lane of their own so a
        // round's short per-node timeout never waits behind the client's
        // other lock traffic.
        let batcher = client.batcher_in(&scripts::LOCK_ACQUIRE, Lane::Spanning);
        match batcher.call::<Vec<i64>>(call, Some(tracker)).await {
            Ok((reply, _)) => match reply.as_slice() {
                [acquired::NOW | acquired::EARLIER, token, ..] => {
                    Ok(NodeGrant::Granted(u64::try_from(*token).unwrap_or(0)))
                }
                [acquired::BUSY, ..] => Ok(NodeGrant::Busy),
                other => Err(Error::protocol(format!(
                    "unexpected acquire reply {other:?}"
                ))),
            },
            Err(e) => {
                let err = client.map_err(e, Some(&self.keys.name));
                Err(client
                    .name_wrong_key(err, &[(&self.keys.token, "string")])
                    .await)
            }
        }
    }

    /// Releases `owner`'s hold on one node: `Ok(true)` freed, `Ok(false)`
    /// not held there. `silent` for an undo: nothing is announced.
    async fn release_on(&self, node: &Arc<Node>, owner: &Arc<str>, silent: bool) -> Result<bool> {
        let client = node.client()?;
        let call = ReleaseRequest {
            key: self.keys.name.clone(),
            channel: self.keys.channel.clone(),
            token_key: self.keys.token.clone(),
            lease: self.lease(),
            owner: owner.clone(),
            // A Redlock owner holds once per node.
            expected: 1,
            successor: None,
            announce: if silent {
                Announce::Silently
            } else {
                Announce::Mode(client.notify_mode().code())
            },
            episode: 0,
            // No receipt: a node's release is not resent.
            receipt_ttl_ms: 0,
        }
        .call();
        // The node client's batcher of the script for rounds: concurrent
        // rounds share script calls per node, in a lane of their own so a
        // round's short per-node timeout never waits behind the client's
        // other lock traffic.
        let batcher = client.batcher_in(&scripts::LOCK_RELEASE, Lane::Spanning);
        match batcher.call::<Vec<i64>>(call, None).await {
            Ok((reply, _)) => Ok(reply.first() == Some(&released::LAST)),
            Err(e) => Err(client.map_err(e, Some(&self.keys.name))),
        }
    }

    /// Releases `owner` on every node at once, each bounded by the client's
    /// own command timeout, once the requests in `after` (the acquires of
    /// the round being undone) can no longer overtake it; answers (freed,
    /// not held, errors). Runs in its own task, so dropping the caller
    /// does not stop it.
    async fn release_everywhere(&self, owner: Arc<str>, after: Vec<Tracked>) -> Tally {
        let lock = self.clone();
        let task = self.nodes.inner.tasks().spawn(async move {
            // Never ahead of the acquires being undone.
            join_all(after.into_iter().map(Tracked::settled)).await;
            let replies = join_all(
                lock.nodes
                    .inner
                    .nodes
                    .iter()
                    .map(|node| lock.release_on(node, &owner, false)),
            )
            .await;
            let mut tally = Tally::default();
            for (node, reply) in lock.nodes.inner.nodes.iter().zip(replies) {
                match reply {
                    Ok(true) => tally.ok += 1,
                    Ok(false) => tally.gone += 1,
                    Err(e) => tally.errors.push(format!("{}: {e}", node.addr)),
                }
            }
            tally
        });
        task.await.unwrap_or_else(|e| Tally {
            errors: vec![format!("release task failed: {e}")],
            ..Tally::default()
        })
    }

    /// As [`Redlock::try_lock_for`] (`wait` of `None`: as long as it
    /// takes), but also gives up when `cancel` completes: checked between
    /// rounds (a round is bounded by about two per-node timeouts), and a
    /// grant that lands as `cancel` completes is released, the release
    /// awaited, before this returns `None`. Use it where a dropped future's
    /// background undo might not get to run (a program about to exit on a
    /// signal).
    ///
    /// # Errors
    /// As for [`Redlock::try_lock_for`].
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Redlock::lock`].
    pub async fn acquire_unless(
        &self,
        wait: Option<Duration>,
        cancel: impl std::future::Future<Output = ()>,
    ) -> Result<Option<RedlockGuard>> {
        let labels = crate::engine::observe::Labels::of(
            "redlock",
            self.name(),
            self.nodes.inner.metric_names,
        );
        crate::engine::observe::acquire(labels, self.name(), self.acquire_inner(wait, cancel)).await
    }
}

/// How the nodes answered one request sent to all of them.
#[derive(Debug, Default)]
struct Tally {
    /// Confirmed (released).
    ok: usize,
    /// Answered that the hold is not there.
    gone: usize,
    /// Per-node errors, "addr: error".
    errors: Vec<String>,
}

/// A random pause of 50% to 150% of `delay`.
fn jitter(delay: Duration) -> Duration {
    let ms = delay.as_millis().max(2) as u64;
    Duration::from_millis(rand::random_range(ms / 2..=ms + ms / 2))
}

/// What undoing a dropped round is, for a warning when it cannot run.
const UNDOING: (&str, &str) = (
    "undoing a cancelled Redlock round",
    "grants that landed stay until their lease runs out",
);

/// A Redlock held on a majority of nodes. Release it with
/// [`RedlockGuard::release`]; dropping it releases in the background.
#[derive(Debug)]
#[must_use = "dropping the guard releases the lock"]
pub struct RedlockGuard {
    /// The hold on the nodes, its token and validity.
    held: Held<RedlockHold>,
    /// Nodes that granted the hold.
    granted: usize,
}

/// A Redlock hold on a majority of nodes.
#[derive(Debug)]
struct RedlockHold {
    lock: Redlock,
    /// The hold's owner id.
    owner: Arc<str>,
    /// The granting round's requests: a release never overtakes a late
    /// grant of that round on a slow node.
    after: Vec<Tracked>,
    /// The validity: the whole of the nodes' parts.
    lease: Arc<LeaseState>,
    /// Keeps `lease` following the parts.
    _quorum: Arc<Quorum>,
    /// Each granting node's part, registered with its watchdog; dropping
    /// them stops the renewals.
    renewals: Vec<Registration>,
}

impl Holding for RedlockHold {
    const DROPPED: (&'static str, &'static str) = (
        "Redlock guard dropped",
        "the lock stays until its lease runs out",
    );

    fn name(&self) -> &str {
        self.lock.name()
    }

    fn tasks(&self) -> &Tasks {
        self.lock.nodes.inner.tasks()
    }

    /// Runs on the nodes in a task of its own, so a dropped call does not
    /// stop it.
    async fn release(self) -> Result<()> {
        let RedlockHold {
            lock,
            owner,
            after,
            lease,
            _quorum,
            renewals,
        } = self;
        // Renewed no more: the release goes out next.
        drop(renewals);
        let lost_before = lease.is_lost();
        lease.mark_lost();
        let tally = lock.release_everywhere(owner, after).await;
        let inner = &lock.nodes.inner;
        if lost_before || tally.gone > inner.nodes.len() - inner.quorum {
            return Err(Error::NotHeld {
                name: lock.keys.name.to_string(),
            });
        }
        if tally.ok + tally.gone < inner.quorum {
            return Err(Error::NoQuorum {
                name: lock.keys.name.to_string(),
                answered: tally.ok + tally.gone,
                needed: inner.quorum,
                nodes: inner.nodes.len(),
                errors: tally.errors.join("; "),
            });
        }
        Ok(())
    }

    /// A dropped guard whose hold was already lost (the set was closed,
    /// the validity ran out, too few nodes kept their part) was warned
    /// about when it was lost (the watchdogs' and the quorum's WARNs).
    fn worth_a_warning(error: &Error) -> bool {
        !matches!(error, Error::NotHeld { .. })
    }
}

impl crate::engine::observe::Grant for RedlockGuard {
    fn token(&self) -> Option<u64> {
        Some(self.held.token())
    }
}

impl RedlockGuard {
    /// The lock's name.
    pub fn name(&self) -> &str {
        self.held.name()
    }

    /// The largest of the granting nodes' fencing counters.
    ///
    /// Unlike a single-primary lock's token this is *not* strictly
    /// increasing across grants in all cases: two majorities share a node,
    /// but the largest counter of a later majority can be smaller than
    /// the largest of an earlier one (each node counts only the grants it
    /// saw, failed rounds included).
    /// Within the algorithm's assumptions a later grant's token is larger
    /// than an earlier grant's token *on the node they share*; see
    /// docs/safety.md before relying on it for fencing.
    pub fn fencing_token(&self) -> u64 {
        self.held.token()
    }

    /// How many nodes granted the hold (at least a majority).
    pub fn granted_nodes(&self) -> usize {
        self.granted
    }

    /// Releases the hold on every node.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the validity had run out before the release
    /// or a majority no longer held it (whatever it protected may have
    /// been touched by another holder); [`Error::NoQuorum`] when fewer than
    /// a majority could be reached to confirm (what they hold ends with the
    /// lease).
    ///
    /// # Cancel safety
    /// Cancel safe: the release runs in its own task and finishes if the
    /// future is dropped.
    pub async fn release(self) -> Result<()> {
        self.held.release().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_counts() {
        for n in [0, 1, 2, 4, 6] {
            let err = check_count(n).unwrap_err();
            assert!(err.is_invalid_argument(), "{n}: {err}");
        }
        for n in [3, 5, 7] {
            check_count(n).unwrap();
        }
        assert!(check_count(4).unwrap_err().to_string().contains("odd"));
    }

    #[test]
    fn timing() {
        check_timing(Duration::from_secs(30), Duration::from_millis(50)).unwrap();
        // 60 ms lease: drift 2.6 ms + 50 ms timeout leaves 7.4 ms.
        check_timing(Duration::from_millis(60), Duration::from_millis(50)).unwrap();
        let err = check_timing(Duration::from_millis(50), Duration::from_millis(50)).unwrap_err();
        assert!(err.to_string().contains("drift"), "{err}");
        assert!(check_timing(Duration::from_millis(5), Duration::from_millis(1)).is_err());
    }

    #[test]
    fn jitter_stays_in_range() {
        for _ in 0..1000 {
            let d = jitter(Duration::from_millis(50));
            assert!(d >= Duration::from_millis(25) && d <= Duration::from_millis(75));
        }
    }
}

crate::engine::guard_core::lease_view!(
    RedlockGuard,
    remaining = "The validity left (monotonic clock, conservative: the latest \
        end a majority of the nodes confirm, each measured from when the \
        grant or renewal that set it was sent, minus the drift allowance). \
        Zero once lost.",
    lost = "True once the validity has run out or fewer than a majority of the \
        nodes still keep their part (they answered that it is gone, or the set \
        was closed).",
    signal = "A signal that fires when the hold is lost (see \
        [`RedlockGuard::is_lost`]); it fires on its own timer at the end of \
        the validity, before any node's lease can run out.",
);
