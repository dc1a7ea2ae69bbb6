//! The reentrant lock: one holder at a time across processes, a lease
//! renewed by the watchdog while held, a fencing token per grant.
//!
//! Run: `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redis-locksmith --example lock`

use std::time::Duration;

use locksmith::Client;

/// Takes the lock twice in a row from two handles; the second waits.
pub async fn run(url: &str) -> locksmith::Result<()> {
    let client = Client::open(url).await?;
    let report = client.lock("example:nightly-report")?;
    let guard = report.lock().await?;
    println!(
        "holding {} with fencing token {} ({:?} of lease left)",
        guard.name(),
        guard.fencing_token(),
        guard.remaining_lease()
    );
    // Another owner (another task or process) cannot have it meanwhile.
    let other = client.lock("example:nightly-report")?;
    assert!(other.try_lock().await?.is_none());
    // The holder re-enters through its own handle.
    let again = report.lock().await?;
    again.release().await?;
    guard.release().await?;
    // Now the other owner gets it, with a larger token.
    let next = other
        .try_lock_for(Duration::from_secs(5))
        .await?
        .expect("free after the release");
    println!("next holder's token: {}", next.fencing_token());
    next.release().await
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> locksmith::Result<()> {
    run(&std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())).await
}
