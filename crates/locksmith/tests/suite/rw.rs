//! The read-write lock on every topology: an interval checker over random
//! readers and writers, downgrade and refused upgrade, per-hold leases
//! kept by the watchdog, writer preference under a reader flood, bad
//! input, and sharing the lock with a Redisson-style client.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use locksmith::ErrorKind;
use redis::Script;

use crate::common::{eventually, Env};

crate::on_every_topology!(
    readers_overlap_and_writers_exclude_everyone,
    a_writer_may_downgrade_and_a_reader_may_not_upgrade,
    each_read_hold_keeps_its_own_lease,
    preferring_writers_are_not_starved_by_a_reader_flood,
    a_single_try_leaves_waiting_writers_claims_alone,
    bad_input_is_refused_and_changes_nothing,
    a_redisson_client_shares_the_lock,
    the_lock_outlives_every_hold_in_it,
    force_unlock_frees_either_mode_and_wakes_waiters,
);

/// Who is inside, as the checker sees it.
#[derive(Default)]
struct Inside {
    readers: AtomicUsize,
    writer: AtomicBool,
    most_readers: AtomicUsize,
    violations: AtomicUsize,
}

async fn readers_overlap_and_writers_exclude_everyone(env: Env) {
    let clients = [
        env.client(Duration::from_secs(30)).await,
        env.client(Duration::from_secs(30)).await,
    ];
    let name = env.name("prices");
    let inside = Arc::new(Inside::default());
    let mut tasks = Vec::new();
    for t in 0..8 {
        let lock = clients[t % 2].read_write_lock(name.clone()).unwrap();
        let inside = inside.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..25 {
                let write = (t + round) % 4 == 0;
                if write {
                    let guard = lock.write().await.unwrap();
                    if inside.writer.swap(true, Ordering::SeqCst)
                        || inside.readers.load(Ordering::SeqCst) > 0
                    {
                        inside.violations.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside.writer.store(false, Ordering::SeqCst);
                    guard.release().await.unwrap();
                } else {
                    let guard = lock.read().await.unwrap();
                    let now = inside.readers.fetch_add(1, Ordering::SeqCst) + 1;
                    inside.most_readers.fetch_max(now, Ordering::SeqCst);
                    if inside.writer.load(Ordering::SeqCst) {
                        inside.violations.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    inside.readers.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.unwrap();
                }
            }
        }));
    }
    let all = async {
        for t in tasks {
            t.await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(90), all)
        .await
        .expect("bounded run");
    assert_eq!(
        inside.violations.load(Ordering::SeqCst),
        0,
        "exclusion held"
    );
    assert!(
        inside.most_readers.load(Ordering::SeqCst) >= 2,
        "readers overlapped"
    );
    let info = clients[0]
        .read_write_lock(name)
        .unwrap()
        .info()
        .await
        .unwrap();
    assert_eq!(info.mode, None, "free at the end: {info:?}");
}

fn hold_key(name: &str, owner: &str, n: u32) -> String {
    format!("{{{name}}}:{owner}:rwlock_timeout:{n}")
}

async fn a_writer_may_downgrade_and_a_reader_may_not_upgrade(env: Env) {
    let client = env.client(Duration::from_secs(30)).await;
    let name = env.name("config");
    let lock = client.read_write_lock(name.clone()).unwrap();
    let write = lock.write().await.unwrap();
    let write_token = write.fencing_token();
    let read = lock.read().await.expect("the writer may take read holds");
    let info = lock.info().await.unwrap();
    assert_eq!(info.mode.as_deref(), Some("write"));
    assert_eq!(info.writer, Some((lock.owner().to_owned(), 1)));
    assert_eq!(info.readers, vec![(lock.owner().to_owned(), 1)]);
    assert_eq!(env.existing(&[hold_key(&name, lock.owner(), 1)]).len(), 1);

    let other = client.read_write_lock(name.clone()).unwrap();
    assert!(
        other.try_read().await.unwrap().is_none(),
        "writer excludes readers"
    );
    write.release().await.unwrap();
    // Downgraded: still read-locked by us; others may read, not write.
    assert_eq!(lock.info().await.unwrap().mode.as_deref(), Some("read"));
    let shared = other.try_read().await.unwrap().expect("readers share");
    assert!(shared.fencing_token() >= write_token);
    assert!(other.try_write().await.is_err(), "a reader asking to write");
    let third = client.read_write_lock(name.clone()).unwrap();
    assert!(
        third.try_write().await.unwrap().is_none(),
        "readers exclude writers"
    );

    // Upgrade refused with a clear error instead of a deadlock.
    let err = lock.write().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Upgrade, "{err}");
    assert!(err.to_string().contains("release the read holds"), "{err}");

    read.release().await.unwrap();
    shared.release().await.unwrap();
    assert_eq!(lock.info().await.unwrap().mode, None);
    let write = third.try_write().await.unwrap().expect("free");
    assert!(write.fencing_token() > write_token, "tokens increase");
    write.release().await.unwrap();

    // A write hold whose fixed lease ran out: its release says so.
    let short = third
        .with_lease(Duration::from_millis(200))
        .unwrap()
        .write()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        short.release().await.unwrap_err().kind(),
        ErrorKind::NotHeld
    );
}

async fn a_single_try_leaves_waiting_writers_claims_alone(env: Env) {
    let client = env.client(Duration::from_secs(30)).await;
    let name = env.name("claims");
    let reader = client.read_write_lock(name.clone()).unwrap();
    let read = reader.read().await.unwrap();
    let writer = client
        .read_write_lock(name.clone())
        .unwrap()
        .prefer_writers();
    let waiting = tokio::spawn(async move { writer.write().await.unwrap() });
    let claimed = eventually(Duration::from_secs(10), || async {
        reader.info().await.unwrap().waiting_writers == 1
    })
    .await;
    assert!(claimed, "the waiting writer's claim");
    let other = client
        .read_write_lock(name.clone())
        .unwrap()
        .prefer_writers();
    assert!(other.try_write().await.unwrap().is_none());
    assert_eq!(
        reader.info().await.unwrap().waiting_writers,
        1,
        "a single try neither claims nor clears claims"
    );
    // The claim holds back new readers, whatever their own handle says.
    let plain = client.read_write_lock(name.clone()).unwrap();
    assert!(plain.try_read().await.unwrap().is_none());
    read.release().await.unwrap();
    let write = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reader.info().await.unwrap().waiting_writers, 0);
    write.release().await.unwrap();
}

async fn each_read_hold_keeps_its_own_lease(env: Env) {
    // 1.5 s leases: a stall of a few hundred ms under load is no loss.
    let client = env.client(Duration::from_millis(1_500)).await;
    let name = env.name("renewed");
    let lock = client.read_write_lock(name.clone()).unwrap();
    let first = lock.read().await.unwrap();
    let second = lock.read().await.unwrap();
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    assert!(
        !first.is_lost() && !second.is_lost(),
        "renewed past three leases"
    );
    let keys = [
        hold_key(&name, lock.owner(), 1),
        hold_key(&name, lock.owner(), 2),
    ];
    assert_eq!(env.existing(&keys).len(), 2, "both hold keys live");
    second.release().await.unwrap();
    assert_eq!(
        env.existing(&keys),
        vec![keys[0].clone()],
        "one hold, one key"
    );
    // A fixed-lease read hold expires on its own.
    let reader = client.read_write_lock(name.clone()).unwrap();
    let fixed = reader
        .with_lease(Duration::from_millis(300))
        .unwrap()
        .read()
        .await
        .unwrap();
    let key = hold_key(&name, reader.owner(), 1);
    assert!(
        eventually(Duration::from_secs(5), || async {
            env.existing(std::slice::from_ref(&key)).is_empty()
        })
        .await
    );
    assert!(eventually(Duration::from_secs(2), || async { fixed.is_lost() }).await);
    first.release().await.unwrap();
    assert!(
        eventually(Duration::from_secs(3), || async {
            reader.info().await.unwrap().mode.is_none()
        })
        .await
    );
}

async fn preferring_writers_are_not_starved_by_a_reader_flood(env: Env) {
    let client = env.client(Duration::from_secs(3)).await;
    let name = env.name("flood");
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for _ in 0..3 {
        // Two owners per task, hand over hand: the next read is taken
        // before the last is released, so without preference some reader
        // always holds the lock and a writer waits for ever (checked: this
        // test fails with the preference switched off).
        let owners = [
            client
                .read_write_lock(name.clone())
                .unwrap()
                .prefer_writers(),
            client
                .read_write_lock(name.clone())
                .unwrap()
                .prefer_writers(),
        ];
        let stop = stop.clone();
        readers.push(tokio::spawn(async move {
            let mut held = owners[0].read().await.unwrap();
            let mut rounds = 0;
            while !stop.load(Ordering::SeqCst) && rounds < 2_000 {
                rounds += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
                let owner = &owners[rounds % 2];
                // Readers that cannot get the next hold promptly let go
                // first (holding one read while waiting for another would
                // deadlock with any writer-preferring lock).
                match owner.try_read_for(Duration::from_millis(50)).await.unwrap() {
                    Some(next) => {
                        held.release().await.unwrap();
                        held = next;
                    }
                    None => {
                        held.release().await.unwrap();
                        held = owner.read().await.unwrap();
                    }
                }
            }
            held.release().await.unwrap();
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let writer = client
        .read_write_lock(name.clone())
        .unwrap()
        .prefer_writers();
    let started = Instant::now();
    let guard = tokio::time::timeout(Duration::from_secs(10), writer.write()).await;
    let waited = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    let guard = guard
        .expect("the writer gets in despite the flood")
        .unwrap();
    assert!(waited < Duration::from_secs(10), "waited {waited:?}");
    assert_eq!(writer.info().await.unwrap().readers, vec![], "alone");
    guard.release().await.unwrap();
    let all = async {
        for r in readers {
            r.await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(20), all)
        .await
        .expect("the readers carry on after the writer");
    assert_eq!(writer.info().await.unwrap().waiting_writers, 0);
}

async fn bad_input_is_refused_and_changes_nothing(env: Env) {
    let client = env.client(Duration::from_secs(30)).await;
    assert_eq!(
        client.read_write_lock("").unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    let name = env.name("a-string");
    let _: () = redis::cmd("SET")
        .arg(&name)
        .arg("x")
        .query(&mut env.node_for(&name))
        .unwrap();
    let lock = client.read_write_lock(name.clone()).unwrap();
    for err in [
        lock.try_read().await.unwrap_err(),
        lock.try_write().await.unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::WrongType, "{err}");
        assert!(err.to_string().contains(&name), "{err}");
    }
    let value: String = redis::cmd("GET")
        .arg(&name)
        .query(&mut env.node_for(&name))
        .unwrap();
    assert_eq!(value, "x");
}

/// Redisson's write `tryLock`: nil granted, else the PTTL.
const JAVA_WRITE_ACQUIRE: &str = r#"
local mode = redis.call('hget', KEYS[1], 'mode');
if (mode == false) then
    redis.call('hset', KEYS[1], 'mode', 'write');
    redis.call('hset', KEYS[1], ARGV[2], 1);
    redis.call('pexpire', KEYS[1], ARGV[1]);
    return nil;
end;
if (mode == 'write') then
    if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
        redis.call('hincrby', KEYS[1], ARGV[2], 1);
        local currentExpire = redis.call('pttl', KEYS[1]);
        redis.call('pexpire', KEYS[1], currentExpire + ARGV[1]);
        return nil;
    end;
end;
return redis.call('pttl', KEYS[1]);
"#;

/// Redisson's write unlock (without its unlock-latch key): publishes '1'.
const JAVA_WRITE_RELEASE: &str = r#"
local mode = redis.call('hget', KEYS[1], 'mode');
if (mode == 'write') then
    if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end;
    local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
    if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; end;
    redis.call('hdel', KEYS[1], ARGV[3]);
    if (redis.call('hlen', KEYS[1]) == 1) then
        redis.call('del', KEYS[1]);
        redis.call(ARGV[4], KEYS[2], ARGV[1]);
    else
        redis.call('hset', KEYS[1], 'mode', 'read');
    end;
    return 1;
end;
return nil;
"#;

async fn a_redisson_client_shares_the_lock(env: Env) {
    let client = env.client(Duration::from_secs(30)).await;
    let name = env.name("shared-rw");
    let channel = format!("redisson_rwlock:{{{name}}}");
    let sharded = env.redisson_sharded();
    let publish = if sharded { "spublish" } else { "publish" };
    let node = redis::Client::open(env.node_url_for(&name)).unwrap();
    let java_writer = "6f1c2d3e-4b5a-4c6d-8e9f-0a1b2c3d4e5f:7:write";
    let java_write = || -> Option<i64> {
        Script::new(JAVA_WRITE_ACQUIRE)
            .key(&name)
            .arg(30_000)
            .arg(java_writer)
            .invoke(&mut node.get_connection().unwrap())
            .unwrap()
    };

    // Java writes; our reader waits and wakes on Java's '1'.
    assert_eq!(java_write(), None);
    let lock = client.read_write_lock(name.clone()).unwrap();
    assert!(lock.try_read().await.unwrap().is_none());
    let reader = lock.clone();
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        (reader.read().await.unwrap(), started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let freed: Option<i64> = Script::new(JAVA_WRITE_RELEASE)
        .key(&name)
        .key(&channel)
        .arg(1)
        .arg(30_000)
        .arg(java_writer)
        .arg(publish)
        .invoke(&mut node.get_connection().unwrap())
        .unwrap();
    assert_eq!(freed, Some(1));
    let (read, waited) = tokio::time::timeout(Duration::from_secs(15), waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(
        waited < Duration::from_secs(10),
        "woken by the message: {waited:?}"
    );

    // We read; Java's write is refused with the PTTL; our last read
    // unlock announces Redisson's '0', which its waiter acts on.
    assert!(java_write().is_some());
    let mut sub = node.get_connection().unwrap();
    let subscribe = if sharded { "SSUBSCRIBE" } else { "SUBSCRIBE" };
    redis::cmd(subscribe).arg(&channel).exec(&mut sub).unwrap();
    read.release().await.unwrap();
    sub.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let redis::Value::Array(parts) = sub.recv_response().unwrap() else {
        panic!("no unlock message")
    };
    assert_eq!(redis::from_redis_value::<i64>(parts[2].clone()).unwrap(), 0);
    assert_eq!(java_write(), None, "the Java writer gets in");
}

/// The hash's expiry covers every hold in it, whichever kind is released
/// or renewed: a read release of the writer's own short read hold does not
/// cut its long write hold (it once PEXPIREd the hash to the longest read
/// hold, and another client wrote while the write guard showed 9.6 s
/// left), nor does a partial write release cut a long read hold; and no
/// guard's local deadline passes the server's expiry.
async fn the_lock_outlives_every_hold_in_it(env: Env) {
    let client = env.client(Duration::from_secs(30)).await;
    let other = env.client(Duration::from_secs(30)).await;
    let server_ttl = |name: &str| -> i64 {
        redis::cmd("PTTL")
            .arg(name)
            .query(&mut env.node_for(name))
            .unwrap()
    };

    // A long write hold, then a short read hold of the same owner.
    let name = env.name("write-outlives-read");
    let lock = client.read_write_lock(name.clone()).unwrap();
    let write = lock
        .with_lease(Duration::from_secs(10))
        .unwrap()
        .write()
        .await
        .unwrap();
    let short = lock.with_lease(Duration::from_millis(300)).unwrap();
    let _kept = short.read().await.unwrap();
    let read = short.read().await.unwrap();
    // One of the two read holds goes; the other (300 ms) is the longest
    // read hold left, which must not become the hash's expiry.
    read.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let rival = other.read_write_lock(name.clone()).unwrap();
    assert!(
        rival.try_write().await.unwrap().is_none(),
        "another client wrote under a live write guard"
    );
    assert!(!write.is_lost());
    // The server's expiry first: read after it, the local deadline can
    // only be smaller than when the server was asked.
    let ttl = server_ttl(&name);
    let local = write.remaining_lease();
    assert!(
        local.as_millis() as i64 <= ttl,
        "the guard's deadline ({local:?}) is past the server's expiry ({ttl} ms)"
    );
    write.release().await.unwrap();

    // Two short write holds and a long read hold of the same owner: a
    // partial write release keeps the hash for the read hold.
    let name = env.name("read-outlives-write");
    let lock = client.read_write_lock(name.clone()).unwrap();
    let short = lock.with_lease(Duration::from_millis(300)).unwrap();
    let first = short.write().await.unwrap();
    let second = short.write().await.unwrap();
    let read = lock
        .with_lease(Duration::from_secs(10))
        .unwrap()
        .read()
        .await
        .unwrap();
    second.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rival = other.read_write_lock(name.clone()).unwrap();
    assert!(
        rival.try_write().await.unwrap().is_none(),
        "another client wrote under a live read guard"
    );
    assert!(!read.is_lost());
    // The server's expiry first: read after it, the local deadline can
    // only be smaller than when the server was asked.
    let ttl = server_ttl(&name);
    let local = read.remaining_lease();
    assert!(
        local.as_millis() as i64 <= ttl,
        "the read guard's deadline ({local:?}) is past the server's expiry ({ttl} ms)"
    );
    drop(first);
    read.release().await.unwrap();
}

/// `force_unlock` deletes the lock in either mode and wakes the waiters of
/// the other side (one message on the lock's channel each time), well
/// inside the holders' 30 s lease a waiter not woken would wait for; the
/// holders learn of the loss at their next renewal. A free name answers
/// false and a plain lock's key is refused.
async fn force_unlock_frees_either_mode_and_wakes_waiters(env: Env) {
    let holders = env.client(Duration::from_secs(30)).await;
    let waiters = env.client(Duration::from_secs(30)).await;
    let name = env.name("rw-forced");
    let admin = holders.read_write_lock(name.clone()).unwrap();
    let messages = env.count_messages_on(&format!("redisson_rwlock:{{{name}}}"));
    let count = || messages.load(std::sync::atomic::Ordering::SeqCst);
    let read = holders
        .read_write_lock(name.clone())
        .unwrap()
        .read()
        .await
        .unwrap();
    let writer = {
        let lock = waiters.read_write_lock(name.clone()).unwrap();
        tokio::spawn(async move { lock.try_write_for(Duration::from_secs(25)).await })
    };
    // The writer waits behind the reader.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!writer.is_finished());
    assert!(admin.force_unlock().await.unwrap());
    let write = tokio::time::timeout(Duration::from_secs(10), writer)
        .await
        .expect("the waiting writer is woken")
        .unwrap()
        .unwrap()
        .expect("granted");
    assert!(
        eventually(Duration::from_secs(5), || async { count() == 1 }).await,
        "one message"
    );

    let reader = {
        let lock = waiters.read_write_lock(name.clone()).unwrap();
        tokio::spawn(async move { lock.try_read_for(Duration::from_secs(25)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!reader.is_finished());
    // The writer's hold belongs to the waiters' client: force it from the
    // holders' side.
    assert!(admin.force_unlock().await.unwrap());
    let again = tokio::time::timeout(Duration::from_secs(10), reader)
        .await
        .expect("the waiting reader is woken")
        .unwrap()
        .unwrap()
        .expect("granted");
    assert!(
        eventually(Duration::from_secs(5), || async { count() == 2 }).await,
        "a second message"
    );
    for lost in [read.lost(), write.lost()] {
        tokio::time::timeout(Duration::from_secs(20), lost.wait())
            .await
            .expect("each holder learns it lost the lock");
    }
    assert_eq!(read.release().await.unwrap_err().kind(), ErrorKind::NotHeld);
    assert_eq!(
        write.release().await.unwrap_err().kind(),
        ErrorKind::NotHeld
    );
    again.release().await.unwrap();
    assert!(!admin.force_unlock().await.unwrap(), "nothing to delete");

    let plain = env.name("rw-forced-plain");
    let held = holders.lock(plain.clone()).unwrap().lock().await.unwrap();
    let err = holders
        .read_write_lock(plain)
        .unwrap()
        .force_unlock()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongType, "{err}");
    assert!(!held.is_lost());
    held.release().await.unwrap();
}
