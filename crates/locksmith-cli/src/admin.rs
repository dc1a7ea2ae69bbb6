//! `locksmith status` and `locksmith unlock --force`: looking at and
//! breaking locks from the shell.

use locksmith::{Client, LockInfo};

use crate::exit::CliError;

/// Which kind of object `status` describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Kind {
    /// Decide from the key's type: a hash is a lock; a count is a
    /// semaphore or a latch (both store a number: name it with --kind).
    Auto,
    /// A reentrant lock (hash).
    Lock,
    /// A semaphore (a count of available permits).
    Semaphore,
    /// A count-down latch (a count).
    Latch,
}

/// Prints the state of object `name`; exit code 0 whether or not it is
/// held or set (the output says which), so a script can parse it either
/// way.
pub(crate) async fn status(url: &str, name: &str, kind: Kind, json: bool) -> Result<u8, CliError> {
    let client = Client::open(url).await?;
    let kind = match kind {
        Kind::Auto => detect(&client, name).await?,
        chosen => Some(chosen),
    };
    let (text, value) = match kind {
        Some(Kind::Lock) | Some(Kind::Auto) => {
            let info = client.lock(name)?.info().await?;
            (to_text(name, &info), to_json(name, &info))
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
    if json {
        println!("{value}");
    } else {
        print!("{text}");
    }
    Ok(0)
}

/// The kind the key's type shows: a hash (or nothing) is read as a lock,
/// a string as a count (`None`: semaphore or latch, the same layout).
async fn detect(client: &Client, name: &str) -> Result<Option<Kind>, CliError> {
    let mut conn = client.connection();
    let kind: String = redis::cmd("TYPE")
        .arg(name)
        .query_async(&mut conn)
        .await
        .map_err(|e| CliError::Other(format!("reading the type of {name:?}: {e}")))?;
    match kind.as_str() {
        "hash" | "none" => Ok(Some(Kind::Lock)),
        "string" => Ok(None),
        other => Err(CliError::Other(format!(
            "{name:?} is a {other}, which is not a locksmith or Redisson object status knows"
        ))),
    }
}

/// The number a string key holds (a semaphore's or a latch's count).
async fn counter(client: &Client, name: &str) -> Result<i64, CliError> {
    Ok(client.semaphore(name)?.available().await?)
}

/// Deletes lock `name` and wakes its waiters; refuses without `--force`
/// because the holder keeps running until its next renewal notices.
pub(crate) async fn unlock(url: &str, name: &str, force: bool) -> Result<u8, CliError> {
    if !force {
        return Err(CliError::Usage(format!(
            "refusing to unlock {name:?} without --force: whoever holds it keeps running \
             and only learns of the loss at its next renewal"
        )));
    }
    let client = Client::open(url).await?;
    if client.lock(name)?.force_unlock().await? {
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
