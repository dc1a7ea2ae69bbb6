//! The read-write lock: readers share, a writer is alone.
//!
//! Run: `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redis-locksmith --example read_write_lock`

use locksmith::Client;

/// Two readers at once; the writer waits for both.
pub async fn run(url: &str) -> locksmith::Result<()> {
    let client = Client::open(url).await?;
    let catalog = || client.read_write_lock("example:catalog");
    let a = catalog()?.read().await?;
    let b = catalog()?.read().await?;
    println!("two readers hold the catalog");
    let writer = catalog()?;
    assert!(
        writer.try_write().await?.is_none(),
        "readers keep the writer out"
    );
    a.release().await?;
    b.release().await?;
    let w = writer.write().await?;
    println!("the writer holds it alone (token {})", w.fencing_token());
    assert!(catalog()?.try_read().await?.is_none());
    w.release().await
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> locksmith::Result<()> {
    run(&std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())).await
}
