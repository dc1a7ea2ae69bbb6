//! Repair and visibility: what `/healthz` checks, and the operator's
//! commands (`seckill replay-dead-letters`, `seckill reconcile`, `seckill
//! reseed`). The runbook in the README says when to use which.
//!
//! The invariant they check and restore, per voucher: the stream holds
//! exactly the accepted orders not yet written, so
//!
//! ```text
//! stock in Redis = stock in the database - entries in the order stream
//!                  - held dead letters
//! ```
//!
//! An abandoned order gave its item back to Redis and was never written,
//! so it counts on neither side; an order dead-lettered while the database
//! could not be asked (`held`) still holds its item in Redis.

use std::sync::LazyLock;

use serde::Serialize;

use crate::db::{Order, Voucher};
use crate::error::AppError;
use crate::keys;
use crate::state::AppState;
use crate::strategy::write_sale_state;

/// First step of replaying one dead-lettered order: takes its item and
/// buyer entry again, if they are still free (an order dead-lettered while
/// its item was held, `held` = 1, already has them).
///
/// KEYS[1] stock, KEYS[2] buyers, KEYS[3] meta; ARGV[1] user, ARGV[2] held
///
/// Returns 0 reserved, 1 sold out meanwhile, 2 the buyer bought again
/// meanwhile, 5 the sale's Redis state is gone.
static RESERVE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('EXISTS', KEYS[3]) == 0 then return 5 end
if ARGV[2] == '1' then return 0 end
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return 2 end
if tonumber(redis.call('GET', KEYS[1])) <= 0 then return 1 end
redis.call('DECR', KEYS[1])
redis.call('SADD', KEYS[2], ARGV[1])
return 0
",
    )
});

/// Gives a reservation back (the replay could not go on).
///
/// KEYS[1] stock, KEYS[2] buyers; ARGV[1] user, ARGV[2] held
static UNRESERVE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
if ARGV[2] == '1' then return 0 end
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('INCR', KEYS[1]) end
redis.call('SREM', KEYS[2], ARGV[1])
return 1
",
    )
});

/// Last step of a replay: the order goes back into the stream (and the
/// pending hash), the sale's keys stop expiring, the dead letter goes.
///
/// KEYS[1] stock, KEYS[2] buyers, KEYS[3] meta, KEYS[4] stream,
/// KEYS[5] pending, KEYS[6] dead-letter stream
/// ARGV[1] dead entry id, ARGV[2] user, ARGV[3] order id, ARGV[4] voucher
static ENQUEUE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
redis.call('HSET', KEYS[5], ARGV[2], ARGV[3])
redis.call('XADD', KEYS[4], '*', 'order_id', ARGV[3], 'user_id', ARGV[2], 'voucher_id', ARGV[4])
for i = 1, 5 do redis.call('PERSIST', KEYS[i]) end
redis.call('XDEL', KEYS[6], ARGV[1])
return 1
",
    )
});

/// Removes the dead letter of an order found written after all; if its
/// item had been given back, takes the item and the buyer entry again.
///
/// KEYS[1] stock, KEYS[2] buyers, KEYS[3] pending, KEYS[4] dead-letter
/// stream; ARGV[1] dead entry id, ARGV[2] user, ARGV[3] order id, ARGV[4]
/// held ('1' or '0')
static FORGET_WRITTEN: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
if ARGV[4] ~= '1' and redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('DECR', KEYS[1])
  redis.call('SADD', KEYS[2], ARGV[2])
end
if redis.call('HGET', KEYS[3], ARGV[2]) == ARGV[3] then redis.call('HDEL', KEYS[3], ARGV[2]) end
redis.call('XDEL', KEYS[4], ARGV[1])
return 1
",
    )
});

/// Sets the stock counter to the reconciled value, only if neither it nor
/// the stream changed since they were read.
///
/// KEYS[1] stock, KEYS[2] stream, KEYS[3] dead-letter stream; ARGV[1]
/// stock read, ARGV[2] stream length read, ARGV[3] the new stock, ARGV[4]
/// dead-letter stream length read
static SET_STOCK: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('XLEN', KEYS[2]) ~= tonumber(ARGV[2]) then return 0 end
if redis.call('XLEN', KEYS[3]) ~= tonumber(ARGV[4]) then return 0 end
redis.call('SET', KEYS[1], ARGV[3])
return 1
",
    )
});

/// What needs an operator, as `/healthz` reports it: vouchers whose Redis
/// state is gone while their sale is not drained, dead-lettered orders, and
/// order pipelines lagging past the instance's `max_pipeline_lag`.
///
/// # Errors
/// When Redis or the database does not answer.
pub async fn problems(state: &AppState) -> Result<Vec<String>, AppError> {
    let mut out = Vec::new();
    let vouchers = state.db().undrained_vouchers().await?;
    let mut conn = state.redis();
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(&mut conn).await?;
    let now_ms = secs * 1000 + micros / 1000;
    let max_lag = state.config().max_pipeline_lag;
    if !vouchers.is_empty() {
        let mut pipe = redis::pipe();
        for v in &vouchers {
            pipe.exists(keys::meta(v.id))
                .cmd("XRANGE")
                .arg(keys::orders_stream(v.id))
                .arg("-")
                .arg("+")
                .arg("COUNT")
                .arg(1);
        }
        let replies: Vec<redis::Value> = pipe.query_async(&mut conn).await?;
        for (v, pair) in vouchers.iter().zip(replies.chunks(2)) {
            let exists: bool = redis::from_redis_value_ref(&pair[0]).unwrap_or(true);
            if !exists {
                out.push(format!(
                    "voucher {}: Redis has no state for this sale (it lost its data?); \
                     sales of it are refused: run `seckill reseed --voucher {}`",
                    v.id, v.id
                ));
                continue;
            }
            let oldest: redis::streams::StreamRangeReply =
                redis::from_redis_value_ref(&pair[1]).unwrap_or_default();
            if let Some(entry) = oldest.ids.first() {
                let since = entry
                    .id
                    .split('-')
                    .next()
                    .and_then(|ms| ms.parse::<i64>().ok())
                    .unwrap_or(now_ms);
                let waited = (now_ms - since).max(0);
                if waited as u128 > max_lag.as_millis() {
                    out.push(format!(
                        "voucher {}: the oldest unwritten order has waited {:.1} s \
                         (more than {max_lag:?}); is the database reachable, is a consumer running?",
                        v.id,
                        waited as f64 / 1000.0
                    ));
                }
            }
        }
    }
    let dead: Vec<i64> = redis::cmd("SMEMBERS")
        .arg(keys::DEAD_LETTERED)
        .query_async(&mut conn)
        .await?;
    for voucher in dead {
        let len: i64 = redis::cmd("XLEN")
            .arg(keys::dead_letter_stream(voucher))
            .query_async(&mut conn)
            .await?;
        if len > 0 {
            out.push(format!(
                "voucher {voucher}: {len} dead-lettered orders; inspect them and run \
                 `seckill replay-dead-letters --voucher {voucher}`"
            ));
        }
    }
    Ok(out)
}

/// The order a dead-letter entry carries, if it is one of `voucher`'s (the
/// dead letter keeps the original entry's fields).
fn dead_letter_order(entry: &redis::streams::StreamId, voucher: i64) -> Option<Order> {
    crate::pipeline::parse(entry, voucher)
}

/// Orders dead-lettered while their items stayed taken (`held`) and not
/// written since: like the stream's entries, they hold Redis stock the
/// database has not taken.
async fn held_unwritten(
    state: &AppState,
    conn: &mut locksmith::Connection,
    voucher: i64,
) -> Result<i64, AppError> {
    let dead: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(keys::dead_letter_stream(voucher))
        .arg("-")
        .arg("+")
        .query_async(conn)
        .await?;
    let mut held = 0;
    for entry in &dead.ids {
        if entry.get::<String>("held").as_deref() != Some("1") {
            continue;
        }
        if let Some(order) = dead_letter_order(entry, voucher) {
            if !state.db().is_written(&order).await? {
                held += 1;
            }
        }
    }
    Ok(held)
}

/// What a dead-letter replay did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReplayReport {
    /// Orders put back into the stream (the pipeline writes them).
    pub replayed: usize,
    /// Orders found written after all; their dead-letter entries removed.
    pub already_written: usize,
    /// Not replayed: the stock ran out meanwhile (the order stays failed).
    pub sold_out: usize,
    /// Not replayed: the buyer bought again meanwhile (stays failed).
    pub bought_again: usize,
    /// Left in the dead-letter stream: not an order of this voucher.
    pub malformed: usize,
    /// Left in the dead-letter stream: Redis lost the sale's state (reseed
    /// first).
    pub state_lost: usize,
}

/// Replays a voucher's dead-letter stream: each order is put back into the
/// sale: a held one as it is, an abandoned one if its item and buyer entry
/// are still free (`RESERVE`, then lifting the abandonment, then `ENQUEUE`).
///
/// # Errors
/// When Redis or the database does not answer, or the voucher is unknown.
pub async fn replay_dead_letters(state: &AppState, voucher: i64) -> Result<ReplayReport, AppError> {
    let v = state
        .db()
        .voucher(voucher)
        .await?
        .ok_or(AppError::NotFound("voucher"))?;
    let mut report = ReplayReport::default();
    let mut conn = state.redis();
    let dead = keys::dead_letter_stream(v.id);
    let mut cursor = "-".to_owned();
    loop {
        let page: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
            .arg(&dead)
            .arg(&cursor)
            .arg("+")
            .arg("COUNT")
            .arg(500)
            .query_async(&mut conn)
            .await?;
        let Some(last) = page.ids.last() else { break };
        cursor = format!("({}", last.id);
        for entry in &page.ids {
            let Some(order) = dead_letter_order(entry, v.id) else {
                report.malformed += 1;
                continue;
            };
            let held = entry.get::<String>("held").as_deref() == Some("1");
            let held_arg = if held { "1" } else { "0" };
            if state.db().is_written(&order).await? {
                let _: i64 = FORGET_WRITTEN
                    .key(keys::stock(v.id))
                    .key(keys::buyers(v.id))
                    .key(keys::pending(v.id))
                    .key(&dead)
                    .arg(&entry.id)
                    .arg(order.user_id)
                    .arg(order.id)
                    .arg(held_arg)
                    .invoke_async(&mut conn)
                    .await?;
                report.already_written += 1;
                continue;
            }
            // 1. The item and buyer entry first, so that from the moment
            //    the abandonment is lifted, a write of the order (a stale
            //    one included) has its item.
            let code: i64 = RESERVE
                .key(keys::stock(v.id))
                .key(keys::buyers(v.id))
                .key(keys::meta(v.id))
                .arg(order.user_id)
                .arg(held_arg)
                .invoke_async(&mut conn)
                .await?;
            match code {
                0 => {}
                1 => {
                    report.sold_out += 1;
                    continue;
                }
                2 => {
                    report.bought_again += 1;
                    continue;
                }
                _ => {
                    report.state_lost += 1;
                    continue;
                }
            }
            // 2. Lift the abandonment, or the pipeline's write would find
            //    it and abandon the order again.
            if let Err(e) = state.db().unabandon_order(&order).await {
                let _: i64 = UNRESERVE
                    .key(keys::stock(v.id))
                    .key(keys::buyers(v.id))
                    .arg(order.user_id)
                    .arg(held_arg)
                    .invoke_async(&mut conn)
                    .await?;
                return Err(e.into());
            }
            // 3. Back into the stream.
            let _: i64 = ENQUEUE
                .key(keys::stock(v.id))
                .key(keys::buyers(v.id))
                .key(keys::meta(v.id))
                .key(keys::orders_stream(v.id))
                .key(keys::pending(v.id))
                .key(&dead)
                .arg(&entry.id)
                .arg(order.user_id)
                .arg(order.id)
                .arg(v.id)
                .invoke_async(&mut conn)
                .await?;
            report.replayed += 1;
        }
    }
    // Orders are back in the stream: make sure consumers run for it.
    if report.replayed > 0 && v.drained_ms.is_some() {
        state.db().mark_undrained(v.id).await?;
    }
    let left: i64 = redis::cmd("XLEN").arg(&dead).query_async(&mut conn).await?;
    if left == 0 {
        let _: i64 = redis::cmd("SREM")
            .arg(keys::DEAD_LETTERED)
            .arg(v.id)
            .query_async(&mut conn)
            .await?;
    }
    Ok(report)
}

/// Redis stock against the database, for one voucher.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReconcileReport {
    /// The voucher.
    pub voucher: i64,
    /// The single stock counter (`lua`, `lock`, and the racy strategies);
    /// `None` when Redis has lost it.
    pub redis_stock: Option<i64>,
    /// The sum of the segment counters (`segmented`); `None` when any is
    /// missing.
    pub redis_segments_stock: Option<i64>,
    /// Accepted orders not yet written (the order stream's length).
    pub unwritten: i64,
    /// Dead-lettered orders whose items are still held (not written).
    pub held: i64,
    /// The database's stock.
    pub db_stock: i64,
    /// What the single counter should hold: `db_stock - unwritten - held`.
    pub expected_redis_stock: i64,
    /// `redis_stock - expected_redis_stock`: positive means Redis would sell
    /// items the database no longer has.
    pub difference: Option<i64>,
    /// True when `--fix` set the counter to the expected value.
    pub fixed: bool,
}

/// Compares a voucher's Redis stock with the database; with `fix`, sets the
/// single counter to `db_stock - unwritten` (only if neither changed while
/// reading; run again otherwise). Meant for a paused or finished sale: a
/// purchase between its stock step and its database write shows as a
/// difference of one while it runs. Segment counters are reported, not
/// fixed.
///
/// # Errors
/// When Redis or the database does not answer, or the voucher is unknown.
pub async fn reconcile(
    state: &AppState,
    voucher: i64,
    fix: bool,
) -> Result<ReconcileReport, AppError> {
    let known = state
        .db()
        .voucher(voucher)
        .await?
        .ok_or(AppError::NotFound("voucher"))?;
    // Redis first, then the database: an order written in between shows on
    // the database side only, which errs toward underselling, and its XDEL
    // changes the stream length, which makes --fix refuse.
    let mut conn = state.redis();
    let stock_raw: Option<String> = redis::cmd("GET")
        .arg(keys::stock(known.id))
        .query_async(&mut conn)
        .await?;
    let unwritten: i64 = redis::cmd("XLEN")
        .arg(keys::orders_stream(known.id))
        .query_async(&mut conn)
        .await?;
    let segment_keys: Vec<String> = (0..known.segments)
        .map(|s| keys::segment_stock(known.id, s))
        .collect();
    let segments: Vec<Option<i64>> = redis::cmd("MGET")
        .arg(&segment_keys)
        .query_async(&mut conn)
        .await?;
    let dead_len: i64 = redis::cmd("XLEN")
        .arg(keys::dead_letter_stream(known.id))
        .query_async(&mut conn)
        .await?;
    let held = held_unwritten(state, &mut conn, known.id).await?;
    let v = state
        .db()
        .voucher(voucher)
        .await?
        .ok_or(AppError::NotFound("voucher"))?;
    let redis_stock = stock_raw.as_deref().and_then(|s| s.parse::<i64>().ok());
    let expected = v.stock - unwritten - held;
    let mut fixed = false;
    if fix {
        let Some(raw) = &stock_raw else {
            return Err(AppError::Unavailable(format!(
                "Redis has no stock for voucher {}: run `seckill reseed --voucher {}` instead",
                v.id, v.id
            )));
        };
        if redis_stock != Some(expected) {
            let set: i64 = SET_STOCK
                .key(keys::stock(v.id))
                .key(keys::orders_stream(v.id))
                .key(keys::dead_letter_stream(v.id))
                .arg(raw)
                .arg(unwritten)
                .arg(expected)
                .arg(dead_len)
                .invoke_async(&mut conn)
                .await?;
            if set == 0 {
                return Err(AppError::Busy(
                    "the stock or the stream changed while reconciling (is the sale running?); \
                     run again"
                        .into(),
                ));
            }
            fixed = true;
        }
    }
    Ok(ReconcileReport {
        voucher: v.id,
        redis_stock: if fixed { Some(expected) } else { redis_stock },
        redis_segments_stock: segments.iter().copied().sum(),
        unwritten,
        held,
        db_stock: v.stock,
        expected_redis_stock: expected,
        difference: if fixed {
            Some(0)
        } else {
            redis_stock.map(|r| r - expected)
        },
        fixed,
    })
}

/// What a re-seed wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReseedReport {
    /// The voucher.
    pub voucher: i64,
    /// The stock put back (the database's).
    pub stock: i64,
    /// Buyers restored to the buyer set (users with a written order).
    pub buyers: usize,
    /// Segments seeded.
    pub segments: i64,
}

/// Re-creates a voucher's Redis state from the database after Redis lost
/// its data: window, stock = the database's stock minus the orders still in
/// the stream and the held dead letters, segments, and the buyer set from
/// the written orders and the pending ones. The stream and the pending hash are kept (with `force` on
/// a partly lost state, nothing accepted is dropped). Orders that were
/// accepted but not yet written when Redis lost its stream are gone with it
/// (the database never took their items, so they are on sale again, and
/// their buyers may buy again). Refused while the state exists, unless
/// `force`.
///
/// # Errors
/// The voucher still has Redis state (without `force`), is unknown, or
/// Redis or the database does not answer.
pub async fn reseed(state: &AppState, voucher: i64, force: bool) -> Result<ReseedReport, AppError> {
    let v: Voucher = state
        .db()
        .voucher(voucher)
        .await?
        .ok_or(AppError::NotFound("voucher"))?;
    let mut conn = state.redis();
    let exists: bool = redis::cmd("EXISTS")
        .arg(keys::meta(v.id))
        .query_async(&mut conn)
        .await?;
    if exists && !force {
        return Err(AppError::BadRequest(format!(
            "voucher {} still has its Redis state; use `seckill reconcile` to compare, \
             or --force to overwrite it",
            v.id
        )));
    }
    // Orders accepted but not yet written stay: the stream and the pending
    // hash are kept, their items stay taken and their buyers stay known.
    // Redis is read before the database (see `reconcile`).
    let unwritten: i64 = redis::cmd("XLEN")
        .arg(keys::orders_stream(v.id))
        .query_async(&mut conn)
        .await?;
    let pending_buyers: Vec<i64> = redis::cmd("HKEYS")
        .arg(keys::pending(v.id))
        .query_async(&mut conn)
        .await?;
    let held = held_unwritten(state, &mut conn, v.id).await?;
    let current = state
        .db()
        .voucher(v.id)
        .await?
        .ok_or(AppError::NotFound("voucher"))?;
    let mut buyers = state.db().buyers_of(v.id).await?;
    buyers.extend(pending_buyers);
    buyers.sort_unstable();
    buyers.dedup();
    let stock = (current.stock - unwritten - held).max(0);
    let mut wipe = vec![keys::stock(v.id), keys::buyers(v.id), keys::meta(v.id)];
    wipe.extend((0..v.segments).map(|s| keys::segment_stock(v.id, s)));
    let mut pipe = redis::pipe();
    pipe.atomic().del(wipe).ignore();
    write_sale_state(&mut pipe, &v, stock);
    for chunk in buyers.chunks(1000) {
        pipe.sadd(keys::buyers(v.id), chunk).ignore();
    }
    let () = pipe.query_async(&mut conn).await?;
    Ok(ReseedReport {
        voucher: v.id,
        stock,
        buyers: buyers.len(),
        segments: v.segments,
    })
}
