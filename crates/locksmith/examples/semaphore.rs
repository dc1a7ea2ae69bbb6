//! The semaphore: at most N holders (here, of a connection pool) across
//! processes.
//!
//! Run: `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redis-locksmith --example semaphore`

use locksmith::Client;

/// Sets 2 permits; a third acquire waits until one is released.
pub async fn run(url: &str) -> locksmith::Result<()> {
    let client = Client::open(url).await?;
    let pool = client.semaphore("example:db-pool")?;
    pool.drain().await?; // start from a known state
    pool.add_permits(2).await?;
    let one = pool.acquire(1).await?;
    let two = pool.acquire(1).await?;
    println!("available after two acquires: {}", pool.available().await?);
    assert!(pool.try_acquire(1).await?.is_none());
    one.release().await?;
    let three = pool.acquire(1).await?;
    two.release().await?;
    three.release().await?;
    println!("available at the end: {}", pool.available().await?);
    Ok(())
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> locksmith::Result<()> {
    run(&std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())).await
}
