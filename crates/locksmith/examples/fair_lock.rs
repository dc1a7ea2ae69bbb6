//! The fair lock: waiters are served in the order they asked, across
//! processes.
//!
//! Run: `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redis-locksmith --example fair_lock`

use std::time::Duration;

use locksmith::Client;

/// Three waiters queue behind a holder and are served in arrival order.
pub async fn run(url: &str) -> locksmith::Result<()> {
    let client = Client::open(url).await?;
    let first = client.fair_lock("example:payouts")?.lock().await?;
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..3 {
        let (waiter, order) = (client.clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let guard = waiter.fair_lock("example:payouts")?.lock().await?;
            order.lock().expect("not poisoned").push(i);
            guard.release().await
        }));
        // Let each join the queue before the next one starts.
        let lock = client.fair_lock("example:payouts")?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while lock.info().await?.queue.len() < i + 1 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    first.release().await?;
    for w in waiters {
        w.await.expect("waiter task")?;
    }
    let order = order.lock().expect("not poisoned").clone();
    println!("served in order {order:?}");
    assert_eq!(order, vec![0, 1, 2]);
    Ok(())
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> locksmith::Result<()> {
    run(&std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())).await
}
