//! The HTTP API.
//!
//! | route | who | answers |
//! |---|---|---|
//! | `POST /vouchers` | admin | 201 the voucher; 400 bad input |
//! | `GET /vouchers/{id}` | anyone | 200 stock left; 404 |
//! | `GET /vouchers/{id}/orders` | admin | 200 written orders and counts |
//! | `POST /vouchers/{id}/orders` | buyer | 201 order id; 409 sold out / already bought / oversold; 425 not started; 403 ended; 404; 503 |
//! | `GET /orders/{id}` | anyone | 200 pending, created or failed; 404 |
//! | `GET /healthz` | anyone | 200 or 503 |
//! | `GET /metrics` | anyone | Prometheus text |
//!
//! Admin calls carry `Authorization: Bearer <admin token>`. A buyer is
//! identified by the `X-User-Id` header (a positive integer), as set by the
//! authenticating gateway in front of the service; a missing header is 401.
//! Order ids are JSON strings of decimal digits (they exceed 2^53).

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
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

/// The service's router.
pub fn app(state: AppState) -> Router {
    let timeout = state.config().request_timeout;
    Router::new()
        .route("/vouchers", post(create_voucher))
        .route("/vouchers/{id}", get(show_voucher))
        .route("/vouchers/{id}/orders", post(buy).get(voucher_orders))
        .route("/orders/{id}", get(show_order))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            timeout,
        ))
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

async fn voucher_orders(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Json<Value>, AppError> {
    require_admin(&state, &headers)?;
    let id = parse_id(&id, "voucher")?;
    let voucher = state
        .db()
        .voucher(id)
        .await?
        .ok_or(AppError::NotFound("voucher"))?;
    let orders = state.db().orders_of(id).await?;
    let failed = state.db().failed_count(id).await?;
    let mut conn = state.redis();
    // Entries not yet acknowledged, or -1 when Redis does not answer.
    let pending: i64 = redis::cmd("XPENDING")
        .arg(keys::orders_stream(id))
        .arg(keys::ORDER_GROUP)
        .query_async::<Vec<redis::Value>>(&mut conn)
        .await
        .ok()
        .and_then(|v| v.first().and_then(|c| redis::from_redis_value_ref(c).ok()))
        .unwrap_or(-1);
    let undelivered: i64 = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(keys::orders_stream(id))
        .query_async::<Vec<std::collections::HashMap<String, redis::Value>>>(&mut conn)
        .await
        .ok()
        .and_then(|groups| {
            groups
                .into_iter()
                .find(|g| {
                    g.get("name")
                        .and_then(|n| redis::from_redis_value_ref::<String>(n).ok())
                        .as_deref()
                        == Some(keys::ORDER_GROUP)
                })
                .and_then(|g| {
                    g.get("lag")
                        .and_then(|l| redis::from_redis_value_ref(l).ok())
                })
        })
        .unwrap_or(0);
    let list: Vec<Value> = orders
        .iter()
        .map(|o| json!({ "order_id": o.id.to_string(), "user_id": o.user_id }))
        .collect();
    Ok(Json(json!({
        "voucher": voucher_json(&voucher, None),
        "orders": list,
        "failed": failed,
        "stream_pending": pending,
        "stream_lag": undelivered,
    })))
}

async fn buy(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, AppError> {
    let strategy_name = state.config().strategy.as_str();
    let result = async {
        let user = user_id(&headers)?;
        let id = parse_id(&id, "voucher")?;
        let voucher = state.voucher(id).await?;
        strategy::purchase(&state, &voucher, user).await
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

async fn show_order(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, AppError> {
    let id = parse_id(&id, "order")?;
    if let Some(order) = state.db().order(id).await? {
        return Ok(Json(json!({
            "order_id": order.id.to_string(),
            "status": "created",
            "voucher_id": order.voucher_id,
            "user_id": order.user_id,
        })));
    }
    if let Some((order, reason)) = state.db().failed_order(id).await? {
        return Ok(Json(json!({
            "order_id": order.id.to_string(),
            "status": "failed",
            "voucher_id": order.voucher_id,
            "user_id": order.user_id,
            "reason": reason,
        })));
    }
    let mut conn = state.redis();
    let pending: Option<i64> = redis::cmd("GET")
        .arg(keys::order_status(id))
        .query_async(&mut conn)
        .await?;
    match pending {
        Some(voucher_id) => Ok(Json(json!({
            "order_id": id.to_string(),
            "status": "pending",
            "voucher_id": voucher_id,
        }))),
        None => Err(AppError::NotFound("order")),
    }
}

async fn healthz(State(state): State<AppState>) -> impl IntoResponse {
    let redis = state
        .locks()
        .ping()
        .await
        .map(|_| ())
        .map_err(|e| e.to_string());
    let db = state.db().ping().await.map_err(|e| e.to_string());
    let status = if redis.is_ok() && db.is_ok() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let show = |r: &Result<_, String>| match r {
        Ok(_) => "ok".to_owned(),
        Err(e) => e.clone(),
    };
    (
        status,
        Json(json!({
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
