//! No accepted order is lost, and an operator can see and repair every
//! state: database outages, cancelled requests, finished sales, dead
//! letters, a Redis that lost its data, a reused voucher id. Real Redis and
//! SQLite (the PostgreSQL outage is in `postgres.rs`).

use crate::common;

use std::collections::HashSet;
use std::time::Duration;

use common::{accepted_ids, config, wait_until, Harness};
use locksmith_testkit::FaultProxy;
use redis::Commands;
use seckill::config::Strategy;
use seckill::keys;

use sqlx::Connection;

/// Holds SQLite's write lock (`BEGIN EXCLUSIVE`) until dropped or
/// released: every writer fails with SQLITE_BUSY after its busy timeout,
/// as in a database outage, while reads go on (WAL).
struct WriteLock(sqlx::sqlite::SqliteConnection);

impl WriteLock {
    async fn take(url: &str) -> WriteLock {
        let mut conn = sqlx::sqlite::SqliteConnection::connect(url).await.unwrap();
        sqlx::query("BEGIN EXCLUSIVE")
            .execute(&mut conn)
            .await
            .unwrap();
        WriteLock(conn)
    }

    async fn release(mut self) {
        sqlx::query("COMMIT").execute(&mut self.0).await.unwrap();
        self.0.close().await.unwrap();
    }
}

/// One instance whose database calls give up fast, so the lock above reads
/// as an outage within a fraction of a second.
async fn outage_harness(outage_limit: Option<Duration>) -> Harness {
    let mut h = Harness::start(Strategy::Lua, 0).await;
    let mut cfg = config(&h.redis.url(), &h.database_url, Strategy::Lua, "outage-0");
    cfg.db.statement_timeout = Duration::from_millis(100);
    cfg.pipeline.write_timeout = Duration::from_secs(2);
    cfg.pipeline.outage_limit = outage_limit;
    h.add_instance_with(cfg).await;
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_longer_than_the_dead_letter_window_loses_nothing() {
    let h = outage_harness(None).await;
    let voucher = h.create_voucher(100).await;
    let db = h.servers[0].state().db().clone();
    let lock = WriteLock::take(&h.database_url).await;
    let run = h.sale(voucher, 1, 10, 10).await;
    let accepted = accepted_ids(&run);
    assert_eq!(accepted.len(), 10, "the gate answers without the database");
    // The old dead-letter window: 3 deliveries x 300 ms idle, plus a pass
    // over the entries at 100 ms per failing write. Several times that,
    // with every write failing.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let mut conn = h.redis.connection().unwrap();
    assert_eq!(db.order_count(voucher).await.unwrap(), 0, "the lock held");
    assert_eq!(
        conn.xlen::<_, i64>(keys::dead_letter_stream(voucher))
            .unwrap(),
        0,
        "an outage dead-lettered orders"
    );
    lock.release().await;

    let orders = h
        .wait_written(voucher, &accepted, Duration::from_secs(30))
        .await;
    assert_eq!(orders.len(), 10, "every 201 is written");
    assert_eq!(db.failed_count(voucher).await.unwrap(), 0, "none failed");
    assert_eq!(db.voucher(voucher).await.unwrap().unwrap().stock, 90);
    wait_until("the stream trimmed", Duration::from_secs(10), async || {
        conn.xlen::<_, i64>(keys::orders_stream(voucher)).unwrap() == 0
    })
    .await;
    let stock: i64 = conn.get(keys::stock(voucher)).unwrap();
    assert_eq!(stock, 90);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_outage_limit_orders_are_dead_lettered_holding_their_items_and_replayed() {
    let h = outage_harness(Some(Duration::from_secs(1))).await;
    let voucher = h.create_voucher(100).await;
    let state = h.servers[0].state().clone();
    let lock = WriteLock::take(&h.database_url).await;
    let run = h.sale(voucher, 1, 5, 5).await;
    let accepted = accepted_ids(&run);
    assert_eq!(accepted.len(), 5);
    let mut conn = h.redis.connection().unwrap();
    wait_until("5 dead letters", Duration::from_secs(20), async || {
        conn.xlen::<_, i64>(keys::dead_letter_stream(voucher))
            .unwrap()
            == 5
    })
    .await;
    // The database could not abandon them (a write in flight might still
    // commit), so the items stay taken and the buyers known.
    let stock: i64 = conn.get(keys::stock(voucher)).unwrap();
    assert_eq!(
        stock, 95,
        "an item was given back without the database's word"
    );
    let buyers: i64 = conn.scard(keys::buyers(voucher)).unwrap();
    assert_eq!(buyers, 5);
    assert_eq!(
        conn.xlen::<_, i64>(keys::orders_stream(voucher)).unwrap(),
        0
    );
    let (status, body) = h.health().await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["status"], "degraded");
    assert!(
        body["problems"]
            .to_string()
            .contains("5 dead-lettered orders"),
        "{body}"
    );
    lock.release().await;

    let report = seckill::repair::replay_dead_letters(&state, voucher)
        .await
        .unwrap();
    assert_eq!(report.replayed, 5, "{report:?}");
    let orders = h
        .wait_written(voucher, &accepted, Duration::from_secs(20))
        .await;
    assert_eq!(orders.len(), 5);
    let stock: i64 = conn.get(keys::stock(voucher)).unwrap();
    assert_eq!(stock, 95);
    assert_eq!(
        state.db().voucher(voucher).await.unwrap().unwrap().stock,
        95
    );
    for id in &accepted {
        assert!(state.db().failed_order(*id).await.unwrap().is_none());
    }
    wait_until("healthy again", Duration::from_secs(10), async || {
        h.health().await.0 == 200
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_the_database_refuses_is_abandoned_its_item_given_back_and_replayed() {
    let h = Harness::start(Strategy::Lua, 1).await;
    let voucher = h.create_voucher(10).await;
    let state = h.servers[0].state().clone();
    // The database refuses user 13's order (not an outage: a constraint).
    let mut admin = sqlx::sqlite::SqliteConnection::connect(&h.database_url)
        .await
        .unwrap();
    sqlx::query(
        "CREATE TRIGGER refuse_13 BEFORE INSERT ON orders WHEN NEW.user_id = 13 \
         BEGIN SELECT RAISE(ABORT, 'user 13 is refused'); END",
    )
    .execute(&mut admin)
    .await
    .unwrap();
    let (status, body) = h.buy(0, voucher, 13).await;
    assert_eq!(status, 201, "{body}");
    let (status, _) = h.buy(0, voucher, 14).await;
    assert_eq!(status, 201);
    let mut conn = h.redis.connection().unwrap();
    wait_until("the dead letter", Duration::from_secs(20), async || {
        conn.xlen::<_, i64>(keys::dead_letter_stream(voucher))
            .unwrap()
            == 1
    })
    .await;
    // Abandoned by the database, so its item and buyer entry came back.
    let stock: i64 = conn.get(keys::stock(voucher)).unwrap();
    assert_eq!(stock, 9, "user 14's item only");
    let is_buyer: bool = conn.sismember(keys::buyers(voucher), 13).unwrap();
    assert!(!is_buyer);
    let mine = h.mine(voucher, 13).await;
    assert_eq!(mine["orders"][0]["status"], "failed", "{mine}");
    // The cause is fixed; the replay puts the order back and it is written.
    sqlx::query("DROP TRIGGER refuse_13")
        .execute(&mut admin)
        .await
        .unwrap();
    let report = seckill::repair::replay_dead_letters(&state, voucher)
        .await
        .unwrap();
    assert_eq!(report.replayed, 1, "{report:?}");
    let db = state.db().clone();
    wait_until("user 13's order", Duration::from_secs(10), async || {
        db.orders_of_user(voucher, 13).await.unwrap().len() == 1
    })
    .await;
    let stock: i64 = conn.get(keys::stock(voucher)).unwrap();
    assert_eq!(stock, 8);
    assert_eq!(db.voucher(voucher).await.unwrap().unwrap().stock, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_decides_between_abandoning_and_writing_an_order() {
    let h = Harness::start(Strategy::Lua, 1).await;
    let voucher = h.create_voucher(10).await;
    let db = h.servers[0].state().db().clone();
    let order = |id, user_id| seckill::db::Order {
        id,
        voucher_id: voucher,
        user_id,
    };
    use seckill::db::{StockGuard, WriteOutcome};
    // Written first: the abandonment is refused.
    assert_eq!(
        db.write_order(&order(1001, 1), StockGuard::Enforce)
            .await
            .unwrap(),
        WriteOutcome::Created
    );
    assert!(!db.abandon_order(&order(1001, 1), "test").await.unwrap());
    // Abandoned first: a late write is refused, and takes no stock.
    assert!(db.abandon_order(&order(1002, 2), "test").await.unwrap());
    assert_eq!(
        db.write_abandonable_order(&order(1002, 2), StockGuard::Enforce)
            .await
            .unwrap(),
        WriteOutcome::Abandoned
    );

    assert_eq!(db.voucher(voucher).await.unwrap().unwrap().stock, 9);
    // Lifted (a replay): the write goes through.
    db.unabandon_order(&order(1002, 2)).await.unwrap();
    assert_eq!(
        db.write_order(&order(1002, 2), StockGuard::Enforce)
            .await
            .unwrap(),
        WriteOutcome::Created
    );
    // Another order that happens to reuse an abandoned id (the sequence
    // restarted) is not blocked by that abandonment.
    assert!(db.abandon_order(&order(1003, 4), "test").await.unwrap());
    assert_eq!(
        db.write_abandonable_order(&order(1003, 5), StockGuard::Enforce)
            .await
            .unwrap(),
        WriteOutcome::Created
    );
}

/// When the request is dropped, per buyer, from 0 to 20 ms, spread by the
/// user id so that every point of the purchase gets cut. Denser near 0
/// (the square of a uniform spread): a `lua` purchase is one round trip
/// and over within a millisecond or two, and about a fifth of the buyers
/// still hang up inside it.
fn hang_up_after(user: i64) -> Duration {
    let x = (user.wrapping_mul(2_654_435_761) % 20_000) as u64;
    Duration::from_micros(x * x / 20_000)
}

async fn cancelled_requests_leak_nothing(strategy: Strategy) {
    use tower::ServiceExt;
    const STOCK: i64 = 1000;
    let h = Harness::start(strategy, 2).await;
    let voucher = h.create_voucher(STOCK).await;
    let mut tasks = tokio::task::JoinSet::new();
    let gate = std::sync::Arc::new(tokio::sync::Semaphore::new(40));
    for user in 1..=400i64 {
        // The router itself, driven in-process: dropping its future is
        // exactly what a client disconnect or the request timeout does.
        let app = seckill::app(h.servers[user as usize % 2].state().clone());
        let gate = gate.clone();
        tasks.spawn(async move {
            let _permit = gate.acquire_owned().await.unwrap();
            let request = axum::http::Request::post(format!("/vouchers/{voucher}/orders"))
                .header("x-user-id", user)
                .body(axum::body::Body::empty())
                .unwrap();
            let answer = tokio::time::timeout(hang_up_after(user), app.oneshot(request)).await;
            (user, answer.ok().map(|r| r.unwrap().status().as_u16()))
        });
    }
    let mut dropped = Vec::new();
    while let Some(done) = tasks.join_next().await {
        let (user, status) = done.unwrap();
        if status.is_none() {
            dropped.push(user);
        }
    }
    assert!(
        dropped.len() > 30,
        "too few hang-ups to test anything: {}",
        dropped.len()
    );
    let db = h.servers[0].state().db().clone();
    let mut conn = h.redis.connection().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Quiet: purchases cut off by the hang-ups finish in their own tasks,
    // and the pipeline writes what the gate accepted.
    let balanced = async |conn: &mut redis::Connection| {
        let redis_stock: i64 = conn.get(keys::stock(voucher)).unwrap();
        let unwritten: i64 = conn.xlen(keys::orders_stream(voucher)).unwrap();
        let db_stock = db.voucher(voucher).await.unwrap().unwrap().stock;
        (redis_stock, db_stock - unwritten)
    };
    // A purchase cut off while it still queued for a lock has taken
    // nothing yet, so the stocks balance while it runs on: quiet also means
    // no purchase task left on either instance (else a buyer who has no
    // order yet is refused as one who bought when their purchase lands).
    let in_flight = || {
        h.servers
            .iter()
            .map(|s| s.state().purchases().len())
            .sum::<usize>()
    };
    let mut last = (0, 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while tokio::time::Instant::now() < deadline {
        last = balanced(&mut conn).await;
        let unwritten: i64 = conn.xlen(keys::orders_stream(voucher)).unwrap();
        if last.0 == last.1 && unwritten == 0 && in_flight() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        last.0, last.1,
        "{strategy}: stock in Redis != stock in the database - pending orders"
    );
    assert_eq!(
        in_flight(),
        0,
        "{strategy}: purchases still running after 20 s"
    );
    // Every dropped buyer either has an order (and hears so) or can buy.
    for user in dropped {
        let mine = h.mine(voucher, user).await;
        let has_order = !mine["orders"].as_array().unwrap().is_empty();
        let (status, body) = h.buy(0, voucher, user).await;
        if has_order {
            assert_eq!(
                (status, body["error"].as_str()),
                (409, Some("already_bought")),
                "{strategy}: user {user} {mine}"
            );
        } else {
            assert_eq!(
                status, 201,
                "{strategy}: user {user} cannot buy again: {body}"
            );
        }
    }
    let everyone: HashSet<i64> = db
        .orders_of(voucher)
        .await
        .unwrap()
        .iter()
        .map(|o| o.user_id)
        .collect();
    let written = db.order_count(voucher).await.unwrap();
    assert_eq!(everyone.len() as i64, written, "one order per user");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_cancelled_requests_leak_nothing() {
    cancelled_requests_leak_nothing(Strategy::Lock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lua_cancelled_requests_leak_nothing() {
    cancelled_requests_leak_nothing(Strategy::Lua).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_sale_is_drained_trimmed_and_expires() {
    let mut h = Harness::start(Strategy::Lua, 0).await;
    let mut cfg = config(&h.redis.url(), &h.database_url, Strategy::Lua, "drain-0");
    cfg.finished_ttl = Duration::from_secs(120);
    h.add_instance_with(cfg).await;
    let voucher = h.create_voucher_until(50, Duration::from_secs(2)).await;
    let run = h.sale(voucher, 1, 5, 5).await;
    let accepted = accepted_ids(&run);
    assert_eq!(accepted.len(), 5);
    let state = h.servers[0].state().clone();
    h.wait_written(voucher, &accepted, Duration::from_secs(10))
        .await;
    let mut conn = h.redis.connection().unwrap();
    // Written orders leave the stream at once.
    wait_until("the stream trimmed", Duration::from_secs(5), async || {
        conn.xlen::<_, i64>(keys::orders_stream(voucher)).unwrap() == 0
    })
    .await;
    let metrics_before = state.render_metrics();
    assert!(
        metrics_before.contains(&format!("voucher=\"{voucher}\"")),
        "{metrics_before}"
    );
    let consumer = format!("seckill-consumer:{voucher}:drain-0");
    assert!(client_names(&mut conn).contains(&consumer), "{consumer}");
    // The sale ends; the consumer stops and marks the voucher drained.
    wait_until("drained", Duration::from_secs(20), async || {
        state
            .db()
            .voucher(voucher)
            .await
            .unwrap()
            .unwrap()
            .drained_ms
            .is_some()
    })
    .await;
    wait_until(
        "the consumer's connection closed",
        Duration::from_secs(5),
        async || !client_names(&mut conn).contains(&consumer),
    )
    .await;
    for key in [
        keys::stock(voucher),
        keys::buyers(voucher),
        keys::meta(voucher),
        keys::orders_stream(voucher),
    ] {
        let ttl: i64 = conn.ttl(&key).unwrap();
        assert!((1..=120).contains(&ttl), "{key}: ttl {ttl}");
    }
    assert!(
        !state
            .render_metrics()
            .contains(&format!("voucher=\"{voucher}\"")),
        "the drained voucher's series are gone"
    );
    // After the sale: 403 ended, even once the keys are gone.
    let _: () = redis::cmd("DEL")
        .arg(keys::sale_keys(voucher, 8))
        .query(&mut conn)
        .unwrap();
    let (status, body) = h.buy(0, voucher, 999).await;
    assert_eq!((status, body["error"].as_str()), (403, Some("ended")));
    let (status, body) = h.health().await;
    assert_eq!(status, 200, "a drained sale without keys is fine: {body}");
}

/// The names of the connections Redis has open.
fn client_names(conn: &mut redis::Connection) -> Vec<String> {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(conn).unwrap();
    list.lines()
        .filter_map(|l| {
            l.split(' ')
                .find_map(|f| f.strip_prefix("name="))
                .map(str::to_owned)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_and_reseed_repair_redis() {
    let h = Harness::start(Strategy::Lua, 1).await;
    let voucher = h.create_voucher(50).await;
    let run = h.sale(voucher, 1, 10, 5).await;
    let accepted = accepted_ids(&run);
    h.wait_written(voucher, &accepted, Duration::from_secs(10))
        .await;
    let state = h.servers[0].state().clone();
    let mut conn = h.redis.connection().unwrap();
    wait_until("the stream trimmed", Duration::from_secs(5), async || {
        conn.xlen::<_, i64>(keys::orders_stream(voucher)).unwrap() == 0
    })
    .await;
    let report = seckill::repair::reconcile(&state, voucher, false)
        .await
        .unwrap();
    assert_eq!(report.difference, Some(0), "{report:?}");
    // Redis drifts: 5 items too many.
    let _: () = conn.set(keys::stock(voucher), 45).unwrap();
    let report = seckill::repair::reconcile(&state, voucher, false)
        .await
        .unwrap();
    assert_eq!(report.difference, Some(5), "{report:?}");
    assert!(!report.fixed);
    let report = seckill::repair::reconcile(&state, voucher, true)
        .await
        .unwrap();
    assert!(report.fixed, "{report:?}");
    let stock: i64 = conn.get(keys::stock(voucher)).unwrap();
    assert_eq!(stock, 40);

    // Redis loses everything: the sale refuses and health says why.
    let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
    let (status, _) = h.buy(0, voucher, 500).await;
    assert_eq!(status, 503);
    let (status, body) = h.health().await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["problems"].to_string().contains("seckill reseed"),
        "{body}"
    );
    // Re-seeding is refused while state exists, so it cannot clobber a
    // live sale by mistake; here it is gone.
    let report = seckill::repair::reseed(&state, voucher, false)
        .await
        .unwrap();
    assert_eq!((report.stock, report.buyers), (40, 10), "{report:?}");
    assert!(seckill::repair::reseed(&state, voucher, false)
        .await
        .is_err());
    let (status, body) = h.health().await;
    assert_eq!(status, 200, "{body}");
    // Earlier buyers are still known; new ones buy from the right stock.
    let (status, body) = h.buy(0, voucher, accepted_user(&run)).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("already_bought"))
    );
    let (status, body) = h.buy(0, voucher, 500).await;
    assert_eq!(status, 201, "{body}");
    let stock: i64 = conn.get(keys::stock(voucher)).unwrap();
    assert_eq!(stock, 39);
}

fn accepted_user(run: &seckill::demo::load::LoadRun) -> i64 {
    run.samples
        .iter()
        .find(|s| matches!(s.outcome, seckill::demo::load::Outcome::Accepted(_)))
        .map(|s| s.user_id)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_voucher_id_inherits_nothing() {
    let mut h = Harness::start(Strategy::Lua, 1).await;
    let voucher = h.create_voucher(10).await;
    let (status, _) = h.buy(0, voucher, 5).await;
    assert_eq!(status, 201);
    let mut conn = h.redis.connection().unwrap();
    // Leftovers of the old sale: an unwritten order and a dead letter.
    let _: String = conn
        .xadd(
            keys::orders_stream(voucher),
            "*",
            &[
                ("order_id", "77"),
                ("user_id", "6"),
                ("voucher_id", &voucher.to_string()),
            ],
        )
        .unwrap();
    let _: String = conn
        .xadd(
            keys::dead_letter_stream(voucher),
            "*",
            &[("order_id", "78")],
        )
        .unwrap();
    h.servers.remove(0).shutdown().await;
    // The database starts over; Redis keeps its data.
    let dir = tempfile::tempdir().unwrap();
    let fresh = format!("sqlite://{}?mode=rwc", dir.path().join("new.db").display());
    h.add_instance_with(config(&h.redis.url(), &fresh, Strategy::Lua, "new"))
        .await;
    let again = h.create_voucher(10).await;
    assert_eq!(again, voucher, "the id is reused");
    assert_eq!(
        conn.xlen::<_, i64>(keys::orders_stream(voucher)).unwrap(),
        0
    );
    assert_eq!(
        conn.xlen::<_, i64>(keys::dead_letter_stream(voucher))
            .unwrap(),
        0
    );
    let (status, body) = h.buy(0, voucher, 5).await;
    assert_eq!(status, 201, "the old buyer set was inherited: {body}");
    let db = h.servers[0].state().db().clone();
    wait_until("the new order", Duration::from_secs(10), async || {
        db.order_count(voucher).await.unwrap() == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        db.order(77).await.unwrap().is_none(),
        "an old entry was written"
    );
    drop(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sale_whose_redis_state_is_gone_is_never_called_drained() {
    let h = Harness::start(Strategy::Lua, 1).await;
    let voucher = h.create_voucher_until(10, Duration::from_secs(1)).await;
    let mut conn = h.redis.connection().unwrap();
    let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
    // Past the end and the drain margin, with an empty (recreated) stream.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let db = h.servers[0].state().db().clone();
    assert!(
        db.voucher(voucher)
            .await
            .unwrap()
            .unwrap()
            .drained_ms
            .is_none(),
        "a sale that lost its state was marked drained"
    );
    let (status, body) = h.health().await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["problems"].to_string().contains("seckill reseed"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reseed_keeps_the_orders_still_in_the_stream() {
    let mut h = Harness::start(Strategy::Lua, 1).await;
    let voucher = h.create_voucher(10).await;
    let state = h.servers[0].state().clone();
    let (status, _) = h.buy(0, voucher, 1).await;
    assert_eq!(status, 201);
    h.wait_written(voucher, &[], Duration::from_secs(1)).await;
    let db = state.db().clone();
    wait_until("user 1's order", Duration::from_secs(10), async || {
        db.order_count(voucher).await.unwrap() == 1
    })
    .await;
    // No consumer runs; two accepted orders wait in the stream.
    h.servers.remove(0).shutdown().await;
    let mut conn = h.redis.connection().unwrap();
    for (user, order) in [(2, 9002), (3, 9003)] {
        let _: String = conn
            .xadd(
                keys::orders_stream(voucher),
                "*",
                &[
                    ("order_id", order.to_string()),
                    ("user_id", user.to_string()),
                    ("voucher_id", voucher.to_string()),
                ],
            )
            .unwrap();
        let _: () = conn.hset(keys::pending(voucher), user, order).unwrap();
    }
    // Only the window hash was evicted. The operator's command connects
    // on its own, as `seckill reseed` does.
    let _: () = conn.del(keys::meta(voucher)).unwrap();
    let state = seckill::AppState::connect(config(
        &h.redis.url(),
        &h.database_url,
        Strategy::Lua,
        "ops",
    ))
    .await
    .unwrap();
    let report = seckill::repair::reseed(&state, voucher, false)
        .await
        .unwrap();
    assert_eq!(
        report.stock, 7,
        "10 - 1 written - 2 in the stream: {report:?}"
    );
    assert_eq!(report.buyers, 3, "{report:?}");
    assert_eq!(
        conn.xlen::<_, i64>(keys::orders_stream(voucher)).unwrap(),
        2
    );
    for user in 1..=3 {
        let known: bool = conn.sismember(keys::buyers(voucher), user).unwrap();
        assert!(known, "user {user}");
    }
}

/// One instance of `strategy` whose Redis traffic goes through a fault
/// proxy, and a voucher of 5 items of which user 1 bought one (so the take
/// script is loaded when the test starts).
async fn behind_redis_proxy(strategy: Strategy) -> (Harness, FaultProxy, i64) {
    let mut h = Harness::start(strategy, 0).await;
    let proxy = FaultProxy::start(&h.redis.addr()).unwrap();
    let cfg = config(&proxy.url(), &h.database_url, strategy, "cut-0");
    h.add_instance_with(cfg).await;
    let voucher = h.create_voucher(5).await;
    let (status, body) = h.buy(0, voucher, 1).await;
    assert_eq!(status, 201, "{body}");
    (h, proxy, voucher)
}

/// Items left in Redis and in the database, and the buyers Redis records.
async fn accounts(h: &Harness, voucher: i64) -> (i64, i64, i64) {
    let v: serde_json::Value = h
        .http
        .get(format!("{}/vouchers/{voucher}", h.servers[0].url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut conn = redis::Client::open(h.redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let buyers: i64 = conn.scard(keys::buyers(voucher)).unwrap();
    (
        v["stock_left"].as_i64().unwrap(),
        v["db_stock"].as_i64().unwrap(),
        buyers,
    )
}

/// The bytes that mark user 2's take of an item (the stock counter then
/// the buyers set, as its first keys): in `segmented` from its own
/// segment, 2 of the harness's 4. Nothing else user 2's purchase sends
/// names both (the buyer check names no counter; no give-back comes
/// first).
fn take_of_user_2(strategy: Strategy, voucher: i64) -> Vec<u8> {
    let stock = match strategy {
        Strategy::Segmented => keys::segment_stock(voucher, 2),
        _ => keys::stock(voucher),
    };
    let buyers = keys::buyers(voucher);
    format!("{stock}\r\n${}\r\n{buyers}\r\n", buyers.len()).into_bytes()
}

/// `lock` and `segmented` take an item with one script (stock and buyer
/// in one step). When its reply is lost after Redis ran it (here the
/// connection breaks right after; in a CI run the reply came after the
/// command timeout), the purchase learns that the item was taken and
/// sells it. Before, it answered 503 and left the buyer recorded with no
/// order: the item was gone and every retry was refused as a duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_that_ran_while_its_reply_was_lost_still_sells_the_item() {
    for strategy in [Strategy::Lock, Strategy::Segmented] {
        let (h, proxy, voucher) = behind_redis_proxy(strategy).await;
        proxy.cut_reply_after(&take_of_user_2(strategy, voucher));
        let (status, body) = h.buy(0, voucher, 2).await;
        assert_eq!(proxy.cuts(), 1, "{strategy:?}: the take's reply was cut");
        assert_eq!(status, 201, "{strategy:?}: {body}");
        assert_eq!(
            h.mine(voucher, 2).await["orders"].as_array().map(Vec::len),
            Some(1),
            "{strategy:?}"
        );
        assert_eq!(accounts(&h, voucher).await, (3, 3, 2), "{strategy:?}");
        let (status, body) = h.buy(0, voucher, 2).await;
        assert_eq!(
            (status, &body["error"]),
            (409, &serde_json::json!("already_bought")),
            "{strategy:?}"
        );
    }
}

/// The other side: the take's reply is lost and it did not run (Redis
/// answered NOSCRIPT, and that reply was cut). The purchase records the
/// attempt as given up and answers 503 with nothing taken; the buyer's
/// retry buys the item. A take of a given-up attempt that reaches Redis
/// late changes nothing (the script's own test in `strategy`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_that_did_not_run_while_its_reply_was_lost_takes_nothing() {
    for strategy in [Strategy::Lock, Strategy::Segmented] {
        let (h, proxy, voucher) = behind_redis_proxy(strategy).await;
        let mut conn = redis::Client::open(h.redis.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut conn).unwrap();
        proxy.cut_reply_after(&take_of_user_2(strategy, voucher));
        let (status, body) = h.buy(0, voucher, 2).await;
        assert_eq!(proxy.cuts(), 1, "{strategy:?}: the take's reply was cut");
        assert_eq!(status, 503, "{strategy:?}: {body}");
        assert_eq!(
            accounts(&h, voucher).await,
            (4, 4, 1),
            "{strategy:?}: nothing taken"
        );
        let records: Vec<String> = conn.hvals(keys::takes(voucher)).unwrap();
        assert_eq!(
            records.iter().filter(|r| *r == "given-up").count(),
            1,
            "{strategy:?}: the attempt is recorded as given up: {records:?}"
        );
        let (status, body) = h.buy(0, voucher, 2).await;
        assert_eq!(status, 201, "{strategy:?}: the retry buys: {body}");
        assert_eq!(accounts(&h, voucher).await, (3, 3, 2), "{strategy:?}");
    }
}

/// An item given back after a failed order write goes back once when the
/// give-back's reply is lost: whether Redis ran it (the connection broke
/// right after) or not (it answered NOSCRIPT, and that reply was cut), the
/// give-back is sent again, and a second run finds the take's record
/// `returned` and adds nothing. Before, a lost give-back was only logged: had it not run, the
/// buyer stayed recorded with no order and every retry was refused as a
/// duplicate; sent again as it was, it gave back two items.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_give_back_whose_reply_was_lost_gives_back_one_item() {
    for ran in [true, false] {
        give_back_with_its_reply_lost(ran).await;
    }
}

async fn give_back_with_its_reply_lost(ran: bool) {
    let mut h = Harness::start(Strategy::Lock, 0).await;
    let proxy = FaultProxy::start(&h.redis.addr()).unwrap();
    let mut cfg = config(&proxy.url(), &h.database_url, Strategy::Lock, "cut-0");
    cfg.db.statement_timeout = Duration::from_millis(100);
    h.add_instance_with(cfg).await;
    let voucher = h.create_voucher(5).await;
    let (status, body) = h.buy(0, voucher, 1).await;
    assert_eq!(status, 201, "{body}");
    // With the database locked, order writes fail for sure and the item
    // goes back. User 3's purchase loads the give-back script, so the cut
    // one below runs, unless the scripts are flushed.
    let lock = WriteLock::take(&h.database_url).await;
    let (status, body) = h.buy(0, voucher, 3).await;
    assert_eq!(status, 503, "{body}");
    if !ran {
        let mut conn = redis::Client::open(h.redis.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut conn).unwrap();
    }
    // The give-back names the takes hash with the user id right after it
    // (user 2's take has the new count, 3, there; the check after a lost
    // take the attempt id).
    let give_back = format!("{}\r\n$1\r\n2\r\n", keys::takes(voucher));
    proxy.cut_reply_after(give_back.as_bytes());
    let (status, body) = h.buy(0, voucher, 2).await;
    lock.release().await;
    assert_eq!(
        proxy.cuts(),
        1,
        "ran {ran}: the give-back's reply was cut: {body}"
    );
    assert_eq!(status, 503, "ran {ran}: {body}");
    assert_eq!(
        accounts(&h, voucher).await,
        (4, 4, 1),
        "ran {ran}: one item back, the buyer forgotten"
    );
    let (status, body) = h.buy(0, voucher, 2).await;
    assert_eq!(status, 201, "ran {ran}: the retry buys: {body}");
    assert_eq!(accounts(&h, voucher).await, (3, 3, 2), "ran {ran}");
}
