//! `lua`: one atomic script (`gate.lua`) checks the window, the stock and
//! the buyer set, decrements, records the buyer and appends the order to the
//! voucher's stream. No lock, one round trip: the order id comes from the
//! id generator's reserved block (a round trip once per block, see
//! `--order-id-block`), and the gate's pending-hash entry is the order's
//! only state until the [`crate::pipeline`] writes it to the database.

use std::sync::LazyLock;

use super::Accepted;
use crate::db::{now_ms, Voucher};
use crate::error::AppError;
use crate::keys;
use crate::state::AppState;

/// The gate; its SHA is computed once and EVALSHA falls back to loading.
static GATE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("gate.lua")));

pub(super) async fn purchase(
    state: &AppState,
    voucher: &Voucher,
    user_id: i64,
) -> Result<Accepted, AppError> {
    let mut conn = state.redis();
    let id = state.order_ids().next_id().await?;
    let gate = || {
        let mut invocation = GATE.key(keys::stock(voucher.id));
        invocation
            .key(keys::buyers(voucher.id))
            .key(keys::meta(voucher.id))
            .key(keys::orders_stream(voucher.id))
            .key(keys::pending(voucher.id))
            .arg(user_id)
            .arg(id)
            .arg(voucher.id);
        invocation
    };
    let mut sends = 0;
    let code = loop {
        sends += 1;
        let called: redis::RedisResult<i64> = gate().invoke_async(&mut conn).await;
        match called {
            Ok(code) => break code,
            // The reply was lost: the script may have run. The pending
            // hash tells, because the gate records the order there. (A
            // refused connection sent nothing: the error below.)
            Err(e) if super::reply_lost(&e) => {
                tracing::warn!(order_id = id, user_id, "gate reply lost ({e}); checking");
                let recorded: redis::RedisResult<Option<i64>> = redis::cmd("HGET")
                    .arg(keys::pending(voucher.id))
                    .arg(user_id)
                    .query_async(&mut conn)
                    .await;
                match recorded {
                    Ok(Some(recorded)) if recorded == id => break 0,
                    // Not recorded: the first run did not happen, or its
                    // order is written already (the pipeline dropped the
                    // entry). Running the gate again is safe either way:
                    // it records the order now, or finds the buyer (409
                    // already bought, which `/mine` shows), or finds the
                    // sale's state gone (503). Once.
                    Ok(_) if sends < 2 => continue,
                    _ => return Err(AppError::OutcomeUnknown(voucher.id)),
                }
            }
            Err(e) => return Err(e.into()),
        }
    };
    match code {
        // The gate's pending-hash entry is what `GET /orders/{id}` and
        // `/mine` read until the pipeline writes the order: nothing more
        // to send.
        0 => Ok(Accepted {
            order_id: id,
            pending: true,
        }),
        1 => Err(AppError::SoldOut),
        // A client that resends a command after a dropped connection (the
        // Cluster client does) can run the gate twice: the second run finds
        // the first one's buyer. The pending hash says whose order it is.
        2 => {
            let recorded: Option<i64> = redis::cmd("HGET")
                .arg(keys::pending(voucher.id))
                .arg(user_id)
                .query_async(&mut conn)
                .await?;
            // (If the pipeline already wrote that first run's order, the
            // entry is gone and the buyer hears 409 already_bought, which
            // is true: `/mine` shows the order. The database cannot be
            // asked by id here: after Redis lost data, ids repeat.)
            if recorded == Some(id) {
                Ok(Accepted {
                    order_id: id,
                    pending: true,
                })
            } else {
                Err(AppError::AlreadyBought)
            }
        }
        3 => Err(AppError::NotStarted),
        4 => Err(AppError::Ended),
        // A finished sale's keys expire once its orders are written.
        5 if voucher.has_ended(now_ms()) => Err(AppError::Ended),
        5 => Err(super::lost_state(voucher)),
        other => Err(AppError::Internal(format!("gate answered {other}"))),
    }
}
