//! Checks on caller input, shared by every primitive, so bad values are
//! rejected with a clear message before anything reaches Redis.

use std::time::Duration;

use crate::error::{Error, Result};

/// The largest expiry Redis accepts for `PEXPIRE`/`SET PX` without
/// overflowing its internal millisecond clock arithmetic. Anything above is
/// refused locally rather than surfacing as a server error.
pub(crate) const MAX_LEASE: Duration = Duration::from_millis(i64::MAX as u64 / 2);

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

/// Rejects zero leases, leases with sub-millisecond precision only, and
/// leases beyond what Redis accepts.
pub(crate) fn lease(lease: Duration) -> Result<()> {
    if lease.as_millis() == 0 {
        return Err(Error::invalid(format!(
            "lease must be at least 1ms, got {lease:?}"
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
    fn leases() {
        assert!(lease(Duration::ZERO).is_err());
        assert!(lease(Duration::from_micros(999)).is_err());
        assert!(lease(Duration::from_millis(1)).is_ok());
        assert!(lease(Duration::MAX).is_err());
    }

    #[test]
    fn deadlines() {
        assert!(deadline(Duration::from_secs(1)).is_ok());
        assert!(deadline(Duration::MAX).is_err());
    }
}
