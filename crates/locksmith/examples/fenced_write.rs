//! Fencing: a holder whose lease was lost (a long pause) cannot overwrite
//! the newer holder's data, because the store refuses its older token.
//!
//! Run: `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redis-locksmith --example fenced_write`

use std::time::Duration;

use locksmith::{Client, ErrorKind};

/// The first holder "pauses" past its fixed lease; the second writes; the
/// first's late write is refused as stale.
pub async fn run(url: &str) -> locksmith::Result<()> {
    let client = Client::open(url).await?;
    let store = client.fenced_store("example:report-file")?;
    let lock = client
        .lock("example:report-writer")?
        .with_lease(Duration::from_millis(300))?;
    let slow = lock.lock().await?;
    tokio::time::sleep(Duration::from_millis(400)).await; // a GC pause
    let fast = client.lock("example:report-writer")?.lock().await?;
    store.write_with(&fast, b"fresh report").await?;
    let err = store
        .write_with(&slow, b"stale report")
        .await
        .expect_err("the old token is refused");
    assert_eq!(err.kind(), ErrorKind::StaleToken);
    println!("refused: {err}");
    let (token, value) = store.read().await?.expect("written");
    println!(
        "store holds {:?} from token {token}",
        String::from_utf8_lossy(&value)
    );
    fast.release().await?;
    drop(slow);
    Ok(())
}

#[allow(dead_code)]
#[tokio::main]
async fn main() -> locksmith::Result<()> {
    run(&std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())).await
}
