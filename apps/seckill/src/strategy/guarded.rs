//! What the lock-based strategies (`lock`, `segmented`) share: the per-user
//! lock around a purchase, and taking and releasing a stock lock. Each
//! strategy passes in its own stock step ([`TakeItem`]); this module names
//! neither.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use locksmith_macros::locked;

use super::{already_bought, write_now, Accepted};
use crate::db::{StockGuard, Voucher};
use crate::error::AppError;
use crate::state::AppState;

/// A strategy's stock step: take one item under the strategy's own lock(s)
/// and return the key it was taken from, or `None` when sold out.
pub(super) type TakeItem =
    for<'a> fn(
        &'a AppState,
        &'a Voucher,
        i64,
    ) -> Pin<Box<dyn Future<Output = Result<Option<String>, AppError>> + Send + 'a>>;

/// The purchase of one user, under the user's lock: nobody else can buy for
/// this user between the "already bought?" check and the order write.
/// `take` is the strategy's stock step.
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
    take: TakeItem,
) -> Result<Accepted, AppError> {
    if already_bought(state, voucher, user_id).await? {
        return Err(AppError::AlreadyBought);
    }
    match take(state, voucher, user_id).await? {
        Some(stock_key) => {
            write_now(state, voucher, user_id, &stock_key, StockGuard::Enforce).await
        }
        None => Err(AppError::SoldOut),
    }
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
