//! Checks on caller input, shared by every primitive, so bad values are
//! rejected with a clear message before anything reaches Redis.

use std::time::Duration;

use crate::error::{Error, Result};

/// The largest expiry Redis accepts for `PEXPIRE`/`SET PX` without
/// overflowing its internal millisecond clock arithmetic. Anything above is
/// refused locally rather than surfacing as a server error.
pub(crate) const MAX_LEASE: Duration = Duration::from_millis(i64::MAX as u64 / 2);

/// The shortest lease accepted. A lease is only useful if the holder has
/// time to act within it after the drift allowance (`lease × 1% + 2 ms`)
/// and a round trip; below this the local deadline would pass before the
/// grant's reply arrives.
pub(crate) const MIN_LEASE: Duration = Duration::from_millis(10);

/// The largest count accepted: Lua numbers are
/// doubles, exact up to 2^53, and the scripts compare counts as numbers.
pub(crate) const MAX_COUNT: u64 = 1 << 53;

/// Rejects a count of zero or above
/// [`MAX_COUNT`]; `what` names it in the message.
pub(crate) fn count(n: u64, what: &str) -> Result<()> {
    if n == 0 {
        return Err(Error::invalid(format!("{what} must be at least 1, got 0")));
    }
    if n > MAX_COUNT {
        return Err(Error::invalid(format!(
            "{what} must be at most {MAX_COUNT} (2^53), got {n}"
        )));
    }
    Ok(())
}

/// Rejects a count to set above [`MAX_COUNT`]; zero is
/// a valid count to set.
pub(crate) fn settable(n: u64, what: &str) -> Result<()> {
    if n > MAX_COUNT {
        return Err(Error::invalid(format!(
            "{what} must be at most {MAX_COUNT} (2^53), got {n}"
        )));
    }
    Ok(())
}

/// Rejects empty names and names longer than `max_len` bytes.
pub(crate) fn name(name: &str, max_len: usize) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid("name must not be empty"));
    }
    if name.len() > max_len {
        return Err(Error::invalid(format!(
            "name is {} bytes, more than the limit of {max_len}",
            name.len()
        )));
    }
    Ok(())
}

/// A key prefix: no `{` or `}` (it would change the hash tag of the names
/// it goes before), and room left for a name within `max_len`.
pub(crate) fn key_prefix(prefix: &str, max_len: usize) -> Result<()> {
    if prefix.contains(['{', '}']) {
        return Err(Error::invalid(format!(
            "key prefix {prefix:?} contains a brace: it would change the hash tag of every name it goes before"
        )));
    }
    if prefix.len() >= max_len {
        return Err(Error::invalid(format!(
            "key prefix is {} bytes, which leaves no room for a name within the limit of {max_len}",
            prefix.len()
        )));
    }
    Ok(())
}

/// On a Redis Cluster, rejects names whose auxiliary keys would land in
/// another slot than the name itself. Auxiliary names are `prefix:{NAME}`,
/// or `prefix:NAME` when NAME contains `{` (Redisson's rule). Without a
/// `{`, the wrapped `{NAME}` is a tag for all of NAME only if NAME holds no
/// `}` (in `prefix:{a}b}` the tag is `a`). With one, the slot is kept only
/// if NAME carries a real hash tag: a `{` followed later by a `}` with at
/// least one byte between them.
pub(crate) fn cluster_name(name: &str) -> Result<()> {
    let Some(open) = name.find('{') else {
        if name.contains('}') {
            return Err(Error::invalid(format!(
                "name {name:?} contains '}}' but no '{{': on a cluster its auxiliary keys (\"prefix:{{NAME}}\") would take the part before the '}}' as their hash tag and land in another slot; add a hash tag (\"{{tag}}\") or drop the brace"
            )));
        }
        return Ok(());
    };
    match name[open + 1..].find('}') {
        Some(len) if len > 0 => Ok(()),
        _ => Err(Error::invalid(format!(
            "name {name:?} contains '{{' but no hash tag (\"{{tag}}\" with something between the braces): on a cluster its keys would land in different slots; add a tag or drop the brace"
        ))),
    }
}

/// Rejects leases shorter than [`MIN_LEASE`] and leases beyond what Redis
/// accepts.
pub(crate) fn lease(lease: Duration) -> Result<()> {
    if lease < MIN_LEASE {
        return Err(Error::invalid(format!(
            "lease must be at least {MIN_LEASE:?} (the drift allowance alone is 2 ms), got {lease:?}"
        )));
    }
    if lease > MAX_LEASE {
        return Err(Error::invalid(format!(
            "lease {lease:?} is longer than Redis accepts ({MAX_LEASE:?})"
        )));
    }
    Ok(())
}

/// Turns a wait duration into a deadline, rejecting ones that overflow the
/// clock.
pub(crate) fn deadline(wait: Duration) -> Result<tokio::time::Instant> {
    tokio::time::Instant::now()
        .checked_add(wait)
        .ok_or_else(|| Error::invalid(format!("wait {wait:?} is too long")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(name("", 10).is_err());
        assert!(name("a", 10).is_ok());
        assert!(name("0123456789", 10).is_ok());
        assert!(name("0123456789a", 10).is_err());
    }

    #[test]
    fn cluster_names() {
        assert!(cluster_name("orders").is_ok());
        assert!(cluster_name("orders:{42}").is_ok());
        assert!(cluster_name("a{b}c{").is_ok());
        assert!(cluster_name("a{}b").is_err());
        assert!(cluster_name("a{b").is_err());
        assert!(cluster_name("a}{b").is_err());
        assert!(cluster_name("a}b").is_err());
        assert!(cluster_name("}").is_err());
        assert!(cluster_name("{a}b}").is_ok());
    }

    #[test]
    fn counts() {
        assert!(count(0, "permits").is_err());
        assert!(count(1, "permits").is_ok());
        assert!(count(MAX_COUNT, "permits").is_ok());
        assert!(count(MAX_COUNT + 1, "permits").is_err());
    }

    #[test]
    fn leases() {
        assert!(lease(Duration::ZERO).is_err());
        assert!(lease(Duration::from_micros(999)).is_err());
        assert!(lease(Duration::from_millis(3)).is_err());
        assert!(lease(Duration::from_millis(9)).is_err());
        assert!(lease(Duration::from_millis(10)).is_ok());
        assert!(lease(Duration::MAX).is_err());
    }

    #[test]
    fn deadlines() {
        assert!(deadline(Duration::from_secs(1)).is_ok());
        assert!(deadline(Duration::MAX).is_err());
    }
}
