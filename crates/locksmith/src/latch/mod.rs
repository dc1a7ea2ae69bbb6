//! The count-down latch, laid out like Redisson's `RCountDownLatch`: a
//! string key holding the count, deleted when it reaches zero, and the
//! channel `redisson_countdownlatch__channel__{NAME}` carrying `0` (reached
//! zero: every waiter of every client wakes) and `1` (a new count was set).

use std::sync::Arc;
use std::time::Duration;

use crate::client::{Client, Topology};
use crate::engine::notify::Wake;
use crate::engine::validate;
use crate::engine::wait::{Check, Wait};
use crate::error::{Error, Result};
use crate::scripts;

/// A distributed count-down latch (Redisson's `RCountDownLatch` layout).
///
/// One process sets a count; others count it down; any number of waiters
/// in any number of processes wait until it reaches zero. Once at zero the
/// latch is open (its key is gone) and [`CountDownLatch::try_set_count`]
/// may arm it again.
///
/// ```no_run
/// # async fn demo(client: locksmith::Client) -> locksmith::Result<()> {
/// let ready = client.count_down_latch("shards-loaded")?;
/// ready.try_set_count(3).await?;
/// // ... each of three loaders calls ready.count_down().await? when done ...
/// ready.wait().await?;                       // returns once all three did
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct CountDownLatch {
    /// Name, channel and client; shared by clones.
    shared: Arc<Shared>,
}

/// What clones of a [`CountDownLatch`] share.
#[derive(Debug)]
struct Shared {
    /// The client the latch lives in.
    client: Client,
    /// The latch's name: also the key holding its count.
    name: Arc<str>,
    /// Where the latch announces reaching zero and new counts.
    channel: Arc<str>,
}

/// The notify policy of a latch channel: `0` (reached zero, or deleted)
/// wakes every waiter; `1` (a new count) wakes nobody.
fn wake_at_zero(payload: &[u8]) -> Wake {
    match payload {
        b"1" => Wake::Nobody,
        _ => Wake::All,
    }
}

impl Client {
    /// A handle on the count-down latch `name` (Redisson's
    /// `RCountDownLatch` layout).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `name` is empty or longer than the
    /// client's name limit, or on a cluster when it contains a brace:
    /// Redisson wraps the whole name in braces for the latch's channel, so
    /// a hash tag of the name's own would put the channel in another slot.
    pub fn count_down_latch(&self, name: impl Into<String>) -> Result<CountDownLatch> {
        let name = self.checked_name(name)?;
        if self.topology() == Topology::Cluster && name.contains(['{', '}']) {
            return Err(Error::invalid(format!(
                "latch name {name:?} contains a brace: on a cluster its channel (redisson_countdownlatch__channel__{{NAME}}) would hash to another slot than its key; use a name without braces"
            )));
        }
        Ok(CountDownLatch {
            shared: Arc::new(Shared {
                client: self.clone(),
                channel: latch_channel(&name).into(),
                name: name.into(),
            }),
        })
    }
}

impl CountDownLatch {
    /// The latch's name (also its key).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Arms the latch with `count` if it is not armed already (its key does
    /// not exist); answers whether it did so.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero count or one above 2^53;
    /// [`Error::WrongType`] when the key holds something else; connection
    /// errors and timeouts.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped after the command was sent, the count may
    /// or may not have been set; [`CountDownLatch::count`] shows which.
    pub async fn try_set_count(&self, count: u64) -> Result<bool> {
        validate::count(count, "count")?;
        Ok(self.run("set", count).await? == 1)
    }

    /// Counts down by one; at zero the latch opens and every waiter wakes.
    /// Answers the count left (0 also when the latch was already open:
    /// counting down an open latch changes nothing).
    ///
    /// # Errors
    /// [`Error::WrongType`] when the key is not a latch; connection errors
    /// and timeouts (the outcome is then unknown: a count-down is not
    /// resent, as it is not idempotent).
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped after the command was sent, the count may
    /// or may not have gone down.
    pub async fn count_down(&self) -> Result<u64> {
        self.run("down", 0).await
    }

    /// The current count (0 when the latch is open).
    ///
    /// # Errors
    /// [`Error::WrongType`] when the key is not a latch; connection errors
    /// and timeouts.
    ///
    /// # Cancel safety
    /// Cancel safe: a read.
    pub async fn count(&self) -> Result<u64> {
        let mut conn = self.shared.client.connection();
        let value: Option<String> = redis::cmd("GET")
            .arg(&*self.shared.name)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.shared.client.map_err(e, Some(&self.shared.name)))?;
        match value {
            None => Ok(0),
            Some(v) => v
                .parse::<i64>()
                .map(|n| n.max(0) as u64)
                .map_err(|_| Error::WrongType {
                    key: self.shared.name.to_string(),
                }),
        }
    }

    /// Deletes the latch, opening it for every waiter; answers whether it
    /// existed.
    ///
    /// # Errors
    /// Connection errors and timeouts.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped after the command was sent, the latch may
    /// or may not have been deleted.
    pub async fn delete(&self) -> Result<bool> {
        Ok(self.run("delete", 0).await? == 1)
    }

    /// Waits until the count reaches zero (returns at once if it is zero).
    ///
    /// # Errors
    /// [`Error::WrongType`] when the key is not a latch; connection errors
    /// and timeouts.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future leaves its pub/sub registration;
    /// waiting changes nothing on the server.
    pub async fn wait(&self) -> Result<()> {
        self.wait_within(None).await.map(drop)
    }

    /// Waits at most `timeout` for the count to reach zero; answers whether
    /// it did.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `timeout` overflows the clock;
    /// others as for [`CountDownLatch::wait`].
    ///
    /// # Cancel safety
    /// Cancel safe, as [`CountDownLatch::wait`].
    pub async fn wait_for(&self, timeout: Duration) -> Result<bool> {
        self.wait_within(Some(timeout)).await
    }

    /// Reads the count, then waits on the channel (see
    /// [`NotifyHub::wait_on`]).
    ///
    /// [`NotifyHub::wait_on`]: crate::engine::notify::NotifyHub::wait_on
    async fn wait_within(&self, timeout: Option<Duration>) -> Result<bool> {
        let labels = self.shared.client.labels("latch", self.name());
        let waited = crate::engine::observe::acquire(labels, self.name(), async {
            Ok(self.wait_inner(timeout).await?.then_some(Opened))
        })
        .await?;
        Ok(waited.is_some())
    }

    async fn wait_inner(&self, timeout: Option<Duration>) -> Result<bool> {
        let deadline = timeout.map(validate::deadline).transpose()?;
        let client = &self.shared.client;
        let opened = Wait::on(client.hub(), &self.shared.channel)
            .policy(wake_at_zero, 1)
            .until(deadline)
            .recheck(client.config().recheck_interval)
            .run(|| async {
                client.admit()?;
                Ok(match self.count().await? {
                    0 => Check::Done(()),
                    _ => Check::NotYet(None),
                })
            })
            .await?;
        Ok(opened.is_some())
    }

    /// Runs `latch.lua` with `op`.
    async fn run(&self, op: &'static str, count: u64) -> Result<u64> {
        let shared = &self.shared;
        let keys = [&*shared.name, &*shared.channel];
        let mode = shared.client.notify_mode().code();
        shared
            .client
            .run_script(&scripts::LATCH, &keys, (op, count, mode))
            .await
    }
}

/// A latch wait that saw the count reach zero (for the metrics).
struct Opened;

impl crate::engine::observe::Grant for Opened {}

/// The channel a count-down latch announces on. Redisson always wraps the
/// name in braces here, even when it carries a hash tag of its own (on a
/// cluster such names are refused for latches: the channel would hash
/// elsewhere).
fn latch_channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_wakes_everyone() {
        assert_eq!(wake_at_zero(b"0"), Wake::All);
        assert_eq!(wake_at_zero(b"1"), Wake::Nobody);
    }

    #[test]
    fn redisson_channel() {
        assert_eq!(
            latch_channel("boot"),
            "redisson_countdownlatch__channel__{boot}"
        );
    }
}
