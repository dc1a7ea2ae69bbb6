//! `unsafe`: the naive read-check-write. Between one request's GET and its
//! SET, any number of others read the same count, so several buyers take
//! the same item and the counter reaches zero long after the stock has.

use super::{already_bought, check_window, read_check_write, write_now, Accepted};
use crate::db::{StockGuard, Voucher};
use crate::error::AppError;
use crate::keys;
use crate::state::AppState;

pub(super) async fn purchase(
    state: &AppState,
    voucher: &Voucher,
    user_id: i64,
) -> Result<Accepted, AppError> {
    check_window(voucher)?;
    if already_bought(state, voucher, user_id).await? {
        return Err(AppError::AlreadyBought);
    }
    let stock_key = keys::stock(voucher.id);
    let Some(taken) = read_check_write(state, voucher, &stock_key, user_id).await? else {
        return Err(AppError::SoldOut);
    };
    // The racy stage writes what its gate let through, unguarded.
    write_now(state, voucher, user_id, &taken, StockGuard::Unguarded).await
}
