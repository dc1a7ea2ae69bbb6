//! `segmented`: the stock split into N segments, each with its own counter
//! and lock, so up to N buyers proceed at once. A buyer starts at the
//! segment its user id picks and, when that one is empty, tries the others
//! before hearing "sold out". One order per user is the per-user lock of
//! [`super::guarded::per_user`].

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

/// Takes one item from the first non-empty segment, starting at the user's
/// own; the take, or `None` when all are empty.
fn take_item<'a>(
    state: &'a AppState,
    voucher: &'a Voucher,
    user_id: i64,
    deadline: Instant,
) -> Pin<Box<dyn Future<Output = Result<Option<Taken>, AppError>> + Send + 'a>> {
    Box::pin(async move {
        let n = voucher.segments.max(1);
        let start = user_id.rem_euclid(n);
        // Stock only goes down (but for an item given back after a failed
        // write), so a segment read as empty without its lock is skipped
        // instead of queueing for its lock.
        let keys: Vec<String> = (0..n).map(|s| keys::segment_stock(voucher.id, s)).collect();
        let mut conn = state.redis();
        let left: Vec<Option<i64>> = redis::cmd("MGET").arg(&keys).query_async(&mut conn).await?;
        if left.iter().any(Option::is_none) {
            return Err(super::lost_state(voucher));
        }
        for i in 0..n {
            let segment = (start + i) % n;
            if left[segment as usize] == Some(0) {
                continue;
            }
            let stock_key = keys::segment_stock(voucher.id, segment);
            // All segment locks share one wait bound, so a buyer who walks
            // several segments still answers within the purchase budget.
            let wait = deadline.saturating_duration_since(Instant::now());
            let guard = acquire(
                state,
                &keys::segment_lock(voucher.id, segment),
                "segment",
                wait,
            )
            .await?;
            let taken = read_check_write(state, voucher, &stock_key, user_id).await;
            release(guard).await;
            if let Some(taken) = taken? {
                return Ok(Some(taken));
            }
        }
        Ok(None)
    })
}
