//! The one place scripts are put together. A script is its own file plus
//! the preludes it declares; every script starts with `token.lua` (fencing
//! tokens that survive the loss of the counter), and the ones that announce
//! a change declare `announce.lua` (the publish-mode switch and the listener
//! count). A prelude is included once, in the declared order, so no caller
//! ever composes a script by hand (and none can miss a prelude).
//!
//! Calls go out as `EVALSHA`; the SHA is computed once and a `NOSCRIPT`
//! answer loads the script and sends the call again.

use std::ops::Deref;
use std::time::Duration;

use crate::engine::slot::Slot;
use redis::{Cmd, RedisResult, Script, ToRedisArgs, Value};
#[cfg(feature = "cluster")]
use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::engine::conn::Acks;
use crate::engine::topology::Conn;
#[cfg(feature = "cluster")]
use crate::engine::topology::{did_not_run, ClusterConn};

/// `next_token(key)`: the fencing-token helper every script starts with.
pub(crate) const TOKEN: &str = include_str!("token.lua");

/// `announce(channel, message, mode)` and `listeners(channel, mode)`.
pub(crate) const ANNOUNCE: &str = include_str!("announce.lua");

/// `each_request(nkeys, nargs, request)`: the loop of every batch script.
pub(crate) const BATCH: &str = include_str!("batch.lua");

/// `each_request(nkeys, nargs, request)` for one call carrying several
/// slots' requests: what replaces [`BATCH`] in a batch script's
/// [`Lua::across`] variant.
pub(crate) const ACROSS: &str = include_str!("across.lua");

/// The first line of a script that touches keys of several slots: Redis 7
/// and later run it on a cluster node as long as the node serves them.
const CROSS_SLOT: &str = "#!lua flags=allow-cross-slot-keys\n";

/// `each_hold(renew)`: the loop of every renewal script.
pub(crate) const HOLDS: &str = include_str!("holds.lua");

/// `leave_receipt(key, field, token, ttl)` and `gone_answer(key, field,
/// expected, token)`: the release receipts of `engine::counted`.
pub(crate) const RECEIPT: &str = include_str!("receipt.lua");

/// A script's reply and, with `WAIT`, how many replicas acknowledged.
pub(crate) type Answer = RedisResult<(Value, Option<u32>)>;

/// How long one [`Lua::run`] on a cluster keeps sending a call again while
/// the answers prove it did not run (a slot migration's `TRYAGAIN` lasts
/// until the last of the call's keys has moved, which takes as long as
/// the slot's other keys ahead of it).
pub(crate) const RUN_PATIENCE: Duration = Duration::from_secs(5);

/// The longest pause between two such sends.
const RUN_PAUSE_MAX: Duration = Duration::from_millis(250);

/// A composed script: its name (the file it was made from), its whole
/// source, and the `Script` that sends it by SHA.
pub(crate) struct Lua {
    /// Where the script's own file lives, without `.lua` (for tools and
    /// messages).
    name: &'static str,
    /// Preludes and body, as sent to Redis.
    source: String,
    /// The source with its SHA computed once.
    script: Script,
    /// Not idempotent: a second run applies it twice, so no layer may
    /// resend it after a lost reply (see [`Conn::at_most_once`]).
    once: bool,
    /// Sent without `WAIT`: writes nothing, or writes whose caller does
    /// not wait for replicas.
    unacked: bool,
    /// For a batch script, the same script taking the requests of several
    /// slots served by one cluster node in one call ([`ACROSS`]).
    across: Option<Box<Lua>>,
}

impl Lua {
    /// `TOKEN`, then each of `preludes` once (in order), then `body`. A
    /// batch script (one with [`BATCH`] among its preludes) also gets its
    /// [`Lua::across`] variant: the same with [`ACROSS`] in place of
    /// [`BATCH`], flagged to reach several slots.
    pub(crate) fn compose(name: &'static str, preludes: &[&str], body: &str) -> Lua {
        let mut lua = Lua::assemble(name, "", preludes, body);
        if preludes.contains(&BATCH) {
            let preludes: Vec<&str> = preludes
                .iter()
                .map(|&p| if p == BATCH { ACROSS } else { p })
                .collect();
            lua.across = Some(Box::new(Lua::assemble(name, CROSS_SLOT, &preludes, body)));
        }
        lua
    }

    /// `first`, `TOKEN`, each of `preludes` once, `body`.
    fn assemble(name: &'static str, first: &str, preludes: &[&str], body: &str) -> Lua {
        let mut source = String::with_capacity(
            first.len()
                + TOKEN.len()
                + preludes.iter().map(|p| p.len()).sum::<usize>()
                + body.len(),
        );
        source.push_str(first);
        source.push_str(TOKEN);
        let mut seen: Vec<&str> = Vec::with_capacity(preludes.len());
        for prelude in preludes {
            if *prelude != TOKEN && !seen.contains(prelude) {
                seen.push(prelude);
                source.push_str(prelude);
            }
        }
        source.push_str(body);
        let script = Script::new(&source);
        Lua {
            name,
            source,
            script,
            once: false,
            unacked: false,
            across: None,
        }
    }

    /// Marks the script as not idempotent: sent at most once.
    pub(crate) fn once(mut self) -> Lua {
        self.once = true;
        self.across = self.across.map(|a| Box::new(a.once()));
        self
    }

    /// Marks the script as a read: no `WAIT` behind it.
    pub(crate) fn read(self) -> Lua {
        self.unacked()
    }

    /// Marks the script as sent without `WAIT` although it writes.
    pub(crate) fn unacked(mut self) -> Lua {
        self.unacked = true;
        self.across = self.across.map(|a| Box::new(a.unacked()));
        self
    }

    /// For a batch script, its variant that takes the requests of several
    /// slots in one call, all served by the node the call goes to (see
    /// `across.lua` for its layout); `None` for other scripts. Needs Redis
    /// 7 or later ([`ClusterConn::crosses_slots`]).
    ///
    /// [`ClusterConn::crosses_slots`]: crate::engine::topology::ClusterConn::crosses_slots
    #[cfg(feature = "cluster")]
    pub(crate) fn across(&self) -> Option<&Lua> {
        self.across.as_deref()
    }

    /// A call of this script with keys and arguments still to add, as
    /// redis-rs's `Script::prepare_invoke` (which it replaces, so every
    /// call goes through [`Lua::run`]).
    pub(crate) fn prepare_invoke(&self) -> Invocation<'_> {
        Invocation {
            lua: self,
            keys: Vec::new(),
            args: Vec::new(),
        }
    }

    /// `EVALSHA <sha> <keys>`: the start of a call with `keys` keys, its
    /// keys and arguments to follow.
    pub(crate) fn evalsha(&self, keys: usize) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.script.get_hash()).arg(keys);
        cmd
    }

    /// Runs `cmd` (made by [`Lua::evalsha`]) on `conn`: at most once if the
    /// script is not idempotent, followed by `WAIT` in the same round trip
    /// when `acks` asks for replicas and the script writes, and sent once
    /// more after loading the script if the server does not know it
    /// (`NOSCRIPT`: restarted, flushed; the call did not run). Answers the
    /// reply and, with `WAIT`, how many replicas acknowledged.
    ///
    /// On a cluster, an answer that proves the call did not run and
    /// outlasted the connection's own redirects (a slot being migrated
    /// answers `TRYAGAIN` to a script whose keys it holds only some of,
    /// until the rest has moved; a node being failed over refuses) is sent
    /// again after a pause, doubling from 20 ms up to 250 ms, for up to
    /// [`RUN_PATIENCE`] (5 s).
    pub(crate) async fn run(
        &self,
        conn: &Conn,
        cmd: &Cmd,
        acks: Acks,
    ) -> RedisResult<(Value, Option<u32>)> {
        let mut pause = Duration::from_millis(20);
        let started = tokio::time::Instant::now();
        loop {
            let reply = self.run_once(conn, cmd, acks).await;
            match &reply {
                Err(e) if started.elapsed() + pause <= RUN_PATIENCE && conn.proves_not_run(e) => {
                    tracing::debug!(error = %e, "the cluster did not run the call; sending it again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(RUN_PAUSE_MAX);
                }
                _ => return reply,
            }
        }
    }

    /// One [`Lua::run`] send (and its reload on `NOSCRIPT`).
    async fn run_once(
        &self,
        conn: &Conn,
        cmd: &Cmd,
        acks: Acks,
    ) -> RedisResult<(Value, Option<u32>)> {
        let mut sending = if self.once {
            conn.at_most_once()
        } else {
            conn.clone()
        };
        let acks = if self.unacked { Acks::default() } else { acks };
        let mut reply = acks.query(cmd, &mut sending).await;
        if matches!(&reply, Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript))
        {
            metrics::counter!("locksmith_script_reloads_total").increment(1);
            // Loading is idempotent: the connection that resends may do it
            // (on a cluster it goes to every node).
            // Boxed: a rare path, kept out of every call's future.
            reply = Box::pin(async {
                let mut loading = conn.clone();
                match self.script.load_async(&mut loading).await {
                    Ok(_) => acks.query(cmd, &mut sending).await,
                    Err(e) => Err(e),
                }
            })
            .await;
        }
        reply
    }

    /// Several calls of this script bound for one cluster node, each with
    /// the keys of one slot (`calls`: the slot and the `EVALSHA`): sent as
    /// one pipeline, followed by one `WAIT` when `acks` asks for replicas
    /// (as [`Lua::run`]), to the node redis-rs has for the first call's
    /// slot. Answers one result per call, in order; with `WAIT`, its count
    /// goes with every call.
    ///
    /// A call the node proves it did not run (`MOVED`, `ASK`, `TRYAGAIN`,
    /// `NOSCRIPT`, ...; or the whole round trip refused) is sent again on
    /// its own through [`Lua::run`], which follows the cluster's redirects
    /// and loads the script: safe even for a script that is not idempotent,
    /// as the first send did not run. A `MOVED` also reloads the client's
    /// view of the nodes. Any other error of the round trip fails every
    /// call, as a single call's would.
    pub(crate) async fn run_pipelined(
        &self,
        conn: &Conn,
        calls: Vec<(Slot, Cmd)>,
        acks: Acks,
    ) -> Vec<Answer> {
        #[cfg(feature = "cluster")]
        if let Some(cluster) = conn.cluster() {
            return self.run_pipelined_at(cluster, conn, calls, acks).await;
        }
        // Not a cluster: nothing to group.
        let mut results = Vec::with_capacity(calls.len());
        for (_, cmd) in &calls {
            results.push(self.run(conn, cmd, acks).await);
        }
        results
    }

    /// [`Lua::run_pipelined`] on a cluster.
    #[cfg(feature = "cluster")]
    async fn run_pipelined_at(
        &self,
        cluster: &ClusterConn,
        conn: &Conn,
        calls: Vec<(Slot, Cmd)>,
        acks: Acks,
    ) -> Vec<Answer> {
        let Some(&(first, _)) = calls.first() else {
            return Vec::new();
        };
        let acks = if self.unacked { Acks::default() } else { acks };
        let sent = to_node(
            cluster,
            first,
            calls.iter().map(|(_, cmd)| cmd),
            acks,
            self.once,
        )
        .await;
        let (answers, acked) = match sent {
            Ok(replies) => replies,
            Err(e) if did_not_run(&e) => {
                let resends = calls.iter().map(|(_, cmd)| self.run(conn, cmd, acks));
                return futures_util::future::join_all(resends).await;
            }
            Err(e) => return calls.iter().map(|_| Err(e.clone())).collect(),
        };
        let mut results: Vec<Option<Answer>> = Vec::new();
        let mut again = Vec::new();
        for (i, answer) in answers.into_iter().enumerate() {
            match answer.extract_error() {
                Ok(value) => results.push(Some(Ok((value, acked)))),
                Err(e)
                    if did_not_run(&e)
                        || e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) =>
                {
                    if e.kind() == ErrorKind::Server(ServerErrorKind::Moved) {
                        cluster.moved();
                    }
                    results.push(None);
                    again.push(i);
                }
                Err(e) => results.push(Some(Err(e))),
            }
        }
        if !again.is_empty() {
            let resends = again.iter().map(|&i| self.run(conn, &calls[i].1, acks));
            let resent = futures_util::future::join_all(resends).await;
            for (i, result) in again.into_iter().zip(resent) {
                results[i] = Some(result);
            }
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(RedisError::from(std::io::Error::other("no answer")))))
            .collect()
    }

    /// Runs `cmd`, a call that declares no keys (a batch script's
    /// [`Lua::across`] variant), once on the primary redis-rs has for
    /// `slot`: at most once on the connection that never resends if the
    /// script is not idempotent, followed by `WAIT` in the same round trip
    /// when `acks` asks for replicas (as [`Lua::run`]). Answers `None` when
    /// the node proves the call did not run (a refused round trip, a node
    /// failing over, `NOSCRIPT`: the script is then loaded for the next
    /// call): the caller sends its requests another way.
    #[cfg(feature = "cluster")]
    pub(crate) async fn run_at(
        &self,
        cluster: &ClusterConn,
        slot: Slot,
        cmd: &Cmd,
        acks: Acks,
    ) -> Option<Answer> {
        let acks = if self.unacked { Acks::default() } else { acks };
        let (answers, acked) =
            match to_node(cluster, slot, std::iter::once(cmd), acks, self.once).await {
                Ok(replies) => replies,
                Err(e) if did_not_run(&e) => return None,
                Err(e) => return Some(Err(e)),
            };
        let answer = answers.into_iter().next().map(Value::extract_error);
        match answer? {
            Ok(value) => Some(Ok((value, acked))),
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                metrics::counter!("locksmith_script_reloads_total").increment(1);
                let mut loading = cluster.clone();
                if let Err(e) = self.script.load_async(&mut loading).await {
                    tracing::debug!(error = %e, "loading the cross-slot batch script failed");
                }
                None
            }
            // Refused before it ran: a redirect or refusal, or what Redis
            // checks up front for a script flagged as this one is (it may
            // write: `OOM` under `maxmemory`, `MISCONF`, `NOREPLICAS`). The
            // requests go as calls of their own slot, unflagged, where
            // those that write nothing (or only delete) still run.
            Err(e) if did_not_run(&e) || refused_up_front(&e) => None,
            Err(e) => Some(Err(e)),
        }
    }

    /// The script's name: the path of its file under `src/`, without
    /// `.lua`.
    pub(crate) fn name(&self) -> &'static str {
        self.name
    }

    /// The whole source, preludes included.
    pub(crate) fn source(&self) -> &str {
        &self.source
    }
}

/// Sends `cmds` in one round trip to the primary redis-rs has for `slot`
/// (on the connection that never resends when `once`), followed by one
/// `WAIT` when `acks` asks for replicas. Answers every command's reply
/// (its own error as `Value::ServerError`) and, with `WAIT`, how many
/// replicas acknowledged: a `WAIT` that failed counts none, so the callers
/// treat their writes as not acknowledged. An error of the whole round
/// trip comes back as `Err`.
#[cfg(feature = "cluster")]
async fn to_node<'a>(
    cluster: &ClusterConn,
    slot: Slot,
    cmds: impl Iterator<Item = &'a Cmd>,
    acks: Acks,
    once: bool,
) -> RedisResult<(Vec<Value>, Option<u32>)> {
    let mut pipeline = redis::pipe();
    for cmd in cmds {
        pipeline.add_command(cmd.clone());
    }
    let calls = pipeline.cmd_iter().count();
    let waits = acks.min > 0;
    if waits {
        pipeline
            .cmd("WAIT")
            .arg(acks.min)
            .arg(acks.timeout.as_millis() as u64);
    }
    let count = calls + usize::from(waits);
    let mut replies = cluster.pipeline_to(slot, pipeline, count, once).await?;
    if replies.len() != count {
        return Err(RedisError::from(std::io::Error::other(format!(
            "a pipeline of {count} commands got {} replies",
            replies.len()
        ))));
    }
    let acked = waits.then(|| match replies.pop() {
        Some(Value::Int(n)) => u32::try_from(n).unwrap_or(0),
        _ => 0,
    });
    Ok((replies, acked))
}

/// True for the errors Redis answers before running a flagged script
/// (`#!lua flags=...`) that may write: it did not run.
#[cfg(feature = "cluster")]
fn refused_up_front(e: &RedisError) -> bool {
    matches!(e.code(), Some("OOM" | "MISCONF" | "NOREPLICAS"))
}

/// One call of a [`Lua`] script being put together: keys and arguments in
/// the script's order.
pub(crate) struct Invocation<'a> {
    /// The script called.
    lua: &'a Lua,
    /// KEYS, encoded.
    keys: Vec<Vec<u8>>,
    /// ARGV, encoded.
    args: Vec<Vec<u8>>,
}

impl Invocation<'_> {
    /// Adds a key.
    pub(crate) fn key(&mut self, key: impl ToRedisArgs) -> &mut Self {
        self.keys.extend(key.to_redis_args());
        self
    }

    /// Adds an argument.
    pub(crate) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        self.args.extend(arg.to_redis_args());
        self
    }

    /// The script called.
    pub(crate) fn lua(&self) -> &Lua {
        self.lua
    }

    /// The `EVALSHA` command.
    pub(crate) fn cmd(&self) -> Cmd {
        let mut cmd = self.lua.evalsha(self.keys.len());
        for key in &self.keys {
            cmd.arg(key.as_slice());
        }
        for arg in &self.args {
            cmd.arg(arg.as_slice());
        }
        cmd
    }
}

impl Deref for Lua {
    type Target = Script;

    fn deref(&self) -> &Script {
        &self.script
    }
}

impl std::fmt::Debug for Lua {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lua")
            .field("name", &self.name)
            .field("sha", &self.script.get_hash())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preludes_come_once_after_the_token_helper() {
        let lua = Lua::compose("x", &[ANNOUNCE, TOKEN, ANNOUNCE], "return 1");
        assert!(lua.source().starts_with(TOKEN));
        assert_eq!(lua.source().matches("local function next_token").count(), 1);
        assert_eq!(lua.source().matches("local function announce").count(), 1);
        assert!(lua.source().ends_with("return 1"));
        assert_eq!(lua.name(), "x");
        #[cfg(feature = "cluster")]
        assert!(lua.across().is_none());
    }

    #[cfg(feature = "cluster")]
    #[test]
    fn a_batch_script_has_a_cross_slot_variant() {
        let lua = Lua::compose("x", &[BATCH, ANNOUNCE], "return 1").once();
        let across = lua.across().expect("a batch script has one");
        assert!(across
            .source()
            .starts_with("#!lua flags=allow-cross-slot-keys\n"));
        assert!(across.source().contains("local KEYS = {}"));
        assert!(!across.source().contains(BATCH));
        assert!(lua.source().contains(BATCH));
        assert!(across.source().ends_with("return 1"));
        assert_ne!(across.get_hash(), lua.get_hash());
        assert!(across.once && lua.once);
    }
}
