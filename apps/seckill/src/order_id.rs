//! Order ids: 31 bits of seconds since a fixed epoch, then a 32-bit sequence
//! that restarts every UTC day, taken from a Redis `INCR`.
//!
//! The ids are unique across instances (one shared counter), roughly
//! time-ordered, fit in a positive `i64`, and reveal nothing about sales
//! volume beyond one day. Caveat: the counter lives in Redis; a Redis that
//! loses its data restarts the day's sequence, and ids issued in the same
//! second before the loss can repeat. The database's primary key rejects
//! such a repeat instead of overwriting an order.

use redis::aio::ConnectionLike;

use crate::keys;

/// 2024-01-01T00:00:00Z; 31 bits of seconds from here last until 2092.
pub const EPOCH_SECS: i64 = 1_704_067_200;

/// Builds an id from its parts.
pub fn compose(secs_since_epoch: i64, seq: i64) -> Option<i64> {
    if !(0..(1 << 31)).contains(&secs_since_epoch) || !(0..(1 << 32)).contains(&seq) {
        return None;
    }
    Some((secs_since_epoch << 32) | seq)
}

/// Splits an id into (seconds since [`EPOCH_SECS`], daily sequence).
pub fn split(id: i64) -> (i64, i64) {
    (id >> 32, id & 0xffff_ffff)
}

/// Takes the next order id.
///
/// # Errors
/// Redis errors; an exhausted daily sequence (2^32 orders in one day) is
/// reported as a Redis error too.
pub async fn next(conn: &mut (impl ConnectionLike + Send)) -> redis::RedisResult<i64> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let day = now / 86_400;
    let key = keys::order_seq(day);
    let (seq,): (i64,) = redis::pipe()
        .incr(&key, 1)
        .expire(&key, 2 * 86_400)
        .ignore()
        .query_async(conn)
        .await?;
    compose(now - EPOCH_SECS, seq).ok_or_else(|| {
        redis::RedisError::from((
            redis::ErrorKind::Client,
            "order id space exhausted",
            format!("sequence {seq} of day {day}"),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_order_by_time() {
        let a = compose(100, 5).unwrap();
        let b = compose(101, 1).unwrap();
        assert!(a < b);
        assert_eq!(split(a), (100, 5));
        assert_eq!(
            compose((1 << 31) - 1, (1 << 32) - 1).map(|i| i > 0),
            Some(true)
        );
        assert_eq!(compose(1 << 31, 0), None);
        assert_eq!(compose(0, 1 << 32), None);
    }
}
