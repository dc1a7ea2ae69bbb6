//! The one wait loop every waiting primitive goes through.
//!
//! A primitive supplies a *check* (one attempt at what it waits for, such
//! as an acquire script call) and says where release messages arrive (one
//! or more channels, of one client's hub or of several, as Redlock's nodes
//! are). [`Wait::run`] checks, joins the channels' queues, re-checks when a
//! message may have slipped in before joining, and sleeps until a message,
//! the check's own hint, the recheck bound, the deadline, an optional
//! *nudge* (a local hand-off) or an optional cancellation comes, then checks
//! again.
//!
//! What every kind gets from it, written here once:
//! - a wake-up taken by this waiter is used or handed on: it counts as
//!   used only once a check it prompted was answered, and a waiter dropped
//!   before that (cancelled, or failed with an error) hands it to the next
//!   one ([`Waiter::checked`]);
//! - a kind that takes several resources at once passes a wake-up its
//!   check could not use to the next waiter of that channel
//!   ([`Wait::pass_on_unused`]);
//! - the sleep never spins on a hint already past ([`MIN_PAUSE`]) and never
//!   outlasts the deadline;
//! - dropping the future leaves every queue (cancel safe as far as the
//!   check is).

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::notify::{wake_one, NotifyHub, Policy, Waiter};
use crate::error::Result;

/// What one check of a waited-for condition found.
pub(crate) enum Check<T> {
    /// The condition holds (what was waited for is taken or open): done.
    Done(T),
    /// Not yet; if `Some`, check again no later than then even without a
    /// message (a lease known to run out, so something frees up).
    NotYet(Option<Instant>),
    /// Not yet, and the check used no wake-up: its outcome is on its way
    /// through the nudge (a local hand-off in flight). Check again no later
    /// than the time given, or at the nudge.
    Pending(Option<Instant>),
}

/// The shortest pause between two checks prompted by a hint alone, so a
/// hint already in the past cannot turn the wait into a spin.
pub(crate) const MIN_PAUSE: Duration = Duration::from_millis(5);

/// One wait: where it listens and how long. Build with [`Wait::on`] or
/// [`Wait::on_all`], then [`Wait::run`].
pub(crate) struct Wait<'a> {
    /// The channels listened on, each on its hub.
    listen: Vec<(&'a NotifyHub, &'a str)>,
    /// How a message wakes this channel's queue, and this waiter's need.
    policy: Policy,
    need: u64,
    /// Give up (answer `None`) once this passes.
    deadline: Option<Instant>,
    /// Longest sleep without a message or a hint (a lost message costs at
    /// most this); `None`: only hints and messages end a sleep.
    recheck: Option<Duration>,
    /// The caller made the first check itself: the channels' message
    /// counters seen before it, and its hint.
    checked: Option<(Vec<Option<u64>>, Option<Instant>)>,
    /// Check again right after joining when a message may have come
    /// between the first check and the join.
    check_on_join: bool,
    /// Hand a wake-up a check could not use to the next waiter.
    pass_on: bool,
    /// Record each hint as the channel's busy end ([`NotifyHub::busy_until`]).
    note_busy: bool,
}

impl<'a> Wait<'a> {
    /// A wait on one channel of `hub`, woken one waiter at a time.
    pub(crate) fn on(hub: &'a NotifyHub, channel: &'a str) -> Self {
        Wait::on_all(vec![(hub, channel)])
    }

    /// A wait on several channels (possibly of several hubs): any message
    /// on any of them prompts a check.
    pub(crate) fn on_all(listen: Vec<(&'a NotifyHub, &'a str)>) -> Self {
        Wait {
            listen,
            policy: wake_one,
            need: 1,
            deadline: None,
            recheck: None,
            checked: None,
            check_on_join: true,
            pass_on: false,
            note_busy: false,
        }
    }

    /// How a message wakes the queue, and how much this waiter needs of
    /// what it frees (permits).
    pub(crate) fn policy(mut self, policy: Policy, need: u64) -> Self {
        self.policy = policy;
        self.need = need;
        self
    }

    /// Gives up once `deadline` passes (`None`: never).
    pub(crate) fn until(mut self, deadline: Option<Instant>) -> Self {
        self.deadline = deadline;
        self
    }

    /// Checks at least this often, message or not.
    pub(crate) fn recheck(mut self, every: Duration) -> Self {
        self.recheck = Some(every);
        self
    }

    /// The caller made the first check: `seen` is what [`Wait::seen`]
    /// answered before it, `hint` its hint. The wait joins at once.
    pub(crate) fn after_check(mut self, seen: Vec<Option<u64>>, hint: Option<Instant>) -> Self {
        self.checked = Some((seen, hint));
        self
    }

    /// After joining, sleep before checking again even if a message may
    /// have slipped in (a kind whose checks are costly and whose sleeps
    /// are short anyway, such as Redlock's rounds).
    pub(crate) fn sleep_after_join(mut self) -> Self {
        self.check_on_join = false;
        self
    }

    /// A wake-up a check answered `NotYet` to is passed to the next waiter
    /// of its channel (a kind that takes several resources at once: what
    /// was freed may be all another waiter needs).
    pub(crate) fn pass_on_unused(mut self) -> Self {
        self.pass_on = true;
        self
    }

    /// Each hint is recorded as the channel's busy end, so this client's
    /// next acquirer can join the queue without trying first.
    pub(crate) fn note_busy(mut self) -> Self {
        self.note_busy = true;
        self
    }

    /// The message counters of `listen`'s channels now, for
    /// [`Wait::after_check`].
    pub(crate) fn seen(listen: &[(&NotifyHub, &str)]) -> Vec<Option<u64>> {
        listen.iter().map(|(hub, ch)| hub.seq(ch)).collect()
    }

    /// Waits with no nudge and no cancellation: see [`Wait::run_with`].
    /// (A plain function: an `async fn` forwarding to it would hold the
    /// wait and the check twice in its future.)
    pub(crate) fn run<T, F, Fut>(self, check: F) -> impl Future<Output = Result<Option<T>>> + 'a
    where
        F: FnMut() -> Fut + 'a,
        Fut: Future<Output = Result<Check<T>>> + 'a,
        T: 'a,
    {
        self.run_with(check, std::future::pending, std::future::pending())
    }

    /// Checks until `check` answers `Done` (`Some`) or the deadline passes
    /// (`None`). A sleep also ends when `nudge()` completes (a fresh call
    /// for each sleep) and the wait ends (`None`) when `cancel` does; a
    /// check in progress is finished first. An error from `check` ends the
    /// wait with that error.
    pub(crate) async fn run_with<T, F, Fut, N, NFut, C>(
        mut self,
        mut check: F,
        mut nudge: N,
        cancel: C,
    ) -> Result<Option<T>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Check<T>>>,
        N: FnMut() -> NFut,
        NFut: Future<Output = ()>,
        C: Future<Output = ()>,
    {
        let mut cancel = std::pin::pin!(cancel);
        let (seen, mut hint) = match self.checked.take() {
            Some(first) => first,
            None => {
                let seen = Wait::seen(&self.listen);
                match check().await? {
                    Check::Done(value) => return Ok(Some(value)),
                    Check::NotYet(hint) | Check::Pending(hint) => (seen, hint),
                }
            }
        };
        if self.deadline.is_some_and(|d| d <= Instant::now()) {
            return Ok(None);
        }
        // Joining waits for the subscription (at most the command timeout)
        // no longer than the deadline, nor than the recheck bound: a waiter
        // that must refresh its place in a queue cannot wait longer than
        // that without asking. A hint does not bound it: a kind polling at
        // short hints would give up on every new subscription over a slow
        // link, and check once more for nothing.
        let mut bound = self.deadline;
        if let Some(r) = self.recheck {
            let due = Instant::now() + r;
            bound = Some(bound.map_or(due, |b| b.min(due)));
        }
        let waiters: Vec<Waiter> =
            futures_util::future::join_all(self.listen.iter().map(|(hub, channel)| {
                Box::pin(hub.register(channel, self.policy, self.need, bound))
            }))
            .await;
        if let (true, Some(h)) = (self.note_busy, hint) {
            waiters.iter().for_each(|w| w.note_busy(h));
        }
        // Unless every channel was subscribed before the first check and
        // no message arrived since, a change may have slipped in unheard.
        let missed = self
            .listen
            .iter()
            .zip(&seen)
            .any(|((hub, ch), seen)| seen.is_none() || hub.seq(ch) != *seen);
        // A hub closed before this waiter joined does not end its sleep
        // (only sleeps begun before the closing end): look at once, the
        // check then fails.
        let closed = self.listen.iter().any(|(hub, _)| hub.is_closed());
        let mut check_now = (self.check_on_join && missed) || closed;
        // The channel whose message ended the last sleep.
        let mut woken_by: Option<usize> = None;
        loop {
            if check_now {
                let checked = check().await?;
                let used = !matches!(checked, Check::Pending(_));
                for (i, waiter) in waiters.iter().enumerate() {
                    if self.pass_on && woken_by == Some(i) && matches!(checked, Check::NotYet(_)) {
                        waiter.pass_on();
                    } else if used {
                        waiter.checked();
                    }
                }
                match checked {
                    Check::Done(value) => return Ok(Some(value)),
                    Check::NotYet(next) => {
                        hint = next;
                        if let (true, Some(h)) = (self.note_busy, hint) {
                            waiters.iter().for_each(|w| w.note_busy(h));
                        }
                    }
                    Check::Pending(next) => hint = next,
                }
            }
            check_now = true;
            woken_by = None;
            let now = Instant::now();
            if self.deadline.is_some_and(|d| d <= now) {
                return Ok(None);
            }
            let mut until = self.recheck.map(|r| now + r);
            if let Some(h) = hint {
                let h = h.max(now + MIN_PAUSE);
                until = Some(until.map_or(h, |u| u.min(h)));
            }
            if let Some(d) = self.deadline {
                until = Some(until.map_or(d, |u| u.min(d)));
            }
            // Nothing bounds the sleep: an hour, then look again.
            let until = until.unwrap_or(now + Duration::from_secs(3600));
            let messages = async {
                match waiters.as_slice() {
                    [] => {
                        tokio::time::sleep_until(until).await;
                        None
                    }
                    [only] => only.wait_until(until).await.then_some(0),
                    several => {
                        let (woken, i, _) = futures_util::future::select_all(
                            several.iter().map(|w| Box::pin(w.wait_until(until))),
                        )
                        .await;
                        woken.then_some(i)
                    }
                }
            };
            tokio::select! {
                biased;
                () = cancel.as_mut() => return Ok(None),
                () = nudge() => {}
                woken = messages => woken_by = woken,
            }
        }
    }
}
