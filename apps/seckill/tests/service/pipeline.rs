//! The order pipeline's failure cases: a consumer that dies between reading
//! and acknowledging, a replay after a commit whose XACK was lost, and a
//! poison entry that must go to the dead-letter stream without stopping
//! the orders behind it.

use crate::common;

use std::time::Duration;

use common::{wait_until, Harness};
use redis::Commands;
use seckill::config::Strategy;
use seckill::db::{Order, WriteOutcome};
use seckill::keys;

/// Appends an order entry as the gate would, and has consumer `who` read
/// it without acknowledging: the state a killed consumer leaves behind.
fn read_and_die(
    conn: &mut redis::Connection,
    voucher: i64,
    fields: &[(&str, String)],
    who: &str,
) -> String {
    let id: String = conn
        .xadd(keys::orders_stream(voucher), "*", fields)
        .unwrap();
    let read: redis::streams::StreamReadReply = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(keys::ORDER_GROUP)
        .arg(who)
        .arg("COUNT")
        .arg(100)
        .arg("STREAMS")
        .arg(keys::orders_stream(voucher))
        .arg(">")
        .query(conn)
        .unwrap();
    assert_eq!(read.keys[0].ids.len(), 1, "the dead consumer got the entry");
    id
}

fn order_fields(order: &Order) -> Vec<(&'static str, String)> {
    vec![
        ("order_id", order.id.to_string()),
        ("user_id", order.user_id.to_string()),
        ("voucher_id", order.voucher_id.to_string()),
    ]
}

fn pending(conn: &mut redis::Connection, voucher: i64) -> i64 {
    let summary: Vec<redis::Value> = redis::cmd("XPENDING")
        .arg(keys::orders_stream(voucher))
        .arg(keys::ORDER_GROUP)
        .query(conn)
        .unwrap();
    redis::from_redis_value_ref(&summary[0]).unwrap()
}

/// Sets up a voucher whose group exists, with no instance running.
async fn idle_voucher(stock: i64) -> (Harness, i64) {
    let mut h = Harness::start(Strategy::Lua, 1).await;
    let voucher = h.create_voucher(stock).await;
    // Let the instance's consumer create the group, then stop it.
    let mut conn = h.redis.connection().unwrap();
    wait_until("the consumer group", Duration::from_secs(10), async || {
        redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(keys::orders_stream(voucher))
            .query::<Vec<redis::Value>>(&mut conn)
            .map(|g| !g.is_empty())
            .unwrap_or(false)
    })
    .await;
    h.servers.remove(0).shutdown().await;
    (h, voucher)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_instance_claims_what_a_dead_consumer_left() {
    let (mut h, voucher) = idle_voucher(10).await;
    let mut conn = h.redis.connection().unwrap();
    let order = Order {
        id: 4242,
        voucher_id: voucher,
        user_id: 7,
    };
    read_and_die(&mut conn, voucher, &order_fields(&order), "killed-consumer");

    h.add_instance(Strategy::Lua, "survivor").await;
    let db = h.servers[0].state().db().clone();
    wait_until("the claimed order", Duration::from_secs(10), async || {
        db.order(4242).await.unwrap().is_some()
    })
    .await;
    wait_until("the acknowledgement", Duration::from_secs(10), async || {
        pending(&mut conn, voucher) == 0
    })
    .await;
    assert_eq!(db.orders_of(voucher).await.unwrap(), vec![order]);
    assert_eq!(db.voucher(voucher).await.unwrap().unwrap().stock, 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_consumer_drains_its_own_pending_entries() {
    let (mut h, voucher) = idle_voucher(10).await;
    let mut conn = h.redis.connection().unwrap();
    let order = Order {
        id: 777,
        voucher_id: voucher,
        user_id: 3,
    };
    read_and_die(&mut conn, voucher, &order_fields(&order), "same-name");
    // A replay after a commit whose XACK was lost: already in the database.
    let replayed = Order {
        id: 778,
        voucher_id: voucher,
        user_id: 4,
    };
    assert_eq!(h.servers.len(), 0);
    let direct = seckill::db::Db::connect(&h.database_url, Default::default())
        .await
        .unwrap();
    assert_eq!(
        direct
            .write_order(&replayed, seckill::db::StockGuard::Enforce)
            .await
            .unwrap(),
        WriteOutcome::Created
    );
    read_and_die(&mut conn, voucher, &order_fields(&replayed), "same-name");

    h.add_instance(Strategy::Lua, "same-name").await;
    let db = h.servers[0].state().db().clone();
    wait_until("both settled", Duration::from_secs(10), async || {
        pending(&mut conn, voucher) == 0
    })
    .await;
    let orders = db.orders_of(voucher).await.unwrap();
    assert_eq!(orders, vec![order, replayed], "each order exactly once");
    assert_eq!(
        db.voucher(voucher).await.unwrap().unwrap().stock,
        8,
        "stock taken once per order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_entry_is_dead_lettered_and_orders_keep_flowing() {
    let h = Harness::start(Strategy::Lua, 1).await;
    let voucher = h.create_voucher(10).await;
    let mut conn = h.redis.connection().unwrap();
    let poison: String = conn
        .xadd(
            keys::orders_stream(voucher),
            "*",
            &[("order_id", "not-a-number"), ("user_id", "1")],
        )
        .unwrap();
    // A real purchase behind the poison entry.
    let (status, body) = h.buy(0, voucher, 99).await;
    assert_eq!(status, 201, "{body}");
    let order_id: i64 = body["order_id"].as_str().unwrap().parse().unwrap();
    let db = h.servers[0].state().db().clone();
    wait_until("the good order", Duration::from_secs(10), async || {
        db.order(order_id).await.unwrap().is_some()
    })
    .await;

    wait_until("the dead letter", Duration::from_secs(15), async || {
        conn.xlen::<_, i64>(keys::dead_letter_stream(voucher))
            .unwrap()
            == 1
    })
    .await;
    let dead: redis::streams::StreamRangeReply =
        conn.xrange_all(keys::dead_letter_stream(voucher)).unwrap();
    let entry = &dead.ids[0];
    assert_eq!(entry.get::<String>("original_id"), Some(poison));
    assert_eq!(
        entry.get::<String>("order_id").as_deref(),
        Some("not-a-number")
    );
    // Malformed: dead-lettered at once, not after retries.
    assert_eq!(
        entry.get::<String>("reason").as_deref(),
        Some("malformed entry")
    );
    wait_until("nothing pending", Duration::from_secs(5), async || {
        pending(&mut conn, voucher) == 0
    })
    .await;

    // Still flowing after the dead letter.
    let (status, body) = h.buy(0, voucher, 100).await;
    assert_eq!(status, 201, "{body}");
    let later: i64 = body["order_id"].as_str().unwrap().parse().unwrap();
    wait_until("the later order", Duration::from_secs(10), async || {
        db.order(later).await.unwrap().is_some()
    })
    .await;
    assert_eq!(
        conn.xlen::<_, i64>(keys::dead_letter_stream(voucher))
            .unwrap(),
        1,
        "dead-lettered once"
    );
}
