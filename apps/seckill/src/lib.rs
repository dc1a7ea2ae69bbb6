//! # seckill: the flash-sale service
//!
//! The oversell experiment, reproduced and fixed: five purchase strategies
//! behind one HTTP API, an order pipeline on a Redis stream, and a demo that
//! runs them side by side.
//!
//! Map of the crate:
//! - [`config`]: [`Config`] and [`Strategy`].
//! - [`state`]: [`AppState`], the shared handles of one instance.
//! - [`routes`]: [`app`], the HTTP API; [`error`]: status codes.
//! - [`strategy`]: the five purchase strategies.
//! - [`pipeline`]: the stream consumer that writes orders to the database.
//! - [`db`]: vouchers and orders on SQLite or PostgreSQL; [`keys`]: Redis key
//!   names. Order ids come from locksmith's `IdGenerator` (see
//!   [`state::AppState::order_ids`]).
//! - [`repair`]: what `/healthz` checks, and the operator's repair commands.
//! - [`server`]: running an instance with graceful shutdown.
//! - `demo` (with the `demo` feature, which `make demo` turns on):
//!   `seckill demo`, the experiment with numbers. The service build leaves
//!   it out, and with it the test kit, plotting, progress bars and HTTP
//!   client it needs.

pub mod config;
pub mod db;
#[cfg(feature = "demo")]
pub mod demo;
pub mod error;
pub mod keys;
pub mod pipeline;
pub mod repair;
pub mod routes;
pub mod server;
pub mod state;
pub mod strategy;

pub use config::{Config, PipelineConfig, Strategy};
pub use error::AppError;
pub use routes::app;
pub use server::Server;
pub use state::AppState;
