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

use redis::Script;

/// `next_token(key)`: the fencing-token helper every script starts with.
pub(crate) const TOKEN: &str = include_str!("token.lua");

/// `announce(channel, message, mode)` and `listeners(channel, mode)`.
pub(crate) const ANNOUNCE: &str = include_str!("announce.lua");

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
