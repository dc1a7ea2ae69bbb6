//! Shared test harness: one private Redis, one SQLite file (or a given
//! database URL), N in-process service instances.
#![allow(dead_code)]

use std::time::Duration;

use locksmith_testkit::RedisServer;
use seckill::config::{Config, PipelineConfig, Strategy};
use seckill::demo::load::{self, LoadPlan, LoadRun, Outcome};
use seckill::Server;
use serde_json::{json, Value};

pub const ADMIN: &str = "test-admin-token";

pub struct Harness {
    pub redis: RedisServer,
    pub database_url: String,
    /// Keeps the SQLite file alive.
    pub dir: tempfile::TempDir,
    pub servers: Vec<Server>,
    pub http: reqwest::Client,
}

/// Pipeline settings that make claiming and dead-lettering fast enough to test.
pub fn fast_pipeline() -> PipelineConfig {
    PipelineConfig {
        block: Duration::from_millis(100),
        claim_min_idle: Duration::from_millis(300),
        claim_interval: Duration::from_millis(200),
        max_deliveries: 3,
        outage_limit: None,
        write_timeout: Duration::from_secs(5),
        discover_interval: Duration::from_millis(100),
        batch: 100,
    }
}

pub fn config(redis_url: &str, database_url: &str, strategy: Strategy, name: &str) -> Config {
    let mut c = Config::new(redis_url, database_url, strategy);
    c.admin_token = ADMIN.to_owned();
    c.consumer_name = name.to_owned();
    c.segments = 4;
    // The `lock` strategy queues every buyer on one lock: under a test's
    // load on a busy machine the waits are long. The request timeout and
    // lease must cover them (Config::validate).
    c.lock_wait = Duration::from_secs(20);
    c.lock_lease = Duration::from_secs(30);
    c.request_timeout = Duration::from_secs(60);
    c.pipeline = fast_pipeline();
    c
}

impl Harness {
    pub async fn start(strategy: Strategy, instances: usize) -> Harness {
        Self::start_with_db(strategy, instances, None).await
    }

    pub async fn start_with_db(
        strategy: Strategy,
        instances: usize,
        database_url: Option<String>,
    ) -> Harness {
        let redis = RedisServer::start().expect("redis-server starts");
        let dir = tempfile::tempdir().unwrap();
        let database_url = database_url
            .unwrap_or_else(|| format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display()));
        let mut h = Harness {
            redis,
            database_url,
            dir,
            servers: Vec::new(),
            http: reqwest::Client::new(),
        };
        for i in 0..instances {
            h.add_instance(strategy, &format!("test-{i}")).await;
        }
        h
    }

    pub async fn add_instance(&mut self, strategy: Strategy, name: &str) -> usize {
        let cfg = config(&self.redis.url(), &self.database_url, strategy, name);
        self.add_instance_with(cfg).await
    }

    /// Adds an instance with a configuration of the test's own (start
    /// from [`config`]).
    pub async fn add_instance_with(&mut self, cfg: Config) -> usize {
        let server = Server::bind(cfg, "127.0.0.1:0".parse().unwrap())
            .await
            .expect("instance starts");
        self.servers.push(server);
        self.servers.len() - 1
    }

    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(|s| s.url()).collect()
    }

    pub async fn create_voucher(&self, stock: i64) -> i64 {
        self.create_voucher_until(stock, Duration::from_secs(3600))
            .await
    }

    /// A voucher on sale from 5 s ago until `ends_in` from now.
    pub async fn create_voucher_until(&self, stock: i64, ends_in: Duration) -> i64 {
        let now = std::time::SystemTime::now();
        let v: Value = self
            .http
            .post(format!("{}/vouchers", self.servers[0].url()))
            .bearer_auth(ADMIN)
            .json(&json!({
                "title": "test voucher",
                "stock": stock,
                "begin": humantime::format_rfc3339_millis(now - Duration::from_secs(5)).to_string(),
                "end": humantime::format_rfc3339_millis(now + ends_in).to_string(),
            }))
            .send()
            .await
            .unwrap()
            .error_for_status()
            .unwrap()
            .json()
            .await
            .unwrap();
        v["id"].as_i64().unwrap()
    }

    pub async fn buy(&self, instance: usize, voucher: i64, user: i64) -> (u16, Value) {
        let r = self
            .http
            .post(format!(
                "{}/vouchers/{voucher}/orders",
                self.servers[instance].url()
            ))
            .header("X-User-Id", user.to_string())
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// `GET /vouchers/{voucher}/orders/mine` on instance 0, as `user`.
    pub async fn mine(&self, voucher: i64, user: i64) -> Value {
        self.http
            .get(format!(
                "{}/vouchers/{voucher}/orders/mine",
                self.servers[0].url()
            ))
            .header("X-User-Id", user.to_string())
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// `GET /healthz` on instance 0: status and body.
    pub async fn health(&self) -> (u16, Value) {
        let r = self
            .http
            .get(format!("{}/healthz", self.servers[0].url()))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap())
    }

    /// Sends `buyers` distinct users at all instances, at most
    /// `concurrency` at a time, bounded by 60 s.
    pub async fn sale(
        &self,
        voucher: i64,
        first_user: i64,
        buyers: usize,
        concurrency: usize,
    ) -> LoadRun {
        let plan = LoadPlan {
            instances: self.urls(),
            voucher_id: voucher,
            first_user,
            buyers,
            requests_per_buyer: 1,
            concurrency,
            time_limit: Duration::from_secs(60),
            route: load::Route::Purchase,
        };
        load::run(&plan, &indicatif::ProgressBar::hidden()).await
    }

    /// Waits (bounded) until every id in `accepted` is written. A read
    /// that fails (the database still coming back after an outage) counts
    /// as "not yet" until the deadline.
    pub async fn wait_written(
        &self,
        voucher: i64,
        accepted: &[i64],
        within: Duration,
    ) -> Vec<seckill::db::Order> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let orders = match self.servers[0].state().db().orders_of(voucher).await {
                Ok(orders) => orders,
                Err(e) if tokio::time::Instant::now() <= deadline => {
                    eprintln!("reading the orders failed, trying again: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                Err(e) => panic!("the orders could not be read within {within:?}: {e}"),
            };
            let all = accepted.iter().all(|id| orders.iter().any(|o| o.id == *id));
            if all || tokio::time::Instant::now() > deadline {
                return orders;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Polls `check` every 50 ms until it holds; fails the test after `within`.
pub async fn wait_until(what: &str, within: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn accepted_ids(run: &LoadRun) -> Vec<i64> {
    run.samples
        .iter()
        .filter_map(|s| match s.outcome {
            Outcome::Accepted(id) => Some(id),
            _ => None,
        })
        .collect()
}

/// Asserts the safe strategies' promise: exactly `stock` sold, to distinct
/// users, every accepted order written, nothing else written.
pub fn assert_exact(run: &LoadRun, orders: &[seckill::db::Order], stock: usize) {
    let accepted = accepted_ids(run);
    let others: Vec<_> = run
        .samples
        .iter()
        .filter(|s| !matches!(s.outcome, Outcome::Accepted(_) | Outcome::Rejected(409, _)))
        .map(|s| s.outcome.clone())
        .take(5)
        .collect();
    assert!(others.is_empty(), "unexpected answers: {others:?}");
    assert_eq!(accepted.len(), stock, "accepted");
    assert_eq!(orders.len(), stock, "orders in the database");
    let users: std::collections::HashSet<i64> = orders.iter().map(|o| o.user_id).collect();
    assert_eq!(users.len(), stock, "distinct buyers");
    for id in &accepted {
        assert!(
            orders.iter().any(|o| o.id == *id),
            "accepted order {id} lost"
        );
    }
}
