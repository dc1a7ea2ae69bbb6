//! A Java service running Redisson's RLock and a locksmith service share one
//! lock. The Java side is played by Redisson's acquire and release logic,
//! written here in Lua from the protocol facts (hash NAME, field
//! `<uuid>:<thread-id>`, PEXPIRE lease, busy answers PTTL, final release
//! deletes and publishes 0 on `redisson_lock__channel:{NAME}`).

mod common;

use std::time::{Duration, Instant};

use common::setup;
use futures_util::StreamExt;
use redis::Script;

const NAME: &str = "shared:inventory";
const CHANNEL: &str = "redisson_lock__channel:{shared:inventory}";

/// Acquire as RLock does it: nil when acquired, else the PTTL.
const JAVA_ACQUIRE: &str = r#"
if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then
    redis.call('hincrby', KEYS[1], ARGV[2], 1);
    redis.call('pexpire', KEYS[1], ARGV[1]);
    return nil;
end;
return redis.call('pttl', KEYS[1]);
"#;

/// Release as RLock does it: nil for a non-owner, 0 still held, 1 freed.
const JAVA_RELEASE: &str = r#"
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then
    return nil;
end;
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
if (counter > 0) then
    redis.call('pexpire', KEYS[1], ARGV[2]);
    return 0;
else
    redis.call('del', KEYS[1]);
    redis.call('publish', KEYS[2], ARGV[1]);
    return 1;
end;
"#;

/// The Java client: its UUID and a thread id make the owner field.
struct JavaClient {
    conn: redis::aio::MultiplexedConnection,
    redis: redis::Client,
    owner: String,
}

impl JavaClient {
    async fn new(url: &str) -> Self {
        let redis = redis::Client::open(url).unwrap();
        JavaClient {
            conn: redis.get_multiplexed_async_connection().await.unwrap(),
            redis,
            owner: "6f1c2d3e-4b5a-4c6d-8e9f-0a1b2c3d4e5f:57".into(),
        }
    }

    /// One try: None when acquired, Some(pttl) when busy.
    async fn try_acquire(&mut self) -> Option<i64> {
        Script::new(JAVA_ACQUIRE)
            .key(NAME)
            .arg(30_000)
            .arg(&self.owner)
            .invoke_async(&mut self.conn)
            .await
            .unwrap()
    }

    /// RLock.lock(): try, subscribe, wait for the unlock message, retry.
    async fn lock(&mut self, limit: Duration) -> bool {
        let mut pubsub = self.redis.get_async_pubsub().await.unwrap();
        pubsub.subscribe(CHANNEL).await.unwrap();
        let deadline = Instant::now() + limit;
        let mut messages = pubsub.on_message();
        loop {
            let Some(ttl) = self.try_acquire().await else {
                return true;
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let wait = left.min(Duration::from_millis(ttl.max(1) as u64));
            if let Ok(Some(msg)) = tokio::time::timeout(wait, messages.next()).await {
                let payload: i64 = msg.get_payload().unwrap();
                assert_eq!(payload, 0, "locksmith publishes Redisson's unlock message");
            }
        }
    }

    async fn release(&mut self) -> Option<i64> {
        Script::new(JAVA_RELEASE)
            .key(NAME)
            .key(CHANNEL)
            .arg(0)
            .arg(30_000)
            .arg(&self.owner)
            .invoke_async(&mut self.conn)
            .await
            .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_holder_excludes_locksmith_and_its_release_wakes_our_waiter() {
    let (server, client) = setup(Duration::from_secs(30)).await;
    let mut java = JavaClient::new(&server.url()).await;
    assert_eq!(java.try_acquire().await, None);
    assert_eq!(
        java.try_acquire().await,
        None,
        "Redisson re-enters its own lock"
    );

    let lock = client.lock(NAME).unwrap();
    assert!(
        lock.try_lock().await.unwrap().is_none(),
        "locksmith is excluded"
    );
    let info = lock.info().await.unwrap();
    assert_eq!(info.holders, vec![(java.owner.clone(), 2)]);

    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let guard = lock.try_lock_for(Duration::from_secs(20)).await.unwrap();
        (guard, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(java.release().await, Some(0));
    assert_eq!(java.release().await, Some(1));
    let (guard, waited) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap();
    let guard = guard.expect("woken by the Java client's unlock message");
    // Woken by the message, not by the 30 s lease running out.
    assert!(waited < Duration::from_secs(10), "waited {waited:?}");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locksmith_holder_excludes_java_and_its_release_wakes_the_java_waiter() {
    let (server, client) = setup(Duration::from_secs(30)).await;
    let lock = client.lock(NAME).unwrap();
    let guard = lock.lock().await.unwrap();

    let mut java = JavaClient::new(&server.url()).await;
    let busy = java
        .try_acquire()
        .await
        .expect("Java sees the lock as busy");
    assert!(
        busy > 0 && busy <= 30_000,
        "busy answer is the PTTL: {busy}"
    );
    assert_eq!(java.release().await, None, "a non-owner cannot release");

    let url = server.url();
    let java_waiter = tokio::spawn(async move {
        let mut java = JavaClient::new(&url).await;
        let started = Instant::now();
        let got = java.lock(Duration::from_secs(20)).await;
        (got, started.elapsed(), java)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    guard.release().await.unwrap();
    let (got, waited, mut java) = tokio::time::timeout(Duration::from_secs(25), java_waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(got, "the Java waiter acquires");
    assert!(
        waited < Duration::from_secs(10),
        "woken by our release message, waited {waited:?}"
    );
    assert!(client
        .lock(NAME)
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .is_none());
    assert_eq!(java.release().await, Some(1));
}

#[tokio::test]
async fn owner_field_has_redissons_shape() {
    let (_server, client) = setup(Duration::from_secs(30)).await;
    let lock = client.lock("shape").unwrap();
    let guard = lock.lock().await.unwrap();
    let info = lock.info().await.unwrap();
    let (field, count) = &info.holders[0];
    let (uuid, holder) = field.rsplit_once(':').unwrap();
    assert_eq!(uuid, client.id().hyphenated().to_string());
    assert_eq!(uuid.len(), 36);
    assert!(uuid
        .chars()
        .all(|c| c == '-' || c.is_ascii_digit() || ('a'..='f').contains(&c)));
    assert!(!holder.is_empty() && holder.chars().all(|c| c.is_ascii_digit()));
    assert_eq!(*count, 1);
    assert_eq!(info.fencing_counter, guard.fencing_token());
    guard.release().await.unwrap();
}
