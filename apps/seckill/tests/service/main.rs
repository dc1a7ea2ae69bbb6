//! The flash-sale service's tests, in one test binary (linked once; its
//! tests run concurrently), each against servers of its own.

#[path = "../common/mod.rs"]
mod common;

mod api;
mod demo;
mod lost_orders;
mod outage;
mod pipeline;
mod postgres;
mod strategies;
