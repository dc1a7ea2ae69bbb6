//! The six purchase strategies, one file each, in the order of the classic
//! flash-sale evolution:
//!
//! | strategy | gate | oversells? |
//! |---|---|---|
//! | `unsafe` (`unsafe_rcw.rs`) | GET stock, check, SET stock-1 | yes, between any two requests |
//! | `local-mutex` (`local_mutex.rs`) | the same in a process-local mutex | yes, between instances |
//! | `optimistic` (`optimistic.rs`) | the database's `... WHERE stock > 0` | no; every buyer is a write on one row |
//! | `lock` (`lock.rs`) | a locksmith lock per voucher (+ one per user) | no; serializes all buyers |
//! | `segmented` (`segmented.rs`) | N stock segments, one lock each | no; N buyers at a time |
//! | `lua` (`lua.rs`, `gate.lua`) | one atomic script + a stream | no; no lock at all |
//!
//! The racy strategies write what their gate let through without a stock
//! guard, as the original experiment does, so their oversell reaches the
//! database (negative stock, more orders than items). All others write with
//! the guard (`StockGuard::Enforce`), a last line of defense that the demo
//! shows never fires. `lock` and `segmented` share their per-user lock and
//! lock handling (`guarded.rs`) and differ in the stock step they pass in.
//! The synchronous strategies (all but `lua`) write the order to the
//! database before answering; `lua` answers at once with a pending order
//! that the [`crate::pipeline`] writes.

mod guarded;
mod local_mutex;
mod lock;
mod lua;
mod optimistic;
mod segmented;
mod unsafe_rcw;

use std::time::{Duration, Instant};

use crate::config::Strategy;
use crate::db::{now_ms, Order, StockGuard, Voucher, WriteOutcome};
use crate::error::AppError;
use crate::keys;
use crate::state::AppState;

/// A purchase the service said yes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted {
    /// The id handed to the buyer.
    pub order_id: i64,
    /// True while the order waits in the stream (`lua`); false once written.
    pub pending: bool,
}

/// Runs the instance's strategy for one buyer.
///
/// # Errors
/// The rejection ([`AppError::SoldOut`], ...) or the failure.
pub async fn purchase(
    state: &AppState,
    voucher: &Voucher,
    user_id: i64,
) -> Result<Accepted, AppError> {
    match state.config().strategy {
        Strategy::Unsafe => unsafe_rcw::purchase(state, voucher, user_id).await,
        Strategy::LocalMutex => local_mutex::purchase(state, voucher, user_id).await,
        Strategy::Optimistic => optimistic::purchase(state, voucher, user_id).await,
        Strategy::Lock => lock::purchase(state, voucher, user_id).await,
        Strategy::Segmented => segmented::purchase(state, voucher, user_id).await,
        Strategy::Lua => lua::purchase(state, voucher, user_id).await,
    }
}

/// The sale-window check of the synchronous strategies (the `lua` gate checks
/// it on the Redis server's clock instead).
fn check_window(voucher: &Voucher) -> Result<(), AppError> {
    let now = now_ms();
    if now < voucher.begin_ms {
        Err(AppError::NotStarted)
    } else if now >= voucher.end_ms {
        Err(AppError::Ended)
    } else {
        Ok(())
    }
}

/// The answer when a voucher's Redis state is gone (Redis restarted without
/// persistence, or the keys were evicted). Re-seeding from the database
/// would oversell by every accepted order still in the lost stream, so the
/// service refuses until an operator decides.
fn lost_state(voucher: &Voucher) -> AppError {
    metrics::counter!("seckill_redis_state_lost_total").increment(1);
    AppError::Unavailable(format!(
        "Redis has no state for voucher {}; refusing to sell blindly",
        voucher.id
    ))
}

/// Whether the user is already in the voucher's buyer set.
async fn already_bought(
    state: &AppState,
    voucher: &Voucher,
    user_id: i64,
) -> Result<bool, AppError> {
    let mut conn = state.redis();
    let bought: bool = redis::cmd("SISMEMBER")
        .arg(keys::buyers(voucher.id))
        .arg(user_id)
        .query_async(&mut conn)
        .await?;
    Ok(bought)
}

/// An item a purchase took: where from, and the take's attempt id, which
/// the give-back names (see [`TAKE`]).
#[derive(Debug, Clone)]
pub(crate) struct Taken {
    /// The counter the item came from.
    pub(crate) stock_key: String,
    /// The id the take was recorded under in the voucher's takes hash.
    pub(crate) attempt: String,
    /// Why the take got no answer, when it did not: then whether it ran is
    /// settled ([`SETTLE`]) by [`write_now`], after the caller let go of
    /// its stock lock or mutex (settling may wait for Redis for minutes,
    /// and needs no exclusion).
    pub(crate) unanswered: Option<String>,
}

/// Takes one item and records its buyer in one step: either both happen or
/// neither does (a script is atomic, also against Redis dying in the
/// middle, as AOF and replicas get its writes as one transaction). The
/// buyer goes in first, so a wrong-type buyers key fails the step with
/// nothing written. The counter is written only while it exists: had Redis
/// lost its data since the read, writing would revive it from a stale
/// value and the service would go on selling from state it no longer has.
///
/// Each take carries an attempt id of its own, recorded in the voucher's
/// takes hash ([`keys::takes`]) in the same step: `taken`, later
/// `returned` by [`GIVE_BACK`], or `given-up` by [`SETTLE`] before it ran.
/// A take sent again (a client resending after a broken connection) finds
/// its record and changes nothing more; a given-up one changes nothing.
///
/// KEYS[1] stock counter, KEYS[2] buyers set, KEYS[3] takes hash; ARGV[1]
/// the new count, ARGV[2] user id, ARGV[3] attempt id. Answers 1 taken, 0
/// counter gone, 2 this attempt was given up on.
static TAKE: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        "local seen = redis.call('HGET', KEYS[3], ARGV[3]) \
         if seen == 'given-up' then return 2 end \
         if seen then return 1 end \
         if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end \
         redis.call('SADD', KEYS[2], ARGV[2]) \
         redis.call('SET', KEYS[1], ARGV[1]) \
         redis.call('HSET', KEYS[3], ARGV[3], 'taken') return 1",
    )
});

/// Settles a [`TAKE`] whose answer did not come (its reply was lost to a
/// timeout or a broken connection, or a cluster client's resends ended in
/// an error), so that its outcome is known and stays so: the attempt's
/// record says whether it ran; without one, it is recorded as given up in
/// the same step, so that a take still on its way (in a socket buffer,
/// behind a slow command) changes nothing when it comes. Without this, a
/// take that ran while its reply was lost left the buyer recorded with no
/// order: the item was gone and every retry was refused as a duplicate.
/// Running it again answers the same.
///
/// KEYS[1] takes hash; ARGV[1] attempt id. Answers 1 taken, 0 given up.
static SETTLE: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        "local seen = redis.call('HGET', KEYS[1], ARGV[1]) \
         if seen == 'given-up' then return 0 end \
         if seen then return 1 end \
         redis.call('HSET', KEYS[1], ARGV[1], 'given-up') return 0",
    )
});

/// Whether a command's reply was lost after it may have reached Redis:
/// it timed out, or the connection broke. A connection refused was never
/// sent anywhere.
pub(crate) fn reply_lost(e: &redis::RedisError) -> bool {
    !e.is_connection_refusal() && (e.is_timeout() || e.is_connection_dropped() || e.is_io_error())
}

/// Whether an error is for good: Redis refused the command itself (a wrong
/// type, a missing right, a script error), or the client could not form
/// it. Anything else (a lost reply, a broken or refused connection, a
/// cluster redirect or failover) may pass.
fn permanent(e: &redis::RedisError) -> bool {
    matches!(e.retry_method(), redis::RetryMethod::NoRetry)
}

/// Sends `call` (a script call that answers the same however often it
/// runs) until Redis answers it, with back-off, while its errors may pass,
/// for at most [`RESOLVE_LIMIT`] (the purchase runs in a task of its own,
/// past the request's deadline, see `routes.rs`). The last error when a
/// permanent one comes or the time is up.
async fn until_answered(
    state: &AppState,
    what: &str,
    call: impl Fn() -> redis::ScriptInvocation<'static>,
) -> redis::RedisResult<i64> {
    let started = Instant::now();
    let mut backoff = Duration::from_millis(50);
    loop {
        let mut conn = state.redis();
        match call().invoke_async(&mut conn).await {
            Ok(answer) => return Ok(answer),
            Err(e) if permanent(&e) || started.elapsed() >= RESOLVE_LIMIT => return Err(e),
            Err(e) => {
                tracing::warn!("{what}: no answer ({e}); sending it again");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// The read-check-write every synchronous strategy runs under its own kind
/// of exclusion (or none): read the counter, refuse at zero, then write it
/// back minus one and record the buyer in one step ([`TAKE`]). The read
/// and the write stay two round trips on purpose: between them is where
/// the racy strategies oversell. `Ok(None)` means sold out; a take that
/// got no answer comes back marked [`Taken::unanswered`].
async fn read_check_write(
    state: &AppState,
    voucher: &Voucher,
    stock_key: &str,
    user_id: i64,
) -> Result<Option<Taken>, AppError> {
    let mut conn = state.redis();
    let stock: Option<i64> = redis::cmd("GET")
        .arg(stock_key)
        .query_async(&mut conn)
        .await?;
    let stock = stock.ok_or_else(|| lost_state(voucher))?;
    if stock <= 0 {
        return Ok(None);
    }
    let mut taken = Taken {
        stock_key: stock_key.to_owned(),
        attempt: uuid::Uuid::new_v4().to_string(),
        unanswered: None,
    };
    let answer: redis::RedisResult<i64> = TAKE
        .key(stock_key)
        .key(keys::buyers(voucher.id))
        .key(keys::takes(voucher.id))
        .arg(stock - 1)
        .arg(user_id)
        .arg(&taken.attempt)
        .invoke_async(&mut conn)
        .await;
    match answer {
        Ok(1) => Ok(Some(taken)),
        Ok(0) => Err(lost_state(voucher)),
        Ok(other) => Err(AppError::Internal(format!("the take answered {other}"))),
        // Refused by Redis as a command: nothing was written.
        Err(e) if permanent(&e) => Err(e.into()),
        Err(e) => {
            taken.unanswered = Some(e.to_string());
            Ok(Some(taken))
        }
    }
}

/// Learns whether a take whose answer did not come (`failed`) ran, with
/// [`SETTLE`]: `true` it did, `false` it did not and never will; outcome
/// unknown when Redis does not answer this either (for
/// [`RESOLVE_LIMIT`]).
async fn settle(
    state: &AppState,
    voucher: &Voucher,
    user_id: i64,
    attempt: &str,
    failed: &str,
) -> Result<bool, AppError> {
    tracing::warn!(
        voucher = voucher.id,
        user_id,
        attempt,
        "taking an item got no answer ({failed}); checking whether it was taken"
    );
    let takes = keys::takes(voucher.id);
    let settled = until_answered(state, "checking a take", || {
        let mut call = SETTLE.key(&takes);
        call.arg(attempt);
        call
    })
    .await;
    let outcome = match settled {
        Ok(1) => "taken",
        Ok(_) => "given_up",
        Err(_) => "unknown",
    };
    metrics::counter!("seckill_lost_take_replies_total", "outcome" => outcome).increment(1);
    match settled {
        Ok(answer) => Ok(answer == 1),
        Err(e) => {
            tracing::error!(
                voucher = voucher.id,
                user_id,
                attempt,
                "cannot tell whether an item was taken ({e}); `seckill reconcile` compares Redis with the orders"
            );
            Err(AppError::OutcomeUnknown(voucher.id))
        }
    }
}

/// Puts the item of a take back (see [`TAKE`]), once: only a take recorded
/// as `taken` gives back, and is then recorded as `returned`, so a
/// give-back sent again returns nothing more. The buyer is forgotten too,
/// unless `ARGV[3]` is 0 (the buyer has an order from before). Nothing
/// while the counter is gone (a counter lost with Redis' data is not
/// revived).
///
/// KEYS[1] stock counter, KEYS[2] buyers set, KEYS[3] takes hash; ARGV[1]
/// user id, ARGV[2] attempt id, ARGV[3] 1 to forget the buyer. Answers 1
/// given back, 0 nothing to give back.
static GIVE_BACK: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        "if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end \
         if redis.call('HGET', KEYS[3], ARGV[2]) ~= 'taken' then return 0 end \
         redis.call('INCR', KEYS[1]) \
         redis.call('HSET', KEYS[3], ARGV[2], 'returned') \
         if ARGV[3] == '1' then redis.call('SREM', KEYS[2], ARGV[1]) end \
         return 1",
    )
});

/// Writes the order of a buyer the gate let through and answers for it.
///
/// When the write fails or the user turns out to have an order already, the
/// item goes back to the counter it was taken from. `guard` says how the
/// database stock is decremented; when an enforcing guard refuses, the gate
/// oversold: the buyer hears so (409 `oversold`) and the refusal is
/// recorded. A take that got no answer is settled first: the order is
/// written only if it ran, and a take that did not is answered 503.
async fn write_now(
    state: &AppState,
    voucher: &Voucher,
    user_id: i64,
    taken: &Taken,
    guard: StockGuard,
) -> Result<Accepted, AppError> {
    if let Some(failed) = &taken.unanswered {
        if !settle(state, voucher, user_id, &taken.attempt, failed).await? {
            return Err(AppError::Unavailable(format!(
                "taking an item got no answer ({failed}); nothing was taken"
            )));
        }
    }
    // Sent until Redis answers: a give-back returns its take's item once
    // however often it runs (see GIVE_BACK).
    let give_back = |forget_buyer: bool| async move {
        let buyers = keys::buyers(voucher.id);
        let takes = keys::takes(voucher.id);
        let result = until_answered(state, "giving an item back", || {
            let mut call = GIVE_BACK.key(&taken.stock_key);
            call.key(&buyers)
                .key(&takes)
                .arg(user_id)
                .arg(&taken.attempt)
                .arg(i32::from(forget_buyer));
            call
        })
        .await;
        if let Err(e) = result {
            metrics::counter!("seckill_give_back_failures_total").increment(1);
            tracing::error!(
                voucher = voucher.id,
                user_id,
                attempt = %taken.attempt,
                "cannot tell whether an item went back ({e}); `seckill reconcile` compares Redis with the orders"
            );
        }
    };
    let (order, outcome) = match write_resolved(state, voucher.id, user_id, guard).await {
        Ok(written) => written,
        Err(Unwritten::Surely(e)) => {
            give_back(true).await;
            return Err(e);
        }
        // The item stays taken: the order may exist (see write_resolved).
        Err(Unwritten::Unknown) => return Err(AppError::OutcomeUnknown(voucher.id)),
    };
    match outcome {
        WriteOutcome::Created | WriteOutcome::AlreadyWritten => {
            metrics::counter!("seckill_orders_written_total", "path" => "direct").increment(1);
            Ok(Accepted {
                order_id: order.id,
                pending: false,
            })
        }
        // The buyer has an order from before: the entry stays.
        WriteOutcome::DuplicateUser => {
            give_back(false).await;
            Err(AppError::AlreadyBought)
        }
        WriteOutcome::IdTaken => {
            give_back(true).await;
            Err(AppError::Unavailable("no free order id".into()))
        }
        // Only the stream pipeline abandons orders; a synchronous write is
        // never abandoned, but if it were, nothing was written.
        WriteOutcome::Abandoned => {
            give_back(true).await;
            Err(AppError::Unavailable("the order was abandoned".into()))
        }
        WriteOutcome::StockExhausted => {
            state
                .db()
                .record_failed(&order, "database stock exhausted")
                .await?;
            Err(AppError::Oversold)
        }
    }
}

/// Why [`write_resolved`] wrote nothing.
pub(crate) enum Unwritten {
    /// Nothing was written, for sure (no connection, or the database
    /// refused the statement): the error to answer with.
    Surely(AppError),
    /// An attempt may have committed and the database did not answer for
    /// [`RESOLVE_LIMIT`]: the order may exist; reconcile will tell.
    Unknown,
}

/// How long a purchase whose write may have committed keeps retrying it
/// (in its own task, past the request's deadline) to learn the outcome.
pub(crate) const RESOLVE_LIMIT: Duration = Duration::from_secs(600);

/// Takes an order id and writes the order, until the outcome is known.
///
/// A write that fails before anything reaches the database (no pooled
/// connection) or that the database answers with an error wrote nothing.
/// A write cut off mid-flight (connection lost, client-side timeout) may
/// have committed: then the same order is written again, which is
/// idempotent per order id, until the database answers (at most
/// [`RESOLVE_LIMIT`]), so the item is never given back for an order that
/// exists and never kept for one that does not. A fresh id is taken only
/// while no attempt is in doubt: after Redis lost its data, the day's
/// sequence restarts and can hand out an id taken in the same second.
pub(crate) async fn write_resolved(
    state: &AppState,
    voucher_id: i64,
    user_id: i64,
    guard: StockGuard,
) -> Result<(Order, WriteOutcome), Unwritten> {
    let limits = state.config().db;
    let attempt_bound = limits.acquire_timeout + limits.statement_timeout + Duration::from_secs(1);
    let started = Instant::now();
    let mut in_doubt = false;
    let mut fresh_ids = 0;
    let mut backoff = Duration::from_millis(100);
    let mut order: Option<Order> = None;
    loop {
        let current = match order {
            Some(o) => o,
            None => {
                let id = state
                    .order_ids()
                    .next_id()
                    .await
                    .map_err(|e| Unwritten::Surely(e.into()))?;
                fresh_ids += 1;
                let o = Order {
                    id,
                    voucher_id,
                    user_id,
                };
                order = Some(o);
                o
            }
        };
        let attempt = Instant::now();
        let result =
            tokio::time::timeout(attempt_bound, state.db().write_order(&current, guard)).await;
        metrics::histogram!("seckill_db_write_seconds").record(attempt.elapsed().as_secs_f64());
        match result {
            Ok(Ok(WriteOutcome::IdTaken)) if !in_doubt && fresh_ids < 5 => {
                order = None;
                continue;
            }
            Ok(Ok(outcome)) => return Ok((current, outcome)),
            Ok(Err(e)) if !in_doubt && !crate::db::may_have_committed(&e) => {
                return Err(Unwritten::Surely(e.into()));
            }
            Ok(Err(e)) => {
                in_doubt |= crate::db::may_have_committed(&e);
                tracing::warn!(
                    order_id = current.id,
                    "order write in doubt ({e}); writing it again"
                );
            }
            Err(_) => {
                in_doubt = true;
                tracing::warn!(
                    order_id = current.id,
                    "order write timed out; writing it again"
                );
            }
        }
        if started.elapsed() >= RESOLVE_LIMIT {
            metrics::counter!("seckill_purchase_unresolved_total").increment(1);
            tracing::error!(
                order_id = current.id,
                user_id,
                voucher_id,
                "order write still in doubt after {RESOLVE_LIMIT:?}; run `seckill reconcile`"
            );
            return Err(Unwritten::Unknown);
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// Seeds a new voucher's Redis state: window, counter, segments, an empty
/// buyer set. One MULTI, so the state is complete or absent. Every key a
/// voucher of the same id left behind (a database that was reset while
/// Redis kept its data) is deleted first, the order and dead-letter
/// streams included, so the new sale inherits nothing.
pub(crate) async fn seed(state: &AppState, voucher: &Voucher) -> Result<(), AppError> {
    let mut conn = state.redis();
    let old_segments: Option<i64> = redis::cmd("HGET")
        .arg(keys::meta(voucher.id))
        .arg("segments")
        .query_async(&mut conn)
        .await?;
    let mut stale = keys::sale_keys(voucher.id, old_segments.unwrap_or(0).max(voucher.segments));
    stale.push(keys::dead_letter_stream(voucher.id));
    let mut pipe = redis::pipe();
    pipe.atomic().del(stale).ignore();
    write_sale_state(&mut pipe, voucher, voucher.stock_total);
    let _: () = pipe.query_async(&mut conn).await?;
    // Another slot on a Cluster: not part of the MULTI.
    let _: i64 = redis::cmd("SREM")
        .arg(keys::DEAD_LETTERED)
        .arg(voucher.id)
        .query_async(&mut conn)
        .await?;
    Ok(())
}

/// Adds to `pipe` the writes of a voucher's sale state with `stock` items
/// left: the window hash, the single counter and the segment counters
/// (seeding, and re-seeding after Redis lost its data).
pub(crate) fn write_sale_state(pipe: &mut redis::Pipeline, voucher: &Voucher, stock: i64) {
    pipe.hset_multiple(
        keys::meta(voucher.id),
        &[
            ("begin", voucher.begin_ms),
            ("end", voucher.end_ms),
            ("segments", voucher.segments),
        ],
    )
    .ignore()
    .set(keys::stock(voucher.id), stock)
    .ignore();
    for (segment, share) in segment_shares(stock, voucher.segments)
        .into_iter()
        .enumerate()
    {
        pipe.set(keys::segment_stock(voucher.id, segment as i64), share)
            .ignore();
    }
}

/// Splits `stock` into `segments` near-equal shares.
pub fn segment_shares(stock: i64, segments: i64) -> Vec<i64> {
    (0..segments)
        .map(|i| stock / segments + i64::from(i < stock % segments))
        .collect()
}

/// Items left according to Redis, in the form this instance's strategy
/// keeps them; `None` when Redis has lost the voucher's state.
pub async fn stock_left(state: &AppState, voucher: &Voucher) -> Result<Option<i64>, AppError> {
    if state.config().strategy == Strategy::Optimistic {
        // The database row is this strategy's stock.
        let current = state.db().voucher(voucher.id).await?;
        return Ok(current.map(|v| v.stock));
    }
    let mut conn = state.redis();
    if state.config().strategy == Strategy::Segmented {
        let keys: Vec<String> = (0..voucher.segments)
            .map(|s| keys::segment_stock(voucher.id, s))
            .collect();
        let values: Vec<Option<i64>> = redis::cmd("MGET").arg(&keys).query_async(&mut conn).await?;
        Ok(values.into_iter().sum())
    } else {
        let value: Option<i64> = redis::cmd("GET")
            .arg(keys::stock(voucher.id))
            .query_async(&mut conn)
            .await?;
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The contract of [`TAKE`], [`SETTLE`] and [`GIVE_BACK`], on a real
    /// server: each answers the same however often it runs, by attempt.
    #[cfg(feature = "demo")]
    #[test]
    fn takes_settles_and_give_backs_count_once_per_attempt() {
        use redis::Commands;
        let server = locksmith_testkit::RedisServer::start().unwrap();
        let mut conn = redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let (stock, buyers, takes) = (keys::stock(1), keys::buyers(1), keys::takes(1));
        let () = conn.set(&stock, 5).unwrap();
        let take = |conn: &mut redis::Connection, count: i64, user: i64, attempt: &str| -> i64 {
            TAKE.key(&stock)
                .key(&buyers)
                .key(&takes)
                .arg(count)
                .arg(user)
                .arg(attempt)
                .invoke(conn)
                .unwrap()
        };
        let settle = |conn: &mut redis::Connection, attempt: &str| -> i64 {
            SETTLE.key(&takes).arg(attempt).invoke(conn).unwrap()
        };
        let give_back =
            |conn: &mut redis::Connection, user: i64, attempt: &str, forget: i32| -> i64 {
                GIVE_BACK
                    .key(&stock)
                    .key(&buyers)
                    .key(&takes)
                    .arg(user)
                    .arg(attempt)
                    .arg(forget)
                    .invoke(conn)
                    .unwrap()
            };
        let left = |conn: &mut redis::Connection| conn.get::<_, i64>(&stock).unwrap();
        let bought = |conn: &mut redis::Connection, user: i64| {
            conn.sismember::<_, _, bool>(&buyers, user).unwrap()
        };

        // Given up before it came: it changes nothing when it does.
        assert_eq!(settle(&mut conn, "late"), 0);
        assert_eq!(take(&mut conn, 4, 7, "late"), 2);
        assert_eq!(settle(&mut conn, "late"), 0, "settled the same again");
        assert_eq!((left(&mut conn), bought(&mut conn, 7)), (5, false));
        assert_eq!(
            give_back(&mut conn, 7, "late", 1),
            0,
            "nothing to give back"
        );
        assert_eq!(left(&mut conn), 5);

        // Ran: settled as taken; a resend of it writes nothing more.
        assert_eq!(take(&mut conn, 4, 7, "ran"), 1);
        assert_eq!(settle(&mut conn, "ran"), 1);
        assert_eq!(take(&mut conn, 3, 7, "ran"), 1, "a resend");
        assert_eq!((left(&mut conn), bought(&mut conn, 7)), (4, true));

        // Given back once, however often sent.
        assert_eq!(give_back(&mut conn, 7, "ran", 1), 1);
        assert_eq!(give_back(&mut conn, 7, "ran", 1), 0);
        assert_eq!((left(&mut conn), bought(&mut conn, 7)), (5, false));

        // A buyer with an order from before keeps the entry.
        assert_eq!(take(&mut conn, 4, 8, "dup"), 1);
        assert_eq!(give_back(&mut conn, 8, "dup", 0), 1);
        assert_eq!((left(&mut conn), bought(&mut conn, 8)), (5, true));
    }

    #[test]
    fn shares_add_up_and_differ_by_at_most_one() {
        for (stock, n) in [(500, 8), (7, 8), (0, 3), (9, 3), (1, 1)] {
            let shares = segment_shares(stock, n);
            assert_eq!(shares.len() as i64, n);
            assert_eq!(shares.iter().sum::<i64>(), stock);
            let (min, max) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
            assert!(max - min <= 1);
        }
    }
}
