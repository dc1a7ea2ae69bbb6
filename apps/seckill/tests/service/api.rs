//! The HTTP API without sockets (`app(state)` + `oneshot`): status codes for
//! good and bad input.

use crate::common;

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::{config, ADMIN};
use locksmith_testkit::RedisServer;
use seckill::config::Strategy;
use seckill::{app, AppState};
use serde_json::{json, Value};
use tower::ServiceExt;

struct Api {
    _redis: RedisServer,
    _dir: tempfile::TempDir,
    state: AppState,
}

impl Api {
    async fn start(strategy: Strategy) -> Api {
        let redis = RedisServer::start().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let db = format!("sqlite://{}?mode=rwc", dir.path().join("api.db").display());
        let state = AppState::connect(config(&redis.url(), &db, strategy, "api"))
            .await
            .unwrap();
        Api {
            _redis: redis,
            _dir: dir,
            state,
        }
    }

    async fn call(&self, req: Request<Body>) -> (StatusCode, Value) {
        let resp = app(self.state.clone()).oneshot(req).await.unwrap();
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    async fn create(&self, body: Value, token: Option<&str>) -> (StatusCode, Value) {
        let mut req = Request::post("/vouchers").header("content-type", "application/json");
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        self.call(req.body(Body::from(body.to_string())).unwrap())
            .await
    }

    async fn buy(&self, voucher: &str, user: Option<&str>) -> (StatusCode, Value) {
        let mut req = Request::post(format!("/vouchers/{voucher}/orders"));
        if let Some(u) = user {
            req = req.header("x-user-id", u);
        }
        self.call(req.body(Body::empty()).unwrap()).await
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(Request::get(path).body(Body::empty()).unwrap())
            .await
    }

    /// GET as a buyer (`X-User-Id`).
    async fn get_as(&self, path: &str, user: &str) -> (StatusCode, Value) {
        self.call(
            Request::get(path)
                .header("x-user-id", user)
                .body(Body::empty())
                .unwrap(),
        )
        .await
    }

    /// GET with the admin token.
    async fn get_admin(&self, path: &str) -> (StatusCode, Value) {
        self.call(
            Request::get(path)
                .header("authorization", format!("Bearer {ADMIN}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await
    }
}

fn time(offset_secs: i64) -> String {
    let now = std::time::SystemTime::now();
    let t = if offset_secs >= 0 {
        now + Duration::from_secs(offset_secs as u64)
    } else {
        now - Duration::from_secs((-offset_secs) as u64)
    };
    humantime::format_rfc3339_millis(t).to_string()
}

fn voucher(stock: i64, begin: i64, end: i64) -> Value {
    json!({ "title": "t", "stock": stock, "begin": time(begin), "end": time(end) })
}

#[tokio::test]
async fn bad_input_is_answered_with_4xx() {
    for strategy in [Strategy::Lua, Strategy::Lock] {
        let api = Api::start(strategy).await;
        // Admin token.
        assert_eq!(
            api.create(voucher(5, -5, 60), None).await.0,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            api.create(voucher(5, -5, 60), Some("nope")).await.0,
            StatusCode::UNAUTHORIZED
        );
        // Voucher fields.
        let (s, body) = api.create(voucher(-1, -5, 60), Some(ADMIN)).await;
        assert_eq!(s, StatusCode::BAD_REQUEST);
        assert_eq!(body["error"], "bad_request");
        assert_eq!(
            api.create(voucher(0, -5, 60), Some(ADMIN)).await.0,
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            api.create(voucher(5, 60, -5), Some(ADMIN)).await.0,
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            api.create(
                json!({"title": "t", "stock": 5, "begin": "yesterday", "end": time(60)}),
                Some(ADMIN)
            )
            .await
            .0,
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            api.create(
                json!({"title": "", "stock": 5, "begin": time(-5), "end": time(60)}),
                Some(ADMIN)
            )
            .await
            .0,
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            api.create(json!({"stock": 5}), Some(ADMIN)).await.0,
            StatusCode::BAD_REQUEST
        );
        // Ids and users.
        assert_eq!(api.buy("abc", Some("1")).await.0, StatusCode::BAD_REQUEST);
        assert_eq!(api.buy("-3", Some("1")).await.0, StatusCode::BAD_REQUEST);
        assert_eq!(api.buy("999", Some("1")).await.0, StatusCode::NOT_FOUND);
        assert_eq!(api.get("/vouchers/999").await.0, StatusCode::NOT_FOUND);
        assert_eq!(api.get("/vouchers/x1").await.0, StatusCode::BAD_REQUEST);
        assert_eq!(
            api.get_as("/orders/0", "1").await.0,
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            api.get_as("/orders/12345", "1").await.0,
            StatusCode::NOT_FOUND
        );
        assert_eq!(api.get("/orders/12345").await.0, StatusCode::UNAUTHORIZED);
        assert_eq!(
            api.get_admin("/vouchers/1/orders?limit=0").await.0,
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            api.get_admin("/vouchers/1/orders?limit=1001").await.0,
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            api.get_admin("/vouchers/1/orders?after=x").await.0,
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            api.get_admin("/vouchers/1/orders?bogus=1").await.0,
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            api.get("/vouchers/1/orders/mine").await.0,
            StatusCode::UNAUTHORIZED
        );
        let (s, v) = api.create(voucher(1, -5, 60), Some(ADMIN)).await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        let id = v["id"].to_string();
        assert_eq!(api.buy(&id, None).await.0, StatusCode::UNAUTHORIZED);
        assert_eq!(api.buy(&id, Some("bob")).await.0, StatusCode::BAD_REQUEST);
        assert_eq!(api.buy(&id, Some("0")).await.0, StatusCode::BAD_REQUEST);
    }
}

#[tokio::test]
async fn a_purchase_goes_through_its_states() {
    for strategy in [Strategy::Lua, Strategy::Segmented, Strategy::Unsafe] {
        let api = Api::start(strategy).await;
        let (_, v) = api.create(voucher(1, -5, 60), Some(ADMIN)).await;
        let id = v["id"].to_string();
        let (s, order) = api.buy(&id, Some("7")).await;
        assert_eq!(s, StatusCode::CREATED, "{strategy}: {order}");
        let order_id = order["order_id"].as_str().unwrap().to_owned();
        // Already bought beats sold out; another user hears sold out.
        let (s, body) = api.buy(&id, Some("7")).await;
        assert_eq!(
            (s, body["error"].as_str()),
            (StatusCode::CONFLICT, Some("already_bought"))
        );
        let (s, body) = api.buy(&id, Some("8")).await;
        assert_eq!(
            (s, body["error"].as_str()),
            (StatusCode::CONFLICT, Some("sold_out"))
        );
        // The order becomes "created" (at once, or through the pipeline).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let (s, o) = api.get_as(&format!("/orders/{order_id}"), "7").await;
            assert_eq!(s, StatusCode::OK, "{strategy}: {o}");
            // Nobody else sees it; an admin does.
            let (s, _) = api.get_as(&format!("/orders/{order_id}"), "8").await;
            assert_eq!(
                s,
                StatusCode::NOT_FOUND,
                "{strategy}: another buyer saw the order"
            );
            let (s, _) = api.get_admin(&format!("/orders/{order_id}")).await;
            assert_eq!(s, StatusCode::OK);
            // The buyer's own list has it, whatever its state.
            let (s, mine) = api
                .get_as(&format!("/vouchers/{id}/orders/mine"), "7")
                .await;
            assert_eq!(s, StatusCode::OK);
            assert_eq!(
                mine["orders"][0]["order_id"],
                order_id.as_str(),
                "{strategy}: {mine}"
            );
            assert_eq!(
                mine["orders"][0]["status"], o["status"],
                "{strategy}: {mine}"
            );
            let (_, theirs) = api
                .get_as(&format!("/vouchers/{id}/orders/mine"), "8")
                .await;
            assert_eq!(theirs["orders"], json!([]), "{strategy}: {theirs}");
            if o["status"] == "created" {
                assert_eq!(o["user_id"], 7);
                break;
            }
            assert_eq!(o["status"], "pending");
            assert!(
                tokio::time::Instant::now() < deadline,
                "order never written"
            );
            // The API alone runs no pipeline; write like a consumer would.
            run_pipeline_briefly(&api).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (s, v) = api.get(&format!("/vouchers/{id}")).await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(
            (v["stock_left"].as_i64(), v["db_stock"].as_i64()),
            (Some(0), Some(0))
        );
    }
}

/// A `lua` purchase costs the service one Redis command: the gate's
/// EVALSHA. The order id comes from the id generator's reserved block and
/// no status hint is written beside the gate (the pending hash serves
/// `GET /orders/{id}`). Counted with `INFO commandstats` around one
/// purchase, after a first one loaded the script and reserved the block;
/// the API runs no pipeline here, so nothing else talks to Redis.
#[tokio::test]
async fn a_lua_purchase_is_one_redis_command() {
    let api = Api::start(Strategy::Lua).await;
    let (_, v) = api.create(voucher(10, -5, 60), Some(ADMIN)).await;
    let id = v["id"].to_string();
    let (s, body) = api.buy(&id, Some("1")).await;
    assert_eq!(s, StatusCode::CREATED, "{body}");
    let mut admin = redis::Client::open(api._redis.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut admin)
        .unwrap();
    let (s, body) = api.buy(&id, Some("2")).await;
    assert_eq!(s, StatusCode::CREATED, "{body}");
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut admin)
        .unwrap();
    let mut calls: std::collections::BTreeMap<String, u64> = info
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let n = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), n))
        })
        .collect();
    // This test's own commands.
    calls.retain(|name, _| !name.starts_with("config") && name != "info");
    // What the gate runs inside the script, once each, beside the one
    // command the service sent.
    let expected: std::collections::BTreeMap<String, u64> = [
        "evalsha",
        "hmget",
        "get",
        "time",
        "sismember",
        "decr",
        "sadd",
        "hset",
        "xadd",
    ]
    .into_iter()
    .map(|c| (c.to_owned(), 1))
    .collect();
    assert_eq!(calls, expected, "{info}");
    // The order is visible as pending to its buyer and an admin, through
    // the pending hash alone.
    let order_id = body["order_id"].as_str().unwrap();
    let (s, o) = api.get_as(&format!("/orders/{order_id}"), "2").await;
    assert_eq!(
        (s, o["status"].as_str()),
        (StatusCode::OK, Some("pending")),
        "{o}"
    );
    let (s, o) = api.get_admin(&format!("/orders/{order_id}")).await;
    assert_eq!((s, o["user_id"].as_i64()), (StatusCode::OK, Some(2)), "{o}");
    let (s, _) = api.get_as(&format!("/orders/{order_id}"), "1").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

/// Runs the order pipeline of this state for a moment.
async fn run_pipeline_briefly(api: &Api) {
    let token = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(seckill::pipeline::run(api.state.clone(), token.clone()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    token.cancel();
    let _ = task.await;
}

#[tokio::test]
async fn the_sale_window_is_enforced() {
    for strategy in [Strategy::Lua, Strategy::Lock, Strategy::Unsafe] {
        let api = Api::start(strategy).await;
        let (_, early) = api.create(voucher(5, 3600, 7200), Some(ADMIN)).await;
        let (s, body) = api.buy(&early["id"].to_string(), Some("1")).await;
        assert_eq!(
            (s, body["error"].as_str()),
            (StatusCode::TOO_EARLY, Some("not_started")),
            "{strategy}"
        );
        // A window that closes right away.
        let now = std::time::SystemTime::now();
        let (s, v) = api
            .create(
                json!({"title": "t", "stock": 5,
                       "begin": humantime::format_rfc3339_millis(now - Duration::from_secs(5)).to_string(),
                       "end": humantime::format_rfc3339_millis(now + Duration::from_millis(200)).to_string()}),
                Some(ADMIN),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED);
        tokio::time::sleep(Duration::from_millis(400)).await;
        let (s, body) = api.buy(&v["id"].to_string(), Some("1")).await;
        assert_eq!(
            (s, body["error"].as_str()),
            (StatusCode::FORBIDDEN, Some("ended")),
            "{strategy}"
        );
    }
}

#[tokio::test]
async fn the_admin_order_list_is_paginated() {
    let api = Api::start(Strategy::Optimistic).await;
    let (_, v) = api.create(voucher(10, -5, 60), Some(ADMIN)).await;
    let id = v["id"].to_string();
    for user in 1..=7 {
        assert_eq!(
            api.buy(&id, Some(&user.to_string())).await.0,
            StatusCode::CREATED
        );
    }
    let (s, _) = api.get(&format!("/vouchers/{id}/orders")).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let mut seen = Vec::new();
    let mut after = String::new();
    let mut pages = 0;
    loop {
        let (s, page) = api
            .get_admin(&format!("/vouchers/{id}/orders?limit=3&after={after}"))
            .await;
        assert_eq!(s, StatusCode::OK, "{page}");
        assert_eq!(page["total"], 7);
        pages += 1;
        for o in page["orders"].as_array().unwrap() {
            seen.push(o["user_id"].as_i64().unwrap());
        }
        match page["next_after"].as_str() {
            Some(next) => after = next.to_owned(),
            None => break,
        }
    }
    seen.sort();
    assert_eq!(seen, (1..=7).collect::<Vec<i64>>());
    assert_eq!(pages, 3, "3 + 3 + 1");
}

#[tokio::test]
async fn health_and_metrics_answer() {
    let api = Api::start(Strategy::Lua).await;
    let (s, h) = api.get("/healthz").await;
    assert_eq!(s, StatusCode::OK, "{h}");
    assert_eq!(h["redis"], "ok");
    assert_eq!(h["status"], "ok");
    let (_, v) = api.create(voucher(1, -5, 60), Some(ADMIN)).await;
    api.buy(&v["id"].to_string(), Some("1")).await;
    api.buy(&v["id"].to_string(), Some("2")).await;
    let resp = app(api.state.clone())
        .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let text = String::from_utf8(
        axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap()
            .to_vec(),
    )
    .unwrap();
    assert!(text.contains("seckill_orders_accepted_total"), "{text}");
    assert!(text.contains("seckill_orders_rejected_total"), "{text}");
    assert!(text.contains("reason=\"sold_out\""), "{text}");
}

/// The service on a TLS Redis as an ACL user: the purchase (the gate) and
/// the pipeline's own connections (the stream consumer) both reach it.
#[tokio::test]
async fn a_lua_sale_runs_on_tls_redis_as_an_acl_user() {
    let files = locksmith_testkit::TlsFiles::generate().unwrap();
    let redis = RedisServer::builder()
        .tls(&files, false)
        .arg("--user")
        .arg("shop")
        .arg("on")
        .arg(">shop-pass")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .start()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}?mode=rwc", dir.path().join("tls.db").display());
    let url = format!(
        "rediss://shop:shop-pass@127.0.0.1:{}",
        redis.tls_port().unwrap()
    );
    let mut c = config(&url, &db, Strategy::Lua, "tls");
    c.redis_security.ca_file = Some(files.ca_cert());
    let api = Api {
        state: AppState::connect(c).await.unwrap(),
        _redis: redis,
        _dir: dir,
    };
    let (_, v) = api.create(voucher(3, -5, 60), Some(ADMIN)).await;
    let id = v["id"].to_string();
    let (s, order) = api.buy(&id, Some("7")).await;
    assert_eq!(s, StatusCode::CREATED, "{order}");
    let order_id = order["order_id"].as_str().unwrap().to_owned();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        run_pipeline_briefly(&api).await;
        let (s, o) = api.get_as(&format!("/orders/{order_id}"), "7").await;
        assert_eq!(s, StatusCode::OK, "{o}");
        if o["status"] == "created" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never written: {o}");
    }
    // The wrong CA: the service does not start.
    let mut c = config(&url, "sqlite::memory:", Strategy::Lua, "tls2");
    c.redis_security.ca_file = Some(files.other_ca_cert());
    let e = AppState::connect(c).await.map(|_| ()).unwrap_err();
    assert!(e.to_string().contains("certificate"), "{e}");
}
