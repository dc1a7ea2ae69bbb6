//! Small synchronous helpers for asking nodes about their state, and a
//! bounded wait loop that reports the last state it saw when it gives up.

use std::collections::HashMap;
use std::io;
use std::time::{Duration, Instant};

/// Bounds connecting to and each reply of an admin connection, so a frozen
/// or dead node makes a probe fail instead of hanging the wait loop.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(2);

/// Pause between two probes of a wait loop.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// A synchronous connection to `addr` (`host:port`) whose connect, reads and
/// writes are all bounded.
pub(crate) fn connect(addr: &str) -> redis::RedisResult<redis::Connection> {
    let conn = redis::Client::open(format!("redis://{addr}"))?
        .get_connection_with_timeout(ADMIN_TIMEOUT)?;
    conn.set_read_timeout(Some(ADMIN_TIMEOUT))?;
    conn.set_write_timeout(Some(ADMIN_TIMEOUT))?;
    Ok(conn)
}

/// Runs one command on `addr` on a fresh bounded connection; errors become
/// strings that name the node, ready for a wait loop's state report.
pub(crate) fn query<T: redis::FromRedisValue>(addr: &str, cmd: &redis::Cmd) -> Result<T, String> {
    let mut conn = connect(addr).map_err(|e| format!("{addr}: {e}"))?;
    cmd.query(&mut conn).map_err(|e| format!("{addr}: {e}"))
}

/// `INFO <section>` (or `CLUSTER INFO` style text) as a key -> value map.
pub(crate) fn parse_info(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|line| line.trim().split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// `INFO <section>` of the node at `addr`, parsed.
pub(crate) fn info(addr: &str, section: &str) -> Result<HashMap<String, String>, String> {
    let text: String = query(addr, redis::cmd("INFO").arg(section))?;
    Ok(parse_info(&text))
}

/// Polls `probe` until it returns `Ok`, for at most `timeout`.
///
/// `probe` answers `Err(state)` while the condition does not hold yet; the
/// last state is put into the timeout error so a failed wait says why.
pub(crate) fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> Result<T, String>,
) -> io::Result<T> {
    let started = Instant::now();
    let mut last = String::from("never probed");
    // Bounded in count as well as time, in case probes return instantly.
    let max_probes = (timeout.as_millis() / POLL_INTERVAL.as_millis()).max(1) + 1;
    for _ in 0..max_probes {
        match probe() {
            Ok(value) => return Ok(value),
            Err(state) => last = state,
        }
        if started.elapsed() >= timeout {
            break;
        }
        std::thread::sleep(POLL_INTERVAL);
    }
    Err(io::Error::new(
        io::ErrorKind::TimedOut,
        format!("{what}: not done after {timeout:?}; last state: {last}"),
    ))
}
