//! MultiLock: a transfer takes both accounts' locks or neither.
//!
//! Run: `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redis-locksmith --example multi_lock`

use locksmith::Client;

/// Names that share a hash tag are taken by one atomic script call.
pub async fn run(url: &str) -> locksmith::Result<()> {
    let client = Client::open(url).await?;
    let transfer = client.multi_lock(["{acct}:17", "{acct}:42"])?;
    let guard = transfer.lock().await?;
    for (name, token) in guard.fencing_tokens() {
        println!("{name}: token {token}");
    }
    // Someone holding either account makes the whole set unavailable.
    let other = client.multi_lock(["{acct}:42", "{acct}:99"])?;
    assert!(other.try_lock().await?.is_none());
    guard.release().await?;
    let got = other.try_lock().await?.expect("free now");
    got.release().await
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> locksmith::Result<()> {
    run(&std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())).await
}
