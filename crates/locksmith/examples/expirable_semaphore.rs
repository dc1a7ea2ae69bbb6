//! The permit semaphore: each permit has an id and a lease, so a crashed
//! holder's permit comes back by itself.
//!
//! Run: `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redis-locksmith --example expirable_semaphore`

use std::time::Duration;

use locksmith::Client;

/// A permit with a short fixed lease is forgotten (as by a crash) and
/// returns to the pool when its lease runs out.
pub async fn run(url: &str) -> locksmith::Result<()> {
    let client = Client::open(url).await?;
    let encoders = client.expirable_semaphore("example:encoders")?;
    encoders.try_set_permits(1).await?;
    let short = encoders.with_lease(Duration::from_secs(2))?;
    let permit = short.acquire().await?;
    println!(
        "permit {} ({:?} of lease left)",
        permit.id(),
        permit.remaining_lease()
    );
    // A holder that dies keeps nothing forever:
    std::mem::forget(permit);
    assert!(encoders.try_acquire().await?.is_none());
    let back = encoders
        .try_acquire_for(Duration::from_secs(5))
        .await?
        .expect("the expired permit came back");
    println!(
        "got permit {} after the first one's lease ran out",
        back.id()
    );
    back.release().await
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> locksmith::Result<()> {
    run(&std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())).await
}
