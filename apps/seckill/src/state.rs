//! [`AppState`]: the handles one instance shares between its requests and
//! its order pipeline.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use locksmith::Connection;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::config::Config;
use crate::db::{Db, Voucher};
use crate::error::AppError;

/// Boxed error for start-up failures.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Shared state of one instance; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    /// Everything, behind one `Arc` so handlers clone a pointer.
    inner: Arc<Inner>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("strategy", &self.inner.config.strategy)
            .field("consumer", &self.inner.config.consumer_name)
            .finish_non_exhaustive()
    }
}

struct Inner {
    /// Settings this instance was started with.
    config: Config,
    /// The lock client; its multiplexed connection also carries the
    /// service's own commands, so one socket serves both.
    locks: locksmith::Client,
    /// Opens dedicated connections for blocking stream reads, which would
    /// stall every other command on the shared multiplexed connection.
    redis_client: redis::Client,
    /// Order ids: the library's generator on the day's sequence
    /// `seckill:order-seq:<day>`, one `INCR` per id.
    order_ids: locksmith::IdGenerator,
    /// The order database.
    db: Db,
    /// Voucher metadata by id. Windows and segment counts never change after
    /// creation, so caching them saves a database read per purchase.
    vouchers: Mutex<HashMap<i64, Voucher>>,
    /// The `local-mutex` strategy's per-voucher mutexes.
    local_locks: Mutex<HashMap<i64, Arc<tokio::sync::Mutex<()>>>>,
    /// Renders `/metrics`.
    metrics: PrometheusHandle,
    /// Purchases running in their own tasks (they outlive a dropped
    /// request); shutdown waits for them.
    purchases: tokio_util::task::TaskTracker,
    /// Vouchers whose consumers stopped (sale drained): their per-voucher
    /// series are left out of `/metrics`. The `metrics` facade cannot
    /// unregister a series, so they are filtered at render time.
    retired: Mutex<HashSet<i64>>,
}

/// The process-wide Prometheus recorder (the `metrics` facade allows one),
/// shared by every instance in the process.
fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (an embedding
            // program); then this handle renders nothing, which is harmless.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}

impl AppState {
    /// Connects to Redis and the database (running migrations).
    ///
    /// # Errors
    /// When either cannot be reached or the configuration is invalid.
    pub async fn connect(config: Config) -> Result<AppState, BoxError> {
        if config.segments < 1 || config.segments > 1024 {
            return Err("segments must be between 1 and 1024".into());
        }
        config.validate()?;
        // The recorder first: the lock client keeps the metric handles it
        // registers on first use.
        let metrics = metrics_handle();
        let locks = config
            .redis_security
            .apply(locksmith::Client::builder(config.redis_url.as_str()))
            .connect_timeout(Duration::from_secs(3))
            .command_timeout(Duration::from_secs(2))
            .build()
            .await?;
        // The stream consumer's own connections reach Redis the way the
        // locks do (credentials, database, TLS).
        let redis_client = locks.redis_client()?;
        let db = Db::connect(&config.database_url, config.db).await?;
        let order_ids = locks
            .id_generator("seckill:order-seq")?
            .with_block(config.order_id_block)?;
        Ok(AppState {
            inner: Arc::new(Inner {
                config,
                order_ids,
                locks,
                redis_client,
                db,
                vouchers: Mutex::new(HashMap::new()),
                local_locks: Mutex::new(HashMap::new()),
                metrics,
                retired: Mutex::new(HashSet::new()),
                purchases: tokio_util::task::TaskTracker::new(),
            }),
        })
    }

    /// The purchases in flight, each in a task of its own; shutdown closes
    /// the tracker and waits for them.
    pub fn purchases(&self) -> &tokio_util::task::TaskTracker {
        &self.inner.purchases
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The order id generator (unique across instances, time-ordered).
    pub fn order_ids(&self) -> &locksmith::IdGenerator {
        &self.inner.order_ids
    }

    /// The lock client.
    pub fn locks(&self) -> &locksmith::Client {
        &self.inner.locks
    }

    /// A handle on the shared multiplexed Redis connection.
    pub fn redis(&self) -> Connection {
        self.inner.locks.connection()
    }

    /// The Redis client, for dedicated connections.
    pub fn redis_client(&self) -> &redis::Client {
        &self.inner.redis_client
    }

    /// The database.
    pub fn db(&self) -> &Db {
        &self.inner.db
    }

    /// The Prometheus text of all metrics, without the series of retired
    /// vouchers.
    pub fn render_metrics(&self) -> String {
        let text = self.inner.metrics.render();
        let retired = self
            .inner
            .retired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if retired.is_empty() {
            return text;
        }
        let labels: Vec<String> = retired
            .iter()
            .map(|id| format!("voucher=\"{id}\""))
            .collect();
        text.lines()
            .filter(|line| !labels.iter().any(|l| line.contains(l.as_str())))
            .flat_map(|line| [line, "\n"])
            .collect()
    }

    /// Shows a voucher's series again (its consumer started).
    pub fn activate_voucher_metrics(&self, voucher: i64) {
        self.inner
            .retired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&voucher);
    }

    /// Drops a voucher's per-voucher metric series from `/metrics` (its
    /// consumer stopped: the sale is drained).
    pub fn retire_voucher_metrics(&self, voucher: i64) {
        self.inner
            .retired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(voucher);
    }

    /// A voucher's metadata, from the cache or the database.
    ///
    /// # Errors
    /// [`AppError::NotFound`] for an unknown id; database errors.
    pub async fn voucher(&self, id: i64) -> Result<Voucher, AppError> {
        if let Some(v) = self.cached(id) {
            return Ok(v);
        }
        let voucher = self
            .inner
            .db
            .voucher(id)
            .await?
            .ok_or(AppError::NotFound("voucher"))?;
        self.remember(voucher.clone());
        Ok(voucher)
    }

    fn cached(&self, id: i64) -> Option<Voucher> {
        let map = self
            .inner
            .vouchers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        map.get(&id).cloned()
    }

    /// Puts a voucher into the metadata cache.
    pub fn remember(&self, voucher: Voucher) {
        let mut map = self
            .inner
            .vouchers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        map.insert(voucher.id, voucher);
    }

    /// The process-local mutex of one voucher (`local-mutex` strategy).
    pub fn local_lock(&self, voucher: i64) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self
            .inner
            .local_locks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        map.entry(voucher).or_default().clone()
    }
}
