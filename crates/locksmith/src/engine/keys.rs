//! Key and channel names, laid out exactly as Redisson lays them out.
//!
//! Redisson derives auxiliary names as `prefix:{NAME}` (or `prefix:NAME` when
//! NAME already carries a hash tag), so every key of one primitive lands in
//! the same Redis Cluster slot as NAME itself.

/// `prefix:{name}`, or `prefix:name` when `name` already contains `{`.
pub(crate) fn prefixed(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// The pub/sub channel a reentrant lock's release is announced on.
pub(crate) fn lock_channel(name: &str) -> String {
    prefixed("redisson_lock__channel", name)
}

/// The fencing counter of a lock, incremented on every grant from free.
pub(crate) fn lock_token(name: &str) -> String {
    prefixed("redisson_lock_token", name)
}

/// The channel a semaphore's permit changes are announced on (the message
/// is the new number of available permits).
pub(crate) fn semaphore_channel(name: &str) -> String {
    prefixed("redisson_sc", name)
}

/// `{name}:suffix`, or `name:suffix` when `name` already contains `{`
/// (Redisson's `suffixName`).
pub(crate) fn suffixed(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// The timeout zset of a permit-expirable semaphore: permit id -> expiry.
pub(crate) fn permit_timeouts(name: &str) -> String {
    suffixed(name, "timeout")
}

/// The channel a count-down latch announces on. Redisson always wraps the
/// name in braces here, even when it carries a hash tag of its own (on a
/// cluster such names are refused for latches: the channel would hash
/// elsewhere).
pub(crate) fn latch_channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}

/// The message a final release publishes (Redisson's `UNLOCK_MESSAGE`).
pub(crate) const UNLOCK_MESSAGE: &str = "0";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redisson_names() {
        assert_eq!(lock_channel("orders"), "redisson_lock__channel:{orders}");
        assert_eq!(lock_token("orders"), "redisson_lock_token:{orders}");
        assert_eq!(lock_channel("a{b}c"), "redisson_lock__channel:a{b}c");
        assert_eq!(semaphore_channel("db"), "redisson_sc:{db}");
        assert_eq!(permit_timeouts("db"), "{db}:timeout");
        assert_eq!(permit_timeouts("x{db}"), "x{db}:timeout");
        assert_eq!(
            latch_channel("boot"),
            "redisson_countdownlatch__channel__{boot}"
        );
    }
}
