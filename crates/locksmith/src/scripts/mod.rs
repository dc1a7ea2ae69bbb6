//! The Lua scripts, one file per operation, each with its KEYS/ARGV contract
//! at the top. `Script` hashes each once; calls use EVALSHA and load the
//! script on NOSCRIPT. Every script starts with `token.lua` (fencing
//! tokens that survive the loss of the counter); scripts that announce
//! changes then have the shared prelude `announce.lua` (the publish-mode
//! switch and the listener count).

use std::sync::LazyLock;

use redis::Script;

macro_rules! script {
    ($name:ident, $file:literal) => {
        #[doc = concat!("The script in `", $file, "`.")]
        pub(crate) static $name: LazyLock<Script> =
            LazyLock::new(|| Script::new(concat!(include_str!("token.lua"), include_str!($file))));
    };
    ($name:ident, expirable $file:literal) => {
        #[doc = concat!("The script in `", $file, "`, after `announce.lua` and `expirable.lua`.")]
        pub(crate) static $name: LazyLock<Script> = LazyLock::new(|| {
            Script::new(concat!(
                include_str!("token.lua"),
                include_str!("announce.lua"),
                include_str!("expirable.lua"),
                include_str!($file)
            ))
        });
    };
    ($name:ident, fair $file:literal) => {
        #[doc = concat!("The script in `", $file, "`, after `announce.lua` and `fair.lua`.")]
        pub(crate) static $name: LazyLock<Script> = LazyLock::new(|| {
            Script::new(concat!(
                include_str!("token.lua"),
                include_str!("announce.lua"),
                include_str!("fair.lua"),
                include_str!($file)
            ))
        });
    };
    ($name:ident, rw $file:literal) => {
        #[doc = concat!("The script in `", $file, "`, after `announce.lua` and `rw.lua`.")]
        pub(crate) static $name: LazyLock<Script> = LazyLock::new(|| {
            Script::new(concat!(
                include_str!("token.lua"),
                include_str!("announce.lua"),
                include_str!("rw.lua"),
                include_str!($file)
            ))
        });
    };
    ($name:ident, announcing $file:literal) => {
        #[doc = concat!("The script in `", $file, "`, after `announce.lua`.")]
        pub(crate) static $name: LazyLock<Script> = LazyLock::new(|| {
            Script::new(concat!(
                include_str!("token.lua"),
                include_str!("announce.lua"),
                include_str!($file)
            ))
        });
    };
}

script!(LOCK_ACQUIRE, "lock_acquire.lua");
script!(LOCK_RELEASE, announcing "lock_release.lua");
script!(RENEW, "renew.lua");
script!(FORCE_UNLOCK, announcing "force_unlock.lua");
script!(LOCK_INFO, "lock_info.lua");
script!(SIMPLE_ACQUIRE, "simple_acquire.lua");
script!(SIMPLE_RELEASE, announcing "simple_release.lua");
script!(SEMAPHORE_ACQUIRE, "semaphore_acquire.lua");
script!(SEMAPHORE_UPDATE, announcing "semaphore_update.lua");
script!(LATCH, announcing "latch.lua");
script!(EXPIRABLE_ACQUIRE, expirable "expirable_acquire.lua");
script!(EXPIRABLE_UPDATE, expirable "expirable_update.lua");
script!(FAIR_ACQUIRE, fair "fair_acquire.lua");
script!(FAIR_RELEASE, fair "fair_release.lua");
script!(FAIR_LEAVE, fair "fair_leave.lua");
script!(FAIR_INFO, "fair_info.lua");
script!(RW_ACQUIRE, rw "rw_acquire.lua");
script!(RW_RELEASE, rw "rw_release.lua");
script!(RW_INFO, "rw_info.lua");
script!(FENCED_WRITE, "fenced_write.lua");
script!(MULTI_ACQUIRE, "multi_acquire.lua");
