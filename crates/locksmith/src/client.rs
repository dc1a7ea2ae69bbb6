//! [`Client`]: the connection to Redis that every primitive is made from.
//!
//! One `Client` owns one multiplexed command connection (shared by all clones
//! and all primitives made from it) to a single server, the primary of a
//! Sentinel group, or a Redis Cluster (see `topology.rs`), a client UUID
//! that names its lock owners the way Redisson does, and the defaults
//! primitives start from.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::FromRedisValue;
use uuid::Uuid;

use crate::engine::batch::Batcher;
use crate::engine::conn::{Acks, NotifyMode, Timing};
use crate::engine::lua::{Invocation, Lua};
use crate::engine::notify::{HubTimeouts, NotifyHub};
use crate::engine::renewal::Renewer;
use crate::engine::security::{
    Credentials, CredentialsProvider, Given, Rotation, Security, TlsOptions,
};
use crate::engine::subscriber::Source;
use crate::engine::task::Tasks;
use crate::engine::topology::{
    self, check_deployment, explain_connect, replica_acks, server_identity, server_version,
    Address, Conn,
};
use crate::error::{Error, Result};

/// The longest timeout or check period a client accepts: a day. Longer
/// values are mistakes (and would overflow clock arithmetic).
pub(crate) const MAX_PERIOD: Duration = Duration::from_secs(86_400);

/// Options for a [`Client`], set through [`ClientBuilder`].
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// Bounds how long dialling Redis may take, so a dead address fails fast
    /// instead of hanging the caller.
    pub(crate) connect_timeout: Duration,
    /// Bounds every command; without it a black-holed connection would block
    /// lock calls forever.
    pub(crate) command_timeout: Duration,
    /// Lease used by watchdog-managed locks; renewed every third of it.
    pub(crate) lease: Duration,
    /// Upper bound on primitive names, so a runaway caller cannot create
    /// huge keys.
    pub(crate) max_name_len: usize,
    /// Consecutive local hand-offs of one lock before a release frees it
    /// for everyone (0 disables hand-off).
    pub(crate) max_local_handoffs: u32,
    /// How often the pub/sub connection is checked with PING, so a
    /// half-open connection is replaced instead of silently delivering
    /// nothing.
    pub(crate) pubsub_ping_interval: Duration,
    /// Longest sleep of a semaphore or latch waiter between re-checks when
    /// no message arrives (pub/sub may lose one; these have no lease to
    /// bound the wait by).
    pub(crate) recheck_interval: Duration,
    /// How releases are announced on a cluster; `None` picks what Redisson
    /// does (sharded on Redis 7+, classic before).
    pub(crate) cluster_notify: Option<NotifyMode>,
    /// Replica acknowledgement of grants, renewals and releases; `None`
    /// decides from the deployment (see `ClientBuilder::replica_acks`).
    pub(crate) replica_acks: Option<Acks>,
    /// The acknowledgement timeout where `replica_acks` is left to the
    /// deployment (see `ClientBuilder::replica_ack_timeout`).
    pub(crate) replica_ack_timeout: Option<Duration>,
    /// Whether metrics carry lock names as a label.
    pub(crate) metric_names: bool,
    /// Whether final releases leave a receipt that lets a resend tell
    /// "released" from "already lost" (see `ClientBuilder::release_receipts`).
    pub(crate) release_receipts: bool,
    /// TLS options (see `ClientBuilder::tls`).
    pub(crate) tls: TlsOptions,
    /// Credentials for the Sentinels themselves.
    pub(crate) sentinel_credentials: Option<Credentials>,
    /// Put before every primitive's name (see `ClientBuilder::key_prefix`).
    pub(crate) key_prefix: String,
    /// Rotating credentials and how often to ask for them.
    pub(crate) credentials: Option<ProviderHandle>,
}

/// A credentials provider in the options (printed without its contents).
#[derive(Clone)]
pub(crate) struct ProviderHandle {
    /// The caller's provider.
    pub(crate) provider: Arc<dyn CredentialsProvider>,
    /// How often it is asked again.
    pub(crate) refresh: Duration,
}

impl fmt::Debug for ProviderHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderHandle")
            .field("refresh", &self.refresh)
            .finish_non_exhaustive()
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            connect_timeout: ClientBuilder::DEFAULT_CONNECT_TIMEOUT,
            command_timeout: ClientBuilder::DEFAULT_COMMAND_TIMEOUT,
            lease: ClientBuilder::DEFAULT_LEASE,
            max_name_len: ClientBuilder::DEFAULT_MAX_NAME_LEN,
            max_local_handoffs: ClientBuilder::DEFAULT_MAX_LOCAL_HANDOFFS,
            pubsub_ping_interval: ClientBuilder::DEFAULT_PUBSUB_PING_INTERVAL,
            recheck_interval: ClientBuilder::DEFAULT_RECHECK_INTERVAL,
            cluster_notify: None,
            replica_acks: None,
            replica_ack_timeout: None,
            metric_names: false,
            release_receipts: false,
            tls: TlsOptions::default(),
            sentinel_credentials: None,
            key_prefix: String::new(),
            credentials: None,
        }
    }
}

/// Which queue of a script's requests a batcher serves (see
/// [`Client::batcher_in`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Lane {
    /// The client's own handles.
    Own,
    /// Requests made for a caller that spans several clients, bounded by a
    /// short per-node timeout (Redlock rounds).
    Spanning,
}

/// The arguments of a script call that takes none ([`Client::run_script`]).
pub(crate) const NO_ARGS: &[&str] = &[];

/// Builds a [`Client`] with non-default options.
///
/// The URL names the deployment:
///
/// | form | deployment |
/// |---|---|
/// | `redis://[[user]:pass@]host[:port][/db]` | one server |
/// | `redis+sentinel://[[user]:pass@]host:port[,host:port…]/service[/db]` | the primary that these Sentinels name for `service`, followed across failovers (credentials are for the data nodes) |
/// | `redis+cluster://[[user]:pass@]host:port[,host:port…]` | a Redis Cluster, from these seed nodes |
///
/// ```no_run
/// # async fn demo() -> locksmith::Result<()> {
/// use std::time::Duration;
/// let client = locksmith::Client::builder("redis+cluster://10.0.0.1:7000,10.0.0.2:7000")
///     .connect_timeout(Duration::from_secs(2))
///     .command_timeout(Duration::from_secs(1))
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    /// The Redis URL as the caller gave it; parsed in `build` so a bad URL
    /// surfaces as an error, not a panic.
    url: String,
    /// Options collected so far.
    config: Config,
    /// The caller's own redis-rs configuration, when built from one
    /// ([`ClientBuilder::from_redis_client`], [`ClientBuilder::from_cluster`]).
    given: Option<Given>,
}

impl ClientBuilder {
    /// The options collected so far.
    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// What the builder will connect to, as errors describe it (for
    /// telling Redlock's nodes apart).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a URL that does not parse.
    pub(crate) fn describe_address(&self) -> Result<String> {
        match &self.given {
            Some(Given::Single(_, url)) => Ok(Address::Single(url.clone()).describe()),
            // Built as the description of the given seeds or Sentinels.
            #[allow(unreachable_patterns)]
            Some(_) => Ok(self.url.clone()),
            None => Address::parse(&self.url, self.config.tls.wanted()).map(|a| a.describe()),
        }
    }

    /// Default bound on establishing a connection: 5 seconds.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
    /// Default bound on each command: 3 seconds.
    pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(3);
    /// Default watchdog lease: 30 seconds, as in Redisson.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
    /// Default cap on primitive names: 64 KiB.
    pub const DEFAULT_MAX_NAME_LEN: usize = 64 * 1024;
    /// Default cap on consecutive local hand-offs of one lock: 16.
    pub const DEFAULT_MAX_LOCAL_HANDOFFS: u32 = 16;
    /// Default wait for replica acknowledgements: 1 second, as Redisson's
    /// `slavesSyncTimeout`.
    pub const DEFAULT_REPLICA_ACK_TIMEOUT: Duration = crate::engine::conn::DEFAULT_ACK_TIMEOUT;
    /// Default health-check period of the pub/sub connection: 5 seconds.
    pub const DEFAULT_PUBSUB_PING_INTERVAL: Duration = Duration::from_secs(5);
    /// Default longest wait between re-checks of a semaphore or latch
    /// waiter that hears nothing: 1 second.
    pub const DEFAULT_RECHECK_INTERVAL: Duration = Duration::from_secs(1);

    /// Starts a builder for the deployment at `url` (see the table above).
    pub fn new(url: impl Into<String>) -> Self {
        ClientBuilder {
            url: url.into(),
            config: Config::default(),
            given: None,
        }
    }

    /// Starts a builder over a redis-rs client the application made
    /// already, for one server: its address, database, TLS settings
    /// (certificates included) and credentials are used as they are, so
    /// they are given once. Every connection locksmith opens (the command
    /// connection and the pub/sub connection) is made from this client;
    /// the builder's timeouts apply to them.
    ///
    /// TLS options ([`ClientBuilder::tls`], [`ClientBuilder::tls_ca_file`], ...)
    /// and a credentials provider belong to the redis-rs client here:
    /// `build` refuses them with [`Error::InvalidArgument`].
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let redis = redis::Client::open("redis://app:secret@127.0.0.1:6379/0")?;
    /// let locks = locksmith::ClientBuilder::from_redis_client(redis.clone())
    ///     .build()
    ///     .await?;
    /// let guard = locks.lock("orders:42")?.lock().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn from_redis_client(client: redis::Client) -> Self {
        let url = Given::single_url(&client);
        ClientBuilder {
            url: url.clone(),
            config: Config::default(),
            given: Some(Given::Single(client, url)),
        }
    }

    /// Starts a builder for a Redis Cluster whose client settings the
    /// application already has: `nodes` are seed URLs (`redis://host:port`
    /// or `rediss://host:port`, each without credentials if `configure`
    /// sets them), and `configure` applies the application's settings
    /// (TLS mode, certificates, user, password, credentials provider, ...)
    /// to each cluster client builder locksmith makes. locksmith makes
    /// three clients from it, as it does from a URL: one that resends a
    /// command whose reply was lost (idempotent calls), one that never
    /// does (calls that must run at most once), and a RESP3 one for
    /// release notifications; it then sets its own timeouts, retries and
    /// push channel on each, after `configure`.
    ///
    /// TLS options and a credentials provider of this builder are refused
    /// by `build` ([`Error::InvalidArgument`]): `configure` carries them.
    ///
    /// ```no_run
    /// # async fn demo() -> locksmith::Result<()> {
    /// let locks = locksmith::ClientBuilder::from_cluster(
    ///     ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379"],
    ///     |builder| builder.username("app").password("secret"),
    /// )
    /// .build()
    /// .await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub fn from_cluster<I, S, F>(nodes: I, configure: F) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
        F: Fn(redis::cluster::ClusterClientBuilder) -> redis::cluster::ClusterClientBuilder
            + Send
            + Sync
            + 'static,
    {
        let seeds: Vec<String> = nodes.into_iter().map(Into::into).collect();
        ClientBuilder {
            // Stands for the seeds in messages; the seeds themselves (with
            // any credentials) go to the cluster clients as given.
            url: Address::Cluster {
                seeds: seeds.clone(),
            }
            .describe(),
            config: Config::default(),
            given: Some(Given::Cluster(std::sync::Arc::new(configure), seeds)),
        }
    }

    /// Starts a builder for a Sentinel-managed primary whose client
    /// settings the application already has: `sentinels` are the
    /// Sentinels' URLs (`redis://[user:pass@]host:port`, credentials being
    /// the Sentinels' own), `service` the monitored name, and `configure`
    /// applies the application's settings to the Sentinel client builder
    /// locksmith makes (the data nodes' user, password, database and TLS
    /// certificates; the Sentinels' TLS). Every connection to a primary,
    /// commands and release notifications, comes from that client. The
    /// `+switch-master` watcher, which makes a failover noticed at once,
    /// connects to each Sentinel with what its URL says (credentials, a
    /// `rediss` scheme, the system's CA roots); a Sentinel it cannot reach
    /// that way is not watched, and a failover is then noticed on the
    /// first error instead.
    ///
    /// TLS options, a credentials provider and `sentinel_credentials` of
    /// this builder are refused by `build` ([`Error::InvalidArgument`]).
    ///
    /// ```no_run
    /// # async fn demo() -> locksmith::Result<()> {
    /// let locks = locksmith::ClientBuilder::from_sentinel(
    ///     ["redis://10.0.0.5:26379", "redis://10.0.0.6:26379"],
    ///     "orders",
    ///     |builder| {
    ///         builder
    ///             .set_client_to_redis_username("app")
    ///             .set_client_to_redis_password("secret")
    ///     },
    /// )
    /// .build()
    /// .await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub fn from_sentinel<I, S, F>(sentinels: I, service: impl Into<String>, configure: F) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
        F: Fn(redis::sentinel::SentinelClientBuilder) -> redis::sentinel::SentinelClientBuilder
            + Send
            + Sync
            + 'static,
    {
        let sentinels: Vec<String> = sentinels.into_iter().map(Into::into).collect();
        let service = service.into();
        ClientBuilder {
            url: Address::Sentinel {
                sentinels: sentinels.clone(),
                service: service.clone(),
                username: None,
                password: None,
                db: 0,
            }
            .describe(),
            config: Config::default(),
            given: Some(Given::Sentinel(
                std::sync::Arc::new(configure),
                sentinels,
                service,
            )),
        }
    }

    /// How long a connection attempt may take before failing with
    /// [`Error::Connect`] or [`Error::Timeout`].
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout = timeout;
        self
    }

    /// How long any single command may wait for its reply before failing
    /// with [`Error::Timeout`].
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.config.command_timeout = timeout;
        self
    }

    /// Whether a final release leaves a short-lived receipt on the server
    /// (default off).
    ///
    /// A release whose reply is lost (a timeout, a dropped connection) is
    /// sent again. When the resend finds the hold gone, two histories fit:
    /// the first send released it, or the hold had already ended before
    /// (its lease ran out, it was force-unlocked, or a restart without
    /// persistence or a failover wiped it). Without receipts that release
    /// answers [`Error::Unconfirmed`], never `Ok`. With receipts, each
    /// final release of a lock, fair lock, read-write lock or simple lock
    /// also writes `{NAME}:locksmith_released:<owner>` (the simple lock's:
    /// `<token>` for `<owner>`; expiring once no resend can
    /// come, about `5 × command_timeout + 2 × connect_timeout`), so the
    /// resend answers exactly: `Ok` when its first send released the hold,
    /// [`Error::NotHeld`] when the hold was lost. Redisson's unlock writes
    /// a similar key on every release.
    ///
    /// The price is one more write per release: about 1.3 µs of server
    /// time per lock and release pair, some 15% of an uncontended
    /// pair's server time (docs/performance.md). Turn it on when a caller
    /// acts on the difference between a released and a lost hold, e.g.
    /// to decide whether work done under the lock must be checked again.
    pub fn release_receipts(mut self, on: bool) -> Self {
        self.config.release_receipts = on;
        self
    }

    /// Takes the credentials of every connection from `provider` instead
    /// of the URL: asked once when the client is built (within the connect
    /// timeout; its error is the build's error), then every `refresh`.
    /// Each new answer is sent as `AUTH` on the live command connections
    /// (every cluster node's too), and every connection opened afterwards
    /// (a reconnect, a failover, the pub/sub connection, which cannot
    /// re-authenticate while subscribed and takes the latest credentials
    /// whenever it is opened) uses it; holds, waits and renewals go on
    /// throughout. A provider that fails or does not answer within the
    /// connect timeout is logged and asked again at the next refresh; the
    /// last credentials stay in use. Refresh well before a token expires
    /// (a third of its life, say).
    pub fn credentials_provider(
        mut self,
        provider: impl CredentialsProvider,
        refresh: Duration,
    ) -> Self {
        self.config.credentials = Some(ProviderHandle {
            provider: Arc::new(provider),
            refresh,
        });
        self
    }

    /// Puts `prefix` before the name of every primitive made from this
    /// client, so several applications can share one Redis without their
    /// names meeting: `key_prefix("app1:")` makes `lock("orders")` the key
    /// `app1:orders`, and every auxiliary key and channel derives from that
    /// name as usual (`redisson_lock__channel:{app1:orders}`, ...). A hash
    /// tag in a name stays the hash tag (`app1:{user:7}:cart` lives in the
    /// slot of `user:7`), so the prefix may not contain `{` or `}`. The
    /// length limit counts the prefix. `name()` of a primitive answers the
    /// prefixed name, as stored in Redis.
    ///
    /// Sharing a lock with Redisson: give the Java side the same mapping
    /// (a `NameMapper` that prepends the same prefix), or the two sides
    /// name different keys.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.config.key_prefix = prefix.into();
        self
    }

    /// Uses TLS even when the URL's scheme is a plain one (`redis://`,
    /// `redis+sentinel://`, `redis+cluster://` are taken as `rediss://`,
    /// `rediss+sentinel://`, `rediss+cluster://`). A `rediss…` URL needs
    /// no call. Without a CA file the servers' certificates are checked
    /// against the system's roots.
    pub fn tls(mut self, on: bool) -> Self {
        self.config.tls.force = on;
        self
    }

    /// Checks the servers' certificates against the certificate
    /// authorities in this PEM file (read when the client is built)
    /// instead of the system's roots. Applies to every connection: the
    /// command and pub/sub connections, the Sentinels and every node of a
    /// cluster. Implies TLS; a URL that cannot carry it (a Unix socket) is
    /// refused.
    pub fn tls_ca_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.config.tls.ca_file = Some(path.into());
        self
    }

    /// Presents this client certificate and private key (PEM files, read
    /// when the client is built) to servers that ask for one (mutual TLS:
    /// `tls-auth-clients yes`). Implies TLS.
    pub fn tls_client_cert(
        mut self,
        cert: impl Into<std::path::PathBuf>,
        key: impl Into<std::path::PathBuf>,
    ) -> Self {
        self.config.tls.client_cert = Some((cert.into(), key.into()));
        self
    }

    /// Skips every check of the servers' certificates (issuer, expiry,
    /// host name). **For tests only**: anyone between the client and the
    /// server can read and change the traffic. Implies TLS.
    pub fn tls_insecure(mut self, on: bool) -> Self {
        self.config.tls.insecure = on;
        self
    }

    /// Credentials for the Sentinels themselves (a Sentinel configured
    /// with `requirepass` or ACL users); the URL's credentials are the
    /// data nodes'. `username` `None` is the default user.
    pub fn sentinel_credentials(
        mut self,
        username: Option<&str>,
        password: impl Into<String>,
    ) -> Self {
        self.config.sentinel_credentials = Some(Credentials {
            username: username.map(str::to_owned),
            password: Some(password.into()),
        });
        self
    }

    /// The lease of watchdog-managed locks (default 30 s). The watchdog
    /// renews it every third of its length while the lock is held.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.config.lease = lease;
        self
    }

    /// The longest accepted primitive name in bytes (default 64 KiB).
    pub fn max_name_len(mut self, len: usize) -> Self {
        self.config.max_name_len = len;
        self
    }

    /// How many times in a row a lock may be handed from one owner of this
    /// client straight to another that waits for it while other clients
    /// wait too (default 16; 0 disables local hand-off).
    ///
    /// A local hand-off grants the lock to the next waiter of this client in
    /// the release's own script call, saving the waiter a round trip. It
    /// sends no release message, so after this many hand-offs in a row the
    /// release script checks whether any other client listens for the lock
    /// and, if one does, frees the lock for real so everyone gets a chance.
    /// Lower values favour fairness across processes, higher values
    /// throughput inside one. See docs/locks.md.
    pub fn max_local_handoffs(mut self, n: u32) -> Self {
        self.config.max_local_handoffs = n;
        self
    }

    /// How often the client's pub/sub connection (the one waiters are woken
    /// through) is checked with `PING` (default 5 s). A connection that
    /// fails the check within the command timeout is replaced and every
    /// waiter re-checks its lock. Without the check a half-open connection
    /// (a NAT or firewall that dropped it, a server that restarted behind a
    /// proxy) would deliver no release messages, and waiters would only
    /// notice a release when the holder's lease ran out.
    pub fn pubsub_ping_interval(mut self, interval: Duration) -> Self {
        self.config.pubsub_ping_interval = interval;
        self
    }

    /// The longest a semaphore or latch waiter sleeps between re-checks
    /// when no message arrives (default 1 s). Waiters are woken by pub/sub
    /// messages, which Redis delivers at most once; a lost one costs a
    /// waiter at most this long. (Lock waiters are bounded by the holder's
    /// lease instead.) Shorter values cost one read or acquire attempt per
    /// waiter per interval.
    pub fn recheck_interval(mut self, interval: Duration) -> Self {
        self.config.recheck_interval = interval;
        self
    }

    /// Whether metrics carry each object's name as a `name` label (default
    /// false: one series per name can be too many for a metrics backend
    /// when names carry ids, as `order:{id}` does). See the metrics list in
    /// [`guides::operations`](crate::guides::operations).
    ///
    /// Install the metrics recorder before the client's first acquire: the
    /// client registers each kind's metric handles on first use and keeps
    /// them (with names on, handles are registered at each acquire and
    /// grant instead).
    pub fn metric_names(mut self, on: bool) -> Self {
        self.config.metric_names = on;
        self
    }

    /// How lock releases are announced on a Redis Cluster (default: what
    /// Redisson does there: [`NotifyMode::Sharded`] on Redis 7 and later,
    /// [`NotifyMode::Classic`] before). Use [`NotifyMode::Classic`] to share
    /// locks with clients that only know `SUBSCRIBE` (node-redisson, for
    /// one), and [`NotifyMode::Both`] for a fleet that mixes both kinds.
    /// Ignored on a single server and behind Sentinel, where notifications
    /// are always classic, as in Redisson.
    pub fn cluster_notify(mut self, mode: NotifyMode) -> Self {
        self.config.cluster_notify = Some(mode);
        self
    }

    /// Requires `min` replicas to acknowledge every grant, renewal and
    /// release within `timeout` (Redis `WAIT`, sent in the same round trip).
    /// A grant acknowledged by fewer is rolled back and answered with
    /// [`Error::NotReplicated`]; a renewal acknowledged by fewer does not
    /// extend the holder's local lease (so the lost signal fires on time if
    /// the replicas stay behind); a release acknowledged by fewer is logged.
    /// `min` 0 turns acknowledgement off.
    ///
    /// `timeout` must be shorter than the command timeout: `WAIT` travels
    /// in the same round trip as the call it follows.
    ///
    /// Default: on when the primary has replicas (every primary, on a
    /// cluster), with `min` 1 and a timeout of
    /// [`DEFAULT_REPLICA_ACK_TIMEOUT`](Self::DEFAULT_REPLICA_ACK_TIMEOUT)
    /// or half the command timeout, whichever is shorter:
    /// a failover promotes a replica, and a grant no replica has seen would
    /// vanish with the old primary (Redisson's `checkLockSyncedSlaves` makes
    /// the same choice). This narrows the window in which a failover loses
    /// a lock; it does not close it (the promoted replica may not be the one
    /// that acknowledged, and `WAIT` does not make a write durable). Fencing
    /// tokens are what protect the resource: see docs/safety.md.
    pub fn replica_acks(mut self, min: u32, timeout: Duration) -> Self {
        self.config.replica_acks = Some(Acks { min, timeout });
        self
    }

    /// How long a grant, renewal or release waits for its replica
    /// acknowledgement where acknowledgement is left to the deployment (on
    /// where the primary has replicas, see [`ClientBuilder::replica_acks`]).
    /// Unlike `replica_acks`, this asks for nothing at connect: a deployment
    /// without replicas (or with one briefly away) connects as it would
    /// without it, with acknowledgement off. Raise it where replicas lag
    /// behind under load (a busy host, a managed service across zones)
    /// and grants are refused with [`Error::NotReplicated`] that a longer
    /// wait would have acknowledged. An explicit `replica_acks` sets its
    /// own timeout and overrides this one.
    ///
    /// Must be at least 1 ms and shorter than the command timeout (`WAIT`
    /// travels in the same round trip as the call it follows); `build`
    /// refuses it otherwise. Default: the shorter of
    /// [`DEFAULT_REPLICA_ACK_TIMEOUT`](Self::DEFAULT_REPLICA_ACK_TIMEOUT)
    /// and half the command timeout.
    pub fn replica_ack_timeout(mut self, timeout: Duration) -> Self {
        self.config.replica_ack_timeout = Some(timeout);
        self
    }

    /// Validates the options and connects.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a malformed URL, a zero timeout or
    /// ping interval (or one over a day), a lease too short to hold anything (see
    /// [`Lock::with_lease`](crate::Lock::with_lease)), a URL whose form does
    /// not match the deployment (a cluster node given as `redis://`, a
    /// standalone server given as `redis+cluster://`), or a cluster whose
    /// slots are not all served; [`Error::Unsupported`] for a server older
    /// than Redis 6.0.6 (on a cluster, the oldest primary counts), or
    /// [`NotifyMode::Sharded`] or [`NotifyMode::Both`] asked for on a
    /// cluster older than Redis 7.0 (the message names the server's
    /// version; [`NotifyMode::Classic`] works there); [`Error::Connect`] or
    /// [`Error::Timeout`] when the deployment cannot be reached in time
    /// (the message names the address, and for Sentinel says to check the
    /// addresses and the service name); [`Error::Protocol`] when the
    /// server names no version the library can read.
    ///
    /// Metrics go to the `metrics` recorder current at each kind's first
    /// acquire (the client keeps the handles it registers then): install the
    /// recorder before that.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future closes the connection being opened;
    /// nothing is left on the server.
    pub async fn build(self) -> Result<Client> {
        let config = self.config;
        if config.connect_timeout.is_zero() || config.command_timeout.is_zero() {
            return Err(Error::invalid("timeouts must be greater than zero"));
        }
        for (what, value) in [
            ("pubsub_ping_interval", config.pubsub_ping_interval),
            ("recheck_interval", config.recheck_interval),
        ] {
            if value.is_zero() {
                return Err(Error::invalid(format!("{what} must be greater than zero")));
            }
        }
        for (what, value) in [
            ("connect_timeout", config.connect_timeout),
            ("command_timeout", config.command_timeout),
            ("pubsub_ping_interval", config.pubsub_ping_interval),
            ("recheck_interval", config.recheck_interval),
        ] {
            if value > MAX_PERIOD {
                return Err(Error::invalid(format!(
                    "{what} of {value:?} is longer than the limit of {MAX_PERIOD:?}"
                )));
            }
        }
        crate::engine::validate::lease(config.lease)?;
        if config.max_name_len == 0 {
            return Err(Error::invalid("max_name_len must be greater than zero"));
        }
        crate::engine::validate::key_prefix(&config.key_prefix, config.max_name_len)?;
        let mut address = match &self.given {
            Some(Given::Single(_, url)) => Address::Single(url.clone()),
            #[cfg(feature = "cluster")]
            Some(Given::Cluster(_, seeds)) => Address::seeds(seeds)?,
            #[cfg(feature = "sentinel")]
            Some(Given::Sentinel(_, sentinels, service)) => Address::sentinels(sentinels, service)?,
            None => Address::parse(&self.url, config.tls.wanted())?,
        };
        if let Some(credentials) = &config.sentinel_credentials {
            if !matches!(address, Address::Sentinel { .. }) {
                return Err(Error::invalid(
                    "sentinel_credentials is for redis+sentinel:// URLs only",
                ));
            }
            address = address.with_sentinel_credentials(credentials);
        }
        let tasks = Tasks::default();
        let mut security = match self.given {
            Some(given) => {
                if config.tls.wanted()
                    || config.credentials.is_some()
                    || config.sentinel_credentials.is_some()
                {
                    return Err(Error::invalid(
                        "a client built from a redis-rs client, cluster or Sentinel configuration \
                         takes its TLS settings and credentials from it: set them there, not on \
                         the builder",
                    ));
                }
                Security::given(given)
            }
            None => {
                let tls = crate::engine::security::is_tls_url(&self.url) || config.tls.wanted();
                Security::load(&config.tls, tls)?
            }
        };
        if let Some(handle) = &config.credentials {
            if handle.refresh.is_zero() || handle.refresh > MAX_PERIOD {
                return Err(Error::invalid(format!(
                    "the credentials refresh period must be between 1 ms and {MAX_PERIOD:?}, got {:?}",
                    handle.refresh
                )));
            }
            let rotation = Rotation::start(
                handle.provider.clone(),
                handle.refresh,
                config.connect_timeout,
                &tasks,
            )
            .await?;
            security = security.with_rotation(rotation);
        }
        let timing = Timing {
            connect: config.connect_timeout,
            command: config.command_timeout,
        };
        let conn = topology::connect(&address, timing, &security, &config.key_prefix)
            .await
            .map_err(|e| explain_connect(&address, e))?;
        check_deployment(&address, &conn).await?;
        let version = server_version(&address, &conn).await?;
        let server_id = server_identity(&address, &conn).await?;
        let (acks, ack_note) = replica_acks(
            &address,
            &conn,
            config.replica_acks,
            config.replica_ack_timeout,
            config.command_timeout,
        )
        .await?;
        let mut notes: Vec<String> = ack_note.into_iter().collect();
        let notify = match &address {
            Address::Cluster { .. } => {
                let describe = address.describe();
                let product = &version.product;
                if !version.has_7_0() {
                    // Known now, not at the first batch of several slots:
                    // a script flagged allow-cross-slot-keys does not
                    // compile before 7.0.
                    #[cfg(feature = "cluster")]
                    if let Some(cluster) = conn.cluster() {
                        cluster.no_cross_slot_scripts();
                    }
                    tracing::warn!(addr = %describe, server = %product, "scripts cannot reach several slots before Redis 7.0; a batch of several slots goes as one call per slot");
                    metrics::counter!("locksmith_capability_missing_total", "capability" => "cross_slot_scripts").increment(1);
                    notes.push(format!(
                        "batched calls carry one slot each: {describe} runs {product}, and scripts reach several slots from Redis 7.0"
                    ));
                }
                match config.cluster_notify {
                    Some(NotifyMode::Classic) => NotifyMode::Classic,
                    Some(mode) if !version.has_7_0() => {
                        return Err(Error::Unsupported {
                            addr: describe,
                            server: product.clone(),
                            needs: "Redis 7.0 or later".to_owned(),
                            feature: format!(
                                "{mode:?} notifications (sharded pub/sub); NotifyMode::Classic works on this server"
                            ),
                        });
                    }
                    Some(mode) => mode,
                    None if version.has_7_0() && topology::sharded_pubsub(&conn).await => {
                        NotifyMode::Sharded
                    }
                    None => {
                        let why = if version.has_7_0() {
                            "it refuses SPUBLISH".to_owned()
                        } else {
                            format!("it runs {product}")
                        };
                        tracing::warn!(addr = %describe, "sharded pub/sub unavailable ({why}); release notifications use classic PUBLISH");
                        metrics::counter!("locksmith_capability_missing_total", "capability" => "sharded_pubsub").increment(1);
                        notes.push(format!(
                            "release notifications use classic pub/sub: {describe} has no sharded pub/sub ({why})"
                        ));
                        NotifyMode::Classic
                    }
                }
            }
            _ => NotifyMode::Classic,
        };
        let source = match (&address, &conn) {
            (Address::Single(url), _) => Source::Single(security.client(url)?, security.clone()),
            #[cfg(feature = "sentinel")]
            (_, Conn::Sentinel(sentinel)) => Source::Sentinel(sentinel.clone()),
            #[cfg(feature = "cluster")]
            (Address::Cluster { seeds }, _) => Source::Cluster {
                seeds: seeds.clone(),
                timing,
                mode: notify,
                security: security.clone(),
            },
            _ => return Err(Error::invalid("URL and connection disagree")),
        };
        Ok(Client {
            inner: Arc::new(Inner {
                id: Uuid::new_v4(),
                addr: address.describe(),
                server_id,
                security: security.clone(),
                node_prefix: address.node_prefix(),
                single_url: match &address {
                    Address::Single(url) => Some(url.clone()),
                    _ => None,
                },
                notes,
                hub: NotifyHub::new(
                    source,
                    HubTimeouts {
                        connect: config.connect_timeout,
                        command: config.command_timeout,
                        ping_interval: config.pubsub_ping_interval,
                    },
                    tasks.clone(),
                ),
                renewer: Renewer::new(conn.clone(), acks),
                tasks,
                shutting: Mutex::new(()),
                acks,
                rooms: Mutex::new(HashMap::new()),
                batchers: Mutex::new(HashMap::new()),
                labels: Mutex::new(Vec::new()),
                topology: match conn {
                    Conn::Single(_) => Topology::Single,
                    #[cfg(feature = "sentinel")]
                    Conn::Sentinel(_) => Topology::Sentinel,
                    #[cfg(feature = "cluster")]
                    Conn::Cluster(_) => Topology::Cluster,
                },
                notify,
                conn,
                config,
            }),
        })
    }
}

/// The kind of deployment a [`Client`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Topology {
    /// One server (`redis://`).
    Single,
    /// The primary of a Sentinel-managed group (`redis+sentinel://`).
    Sentinel,
    /// A Redis Cluster (`redis+cluster://`).
    Cluster,
}

/// A handle to one Redis deployment; cheap to clone, all clones share the
/// same connection and identity.
///
/// ```no_run
/// # async fn demo() -> locksmith::Result<()> {
/// let client = locksmith::Client::open("redis://127.0.0.1:6379").await?;
/// println!("connected to {} as {}", client.addr(), client.id());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    /// Shared state; clones of a `Client` are one client to Redis.
    inner: Arc<Inner>,
}

/// The state all clones of a [`Client`] share.
struct Inner {
    /// Names this client's lock owners (`<uuid>:<holder-id>`), like
    /// Redisson's per-client UUID.
    id: Uuid,
    /// The deployment's address as the caller gave it (`host:port`, or
    /// which Sentinels or cluster seeds), for errors and diagnostics.
    addr: String,
    /// Which server or cluster the connection reached (see
    /// `topology::server_identity`): tells two addresses of one server
    /// apart from two servers.
    server_id: String,
    /// What kind of deployment this is.
    topology: Topology,
    /// TLS of every connection (see [`Client::node_client`]).
    security: Security,
    /// `scheme://[user info@]` of a node URL of this deployment.
    node_prefix: String,
    /// The URL of a single-server deployment.
    single_url: Option<String>,
    /// What the client turned off at connect because the deployment
    /// refused it (see [`Client::notes`]).
    notes: Vec<String>,
    /// Replica acknowledgement every write waits for.
    acks: Acks,
    /// How releases are announced (always classic off a cluster).
    notify: NotifyMode,
    /// The dedicated pub/sub connection and its waiters.
    hub: NotifyHub,
    /// The watchdog renewing this client's leases.
    renewer: Renewer,
    /// The background work of the client's primitives (clean-ups of
    /// dropped guards and cancelled calls, settling releases), which
    /// [`Client::close`] waits for.
    tasks: Tasks,
    /// Held while [`Client::close`] shuts the client down.
    shutting: Mutex<()>,
    /// Each primitive's client-wide state (registries such as the lock's
    /// local hand-offs), by type, made on first use; see [`Client::room`].
    rooms: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
    /// The batcher of each batch script and lane, by the script's address,
    /// made on first use; see [`Client::shared_batcher`].
    batchers: Mutex<HashMap<(usize, Lane), Arc<Batcher>>>,
    /// The metric labels (and handles) of each kind, made on first use;
    /// see [`Client::labels`].
    labels: Mutex<Vec<crate::engine::observe::Labels>>,
    /// The shared multiplexed connection; reconnects on its own after a
    /// failure (and follows failovers and slot moves, see `topology.rs`).
    conn: Conn,
    /// Defaults and limits.
    config: Config,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.inner.id)
            .field("addr", &self.inner.addr)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Connects to the Redis server at `url` with default options.
    ///
    /// # Errors
    /// See [`ClientBuilder::build`].
    ///
    /// # Cancel safety
    /// Cancel safe, as [`ClientBuilder::build`].
    pub async fn open(url: &str) -> Result<Client> {
        ClientBuilder::new(url).build().await
    }

    /// Starts a [`ClientBuilder`] for `url`.
    pub fn builder(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder::new(url)
    }

    /// This client's UUID, the first half of every lock owner id it uses.
    pub fn id(&self) -> Uuid {
        self.inner.id
    }

    /// The deployment this client talks to: `host:port` of a single
    /// server, or which Sentinels and service, or which cluster seeds.
    pub fn addr(&self) -> &str {
        &self.inner.addr
    }

    /// Whether this client talks to one server, a Sentinel-managed primary
    /// or a cluster.
    pub fn topology(&self) -> Topology {
        self.inner.topology
    }

    /// How this client announces releases (on a cluster, see
    /// [`ClientBuilder::cluster_notify`]; classic elsewhere).
    pub fn notify_mode(&self) -> NotifyMode {
        self.inner.notify
    }

    /// A clone of the shared multiplexed connection, for commands of the
    /// caller's own: it reconnects by itself after failures, follows a
    /// Sentinel failover, and routes by key on a cluster.
    pub fn connection(&self) -> Connection {
        // A later runtime's commands reconnect with fresh credentials.
        self.inner.security.keep_refreshing();
        Connection(self.inner.conn.clone())
    }

    /// Checks a primitive's name: not empty, within the length limit, and
    /// on a cluster free of broken hash tags.
    /// Which server (its `run_id`) or cluster this client reached at
    /// connect: equal for two clients of one server whatever their URLs.
    pub(crate) fn server_id(&self) -> &str {
        &self.inner.server_id
    }

    /// `name` as a primitive's name, once it passed the checks (length,
    /// characters, and on a cluster its hash tag).
    pub(crate) fn checked_name(&self, name: impl Into<String>) -> Result<String> {
        let name = name.into();
        crate::engine::validate::name(&name, self.inner.config.max_name_len)?;
        let name = format!("{}{name}", self.inner.config.key_prefix);
        crate::engine::validate::name(&name, self.inner.config.max_name_len)?;
        if self.inner.topology == Topology::Cluster {
            crate::engine::validate::cluster_name(&name)?;
        }
        Ok(name)
    }

    /// The prefix put before every primitive's name (empty by default);
    /// see [`ClientBuilder::key_prefix`].
    pub fn key_prefix(&self) -> &str {
        &self.inner.config.key_prefix
    }

    /// Replicas that must acknowledge each grant, renewal and release (0
    /// when acknowledgement is off); see [`ClientBuilder::replica_acks`].
    pub fn replica_acks(&self) -> u32 {
        self.inner.acks.min
    }

    /// The replica acknowledgement policy, for primitives.
    pub(crate) fn acks(&self) -> Acks {
        self.inner.acks
    }

    /// The shared connection, for the library's own commands.
    pub(crate) fn conn(&self) -> Conn {
        // A call on a later runtime reconnects with fresh credentials.
        self.inner.security.keep_refreshing();
        self.inner.conn.clone()
    }

    /// Sends `PING` and returns the round-trip time.
    ///
    /// # Errors
    /// [`Error::Timeout`] or a connection error when the server does not
    /// answer.
    ///
    /// # Cancel safety
    /// Cancel safe: `PING` changes nothing.
    pub async fn ping(&self) -> Result<Duration> {
        let started = std::time::Instant::now();
        let mut conn = self.conn();
        let _: String = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .map_err(|e| self.map_err(e, None))?;
        Ok(started.elapsed())
    }

    /// The options this client was built with.
    pub(crate) fn config(&self) -> &Config {
        &self.inner.config
    }

    /// A redis-rs client for this client's own server, with its URL's
    /// credentials and database, its TLS settings and, with a credentials
    /// provider, the credentials it answered last: for an application's
    /// own commands on a separate connection (blocking stream reads, say)
    /// that must reach Redis the way the locks do. The credentials are a
    /// snapshot: with rotating credentials, ask again for each new
    /// connection.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] on a Sentinel or cluster deployment,
    /// which one redis-rs client cannot follow: use [`Client::connection`]
    /// there, or [`Client::node_client`] for one node.
    pub fn redis_client(&self) -> Result<redis::Client> {
        let Some(url) = &self.inner.single_url else {
            return Err(Error::invalid(
                "redis_client is for single-server deployments; use connection() or node_client()",
            ));
        };
        self.inner
            .security
            .refreshed(self.inner.security.client(url)?)
    }

    /// What this client turned off at connect because the deployment
    /// refused it, one line each: replica acknowledgement (in its
    /// automatic setting) where the server refuses `WAIT` (a proxy, a
    /// serverless offering, a renamed command, an ACL user without the
    /// right), sharded pub/sub on a cluster whose nodes lack it
    /// (release notifications then use classic `PUBLISH`, as for Redis
    /// before 7), and scripts that reach several slots on a cluster before
    /// Redis 7.0 (a batch of several slots then goes as one call per slot).
    /// Each was also logged once at WARN and counted in
    /// `locksmith_capability_missing_total{capability}`. Empty when
    /// nothing was turned off.
    pub fn notes(&self) -> &[String] {
        &self.inner.notes
    }

    /// A redis-rs client for one node of this deployment (`host:port`,
    /// e.g. a cluster primary from `CLUSTER NODES`), with this client's
    /// credentials (the data nodes') and TLS settings: for tools that
    /// must talk to each node, such as a scan of every primary. With
    /// rotating credentials these are the latest answer: ask again for
    /// each new connection.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an address that does not make a
    /// valid URL. A client built from a redis-rs client
    /// ([`ClientBuilder::from_redis_client`]) answers that client for its
    /// own server and refuses other addresses; one built from a cluster or
    /// Sentinel configuration ([`ClientBuilder::from_cluster`],
    /// [`ClientBuilder::from_sentinel`]) refuses every address: node
    /// clients come from that configuration, which only the application
    /// can apply.
    pub fn node_client(&self, addr: &str) -> Result<redis::Client> {
        if let Some(given) = self.inner.security.given_node(addr) {
            return given;
        }
        let client = self
            .inner
            .security
            .client(&format!("{}{addr}", self.inner.node_prefix))?;
        self.inner.security.refreshed(client)
    }

    /// A connection to one node of this deployment (`host:port`, as for
    /// [`node_client`](Self::node_client)), dialled and bounded by this
    /// client's [`connect_timeout`](ClientBuilder::connect_timeout) and
    /// [`command_timeout`](ClientBuilder::command_timeout). Prefer it to
    /// `node_client(addr)?.get_multiplexed_async_connection()`, whose
    /// redis-rs defaults give every command half a second: on a loaded
    /// server a tool would see timeouts the client's own commands ride out.
    /// With rotating credentials the connection re-authenticates whenever
    /// they change, like the client's own.
    ///
    /// # Errors
    /// As for [`node_client`](Self::node_client), and [`Error::Connect`]
    /// when the node cannot be reached in time or refuses the connection
    /// ([`Error::kind`] tells a refused login, `Auth`, and a failed TLS
    /// handshake, `Tls`, from an unreachable node, `Connection`).
    pub async fn node_connection(&self, addr: &str) -> Result<redis::aio::MultiplexedConnection> {
        let client = self.node_client(addr)?;
        let config = self.inner.security.node_config(
            redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(self.config().connect_timeout))
                .set_response_timeout(Some(self.config().command_timeout)),
        );
        client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|source| Error::Connect {
                addr: addr.to_owned(),
                source,
            })
    }

    /// Runs `attempt`, an acquire of a `kind` object called `name`, with
    /// its span, metrics and outcome recorded (see `observe::acquire`).
    pub(crate) fn observed<T, F>(
        &self,
        kind: &'static str,
        name: &str,
        attempt: F,
    ) -> impl std::future::Future<Output = Result<Option<T>>>
    where
        T: crate::engine::observe::Grant,
        F: std::future::Future<Output = Result<Option<T>>>,
    {
        crate::engine::observe::acquire(self.labels(kind, name), name, attempt)
    }

    /// Metric labels for one object of this client: its kind, and its name
    /// when the client was built with `metric_names`. Without names every
    /// object of a kind shares one set, and with it its metric handles,
    /// registered once per client instead of on every acquire and release.
    pub(crate) fn labels(&self, kind: &'static str, name: &str) -> crate::engine::observe::Labels {
        use crate::engine::observe::Labels;
        if self.config().metric_names {
            return Labels::of(kind, name, true);
        }
        // A handful of kinds: a scan beats hashing.
        let mut known = self.inner.labels.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(labels) = known.iter().find(|l| l.kind() == kind) {
            return labels.clone();
        }
        let labels = Labels::of(kind, name, false);
        known.push(labels.clone());
        labels
    }

    /// How long (ms) a final release's receipt stays on the server (see
    /// `engine::counted`): as long as this client may resend the release.
    pub(crate) fn receipt_ttl_ms(&self) -> u64 {
        if !self.config().release_receipts {
            return 0;
        }
        let timing = Timing {
            connect: self.config().connect_timeout,
            command: self.config().command_timeout,
        };
        let cluster = self.conn().is_cluster();
        crate::engine::counted::receipt_ttl(timing, cluster)
            .as_millis()
            .max(1) as u64
    }

    /// How this client's releases read "gone after a resend" (see
    /// `engine::counted`).
    pub(crate) fn release_rules(&self) -> crate::engine::counted::ReleaseRules {
        crate::engine::counted::ReleaseRules {
            receipts: self.config().release_receipts,
            expiry_slack: self.config().command_timeout,
        }
    }

    /// The notify hub (pub/sub waiters) of this client.
    pub(crate) fn hub(&self) -> &NotifyHub {
        &self.inner.hub
    }

    /// The watchdog of this client. (Registering a hold restarts its task
    /// if the runtime it ran on has ended; see also
    /// [`Client::ensure_background`].)
    pub(crate) fn renewer(&self) -> &Renewer {
        &self.inner.renewer
    }

    /// The first, immediate part of [`Client::close_within`]: refuses new
    /// work, stops the watchdog and the pub/sub connection (waking every
    /// waiter). Idempotent.
    pub(crate) fn shut(&self) {
        // Serialized, so a second caller returns only once the first has
        // stopped everything.
        let _shutting = self
            .inner
            .shutting
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if self.inner.tasks.is_closed() {
            return;
        }
        self.inner.tasks.close();
        self.inner.renewer.close();
        self.inner.hub.close();
        self.inner.conn.close();
        tracing::debug!(client = %self.inner.id, "client closed");
    }

    /// The client's background work (see [`Tasks`]).
    pub(crate) fn tasks(&self) -> &Tasks {
        &self.inner.tasks
    }

    /// Lets a new acquire or wait through: [`Error::Closed`] once
    /// [`Client::close`] was called; otherwise restarts background tasks
    /// whose runtime has ended (see `task.rs`). Called by every acquire
    /// attempt; a few atomic checks when all is well.
    pub(crate) fn admit(&self) -> Result<()> {
        if self.inner.tasks.is_closed() {
            return Err(Error::Closed {
                addr: self.inner.addr.clone(),
            });
        }
        self.ensure_background();
        Ok(())
    }

    /// Restarts background tasks whose runtime has ended (see `task.rs`).
    /// Called by releases (which [`Client::admit`] does not gate).
    pub(crate) fn ensure_background(&self) {
        self.inner.renewer.ensure_running();
        self.inner.security.keep_refreshing();
    }

    /// True once [`Client::close`] was called (on this handle or any
    /// clone of it).
    pub fn is_closed(&self) -> bool {
        self.inner.tasks.is_closed()
    }

    /// Shuts the client down, every clone of it, as [`Client::close_within`]
    /// with a bound of one reconnect and two command timeouts
    /// (`connect_timeout + 2 × command_timeout`, 11 s with the default
    /// timeouts). It takes that long only when something is still
    /// unfinished then, typically a release resent while Redis is
    /// unreachable.
    ///
    /// # Errors
    /// As [`Client::close_within`].
    pub async fn close(&self) -> Result<()> {
        let config = self.config();
        self.close_within(config.connect_timeout + config.command_timeout * 2)
            .await
    }

    /// Shuts the client down, every clone of it, and waits up to `within`
    /// for its background work to finish. Call it before a program exits
    /// (or drops its runtime) so nothing the client started in the
    /// background is cut off:
    ///
    /// 1. New acquires, tries and waits of every primitive of this client
    ///    fail with [`Error::Closed`]; waiters already waiting wake at
    ///    once and fail the same way (their queue entries and claims are
    ///    withdrawn as for any abandoned wait).
    /// 2. The watchdog stops: every hold still held is no longer renewed
    ///    and reports lost at once (`is_lost()`, its lost signal fires),
    ///    although on the server it lasts until its lease runs out.
    ///    Release what you hold *before* closing to free it at once.
    /// 3. The pub/sub connection is closed.
    /// 4. It waits for the work started in the background: the undo of
    ///    acquires that were cancelled after their request went out, the
    ///    releases of guards and permits that were dropped, and releases
    ///    whose reply was lost and are being resent. Work that these start
    ///    is waited for too.
    ///
    /// Releases (explicit or by dropping a guard) keep working after
    /// `close`, as do commands of your own on [`Client::connection`]; the
    /// connection itself closes when the last clone of the client is
    /// dropped. Closing twice is harmless: the second call waits again.
    ///
    /// ```no_run
    /// # async fn demo(client: locksmith::Client) -> locksmith::Result<()> {
    /// let guard = client.lock("report")?.lock().await?;
    /// // ... work ...
    /// guard.release().await?;
    /// client.close().await?; // nothing left running in the background
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Timeout`] with `within` when background work was still
    /// running when the bound ran out (it goes on for as long as the
    /// runtime runs; what it would have released then runs out with its
    /// lease). A warning is logged with the number of tasks left.
    ///
    /// # Cancel safety
    /// Cancel safe: the client is closed from the first poll on; dropping
    /// the future only stops the waiting.
    pub async fn close_within(&self, within: Duration) -> Result<()> {
        // Refuse new work first, then stop what runs for the client's
        // lifetime, then wait for the clean-ups.
        self.shut();
        if self.inner.tasks.wait(within).await {
            return Ok(());
        }
        tracing::warn!(
            client = %self.inner.id,
            tasks = self.inner.tasks.len(),
            "background work still running when the client's close bound ran out"
        );
        Err(Error::Timeout(within))
    }

    /// The client-wide state of one primitive kind (its room): made by
    /// `make` the first time it is asked for, then shared by every handle
    /// of that kind. A primitive keeps its registries here (its batchers
    /// come from [`Client::shared_batcher`]), so adding a primitive never
    /// edits the client. `make` must not ask for a
    /// room itself.
    pub(crate) fn room<T: Any + Send + Sync>(&self, make: impl FnOnce(&Client) -> T) -> Arc<T> {
        let mut rooms = self.inner.rooms.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(room) = rooms.get(&TypeId::of::<T>()) {
            if let Ok(room) = room.clone().downcast::<T>() {
                return room;
            }
        }
        let room = Arc::new(make(self));
        rooms.insert(TypeId::of::<T>(), room.clone());
        room
    }

    /// A batcher of `script` on this client's connection, waiting for the
    /// client's replica acknowledgements.
    pub(crate) fn batcher(&self, script: &'static std::sync::LazyLock<Lua>) -> Batcher {
        Batcher::new(
            script,
            self.inner.conn.clone(),
            self.inner.acks,
            self.inner.tasks.clone(),
        )
    }

    /// This client's one batcher of `script`, made on first use and shared
    /// by every handle that sends it, so their calls coalesce.
    pub(crate) fn shared_batcher(&self, script: &'static std::sync::LazyLock<Lua>) -> Arc<Batcher> {
        self.batcher_in(script, Lane::Own)
    }

    /// This client's batcher of `script` in `lane`: a lane has its own
    /// queue and its own calls in flight, so requests with a tight
    /// deadline of their own never wait behind another lane's.
    pub(crate) fn batcher_in(
        &self,
        script: &'static std::sync::LazyLock<Lua>,
        lane: Lane,
    ) -> Arc<Batcher> {
        let key = (script as *const std::sync::LazyLock<Lua> as usize, lane);
        let mut batchers = self
            .inner
            .batchers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        batchers
            .entry(key)
            .or_insert_with(|| Arc::new(self.batcher(script)))
            .clone()
    }

    /// Number of pub/sub channels this client is subscribed to (or
    /// subscribing), for diagnostics and tests.
    pub fn subscription_count(&self) -> usize {
        self.inner.hub.channel_count()
    }

    /// Number of leases this client's watchdog is tracking, for diagnostics
    /// and tests.
    pub fn tracked_lease_count(&self) -> usize {
        self.inner.renewer.len()
    }

    /// Runs a prepared script call (see [`Lua::run`]: at most once for a
    /// script that is not idempotent, `WAIT` behind a write when replica
    /// acknowledgement is on) and converts errors, naming `key` in a
    /// wrong-type error. A write fewer replicas acknowledged than asked is
    /// logged and counted (`locksmith_writes_not_replicated_total`): what
    /// needs more (a grant) checks the acknowledgement itself.
    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        invocation: &Invocation<'_>,
        key: &str,
    ) -> Result<T> {
        let lua = invocation.lua();
        let acks = self.acks();
        let (value, acked) = lua
            .run(&self.inner.conn, &invocation.cmd(), acks)
            .await
            .map_err(|e| self.map_err(e, Some(key)))?;
        if acks.short(acked) {
            metrics::counter!("locksmith_writes_not_replicated_total").increment(1);
            tracing::warn!(
                key,
                script = lua.name(),
                acked = acked.unwrap_or(0),
                wanted = acks.min,
                "a write was acknowledged by fewer replicas than asked; a failover now may lose it"
            );
        }
        redis::from_redis_value(value).map_err(|e| self.map_err(e.into(), Some(key)))
    }

    /// Runs `lua` as [`Client::invoke`] does, with `keys` (the first names
    /// the call in errors) and `args` (one value, or a tuple of them in
    /// order).
    pub(crate) async fn run_script<T: FromRedisValue>(
        &self,
        lua: &'static std::sync::LazyLock<Lua>,
        keys: &[&str],
        args: impl redis::ToRedisArgs,
    ) -> Result<T> {
        let mut invocation = lua.prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        invocation.arg(args);
        self.invoke(&invocation, keys.first().copied().unwrap_or_default())
            .await
    }

    /// A wrong-type error names the key a script was called for; when one
    /// of a primitive's other keys is the culprit, name that one instead.
    /// `keys` pairs each key with the type it should have.
    pub(crate) async fn name_wrong_key(&self, err: Error, keys: &[(&str, &str)]) -> Error {
        if !matches!(err, Error::WrongType { .. }) {
            return err;
        }
        let mut conn = self.conn();
        for (key, wanted) in keys {
            let kind: redis::RedisResult<String> =
                redis::cmd("TYPE").arg(*key).query_async(&mut conn).await;
            if let Ok(kind) = kind {
                if kind != *wanted && kind != "none" {
                    return Error::WrongType {
                        key: (*key).to_owned(),
                    };
                }
            }
        }
        err
    }

    /// Turns a redis-rs error into a locksmith error: timeouts carry the
    /// configured bound, wrong-type replies name the key.
    pub(crate) fn map_err(&self, err: redis::RedisError, key: Option<&str>) -> Error {
        if err.is_timeout() {
            return Error::Timeout(self.inner.config.command_timeout);
        }
        match key {
            Some(key) => Error::from_redis_for_key(err, key),
            None => Error::Redis(err),
        }
    }
}

/// The shared command connection of a [`Client`], for commands of your own
/// (`redis::cmd(...).query_async(&mut conn)`). Cheap to clone: clones share
/// one multiplexed connection. On a cluster a command goes to the node that
/// owns its first key; behind Sentinel, to the current primary.
#[derive(Clone, Debug)]
pub struct Connection(Conn);

crate::engine::conn::connection_like!(Connection {
    command(this, cmd) => this.0.req_packed_command(cmd),
    pipeline(this, pipeline, offset, count) => this.0.req_packed_commands(pipeline, offset, count),
    db(this) => this.0.get_db(),
});
