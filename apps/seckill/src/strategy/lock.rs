//! `lock`: a locksmith lock per voucher around the read-check-write, inside
//! a per-user lock (see [`super::guarded::per_user`]) that makes "one order
//! per user" hold across instances. Correct, but every buyer of a voucher
//! queues for the same lock.

use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

use super::guarded::{acquire, per_user, release};
use super::{check_window, read_check_write, Accepted, Taken};
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
    per_user(state, voucher, user_id, take_item).await
}

/// Takes one item from the voucher's single counter under the voucher's
/// lock; the take, or `None` when sold out.
fn take_item<'a>(
    state: &'a AppState,
    voucher: &'a Voucher,
    user_id: i64,
    deadline: Instant,
) -> Pin<Box<dyn Future<Output = Result<Option<Taken>, AppError>> + Send + 'a>> {
    Box::pin(async move {
        let stock_key = keys::stock(voucher.id);
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
        let wait = deadline.saturating_duration_since(Instant::now());
        let guard = acquire(state, &keys::voucher_lock(voucher.id), "voucher", wait).await?;
        let taken = read_check_write(state, voucher, &stock_key, user_id).await;
        release(guard).await;
        taken
    })
}
