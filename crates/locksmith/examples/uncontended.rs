//! A fixed amount of uncontended lock + release work, for profiling the
//! client side (`valgrind --tool=callgrind`, `perf`): `TASKS` tasks each
//! lock and release a key of their own `PAIRS` times, against the Redis at
//! `URL`. A fixed count, not a duration, so instruction counts compare
//! across builds.
//!
//! ```sh
//! cargo run --release -p redis-locksmith --example uncontended -- redis://127.0.0.1:6379 64 2000
//! ```

use std::time::Instant;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .ok_or("usage: uncontended URL [TASKS] [PAIRS]")?;
    let tasks: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(64);
    let pairs: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(2000);
    let client = locksmith::Client::open(&url).await?;
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for t in 0..tasks {
        let lock = client.lock(format!("profile:{t}"))?;
        set.spawn(async move {
            for _ in 0..pairs {
                let guard = lock.lock().await?;
                guard.release().await?;
            }
            Ok::<_, locksmith::Error>(())
        });
    }
    while let Some(done) = set.join_next().await {
        done??;
    }
    let elapsed = started.elapsed();
    let total = tasks * pairs;
    println!(
        "{total} pairs in {elapsed:?}: {:.0} pairs/s",
        total as f64 / elapsed.as_secs_f64()
    );
    Ok(())
}
