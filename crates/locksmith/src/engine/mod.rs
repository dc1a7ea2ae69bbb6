//! The machinery every primitive shares, naming none of them: how calls
//! reach Redis (connection leaf types, topology, batching), how waiters
//! are woken (the notify hub and its subscriber), how holds are kept
//! (lease view, lost signal, renewal), and the background tasks, metrics,
//! key naming, input checks and script composition they all use.
//!
//! A primitive supplies its scripts, how to read their replies, its undo
//! and its wake policy; a fix to resending, undoing, waiting or holding is
//! made here once.

pub(crate) mod acquire;
pub(crate) mod batch;
pub(crate) mod conn;
pub(crate) mod counted;
pub(crate) mod guard_core;
pub(crate) mod keys;
pub(crate) mod lease;
pub(crate) mod lua;
#[cfg(feature = "cluster")]
pub(crate) mod nodes;
pub(crate) mod notify;
pub(crate) mod observe;
pub(crate) mod renewal;
pub(crate) mod security;
pub(crate) mod slot;
pub(crate) mod subscriber;
pub(crate) mod task;
pub(crate) mod topology;
pub(crate) mod undo;
pub(crate) mod validate;
pub(crate) mod wait;
