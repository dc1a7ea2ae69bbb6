//! Unique, time-ordered 64-bit ids (order numbers), optionally in blocks.
//!
//! Run: `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redis-locksmith --example id_generator`

use locksmith::{Client, IdGenerator};

/// Ten ids, one round trip each, then ten from a block of 1000.
pub async fn run(url: &str) -> locksmith::Result<()> {
    let client = Client::open(url).await?;
    let orders = client.id_generator("example:orders")?;
    let mut last = 0;
    for _ in 0..10 {
        let id = orders.next_id().await?;
        assert!(id > last);
        last = id;
    }
    let (seconds, seq) = IdGenerator::split(last);
    println!("id {last}: {seconds} s since the epoch, sequence {seq}");
    let fast = orders.with_block(1000)?;
    for _ in 0..10 {
        let id = fast.next_id().await?;
        assert!(id > last);
        last = id;
    }
    println!("block mode: {last}");
    Ok(())
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> locksmith::Result<()> {
    run(&std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())).await
}
