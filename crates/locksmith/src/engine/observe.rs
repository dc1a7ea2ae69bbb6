//! What every primitive reports, through the `metrics` facade (the
//! application picks the exporter) and `tracing`: one place, so the names
//! and labels are the same for every kind.
//!
//! Metrics (Prometheus conventions; `kind` is the label each primitive
//! gives itself, listed in docs/operations.md; names become a `name`
//! label only with [`ClientBuilder::metric_names`](crate::ClientBuilder::metric_names)):
//! - `locksmith_acquires_total{kind, outcome}`: `granted`, `timeout` (not
//!   had within the wait), `error`, `cancelled` (the future was dropped);
//! - `locksmith_acquire_wait_seconds{kind}`: time to a grant;
//! - `locksmith_waiters{kind}` and `locksmith_holders{kind}`: gauges;
//! - `locksmith_releases_total{kind, outcome}`: `ok`, `not_held` (the
//!   lease had been lost), `error`, `dropped` (released in the background),
//!   `forgotten` (holds kept on purpose, never released);
//! - `locksmith_hold_seconds{kind}`: time from grant to release;
//! - `locksmith_leases_lost_total{kind}`: releases that found the hold
//!   gone (one per guard: nested guards of one lost hold count each);
//! - `locksmith_renewal_calls_total`, `locksmith_renewal_failures_total`,
//!   `locksmith_notifications_total`, `locksmith_script_reloads_total`,
//!   `locksmith_batch_size`, `locksmith_grants_not_replicated_total`.
//!
//! Tracing: a `locksmith.acquire` span (debug level) per acquire with
//! `kind`, `name`, `outcome`, `wait_ms` and `token`; a `locksmith.release`
//! span per explicit release with `kind`, `name`, `token`, `outcome` and
//! `held_ms` (a dropped guard's background release logs an event);
//! warnings when a lease is lost and when a fixed-lease hold passes 80% of
//! its lease.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures_util::FutureExt;
use tokio::time::Instant;
use tracing::Instrument;

use crate::error::Result;

/// The metric labels of one object, with its metric handles: its kind,
/// and its name when the client was built with `metric_names`.
///
/// A handle is registered with the recorder the first time it is used and
/// then kept, as the `metrics` crate advises: recording is then an atomic
/// update, not a key built, hashed and looked up (with its label vector
/// allocated) on every acquire and release. A client shares one set per
/// kind unless names are labels (see `Client::labels`), so install the
/// recorder before the client's first acquire; handles registered before
/// that stay with the recorder that was current then.
#[derive(Clone)]
pub(crate) struct Labels {
    kind: &'static str,
    meters: Arc<Meters>,
}

impl std::fmt::Debug for Labels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Labels")
            .field("kind", &self.kind)
            .field("name", &self.meters.name)
            .finish_non_exhaustive()
    }
}

/// Outcomes of `locksmith_acquires_total`, in the order of
/// [`Meters::acquires`].
const ACQUIRE_OUTCOMES: [&str; 4] = ["granted", "timeout", "error", "cancelled"];

/// Outcomes of `locksmith_releases_total`, in the order of
/// [`Meters::releases`].
const RELEASE_OUTCOMES: [&str; 6] = [
    "ok",
    "not_held",
    "unconfirmed",
    "error",
    "dropped",
    "forgotten",
];

/// The handles of one label set, each registered on first use.
#[derive(Default)]
struct Meters {
    kind: &'static str,
    name: Option<String>,
    waiters: OnceLock<metrics::Gauge>,
    holders: OnceLock<metrics::Gauge>,
    wait: OnceLock<metrics::Histogram>,
    held: OnceLock<metrics::Histogram>,
    lost: OnceLock<metrics::Counter>,
    acquires: [OnceLock<metrics::Counter>; ACQUIRE_OUTCOMES.len()],
    releases: [OnceLock<metrics::Counter>; RELEASE_OUTCOMES.len()],
}

impl Labels {
    /// Labels for `kind` and `name`, the name only `with_name` (the
    /// client's `metric_names` option), with handles of their own.
    pub(crate) fn of(kind: &'static str, name: &str, with_name: bool) -> Labels {
        Labels {
            kind,
            meters: Arc::new(Meters {
                kind,
                name: with_name.then(|| name.to_owned()),
                ..Meters::default()
            }),
        }
    }

    /// The kind these labels name.
    pub(crate) fn kind(&self) -> &'static str {
        self.kind
    }
}

impl Meters {
    fn labels(&self, outcome: Option<&'static str>) -> Vec<metrics::Label> {
        let mut labels = vec![metrics::Label::new("kind", self.kind)];
        if let Some(name) = &self.name {
            labels.push(metrics::Label::new("name", name.clone()));
        }
        if let Some(outcome) = outcome {
            labels.push(metrics::Label::new("outcome", outcome));
        }
        labels
    }

    fn waiters(&self) -> &metrics::Gauge {
        self.waiters
            .get_or_init(|| metrics::gauge!("locksmith_waiters", self.labels(None)))
    }

    fn holders(&self) -> &metrics::Gauge {
        self.holders
            .get_or_init(|| metrics::gauge!("locksmith_holders", self.labels(None)))
    }

    fn wait(&self) -> &metrics::Histogram {
        self.wait.get_or_init(|| {
            metrics::histogram!("locksmith_acquire_wait_seconds", self.labels(None))
        })
    }

    fn held(&self) -> &metrics::Histogram {
        self.held
            .get_or_init(|| metrics::histogram!("locksmith_hold_seconds", self.labels(None)))
    }

    fn lost(&self) -> &metrics::Counter {
        self.lost
            .get_or_init(|| metrics::counter!("locksmith_leases_lost_total", self.labels(None)))
    }

    fn acquired(&self, outcome: &'static str) -> metrics::Counter {
        Self::outcome(&self.acquires, &ACQUIRE_OUTCOMES, outcome, || {
            metrics::counter!("locksmith_acquires_total", self.labels(Some(outcome)))
        })
    }

    fn released(&self, outcome: &'static str) -> metrics::Counter {
        Self::outcome(&self.releases, &RELEASE_OUTCOMES, outcome, || {
            metrics::counter!("locksmith_releases_total", self.labels(Some(outcome)))
        })
    }

    /// The counter of `outcome` among `outcomes`, registered on first use
    /// (an outcome not in the list is registered each time).
    fn outcome(
        slots: &[OnceLock<metrics::Counter>],
        outcomes: &[&str],
        outcome: &'static str,
        register: impl FnOnce() -> metrics::Counter,
    ) -> metrics::Counter {
        match outcomes.iter().position(|o| *o == outcome) {
            Some(i) => slots[i].get_or_init(register).clone(),
            None => register(),
        }
    }
}

/// The outcome label of a failed release.
fn release_outcome(e: &crate::Error) -> &'static str {
    match e.kind() {
        crate::ErrorKind::NotHeld => "not_held",
        crate::ErrorKind::Unconfirmed => "unconfirmed",
        _ => "error",
    }
}

/// What an acquire's result says, for the records.
pub(crate) trait Grant {
    /// The grant's fencing token, if it has one.
    fn token(&self) -> Option<u64> {
        None
    }
}

/// Runs an acquire `attempt` with its span, its waiter gauge and its
/// counters. A dropped future counts as `cancelled`.
///
/// A combinator rather than an `async fn`: an `async fn` keeps its
/// argument's slot beside the future it awaits, so each such layer would
/// hold the whole acquire twice, and every caller's future holds this one.
pub(crate) fn acquire<T: Grant, F: Future<Output = Result<Option<T>>>>(
    labels: Labels,
    name: &str,
    attempt: F,
) -> impl Future<Output = Result<Option<T>>> {
    let span = tracing::debug_span!(
        "locksmith.acquire",
        kind = labels.kind,
        name,
        outcome = tracing::field::Empty,
        wait_ms = tracing::field::Empty,
        token = tracing::field::Empty,
    );
    labels.meters.waiters().increment(1.0);
    let mut waiting = Waiting {
        labels,
        outcome: "cancelled",
        started: Instant::now(),
        span: span.clone(),
    };
    attempt.instrument(span).map(move |result| {
        waiting.finished(&result);
        result
    })
}

/// The waiter gauge and outcome counter of one acquire, settled on drop
/// (so a cancelled acquire is counted too).
struct Waiting {
    labels: Labels,
    outcome: &'static str,
    started: Instant,
    span: tracing::Span,
}

impl Waiting {
    /// Records how the acquire ended (the counters follow on drop).
    fn finished<T: Grant>(&mut self, result: &Result<Option<T>>) {
        let waited = self.started.elapsed();
        self.outcome = match result {
            Ok(Some(grant)) => {
                self.labels.meters.wait().record(waited.as_secs_f64());
                if let Some(token) = grant.token() {
                    self.span.record("token", token);
                }
                "granted"
            }
            Ok(None) => "timeout",
            Err(_) => "error",
        };
        self.span.record("outcome", self.outcome);
        self.span.record("wait_ms", waited.as_secs_f64() * 1e3);
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let meters = &self.labels.meters;
        meters.waiters().decrement(1.0);
        meters.acquired(self.outcome).increment(1);
    }
}

/// One hold, from grant to release: the holder gauge, the hold time and
/// the release counter. A hold dropped without [`Hold::released`] counts
/// as `dropped` (its guard releases in the background).
#[derive(Debug)]
pub(crate) struct Hold {
    labels: Labels,
    name: String,
    granted: Instant,
    done: bool,
}

impl Hold {
    pub(crate) fn new(labels: Labels, name: &str) -> Hold {
        labels.meters.holders().increment(1.0);
        Hold {
            labels,
            name: name.to_owned(),
            granted: Instant::now(),
            done: false,
        }
    }

    /// Runs `release` in a `locksmith.release` span (kind, name, token,
    /// outcome, hold time) and records its result. A combinator, for the
    /// reason [`acquire`] is one.
    pub(crate) fn release<T>(
        self,
        token: Option<u64>,
        release: impl Future<Output = Result<T>>,
    ) -> impl Future<Output = Result<T>> {
        let span = tracing::debug_span!(
            "locksmith.release",
            kind = self.labels.kind,
            name = %self.name,
            token = tracing::field::Empty,
            outcome = tracing::field::Empty,
            held_ms = self.granted.elapsed().as_secs_f64() * 1e3,
        );
        if let Some(token) = token {
            span.record("token", token);
        }
        let recording = span.clone();
        release.instrument(span).map(move |result| {
            recording.record(
                "outcome",
                match &result {
                    Ok(_) => "ok",
                    Err(e) => release_outcome(e),
                },
            );
            self.released(&result);
            result
        })
    }

    /// Records a hold kept on purpose: no release.
    pub(crate) fn forgotten(mut self) {
        self.finish("forgotten");
    }

    /// Records the release's result.
    pub(crate) fn released<T>(mut self, result: &Result<T>) {
        let outcome = match result {
            Ok(_) => "ok",
            Err(e) => release_outcome(e),
        };
        self.finish(outcome);
    }

    fn finish(&mut self, outcome: &'static str) {
        if self.done {
            return;
        }
        self.done = true;
        let held = self.granted.elapsed();
        let meters = &self.labels.meters;
        meters.holders().decrement(1.0);
        meters.held().record(held.as_secs_f64());
        meters.released(outcome).increment(1);
        if outcome == "not_held" {
            lost(&self.labels, &self.name, held);
        }
        tracing::debug!(
            target: "locksmith.release",
            kind = self.labels.kind,
            name = %self.name,
            outcome,
            held_ms = held.as_secs_f64() * 1e3,
            "released"
        );
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.finish("dropped");
    }
}

/// Records a lost lease found at release (the watchdog logs its own
/// warning when it notices one first).
pub(crate) fn lost(labels: &Labels, name: &str, held: Duration) {
    labels.meters.lost().increment(1);
    tracing::warn!(
        kind = labels.kind,
        name,
        held_ms = held.as_secs_f64() * 1e3,
        "lease lost: another holder may have run meanwhile; writes should carry the fencing token"
    );
}

/// Warns that a fixed-lease hold passed 80% of its lease.
pub(crate) fn lease_nearly_over(key: &str, lease: Duration, held: Duration) {
    tracing::warn!(
        name = key,
        lease_ms = lease.as_millis() as u64,
        held_ms = held.as_millis() as u64,
        "a fixed-lease hold passed 80% of its lease; choose a lease of 3-5x the typical hold (this one has run {held:?} of {lease:?}), or let the watchdog renew it"
    );
}
