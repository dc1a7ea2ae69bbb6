//! Durations on the lab's command line (`500ms`, `3s`, `6m`), parsed by
//! humantime.

use std::time::Duration;

/// Parses a duration, rejecting zero (a zero-long phase or lease is a
/// mistake, not a request).
pub(crate) fn parse_nonzero(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("{s:?} is not a duration ({e}); write 500ms, 3s or 2m"))?;
    if d.is_zero() {
        return Err("must be greater than zero".into());
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_zero() {
        assert_eq!(parse_nonzero("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_nonzero("6m"), Ok(Duration::from_secs(360)));
        assert!(parse_nonzero("0s").is_err());
        assert!(parse_nonzero("fast").is_err());
    }
}
