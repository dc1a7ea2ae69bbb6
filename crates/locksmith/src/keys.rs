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
    }
}
