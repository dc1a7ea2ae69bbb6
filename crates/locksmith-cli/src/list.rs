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
    /// Stop after this many objects (the scan is bounded too).
    #[arg(long, value_name = "N", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    limit: u64,
}

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

/// Keys that belong to another object (its queue, timeouts, counter).
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
pub(crate) async fn list(url: &str, args: ListArgs) -> Result<u8, CliError> {
    let client = Client::open(url).await?;
    let mut nodes: Vec<(String, redis::aio::MultiplexedConnection)> = Vec::new();
    for addr in primaries(&client).await? {
        let node_url = with_credentials(url, &addr);
        let conn = redis::Client::open(node_url.as_str())
            .map_err(|e| CliError::Other(format!("{addr}: {e}")))?
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| {
                CliError::Lock(locksmith::Error::Connect {
                    addr: addr.clone(),
                    source: e,
                })
            })?;
        nodes.push((addr, conn));
    }
    let mut found = Vec::new();
    'nodes: for (addr, conn) in &mut nodes {
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&args.pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(conn)
                .await
                .map_err(|e| CliError::Other(format!("SCAN on {addr}: {e}")))?;
            for key in keys {
                if is_part(&key) {
                    continue;
                }
                if let Some(object) = inspect(conn, &key, addr).await? {
                    found.push(object);
                    if found.len() as u64 >= args.limit {
                        break 'nodes;
                    }
                }
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
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
    Ok(0)
}

/// The primaries to scan: every primary of a cluster (`CLUSTER SHARDS`
/// through the client), else the one the client talks to.
async fn primaries(client: &Client) -> Result<Vec<String>, CliError> {
    match client.topology() {
        locksmith::Topology::Cluster => {
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
                    flags.contains("master") && !flags.contains("fail")
                })
                .filter_map(|l| l.split(' ').nth(1))
                .map(|a| a.split('@').next().unwrap_or(a).to_owned())
                .collect())
        }
        _ => Ok(vec![client.addr().to_owned()]),
    }
}

/// `redis://[user:pass@]addr` with the credentials of `url`, if any.
fn with_credentials(url: &str, addr: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    match rest.split_once('@') {
        Some((creds, _)) if !creds.contains('/') => format!("redis://{creds}@{addr}"),
        _ => format!("redis://{addr}"),
    }
}

/// What `key` is, if it is one of ours.
async fn inspect(
    conn: &mut (impl ConnectionLike + Send),
    key: &str,
    node: &str,
) -> Result<Option<Object>, CliError> {
    let failed = |e: redis::RedisError| CliError::Other(format!("inspecting {key:?}: {e}"));
    let kind: String = redis::cmd("TYPE")
        .arg(key)
        .query_async(conn)
        .await
        .map_err(failed)?;
    let pttl: i64 = redis::cmd("PTTL")
        .arg(key)
        .query_async(conn)
        .await
        .map_err(failed)?;
    let lease = u64::try_from(pttl).ok();
    let mut object = Object {
        name: key.to_owned(),
        kind: "",
        holders: Vec::new(),
        count: None,
        remaining_lease_ms: lease,
        waiters: 0,
        node: node.to_owned(),
    };
    match kind.as_str() {
        "hash" => {
            let fields: Vec<(String, String)> = redis::cmd("HGETALL")
                .arg(key)
                .query_async(conn)
                .await
                .map_err(failed)?;
            let mode = fields
                .iter()
                .find(|(f, _)| f == "mode")
                .map(|(_, v)| v.clone());
            let owners: Vec<(String, u64)> = fields
                .iter()
                .filter(|(f, _)| is_owner(f))
                .filter_map(|(f, v)| v.parse().ok().map(|n| (f.clone(), n)))
                .collect();
            if mode.is_some() {
                object.kind = "read-write-lock";
                object.holders = owners;
                // Writers waiting with a preference claim, and whoever
                // listens for the lock's releases.
                let writers: u64 = redis::cmd("ZCARD")
                    .arg(suffixed(key, "locksmith_writers"))
                    .query_async(conn)
                    .await
                    .unwrap_or(0);
                let listening = numsub(conn, &prefixed("redisson_rwlock", key)).await;
                object.waiters = writers.max(listening);
            } else if !owners.is_empty() && owners.len() == fields.len() {
                let queue = prefixed("redisson_lock_queue", key);
                let queued: u64 = redis::cmd("LLEN")
                    .arg(&queue)
                    .query_async(conn)
                    .await
                    .unwrap_or(0);
                let fair: bool = redis::cmd("EXISTS")
                    .arg(prefixed("redisson_lock_timeout", key))
                    .query_async(conn)
                    .await
                    .unwrap_or(false);
                object.kind = if queued > 0 || fair {
                    "fair-lock"
                } else {
                    "lock"
                };
                object.holders = owners;
                object.waiters = if queued > 0 {
                    queued
                } else {
                    numsub(conn, &prefixed("redisson_lock__channel", key)).await
                };
            } else {
                return Ok(None);
            }
        }
        "string" => {
            let value: String = redis::cmd("GET")
                .arg(key)
                .query_async(conn)
                .await
                .map_err(failed)?;
            if let Ok(n) = value.parse::<i64>() {
                let timeouts = suffixed(key, "timeout");
                let leased: u64 = redis::cmd("ZCARD")
                    .arg(&timeouts)
                    .query_async(conn)
                    .await
                    .unwrap_or(0);
                let expirable: bool = redis::cmd("EXISTS")
                    .arg(&timeouts)
                    .query_async(conn)
                    .await
                    .unwrap_or(false);
                let semaphore_waiters = numsub(conn, &prefixed("redisson_sc", key)).await;
                let latch_waiters = numsub(
                    conn,
                    &format!("redisson_countdownlatch__channel__{{{key}}}"),
                )
                .await;
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
                    // The same layout: a semaphore's permits, a latch's
                    // count, or any other counter.
                    object.kind = "counter";
                }
            } else if value.len() == 32 && value.chars().all(|c| c.is_ascii_hexdigit()) {
                object.kind = "simple-lock";
                object.holders = vec![(value, 1)];
                object.waiters = numsub(conn, &prefixed("redisson_lock__channel", key)).await;
            } else {
                return Ok(None);
            }
        }
        _ => return Ok(None),
    }
    Ok(Some(object))
}

/// Clients subscribed to `channel`, classic and sharded.
async fn numsub(conn: &mut (impl ConnectionLike + Send), channel: &str) -> u64 {
    let classic: (String, u64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(conn)
        .await
        .unwrap_or_default();
    let sharded: (String, u64) = redis::cmd("PUBSUB")
        .arg("SHARDNUMSUB")
        .arg(channel)
        .query_async(conn)
        .await
        .unwrap_or_default();
    classic.1.max(sharded.1)
}
