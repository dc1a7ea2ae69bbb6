//! [`AppError`]: every way a request can fail, and the status code for each.
//!
//! Internals (Redis, database and lock errors) are logged and answered with a
//! generic message; clients never see driver error text.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// A request that did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// Malformed input (400).
    #[error("{0}")]
    BadRequest(String),
    /// Missing or wrong credentials (401).
    #[error("{0}")]
    Unauthorized(&'static str),
    /// No such voucher or order (404).
    #[error("{0} not found")]
    NotFound(&'static str),
    /// No items left (409).
    #[error("sold out")]
    SoldOut,
    /// The user already bought this voucher (409).
    #[error("already bought")]
    AlreadyBought,
    /// The gate let the buyer through, but the database's stock guard
    /// refused the order: the gate oversold (409).
    #[error("the database refused the order: stock exhausted")]
    Oversold,
    /// The sale has not started (425 Too Early).
    #[error("the sale has not started")]
    NotStarted,
    /// The sale is over (403).
    #[error("the sale has ended")]
    Ended,
    /// A dependency is down or has lost state; nothing was accepted (503).
    #[error("service unavailable: {0}")]
    Unavailable(String),
    /// The purchase may or may not have gone through: the request ran out of
    /// time while it completes in the background, or the reply to taking
    /// the item (the gate's, or a take's) was lost and could not be
    /// checked. 202, with where to look: `GET /vouchers/{id}/orders/mine`.
    #[error("the outcome is not known yet; check GET /vouchers/{0}/orders/mine")]
    OutcomeUnknown(i64),
    /// Waited too long for a lock (503; retrying later may succeed).
    #[error("busy: {0}")]
    Busy(String),
    /// A bug or an unexpected dependency answer (500).
    #[error("internal error: {0}")]
    Internal(String),
}

impl AppError {
    /// The machine-readable code in the JSON body.
    pub fn code(&self) -> &'static str {
        match self {
            AppError::BadRequest(_) => "bad_request",
            AppError::Unauthorized(_) => "unauthorized",
            AppError::NotFound(_) => "not_found",
            AppError::SoldOut => "sold_out",
            AppError::AlreadyBought => "already_bought",
            AppError::Oversold => "oversold",
            AppError::NotStarted => "not_started",
            AppError::Ended => "ended",
            AppError::Unavailable(_) => "unavailable",
            AppError::Busy(_) => "busy",
            AppError::OutcomeUnknown(_) => "outcome_unknown",
            AppError::Internal(_) => "internal",
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            AppError::BadRequest(_) => StatusCode::BAD_REQUEST,
            AppError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            AppError::NotFound(_) => StatusCode::NOT_FOUND,
            AppError::SoldOut | AppError::AlreadyBought | AppError::Oversold => {
                StatusCode::CONFLICT
            }
            AppError::NotStarted => StatusCode::TOO_EARLY,
            AppError::Ended => StatusCode::FORBIDDEN,
            AppError::Unavailable(_) | AppError::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
            AppError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            AppError::OutcomeUnknown(_) => StatusCode::ACCEPTED,
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let message = match &self {
            AppError::Internal(detail) => {
                tracing::error!(%detail, "request failed");
                "internal error".to_owned()
            }
            AppError::Unavailable(detail) => {
                tracing::warn!(%detail, "dependency unavailable");
                self.to_string()
            }
            _ => self.to_string(),
        };
        let body = match &self {
            AppError::OutcomeUnknown(voucher) => Json(json!({
                "error": self.code(),
                "status": "unknown",
                "message": message,
                "check": format!("/vouchers/{voucher}/orders/mine"),
            })),
            _ => Json(json!({ "error": self.code(), "message": message })),
        };
        (self.status(), body).into_response()
    }
}

impl From<sqlx::Error> for AppError {
    fn from(e: sqlx::Error) -> Self {
        match e {
            e if crate::db::is_transient(&e) => AppError::Unavailable(format!("database: {e}")),
            other => AppError::Internal(format!("database: {other}")),
        }
    }
}

impl From<redis::RedisError> for AppError {
    fn from(e: redis::RedisError) -> Self {
        if e.is_timeout()
            || e.is_io_error()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_unrecoverable_error()
        {
            AppError::Unavailable(format!("redis: {e}"))
        } else {
            AppError::Internal(format!("redis: {e}"))
        }
    }
}

impl From<locksmith::Error> for AppError {
    fn from(e: locksmith::Error) -> Self {
        use locksmith::ErrorKind;
        match e.kind() {
            // A lease lost meanwhile (Redis restarted or stalled) leaves the
            // outcome unguaranteed: report the outage, as for a dead Redis.
            ErrorKind::Timeout | ErrorKind::Connection | ErrorKind::NotHeld => {
                AppError::Unavailable(format!("lock: {e}"))
            }
            _ => AppError::Internal(format!("lock: {e}")),
        }
    }
}
