//! What a holder knows locally about its lease: when it runs out (by the
//! monotonic clock) and whether it has been lost.

use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Allowance for the server's clock running faster than ours and for the
/// time the grant took to reach Redis: `lease * 1% + 2 ms`, the clock-drift
/// allowance of the multi-node algorithm in Redis's documentation.
pub(crate) fn drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// The local view of one hold's lease, shared by the guard(s) of the hold
/// and the renewal task.
///
/// The deadline is never later than the server's expiry: it is set from
/// the *send* time of the command that armed the lease, minus a drift
/// allowance, and only a command known to have armed the lease moves it
/// (forward or back); an answer that leaves it unclear whether the lease
/// was re-armed can only pull it earlier.
#[derive(Debug)]
pub(crate) struct LeaseState {
    /// The latest instant at which the lease is still certainly valid.
    deadline: Mutex<Instant>,
    /// Cancelled once the lease is known (or must be assumed) lost.
    lost: CancellationToken,
    /// Wakes [`LostSignal::wait`] when the deadline moves, so a signal
    /// waiting on its own timer follows a shortened lease.
    moved: Notify,
    /// The lease kept on several nodes this one is a node's part of: told
    /// of every change (see [`Quorum`]).
    quorum: OnceLock<Weak<Quorum>>,
}

impl LeaseState {
    /// A lease granted by a command sent at `sent_at`.
    pub(crate) fn new(sent_at: Instant, lease: Duration) -> Self {
        LeaseState {
            deadline: Mutex::new(valid_until(sent_at, lease)),
            lost: CancellationToken::new(),
            moved: Notify::new(),
            quorum: OnceLock::new(),
        }
    }

    /// Records that a command sent at `sent_at` set the lease to `lease`
    /// on the server (a renewal, a re-entry, a release's re-arm): the
    /// deadline follows it exactly, earlier or later. No effect once lost.
    pub(crate) fn armed(&self, sent_at: Instant, lease: Duration) {
        self.set(|_| valid_until(sent_at, lease));
    }

    /// Records that a command sent at `sent_at` *may* have set the lease to
    /// `lease` (its answer does not say): the deadline can only move
    /// earlier.
    pub(crate) fn maybe_armed(&self, sent_at: Instant, lease: Duration) {
        self.set(|old| old.min(valid_until(sent_at, lease)));
    }

    /// Records that a command sent at `sent_at` moved the lease's end to
    /// at least `lease` from then, keeping a later end: the deadline can
    /// only move later.
    pub(crate) fn extended(&self, sent_at: Instant, lease: Duration) {
        self.set(|old| old.max(valid_until(sent_at, lease)));
    }

    fn set(&self, f: impl FnOnce(Instant) -> Instant) {
        if self.is_lost() {
            return;
        }
        {
            let mut deadline = self.deadline.lock().unwrap_or_else(|e| e.into_inner());
            *deadline = f(*deadline);
        }
        self.moved.notify_waiters();
        self.tell_quorum();
    }

    /// Brings the quorum lease this one is part of (if any) up to date.
    fn tell_quorum(&self) {
        if let Some(quorum) = self.quorum.get().and_then(Weak::upgrade) {
            quorum.update();
        }
    }

    /// The instant after which the lease must be assumed gone.
    pub(crate) fn deadline(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Time left until [`LeaseState::deadline`], zero once lost.
    pub(crate) fn remaining(&self) -> Duration {
        if self.is_lost() {
            return Duration::ZERO;
        }
        self.deadline().saturating_duration_since(Instant::now())
    }

    /// Marks the lease lost and fires every [`LostSignal`].
    pub(crate) fn mark_lost(&self) {
        if !self.lost.is_cancelled() {
            self.lost.cancel();
            self.tell_quorum();
        }
    }

    /// True once the lease has been lost, or its deadline has passed (which
    /// then marks it lost: the check does not depend on the watchdog task
    /// running).
    pub(crate) fn is_lost(&self) -> bool {
        if self.lost.is_cancelled() {
            return true;
        }
        if self.deadline() <= Instant::now() {
            self.mark_lost();
            return true;
        }
        false
    }

    /// A signal that fires when this lease is lost.
    pub(crate) fn signal(self: &Arc<Self>) -> LostSignal {
        LostSignal {
            state: self.clone(),
        }
    }
}

/// A lease kept on several nodes at once (Redlock): each node's part is a
/// [`LeaseState`] of its own, kept by that node's watchdog; the whole is
/// valid while `need` parts are, until the `need`-th latest of their
/// deadlines. Every change of a part updates the whole at once, so the
/// whole needs no task of its own: it is lost as soon as fewer than `need`
/// parts are left, and runs out on its own timer otherwise. Once the whole
/// is lost, every part is marked lost too, so no watchdog goes on renewing
/// a node's part of a hold that no longer exists as a whole.
#[derive(Debug)]
pub(crate) struct Quorum {
    /// What the hold is, for the warning when it is lost.
    name: Arc<str>,
    /// The nodes' parts (each also held by its node's watchdog).
    parts: Vec<Arc<LeaseState>>,
    /// How many parts must hold.
    need: usize,
    /// The whole, shared with the guard.
    whole: Arc<LeaseState>,
    /// Serializes updates: parts change on several watchdogs' threads at
    /// once, and an update computed from older parts must not overwrite
    /// one computed from newer ones.
    updating: Mutex<()>,
}

impl Quorum {
    /// Makes `whole` (the hold `name`) follow `parts`; keep the answer for
    /// as long as the hold lives (the parts refer to it weakly).
    pub(crate) fn new(
        name: Arc<str>,
        whole: Arc<LeaseState>,
        parts: Vec<Arc<LeaseState>>,
        need: usize,
    ) -> Arc<Self> {
        let quorum = Arc::new(Quorum {
            name,
            parts,
            need: need.max(1),
            whole,
            updating: Mutex::new(()),
        });
        for part in &quorum.parts {
            let _ = part.quorum.set(Arc::downgrade(&quorum));
        }
        quorum.update();
        quorum
    }

    /// Sets the whole from the parts: lost when fewer than `need` are left
    /// (and then every part too), else valid until the `need`-th latest
    /// deadline of those left.
    fn update(&self) {
        let lost = {
            let _one_at_a_time = self.updating.lock().unwrap_or_else(|e| e.into_inner());
            if self.whole.lost.is_cancelled() {
                true
            } else {
                // The parts' fields are read directly: `is_lost` would mark
                // a part past its deadline lost, which calls back here.
                let mut ends: Vec<Instant> = self
                    .parts
                    .iter()
                    .filter(|p| !p.lost.is_cancelled())
                    .map(|p| p.deadline())
                    .collect();
                if ends.len() < self.need {
                    tracing::warn!(
                        name = %self.name,
                        left = ends.len(),
                        needed = self.need,
                        "hold kept on several nodes lost: fewer than a majority of its nodes still hold it"
                    );
                    self.whole.mark_lost();
                    true
                } else {
                    ends.sort_unstable_by(|a, b| b.cmp(a));
                    let end = ends[self.need - 1];
                    #[cfg(test)]
                    tests::slow_down_here();
                    self.whole.set(|_| end);
                    false
                }
            }
        };
        if lost {
            // Outside the update lock: each part calls back here, and
            // finds the whole lost.
            for part in &self.parts {
                part.mark_lost();
            }
        }
    }
}

fn valid_until(sent_at: Instant, lease: Duration) -> Instant {
    sent_at + lease.saturating_sub(drift(lease))
}

/// Fires when a held lock's lease is lost: a renewal found the lock gone,
/// or the lease ran out locally before a renewal could be confirmed.
///
/// Cheap to clone; all clones observe the same event. Once fired it stays
/// fired.
///
/// ```no_run
/// # async fn demo(client: locksmith::Client) -> locksmith::Result<()> {
/// let guard = client.lock("reports")?.lock().await?;
/// let lost = guard.lost();
/// tokio::select! {
///     _ = lost.wait() => eprintln!("lease lost; stop writing"),
///     _ = tokio::time::sleep(std::time::Duration::from_secs(5)) => {}
/// }
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LostSignal {
    /// The lease watched; its token is cancelled exactly once, on loss.
    state: Arc<LeaseState>,
}

impl LostSignal {
    /// True once the lease has been lost (or its local deadline passed).
    pub fn is_lost(&self) -> bool {
        self.state.is_lost()
    }

    /// A future that completes when the lease is lost (at once if it
    /// already was). It owns what it needs, so it can be moved into a task
    /// or used straight in `tokio::select!`. It keeps its own timer on the
    /// local deadline, so it fires on time even if the client's watchdog
    /// task is not running (its runtime ended).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future changes nothing; a new call waits
    /// for the same event.
    pub fn wait(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let state = self.state.clone();
        async move {
            loop {
                // Registered before reading the deadline, so a move between
                // the read and the sleep is not missed.
                let moved = state.moved.notified();
                if state.is_lost() {
                    return;
                }
                tokio::select! {
                    _ = state.lost.cancelled() => return,
                    _ = tokio::time::sleep_until(state.deadline()) => {}
                    _ = moved => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn deadline_is_conservative_and_only_moves_forward() {
        let start = Instant::now();
        let lease = Duration::from_secs(30);
        let state = Arc::new(LeaseState::new(start, lease));
        assert_eq!(state.deadline(), start + lease - drift(lease));
        // "May have been re-armed" only ever pulls the deadline in.
        state.maybe_armed(start + Duration::from_secs(5), lease);
        assert_eq!(state.deadline(), start + lease - drift(lease));
        state.maybe_armed(start, Duration::from_secs(1));
        assert_eq!(state.deadline(), start + Duration::from_millis(1000 - 12));
        // A known re-arm moves it either way.
        state.armed(start, lease);
        assert_eq!(state.deadline(), start + lease - drift(lease));
        tokio::time::advance(Duration::from_secs(10)).await;
        state.armed(Instant::now(), lease);
        assert!(state.remaining() > Duration::from_secs(29));
        let signal = state.signal();
        assert!(!signal.is_lost());
        state.mark_lost();
        assert!(signal.is_lost());
        assert_eq!(state.remaining(), Duration::ZERO);
        signal.wait().await;
    }

    #[tokio::test(start_paused = true)]
    async fn the_signal_fires_on_its_own_timer_and_follows_a_shortened_lease() {
        let state = Arc::new(LeaseState::new(Instant::now(), Duration::from_secs(30)));
        let signal = state.signal();
        let waiting = tokio::spawn(signal.wait());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(!waiting.is_finished());
        // Re-armed to a shorter lease: the waiting future follows.
        state.armed(Instant::now(), Duration::from_secs(2));
        tokio::time::advance(Duration::from_millis(1990)).await;
        tokio::task::yield_now().await;
        assert!(
            waiting.is_finished(),
            "fired at the new deadline, with no watchdog"
        );
        assert!(signal.is_lost());
        // Once lost, nothing revives it.
        state.armed(Instant::now(), Duration::from_secs(30));
        assert!(state.is_lost());
    }

    /// Three parts of `lease` from now and the whole they make with a
    /// quorum of two: (now, parts, whole, the quorum keeping it).
    fn two_of_three(
        lease: Duration,
    ) -> (Instant, Vec<Arc<LeaseState>>, Arc<LeaseState>, Arc<Quorum>) {
        let start = Instant::now();
        let parts: Vec<_> = (0..3)
            .map(|_| Arc::new(LeaseState::new(start, lease)))
            .collect();
        let whole = Arc::new(LeaseState::new(start, lease));
        let quorum = Quorum::new("q".into(), whole.clone(), parts.clone(), 2);
        (start, parts, whole, quorum)
    }

    #[tokio::test(start_paused = true)]
    async fn a_quorum_lease_follows_its_parts() {
        let lease = Duration::from_secs(30);
        let (start, parts, whole, quorum) = two_of_three(lease);
        assert_eq!(whole.deadline(), start + lease - drift(lease));
        // One part renewed: two parts must hold, so the whole waits for a
        // second one.
        tokio::time::advance(Duration::from_secs(10)).await;
        let renewed = Instant::now();
        parts[0].armed(renewed, lease);
        assert_eq!(whole.deadline(), start + lease - drift(lease));
        parts[1].armed(renewed, lease);
        assert_eq!(whole.deadline(), renewed + lease - drift(lease));
        // A part lost: the two left still make a quorum, until the
        // earlier of their ends.
        parts[0].mark_lost();
        assert!(!whole.is_lost());
        assert_eq!(whole.deadline(), start + lease - drift(lease));
        // A second part lost: no quorum, the whole is lost at once, and
        // so is the part left (its watchdog stops renewing it).
        parts[2].mark_lost();
        assert!(whole.is_lost());
        assert!(parts[1].is_lost(), "the last part goes with the whole");
        // And stays lost.
        parts[1].armed(Instant::now(), lease);
        assert!(whole.is_lost());
        drop(quorum);
    }

    #[tokio::test(start_paused = true)]
    async fn a_quorum_lease_runs_out_with_its_parts_unrenewed() {
        let lease = Duration::from_secs(3);
        let (_, _parts, whole, _quorum) = two_of_three(lease);
        let signal = whole.signal();
        tokio::time::advance(lease).await;
        tokio::time::timeout(Duration::from_millis(1), signal.wait())
            .await
            .expect("the whole runs out on its own timer");
    }

    /// Makes the update of a thread named "slow" take 200 ms between
    /// reading the parts and setting the whole.
    pub(super) fn slow_down_here() {
        if std::thread::current().name() == Some("slow") {
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Parts changing on two threads at once (two nodes' watchdogs): the
    /// whole ends at what the parts say at the end, never at what an
    /// update computed from older parts said.
    #[test]
    fn concurrent_part_changes_leave_the_whole_consistent() {
        let start = Instant::now();
        let parts: Vec<_> = [1, 10, 30]
            .iter()
            .map(|s| Arc::new(LeaseState::new(start, Duration::from_secs(*s))))
            .collect();
        let whole = Arc::new(LeaseState::new(start, Duration::from_secs(30)));
        let _quorum = Quorum::new("q".into(), whole.clone(), parts.clone(), 2);
        std::thread::scope(|s| {
            // Renews part 1 and computes the whole from parts 0, 1 and 2
            // (20 s), slowly.
            let slow = std::thread::Builder::new()
                .name("slow".into())
                .spawn_scoped(s, || parts[1].armed(start, Duration::from_secs(20)))
                .unwrap();
            std::thread::sleep(Duration::from_millis(50));
            // Meanwhile part 2 is lost: two parts left, 1 s and 20 s.
            parts[2].mark_lost();
            slow.join().unwrap();
        });
        assert_eq!(
            whole.deadline(),
            parts[0].deadline(),
            "the whole kept the end of an update computed before part 2 was lost"
        );
    }
}
