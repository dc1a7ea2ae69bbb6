//! The permit-expirable semaphore on every topology: ids and leases on the
//! server's clock, a crashed holder's permit coming back, the watchdog,
//! the lost signal, random cancellation, and sharing the semaphore with a
//! Redisson-style client.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use locksmith::{Error, ErrorKind};
use redis::Script;

use crate::common::{eventually, Env};

crate::on_every_topology!(
    permits_have_ids_and_leases_in_redissons_layout,
    a_crashed_holders_permit_returns_after_its_lease,
    the_watchdog_keeps_permits_and_signals_their_loss,
    holders_never_exceed_permits_under_random_cancellation,
    a_redisson_client_shares_the_permits,
);

fn hex_to_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

fn timeouts(name: &str) -> String {
    format!("{{{name}}}:timeout")
}

async fn permits_have_ids_and_leases_in_redissons_layout(env: Env) {
    let client = env.client(Duration::from_secs(30)).await;
    let name = env.name("encoders");
    let sem = client.expirable_semaphore(name.clone()).unwrap();
    assert!(sem.try_set_permits(2).await.unwrap());
    assert!(!sem.try_set_permits(5).await.unwrap());
    let permit = sem.acquire().await.unwrap();
    let id = permit.id().to_owned();
    assert_eq!(id.len(), 32);
    assert_eq!(sem.available().await.unwrap(), 1);
    assert_eq!(sem.held().await.unwrap(), 1);

    // The zset member is the id's 16 raw bytes; its score the expiry in
    // epoch ms, about a lease from now on the server's clock.
    let key = timeouts(&name);
    let mut node = env.node_for(&key);
    let score: Option<f64> = redis::cmd("ZSCORE")
        .arg(&key)
        .arg(hex_to_bytes(&id))
        .query(&mut node)
        .unwrap();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut node).unwrap();
    let now_ms = secs * 1000 + micros / 1000;
    let left = score.expect("member is the raw id") as i64 - now_ms as i64;
    assert!(left > 25_000 && left <= 30_000, "{left} ms left");

    permit.release().await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 2);
    let again = sem.release_by_id(&id).await.unwrap_err();
    assert!(
        matches!(&again, Error::PermitNotHeld { expired: false, .. }),
        "{again}"
    );
    assert_eq!(again.kind(), ErrorKind::NotHeld);
    assert_eq!(
        sem.release_by_id("not-hex").await.unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        sem.add_permits(0).await.unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(sem.available().await.unwrap(), 2, "nothing changed");

    // A semaphore name holding a hash: a clear error naming the key.
    let hash = env.name("a-hash");
    let _: () = redis::cmd("HSET")
        .arg(&hash)
        .arg("f")
        .arg("v")
        .query(&mut env.node_for(&hash))
        .unwrap();
    let wrong = client.expirable_semaphore(hash.clone()).unwrap();
    let err = wrong.try_acquire().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongType, "{err}");
    assert!(err.to_string().contains(&hash), "{err}");
}

async fn a_crashed_holders_permit_returns_after_its_lease(env: Env) {
    let client = env.client(Duration::from_secs(30)).await;
    let name = env.name("crash");
    let sem = client.expirable_semaphore(name.clone()).unwrap();
    sem.try_set_permits(1).await.unwrap();
    // A holder that never releases (as if killed): a fixed 2 s lease, long
    // enough that it is still out at the `try_acquire` below on a loaded
    // machine. Its lease starts on the server after `taken_at`.
    let lease = Duration::from_secs(2);
    let taken_at = Instant::now();
    let crashed = sem.with_lease(lease).unwrap().acquire().await.unwrap();
    std::mem::forget(crashed);
    assert!(sem.try_acquire().await.unwrap().is_none());
    // A waiter gets it once the lease runs out, without any release
    // message: it re-checks when the nearest lease ends.
    let permit = sem
        .try_acquire_for(Duration::from_secs(20))
        .await
        .unwrap()
        .expect("the expired permit comes back");
    let waited = taken_at.elapsed();
    assert!(waited >= lease - Duration::from_millis(50), "{waited:?}");
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    permit.release().await.unwrap();

    // Releasing a permit whose lease ran out says so.
    let late = sem
        .with_lease(Duration::from_millis(200))
        .unwrap()
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(late.is_lost(), "the local timer marked it lost");
    let err = late.release().await.unwrap_err();
    assert!(
        matches!(err, Error::PermitNotHeld { expired: true, .. }),
        "{err}"
    );
    assert_eq!(sem.available().await.unwrap(), 1, "and it is back");
}

async fn the_watchdog_keeps_permits_and_signals_their_loss(env: Env) {
    // 1.5 s leases: a stall of a few hundred ms under load is no loss.
    let client = env.client(Duration::from_millis(1_500)).await;
    let name = env.name("renewed");
    let sem = client.expirable_semaphore(name.clone()).unwrap();
    sem.try_set_permits(1).await.unwrap();
    let permit = sem.acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    assert!(!permit.is_lost(), "renewed past three leases");
    assert_eq!(sem.held().await.unwrap(), 1);
    assert!(sem.try_acquire().await.unwrap().is_none());

    // Someone takes the permit away: the holder is told within a lease.
    let lost = permit.lost();
    let key = timeouts(&name);
    let _: i64 = redis::cmd("ZREM")
        .arg(&key)
        .arg(hex_to_bytes(permit.id()))
        .query(&mut env.node_for(&key))
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), lost.wait())
        .await
        .expect("lost signal fires");
    assert!(permit.is_lost());
    assert_eq!(
        permit.release().await.unwrap_err().kind(),
        ErrorKind::NotHeld
    );
}

async fn holders_never_exceed_permits_under_random_cancellation(env: Env) {
    const PERMITS: usize = 3;
    const TASKS: usize = 12;
    const ROUNDS: usize = 100;
    let clients = [
        env.client(Duration::from_secs(30)).await,
        env.client(Duration::from_secs(30)).await,
    ];
    let name = env.name("cancel");
    clients[0]
        .expirable_semaphore(name.clone())
        .unwrap()
        .try_set_permits(PERMITS as u64)
        .await
        .unwrap();
    let holders = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let cancelled = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let sem = clients[t % 2].expirable_semaphore(name.clone()).unwrap();
        let (holders, most, cancelled) = (holders.clone(), most.clone(), cancelled.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let patience =
                    Duration::from_micros((uuid::Uuid::new_v4().as_u128() % 4_000) as u64);
                let Ok(acquired) = tokio::time::timeout(patience, sem.acquire()).await else {
                    cancelled.fetch_add(1, Ordering::SeqCst);
                    continue;
                };
                let permit = acquired.unwrap();
                let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_micros(300)).await;
                holders.fetch_sub(1, Ordering::SeqCst);
                permit.release().await.unwrap();
            }
        }));
    }
    let all = async {
        for task in tasks {
            task.await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(90), all)
        .await
        .expect("bounded run");
    assert!(most.load(Ordering::SeqCst) <= PERMITS);
    assert!(
        cancelled.load(Ordering::SeqCst) > 0,
        "some acquires were cancelled"
    );
    let sem = clients[0].expirable_semaphore(name).unwrap();
    let settled = eventually(Duration::from_secs(10), || async {
        sem.available().await.unwrap() == PERMITS as i64 && sem.held().await.unwrap() == 0
    })
    .await;
    assert!(settled, "no permit lost or left taken");
}

/// Redisson's `tryAcquire` of one permit with a lease (its client clock).
const JAVA_ACQUIRE: &str = r#"
local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1]);
if #expiredIds > 0 then
    redis.call('zrem', KEYS[2], unpack(expiredIds));
    local value = redis.call('incrby', KEYS[1], #expiredIds);
    if tonumber(value) > 0 then redis.call(ARGV[5], KEYS[3], value); end;
end;
local value = redis.call('get', KEYS[1]);
if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then
    redis.call('decrby', KEYS[1], ARGV[1]);
    for i = 6, #ARGV, 1 do redis.call('zadd', KEYS[2], ARGV[2], ARGV[i]); end;
    return 'OK';
end;
return nil;
"#;

/// Redisson's `tryRelease(id)`: 1 released in time, 0 otherwise.
const JAVA_RELEASE: &str = r#"
local expire = redis.call('zscore', KEYS[3], ARGV[1]);
local removed = redis.call('zrem', KEYS[3], ARGV[1]);
if tonumber(removed) ~= 1 then return 0; end;
local value = redis.call('incrby', KEYS[1], ARGV[2]);
redis.call(ARGV[4], KEYS[2], value);
if tonumber(expire) <= tonumber(ARGV[3]) then return 0; end;
return 1;
"#;

async fn a_redisson_client_shares_the_permits(env: Env) {
    let client = env.client(Duration::from_secs(30)).await;
    let name = env.name("shared-permits");
    let (key, channel) = (timeouts(&name), format!("redisson_sc:{{{name}}}"));
    let publish = if env.redisson_sharded() {
        "spublish"
    } else {
        "publish"
    };
    let node = redis::Client::open(env.node_url_for(&name)).unwrap();
    let sem = client.expirable_semaphore(name.clone()).unwrap();
    sem.try_set_permits(1).await.unwrap();
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };

    // Java takes the permit (id: 16 raw bytes); we see it held, and wake
    // when Java releases it.
    let java_id = hex_to_bytes("00112233445566778899aabbccddeeff");
    let taken: Option<String> = Script::new(JAVA_ACQUIRE)
        .key(&name)
        .key(&key)
        .key(&channel)
        .arg(1)
        .arg(now_ms() + 30_000)
        .arg(now_ms())
        .arg(i64::MAX)
        .arg(publish)
        .arg(&java_id)
        .invoke(&mut node.get_connection().unwrap())
        .unwrap();
    assert_eq!(taken.as_deref(), Some("OK"));
    assert_eq!(sem.held().await.unwrap(), 1);
    assert!(sem.try_acquire().await.unwrap().is_none());
    let waiting = sem.clone();
    let waiter =
        tokio::spawn(async move { waiting.try_acquire_for(Duration::from_secs(20)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released: i64 = Script::new(JAVA_RELEASE)
        .key(&name)
        .key(&channel)
        .key(&key)
        .arg(&java_id)
        .arg(1)
        .arg(now_ms())
        .arg(publish)
        .invoke(&mut node.get_connection().unwrap())
        .unwrap();
    assert_eq!(released, 1);
    let permit = tokio::time::timeout(Duration::from_secs(15), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .expect("woken by the Java release");

    // Java releases our permit by its id, as Redisson's release(id) does.
    let released: i64 = Script::new(JAVA_RELEASE)
        .key(&name)
        .key(&channel)
        .key(&key)
        .arg(hex_to_bytes(permit.id()))
        .arg(1)
        .arg(now_ms())
        .arg(publish)
        .invoke(&mut node.get_connection().unwrap())
        .unwrap();
    assert_eq!(released, 1, "Java finds our permit under its raw id");
    assert_eq!(sem.available().await.unwrap(), 1);
    assert_eq!(
        permit.release().await.unwrap_err().kind(),
        ErrorKind::NotHeld
    );
}
