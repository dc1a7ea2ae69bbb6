//! Latency percentiles and Redis `INFO commandstats` snapshots.

use std::collections::HashMap;
use std::time::Duration;

use redis::aio::MultiplexedConnection;

/// A sorted sample of latencies.
#[derive(Debug, Clone, Default)]
pub(crate) struct Latencies {
    /// Sorted ascending, so percentiles are index look-ups.
    sorted: Vec<Duration>,
}

impl Latencies {
    /// Sorts `samples` once.
    pub(crate) fn new(mut samples: Vec<Duration>) -> Self {
        samples.sort_unstable();
        Latencies { sorted: samples }
    }

    /// Number of samples.
    pub(crate) fn len(&self) -> usize {
        self.sorted.len()
    }

    /// The `p`-th percentile (nearest rank), zero when empty.
    pub(crate) fn percentile(&self, p: f64) -> Duration {
        if self.sorted.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * self.sorted.len() as f64).ceil() as usize;
        self.sorted[rank.clamp(1, self.sorted.len()) - 1]
    }

    /// The median.
    pub(crate) fn p50(&self) -> Duration {
        self.percentile(50.0)
    }

    /// The 99th percentile.
    pub(crate) fn p99(&self) -> Duration {
        self.percentile(99.0)
    }

    /// The largest sample.
    pub(crate) fn max(&self) -> Duration {
        self.sorted.last().copied().unwrap_or_default()
    }
}

/// Calls and server time per command name (`evalsha`, `set`, ...) since
/// the server started.
#[derive(Debug, Clone, Default)]
pub(crate) struct CommandStats {
    /// Calls per command.
    calls: HashMap<String, u64>,
    /// Microseconds the server spent per command (for scripts, including
    /// the commands they ran).
    usec: HashMap<String, u64>,
}

impl CommandStats {
    /// Reads `INFO commandstats` of every node in `nodes` and adds them
    /// up (the primaries of a cluster; the one server elsewhere).
    pub(crate) async fn read(nodes: &[MultiplexedConnection]) -> redis::RedisResult<Self> {
        let mut total = CommandStats::default();
        for node in nodes {
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query_async(&mut node.clone())
                .await?;
            let one = Self::parse(&info);
            for (name, n) in one.calls {
                *total.calls.entry(name).or_default() += n;
            }
            for (name, n) in one.usec {
                *total.usec.entry(name).or_default() += n;
            }
        }
        Ok(total)
    }

    /// Parses lines like `cmdstat_evalsha:calls=12,usec=34,...`.
    fn parse(info: &str) -> Self {
        let mut stats = CommandStats::default();
        for line in info.lines() {
            let Some(rest) = line.strip_prefix("cmdstat_") else {
                continue;
            };
            let Some((name, fields)) = rest.split_once(':') else {
                continue;
            };
            let field = |key: &str| -> u64 {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(key))
                    .and_then(|n| n.trim().parse().ok())
                    .unwrap_or(0)
            };
            stats.calls.insert(name.to_owned(), field("calls="));
            stats.usec.insert(name.to_owned(), field("usec="));
        }
        stats
    }

    /// Calls of `name` between `before` and `self`.
    pub(crate) fn since(&self, before: &CommandStats, name: &str) -> u64 {
        let now = self.calls.get(name).copied().unwrap_or(0);
        now.saturating_sub(before.calls.get(name).copied().unwrap_or(0))
    }

    /// Server microseconds spent in `names` between `before` and `self`.
    pub(crate) fn usec_since(&self, before: &CommandStats, names: &[&str]) -> u64 {
        names
            .iter()
            .map(|n| {
                let now = self.usec.get(*n).copied().unwrap_or(0);
                now.saturating_sub(before.usec.get(*n).copied().unwrap_or(0))
            })
            .sum()
    }

    /// Sum of [`CommandStats::since`] over `names`.
    pub(crate) fn since_all(&self, before: &CommandStats, names: &[&str]) -> u64 {
        names.iter().map(|n| self.since(before, n)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let l = Latencies::new((1..=100).rev().map(Duration::from_millis).collect());
        assert_eq!(l.p50(), Duration::from_millis(50));
        assert_eq!(l.p99(), Duration::from_millis(99));
        assert_eq!(l.max(), Duration::from_millis(100));
        assert_eq!(Latencies::default().p99(), Duration::ZERO);
    }

    #[test]
    fn parses_commandstats() {
        let before = CommandStats::parse("# Commandstats\r\ncmdstat_set:calls=3,usec=9\r\n");
        let after = CommandStats::parse(
            "# Commandstats\r\ncmdstat_set:calls=10,usec=20,usec_per_call=2.00\r\n\
             cmdstat_evalsha:calls=4,usec=1\r\ncmdstat_client|setname:calls=1\r\n",
        );
        assert_eq!(after.since(&before, "set"), 7);
        assert_eq!(after.since(&before, "evalsha"), 4);
        assert_eq!(after.since_all(&before, &["set", "evalsha", "nope"]), 11);
        assert_eq!(after.usec_since(&before, &["set", "evalsha"]), 12);
    }
}
