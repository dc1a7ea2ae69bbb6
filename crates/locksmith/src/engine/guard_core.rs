//! The hold core every guard wraps: what is held and how to release it,
//! the grant's fencing token, the local lease view, the hold's metrics,
//! and the release of a guard dropped unreleased, run in the background.
//!
//! A guard is a [`Held`] plus the accessors its kind documents. Releasing
//! through [`Held::release`] records the outcome (span, counters, hold
//! time); dropping a [`Held`] that still holds hands the release to the
//! client's background work, where it is tracked (closing the client waits
//! for it) and its failure logged.

use std::future::Future;

use futures_util::future::Either;
use std::sync::Arc;
use std::time::Duration;

use crate::engine::lease::{LeaseState, LostSignal};
use crate::engine::observe::{Hold as Metrics, Labels};
use crate::engine::task::Tasks;
use crate::error::{Error, Result};

/// Something held on the server, and how to give it back.
pub(crate) trait Holding: Send + Sized + 'static {
    /// Said in a warning when a dropped hold cannot be released (no
    /// runtime): what was dropped, and what becomes of the hold.
    const DROPPED: (&'static str, &'static str);

    /// The held object's name.
    fn name(&self) -> &str;

    /// Where the release of a dropped hold runs.
    fn tasks(&self) -> &Tasks;

    /// Gives the hold back. Cancel safe: what a dropped call leaves
    /// undone is finished in the background.
    fn release(self) -> impl Future<Output = Result<()>> + Send;

    /// Gives the hold up locally when its release cannot run (a guard
    /// dropped outside any runtime, or whose release task was dropped
    /// unrun by a runtime shutting down): nothing renews it any more, so
    /// its lease runs out on the server. Answers false when that could not
    /// be done (the owner's state was busy). Kinds whose watchdog entry
    /// goes with the holding itself need nothing.
    fn abandon(&self) -> bool {
        true
    }

    /// Whether a failed release of a dropped hold is worth a warning
    /// (some outcomes are expected when nobody is left to tell).
    fn worth_a_warning(_error: &Error) -> bool {
        true
    }
}

/// A hold and what a guard knows about it (see the module docs). `L` is
/// the lease view: `Arc<LeaseState>` for leased holds, `()` for holds
/// nothing on the server can take away.
#[derive(Debug)]
pub(crate) struct Held<H: Holding, L = Arc<LeaseState>> {
    /// What is held; `None` once released or forgotten.
    holding: Option<H>,
    /// The grant's fencing token, for kinds that have one.
    token: Option<u64>,
    /// The local lease view, shared with the renewal.
    lease: L,
    /// The hold's metrics (grant to release); `None` once recorded.
    metrics: Option<Metrics>,
}

impl<H: Holding, L> Held<H, L> {
    /// A hold just granted: its metrics start now.
    pub(crate) fn new(holding: H, labels: Labels, token: Option<u64>, lease: L) -> Self {
        let metrics = Metrics::new(labels, holding.name());
        Held {
            holding: Some(holding),
            token,
            lease,
            metrics: Some(metrics),
        }
    }

    /// What is held, until it is released.
    pub(crate) fn holding(&self) -> Option<&H> {
        self.holding.as_ref()
    }

    /// The held object's name (empty once released).
    pub(crate) fn name(&self) -> &str {
        self.holding.as_ref().map_or("", Holding::name)
    }

    /// The grant's fencing token (0 for kinds without one).
    pub(crate) fn token(&self) -> u64 {
        self.token.unwrap_or(0)
    }

    /// Gives the hold back and records the outcome. (A combinator, not an
    /// `async fn`, so the release's future is held once.)
    pub(crate) fn release(mut self) -> impl Future<Output = Result<()>> {
        let release = match self.holding.take() {
            Some(holding) => Either::Left(holding.release()),
            None => Either::Right(std::future::ready(Ok(()))),
        };
        match self.metrics.take() {
            Some(metrics) => Either::Left(metrics.release(self.token, release)),
            None => Either::Right(release),
        }
    }

    /// Keeps the hold without a guard: nothing is released; the metrics
    /// record it as forgotten. Answers what was held.
    pub(crate) fn forget(mut self) -> Option<H> {
        if let Some(metrics) = self.metrics.take() {
            metrics.forgotten();
        }
        self.holding.take()
    }
}

impl<H: Holding> Held<H, Arc<LeaseState>> {
    /// The lease left as known locally; zero once lost.
    pub(crate) fn remaining_lease(&self) -> Duration {
        self.lease.remaining()
    }

    /// True once the lease is known or assumed lost.
    pub(crate) fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// Fires when the lease is lost.
    pub(crate) fn lost(&self) -> LostSignal {
        self.lease.signal()
    }
}

impl<H: Holding, L> Drop for Held<H, L> {
    fn drop(&mut self) {
        let Some(holding) = self.holding.take() else {
            return;
        };
        let tasks = holding.tasks().clone();
        let (what, left) = H::DROPPED;
        if tokio::runtime::Handle::try_current().is_err() {
            // No runtime to release on: give the hold up, so that no
            // watchdog (the client's, on another runtime) keeps it alive.
            abandoned(&holding, what, left, "outside a Tokio runtime");
            return;
        }
        let unrun = Unrun(Some(holding));
        tasks.detach(what, left, async move {
            let Some(holding) = unrun.take() else {
                return;
            };
            let name = holding.name().to_owned();
            if let Err(e) = holding.release().await {
                if H::worth_a_warning(&e) {
                    tracing::warn!(name = %name, error = %e, "release of a dropped guard failed");
                }
            }
        });
    }
}

/// A dropped guard's hold until its release task first runs: a task
/// dropped unrun (by a runtime shutting down) gives the hold up.
struct Unrun<H: Holding>(Option<H>);

impl<H: Holding> Unrun<H> {
    fn take(mut self) -> Option<H> {
        self.0.take()
    }
}

impl<H: Holding> Drop for Unrun<H> {
    fn drop(&mut self) {
        if let Some(holding) = self.0.take() {
            let (what, left) = H::DROPPED;
            abandoned(&holding, what, left, "and its runtime shut down first");
        }
    }
}

/// Gives up `holding` whose release cannot run, and says so.
fn abandoned<H: Holding>(holding: &H, what: &str, left: &str, why: &str) {
    if holding.abandon() {
        tracing::warn!(name = %holding.name(), "{what} {why}; its release cannot run: {left} (no longer renewed)");
    } else {
        tracing::warn!(name = %holding.name(), "{what} {why}; its release cannot run, and it could not be given up while a call of its owner was under way: it may be renewed until that owner's next release");
    }
}

/// The lease accessors every leased guard has (`remaining_lease`,
/// `is_lost`, `lost`), over its `held: Held<_>` field, each with
/// the guard's own wording of what its lease is.
macro_rules! lease_view {
    ($guard:ty, remaining = $remaining:literal, lost = $lost:literal, signal = $signal:literal $(,)?) => {
        impl $guard {
            #[doc = $remaining]
            pub fn remaining_lease(&self) -> std::time::Duration {
                self.held.remaining_lease()
            }

            #[doc = $lost]
            pub fn is_lost(&self) -> bool {
                self.held.is_lost()
            }

            #[doc = $signal]
            pub fn lost(&self) -> $crate::engine::lease::LostSignal {
                self.held.lost()
            }
        }
    };
}
pub(crate) use lease_view;
