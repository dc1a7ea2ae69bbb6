//! Redlock over independent primaries, held while a majority grants it.
//!
//! Run: `REDLOCK_URLS=redis://a:6379,redis://b:6379,redis://c:6379 cargo run -p redis-locksmith --example redlock`

use locksmith::RedlockNodes;

/// Takes the Redlock, shows how many nodes granted it, and releases it.
pub async fn run(urls: &[String]) -> locksmith::Result<()> {
    let nodes = RedlockNodes::connect(urls.iter().cloned()).await?;
    let lock = nodes.lock("example:billing-run")?;
    let guard = lock.lock().await?;
    println!(
        "granted by {} of {} nodes, valid for {:?}, token {}",
        guard.granted_nodes(),
        nodes.len(),
        guard.remaining_lease(),
        guard.fencing_token()
    );
    assert!(
        lock.try_lock().await?.is_none(),
        "not reentrant: a second acquire waits"
    );
    guard.release().await
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> locksmith::Result<()> {
    let urls: Vec<String> = std::env::var("REDLOCK_URLS")
        .unwrap_or_else(|_| {
            "redis://127.0.0.1:6379,redis://127.0.0.1:6380,redis://127.0.0.1:6381".into()
        })
        .split(',')
        .map(str::to_owned)
        .collect();
    run(&urls).await
}
