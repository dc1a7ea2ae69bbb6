//! The duration syntax of the command line: an integer and a unit
//! (`500ms`, `2s`, `1m`, `1h`), or a bare `0`.
//!
//! Deliberately small: one number, one unit, so `--lease 5` (seconds?
//! milliseconds?) is an error instead of a guess.

use std::time::Duration;

/// Parses `500ms`, `2s`, `1m`, `1h` or `0`.
pub(crate) fn parse(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    if digits.is_empty() {
        return Err(format!(
            "{s:?} is not a duration; use a whole number and a unit: 500ms, 2s, 1m, 1h"
        ));
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is too large a duration"))?;
    let per_unit = match unit {
        "ms" => Duration::from_millis(1),
        "s" => Duration::from_secs(1),
        "m" => Duration::from_secs(60),
        "h" => Duration::from_secs(3600),
        "" => return Err(format!("{s:?} has no unit; write {s}ms or {s}s")),
        _ => return Err(format!("{s:?} has an unknown unit; use ms, s, m or h")),
    };
    u32::try_from(n)
        .ok()
        .and_then(|n| per_unit.checked_mul(n))
        .ok_or_else(|| format!("{s:?} is too large a duration"))
}

/// Like [`parse`], rejecting zero (for leases).
pub(crate) fn parse_nonzero(s: &str) -> Result<Duration, String> {
    let d = parse(s)?;
    if d.is_zero() {
        return Err("must be greater than zero".into());
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_forms() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn rejects_garbage_negative_unitless_and_huge() {
        for bad in [
            "",
            "-1s",
            "1.5s",
            "5",
            "s",
            "2 days",
            "10y",
            "99999999999999h",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_nonzero("0").is_err());
        assert!(parse_nonzero("0ms").is_err());
        assert!(parse_nonzero("1ms").is_ok());
    }
}
