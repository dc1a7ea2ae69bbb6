//! The id generator: 64-bit ids that are unique across every client of a
//! prefix, roughly time-ordered and cheap. An id is 31 bits of seconds
//! since an epoch (UTC) followed by 32 bits of a per-day sequence taken
//! from `INCR` (or, in block mode, `INCRBY k`) on the key `PREFIX:<day>`,
//! which expires two days after its last use. The sign bit stays clear,
//! so ids fit a positive `i64`.
//!
//! Uniqueness: a day's sequence numbers are handed out by one counter, so
//! no two ids of one day share a sequence, and ids of different days differ
//! in their seconds. Order: one generator's seconds never go backwards (a
//! clock stepped back is held at the latest second seen) and its sequence
//! only grows within a day, so calls made one after another get increasing
//! ids; in block mode every id of a generator is larger than the one before.
//! A Redis that loses its data restarts the day's sequence: ids issued
//! before the loss in the same second can then repeat, and so can ids of a
//! process whose clock is set back by more than the two days a day's key
//! lives; and a failover that loses the last `INCR`s before they reached a
//! replica hands those numbers out again (`INCR` does not wait for replica
//! acknowledgement). Keep a unique index where ids are stored.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::Mutex;

use crate::client::Client;
use crate::error::{Error, Result};

/// Seconds in a day.
const DAY: i64 = 86_400;

/// How many seconds the 31-bit field holds (about 68 years).
const SECS_LIMIT: i64 = 1 << 31;

/// How many sequence numbers a day holds.
const SEQ_LIMIT: i64 = 1 << 32;

/// The largest block: a 4096th of a day's sequence, so a few generators
/// reserving blocks they never use cannot exhaust a day.
const MAX_BLOCK: u32 = 1 << 20;

/// The clock a generator reads: seconds since the Unix epoch.
type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// A generator of 64-bit ids for one prefix (see the module docs).
///
/// ```no_run
/// # async fn demo(client: locksmith::Client) -> locksmith::Result<()> {
/// let orders = client.id_generator("orders")?.with_block(1000)?;
/// let id = orders.next_id().await?;      // one round trip per 1000 ids
/// let (secs, seq) = locksmith::IdGenerator::split(id);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct IdGenerator {
    /// The client whose connection carries the `INCR`s.
    client: Client,
    /// Key prefix; the day's counter is `PREFIX:<day>`.
    prefix: Arc<str>,
    /// The epoch, in seconds since the Unix epoch.
    epoch: i64,
    /// Ids reserved per round trip (1: one `INCR` per id).
    block: u32,
    /// The clock (the system's, unless replaced for tests).
    clock: Clock,
    /// Shared by clones: the latest second used and the current block.
    state: Arc<State>,
}

/// What clones of a generator share.
struct State {
    /// The latest second (since the epoch) any id of this generator used,
    /// so a clock stepped back does not step the ids back.
    last_secs: AtomicI64,
    /// The reserved block (block mode). A plain mutex: taking an id never
    /// waits for anything.
    block: std::sync::Mutex<Block>,
    /// Held by the one caller fetching the next block, so that waiting
    /// callers do not each fetch one.
    refill: Mutex<()>,
}

/// Sequence numbers reserved and not yet used.
#[derive(Default)]
struct Block {
    /// The day they belong to.
    day: i64,
    /// Next to hand out.
    next: i64,
    /// One past the last reserved.
    end: i64,
}

impl std::fmt::Debug for IdGenerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdGenerator")
            .field("prefix", &self.prefix)
            .field("epoch", &self.epoch)
            .field("block", &self.block)
            .finish_non_exhaustive()
    }
}

fn system_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl Client {
    /// An id generator for `prefix`, with the default epoch
    /// ([`IdGenerator::DEFAULT_EPOCH`]) and one `INCR` per id.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `prefix` is empty or longer than the
    /// client's name limit.
    pub fn id_generator(&self, prefix: impl Into<String>) -> Result<IdGenerator> {
        let prefix = self.checked_name(prefix)?;
        Ok(IdGenerator {
            client: self.clone(),
            prefix: prefix.into(),
            epoch: IdGenerator::DEFAULT_EPOCH,
            block: 1,
            clock: Arc::new(system_secs),
            state: Arc::new(State {
                last_secs: AtomicI64::new(0),
                block: std::sync::Mutex::new(Block::default()),
                refill: Mutex::new(()),
            }),
        })
    }
}

impl IdGenerator {
    /// The default epoch: 2024-01-01T00:00:00Z (Unix seconds). 31 bits of
    /// seconds from there last until 2092.
    pub const DEFAULT_EPOCH: i64 = 1_704_067_200;

    /// Splits an id into (seconds since the epoch, the day's sequence).
    pub fn split(id: i64) -> (i64, i64) {
        (id >> 32, id & (SEQ_LIMIT - 1))
    }

    /// The same generator counting seconds from `epoch` (UTC). All
    /// generators of a prefix must use the same epoch, or their ids may
    /// collide.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an epoch in the future, or one so
    /// far back that today's seconds no longer fit 31 bits.
    pub fn with_epoch(&self, epoch: SystemTime) -> Result<IdGenerator> {
        let secs = epoch
            .duration_since(UNIX_EPOCH)
            .map_err(|_| Error::invalid("the id epoch must not be before 1970"))?
            .as_secs() as i64;
        let now = (self.clock)();
        if secs > now {
            return Err(Error::invalid(format!(
                "the id epoch is {}s in the future; ids count seconds since it",
                secs - now
            )));
        }
        if now - secs >= SECS_LIMIT {
            return Err(Error::invalid(
                "the id epoch is more than 2^31 seconds (68 years) ago: ids would overflow",
            ));
        }
        Ok(IdGenerator {
            epoch: secs,
            // Seconds count from another epoch now: nothing carries over.
            state: Arc::new(State {
                last_secs: AtomicI64::new(0),
                block: std::sync::Mutex::new(Block::default()),
                refill: Mutex::new(()),
            }),
            ..self.clone()
        })
    }

    /// The same generator reserving `ids` sequence numbers per round trip
    /// (`INCRBY`), Redisson's `RIdGenerator` style: far fewer round trips,
    /// at the cost of gaps when a generator is dropped with unused ids.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a block of zero or above 2^20.
    pub fn with_block(&self, ids: u32) -> Result<IdGenerator> {
        if ids == 0 || ids > MAX_BLOCK {
            return Err(Error::invalid(format!(
                "the id block size must be between 1 and {MAX_BLOCK}, got {ids}"
            )));
        }
        Ok(IdGenerator {
            block: ids,
            state: self.fresh_state(),
            ..self.clone()
        })
    }

    /// State for a generator derived from this one: its own block, and the
    /// latest second carried over only while the epoch stays the same.
    fn fresh_state(&self) -> Arc<State> {
        Arc::new(State {
            last_secs: AtomicI64::new(self.state.last_secs.load(Ordering::SeqCst)),
            block: std::sync::Mutex::new(Block::default()),
            refill: Mutex::new(()),
        })
    }

    /// The same generator reading `clock` (seconds since the Unix epoch)
    /// instead of the system clock: for tests and simulations of day
    /// rollover and clock steps.
    pub fn with_clock(&self, clock: impl Fn() -> i64 + Send + Sync + 'static) -> IdGenerator {
        IdGenerator {
            clock: Arc::new(clock),
            state: self.fresh_state(),
            ..self.clone()
        }
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The next id.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the day's sequence is exhausted
    /// (2^32 ids in one day) or the seconds no longer fit 31 bits;
    /// [`Error::WrongType`] when the day's key holds something else;
    /// connection errors and timeouts (an `INCR` is not resent: a lost
    /// reply costs a gap, never a duplicate).
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped call loses at most the sequence numbers it
    /// reserved (a gap), never hands one out twice.
    pub async fn next_id(&self) -> Result<i64> {
        if self.block == 1 {
            let secs = self.secs()?;
            let day = self.day(secs);
            let seq = self.reserve(day, 1).await?;
            return self.compose(secs, day, seq);
        }
        loop {
            if let Some(id) = self.take_from_block()? {
                return Ok(id);
            }
            let _refilling = self.state.refill.lock().await;
            // Someone else may have refilled while this call waited.
            if let Some(id) = self.take_from_block()? {
                return Ok(id);
            }
            let day = self.day(self.secs()?);
            let n = i64::from(self.block);
            let end = self.reserve(day, n).await?;
            let mut block = self.lock_block();
            if day >= block.day {
                *block = Block {
                    day,
                    next: end - n + 1,
                    end: end + 1,
                };
            }
        }
    }

    /// The next id from the reserved block, if it has one for today.
    /// Composed under the block's lock, so a generator's ids increase in
    /// the order they are handed out.
    fn take_from_block(&self) -> Result<Option<i64>> {
        let mut block = self.lock_block();
        let secs = self.secs()?;
        let day = self.day(secs);
        if block.day != day || block.next >= block.end {
            return Ok(None);
        }
        let seq = block.next;
        block.next += 1;
        self.compose(secs, day, seq).map(Some)
    }

    fn lock_block(&self) -> std::sync::MutexGuard<'_, Block> {
        self.state.block.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Seconds since the epoch now, never before the latest this generator
    /// used.
    fn secs(&self) -> Result<i64> {
        let now = (self.clock)() - self.epoch;
        let secs = self
            .state
            .last_secs
            .fetch_max(now, Ordering::SeqCst)
            .max(now);
        if !(0..SECS_LIMIT).contains(&secs) {
            return Err(Error::internal(format!(
                "{secs} seconds since the id epoch do not fit 31 bits"
            )));
        }
        Ok(secs)
    }

    /// The UTC day (days since the Unix epoch) of `secs` since the epoch.
    fn day(&self, secs: i64) -> i64 {
        (self.epoch + secs).div_euclid(DAY)
    }

    /// Reserves `n` sequence numbers of `day`; answers the last of them.
    async fn reserve(&self, day: i64, n: i64) -> Result<i64> {
        let key = format!("{}:{day}", self.prefix);
        let mut conn = self.client.connection();
        let (end,): (i64,) = redis::pipe()
            .incr(&key, n)
            .expire(&key, 2 * DAY)
            .ignore()
            .query_async(&mut conn)
            .await
            .map_err(|e| self.client.map_err(e, Some(&key)))?;
        Ok(end)
    }

    fn compose(&self, secs: i64, day: i64, seq: i64) -> Result<i64> {
        if !(0..SEQ_LIMIT).contains(&seq) {
            return Err(Error::internal(format!(
                "the id sequence of {prefix:?} for day {day} is exhausted ({seq} >= 2^32); ids resume tomorrow",
                prefix = &*self.prefix
            )));
        }
        Ok((secs << 32) | seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_undoes_the_layout() {
        let id = (5_i64 << 32) | 7;
        assert_eq!(IdGenerator::split(id), (5, 7));
        let top = ((SECS_LIMIT - 1) << 32) | (SEQ_LIMIT - 1);
        assert!(top > 0, "the sign bit stays clear");
    }
}
