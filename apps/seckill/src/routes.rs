//! The HTTP API.
//!
//! | route | who | answers |
//! |---|---|---|
//! | `POST /vouchers` | admin | 201 the voucher; 400 bad input |
//! | `GET /vouchers/{id}` | anyone | 200 stock left; 404 |
//! | `GET /vouchers/{id}/orders?after=&limit=` | admin | 200 one page of written orders, counts, backlog |
//! | `POST /vouchers/{id}/orders` | buyer | 201 order id; 202 outcome unknown; 409 sold out / already bought / oversold; 425 not started; 403 ended; 404; 503 nothing accepted |
//! | `GET /vouchers/{id}/orders/mine` | buyer | 200 the buyer's orders (pending, created, failed) |
//! | `GET /orders/{id}` | its buyer or admin | 200 pending, created or failed; 404 (also for someone else's order) |
//! | `GET /healthz` | anyone | 200 ok; 503 down or degraded, with reasons |
//! | `GET /metrics` | anyone | Prometheus text |
//!
//! Admin calls carry `Authorization: Bearer <admin token>`. A buyer is
//! identified by the `X-User-Id` header (a positive integer), as set by the
//! authenticating gateway in front of the service; a missing header is 401.
//! Order ids are JSON strings of decimal digits (they exceed 2^53).

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use tower_http::timeout::TimeoutLayer;

use crate::db::Voucher;
use crate::error::AppError;
use crate::state::AppState;
use crate::{keys, strategy};

/// The header that names the buying user.
pub const USER_HEADER: &str = "x-user-id";

/// Upper bound on a voucher's stock, to keep seeding and counters sane.
pub const MAX_STOCK: i64 = 10_000_000;

/// Default and largest page of `GET /vouchers/{id}/orders`.
pub const PAGE_DEFAULT: i64 = 100;
/// See [`PAGE_DEFAULT`].
pub const PAGE_MAX: i64 = 1000;

/// The service's router.
///
/// Purchases carry their own deadline (the request timeout, then 202
/// `outcome_unknown` while the purchase completes); every other route is
/// answered 503 after the request timeout.
pub fn app(state: AppState) -> Router {
    let timeout = state.config().request_timeout;
    let bounded = Router::new()
        .route("/vouchers", post(create_voucher))
        .route("/vouchers/{id}", get(show_voucher))
        .route("/vouchers/{id}/orders", get(voucher_orders))
        .route("/vouchers/{id}/orders/mine", get(my_orders))
        .route("/orders/{id}", get(show_order))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            timeout,
        ));
    Router::new()
        .route("/vouchers/{id}/orders", post(buy))
        .route("/livez", get(livez))
        .merge(bounded)
        .with_state(state)
}

/// Body of `POST /vouchers`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewVoucher {
    /// Shown to buyers; 1 to 200 characters.
    title: String,
    /// Items on sale.
    stock: i64,
    /// Sale start, RFC 3339 (`2025-01-01T10:00:00Z`).
    begin: String,
    /// Sale end, RFC 3339; after `begin`.
    end: String,
}

fn parse_id(raw: &str, what: &'static str) -> Result<i64, AppError> {
    match raw.parse::<i64>() {
        Ok(id) if id > 0 => Ok(id),
        _ => Err(AppError::BadRequest(format!(
            "{what} id must be a positive integer, got {raw:?}"
        ))),
    }
}

fn parse_time(raw: &str, field: &str) -> Result<i64, AppError> {
    let t = humantime::parse_rfc3339_weak(raw).map_err(|e| {
        AppError::BadRequest(format!(
            "{field} must be an RFC 3339 time, got {raw:?}: {e}"
        ))
    })?;
    let ms = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| AppError::BadRequest(format!("{field} is before 1970")))?
        .as_millis();
    Ok(ms as i64)
}

fn format_time(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

fn require_admin(state: &AppState, headers: &HeaderMap) -> Result<(), AppError> {
    let token = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or(AppError::Unauthorized("missing admin bearer token"))?;
    if token != state.config().admin_token {
        return Err(AppError::Unauthorized("wrong admin token"));
    }
    Ok(())
}

fn user_id(headers: &HeaderMap) -> Result<i64, AppError> {
    let raw = headers
        .get(USER_HEADER)
        .ok_or(AppError::Unauthorized("missing X-User-Id header"))?
        .to_str()
        .map_err(|_| AppError::BadRequest("X-User-Id must be a positive integer".into()))?;
    match raw.trim().parse::<i64>() {
        Ok(id) if id > 0 => Ok(id),
        _ => Err(AppError::BadRequest(format!(
            "X-User-Id must be a positive integer, got {raw:?}"
        ))),
    }
}

fn voucher_json(v: &Voucher, stock_left: Option<i64>) -> Value {
    json!({
        "id": v.id,
        "title": v.title,
        "stock_total": v.stock_total,
        "stock_left": stock_left,
        "db_stock": v.stock,
        "segments": v.segments,
        "begin": format_time(v.begin_ms),
        "end": format_time(v.end_ms),
    })
}

async fn create_voucher(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Json<NewVoucher>, JsonRejection>,
) -> Result<impl IntoResponse, AppError> {
    require_admin(&state, &headers)?;
    let Json(body) = body.map_err(|e| AppError::BadRequest(e.body_text()))?;
    let title = body.title.trim();
    if title.is_empty() || title.chars().count() > 200 {
        return Err(AppError::BadRequest(
            "title must have 1 to 200 characters".into(),
        ));
    }
    if !(1..=MAX_STOCK).contains(&body.stock) {
        return Err(AppError::BadRequest(format!(
            "stock must be between 1 and {MAX_STOCK}, got {}",
            body.stock
        )));
    }
    let begin = parse_time(&body.begin, "begin")?;
    let end = parse_time(&body.end, "end")?;
    if end <= begin {
        return Err(AppError::BadRequest("end must be after begin".into()));
    }
    let segments = state.config().segments.min(body.stock);
    let seeding = state.clone();
    let voucher = state
        .db()
        .create_voucher(title, body.stock, begin, end, segments, |v| async move {
            strategy::seed(&seeding, &v).await
        })
        .await?;
    state.remember(voucher.clone());
    tracing::info!(
        voucher = voucher.id,
        stock = voucher.stock_total,
        "voucher created"
    );
    Ok((
        StatusCode::CREATED,
        Json(voucher_json(&voucher, Some(voucher.stock_total))),
    ))
}

async fn show_voucher(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, AppError> {
    let id = parse_id(&id, "voucher")?;
    // The database stock changes with every order: read it fresh.
    let voucher = state
        .db()
        .voucher(id)
        .await?
        .ok_or(AppError::NotFound("voucher"))?;
    let left = strategy::stock_left(&state, &voucher).await?;
    Ok(Json(voucher_json(&voucher, left)))
}

/// Query of `GET /vouchers/{id}/orders`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Page {
    /// Orders with ids above this one (the previous page's `next_after`).
    after: Option<String>,
    /// Page size, 1 to [`PAGE_MAX`].
    limit: Option<i64>,
}

async fn voucher_orders(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    page: Result<Query<Page>, QueryRejection>,
) -> Result<Json<Value>, AppError> {
    require_admin(&state, &headers)?;
    let id = parse_id(&id, "voucher")?;
    let Query(page) = page.map_err(|e| AppError::BadRequest(e.body_text()))?;
    let after = match page.after.as_deref() {
        None | Some("") => 0,
        Some(raw) => raw
            .parse::<i64>()
            .map_err(|_| AppError::BadRequest(format!("after must be an order id, got {raw:?}")))?,
    };
    let limit = page.limit.unwrap_or(PAGE_DEFAULT);
    if !(1..=PAGE_MAX).contains(&limit) {
        return Err(AppError::BadRequest(format!(
            "limit must be between 1 and {PAGE_MAX}, got {limit}"
        )));
    }
    let voucher = state
        .db()
        .voucher(id)
        .await?
        .ok_or(AppError::NotFound("voucher"))?;
    // The stream holds exactly the accepted orders not yet written; -1
    // when Redis does not answer. Read before the rows (see below).
    let mut conn = state.redis();
    let lengths: redis::RedisResult<(i64, i64)> = redis::pipe()
        .cmd("XLEN")
        .arg(keys::orders_stream(id))
        .cmd("XLEN")
        .arg(keys::dead_letter_stream(id))
        .query_async(&mut conn)
        .await;
    let pending: redis::RedisResult<Vec<redis::Value>> = redis::cmd("XPENDING")
        .arg(keys::orders_stream(id))
        .arg(keys::ORDER_GROUP)
        .query_async(&mut conn)
        .await;
    let pending = match pending {
        Ok(summary) => summary
            .first()
            .and_then(|c| redis::from_redis_value_ref(c).ok())
            .unwrap_or(0),
        // No consumer has created the group yet: nothing is delivered.
        Err(e) if e.code() == Some("NOGROUP") => 0,
        Err(_) => -1,
    };
    let (unwritten, dead) = lengths.unwrap_or((-1, -1));
    // The rows are read after the stream's length: a stream seen empty
    // means every order was written before the rows were read, so a reader
    // that sees `stream_unwritten: 0` and an order missing knows it is
    // lost (read the other way round, an order written in between was in
    // neither).
    let orders = state.db().orders_page(id, after, limit).await?;
    let total = state.db().order_count(id).await?;
    let failed = state.db().failed_count(id).await?;
    let list: Vec<Value> = orders
        .iter()
        .map(|o| json!({ "order_id": o.id.to_string(), "user_id": o.user_id }))
        .collect();
    let next_after = (orders.len() as i64 == limit)
        .then(|| orders.last().map(|o| o.id.to_string()))
        .flatten();
    Ok(Json(json!({
        "voucher": voucher_json(&voucher, None),
        "orders": list,
        "next_after": next_after,
        "total": total,
        "failed": failed,
        "stream_unwritten": unwritten,
        "stream_pending": pending,
        "stream_lag": if unwritten < 0 || pending < 0 { -1 } else { unwritten - pending },
        "dead_letters": dead,
        "drained": voucher.drained_ms.is_some(),
    })))
}

/// `GET /vouchers/{id}/orders/mine`: the buyer's own orders for a voucher,
/// written, failed, or accepted and waiting in the stream. An empty list
/// means the service holds no purchase of this buyer: buying again is safe.
async fn my_orders(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Value>, AppError> {
    let user = user_id(&headers)?;
    let id = parse_id(&id, "voucher")?;
    let voucher = state.voucher(id).await?;
    let mut list = Vec::new();
    let written = state.db().orders_of_user(id, user).await?;
    for o in &written {
        list.push(json!({ "order_id": o.id.to_string(), "status": "created" }));
    }
    let mut conn = state.redis();
    let pending: Option<i64> = redis::cmd("HGET")
        .arg(keys::pending(id))
        .arg(user)
        .query_async(&mut conn)
        .await?;
    if let Some(order) = pending.filter(|p| !written.iter().any(|o| o.id == *p)) {
        list.push(json!({ "order_id": order.to_string(), "status": "pending" }));
    }
    for (o, reason) in state.db().failed_of_user(id, user).await? {
        list.push(json!({ "order_id": o.id.to_string(), "status": "failed", "reason": reason }));
    }
    Ok(Json(json!({
        "voucher_id": voucher.id,
        "user_id": user,
        "orders": list,
    })))
}

/// `POST /vouchers/{id}/orders`.
///
/// The purchase runs in a task of its own, so nothing it started is cut
/// off halfway when the client disconnects or the deadline passes: a stock
/// decrement is always followed by its order write (or by giving the item
/// back). The answer waits at most the request timeout; a purchase still
/// running then is answered 202 `outcome_unknown`, pointing at `GET
/// /vouchers/{id}/orders/mine`, and completes in the background.
async fn buy(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, AppError> {
    let strategy_name = state.config().strategy.as_str();
    let deadline = state.config().request_timeout;
    let result = async {
        let user = user_id(&headers)?;
        let id = parse_id(&id, "voucher")?;
        let voucher = state.voucher(id).await?;
        let task_state = state.clone();
        let purchase = state
            .purchases()
            .spawn(async move { strategy::purchase(&task_state, &voucher, user).await });
        match tokio::time::timeout(deadline, purchase).await {
            Ok(Ok(result)) => result,
            Ok(Err(panicked)) => Err(AppError::Internal(format!("purchase task: {panicked}"))),
            Err(_) => {
                metrics::counter!("seckill_purchase_deadline_total").increment(1);
                Err(AppError::OutcomeUnknown(id))
            }
        }
    }
    .await;
    match result {
        Ok(accepted) => {
            metrics::counter!("seckill_orders_accepted_total", "strategy" => strategy_name)
                .increment(1);
            let status = if accepted.pending {
                "pending"
            } else {
                "created"
            };
            Ok((
                StatusCode::CREATED,
                Json(json!({ "order_id": accepted.order_id.to_string(), "status": status })),
            ))
        }
        Err(e) => {
            metrics::counter!(
                "seckill_orders_rejected_total",
                "strategy" => strategy_name,
                "reason" => e.code()
            )
            .increment(1);
            Err(e)
        }
    }
}

/// Whether the request carries the admin token (a wrong one is an error).
fn is_admin(state: &AppState, headers: &HeaderMap) -> Result<bool, AppError> {
    if headers.get(axum::http::header::AUTHORIZATION).is_none() {
        return Ok(false);
    }
    require_admin(state, headers)?;
    Ok(true)
}

/// `GET /orders/{id}`: for the order's buyer (`X-User-Id`) or an admin;
/// anyone else gets 404, as for an id that does not exist, so walking the
/// id space reveals nothing.
async fn show_order(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Value>, AppError> {
    let id = parse_id(&id, "order")?;
    let admin = is_admin(&state, &headers)?;
    let caller = if admin {
        None
    } else {
        Some(user_id(&headers)?)
    };
    let visible = |user: i64| admin || caller == Some(user);
    if let Some(order) = state.db().order(id).await? {
        if visible(order.user_id) {
            return Ok(Json(json!({
                "order_id": order.id.to_string(),
                "status": "created",
                "voucher_id": order.voucher_id,
                "user_id": order.user_id,
            })));
        }
        return Err(AppError::NotFound("order"));
    }
    if let Some((order, reason)) = state.db().failed_order(id).await? {
        if visible(order.user_id) {
            return Ok(Json(json!({
                "order_id": order.id.to_string(),
                "status": "failed",
                "voucher_id": order.voucher_id,
                "user_id": order.user_id,
                "reason": reason,
            })));
        }
        return Err(AppError::NotFound("order"));
    }
    match pending_order(&state, id, caller).await? {
        Some((voucher_id, user)) if visible(user) => Ok(Json(json!({
            "order_id": id.to_string(),
            "status": "pending",
            "voucher_id": voucher_id,
            "user_id": user,
        }))),
        _ => Err(AppError::NotFound("order")),
    }
}

/// How far an order id's second may lie outside its sale's window and
/// still be looked for there: the instance that took the id and the Redis
/// that checked the window read different clocks.
const PENDING_CLOCK_SLACK_MS: i64 = 5 * 60 * 1000;

/// An accepted `lua` order not yet written: (voucher, buyer), found in the
/// pending hash of a sale not yet drained whose window holds the id's
/// second. A buyer's lookup reads their own entry of each such sale; an
/// admin's (no `caller`) reads the hashes whole.
async fn pending_order(
    state: &AppState,
    id: i64,
    caller: Option<i64>,
) -> Result<Option<(i64, i64)>, AppError> {
    let (secs, _) = locksmith::IdGenerator::split(id);
    let taken_ms = (secs + locksmith::IdGenerator::DEFAULT_EPOCH) * 1000;
    let mut conn = state.redis();
    for voucher in state.db().undrained_vouchers().await? {
        if taken_ms < voucher.begin_ms - PENDING_CLOCK_SLACK_MS
            || taken_ms > voucher.end_ms + PENDING_CLOCK_SLACK_MS
        {
            continue;
        }
        let key = keys::pending(voucher.id);
        match caller {
            Some(user) => {
                let recorded: Option<i64> = redis::cmd("HGET")
                    .arg(&key)
                    .arg(user)
                    .query_async(&mut conn)
                    .await?;
                if recorded == Some(id) {
                    return Ok(Some((voucher.id, user)));
                }
            }
            None => {
                let entries: Vec<(i64, i64)> = redis::cmd("HGETALL")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await?;
                if let Some((user, _)) = entries.into_iter().find(|&(_, order)| order == id) {
                    return Ok(Some((voucher.id, user)));
                }
            }
        }
    }
    Ok(None)
}

/// `GET /livez`: 200 `{"status":"ok"}` while the process serves HTTP; it
/// asks no dependency (a liveness probe: restart the instance when this
/// fails, not when Redis does). It passes the same router as a purchase,
/// which makes it the demo's measure of what the HTTP stack alone can do.
async fn livez() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// `GET /healthz`: 200 when Redis and the database answer and nothing
/// needs an operator; otherwise 503 with `status` `down` (a dependency does
/// not answer) or `degraded` and the reasons: a live voucher whose Redis
/// state is gone, dead-lettered orders waiting for a replay, or an order
/// pipeline lagging past `--max-pipeline-lag`.
async fn healthz(State(state): State<AppState>) -> impl IntoResponse {
    let redis = state
        .locks()
        .ping()
        .await
        .map(|_| ())
        .map_err(|e| e.to_string());
    let db = state.db().ping().await.map_err(|e| e.to_string());
    let show = |r: &Result<_, String>| match r {
        Ok(_) => "ok".to_owned(),
        Err(e) => e.clone(),
    };
    let (status, problems) = if redis.is_ok() && db.is_ok() {
        match crate::repair::problems(&state).await {
            Ok(problems) if problems.is_empty() => ("ok", problems),
            Ok(problems) => ("degraded", problems),
            Err(e) => ("degraded", vec![format!("cannot check the sales: {e}")]),
        }
    } else {
        ("down", Vec::new())
    };
    let code = if status == "ok" {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        code,
        Json(json!({
            "status": status,
            "problems": problems,
            "redis": show(&redis),
            "database": show(&db),
            "strategy": state.config().strategy.as_str(),
        })),
    )
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        state.render_metrics(),
    )
}
