//! Redis restarted mid-sale, without persistence: the stock, buyer set and
//! stream are gone. No strategy may oversell, and the service must answer
//! 503 instead of selling from state it no longer has.

use crate::common;

use std::collections::HashSet;
use std::time::Duration;

use common::{accepted_ids, Harness};
use seckill::config::Strategy;
use seckill::demo::load::Outcome;

const STOCK: usize = 100;

async fn restart_mid_sale(strategy: Strategy) {
    let mut h = Harness::start(strategy, 2).await;
    let voucher = h.create_voucher(STOCK as i64).await;
    // Part of the stock goes before the outage.
    let before = h.sale(voucher, 1, 40, 10).await;
    assert_eq!(
        accepted_ids(&before).len(),
        40,
        "{strategy}: sales before the outage"
    );
    let written_before = h
        .wait_written(voucher, &accepted_ids(&before), Duration::from_secs(10))
        .await;
    assert_eq!(written_before.len(), 40);

    // The sale goes on while Redis dies and comes back empty.
    let urls = h.urls();
    let during = tokio::spawn(async move {
        let plan = seckill::demo::load::LoadPlan {
            instances: urls,
            voucher_id: voucher,
            first_user: 1000,
            buyers: 200,
            requests_per_buyer: 1,
            concurrency: 4,
            time_limit: Duration::from_secs(30),
            route: seckill::demo::load::Route::Purchase,
        };
        seckill::demo::load::run(&plan, &indicatif::ProgressBar::hidden()).await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    tokio::task::block_in_place(|| h.redis.restart()).expect("redis restarts");
    let during = during.await.unwrap();
    for s in &during.samples {
        assert!(
            matches!(
                s.outcome,
                Outcome::Accepted(_) | Outcome::Unknown | Outcome::Rejected(409 | 503, _)
            ),
            "{strategy}: unexpected answer {:?}",
            s.outcome
        );
    }

    // After the restart: refused with 503, not sold from nothing.
    for user in 5000..5010 {
        let (status, body) = h.buy((user % 2) as usize, voucher, user).await;
        assert_eq!(status, 503, "{strategy}: bought from lost state: {body}");
        assert_eq!(body["error"], "unavailable");
    }
    // Redis itself is back, and the health check says what is wrong.
    let health = h
        .http
        .get(format!("{}/healthz", h.servers[0].url()))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 503);
    let health: serde_json::Value = health.json().await.unwrap();
    assert_eq!(health["status"], "degraded", "{health}");
    assert_eq!(health["redis"], "ok", "{health}");
    let problems = health["problems"].to_string();
    assert!(
        problems.contains(&format!("voucher {voucher}: Redis has no state")),
        "{health}"
    );

    let accepted: Vec<i64> = accepted_ids(&before)
        .into_iter()
        .chain(accepted_ids(&during))
        .collect();
    // Give the pipeline a moment; orders still in the lost stream are lost,
    // which is exactly why the service stops selling.
    let orders = h
        .wait_written(voucher, &accepted, Duration::from_secs(3))
        .await;
    assert!(
        orders.len() <= STOCK,
        "{strategy}: {} orders for {STOCK} items",
        orders.len()
    );
    assert!(
        accepted.len() <= STOCK,
        "{strategy}: {} accepted for {STOCK} items",
        accepted.len()
    );
    let users: HashSet<i64> = orders.iter().map(|o| o.user_id).collect();
    assert_eq!(users.len(), orders.len(), "{strategy}: one order per user");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lua_refuses_after_redis_lost_its_data() {
    restart_mid_sale(Strategy::Lua).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_refuses_after_redis_lost_its_data() {
    restart_mid_sale(Strategy::Lock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segmented_refuses_after_redis_lost_its_data() {
    restart_mid_sale(Strategy::Segmented).await;
}
