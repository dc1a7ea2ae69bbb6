//! Which server the test kit runs: the system's Redis (7.0 on the
//! project's machines), or another version from the cache that
//! `scripts/servers` fills from Debian's archive, chosen with
//! `LOCKSMITH_TEST_SERVER`:
//!
//! | value | server |
//! |---|---|
//! | `redis7` (or unset) | `redis-server` / `redis-cli` from `PATH` |
//! | `valkey8` | Valkey 8.0 |
//! | `redis6` | Redis 6.0 |
//! | `redis8` | Redis 8.0 |
//!
//! The cache is `LOCKSMITH_SERVERS_DIR`, else `.servers/` at the
//! repository's root; a server missing there is installed on first use
//! (`scripts/servers ID`). `LOCKSMITH_REDIS_SERVER` still names a
//! `redis-server` binary outright, whatever the choice.

use std::io;
use std::path::PathBuf;
use std::sync::OnceLock;

/// Environment variable choosing the server (see the module docs).
pub const TEST_SERVER_ENV: &str = "LOCKSMITH_TEST_SERVER";

/// The servers the test kit knows, by their `LOCKSMITH_TEST_SERVER` ids.
pub const SERVERS: [&str; 4] = ["redis7", "valkey8", "redis6", "redis8"];

/// The chosen server's id (`redis7` when none is chosen).
pub fn server_id() -> String {
    std::env::var(TEST_SERVER_ENV)
        .ok()
        .filter(|id| !id.is_empty())
        .unwrap_or_else(|| "redis7".to_owned())
}

/// The path of the chosen server's `program` (`redis-server`,
/// `redis-cli`).
///
/// # Errors
/// When the id is unknown, or its server cannot be installed.
pub fn binary(program: &str) -> io::Result<String> {
    static BIN: OnceLock<Result<Option<PathBuf>, String>> = OnceLock::new();
    let bin = BIN
        .get_or_init(|| bin_dir(&server_id()).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| io::Error::other(e.clone()))?;
    Ok(match bin {
        Some(dir) => dir.join(program).display().to_string(),
        None => program.to_owned(),
    })
}

/// The bin folder of server `id` (`None`: the system's, on `PATH`),
/// installing it into the cache when it is missing.
fn bin_dir(id: &str) -> io::Result<Option<PathBuf>> {
    if id == "redis7" {
        return Ok(None);
    }
    if !SERVERS.contains(&id) {
        return Err(io::Error::other(format!(
            "{TEST_SERVER_ENV}={id} is not one of {SERVERS:?}"
        )));
    }
    let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let cache = std::env::var_os("LOCKSMITH_SERVERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".servers"));
    let dir = cache.join(id).join("bin");
    if !dir.join("redis-server").exists() {
        let status = std::process::Command::new(root.join("scripts/servers"))
            .arg(id)
            .status()
            .map_err(|e| io::Error::other(format!("cannot run scripts/servers: {e}")))?;
        if !status.success() || !dir.join("redis-server").exists() {
            return Err(io::Error::other(format!(
                "scripts/servers {id} failed ({status}); {id} is not available"
            )));
        }
    }
    Ok(Some(dir))
}
