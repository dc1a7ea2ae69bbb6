//! Acknowledgement: one script settles written (or abandoned) entries:
//! acknowledged, deleted from the stream, the buyer's pending entry dropped,
//! and for an abandoned order the item given back.

use std::sync::LazyLock;

use redis::aio::MultiplexedConnection;
use redis::streams::StreamId;

use crate::db::Order;
use crate::keys;

use super::Consumer;

/// Acknowledges settled entries: XACK, XDEL, and the pending-hash entry
/// (if it still names this order); gives the item (and the buyer entry)
/// back for orders that will never be written. An entry another consumer
/// acknowledged first is skipped, so nothing is given back twice.
///
/// KEYS[1] stream, KEYS[2] pending hash, KEYS[3] stock, KEYS[4] buyers
/// ARGV[1] group, then per entry: id, user id, order id, mode (0 written,
/// 1 give the item back, 2 give the item and the buyer entry back)
static ACK: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local n = 0
for i = 2, #ARGV, 4 do
  local id, user, order, mode = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  if redis.call('XACK', KEYS[1], ARGV[1], id) == 1 then
    n = n + 1
    redis.call('XDEL', KEYS[1], id)
    if user ~= '' and redis.call('HGET', KEYS[2], user) == order then
      redis.call('HDEL', KEYS[2], user)
    end
    if mode ~= '0' and redis.call('EXISTS', KEYS[3]) == 1 then
      redis.call('INCR', KEYS[3])
    end
    if mode == '2' then redis.call('SREM', KEYS[4], user) end
  end
end
return n
",
    )
});

impl Consumer {
    /// Acknowledges one entry whose order is written.
    pub(super) async fn ack_written(
        &self,
        conn: &mut MultiplexedConnection,
        id: &str,
        order: &Order,
    ) -> redis::RedisResult<()> {
        self.ack(conn, &[(id.to_owned(), Some(*order), 0)]).await
    }

    /// Settles entries with one [`ACK`] call: (entry id, its order if it
    /// parsed, give-back mode).
    pub(super) async fn ack(
        &self,
        conn: &mut MultiplexedConnection,
        settled: &[(String, Option<Order>, u8)],
    ) -> redis::RedisResult<()> {
        if settled.is_empty() {
            return Ok(());
        }
        let mut ack = ACK.key(&self.stream);
        ack.key(keys::pending(self.id()))
            .key(keys::stock(self.id()))
            .key(keys::buyers(self.id()))
            .arg(keys::ORDER_GROUP);
        for (id, order, mode) in settled {
            match order {
                Some(o) => ack.arg(id).arg(o.user_id).arg(o.id).arg(mode),
                None => ack.arg(id).arg("").arg("").arg(0),
            };
        }
        let _: i64 = ack.invoke_async(conn).await?;
        Ok(())
    }

    /// One entry by id, if the stream still has it.
    pub(super) async fn entry(
        &self,
        conn: &mut MultiplexedConnection,
        id: &str,
    ) -> redis::RedisResult<Option<StreamId>> {
        let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
            .arg(&self.stream)
            .arg(id)
            .arg(id)
            .query_async(conn)
            .await?;
        Ok(reply.ids.into_iter().next())
    }
}
