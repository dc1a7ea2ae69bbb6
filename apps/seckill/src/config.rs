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
    /// Deliveries after which an entry goes to the dead-letter stream.
    pub max_deliveries: u64,
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
            discover_interval: Duration::from_secs(1),
            batch: 100,
        }
    }
}

/// One instance's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// `redis://host:port`.
    pub redis_url: String,
    /// `sqlite://file.db?mode=rwc` or `postgres://...`.
    pub database_url: String,
    /// The purchase strategy of this instance.
    pub strategy: Strategy,
    /// Bearer token required by the admin endpoints.
    pub admin_token: String,
    /// This instance's consumer name in the order group; a restarted
    /// instance with the same name drains what it left pending.
    pub consumer_name: String,
    /// Stock segments of vouchers created through this instance.
    pub segments: i64,
    /// How long a purchase waits for a lock before answering 503 busy.
    pub lock_wait: Duration,
    /// Fixed lease of the purchase locks (no watchdog: the critical section
    /// is a few Redis round trips).
    pub lock_lease: Duration,
    /// Requests running longer are answered 503.
    pub request_timeout: Duration,
    /// The order pipeline.
    pub pipeline: PipelineConfig,
}

impl Config {
    /// Defaults for everything but the two URLs and the strategy.
    pub fn new(redis_url: &str, database_url: &str, strategy: Strategy) -> Config {
        Config {
            redis_url: redis_url.to_owned(),
            database_url: database_url.to_owned(),
            strategy,
            admin_token: "change-me".to_owned(),
            consumer_name: format!("seckill-{}", std::process::id()),
            segments: 8,
            lock_wait: Duration::from_secs(10),
            lock_lease: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            pipeline: PipelineConfig::default(),
        }
    }
}
