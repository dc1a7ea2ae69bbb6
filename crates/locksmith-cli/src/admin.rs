//! `locksmith status` and `locksmith unlock --force`: looking at and
//! breaking locks from the shell.

use locksmith::{Client, LockInfo};

use crate::exit::CliError;

/// Which kind of object `status` describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Kind {
    /// Decide from the keys: a hash is a lock (with its fair queue, if
    /// any) or, with a mode field, a read-write lock; a count with a
    /// permit zset is a permit semaphore; a bare count is a semaphore or a
    /// latch (both store a number: name it with --kind).
    Auto,
    /// A reentrant or fair lock (hash, and the fair queue if any).
    Lock,
    /// A read-write lock (hash with a mode field).
    ReadWrite,
    /// A semaphore (a count of available permits).
    Semaphore,
    /// A semaphore whose permits have ids and leases.
    Permits,
    /// A count-down latch (a count).
    Latch,
}

/// Prints the state of object `name`; exit code 0 whether or not it is
/// held or set (the output says which), so a script can parse it either
/// way.
pub(crate) async fn status(
    conn: &crate::conn::ConnArgs,
    name: &str,
    kind: Kind,
    json: bool,
) -> Result<u8, CliError> {
    let client = conn.connect().await?;
    let (text, value) = describe(&client, name, kind).await?;
    if json {
        println!("{value}");
    } else {
        print!("{text}");
    }
    Ok(0)
}

/// The state of object `name`, as text and as JSON (what `status` prints
/// and `watch` redraws).
pub(crate) async fn describe(
    client: &Client,
    name: &str,
    kind: Kind,
) -> Result<(String, serde_json::Value), CliError> {
    let client = client.clone();
    let kind = match kind {
        Kind::Auto => detect(&client, name).await?,
        chosen => Some(chosen),
    };
    let (text, value) = match kind {
        Some(Kind::Lock) | Some(Kind::Auto) => {
            let info = client.fair_lock(name)?.info().await?;
            let mut text = to_text(name, &info.lock);
            let mut json = to_json(name, &info.lock);
            for (i, owner) in info.queue.iter().enumerate() {
                text.push_str(&format!("  queued {}: {owner}\n", i + 1));
            }
            json["queue"] = serde_json::json!(info.queue);
            (text, json)
        }
        Some(Kind::ReadWrite) => {
            let info = client.read_write_lock(name)?.info().await?;
            let mode = info.mode.as_deref().unwrap_or("free");
            let mut text = format!("read-write lock {name:?}: {mode}\n");
            if let Some((owner, count)) = &info.writer {
                text.push_str(&format!("  writer: {owner} (hold count {count})\n"));
            }
            for (owner, count) in &info.readers {
                text.push_str(&format!("  reader: {owner} (hold count {count})\n"));
            }
            if let Some(d) = info.remaining_lease {
                text.push_str(&format!("  remaining lease: {d:?}\n"));
            }
            text.push_str(&format!(
                "  writers waiting (preferring): {}\n  fencing counter: {}\n",
                info.waiting_writers, info.fencing_counter
            ));
            let json = serde_json::json!({
                "name": name,
                "kind": "read-write-lock",
                "mode": info.mode,
                "writer": info.writer.as_ref().map(|(o, c)| serde_json::json!({ "owner": o, "count": c })),
                "readers": info.readers.iter().map(|(o, c)| serde_json::json!({ "owner": o, "count": c })).collect::<Vec<_>>(),
                "remaining_lease_ms": info.remaining_lease.map(|d| d.as_millis() as u64),
                "waiting_writers": info.waiting_writers,
                "fencing_counter": info.fencing_counter,
            });
            (text, json)
        }
        Some(Kind::Permits) => {
            let semaphore = client.expirable_semaphore(name)?;
            let (available, held) = (semaphore.available().await?, semaphore.held().await?);
            (
                format!(
                    "semaphore {name:?}: {available} permits available, {held} held with leases\n"
                ),
                serde_json::json!({ "name": name, "kind": "permit-semaphore", "available": available, "held": held }),
            )
        }
        Some(Kind::Semaphore) => {
            let available = client.semaphore(name)?.available().await?;
            (
                format!("semaphore {name:?}: {available} permits available\n"),
                serde_json::json!({ "name": name, "kind": "semaphore", "available": available }),
            )
        }
        Some(Kind::Latch) => {
            let count = client.count_down_latch(name)?.count().await?;
            let state = if count == 0 { "open" } else { "closed" };
            (
                format!("latch {name:?}: {state}, count {count}\n"),
                serde_json::json!({ "name": name, "kind": "latch", "count": count, "open": count == 0 }),
            )
        }
        None => {
            let value = counter(&client, name).await?;
            (
                format!(
                    "{name:?}: a count of {value} (a semaphore's available permits or a latch's \
                     count; pass --kind semaphore or --kind latch to say which)\n"
                ),
                serde_json::json!({ "name": name, "kind": "counter", "value": value }),
            )
        }
    };
    Ok((text, value))
}

/// The kind the keys show: a hash (or nothing) is a lock, read-write if
/// it has a mode field; a string with a permit zset is a permit
/// semaphore; a bare string is a count (`None`: semaphore or latch, the
/// same layout).
async fn detect(client: &Client, name: &str) -> Result<Option<Kind>, CliError> {
    let mut conn = client.connection();
    // The key the library uses for the name (under --key-prefix).
    let name = &key_of(client, name);
    let failed = |e: redis::RedisError| CliError::Other(format!("inspecting {name:?}: {e}"));
    let layout = inspect(&mut conn, name).await.map_err(failed)?;
    match layout.kind.as_str() {
        "none" => Ok(Some(Kind::Lock)),
        "hash" if layout.read_write => Ok(Some(Kind::ReadWrite)),
        "hash" => Ok(Some(Kind::Lock)),
        "string" => {
            let leased: bool = redis::cmd("EXISTS")
                .arg(crate::list::suffixed(name, "timeout"))
                .query_async(&mut conn)
                .await
                .map_err(failed)?;
            Ok(leased.then_some(Kind::Permits))
        }
        other => Err(CliError::Other(format!(
            "{name:?} is a {other}, which is not a locksmith or Redisson object status knows"
        ))),
    }
}

/// What the key of a name shows: its type (`TYPE`), and for a hash
/// whether it has a read-write lock's `mode` field. `status` and
/// `unlock` read it alike and map its errors each their own way.
struct Layout {
    /// The key's type, as `TYPE` names it (`none` when it is absent).
    kind: String,
    /// A hash with a `mode` field: a read-write lock.
    read_write: bool,
}

async fn inspect(conn: &mut locksmith::Connection, key: &str) -> redis::RedisResult<Layout> {
    let kind: String = redis::cmd("TYPE").arg(key).query_async(conn).await?;
    let read_write = kind == "hash"
        && redis::cmd("HEXISTS")
            .arg(key)
            .arg("mode")
            .query_async::<bool>(conn)
            .await?;
    Ok(Layout { kind, read_write })
}

/// The key `name` has for `client`: the name under the client's key
/// prefix (`--key-prefix`), as every primitive makes it.
fn key_of(client: &Client, name: &str) -> String {
    format!("{}{name}", client.key_prefix())
}

/// The number a string key holds (a semaphore's or a latch's count).
async fn counter(client: &Client, name: &str) -> Result<i64, CliError> {
    Ok(client.semaphore(name)?.available().await?)
}

/// Deletes lock `name` (a lock or fair lock, a read-write lock, or a
/// simple lock, by its key's type) and wakes its waiters; refuses without
/// `--force` because the holder keeps running until its next renewal
/// notices. Anything else under the name is refused and left alone.
pub(crate) async fn unlock(
    conn: &crate::conn::ConnArgs,
    name: &str,
    force: bool,
) -> Result<u8, CliError> {
    if !force {
        return Err(CliError::Usage(format!(
            "refusing to unlock {name:?} without --force: whoever holds it keeps running \
             and only learns of the loss at its next renewal"
        )));
    }
    let client = conn.connect().await?;
    let mut redis = client.connection();
    let key = key_of(&client, name);
    let failed = |e: redis::RedisError| CliError::Lock(e.into());
    let Layout {
        kind: layout,
        read_write,
    } = inspect(&mut redis, &key).await.map_err(failed)?;
    // A fair lock keeps its queue beside the hash; its force unlock wakes
    // the head of the queue, which listens on a channel of its own.
    let fair = layout == "hash"
        && !read_write
        && redis::cmd("EXISTS")
            .arg(crate::list::prefixed("redisson_lock_queue", &key))
            .query_async::<bool>(&mut redis)
            .await
            .map_err(failed)?;
    // Each force unlock checks the key's type again as it deletes, and
    // refuses a key of another kind (a count, a list, ...).
    let deleted = if read_write {
        client.read_write_lock(name)?.force_unlock().await?
    } else if fair {
        client.fair_lock(name)?.force_unlock().await?
    } else if layout == "string" {
        client.simple_lock(name)?.force_unlock().await?
    } else {
        client.lock(name)?.force_unlock().await?
    };
    if deleted {
        eprintln!("locksmith: unlocked {name:?}");
    } else {
        eprintln!("locksmith: {name:?} was not locked");
    }
    Ok(0)
}

/// One JSON object: the stable, scriptable form of [`LockInfo`].
fn to_json(name: &str, info: &LockInfo) -> serde_json::Value {
    serde_json::json!({
        "name": name,
        "kind": "lock",
        "locked": info.is_locked(),
        "holders": info
            .holders
            .iter()
            .map(|(owner, count)| serde_json::json!({ "owner": owner, "count": count }))
            .collect::<Vec<_>>(),
        "remaining_lease_ms": info.remaining_lease.map(|d| d.as_millis() as u64),
        "fencing_counter": info.fencing_counter,
    })
}

/// The human-readable form.
fn to_text(name: &str, info: &LockInfo) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let state = if info.is_locked() { "locked" } else { "free" };
    let _ = writeln!(out, "lock {name:?}: {state}");
    for (owner, count) in &info.holders {
        let _ = writeln!(out, "  holder: {owner} (hold count {count})");
    }
    if info.is_locked() {
        match info.remaining_lease {
            Some(d) => {
                let _ = writeln!(out, "  remaining lease: {d:?}");
            }
            None => {
                let _ = writeln!(out, "  remaining lease: none (no expiry set)");
            }
        }
    }
    let _ = writeln!(out, "  fencing counter: {}", info.fencing_counter);
    out
}
