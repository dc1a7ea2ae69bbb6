//! The blocking API in a program that is not async (a cron job, a build
//! step): the same lock, guards and errors, no runtime of your own.
//!
//! Run: `REDIS_URL=redis://127.0.0.1:6379 cargo run -p redis-locksmith --features blocking --example blocking`

use std::time::Duration;

use locksmith::blocking::Client;

/// Takes a lock, counts a latch down and draws ids, all blocking.
pub fn run(url: &str) -> locksmith::Result<()> {
    let client = Client::open(url)?;
    let lock = client.lock("example:blocking-job")?;
    let guard = lock
        .try_lock_for(Duration::from_secs(5))?
        .expect("nobody else runs this job");
    println!(
        "holding {} with token {}",
        guard.name(),
        guard.fencing_token()
    );
    assert!(client.lock("example:blocking-job")?.try_lock()?.is_none());
    guard.release()?;

    let latch = client.count_down_latch("example:blocking-latch")?;
    // Start from a known state (a latch left set by an interrupted run).
    client.block_on(latch_handle(&client).delete())?;
    latch.try_set_count(1)?;
    latch.count_down()?;
    assert!(latch.wait_for(Duration::from_secs(1))?);

    let ids = client.id_generator("example:blocking-ids")?;
    let (a, b) = (ids.next_id()?, ids.next_id()?);
    assert!(b > a);
    println!("ids {a} < {b}");
    Ok(())
}

/// The async latch underneath, for what the facade does not wrap.
fn latch_handle(client: &Client) -> locksmith::CountDownLatch {
    client
        .as_async()
        .count_down_latch("example:blocking-latch")
        .expect("a valid name")
}

#[allow(dead_code)]
fn main() -> locksmith::Result<()> {
    run(&std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into()))
}
