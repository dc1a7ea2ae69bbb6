//! The leaf types of the connection layer: what every other engine module
//! and the client pass around, depending on nothing of the crate's own
//! (so no module that uses them can close an import cycle).

use std::time::Duration;

/// Sends per idempotent call when the reply is lost (timeout or dropped
/// connection); see `Error::may_resend`.
pub(crate) const ATTEMPTS: usize = 3;

/// Default wait for replica acknowledgements (`ClientBuilder`'s
/// `DEFAULT_REPLICA_ACK_TIMEOUT`): 1 second, as Redisson's
/// `slavesSyncTimeout`.
pub(crate) const DEFAULT_ACK_TIMEOUT: Duration = Duration::from_secs(1);

use redis::{RedisResult, Value};

/// Connection timing, from the client's options.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// Bounds dialling.
    pub(crate) connect: Duration,
    /// Bounds every command.
    pub(crate) command: Duration,
}

/// How lock releases are announced on a Redis Cluster; see
/// [`ClientBuilder::cluster_notify`](crate::ClientBuilder::cluster_notify).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NotifyMode {
    /// `PUBLISH` / `SUBSCRIBE`: every node relays every message over the
    /// cluster bus. What clients without sharded pub/sub use.
    Classic,
    /// `SPUBLISH` / `SSUBSCRIBE` (Redis 7+): a message stays on the shard
    /// that owns the lock's slot. What Redisson uses on a cluster.
    Sharded,
    /// Both: releases are published both ways and waiters listen both
    /// ways, so Redisson and classic-only clients share locks with us and
    /// with each other. Costs one more publish per release.
    Both,
}

impl NotifyMode {
    /// Whether classic pub/sub is used.
    #[cfg(feature = "cluster")]
    pub(crate) fn classic(self) -> bool {
        matches!(self, NotifyMode::Classic | NotifyMode::Both)
    }

    /// Whether sharded pub/sub is used.
    #[cfg(feature = "cluster")]
    pub(crate) fn sharded(self) -> bool {
        matches!(self, NotifyMode::Sharded | NotifyMode::Both)
    }

    /// The code the scripts take: `p` publish, `s` spublish, `b` both.
    pub(crate) fn code(self) -> &'static str {
        match self {
            NotifyMode::Classic => "p",
            NotifyMode::Sharded => "s",
            NotifyMode::Both => "b",
        }
    }
}

/// How many replicas must acknowledge a call's writes, and how long to wait
/// for them (`WAIT numreplicas timeout`, sent right behind the call on the
/// same connection, in the same round trip). The default waits for none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Acks {
    /// Replicas to wait for; 0 sends no `WAIT`.
    pub(crate) min: u32,
    /// How long `WAIT` may block.
    pub(crate) timeout: std::time::Duration,
}

impl Acks {
    /// Sends `cmd`, followed by `WAIT` when acknowledgements are wanted;
    /// answers the reply and how many replicas acknowledged.
    pub(crate) async fn query<C: redis::aio::ConnectionLike>(
        &self,
        cmd: &redis::Cmd,
        conn: &mut C,
    ) -> RedisResult<(Value, Option<u32>)> {
        if self.min == 0 {
            return Ok((cmd.query_async(conn).await?, None));
        }
        let mut pipe = redis::pipe();
        pipe.add_command(cmd.clone())
            .cmd("WAIT")
            .arg(self.min)
            .arg(self.timeout.as_millis() as u64);
        let (reply, acked): (Value, i64) = pipe.query_async(conn).await?;
        Ok((reply, Some(u32::try_from(acked).unwrap_or(0))))
    }

    /// True when `acked` (from [`Acks::query`]) falls short.
    pub(crate) fn short(&self, acked: Option<u32>) -> bool {
        self.min > 0 && acked.is_some_and(|n| n < self.min)
    }
}

/// Implements redis-rs's `ConnectionLike` for one of our connection types
/// from three bodies, so the trait's signatures are written once:
/// `command(this, cmd)` sends one command, `pipeline(this, pipeline,
/// offset, count)` sends the pipeline and, skipping `offset` replies,
/// answers the `count` after them, and `db(this)` names the database;
/// `this` is the connection.
macro_rules! connection_like {
    ($ty:ty {
        command($c_this:ident, $cmd:ident) => $command:expr,
        pipeline($p_this:ident, $pipeline:ident, $offset:ident, $count:ident) => $pipe:expr,
        db($d_this:ident) => $db:expr $(,)?
    }) => {
        impl ::redis::aio::ConnectionLike for $ty {
            fn req_packed_command<'a>(
                &'a mut self,
                $cmd: &'a ::redis::Cmd,
            ) -> ::redis::RedisFuture<'a, ::redis::Value> {
                let $c_this = self;
                $command
            }

            fn req_packed_commands<'a>(
                &'a mut self,
                $pipeline: &'a ::redis::Pipeline,
                $offset: usize,
                $count: usize,
            ) -> ::redis::RedisFuture<'a, Vec<::redis::Value>> {
                let $p_this = self;
                $pipe
            }

            fn get_db(&self) -> i64 {
                let $d_this = self;
                $db
            }
        }
    };
}
pub(crate) use connection_like;
