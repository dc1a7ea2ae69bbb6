//! `locksmith list`: finds locksmith and Redisson objects with SCAN (never
//! KEYS; on a cluster, on every primary) and shows each one's kind,
//! holders, lease left and waiters.

use std::time::Duration;

use locksmith::Client;
use redis::aio::ConnectionLike;

use crate::exit::CliError;

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
fn suffixed(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// A companion key with a prefix: `prefix:{NAME}` (or `prefix:NAME`).
fn prefixed(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// Runs `list` against `url`.
pub(crate) async fn list(conn: &crate::conn::ConnArgs, args: ListArgs) -> Result<u8, CliError> {
    let client = conn.connect().await?;
    // One scan per node: on a cluster every primary (own connections),
    // otherwise the client's own connection (its database, credentials,
    // and the current primary behind Sentinel).
    let mut found = Vec::new();
    let mut unscanned = Vec::new();
    let mut examined = 0u64;
    let mut truncated = false;
    if client.topology() == locksmith::Topology::Cluster {
        for addr in primaries(&client).await? {
            let scanned = match client.node_connection(&addr).await {
                Ok(mut conn) => scan(&mut conn, &addr, &args, &mut found, &mut examined).await,
                Err(e) => Err(e.to_string()),
            };
            match scanned {
                Ok(cut) => truncated |= cut,
                Err(e) => unscanned.push(format!("{addr}: {e}")),
            }
        }
    } else {
        let mut conn = client.connection();
        match scan(&mut conn, client.addr(), &args, &mut found, &mut examined).await {
            Ok(cut) => truncated = cut,
            Err(e) => unscanned.push(format!("{}: {e}", client.addr())),
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
    if !unscanned.is_empty() {
        // What was found is shown, but the listing is incomplete: say so
        // and fail, rather than pass a short listing off as the whole.
        eprintln!(
            "locksmith: could not scan {} (the listing above is incomplete)",
            unscanned.join("; ")
        );
        return Ok(crate::exit::UNAVAILABLE);
    }
    Ok(0)
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
) -> Result<bool, String> {
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
                .map_err(|e| format!("SCAN: {e}"))?;
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
                    Err(e) if is_reply(&e) => {}
                    Err(e) => return Err(format!("reading {key}: {e}")),
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

/// Whether `e` is the server's error reply (`WRONGTYPE` for a key that
/// changed type meanwhile, `ERR` for a command the server lacks) rather
/// than a lost, late or garbled reply.
fn is_reply(e: &redis::RedisError) -> bool {
    e.code().is_some()
}

/// `result`, with a server's error reply read as nothing there (see
/// [`is_reply`]); other errors stay errors.
fn or_absent<T: Default>(result: redis::RedisResult<T>) -> redis::RedisResult<T> {
    match result {
        Err(e) if is_reply(&e) => Ok(T::default()),
        other => other,
    }
}

/// The primaries to scan on a cluster (`CLUSTER NODES` through the
/// client), skipping nodes without an address yet.
async fn primaries(client: &Client) -> Result<Vec<String>, CliError> {
    let mut conn = client.connection();
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut conn)
        .await
        .map_err(|e| CliError::Other(format!("CLUSTER NODES: {e}")))?;
    Ok(nodes
        .lines()
        .filter(|l| {
            let flags = l.split(' ').nth(2).unwrap_or("");
            flags.contains("master") && !flags.contains("noaddr") && !flags.contains("handshake")
        })
        .filter_map(|l| l.split(' ').nth(1))
        .map(|a| {
            let hostport = a.split('@').next().unwrap_or(a);
            // IPv6 addresses come unbracketed: host is everything before
            // the last colon.
            match hostport.rsplit_once(':') {
                Some((host, port)) if host.contains(':') => format!("[{host}]:{port}"),
                _ => hostport.to_owned(),
            }
        })
        .collect())
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
                let writers: redis::RedisResult<u64> = redis::cmd("ZCARD")
                    .arg(suffixed(key, "locksmith_writers"))
                    .query_async(conn)
                    .await;
                let writers = or_absent(writers)?;
                let listening = numsub(conn, &prefixed("redisson_rwlock", key)).await?;
                object.waiters = writers.max(listening);
            }
            Some(_) => return Ok(None),
            None if !owners.is_empty() => {
                let queue = prefixed("redisson_lock_queue", key);
                let queued = or_absent(redis::cmd("LLEN").arg(&queue).query_async(conn).await)?;
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
        let leased: u64 = or_absent(redis::cmd("ZCARD").arg(&timeouts).query_async(conn).await)?;
        let expirable: bool =
            or_absent(redis::cmd("EXISTS").arg(&timeouts).query_async(conn).await)?;
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
    let token_counter: bool = or_absent(
        redis::cmd("EXISTS")
            .arg(prefixed("redisson_lock_token", key))
            .query_async(conn)
            .await,
    )?;
    if value.len() == 32 && value.chars().all(|c| c.is_ascii_hexdigit()) && token_counter {
        object.kind = "simple-lock";
        object.holders = vec![(value, 1)];
        object.waiters = numsub(conn, &prefixed("redisson_lock__channel", key)).await?;
        return Ok(Some(object));
    }
    Ok(None)
}

/// Clients subscribed to `channel`, classic and sharded (a server without
/// sharded pub/sub refuses `SHARDNUMSUB`: none there).
async fn numsub(conn: &mut (impl ConnectionLike + Send), channel: &str) -> redis::RedisResult<u64> {
    let classic: (String, u64) = or_absent(
        redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query_async(conn)
            .await,
    )?;
    let sharded: (String, u64) = or_absent(
        redis::cmd("PUBSUB")
            .arg("SHARDNUMSUB")
            .arg(channel)
            .query_async(conn)
            .await,
    )?;
    Ok(classic.1.max(sharded.1))
}
