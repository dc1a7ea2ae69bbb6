//! The catalogue of every script the crate runs, each declared with the
//! preludes it needs (composed once by `engine::lua`). A script's file
//! lives in its primitive's folder, next to the Rust that calls it, with
//! its KEYS/ARGV contract at the top.

use std::sync::LazyLock;

use crate::engine::lua::{Lua, ANNOUNCE, BATCH, HOLDS, RECEIPT};

/// `NAME (marks) = "path" after [preludes];` declares a script: its file
/// (`path.lua`), the preludes it needs, and marks from [`Lua`]'s builder:
/// `once` (not idempotent: never resent), `read` (writes nothing: no
/// `WAIT` behind it) and `unacked` (a write sent without `WAIT`: the
/// `SET NX` lock does not wait for replicas yet, see docs/topologies.md).
macro_rules! catalogue {
    ($( $name:ident $(($($mark:ident),+))? = $file:literal $( after [$($prelude:expr),+] )? ; )*) => {
        $(
            #[doc = concat!("`", $file, ".lua` and its preludes.")]
            pub(crate) static $name: LazyLock<Lua> = LazyLock::new(|| {
                Lua::compose($file, &[$($($prelude),+)?], include_str!(concat!($file, ".lua")))
                    $($(.$mark())+)?
            });
        )*
        /// Every script, for [`source`].
        static ALL: &[&LazyLock<Lua>] = &[$(&$name),*];
    };
}

/// `reenter(...)`: one more hold for an owner that has some (the lock's
/// and the fair lock's acquire).
const REENTER: &str = include_str!("lock/reentrant/reenter.lua");

catalogue! {
    LOCK_ACQUIRE = "lock/reentrant/acquire" after [BATCH, REENTER];
    LOCK_RELEASE = "lock/reentrant/release" after [BATCH, ANNOUNCE, RECEIPT];
    FORCE_UNLOCK (once) = "lock/reentrant/force_unlock" after [ANNOUNCE];
    LOCK_INFO (read) = "lock/reentrant/info";
    RENEW_FIELD = "lock/reentrant/renew" after [HOLDS];
    RENEW_READS = "lock/rw/renew" after [HOLDS];
    RENEW_TOKEN = "lock/simple/renew" after [HOLDS];
    RENEW_PERMIT = "semaphore/expirable/renew" after [HOLDS];
    SIMPLE_ACQUIRE (unacked) = "lock/simple/acquire";
    SIMPLE_RELEASE (unacked) = "lock/simple/release" after [ANNOUNCE, RECEIPT];
    MULTI_ACQUIRE = "lock/multi/acquire";
    FAIR_ACQUIRE = "lock/fair/acquire"
        after [BATCH, ANNOUNCE, REENTER, include_str!("lock/fair/common.lua")];
    FAIR_RELEASE = "lock/fair/release" after [ANNOUNCE, RECEIPT, include_str!("lock/fair/common.lua")];
    FAIR_LEAVE = "lock/fair/leave" after [ANNOUNCE, include_str!("lock/fair/common.lua")];
    FAIR_INFO (read) = "lock/fair/info";
    FAIR_FORCE_UNLOCK (once) = "lock/fair/force_unlock"
        after [ANNOUNCE, include_str!("lock/fair/common.lua")];
    RW_ACQUIRE = "lock/rw/acquire" after [BATCH, ANNOUNCE, include_str!("lock/rw/common.lua")];
    RW_RELEASE = "lock/rw/release" after [ANNOUNCE, RECEIPT, include_str!("lock/rw/common.lua")];
    RW_INFO (read) = "lock/rw/info";
    RW_FORCE_UNLOCK (once) = "lock/rw/force_unlock" after [ANNOUNCE];
    SEMAPHORE_ACQUIRE (once) = "semaphore/counting/acquire" after [BATCH];
    SEMAPHORE_UPDATE (once) = "semaphore/counting/update" after [ANNOUNCE];
    EXPIRABLE_ACQUIRE = "semaphore/expirable/acquire"
        after [BATCH, ANNOUNCE, include_str!("semaphore/expirable/common.lua")];
    EXPIRABLE_UPDATE (once) = "semaphore/expirable/update"
        after [ANNOUNCE, include_str!("semaphore/expirable/common.lua")];
    LATCH (once) = "latch/latch" after [ANNOUNCE];
    FENCED_WRITE = "fenced/write";
}

/// The whole source of one of the crate's Lua scripts, preludes included,
/// exactly as it is sent to Redis; `None` for an unknown name.
///
/// Names are the script files' paths under the crate's `src/`, without
/// `.lua`: `"lock/reentrant/acquire"`, `"lock/reentrant/release"`,
/// `"semaphore/counting/acquire"`, ... ([`script_names`] lists them). Meant
/// for tools that fire the scripts without the client around them (the
/// benchmark's raw ceiling) and for reading what runs on the server; the
/// KEYS/ARGV contract is at the top of each script's own part and may
/// change between versions.
///
/// ```
/// let acquire = locksmith::script_source("lock/reentrant/acquire").unwrap();
/// assert!(acquire.contains("next_token"));
/// assert!(locksmith::script_source("no/such/script").is_none());
/// ```
pub fn script_source(name: &str) -> Option<&'static str> {
    ALL.iter()
        .map(|lua| LazyLock::force(*lua))
        .find(|lua| lua.name() == name)
        .map(|lua| lua.source())
}

/// The names [`script_source`] answers for.
pub fn script_names() -> impl Iterator<Item = &'static str> {
    ALL.iter().map(|lua| LazyLock::force(*lua).name())
}
