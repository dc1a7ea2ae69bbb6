//! What the lock-based strategies (`lock`, `segmented`) share: the per-user
//! lock around a purchase, and taking and releasing a stock lock. Each
//! strategy passes in its own stock step ([`TakeItem`]); this module names
//! neither.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use super::{already_bought, write_now, Accepted, Taken};
use crate::db::{StockGuard, Voucher};
use crate::error::AppError;
use crate::state::AppState;

/// A strategy's stock step: take one item under the strategy's own lock(s)
/// and return the take, or `None` when sold out.
pub(super) type TakeItem =
    for<'a> fn(
        &'a AppState,
        &'a Voucher,
        i64,
        Instant,
    ) -> Pin<Box<dyn Future<Output = Result<Option<Taken>, AppError>> + Send + 'a>>;

/// The purchase of one user, under the user's lock: nobody else can buy for
/// this user between the "already bought?" check and the order write.
/// `take` is the strategy's stock step; it must finish by the deadline it
/// is given (one lock wait from now).
///
/// The lock waits and leases are the instance's `--lock-wait` and
/// `--lock-lease`. A failed release after the order is written (the lease
/// ran out, Redis restarted) does not turn the purchase into an error: the
/// order exists and the buyer is told so; the failure is logged and
/// counted (`seckill_lock_release_failures_total`).
pub(super) async fn per_user(
    state: &AppState,
    voucher: &Voucher,
    user_id: i64,
    take: TakeItem,
) -> Result<Accepted, AppError> {
    let name = format!("seckill:order:{user_id}");
    let guard = acquire(state, &name, "user", state.config().lock_wait)
        .await
        .map_err(|e| match e {
            AppError::Busy(_) => {
                AppError::Busy(format!("another purchase of user {user_id} is running"))
            }
            other => other,
        })?;
    let result = async {
        if already_bought(state, voucher, user_id).await? {
            return Err(AppError::AlreadyBought);
        }
        let deadline = Instant::now() + state.config().lock_wait;
        match take(state, voucher, user_id, deadline).await? {
            Some(taken) => write_now(state, voucher, user_id, &taken, StockGuard::Enforce).await,
            None => Err(AppError::SoldOut),
        }
    }
    .await;
    release(guard).await;
    result
}

/// Takes `name` with this instance's lease, waiting at most `wait`, and
/// records the wait; 503 busy when the wait runs out.
pub(super) async fn acquire(
    state: &AppState,
    name: &str,
    kind: &'static str,
    wait: Duration,
) -> Result<locksmith::LockGuard, AppError> {
    let lock = state
        .locks()
        .lock(name)?
        .with_lease(state.config().lock_lease)?;
    let started = Instant::now();
    let guard = lock.try_lock_for(wait).await?;
    let waited: Duration = started.elapsed();
    metrics::histogram!("seckill_lock_wait_seconds", "lock" => kind).record(waited.as_secs_f64());
    guard.ok_or_else(|| AppError::Busy(format!("waited {waited:?} for lock {name}")))
}

/// Releases a purchase lock. A lease lost before the release means another
/// buyer may have entered the critical section meanwhile; it is counted
/// and logged (the lease is many times the critical section, so this needs
/// a stalled process or a Redis failover). The database's guards (stock
/// above zero, one order per user) still hold.
pub(super) async fn release(guard: locksmith::LockGuard) {
    if let Err(e) = guard.release().await {
        metrics::counter!("seckill_lock_release_failures_total").increment(1);
        tracing::warn!("releasing a purchase lock failed: {e}");
    }
}
