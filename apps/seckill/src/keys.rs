//! Redis key names. Every key of one voucher carries the voucher id as a hash
//! tag (`{42}`), so all of them live in one Redis Cluster slot and one script
//! may touch them all.

/// Items left (the single-counter strategies).
pub fn stock(voucher: i64) -> String {
    format!("seckill:stock:{{{voucher}}}")
}

/// Items left in one segment (the `segmented` strategy).
pub fn segment_stock(voucher: i64, segment: i64) -> String {
    format!("seckill:stock:{{{voucher}}}:{segment}")
}

/// Set of user ids that bought the voucher.
pub fn buyers(voucher: i64) -> String {
    format!("seckill:buyers:{{{voucher}}}")
}

/// Hash with the sale window (`begin`, `end`, epoch ms) and `segments`; its
/// absence means Redis lost the voucher's state.
pub fn meta(voucher: i64) -> String {
    format!("seckill:voucher:{{{voucher}}}")
}

/// Stream of accepted orders waiting to be written to the database.
pub fn orders_stream(voucher: i64) -> String {
    format!("seckill:orders:{{{voucher}}}")
}

/// Stream of order entries that failed too often to be written.
pub fn dead_letter_stream(voucher: i64) -> String {
    format!("seckill:orders-dead:{{{voucher}}}")
}

/// Hash of the `lua` gate's accepted orders not yet written: user id ->
/// order id. The pipeline removes an entry when it writes (or gives up on)
/// the order; `GET /orders/{id}` and `GET /vouchers/{id}/orders/mine`
/// read it meanwhile.
pub fn pending(voucher: i64) -> String {
    format!("seckill:pending:{{{voucher}}}")
}

/// Hash of the synchronous strategies' takes, by attempt id: `taken`,
/// `returned` once its item went back, or `given-up` when its answer was
/// lost and it had not run (it then changes nothing if it comes later).
/// One entry per take; it goes with the sale's other keys.
pub fn takes(voucher: i64) -> String {
    format!("seckill:takes:{{{voucher}}}")
}

/// Set of voucher ids whose dead-letter stream holds entries (what
/// `/healthz` checks).
pub const DEAD_LETTERED: &str = "seckill:dead-lettered";

/// The per-voucher lock of the `lock` strategy.
pub fn voucher_lock(voucher: i64) -> String {
    format!("seckill:lock:{{{voucher}}}")
}

/// The lock of one stock segment (the `segmented` strategy).
pub fn segment_lock(voucher: i64, segment: i64) -> String {
    format!("seckill:lock:{{{voucher}}}:{segment}")
}

/// Every key of a voucher's sale but the dead-letter stream and the locks:
/// what expires once a finished sale is drained, and what seeding clears so
/// a reused voucher id inherits nothing.
pub fn sale_keys(voucher: i64, segments: i64) -> Vec<String> {
    let mut all = vec![
        stock(voucher),
        buyers(voucher),
        meta(voucher),
        orders_stream(voucher),
        pending(voucher),
        takes(voucher),
    ];
    all.extend((0..segments).map(|s| segment_stock(voucher, s)));
    all
}

/// The consumer group that writes orders to the database.
pub const ORDER_GROUP: &str = "seckill-writers";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_one_voucher_share_a_hash_tag() {
        for key in [
            stock(7),
            segment_stock(7, 3),
            buyers(7),
            meta(7),
            orders_stream(7),
            dead_letter_stream(7),
            pending(7),
            takes(7),
        ] {
            assert!(key.contains("{7}"), "{key}");
        }
    }
}
