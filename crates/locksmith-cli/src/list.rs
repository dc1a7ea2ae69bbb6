//! `locksmith list`: finds locksmith and Redisson objects with SCAN (never
//! KEYS; on a cluster, on every primary) and shows each one's kind,
//! holders, lease left and waiters.

use std::time::Duration;

use locksmith::Client;
use redis::aio::ConnectionLike;

use crate::exit::{self, CliError};

/// Arguments of `locksmith list`.
#[derive(Debug, clap::Args)]
pub(crate) struct ListArgs {
    /// Only keys matching this glob (SCAN MATCH), e.g. 'orders:*'.
    #[arg(long, value_name = "GLOB", default_value = "*")]
    pattern: String,
    /// One JSON array instead of a table.
    #[arg(long)]
    json: bool,
    /// Stop after this many objects.
    #[arg(long, value_name = "N", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    limit: u64,
    /// Stop after examining this many keys (hashes and strings; others
    /// are never fetched), so a huge database is not walked whole.
    #[arg(long, value_name = "N", default_value_t = 1_000_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_keys: u64,
}

/// Longest string a locksmith object stores (a count, or a simple lock's
/// 32-digit token): longer values are not fetched.
const MAX_STRING: u64 = 32;
/// Most fields a lock hash is expected to have: larger hashes are not
/// fetched.
const MAX_FIELDS: u64 = 1_000;

/// One object found.
#[derive(Debug, serde::Serialize)]
struct Object {
    name: String,
    kind: &'static str,
    /// (owner, hold count), for locks.
    holders: Vec<(String, u64)>,
    /// Permits available or a latch's count, for counters.
    #[serde(skip_serializing_if = "Option::is_none")]
    count: Option<i64>,
    remaining_lease_ms: Option<u64>,
    /// Owners queued (fair lock), writers waiting (read-write lock), or
    /// clients subscribed to the object's channel (others): the waiters.
    waiters: u64,
    /// The node that holds it (cluster).
    node: String,
}

/// Keys that belong to another object (its queue, timeouts, counter, a
/// release receipt).
fn is_part(key: &str) -> bool {
    [
        "redisson_lock_token:",
        "redisson_lock_queue:",
        "redisson_lock_timeout:",
    ]
    .iter()
    .any(|p| key.starts_with(p))
        || key.contains(":rwlock_timeout")
        || key.ends_with(":locksmith_writers")
        || key.ends_with(":locksmith_give_up")
        || key.contains(":locksmith_released:")
}

/// True for a Redisson/locksmith owner field, `<uuid>:<id>`.
fn is_owner(field: &str) -> bool {
    match field.split_once(':') {
        Some((uuid, id)) => {
            uuid.len() == 36
                && uuid.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
                && !id.is_empty()
        }
        None => false,
    }
}

/// A name's companion key: `{NAME}:suffix`, or `NAME:suffix` when the name
/// has a hash tag already.
pub(crate) fn suffixed(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// A companion key with a prefix: `prefix:{NAME}` (or `prefix:NAME`).
pub(crate) fn prefixed(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// Why one node's scan did not finish: what to say, and the exit code it
/// earns.
struct Unfinished {
    what: String,
    code: u8,
}

impl Unfinished {
    /// A Redis error while `doing` something on `node`: exit 77 for a
    /// refused right (`NOPERM`), 69 for anything else (no answer, a lost
    /// connection, a cluster moving or failing over).
    fn redis(node: &str, doing: &str, e: &redis::RedisError) -> Self {
        Unfinished {
            what: format!("{node}: {doing}: {e}"),
            code: narrowed(&CliError::Lock(e.clone().into())),
        }
    }
}

/// 77 for an error that is a refused login or right, 69 for any other: a
/// node that could not be scanned, whatever the cause, leaves the listing
/// incomplete.
fn narrowed(e: &CliError) -> u8 {
    match e.exit_code() {
        exit::NOPERM => exit::NOPERM,
        _ => exit::UNAVAILABLE,
    }
}

/// Runs `list` against `url`.
pub(crate) async fn list(conn: &crate::conn::ConnArgs, args: ListArgs) -> Result<u8, CliError> {
    let client = conn.connect().await?;
    // One scan per node: on a cluster every primary (own connections),
    // otherwise the client's own connection (its database, credentials,
    // and the current primary behind Sentinel).
    let mut found = Vec::new();
    let mut unfinished = Vec::new();
    let mut examined = 0u64;
    let mut truncated = false;
    if client.topology() == locksmith::Topology::Cluster {
        let (addrs, unserved) = primaries(&client).await?;
        unfinished.extend(unserved);
        for addr in addrs {
            let scanned = match client.node_connection(&addr).await {
                Ok(mut conn) => scan(&mut conn, &addr, &args, &mut found, &mut examined).await,
                Err(e) => {
                    let what = format!("{addr}: {e}");
                    Err(Unfinished {
                        code: narrowed(&CliError::Lock(e)),
                        what,
                    })
                }
            };
            match scanned {
                Ok(cut) => truncated = cut,
                Err(e) => unfinished.push(e),
            }
            if truncated {
                break;
            }
        }
    } else {
        let addr = client.addr();
        let mut conn = client.connection();
        // Behind Sentinel the connection follows a failover, and a plain
        // one reconnects after a restart: a cursor then goes on over
        // another server's keys. The server's run id, before and after,
        // tells.
        let scanned = async {
            let before = run_id(&mut conn)
                .await
                .map_err(|e| Unfinished::redis(addr, "INFO", &e))?;
            let cut = scan(&mut conn, addr, &args, &mut found, &mut examined).await?;
            let after = run_id(&mut conn)
                .await
                .map_err(|e| Unfinished::redis(addr, "INFO", &e))?;
            if before != after {
                return Err(Unfinished {
                    what: format!(
                        "{addr}: the server changed during the scan (a failover or a restart); \
                         run list again"
                    ),
                    code: exit::UNAVAILABLE,
                });
            }
            Ok(cut)
        };
        match scanned.await {
            Ok(cut) => truncated = cut,
            Err(e) => unfinished.push(e),
        }
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found.dedup_by(|a, b| a.name == b.name);
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&found).unwrap_or_default()
        );
    } else if found.is_empty() {
        println!("no locksmith or Redisson objects match {:?}", args.pattern);
    } else {
        println!(
            "{:<32} {:<17} {:>7} {:>10} {:>8}  holders",
            "name", "kind", "count", "lease", "waiters"
        );
        for o in &found {
            let holders: Vec<String> = o.holders.iter().map(|(h, n)| format!("{h} x{n}")).collect();
            println!(
                "{:<32} {:<17} {:>7} {:>10} {:>8}  {}",
                o.name,
                o.kind,
                o.count.map_or("-".into(), |c| c.to_string()),
                o.remaining_lease_ms.map_or("-".into(), |ms| format!(
                    "{:.1?}",
                    Duration::from_millis(ms)
                )),
                o.waiters,
                holders.join(", ")
            );
        }
    }
    if truncated {
        eprintln!(
            "locksmith: listing stopped early (--limit {} objects or --max-keys {} keys examined)",
            args.limit, args.max_keys
        );
    }
    if !unfinished.is_empty() {
        // What was found is shown, but the listing is incomplete: say so
        // and fail, rather than pass a short listing off as the whole.
        let what: Vec<&str> = unfinished.iter().map(|u| u.what.as_str()).collect();
        eprintln!(
            "locksmith: could not scan {} (the listing above is incomplete)",
            what.join("; ")
        );
        // A refused right is the one to fix first: it says so whichever
        // node it came from.
        let code = unfinished
            .iter()
            .map(|u| u.code)
            .find(|&c| c == exit::NOPERM)
            .unwrap_or(exit::UNAVAILABLE);
        return Ok(code);
    }
    Ok(0)
}

/// The server's run id (`INFO server`), which changes when another server
/// answers or the same one restarted; `None` where the server does not
/// say (`INFO` refused by the ACL or unknown to a proxy, no `run_id`
/// line), which leaves that check out. Other errors are errors.
async fn run_id(conn: &mut (impl ConnectionLike + Send)) -> redis::RedisResult<Option<String>> {
    match redis::cmd("INFO")
        .arg("server")
        .query_async::<String>(conn)
        .await
    {
        Ok(text) => Ok(text
            .lines()
            .find_map(|l| l.strip_prefix("run_id:"))
            .map(|id| id.trim().to_owned())),
        Err(e) if e.code() == Some("NOPERM") || is_unknown_command(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether `e` is a server's "unknown command / subcommand" reply.
fn is_unknown_command(e: &redis::RedisError) -> bool {
    e.code() == Some("ERR") && e.to_string().to_lowercase().contains("unknown")
}

/// Scans one node for hashes and strings matching the pattern (SCAN ...
/// TYPE, so other keys are never touched) and inspects each; answers
/// whether a limit cut the listing short. A key that changed meanwhile
/// (gone, another type: the server answers with an error reply) or
/// cannot be read (binary) is skipped. A lost or late reply ends this
/// node's scan with an error: the listing would otherwise be silently
/// short.
async fn scan(
    conn: &mut (impl ConnectionLike + Send),
    addr: &str,
    args: &ListArgs,
    found: &mut Vec<Object>,
    examined: &mut u64,
) -> Result<bool, Unfinished> {
    for kind in ["hash", "string"] {
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&args.pattern)
                .arg("COUNT")
                .arg(1000)
                .arg("TYPE")
                .arg(kind)
                .query_async(conn)
                .await
                .map_err(|e| Unfinished::redis(addr, "SCAN", &e))?;
            for key in keys {
                let Ok(key) = String::from_utf8(key) else {
                    continue;
                };
                if is_part(&key) {
                    continue;
                }
                *examined += 1;
                match inspect(conn, &key, kind, addr).await {
                    Ok(Some(object)) => found.push(object),
                    Ok(None) => {}
                    Err(e) if is_changed(&e) => {}
                    Err(e) => return Err(Unfinished::redis(addr, &format!("reading {key}"), &e)),
                }
                if found.len() as u64 >= args.limit || *examined >= args.max_keys {
                    return Ok(true);
                }
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(false)
}

/// Whether `e` says the key changed between SCAN and its reads: replaced
/// by a key of another type (a deleted key reads as empty, no error).
/// Every other error, a server's included (`MOVED` after a failover,
/// `CLUSTERDOWN`, `LOADING`, `BUSY`, `NOPERM`), ends the node's scan.
fn is_changed(e: &redis::RedisError) -> bool {
    e.code() == Some("WRONGTYPE")
}

/// `command companion` for `key`'s companion key (a fair queue, a permit
/// zset, a fencing counter), with a key of another type read as nothing
/// there. On a cluster a companion in another slot than its object (a
/// name whose own `{...}` is empty or unclosed, so the companion hashes
/// elsewhere) is answered `MOVED`: it belongs to no object of ours, also
/// nothing there. A `MOVED` or `ASK` for a companion in the object's own
/// slot (a failover or a migration between two reads) and every other
/// error stay errors.
async fn companion<T: redis::FromRedisValue + Default>(
    conn: &mut (impl ConnectionLike + Send),
    key: &str,
    command: &str,
    companion: &str,
) -> redis::RedisResult<T> {
    match redis::cmd(command).arg(companion).query_async(conn).await {
        Err(e) if is_changed(&e) => Ok(T::default()),
        Err(e) if matches!(e.code(), Some("MOVED" | "ASK")) => {
            let own: u16 = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(key)
                .query_async(conn)
                .await?;
            let theirs: u16 = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(companion)
                .query_async(conn)
                .await?;
            if own == theirs {
                Err(e)
            } else {
                Ok(T::default())
            }
        }
        other => other,
    }
}

/// The primaries to scan on a cluster (from `CLUSTER NODES` through the
/// client): every primary that serves slots. Slots no primary with an
/// address serves (a primary still in its handshake, slots left
/// unassigned while the cluster fails over or reshards) come back as
/// unfinished: their keys cannot be listed. A primary without slots (a
/// failed one not yet forgotten) has no keys and is left out.
async fn primaries(client: &Client) -> Result<(Vec<String>, Vec<Unfinished>), CliError> {
    let mut conn = client.connection();
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut conn)
        .await
        .map_err(|e| CliError::Lock(e.into()))?;
    Ok(plan(&nodes))
}

/// [`primaries`] from the text of `CLUSTER NODES`.
fn plan(nodes: &str) -> (Vec<String>, Vec<Unfinished>) {
    let mut addrs = Vec::new();
    let mut unfinished = Vec::new();
    let mut served = 0usize;
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let (Some(id), Some(addr), Some(flags)) = (fields.first(), fields.get(1), fields.get(2))
        else {
            continue;
        };
        if !flags.split(',').any(|f| f == "master") {
            continue;
        }
        let slots: usize = fields
            .get(8..)
            .unwrap_or_default()
            .iter()
            .map(|r| slot_count(r))
            .sum();
        if slots == 0 {
            continue;
        }
        if flags.contains("noaddr") || flags.contains("handshake") {
            unfinished.push(Unfinished {
                what: format!("primary {id} (serving {slots} slots) has no address yet"),
                code: exit::UNAVAILABLE,
            });
            continue;
        }
        served += slots;
        let hostport = addr.split('@').next().unwrap_or(addr);
        // IPv6 addresses come unbracketed: host is everything before the
        // last colon.
        addrs.push(match hostport.rsplit_once(':') {
            Some((host, port)) if host.contains(':') => format!("[{host}]:{port}"),
            _ => hostport.to_owned(),
        });
    }
    if served < SLOTS {
        unfinished.push(Unfinished {
            what: format!(
                "{} of {SLOTS} slots have no primary to scan (the cluster is failing over or \
                 resharding)",
                SLOTS - served
            ),
            code: exit::UNAVAILABLE,
        });
    }
    (addrs, unfinished)
}

/// Slots in a Redis Cluster.
const SLOTS: usize = 16384;

/// How many slots one slot field of `CLUSTER NODES` names: `N` or `A-B`;
/// a migration in progress (`[N->-id]`, `[N-<-id]`) names none (its slot
/// is counted where it is served).
fn slot_count(range: &str) -> usize {
    if range.starts_with('[') {
        return 0;
    }
    match range.split_once('-') {
        Some((a, b)) => match (a.parse::<usize>(), b.parse::<usize>()) {
            (Ok(a), Ok(b)) if b >= a => b - a + 1,
            _ => 0,
        },
        None => usize::from(range.parse::<usize>().is_ok()),
    }
}

/// What `key` (a hash or a string, per `kind`) is, if it is one of ours.
async fn inspect(
    conn: &mut (impl ConnectionLike + Send),
    key: &str,
    kind: &str,
    node: &str,
) -> redis::RedisResult<Option<Object>> {
    let pttl: i64 = redis::cmd("PTTL").arg(key).query_async(conn).await?;
    let mut object = Object {
        name: key.to_owned(),
        kind: "",
        holders: Vec::new(),
        count: None,
        remaining_lease_ms: u64::try_from(pttl).ok(),
        waiters: 0,
        node: node.to_owned(),
    };
    if kind == "hash" {
        let len: u64 = redis::cmd("HLEN").arg(key).query_async(conn).await?;
        if len == 0 || len > MAX_FIELDS {
            return Ok(None);
        }
        let raw: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("HGETALL").arg(key).query_async(conn).await?;
        let fields: Vec<(String, String)> = raw
            .into_iter()
            .map(|(f, v)| {
                (
                    String::from_utf8_lossy(&f).into_owned(),
                    String::from_utf8_lossy(&v).into_owned(),
                )
            })
            .collect();
        let mode = fields
            .iter()
            .find(|(f, _)| f == "mode")
            .map(|(_, v)| v.as_str());
        let owners: Vec<(String, u64)> = fields
            .iter()
            .filter(|(f, _)| is_owner(f))
            .filter_map(|(f, v)| v.parse().ok().map(|n| (f.clone(), n)))
            .collect();
        let others = fields.len() - owners.len() - usize::from(mode.is_some());
        if others > 0 {
            return Ok(None);
        }
        match mode {
            Some("read" | "write") => {
                object.kind = "read-write-lock";
                object.holders = owners;
                // Writers waiting with a preference claim, and whoever
                // listens for the lock's releases.
                let writers: u64 =
                    companion(conn, key, "ZCARD", &suffixed(key, "locksmith_writers")).await?;
                let listening = numsub(conn, &prefixed("redisson_rwlock", key)).await?;
                object.waiters = writers.max(listening);
            }
            Some(_) => return Ok(None),
            None if !owners.is_empty() => {
                let queue = prefixed("redisson_lock_queue", key);
                let queued: u64 = companion(conn, key, "LLEN", &queue).await?;
                object.kind = if queued > 0 { "fair-lock" } else { "lock" };
                object.holders = owners;
                object.waiters = if queued > 0 {
                    queued
                } else {
                    numsub(conn, &prefixed("redisson_lock__channel", key)).await?
                };
            }
            None => return Ok(None),
        }
        return Ok(Some(object));
    }
    let len: u64 = redis::cmd("STRLEN").arg(key).query_async(conn).await?;
    if len == 0 || len > MAX_STRING {
        return Ok(None);
    }
    let Some(value): Option<Vec<u8>> = redis::cmd("GET").arg(key).query_async(conn).await? else {
        return Ok(None);
    };
    let value = String::from_utf8_lossy(&value).into_owned();
    if let Ok(n) = value.parse::<i64>() {
        let timeouts = suffixed(key, "timeout");
        let leased: u64 = companion(conn, key, "ZCARD", &timeouts).await?;
        let expirable: bool = companion(conn, key, "EXISTS", &timeouts).await?;
        let semaphore_waiters = numsub(conn, &prefixed("redisson_sc", key)).await?;
        let latch_waiters = numsub(
            conn,
            &format!("redisson_countdownlatch__channel__{{{key}}}"),
        )
        .await?;
        object.count = Some(n);
        if expirable {
            object.kind = "permit-semaphore";
            object.holders = vec![("permits with leases".into(), leased)];
            object.waiters = semaphore_waiters;
        } else if latch_waiters > 0 {
            object.kind = "latch";
            object.waiters = latch_waiters;
        } else if semaphore_waiters > 0 {
            object.kind = "semaphore";
            object.waiters = semaphore_waiters;
        } else {
            // The same layout: a semaphore's permits, a latch's count, or
            // any other counter.
            object.kind = "counter";
        }
        return Ok(Some(object));
    }
    // A simple lock: a 32-digit token, with the fencing counter its grants
    // increment.
    let token_counter: bool =
        companion(conn, key, "EXISTS", &prefixed("redisson_lock_token", key)).await?;
    if value.len() == 32 && value.chars().all(|c| c.is_ascii_hexdigit()) && token_counter {
        object.kind = "simple-lock";
        object.holders = vec![(value, 1)];
        object.waiters = numsub(conn, &prefixed("redisson_lock__channel", key)).await?;
        return Ok(Some(object));
    }
    Ok(None)
}

/// Clients subscribed to `channel`, classic and sharded. A server without
/// sharded pub/sub refuses `SHARDNUMSUB`, and so does an ACL user without
/// that right (none counted); on a cluster a channel whose name hashes
/// elsewhere than its object (a name with a `{...}` of its own) is
/// answered `MOVED` (its count is not on this node: none counted). Other
/// errors stay errors.
async fn numsub(conn: &mut (impl ConnectionLike + Send), channel: &str) -> redis::RedisResult<u64> {
    let classic: (String, u64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(conn)
        .await?;
    let sharded: redis::RedisResult<(String, u64)> = redis::cmd("PUBSUB")
        .arg("SHARDNUMSUB")
        .arg(channel)
        .query_async(conn)
        .await;
    let sharded = match sharded {
        Ok((_, n)) => n,
        // An ACL user without `pubsub|shardnumsub` (the library needs it
        // only for sharded notifications) counts the classic listeners.
        Err(e) if matches!(e.code(), Some("MOVED" | "NOPERM")) || is_unknown_command(&e) => 0,
        Err(e) => return Err(e),
    };
    Ok(classic.1.max(sharded))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_primary_serving_slots_is_scanned() {
        let nodes = "\
a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460 [5461->-b2]
b2 127.0.0.1:7001@17001 master - 0 1 2 connected 5461-10922
c3 ::1:7002@17002 master - 0 1 3 connected 10923 10924-16383
d4 127.0.0.1:7003@17003 slave a1 0 1 1 connected
e5 127.0.0.1:7004@17004 master,fail - 0 1 4 disconnected
";
        let (addrs, unfinished) = plan(nodes);
        assert_eq!(addrs, ["127.0.0.1:7000", "127.0.0.1:7001", "[::1]:7002"]);
        assert!(
            unfinished.is_empty(),
            "a failed primary without slots is no gap"
        );
    }

    #[test]
    fn slots_without_a_reachable_primary_are_a_gap() {
        let nodes = "\
a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 3-5460
b2 :0@0 master,noaddr - 0 1 2 disconnected 5461-10922
c3 127.0.0.1:7002@17002 master - 0 1 3 connected 10923-16383
";
        let (addrs, unfinished) = plan(nodes);
        assert_eq!(addrs, ["127.0.0.1:7000", "127.0.0.1:7002"]);
        let what: Vec<&str> = unfinished.iter().map(|u| u.what.as_str()).collect();
        assert_eq!(what.len(), 2, "{what:?}");
        assert!(what[0].contains("b2 (serving 5462 slots)"), "{what:?}");
        assert!(what[1].starts_with("5465 of 16384 slots"), "{what:?}");
        assert!(unfinished.iter().all(|u| u.code == exit::UNAVAILABLE));
    }
}
