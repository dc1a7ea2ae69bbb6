//! `local-mutex`: the read-check-write inside a process-local mutex per
//! voucher. Correct with one instance; with two, each instance's mutex
//! excludes only its own requests and the instances still race.

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
    let stock_key = keys::stock(voucher.id);
    let mutex = state.local_lock(voucher.id);
    let taken = {
        let started = std::time::Instant::now();
        let _held = mutex.lock().await;
        metrics::histogram!("seckill_lock_wait_seconds", "lock" => "local")
            .record(started.elapsed().as_secs_f64());
        if already_bought(state, voucher, user_id).await? {
            return Err(AppError::AlreadyBought);
        }
        let Some(taken) = read_check_write(state, voucher, &stock_key, user_id).await? else {
            return Err(AppError::SoldOut);
        };
        taken
    };
    // The racy stage writes what its gate let through, unguarded.
    write_now(state, voucher, user_id, &taken, StockGuard::Unguarded).await
}
