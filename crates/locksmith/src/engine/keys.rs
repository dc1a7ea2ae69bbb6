//! How auxiliary key and channel names derive from a primitive's name,
//! exactly as Redisson derives them (each primitive picks its prefixes and
//! suffixes).
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

/// `{name}:suffix`, or `name:suffix` when `name` already contains `{`
/// (Redisson's `suffixName`).
pub(crate) fn suffixed(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redisson_layout() {
        assert_eq!(prefixed("p", "orders"), "p:{orders}");
        assert_eq!(prefixed("p", "a{b}c"), "p:a{b}c");
        assert_eq!(suffixed("db", "timeout"), "{db}:timeout");
        assert_eq!(suffixed("x{db}", "timeout"), "x{db}:timeout");
    }
}
