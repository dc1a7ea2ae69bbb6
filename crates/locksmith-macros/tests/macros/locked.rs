//! `#[locked]` against a real Redis: mutual exclusion between concurrent
//! calls, names formatted from arguments, wait bounds and error mapping.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use locksmith_macros::locked;
use locksmith_testkit::RedisServer;

#[derive(Debug)]
enum AppError {
    Busy,
    Lock(locksmith::Error),
}

impl From<locksmith::Error> for AppError {
    fn from(e: locksmith::Error) -> Self {
        AppError::Lock(e)
    }
}

/// Increments a shared counter non-atomically (read, sleep, write): only
/// mutual exclusion keeps the count right.
#[locked("counter:{key}", client = client, lease = "10s")]
async fn bump(
    client: &locksmith::Client,
    key: &str,
    counter: Arc<AtomicUsize>,
) -> Result<usize, AppError> {
    let seen = counter.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(2)).await;
    counter.store(seen + 1, Ordering::SeqCst);
    Ok(seen + 1)
}

#[locked("slow:{id}", client = client, wait = "100ms", lease = "5s", busy = AppError::Busy)]
async fn hold(client: &locksmith::Client, id: u32, for_ms: u64) -> Result<(), AppError> {
    tokio::time::sleep(Duration::from_millis(for_ms)).await;
    Ok(())
}

#[locked("plain:{id}", client = client, wait = "100ms", lease = "5s")]
async fn hold_plain(
    client: &locksmith::Client,
    id: u32,
    for_ms: u64,
) -> Result<(), locksmith::Error> {
    tokio::time::sleep(Duration::from_millis(for_ms)).await;
    Ok(())
}

#[locked("early:{id}", client = client, lease = "5s")]
async fn early_return(client: &locksmith::Client, id: u32) -> Result<u32, AppError> {
    if id > 10 {
        return Ok(id * 2);
    }
    Err(AppError::Busy)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_exclude_each_other() {
    let redis = RedisServer::start().unwrap();
    let client = locksmith::Client::open(&redis.url()).await.unwrap();
    let counter = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..40 {
        let (client, counter) = (client.clone(), counter.clone());
        tasks.push(tokio::spawn(async move {
            bump(&client, "a", counter).await.unwrap()
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(counter.load(Ordering::SeqCst), 40, "no lost update");
    // Released after each call: nothing left in Redis.
    let mut conn = redis.connection().unwrap();
    let exists: bool = redis::cmd("EXISTS")
        .arg("counter:a")
        .query(&mut conn)
        .unwrap();
    assert!(!exists);
}

/// Waits (up to 10 s) until the lock `name` is held.
async fn wait_until_locked(client: &locksmith::Client, name: &str) {
    let lock = client.lock(name).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !lock.is_locked().await.unwrap() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name} was never locked"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_bound_yields_the_busy_error() {
    let redis = RedisServer::start().unwrap();
    let client = locksmith::Client::open(&redis.url()).await.unwrap();
    let holder = {
        let client = client.clone();
        // Held for 3 s once taken: the call after it is seen held below
        // (100 ms of wait) finds it busy also on a loaded machine.
        tokio::spawn(async move { hold(&client, 1, 3_000).await })
    };
    wait_until_locked(&client, "slow:1").await;
    assert!(matches!(hold(&client, 1, 0).await, Err(AppError::Busy)));
    // Another name is free.
    hold(&client, 2, 0).await.unwrap();
    holder.await.unwrap().unwrap();
    hold(&client, 1, 0).await.unwrap();
}

/// Without `busy`, a lock held past the wait is its own outcome
/// (`ErrorKind::Busy`), not `Timeout`, which means Redis did not answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_bound_without_busy_yields_error_busy() {
    let redis = RedisServer::start().unwrap();
    let client = locksmith::Client::open(&redis.url()).await.unwrap();
    let holder = {
        let client = client.clone();
        // Held for 3 s once taken: the call after it is seen held below
        // (100 ms of wait) finds it busy also on a loaded machine.
        tokio::spawn(async move { hold_plain(&client, 1, 3_000).await })
    };
    wait_until_locked(&client, "plain:1").await;
    let err = hold_plain(&client, 1, 0).await.unwrap_err();
    assert_eq!(err.kind(), locksmith::ErrorKind::Busy, "{err}");
    match err {
        locksmith::Error::Busy { name, waited } => {
            assert_eq!(name, "plain:1");
            assert_eq!(waited, Duration::from_millis(100));
        }
        other => panic!("not Busy: {other}"),
    }
    holder.await.unwrap().unwrap();
    hold_plain(&client, 1, 0).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn return_and_errors_of_the_body_pass_through() {
    let redis = RedisServer::start().unwrap();
    let client = locksmith::Client::open(&redis.url()).await.unwrap();
    assert_eq!(early_return(&client, 21).await.unwrap(), 42);
    assert!(matches!(
        early_return(&client, 1).await,
        Err(AppError::Busy)
    ));
    // Lock errors map through From: an invalid (empty-after-format) name is
    // refused by the library before anything is sent.
    let bad = locksmith::Client::builder(redis.url())
        .max_name_len(3)
        .build()
        .await
        .unwrap();
    assert!(
        matches!(early_return(&bad, 21).await, Err(AppError::Lock(e)) if e.is_invalid_argument())
    );
}
