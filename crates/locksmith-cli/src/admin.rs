//! `locksmith status` and `locksmith unlock --force`: looking at and
//! breaking locks from the shell.

use locksmith::{Client, LockInfo};

use crate::exit::CliError;

/// Prints the state of lock `name`; exit code 0 whether or not it is held
/// (the output says which), so a script can parse it either way.
pub(crate) async fn status(url: &str, name: &str, json: bool) -> Result<u8, CliError> {
    let client = Client::open(url).await?;
    let info = client.lock(name)?.info().await?;
    if json {
        println!("{}", to_json(name, &info));
    } else {
        print!("{}", to_text(name, &info));
    }
    Ok(0)
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
