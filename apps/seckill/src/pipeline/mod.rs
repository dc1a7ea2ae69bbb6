//! The order pipeline: a Redis stream consumer group that writes the orders
//! the `lua` gate accepted into the database.
//!
//! Each voucher has its own stream (`seckill:orders:{V}`, same hash tag as
//! the gate's keys). Every instance runs one consumer per voucher whose
//! stream may hold work, all in the group [`keys::ORDER_GROUP`], under the
//! instance's consumer name:
//!
//! 1. The group is created with `MKSTREAM` from id `0`, so a group created
//!    after the first orders still sees them.
//! 2. At start the consumer drains its own pending entries (id `0`): what a
//!    previous run with the same name read but never acknowledged.
//! 3. Then it reads new entries (`>`) and writes each order in one database
//!    transaction. Only after the commit does one script acknowledge the
//!    entry, delete it from the stream (`XDEL`: the stream holds exactly
//!    the orders not yet written, so Redis memory stays bounded by the
//!    backlog) and drop the buyer's entry from the pending hash. Replays
//!    are harmless (the write is idempotent per order id).
//! 4. A database outage (see [`crate::db::is_transient`]) is waited out: the
//!    consumer retries the write with back-off, for as long as
//!    `outage_limit` allows (default: until the database returns), and
//!    keeps its entries claimed meanwhile (`XCLAIM ... JUSTID`, which resets
//!    their idle time without counting a delivery), so no other instance
//!    steals them and no entry is dead-lettered for an outage.
//! 5. Every `claim_interval` it dead-letters entries delivered
//!    `max_deliveries` times (writes the database refused for other
//!    reasons), claims entries idle longer than `claim_min_idle` with
//!    `XAUTOCLAIM` (a dead consumer's), and forgets consumers that are long
//!    idle and own nothing. A malformed entry is dead-lettered at once.
//!    Dead-lettering gives the order's item and buyer entry back to the
//!    sale, atomically, unless the order turns out to be written.
//! 6. A consumer stops once its sale has ended (on the Redis server's clock,
//!    the gate's) and its stream is empty: it marks the voucher drained in
//!    the database, sets the sale's keys to expire after `finished_ttl`,
//!    and frees its connection and its metric series. There is no grace
//!    window: an instance started long after a sale still drains a backlog.
//! 7. On shutdown it finishes the write in hand and stops; anything read but
//!    not acknowledged stays pending for the next start or another claim.
//!
//! Here: the consumer's life (steps 1 to 4, 6 and 7). `ack.rs`: the
//! acknowledgement script and its calls (step 3's end); `claim.rs`: the
//! periodic maintenance, claiming and dead letters (step 5) and the gauges.

use std::collections::HashSet;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::streams::{StreamId, StreamReadReply};
use redis::AsyncConnectionConfig;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::PipelineConfig;
use crate::db::{is_transient, Order, StockGuard, Voucher, WriteOutcome};
use crate::keys;
use crate::state::AppState;

mod ack;
mod claim;

/// Lets a drained sale's keys expire, only if its stream is still empty (a
/// replay may have put orders back meanwhile).
///
/// KEYS[1] order stream, KEYS[2..] the other sale keys; ARGV[1] TTL seconds
static EXPIRE_IF_EMPTY: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
if redis.call('XLEN', KEYS[1]) > 0 then return 0 end
for i = 1, #KEYS do redis.call('EXPIRE', KEYS[i], ARGV[1]) end
return 1
",
    )
});

/// After a sale's end (Redis clock), entries may still be in flight from a
/// gate call that started just before it; the consumer waits this long
/// past the end before it calls an empty stream drained.
const DRAIN_MARGIN_MS: i64 = 2_000;

/// Longest pause between retries of a write through a database outage.
const MAX_OUTAGE_BACKOFF: Duration = Duration::from_secs(5);

/// Runs consumers for every voucher whose stream may hold work until
/// `shutdown` fires; returns once all of them have stopped.
pub async fn run(state: AppState, shutdown: CancellationToken) {
    let config = state.config().pipeline.clone();
    let mut running: HashSet<i64> = HashSet::new();
    let mut tasks = JoinSet::new();
    loop {
        match state.db().undrained_vouchers().await {
            Ok(vouchers) => {
                for voucher in vouchers {
                    if running.insert(voucher.id) {
                        let consumer = Consumer::new(state.clone(), voucher, config.clone());
                        tasks.spawn(consumer.run(shutdown.clone()));
                    }
                }
            }
            Err(e) => tracing::warn!("pipeline cannot list vouchers: {e}"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(config.discover_interval) => {}
            Some(done) = tasks.join_next() => {
                if let Ok(voucher) = done {
                    running.remove(&voucher);
                }
            }
        }
    }
    while tasks.join_next().await.is_some() {}
}

/// The consumer of one voucher's stream.
struct Consumer {
    /// Database, shared connection, names.
    state: AppState,
    /// Whose orders.
    voucher: Voucher,
    /// `seckill:orders:{V}`.
    stream: String,
    /// `seckill:orders-dead:{V}`.
    dead: String,
    /// Tuning.
    config: PipelineConfig,
    /// When claiming and dead-lettering last ran.
    last_claim: Instant,
    /// When the lag and pending gauges were last refreshed.
    last_gauges: Instant,
}

/// What became of one entry.
enum Handled {
    /// Written, or settled for good: acknowledge, in this mode (the
    /// [`ack::ACK`] script's: 0 written, 1 give the item back, 2 and the buyer).
    Done(Option<Order>, u8),
    /// Moved to the dead-letter stream (acknowledged there).
    Moved,
    /// Not written; stays pending for a retry (and, after
    /// `max_deliveries`, the dead-letter stream).
    Retry,
    /// Shutdown came during an outage: stop handling, leave it pending.
    Stop,
}

/// How one consumer ended.
enum Ended {
    /// Shutdown.
    Shutdown,
    /// The sale ended and its stream is empty.
    Drained,
}

impl Consumer {
    fn new(state: AppState, voucher: Voucher, config: PipelineConfig) -> Consumer {
        Consumer {
            stream: keys::orders_stream(voucher.id),
            dead: keys::dead_letter_stream(voucher.id),
            state,
            voucher,
            config,
            last_claim: Instant::now(),
            last_gauges: Instant::now() - Duration::from_secs(60),
        }
    }

    fn name(&self) -> &str {
        &self.state.config().consumer_name
    }

    fn id(&self) -> i64 {
        self.voucher.id
    }

    /// Consumes until shutdown or until the sale is drained, reconnecting
    /// after Redis failures; returns the voucher id.
    async fn run(mut self, shutdown: CancellationToken) -> i64 {
        self.state.activate_voucher_metrics(self.id());
        let mut backoff = Duration::from_millis(100);
        while !shutdown.is_cancelled() {
            match self.session(&shutdown).await {
                Ok(Ended::Shutdown) => break,
                Ok(Ended::Drained) => {
                    tracing::info!(voucher = self.id(), "sale drained; order consumer stops");
                    self.state.retire_voucher_metrics(self.id());
                    break;
                }
                Err(e) => {
                    tracing::warn!(voucher = self.id(), "order consumer: {e}; retrying");
                    metrics::counter!("seckill_pipeline_errors_total").increment(1);
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        }
        self.id()
    }

    /// One connection's worth of consuming: create the group, drain own
    /// pending entries, then loop on new ones until shutdown or drained.
    async fn session(&mut self, shutdown: &CancellationToken) -> redis::RedisResult<Ended> {
        // A dedicated connection: XREADGROUP BLOCK would stall every other
        // command queued behind it on the shared multiplexed connection.
        // It is dropped (closed) when the consumer stops.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(self.config.block + Duration::from_secs(5)));
        let mut conn = self
            .state
            .redis_client()
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        // Shows in CLIENT LIST: which instance consumes which sale.
        let _: () = redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg(format!("seckill-consumer:{}:{}", self.id(), self.name()))
            .query_async(&mut conn)
            .await?;
        self.create_group(&mut conn).await?;
        // Drain what this consumer name read before and never acknowledged.
        loop {
            let entries = self.read(&mut conn, "0", None).await?;
            if entries.is_empty() {
                break;
            }
            let settled = self.handle_all(&mut conn, entries, shutdown).await?;
            if settled == 0 || shutdown.is_cancelled() {
                // Everything left failed again; retries go through claiming.
                break;
            }
        }
        while !shutdown.is_cancelled() {
            if self.last_claim.elapsed() >= self.config.claim_interval {
                self.maintain(&mut conn, shutdown).await?;
                self.last_claim = Instant::now();
                if self.drained(&mut conn).await? && self.finish(&mut conn).await? {
                    return Ok(Ended::Drained);
                }
            }
            if self.last_gauges.elapsed() >= Duration::from_secs(1) {
                self.update_gauges(&mut conn).await;
                self.last_gauges = Instant::now();
            }
            let entries = self.read(&mut conn, ">", Some(self.config.block)).await?;
            self.handle_all(&mut conn, entries, shutdown).await?;
        }
        Ok(Ended::Shutdown)
    }

    async fn create_group(&self, conn: &mut MultiplexedConnection) -> redis::RedisResult<()> {
        let created: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&self.stream)
            .arg(keys::ORDER_GROUP)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(conn)
            .await;
        match created {
            Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
            other => other,
        }
    }

    /// True once the sale has ended on the Redis server's clock (plus
    /// [`DRAIN_MARGIN_MS`]), its stream holds no entry and its dead-letter
    /// stream is empty: every accepted order is written or abandoned and
    /// its dead letter dealt with. A dead letter keeps the sale (its keys,
    /// its consumer, its health line) alive until an operator replays or
    /// clears it.
    async fn drained(&self, conn: &mut MultiplexedConnection) -> redis::RedisResult<bool> {
        let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(conn).await?;
        let now_ms = secs * 1000 + micros / 1000;
        if now_ms < self.voucher.end_ms + DRAIN_MARGIN_MS {
            return Ok(false);
        }
        // A sale whose Redis state is gone is not drained: its accepted
        // orders may be lost, and health must keep saying so until an
        // operator re-seeds it.
        let (left, dead, state): (i64, i64, bool) = redis::pipe()
            .cmd("XLEN")
            .arg(&self.stream)
            .cmd("XLEN")
            .arg(&self.dead)
            .exists(keys::meta(self.id()))
            .query_async(conn)
            .await?;
        Ok(left == 0 && dead == 0 && state)
    }

    /// Marks the voucher drained and lets its sale keys expire; false (and
    /// the mark undone) when orders came back into the stream meanwhile
    /// (a dead-letter replay).
    async fn finish(&self, conn: &mut MultiplexedConnection) -> redis::RedisResult<bool> {
        let db_error = |e: sqlx::Error| {
            redis::RedisError::from((
                redis::ErrorKind::Io,
                "cannot mark the sale drained",
                e.to_string(),
            ))
        };
        // Not drained in the database on error: keep consuming (an instance
        // restarted later must still see this voucher).
        self.state
            .db()
            .mark_drained(self.id())
            .await
            .map_err(db_error)?;
        let ttl = self.state.config().finished_ttl.as_secs().max(1);
        let keys = keys::sale_keys(self.id(), self.voucher.segments);
        let mut expire = EXPIRE_IF_EMPTY.key(&self.stream);
        for key in keys.iter().filter(|k| **k != self.stream) {
            expire.key(key);
        }
        let expired: i64 = expire.arg(ttl).invoke_async(conn).await?;
        if expired == 0 {
            self.state
                .db()
                .mark_undrained(self.id())
                .await
                .map_err(db_error)?;
            return Ok(false);
        }
        Ok(true)
    }

    /// XREADGROUP from `id` (`0` = own pending, `>` = new).
    async fn read(
        &self,
        conn: &mut MultiplexedConnection,
        id: &str,
        block: Option<Duration>,
    ) -> redis::RedisResult<Vec<StreamId>> {
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(keys::ORDER_GROUP)
            .arg(self.name())
            .arg("COUNT")
            .arg(self.config.batch);
        if let Some(block) = block {
            cmd.arg("BLOCK").arg(block.as_millis().max(1) as u64);
        }
        cmd.arg("STREAMS").arg(&self.stream).arg(id);
        let reply: redis::RedisResult<Option<StreamReadReply>> = cmd.query_async(conn).await;
        let reply = match reply {
            // Redis lost the stream (restart without persistence): recreate
            // the group so consuming resumes once the gate accepts again.
            Err(e) if e.code() == Some("NOGROUP") => {
                self.create_group(conn).await?;
                return Ok(Vec::new());
            }
            other => other?,
        };
        Ok(reply
            .map(|r| r.keys.into_iter().flat_map(|k| k.ids).collect())
            .unwrap_or_default())
    }

    /// Writes and acknowledges a batch; returns how many were settled.
    async fn handle_all(
        &self,
        conn: &mut MultiplexedConnection,
        entries: Vec<StreamId>,
        shutdown: &CancellationToken,
    ) -> redis::RedisResult<usize> {
        let mut settled: Vec<(String, Option<Order>, u8)> = Vec::new();
        let mut moved = 0;
        for (i, entry) in entries.iter().enumerate() {
            let still_ours: Vec<&str> = entries[i..].iter().map(|e| e.id.as_str()).collect();
            match self.handle(conn, entry, &still_ours, shutdown).await? {
                Handled::Done(order, mode) => settled.push((entry.id.clone(), order, mode)),
                Handled::Moved => moved += 1,
                Handled::Retry => {}
                Handled::Stop => break,
            }
        }
        self.ack(conn, &settled).await?;
        Ok(settled.len() + moved)
    }

    /// Writes one entry's order, waiting out a database outage. Only a
    /// committed (or definitively refused) write counts as done.
    async fn handle(
        &self,
        conn: &mut MultiplexedConnection,
        entry: &StreamId,
        batch: &[&str],
        shutdown: &CancellationToken,
    ) -> redis::RedisResult<Handled> {
        let Some(order) = parse(entry, self.id()) else {
            tracing::warn!(voucher = self.id(), id = %entry.id, "malformed order entry; dead-lettered");
            metrics::counter!("seckill_pipeline_bad_entries_total").increment(1);
            self.dead_letter(
                conn,
                &entry.id,
                1,
                self.name(),
                "malformed entry",
                None,
                false,
            )
            .await?;
            return Ok(Handled::Moved);
        };
        let started = Instant::now();
        let mut backoff = Duration::from_millis(100);
        let mut last_touch = Instant::now();
        loop {
            let write = tokio::time::timeout(
                self.config.write_timeout,
                self.state
                    .db()
                    .write_abandonable_order(&order, StockGuard::Enforce),
            )
            .await;
            let problem = match write {
                Ok(Ok(outcome)) => return self.settle(conn, &entry.id, &order, outcome).await,
                Ok(Err(e)) if !is_transient(&e) => {
                    tracing::warn!(order_id = order.id, "cannot write order: {e}");
                    return Ok(Handled::Retry);
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("write timed out after {:?}", self.config.write_timeout),
            };
            metrics::counter!("seckill_pipeline_outage_retries_total").increment(1);
            if let Some(limit) = self.config.outage_limit {
                if started.elapsed() >= limit {
                    tracing::error!(
                        order_id = order.id,
                        "database unavailable for {limit:?}: {problem}; dead-lettering"
                    );
                    let reason = format!("database unavailable for {limit:?}: {problem}");
                    // A write in flight may still commit: only the
                    // database can abandon the order, and while it cannot
                    // answer, the dead letter keeps the item (`held`).
                    // One last write first: if the database has just come
                    // back, the order is written rather than abandoned.
                    let last = tokio::time::timeout(
                        self.config.write_timeout,
                        self.state
                            .db()
                            .write_abandonable_order(&order, StockGuard::Enforce),
                    )
                    .await;
                    if let Ok(Ok(outcome)) = last {
                        return self.settle(conn, &entry.id, &order, outcome).await;
                    }
                    // Bounded like a write: the database may still hang.
                    let abandoned = tokio::time::timeout(
                        self.config.write_timeout,
                        self.state.db().abandon_order(&order, &reason),
                    )
                    .await;
                    if matches!(abandoned, Ok(Ok(false))) {
                        // Written after all.
                        return Ok(Handled::Done(Some(order), 0));
                    }
                    let give_back = matches!(abandoned, Ok(Ok(true)));
                    self.dead_letter(
                        conn,
                        &entry.id,
                        1,
                        self.name(),
                        &reason,
                        Some(&order),
                        give_back,
                    )
                    .await?;
                    return Ok(Handled::Moved);
                }
            }
            if started.elapsed() < Duration::from_millis(150) || backoff >= MAX_OUTAGE_BACKOFF {
                tracing::warn!(
                    order_id = order.id,
                    "database unavailable ({problem}); retrying until it returns"
                );
            }
            // Keep this batch's entries ours: XCLAIM with JUSTID resets
            // their idle time and does not count a delivery.
            if last_touch.elapsed() >= self.config.claim_min_idle / 3 {
                let _: redis::Value = redis::cmd("XCLAIM")
                    .arg(&self.stream)
                    .arg(keys::ORDER_GROUP)
                    .arg(self.name())
                    .arg(0)
                    .arg(batch)
                    .arg("JUSTID")
                    .query_async(conn)
                    .await?;
                last_touch = Instant::now();
            }
            let pause = backoff.min(self.config.claim_min_idle / 3);
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(Handled::Stop),
                _ = tokio::time::sleep(pause) => {}
            }
            backoff = (backoff * 2).min(MAX_OUTAGE_BACKOFF);
        }
    }

    /// What to do with an entry whose write came back with an answer.
    async fn settle(
        &self,
        conn: &mut MultiplexedConnection,
        id: &str,
        order: &Order,
        outcome: WriteOutcome,
    ) -> redis::RedisResult<Handled> {
        // (label, failure reason, give-back mode)
        let (label, failure, mode) = match outcome {
            WriteOutcome::Created => ("created", None, 0),
            WriteOutcome::AlreadyWritten => ("replayed", None, 0),
            // The buyer has another order: the item goes back, the buyer
            // entry stays.
            WriteOutcome::DuplicateUser => ("duplicate", Some("user already has an order"), 1),
            // The id sequence restarted (Redis lost data): nothing was
            // written for this buyer, who may buy again.
            WriteOutcome::IdTaken => ("id_taken", Some("order id already taken"), 2),
            // The database has no stock left: the gate over-accepted, and
            // giving the item back would sell it again.
            WriteOutcome::StockExhausted => {
                ("stock_exhausted", Some("database stock exhausted"), 0)
            }
            // Another consumer gave up on it first (and the database
            // abandoned it): finish that consumer's dead-lettering.
            WriteOutcome::Abandoned => {
                self.dead_letter(conn, id, 1, self.name(), "abandoned", Some(order), true)
                    .await?;
                return Ok(Handled::Moved);
            }
        };
        if let Some(reason) = failure {
            if let Err(e) = self.state.db().record_failed(order, reason).await {
                tracing::warn!(order_id = order.id, "cannot record failed order: {e}");
                return Ok(Handled::Retry);
            }
        }
        metrics::counter!("seckill_orders_written_total", "path" => "stream", "outcome" => label)
            .increment(1);
        Ok(Handled::Done(Some(*order), mode))
    }
}

/// The order in an entry, or `None` for a malformed one (missing or
/// non-positive fields, or another voucher's order).
pub(crate) fn parse(entry: &StreamId, voucher: i64) -> Option<Order> {
    let field = |name: &str| -> Option<i64> { entry.get::<String>(name)?.parse().ok() };
    let order = Order {
        id: field("order_id")?,
        user_id: field("user_id")?,
        voucher_id: field("voucher_id")?,
    };
    (order.id > 0 && order.user_id > 0 && order.voucher_id == voucher).then_some(order)
}
