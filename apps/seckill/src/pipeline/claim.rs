//! Claiming and dead letters: the consumer's periodic maintenance (entries
//! delivered too often go to the dead-letter stream, entries idle too long
//! are claimed from a dead consumer, long-idle consumers that own nothing
//! are forgotten) and the metrics it keeps up to date.

use std::collections::HashMap;
use std::sync::LazyLock;

use redis::aio::MultiplexedConnection;
use redis::streams::{StreamAutoClaimReply, StreamPendingCountReply};
use tokio_util::sync::CancellationToken;

use crate::db::Order;
use crate::keys;

use super::{parse, Consumer};

/// Moves one entry to the dead-letter stream if, and only if, it is still
/// pending (two consumers racing add it once). With `give back`, the
/// order's item and buyer entry return to the sale (only after the
/// database abandoned the order: no write of it can commit any more);
/// without, they stay taken (`held` = 1 in the dead letter) and a replay
/// puts the order back as it is.
///
/// KEYS[1] order stream, KEYS[2] dead-letter stream, KEYS[3] pending hash,
/// KEYS[4] stock, KEYS[5] buyers (same hash tag)
/// ARGV[1] group, ARGV[2] entry id, ARGV[3] deliveries, ARGV[4] consumer,
/// ARGV[5] reason, ARGV[6] user id ('' for a malformed entry), ARGV[7]
/// order id, ARGV[8] give back ('1' or '0'), ARGV[9..] the entry's
/// field/value pairs
static DEAD_LETTER: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
local held = '0'
if ARGV[6] ~= '' and ARGV[8] ~= '1' then held = '1' end
local fields = {'original_id', ARGV[2], 'deliveries', ARGV[3], 'last_consumer', ARGV[4], 'reason', ARGV[5], 'held', held}
for i = 9, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('XADD', KEYS[2], '*', unpack(fields))
redis.call('XDEL', KEYS[1], ARGV[2])
if ARGV[6] ~= '' and ARGV[8] == '1' then
  if redis.call('HGET', KEYS[3], ARGV[6]) == ARGV[7] then redis.call('HDEL', KEYS[3], ARGV[6]) end
  if redis.call('EXISTS', KEYS[4]) == 1 then redis.call('INCR', KEYS[4]) end
  redis.call('SREM', KEYS[5], ARGV[6])
end
return 1
",
    )
});

/// Forgets a consumer only if it owns no pending entry at that moment (a
/// restarted instance with the same name may have just read some).
///
/// KEYS[1] order stream; ARGV[1] group, ARGV[2] consumer
static FORGET_CONSUMER: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local owned = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if #owned > 0 then return -1 end
return redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
",
    )
});

impl Consumer {
    /// Dead-letters over-delivered entries, claims idle ones, and forgets
    /// consumers that are gone.
    pub(super) async fn maintain(
        &self,
        conn: &mut MultiplexedConnection,
        shutdown: &CancellationToken,
    ) -> redis::RedisResult<()> {
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
            self.give_up(conn, &p.id, p.times_delivered, &p.consumer)
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
            self.handle_all(conn, claimed.claimed, shutdown).await?;
            cursor = claimed.next_stream_id;
            if cursor == "0-0" || shutdown.is_cancelled() {
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
                    let _: i64 = FORGET_CONSUMER
                        .key(&self.stream)
                        .arg(keys::ORDER_GROUP)
                        .arg(&name)
                        .invoke_async(conn)
                        .await?;
                }
            }
        }
        Ok(())
    }

    /// An entry delivered `max_deliveries` times whose write the database
    /// kept refusing: acknowledged if its order is written after all,
    /// dead-lettered (item given back) if surely not, left alone while the
    /// database cannot tell.
    pub(super) async fn give_up(
        &self,
        conn: &mut MultiplexedConnection,
        id: &str,
        deliveries: usize,
        consumer: &str,
    ) -> redis::RedisResult<()> {
        let Some(entry) = self.entry(conn, id).await? else {
            return Ok(());
        };
        let Some(order) = parse(&entry, self.id()) else {
            return self
                .dead_letter(
                    conn,
                    id,
                    deliveries,
                    consumer,
                    "malformed entry",
                    None,
                    false,
                )
                .await;
        };
        let reason = format!("write refused {deliveries} times");
        let abandoned = tokio::time::timeout(
            self.config.write_timeout,
            self.state.db().abandon_order(&order, &reason),
        )
        .await
        .unwrap_or(Err(sqlx::Error::PoolTimedOut));
        match abandoned {
            Ok(false) => self.ack_written(conn, id, &order).await?,
            Ok(true) => {
                self.dead_letter(conn, id, deliveries, consumer, &reason, Some(&order), true)
                    .await?;
            }
            Err(e) => tracing::warn!(
                order_id = order.id,
                "cannot abandon order before dead-lettering: {e}"
            ),
        }
        Ok(())
    }

    /// Moves an entry to the dead-letter stream, giving a parsed order's
    /// item and buyer entry back when `give_back` (the caller had the
    /// database abandon the order first, which records it failed). Without
    /// `give_back` the order stays pending for its buyer: its item is held
    /// until a replay puts it back into the stream.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn dead_letter(
        &self,
        conn: &mut MultiplexedConnection,
        id: &str,
        deliveries: usize,
        consumer: &str,
        reason: &str,
        order: Option<&Order>,
        give_back: bool,
    ) -> redis::RedisResult<()> {
        let entry = self.entry(conn, id).await?;
        // Marked first: a crash between the two leaves a harmless extra
        // member (health checks the stream's length), never a dead letter
        // that health does not look at.
        let _: i64 = redis::cmd("SADD")
            .arg(keys::DEAD_LETTERED)
            .arg(self.id())
            .query_async(conn)
            .await?;
        let mut invocation = DEAD_LETTER.key(&self.stream);
        invocation
            .key(&self.dead)
            .key(keys::pending(self.id()))
            .key(keys::stock(self.id()))
            .key(keys::buyers(self.id()))
            .arg(keys::ORDER_GROUP)
            .arg(id)
            .arg(deliveries)
            .arg(consumer)
            .arg(reason);
        match order {
            Some(o) => invocation.arg(o.user_id).arg(o.id),
            None => invocation.arg("").arg(""),
        };
        invocation.arg(if give_back { "1" } else { "0" });
        if let Some(entry) = &entry {
            let mut fields: Vec<(&String, &redis::Value)> = entry.map.iter().collect();
            fields.sort_by(|a, b| a.0.cmp(b.0));
            for (k, v) in fields {
                invocation.arg(k).arg(value_bytes(v));
            }
        }
        let moved: i64 = invocation.invoke_async(conn).await?;
        if moved == 1 {
            tracing::warn!(
                voucher = self.id(),
                id,
                deliveries,
                reason,
                give_back,
                "order entry dead-lettered"
            );
            metrics::counter!("seckill_dead_letters_total").increment(1);
        }
        Ok(())
    }

    /// Refreshes the backlog and pending gauges (best effort). The stream
    /// holds exactly the unwritten orders, so its length is the backlog.
    pub(super) async fn update_gauges(&self, conn: &mut MultiplexedConnection) {
        let reply: redis::RedisResult<(i64, Vec<redis::Value>)> = redis::pipe()
            .cmd("XLEN")
            .arg(&self.stream)
            .cmd("XPENDING")
            .arg(&self.stream)
            .arg(keys::ORDER_GROUP)
            .query_async(conn)
            .await;
        let Ok((backlog, summary)) = reply else {
            return;
        };
        let pending: i64 = summary
            .first()
            .and_then(|v| redis::from_redis_value_ref(v).ok())
            .unwrap_or(0);
        let voucher = self.id().to_string();
        metrics::gauge!("seckill_stream_pending", "voucher" => voucher.clone()).set(pending as f64);
        metrics::gauge!("seckill_stream_lag", "voucher" => voucher).set((backlog - pending) as f64);
    }
}

fn value_bytes(v: &redis::Value) -> Vec<u8> {
    redis::from_redis_value_ref::<Vec<u8>>(v).unwrap_or_default()
}
