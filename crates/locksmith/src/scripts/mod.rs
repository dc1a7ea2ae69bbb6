//! The Lua scripts, one file per operation, each with its KEYS/ARGV contract
//! at the top. `Script` hashes each once; calls use EVALSHA and load the
//! script on NOSCRIPT.

use std::sync::LazyLock;

use redis::Script;

macro_rules! script {
    ($name:ident, $file:literal) => {
        #[doc = concat!("The script in `", $file, "`.")]
        pub(crate) static $name: LazyLock<Script> =
            LazyLock::new(|| Script::new(include_str!($file)));
    };
}

script!(LOCK_ACQUIRE, "lock_acquire.lua");
script!(LOCK_RELEASE, "lock_release.lua");
script!(RENEW, "renew.lua");
script!(FORCE_UNLOCK, "force_unlock.lua");
script!(LOCK_INFO, "lock_info.lua");
script!(SIMPLE_ACQUIRE, "simple_acquire.lua");
script!(SIMPLE_RELEASE, "simple_release.lua");
