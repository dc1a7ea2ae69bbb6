//! The count-down latch: wait until N parties have finished.
//!
//! Run: `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redis-locksmith --example latch`

use std::time::Duration;

use locksmith::Client;

/// Three loaders count down; the waiter wakes when the last one does.
pub async fn run(url: &str) -> locksmith::Result<()> {
    let client = Client::open(url).await?;
    let latch = client.count_down_latch("example:shards-loaded")?;
    latch.delete().await?;
    latch.try_set_count(3).await?;
    let waiter = {
        let latch = latch.clone();
        tokio::spawn(async move { latch.wait_for(Duration::from_secs(10)).await })
    };
    for shard in 0..3 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let left = latch.count_down().await?;
        println!("shard {shard} loaded, {left} to go");
    }
    let opened = waiter.await.expect("waiter task")?;
    assert!(opened);
    println!("all shards loaded");
    Ok(())
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> locksmith::Result<()> {
    run(&std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())).await
}
