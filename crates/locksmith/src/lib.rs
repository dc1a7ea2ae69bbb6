//! # locksmith
//!
//! Distributed synchronization for Rust services on Redis: reentrant locks
//! with leases, a watchdog and fencing tokens, compatible with Redisson's
//! data layout so Rust and Java services can share one lock.
//!
//! Map of the crate:
//! - [`Client`] / [`ClientBuilder`] (`client.rs`): the connection, identity
//!   and defaults every primitive is made from.
//! - [`Error`] / [`ErrorKind`] (`error.rs`): the one error type.
//! - `validate.rs`: the checks every call runs on its input.
#![warn(missing_docs)]

mod client;
mod error;
mod validate;

pub use client::{Client, ClientBuilder};
pub use error::{Error, ErrorKind, Result};
