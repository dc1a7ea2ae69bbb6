//! The order pipeline: a Redis stream consumer group that writes the orders
//! the `lua` gate accepted into the database.
//!
//! Each voucher has its own stream (`seckill:orders:{V}`, same hash tag as
//! the gate's keys). Every instance runs one consumer per live voucher, all
//! in the group [`keys::ORDER_GROUP`], under the instance's consumer name:
//!
//! 1. The group is created with `MKSTREAM` from id `0`, so a group created
//!    after the first orders still sees them.
//! 2. At start the consumer drains its own pending entries (id `0`): what a
//!    previous run with the same name read but never acknowledged.
//! 3. Then it reads new entries (`>`), writes each order in one database
//!    transaction, and `XACK`s only after the commit. Replays are harmless
//!    (the write is idempotent per order id).
//! 4. Every `claim_interval` it moves entries delivered `max_deliveries`
//!    times to the dead-letter stream (and acknowledges them, atomically, in
//!    one script), then claims entries idle longer than `claim_min_idle`
//!    with `XAUTOCLAIM` (a dead consumer's, or its own failed ones), and
//!    forgets consumers that are long idle and own nothing.
//! 5. On shutdown it finishes the batch in hand and stops; anything read but
//!    not acknowledged stays pending for the next start or another claim.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::streams::{StreamAutoClaimReply, StreamId, StreamPendingCountReply, StreamReadReply};
use redis::AsyncConnectionConfig;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::PipelineConfig;
use crate::db::{Order, StockGuard, WriteOutcome};
use crate::keys;
use crate::state::AppState;

/// Moves one entry to the dead-letter stream if, and only if, it is still
/// pending; two consumers racing to dead-letter it add it once.
///
/// KEYS[1] order stream, KEYS[2] dead-letter stream (same hash tag)
/// ARGV[1] group, ARGV[2] entry id, ARGV[3] deliveries, ARGV[4] consumer,
/// ARGV[5..] the entry's field/value pairs
static DEAD_LETTER: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
local fields = {'original_id', ARGV[2], 'deliveries', ARGV[3], 'last_consumer', ARGV[4]}
for i = 5, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('XADD', KEYS[2], '*', unpack(fields))
return 1
",
    )
});

/// Runs consumers for every live voucher until `shutdown` fires; returns
/// once all of them have stopped.
pub async fn run(state: AppState, shutdown: CancellationToken) {
    let config = state.config().pipeline.clone();
    let mut running: HashSet<i64> = HashSet::new();
    let mut tasks = JoinSet::new();
    loop {
        match state.db().live_voucher_ids(Duration::from_secs(3600)).await {
            Ok(ids) => {
                for id in ids {
                    if running.insert(id) {
                        let consumer = Consumer::new(state.clone(), id, config.clone());
                        tasks.spawn(consumer.run(shutdown.clone()));
                    }
                }
            }
            Err(e) => tracing::warn!("pipeline cannot list vouchers: {e}"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(config.discover_interval) => {}
            Some(_) = tasks.join_next() => {}
        }
    }
    while tasks.join_next().await.is_some() {}
}

/// The consumer of one voucher's stream.
struct Consumer {
    /// Database, shared connection, names.
    state: AppState,
    /// Whose orders.
    voucher: i64,
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
    /// Written or settled for good (duplicate, refused): acknowledge.
    Done,
    /// Not written; stays pending for a retry (and, eventually, the
    /// dead-letter stream).
    Retry,
}

impl Consumer {
    fn new(state: AppState, voucher: i64, config: PipelineConfig) -> Consumer {
        Consumer {
            stream: keys::orders_stream(voucher),
            dead: keys::dead_letter_stream(voucher),
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

    /// Consumes until shutdown, reconnecting after Redis failures.
    async fn run(mut self, shutdown: CancellationToken) {
        let mut backoff = Duration::from_millis(100);
        while !shutdown.is_cancelled() {
            match self.session(&shutdown).await {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(voucher = self.voucher, "order consumer: {e}; retrying");
                    metrics::counter!("seckill_pipeline_errors_total").increment(1);
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        }
    }

    /// One connection's worth of consuming: create the group, drain own
    /// pending entries, then loop on new ones.
    async fn session(&mut self, shutdown: &CancellationToken) -> redis::RedisResult<()> {
        // A dedicated connection: XREADGROUP BLOCK would stall every other
        // command queued behind it on the shared multiplexed connection.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(self.config.block + Duration::from_secs(5)));
        let mut conn = self
            .state
            .redis_client()
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        self.create_group(&mut conn).await?;
        // Drain what this consumer name read before and never acknowledged.
        loop {
            let entries = self.read(&mut conn, "0", None).await?;
            if entries.is_empty() {
                break;
            }
            let done = self.handle_all(&mut conn, entries).await?;
            if done == 0 {
                // Everything left failed again; retries go through claiming.
                break;
            }
        }
        while !shutdown.is_cancelled() {
            if self.last_claim.elapsed() >= self.config.claim_interval {
                self.maintain(&mut conn).await?;
                self.last_claim = Instant::now();
            }
            if self.last_gauges.elapsed() >= Duration::from_secs(1) {
                self.update_gauges(&mut conn).await;
                self.last_gauges = Instant::now();
            }
            let entries = self.read(&mut conn, ">", Some(self.config.block)).await?;
            self.handle_all(&mut conn, entries).await?;
        }
        Ok(())
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
    ) -> redis::RedisResult<usize> {
        let mut done = Vec::new();
        for entry in &entries {
            if let Handled::Done = self.handle(entry).await {
                done.push(entry.id.clone());
            }
        }
        if !done.is_empty() {
            let _: i64 = redis::cmd("XACK")
                .arg(&self.stream)
                .arg(keys::ORDER_GROUP)
                .arg(&done)
                .query_async(conn)
                .await?;
        }
        Ok(done.len())
    }

    /// Writes one entry's order. Only a committed (or definitively refused)
    /// write counts as done.
    async fn handle(&self, entry: &StreamId) -> Handled {
        let Some(order) = parse(entry) else {
            tracing::warn!(voucher = self.voucher, id = %entry.id, "malformed order entry");
            metrics::counter!("seckill_pipeline_bad_entries_total").increment(1);
            return Handled::Retry;
        };
        match self
            .state
            .db()
            .write_order(&order, StockGuard::Enforce)
            .await
        {
            Ok(outcome) => {
                let (label, failure) = match outcome {
                    WriteOutcome::Created => ("created", None),
                    WriteOutcome::AlreadyWritten => ("replayed", None),
                    WriteOutcome::DuplicateUser => ("duplicate", Some("user already has an order")),
                    WriteOutcome::IdTaken => ("id_taken", Some("order id already taken")),
                    WriteOutcome::StockExhausted => {
                        ("stock_exhausted", Some("database stock exhausted"))
                    }
                };
                if let Some(reason) = failure {
                    if let Err(e) = self.state.db().record_failed(&order, reason).await {
                        tracing::warn!(order_id = order.id, "cannot record failed order: {e}");
                        return Handled::Retry;
                    }
                }
                metrics::counter!("seckill_orders_written_total", "path" => "stream", "outcome" => label)
                    .increment(1);
                Handled::Done
            }
            Err(e) => {
                tracing::warn!(order_id = order.id, "cannot write order: {e}");
                Handled::Retry
            }
        }
    }

    /// Dead-letters over-delivered entries, claims idle ones, and forgets
    /// consumers that are gone.
    async fn maintain(&self, conn: &mut MultiplexedConnection) -> redis::RedisResult<()> {
        let min_idle = self.config.claim_min_idle.as_millis() as u64;
        // 1. Dead-letter: entries idle past min_idle that were delivered
        //    max_deliveries times are not retried again.
        let pending: StreamPendingCountReply = redis::cmd("XPENDING")
            .arg(&self.stream)
            .arg(keys::ORDER_GROUP)
            .arg("IDLE")
            .arg(min_idle)
            .arg("-")
            .arg("+")
            .arg(self.config.batch)
            .query_async(conn)
            .await?;
        for p in pending
            .ids
            .iter()
            .filter(|p| p.times_delivered as u64 >= self.config.max_deliveries)
        {
            self.dead_letter(conn, &p.id, p.times_delivered, &p.consumer)
                .await?;
        }
        // 2. Claim: entries idle past min_idle belong to a dead (or stuck)
        //    consumer, or are this consumer's own failures; take them over.
        let mut cursor = "0-0".to_owned();
        for _ in 0..10 {
            let claimed: StreamAutoClaimReply = redis::cmd("XAUTOCLAIM")
                .arg(&self.stream)
                .arg(keys::ORDER_GROUP)
                .arg(self.name())
                .arg(min_idle)
                .arg(&cursor)
                .arg("COUNT")
                .arg(self.config.batch)
                .query_async(conn)
                .await?;
            if !claimed.claimed.is_empty() {
                metrics::counter!("seckill_pipeline_claimed_total")
                    .increment(claimed.claimed.len() as u64);
            }
            self.handle_all(conn, claimed.claimed).await?;
            cursor = claimed.next_stream_id;
            if cursor == "0-0" {
                break;
            }
        }
        // 3. Forget consumers idle for long that own no entries.
        let consumers: Vec<HashMap<String, redis::Value>> = redis::cmd("XINFO")
            .arg("CONSUMERS")
            .arg(&self.stream)
            .arg(keys::ORDER_GROUP)
            .query_async(conn)
            .await?;
        let forget_after = (min_idle * 10).max(60_000);
        for c in consumers {
            let name: Option<String> = c
                .get("name")
                .and_then(|v| redis::from_redis_value_ref(v).ok());
            let pending: i64 = c
                .get("pending")
                .and_then(|v| redis::from_redis_value_ref(v).ok())
                .unwrap_or(1);
            let idle: u64 = c
                .get("idle")
                .and_then(|v| redis::from_redis_value_ref(v).ok())
                .unwrap_or(0);
            if let Some(name) = name {
                if name != self.name() && pending == 0 && idle > forget_after {
                    let _: i64 = redis::cmd("XGROUP")
                        .arg("DELCONSUMER")
                        .arg(&self.stream)
                        .arg(keys::ORDER_GROUP)
                        .arg(&name)
                        .query_async(conn)
                        .await?;
                }
            }
        }
        Ok(())
    }

    async fn dead_letter(
        &self,
        conn: &mut MultiplexedConnection,
        id: &str,
        deliveries: usize,
        consumer: &str,
    ) -> redis::RedisResult<()> {
        let entries: Vec<StreamId> = {
            let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
                .arg(&self.stream)
                .arg(id)
                .arg(id)
                .query_async(conn)
                .await?;
            reply.ids
        };
        let mut invocation = DEAD_LETTER.key(&self.stream);
        invocation
            .key(&self.dead)
            .arg(keys::ORDER_GROUP)
            .arg(id)
            .arg(deliveries)
            .arg(consumer);
        if let Some(entry) = entries.first() {
            let mut fields: Vec<(&String, &redis::Value)> = entry.map.iter().collect();
            fields.sort_by(|a, b| a.0.cmp(b.0));
            for (k, v) in fields {
                invocation.arg(k).arg(value_bytes(v));
            }
        }
        let moved: i64 = invocation.invoke_async(conn).await?;
        if moved == 1 {
            tracing::warn!(
                voucher = self.voucher,
                id,
                deliveries,
                "order entry dead-lettered"
            );
            metrics::counter!("seckill_dead_letters_total").increment(1);
            if let Some(order) = entries.first().and_then(parse) {
                if let Err(e) = self
                    .state
                    .db()
                    .record_failed(&order, "dead-lettered after repeated write failures")
                    .await
                {
                    tracing::warn!(order_id = order.id, "cannot record failed order: {e}");
                }
            }
        }
        Ok(())
    }

    /// Refreshes the lag and pending gauges (best effort).
    async fn update_gauges(&self, conn: &mut MultiplexedConnection) {
        let groups: redis::RedisResult<Vec<HashMap<String, redis::Value>>> = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(&self.stream)
            .query_async(conn)
            .await;
        let Ok(groups) = groups else { return };
        let voucher = self.voucher.to_string();
        for g in groups {
            let name: Option<String> = g
                .get("name")
                .and_then(|v| redis::from_redis_value_ref(v).ok());
            if name.as_deref() != Some(keys::ORDER_GROUP) {
                continue;
            }
            let pending: f64 = g
                .get("pending")
                .and_then(|v| redis::from_redis_value_ref(v).ok())
                .unwrap_or(0.0);
            metrics::gauge!("seckill_stream_pending", "voucher" => voucher.clone()).set(pending);
            // `lag` is nil when Redis cannot tell (after deletions).
            if let Some(lag) = g
                .get("lag")
                .and_then(|v| redis::from_redis_value_ref::<f64>(v).ok())
            {
                metrics::gauge!("seckill_stream_lag", "voucher" => voucher.clone()).set(lag);
            }
        }
    }
}

/// The order in an entry, or `None` for a malformed one.
fn parse(entry: &StreamId) -> Option<Order> {
    let field = |name: &str| -> Option<i64> { entry.get::<String>(name)?.parse().ok() };
    let order = Order {
        id: field("order_id")?,
        user_id: field("user_id")?,
        voucher_id: field("voucher_id")?,
    };
    (order.id > 0 && order.user_id > 0 && order.voucher_id > 0).then_some(order)
}

fn value_bytes(v: &redis::Value) -> Vec<u8> {
    redis::from_redis_value_ref::<Vec<u8>>(v).unwrap_or_default()
}
