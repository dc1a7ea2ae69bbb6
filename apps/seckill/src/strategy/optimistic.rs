//! `optimistic`: the fix the original experiment reaches first. No lock and
//! no Redis counter: the database row is the stock, and the decrement
//! carries its own check, `UPDATE vouchers SET stock = stock - 1 WHERE id =
//! ? AND stock > 0`, in the same transaction as the order insert. The
//! database evaluates the condition on the row as it is when the update
//! holds the row's write lock, so two buyers can never both take the last
//! item; an update that matches no row means sold out.
//!
//! Retry policy: none for contention. Unlike the compare-and-set form
//! (`WHERE stock = <the value read>`), which fails whenever anyone else
//! bought in between and must then be retried, `stock > 0` only fails when
//! the stock is really gone, so a failure is final: 409 `sold_out`. A
//! database error answers 503 with nothing written (the transaction rolls
//! back); the buyer may simply try again. An order-id collision (the id
//! sequence restarted after Redis lost its data) is retried with a fresh
//! id, and a write cut off mid-flight is written again until its outcome
//! is known, as in every synchronous strategy (see `write_resolved`).
//!
//! The cost: every buyer is a write transaction on one hot row, so the
//! database serializes them; the read of the stock before it only spares
//! the buyers after the sell-out that transaction.

use super::{check_window, Accepted};
use crate::db::{StockGuard, Voucher, WriteOutcome};
use crate::error::AppError;
use crate::state::AppState;

pub(super) async fn purchase(
    state: &AppState,
    voucher: &Voucher,
    user_id: i64,
) -> Result<Accepted, AppError> {
    check_window(voucher)?;
    // The cheap read: after the sell-out, answer without a transaction.
    let current = state
        .db()
        .voucher(voucher.id)
        .await?
        .ok_or(AppError::NotFound("voucher"))?;
    if current.stock <= 0 {
        return Err(AppError::SoldOut);
    }
    let (order, outcome) =
        match super::write_resolved(state, voucher.id, user_id, StockGuard::Enforce).await {
            Ok(written) => written,
            Err(super::Unwritten::Surely(e)) => return Err(e),
            Err(super::Unwritten::Unknown) => return Err(AppError::OutcomeUnknown(voucher.id)),
        };
    match outcome {
        WriteOutcome::Created | WriteOutcome::AlreadyWritten => {
            metrics::counter!("seckill_orders_written_total", "path" => "direct").increment(1);
            Ok(Accepted {
                order_id: order.id,
                pending: false,
            })
        }
        WriteOutcome::DuplicateUser => Err(AppError::AlreadyBought),
        WriteOutcome::StockExhausted => Err(AppError::SoldOut),
        WriteOutcome::IdTaken => Err(AppError::Unavailable("no free order id".into())),
        WriteOutcome::Abandoned => Err(AppError::Unavailable("the order was abandoned".into())),
    }
}
