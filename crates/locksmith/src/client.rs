//! [`Client`]: the connection to Redis that every primitive is made from.
//!
//! One `Client` owns one multiplexed command connection (shared by all clones
//! and all primitives made from it), a client UUID that names its lock owners
//! the way Redisson does, and the defaults primitives start from.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{FromRedisValue, IntoConnectionInfo, ScriptInvocation};
use uuid::Uuid;

use crate::batch::Batcher;
use crate::error::{Error, Result};
use crate::lock::Handoffs;
use crate::notify::{HubTimeouts, NotifyHub};
use crate::renewal::Renewer;
use crate::scripts;

/// The longest timeout or check period a client accepts: a day. Longer
/// values are mistakes (and would overflow clock arithmetic).
const MAX_PERIOD: Duration = Duration::from_secs(86_400);

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
        }
    }
}

/// Builds a [`Client`] with non-default options.
///
/// ```no_run
/// # async fn demo() -> locksmith::Result<()> {
/// use std::time::Duration;
/// let client = locksmith::Client::builder("redis://127.0.0.1:6379")
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
}

impl ClientBuilder {
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
    /// Default health-check period of the pub/sub connection: 5 seconds.
    pub const DEFAULT_PUBSUB_PING_INTERVAL: Duration = Duration::from_secs(5);

    /// Starts a builder for the Redis server at `url` (`redis://host:port/db`).
    pub fn new(url: impl Into<String>) -> Self {
        ClientBuilder {
            url: url.into(),
            config: Config::default(),
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

    /// Validates the options and connects.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a malformed URL, a zero timeout or
    /// ping interval (or one over a day), or a lease too short to hold anything (see
    /// [`Lock::with_lease`](crate::Lock::with_lease)); [`Error::Connect`]
    /// or [`Error::Timeout`] when the server cannot be reached in time (the
    /// message names the address).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future closes the connection being opened;
    /// nothing is left on the server.
    pub async fn build(self) -> Result<Client> {
        let config = self.config;
        if config.connect_timeout.is_zero() || config.command_timeout.is_zero() {
            return Err(Error::invalid("timeouts must be greater than zero"));
        }
        if config.pubsub_ping_interval.is_zero() {
            return Err(Error::invalid(
                "pubsub_ping_interval must be greater than zero",
            ));
        }
        for (what, value) in [
            ("connect_timeout", config.connect_timeout),
            ("command_timeout", config.command_timeout),
            ("pubsub_ping_interval", config.pubsub_ping_interval),
        ] {
            if value > MAX_PERIOD {
                return Err(Error::invalid(format!(
                    "{what} of {value:?} is longer than the limit of {MAX_PERIOD:?}"
                )));
            }
        }
        crate::validate::lease(config.lease)?;
        if config.max_name_len == 0 {
            return Err(Error::invalid("max_name_len must be greater than zero"));
        }
        let info = self
            .url
            .as_str()
            .into_connection_info()
            .map_err(|e| Error::invalid(format!("bad Redis URL {:?}: {e}", self.url)))?;
        let addr = info.addr().to_string();
        let redis = redis::Client::open(info)
            .map_err(|e| Error::invalid(format!("bad Redis URL {:?}: {e}", self.url)))?;

        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.connect_timeout))
            .set_response_timeout(Some(config.command_timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        // The manager retries internally; bound the whole first attempt so
        // an unreachable address fails within about one connect timeout.
        let connecting = ConnectionManager::new_with_config(redis.clone(), manager_config);
        let conn = match tokio::time::timeout(config.connect_timeout * 2, connecting).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(source)) => return Err(Error::Connect { addr, source }),
            Err(_) => {
                return Err(Error::Connect {
                    source: redis::RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no connection within {:?}", config.connect_timeout * 2),
                    )),
                    addr,
                })
            }
        };
        Ok(Client {
            inner: Arc::new(Inner {
                id: Uuid::new_v4(),
                addr,
                hub: NotifyHub::new(
                    redis,
                    HubTimeouts {
                        connect: config.connect_timeout,
                        command: config.command_timeout,
                        ping_interval: config.pubsub_ping_interval,
                    },
                ),
                renewer: Renewer::new(conn.clone()),
                acquire_batch: Batcher::new(&scripts::LOCK_ACQUIRE, conn.clone()),
                release_batch: Batcher::new(&scripts::LOCK_RELEASE, conn.clone()),
                handoffs: Handoffs::new(config.max_local_handoffs),
                conn,
                config,
            }),
        })
    }
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
    /// `host:port` of the server, for error messages and diagnostics.
    addr: String,
    /// The dedicated pub/sub connection and its waiters.
    hub: NotifyHub,
    /// The watchdog renewing this client's leases.
    renewer: Renewer,
    /// Coalesces concurrent lock acquires into shared script calls.
    acquire_batch: Batcher,
    /// Coalesces concurrent lock releases into shared script calls.
    release_batch: Batcher,
    /// Waiters parked for local hand-off, by lock name.
    handoffs: Handoffs,
    /// The shared multiplexed connection; reconnects on its own after a
    /// failure.
    conn: ConnectionManager,
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

    /// The `host:port` this client talks to.
    pub fn addr(&self) -> &str {
        &self.inner.addr
    }

    /// A clone of the shared multiplexed connection, for commands of the
    /// caller's own (it reconnects by itself after failures).
    pub fn connection(&self) -> ConnectionManager {
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
        let mut conn = self.connection();
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

    /// Restarts background tasks whose runtime has ended (see `task.rs`).
    /// Called by every lock operation; two atomic checks when all is well.
    pub(crate) fn ensure_background(&self) {
        self.inner.renewer.ensure_running();
    }

    /// The acquire-script batcher.
    pub(crate) fn acquire_batch(&self) -> &Batcher {
        &self.inner.acquire_batch
    }

    /// The release-script batcher.
    pub(crate) fn release_batch(&self) -> &Batcher {
        &self.inner.release_batch
    }

    /// The local hand-off registry.
    pub(crate) fn handoffs(&self) -> &Handoffs {
        &self.inner.handoffs
    }

    /// Number of lock waiters parked for local hand-off, for diagnostics
    /// and tests.
    pub fn parked_waiter_count(&self) -> usize {
        self.inner.handoffs.len()
    }

    /// Number of locks this client has handed from one of its owners
    /// straight to another (see [`ClientBuilder::max_local_handoffs`]), for
    /// diagnostics and tests.
    pub fn local_handoff_count(&self) -> u64 {
        self.inner.handoffs.completed()
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

    /// Runs a prepared script invocation (EVALSHA, loading the script on
    /// NOSCRIPT) and converts errors, naming `key` in a wrong-type error.
    pub(crate) async fn invoke<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
        key: &str,
    ) -> Result<T> {
        let mut conn = self.connection();
        invocation
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.map_err(e, Some(key)))
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
