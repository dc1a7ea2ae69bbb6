//! `lock`: a locksmith lock per voucher around the read-check-write, inside
//! a per-user lock (the `#[locked]` attribute) that makes "one order per
//! user" hold across instances. Correct, but every buyer of a voucher queues
//! for the same lock.

use std::time::{Duration, Instant};

use locksmith_macros::locked;

use super::{already_bought, check_window, read_check_write, segmented, write_now, Accepted};
use crate::db::Voucher;
use crate::error::AppError;
use crate::keys;
use crate::state::AppState;

pub(super) async fn purchase(
    state: &AppState,
    voucher: &Voucher,
    user_id: i64,
) -> Result<Accepted, AppError> {
    check_window(voucher)?;
    per_user(state, voucher, user_id, false).await
}

/// The purchase of one user, under the user's lock: nobody else can buy for
/// this user between the "already bought?" check and the order write.
/// `segmented` picks the stock gate.
#[locked(
    "seckill:order:{user_id}",
    client = state.locks(),
    wait = "10s",
    lease = "15s",
    busy = AppError::Busy(format!("another purchase of user {user_id} is running"))
)]
pub(super) async fn per_user(
    state: &AppState,
    voucher: &Voucher,
    user_id: i64,
    segmented: bool,
) -> Result<Accepted, AppError> {
    if already_bought(state, voucher, user_id).await? {
        return Err(AppError::AlreadyBought);
    }
    let taken_from = if segmented {
        segmented::take_item(state, voucher, user_id).await?
    } else {
        take_item(state, voucher, user_id).await?
    };
    match taken_from {
        Some(stock_key) => write_now(state, voucher, user_id, &stock_key).await,
        None => Err(AppError::SoldOut),
    }
}

/// Takes one item from the voucher's single counter under the voucher's
/// lock; the key it was taken from, or `None` when sold out.
async fn take_item(
    state: &AppState,
    voucher: &Voucher,
    user_id: i64,
) -> Result<Option<String>, AppError> {
    let stock_key = keys::stock(voucher.id);
    let lock_name = keys::voucher_lock(voucher.id);
    // Stock only goes down (but for an item given back after a failed
    // write), so "empty" read without the lock is as good as final: the
    // buyers after the sell-out need not queue for the lock to hear so.
    let mut conn = state.redis();
    let left: Option<i64> = redis::cmd("GET")
        .arg(&stock_key)
        .query_async(&mut conn)
        .await?;
    match left {
        None => return Err(super::lost_state(voucher)),
        Some(n) if n <= 0 => return Ok(None),
        Some(_) => {}
    }
    let guard = acquire(state, &lock_name, "voucher").await?;
    let taken = read_check_write(state, voucher, &stock_key, user_id).await;
    release(guard).await;
    Ok(taken?.then_some(stock_key))
}

/// Takes `name` with this instance's wait bound and lease, recording the
/// wait; 503 busy when the wait runs out.
pub(super) async fn acquire(
    state: &AppState,
    name: &str,
    kind: &'static str,
) -> Result<locksmith::LockGuard, AppError> {
    let lock = state
        .locks()
        .lock(name)?
        .with_lease(state.config().lock_lease)?;
    let started = Instant::now();
    let guard = lock.try_lock_for(state.config().lock_wait).await?;
    let waited: Duration = started.elapsed();
    metrics::histogram!("seckill_lock_wait_seconds", "lock" => kind).record(waited.as_secs_f64());
    guard.ok_or_else(|| AppError::Busy(format!("waited {waited:?} for lock {name}")))
}

/// Releases a stock lock. A lease lost before the release means another
/// buyer may have entered the critical section meanwhile; it is counted
/// and logged (the lease is many times the critical section, so this needs
/// a stalled process or a Redis failover).
pub(super) async fn release(guard: locksmith::LockGuard) {
    if let Err(e) = guard.release().await {
        metrics::counter!("seckill_lock_release_failures_total").increment(1);
        tracing::warn!("releasing a stock lock failed: {e}");
    }
}
