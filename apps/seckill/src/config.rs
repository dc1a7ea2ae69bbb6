//! [`Config`]: everything one service instance is started with.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// How an instance decides whether a buyer gets an item: one stage each of
/// the classic flash-sale evolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// GET stock, check, SET stock-1: races between any two requests.
    Unsafe,
    /// The same inside a process-local mutex: races between instances.
    LocalMutex,
    /// No Redis gate: the database's conditional decrement
    /// (`... WHERE stock > 0`) is the check (optimistic concurrency).
    Optimistic,
    /// A locksmith lock per voucher around the read-check-write, and a
    /// per-user lock for one order per user.
    Lock,
    /// Stock split into segments, each with its own lock and counter.
    Segmented,
    /// One atomic Lua gate; orders reach the database through a stream.
    Lua,
}

impl Strategy {
    /// All strategies, in the order of the classic evolution.
    pub const ALL: [Strategy; 6] = [
        Strategy::Unsafe,
        Strategy::LocalMutex,
        Strategy::Optimistic,
        Strategy::Lock,
        Strategy::Segmented,
        Strategy::Lua,
    ];

    /// The name used on the command line and in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Unsafe => "unsafe",
            Strategy::LocalMutex => "local-mutex",
            Strategy::Optimistic => "optimistic",
            Strategy::Lock => "lock",
            Strategy::Segmented => "segmented",
            Strategy::Lua => "lua",
        }
    }

    /// True for the strategies that must never oversell.
    pub fn is_safe(self) -> bool {
        !matches!(self, Strategy::Unsafe | Strategy::LocalMutex)
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Strategy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Strategy::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                format!("unknown strategy {s:?}: use unsafe, local-mutex, optimistic, lock, segmented or lua")
            })
    }
}

/// Tuning of the stream consumer that writes orders to the database.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// How long one XREADGROUP blocks; bounds how long shutdown waits.
    pub block: Duration,
    /// Entries pending longer than this are claimed from their consumer
    /// (presumed dead) with XAUTOCLAIM. Must exceed the time to write one
    /// batch, or live consumers get their work stolen.
    pub claim_min_idle: Duration,
    /// How often pending entries are checked for claiming and dead-lettering.
    pub claim_interval: Duration,
    /// Deliveries after which an entry whose write keeps failing for a
    /// reason that is not an outage (the database refuses it) goes to the
    /// dead-letter stream. Outages do not count: see `outage_limit`.
    pub max_deliveries: u64,
    /// How long one order is retried through a database outage (connection
    /// lost, read-only after a failover, disk full, timeouts) before it is
    /// dead-lettered; `None` (the default) retries until the database
    /// returns. The consumer keeps such entries claimed meanwhile, so no
    /// other instance counts them as failed deliveries.
    pub outage_limit: Option<Duration>,
    /// Bound on one order write (connection wait included); a write that
    /// takes longer counts as an outage and is retried.
    pub write_timeout: Duration,
    /// How often the database is asked for vouchers whose streams need a
    /// consumer (vouchers created through another instance).
    pub discover_interval: Duration,
    /// Entries read per XREADGROUP.
    pub batch: usize,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            block: Duration::from_millis(500),
            claim_min_idle: Duration::from_secs(10),
            claim_interval: Duration::from_secs(2),
            max_deliveries: 5,
            outage_limit: None,
            write_timeout: Duration::from_secs(10),
            discover_interval: Duration::from_secs(1),
            batch: 100,
        }
    }
}

/// How the instance's Redis connections authenticate and encrypt, beside
/// the URL (`rediss://` alone turns TLS on).
#[derive(Debug, Clone, Default)]
pub struct RedisSecurity {
    /// TLS even for a `redis://` URL.
    pub tls: bool,
    /// PEM file of the CAs that sign the server's certificate.
    pub ca_file: Option<std::path::PathBuf>,
    /// Client certificate and key (PEM) for mutual TLS.
    pub client_cert: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// No certificate checks (tests only).
    pub insecure: bool,
}

impl RedisSecurity {
    /// `builder` with these options.
    pub fn apply(&self, mut builder: locksmith::ClientBuilder) -> locksmith::ClientBuilder {
        if self.tls {
            builder = builder.tls(true);
        }
        if let Some(ca) = &self.ca_file {
            builder = builder.tls_ca_file(ca);
        }
        if let Some((cert, key)) = &self.client_cert {
            builder = builder.tls_client_cert(cert, key);
        }
        if self.insecure {
            builder = builder.tls_insecure(true);
        }
        builder
    }
}

/// One instance's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// `redis://host:port`, or `rediss://` for TLS; user and password in
    /// the URL.
    pub redis_url: String,
    /// TLS options beside the URL.
    pub redis_security: RedisSecurity,
    /// `sqlite://file.db?mode=rwc` or `postgres://...`.
    pub database_url: String,
    /// The purchase strategy of this instance.
    pub strategy: Strategy,
    /// Bearer token required by the admin endpoints.
    pub admin_token: String,
    /// This instance's consumer name in the order group; a restarted
    /// instance with the same name drains what it left pending. The default
    /// ([`default_consumer_name`]) is unique per process.
    pub consumer_name: String,
    /// Stock segments of vouchers created through this instance.
    pub segments: i64,
    /// How long a purchase waits for each of its locks (the per-user lock,
    /// then the stock lock or, for `segmented`, all segment locks together)
    /// before answering 503 busy.
    pub lock_wait: Duration,
    /// Fixed lease of the purchase locks, per-user and stock (no watchdog:
    /// the critical sections are a few round trips). The per-user lock is
    /// held across the stock step and the order write, so the lease must
    /// exceed one lock wait plus the database bounds.
    pub lock_lease: Duration,
    /// A purchase still running after this long is answered 202 "outcome
    /// unknown" (it completes in the background; the buyer checks `GET
    /// /vouchers/{id}/orders/mine`); other requests are answered 503.
    pub request_timeout: Duration,
    /// Pool wait and statement bounds of the database.
    pub db: crate::db::DbOptions,
    /// Once a finished sale's stream is drained, its Redis keys (stock and
    /// segments, buyers, window, stream, pending orders, takes) expire
    /// after this long. The dead-letter
    /// stream never expires: an operator replays or clears it.
    pub finished_ttl: Duration,
    /// `/healthz` reports degraded when the oldest unwritten order has
    /// waited longer than this.
    pub max_pipeline_lag: Duration,
    /// The order pipeline.
    pub pipeline: PipelineConfig,
    /// Order ids reserved per Redis round trip (the id generator's block
    /// mode, `INCRBY`): a purchase takes its id locally, without a round
    /// trip, except once per block. Ids an instance reserved but did not
    /// use when it stops are skipped (gaps, never repeats).
    pub order_id_block: u32,
}

impl Config {
    /// Defaults for everything but the two URLs and the strategy.
    pub fn new(redis_url: &str, database_url: &str, strategy: Strategy) -> Config {
        Config {
            redis_url: redis_url.to_owned(),
            redis_security: RedisSecurity::default(),
            database_url: database_url.to_owned(),
            strategy,
            admin_token: "change-me".to_owned(),
            consumer_name: default_consumer_name(),
            segments: 8,
            lock_wait: Duration::from_secs(5),
            lock_lease: Duration::from_secs(15),
            request_timeout: Duration::from_secs(30),
            db: crate::db::DbOptions::default(),
            finished_ttl: Duration::from_secs(24 * 3600),
            max_pipeline_lag: Duration::from_secs(30),
            pipeline: PipelineConfig::default(),
            order_id_block: DEFAULT_ORDER_ID_BLOCK,
        }
    }

    /// The longest a purchase can take by its own bounds: the per-user lock
    /// wait, the stock lock wait, one pool wait and one statement, plus
    /// [`REDIS_ALLOWANCE`] for its Redis round trips.
    pub fn purchase_budget(&self) -> Duration {
        self.lock_wait * 2 + self.db.acquire_timeout + self.db.statement_timeout + REDIS_ALLOWANCE
    }

    /// Checks that the bounds fit together.
    ///
    /// # Errors
    /// A message naming the settings that conflict: a zero duration, a
    /// purchase budget over the request timeout, or a lock lease shorter
    /// than what the per-user lock must cover.
    pub fn validate(&self) -> Result<(), String> {
        for (name, d) in [
            ("lock wait", self.lock_wait),
            ("lock lease", self.lock_lease),
            ("request timeout", self.request_timeout),
            ("database pool wait", self.db.acquire_timeout),
            ("statement timeout", self.db.statement_timeout),
            ("write timeout", self.pipeline.write_timeout),
            ("claim min idle", self.pipeline.claim_min_idle),
            ("finished-sale TTL", self.finished_ttl),
        ] {
            if d.is_zero() {
                return Err(format!("the {name} must be greater than zero"));
            }
        }
        if self.order_id_block == 0 || self.order_id_block > MAX_ORDER_ID_BLOCK {
            return Err(format!(
                "the order id block must be between 1 and {MAX_ORDER_ID_BLOCK}, not {}",
                self.order_id_block
            ));
        }
        if self.consumer_name.trim().is_empty() {
            return Err("the consumer name must not be empty".into());
        }
        if self.purchase_budget() > self.request_timeout {
            return Err(format!(
                "request timeout {:?} is shorter than the longest purchase: 2 x lock wait {:?} \
                 + pool wait {:?} + statement timeout {:?} + {:?} for Redis = {:?}; raise \
                 --request-timeout or lower the others",
                self.request_timeout,
                self.lock_wait,
                self.db.acquire_timeout,
                self.db.statement_timeout,
                REDIS_ALLOWANCE,
                self.purchase_budget()
            ));
        }
        let held = self.lock_wait + self.db.acquire_timeout + self.db.statement_timeout;
        if self.lock_lease <= held {
            return Err(format!(
                "lock lease {:?} does not cover what the per-user lock is held across: \
                 lock wait {:?} + pool wait {:?} + statement timeout {:?} = {held:?}; raise \
                 --lock-lease",
                self.lock_lease, self.lock_wait, self.db.acquire_timeout, self.db.statement_timeout
            ));
        }
        Ok(())
    }
}

/// Order ids reserved per round trip unless configured otherwise.
pub const DEFAULT_ORDER_ID_BLOCK: u32 = 1000;

/// The largest order id block the id generator takes (2^20).
pub const MAX_ORDER_ID_BLOCK: u32 = 1 << 20;

/// What a purchase's Redis round trips may take at most, in
/// [`Config::purchase_budget`] (a handful of commands, each bounded by the
/// client's 2 s command timeout, overlapping in practice).
pub const REDIS_ALLOWANCE: Duration = Duration::from_secs(5);

/// A consumer name unique per process, even when two containers both run
/// the service as PID 1: host name, PID and 8 random hex digits.
pub fn default_consumer_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".to_owned());
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("seckill-{host}-{}-{}", std::process::id(), &random[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Config {
        Config::new("redis://127.0.0.1:1", "sqlite::memory:", Strategy::Lua)
    }

    #[test]
    fn the_defaults_fit_together() {
        base().validate().unwrap();
        assert!(base().purchase_budget() <= base().request_timeout);
    }

    #[test]
    fn a_request_timeout_shorter_than_a_purchase_is_refused() {
        let mut c = base();
        c.lock_wait = Duration::from_secs(20);
        c.lock_lease = Duration::from_secs(60);
        let e = c.validate().unwrap_err();
        assert!(e.contains("request timeout"), "{e}");
        assert!(e.contains("2 x lock wait"), "{e}");
    }

    #[test]
    fn a_lease_shorter_than_the_per_user_hold_is_refused() {
        let mut c = base();
        c.lock_lease = Duration::from_secs(5);
        let e = c.validate().unwrap_err();
        assert!(e.contains("lock lease"), "{e}");
    }

    #[test]
    fn zero_durations_and_empty_names_are_refused() {
        let mut c = base();
        c.lock_wait = Duration::ZERO;
        assert!(c.validate().unwrap_err().contains("lock wait"));
        let mut c = base();
        c.db.statement_timeout = Duration::ZERO;
        assert!(c.validate().unwrap_err().contains("statement timeout"));
        let mut c = base();
        c.consumer_name = " ".into();
        assert!(c.validate().unwrap_err().contains("consumer name"));
        for block in [0, MAX_ORDER_ID_BLOCK + 1] {
            let mut c = base();
            c.order_id_block = block;
            assert!(c.validate().unwrap_err().contains("order id block"));
        }
    }

    #[test]
    fn default_consumer_names_are_unique_per_process_start() {
        let a = default_consumer_name();
        let b = default_consumer_name();
        assert_ne!(a, b, "two instances with the same host and PID collide");
        assert!(a.contains(&format!("-{}-", std::process::id())), "{a}");
    }
}
