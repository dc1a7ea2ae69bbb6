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

use redis::{Cmd, RedisResult, Script, ToRedisArgs, Value};

use crate::engine::conn::Acks;
use crate::engine::topology::Conn;

/// `next_token(key)`: the fencing-token helper every script starts with.
pub(crate) const TOKEN: &str = include_str!("token.lua");

/// `announce(channel, message, mode)` and `listeners(channel, mode)`.
pub(crate) const ANNOUNCE: &str = include_str!("announce.lua");

/// `each_request(nkeys, nargs, request)`: the loop of every batch script.
pub(crate) const BATCH: &str = include_str!("batch.lua");

/// `each_hold(renew)`: the loop of every renewal script.
pub(crate) const HOLDS: &str = include_str!("holds.lua");

/// `leave_receipt(key, field, token, ttl)` and `gone_answer(key, field,
/// expected, token)`: the release receipts of `engine::hold`.
pub(crate) const RECEIPT: &str = include_str!("receipt.lua");

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
}

impl Lua {
    /// `TOKEN`, then each of `preludes` once (in order), then `body`.
    pub(crate) fn compose(name: &'static str, preludes: &[&str], body: &str) -> Lua {
        let mut source = String::with_capacity(
            TOKEN.len() + preludes.iter().map(|p| p.len()).sum::<usize>() + body.len(),
        );
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
        }
    }

    /// Marks the script as not idempotent: sent at most once.
    pub(crate) fn once(mut self) -> Lua {
        self.once = true;
        self
    }

    /// Marks the script as a read: no `WAIT` behind it.
    pub(crate) fn read(self) -> Lua {
        self.unacked()
    }

    /// Marks the script as sent without `WAIT` although it writes.
    pub(crate) fn unacked(mut self) -> Lua {
        self.unacked = true;
        self
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
    pub(crate) async fn run(
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
            // (on a cluster it goes to every primary).
            let mut loading = conn.clone();
            reply = match self.script.load_async(&mut loading).await {
                Ok(_) => acks.query(cmd, &mut sending).await,
                Err(e) => Err(e),
            };
        }
        reply
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
    }
}
