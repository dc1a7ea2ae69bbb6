//! `#[locked]`'s tests, in one test binary: against a real Redis, and
//! misuse that must not compile.

mod locked;
mod ui;
