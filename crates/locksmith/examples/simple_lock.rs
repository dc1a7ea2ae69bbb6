//! The simple lock: `SET NX PX` with a random token and a compare-and-delete
//! release, the pattern redis-py's `Lock` and Redis's documentation use, so
//! a Python service and a Rust one can share it.
//!
//! Run: `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redis-locksmith --example simple_lock`

use std::time::Duration;

use locksmith::Client;

/// Takes the lock, shows that a second owner (or a second acquire through
/// the same handle: it is not reentrant) waits, and releases it.
pub async fn run(url: &str) -> locksmith::Result<()> {
    let client = Client::open(url).await?;
    let lock = client.simple_lock("example:nightly-export")?;
    let guard = lock.lock().await?;
    println!(
        "holding {} with token {}",
        guard.name(),
        guard.fencing_token()
    );
    assert!(lock.try_lock().await?.is_none(), "not reentrant");
    guard.release().await?;
    let again = lock
        .try_lock_for(Duration::from_secs(5))
        .await?
        .expect("free after the release");
    again.release().await
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> locksmith::Result<()> {
    run(&std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())).await
}
