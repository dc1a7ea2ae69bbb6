//! The local lease deadline is never later than the server's expiry: a
//! shorter lease set by a re-entry or by a release's re-arm is reflected
//! at once, and an answer that changed nothing never moves the deadline.

use crate::common;

use std::time::Duration;

use common::setup;
use locksmith::LockGuard;
use locksmith_testkit::RedisServer;

/// The server's PTTL of `name`, in milliseconds.
fn pttl(server: &RedisServer, name: &str) -> i64 {
    let mut conn = server.connection().unwrap();
    redis::cmd("PTTL").arg(name).query(&mut conn).unwrap()
}

/// Asserts that the guard's local view ends no later than the server's
/// (the server's PTTL is read first, so time passing only helps).
fn assert_local_within_server(server: &RedisServer, name: &str, guard: &LockGuard) {
    let server_ms = pttl(server, name);
    let local = guard.remaining_lease();
    assert!(
        local.as_millis() as i64 <= server_ms,
        "local lease {local:?} outlasts the server's {server_ms} ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shorter_lease_set_by_reentry_is_reflected_locally() {
    let (server, client) = setup(Duration::from_secs(10)).await;
    let other = common::client(&server, Duration::from_secs(10)).await;
    let lock = client.lock("shorter-reentry").unwrap();
    let outer = lock
        .with_lease(Duration::from_secs(10))
        .unwrap()
        .lock()
        .await
        .unwrap();
    let inner = lock
        .with_lease(Duration::from_secs(1))
        .unwrap()
        .lock()
        .await
        .unwrap();
    assert_local_within_server(&server, "shorter-reentry", &outer);
    assert!(outer.remaining_lease() <= Duration::from_secs(1));

    // The server lets the lock go after 1 s; another client takes it, and
    // by then the holder knows its lease is gone.
    let taken = other
        .lock("shorter-reentry")
        .unwrap()
        .try_lock_for(Duration::from_secs(3))
        .await
        .unwrap()
        .expect("the lock expires after the re-entry's 1 s lease");
    assert!(
        outer.is_lost(),
        "the holder must not believe it still holds"
    );
    assert!(inner.is_lost());
    taken.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shorter_lease_set_by_a_release_rearm_is_reflected_locally() {
    let (server, client) = setup(Duration::from_secs(10)).await;
    let other = common::client(&server, Duration::from_secs(10)).await;
    let lock = client.lock("shorter-rearm").unwrap();
    let outer = lock
        .with_lease(Duration::from_secs(10))
        .unwrap()
        .lock()
        .await
        .unwrap();
    let inner = lock
        .with_lease(Duration::from_secs(1))
        .unwrap()
        .lock()
        .await
        .unwrap();
    // Releasing the inner hold re-arms the lease with the inner handle's
    // 1 s on the server.
    inner.release().await.unwrap();
    assert_local_within_server(&server, "shorter-rearm", &outer);

    let taken = other
        .lock("shorter-rearm")
        .unwrap()
        .try_lock_for(Duration::from_secs(3))
        .await
        .unwrap()
        .expect("the lock expires after the re-armed 1 s");
    assert!(outer.is_lost());
    assert!(matches!(
        outer.release().await,
        Err(locksmith::Error::NotHeld { .. })
    ));
    taken.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_no_op_rollback_answer_does_not_move_the_deadline() {
    let (server, client) = setup(Duration::from_secs(10)).await;
    let lock = client.lock("no-op-rollback").unwrap();
    let guard = lock
        .with_lease(Duration::from_secs(3))
        .unwrap()
        .lock()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;

    // Out of memory: the re-entrant acquire fails on the server without
    // changing anything; its rollback answers "nothing changed" and must
    // not restart the local lease.
    let mut admin = server.connection().unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1")
        .query(&mut admin)
        .unwrap();
    let err = lock.lock().await.expect_err("no writes under maxmemory 1");
    assert!(err.to_string().contains("OOM"), "{err}");
    // Let the rollback run.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("0")
        .query(&mut admin)
        .unwrap();

    assert_local_within_server(&server, "no-op-rollback", &guard);
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    guard.release().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leftover_grant_picked_up_later_keeps_its_own_expiry() {
    let (server, client) = setup(Duration::from_secs(10)).await;
    let lock = client.lock("leftover").unwrap();
    // A grant of this owner left on the server by an attempt it gave up on
    // (its undo never got through), with 5 s of its lease left.
    let mut admin = server.connection().unwrap();
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg("leftover")
        .arg(lock.owner())
        .arg(1)
        .ignore()
        .cmd("PEXPIRE")
        .arg("leftover")
        // Long enough to outlast the acquire below on a loaded machine
        // (gone by then, the acquire would be a fresh grant).
        .arg(5_000)
        .ignore()
        .query(&mut admin)
        .unwrap();
    // The next acquire is answered "granted earlier": the local lease must
    // not start now with the full 10 s.
    let guard = lock
        .with_lease(Duration::from_secs(10))
        .unwrap()
        .lock()
        .await
        .unwrap();
    assert_local_within_server(&server, "leftover", &guard);
    assert!(guard.remaining_lease() <= Duration::from_millis(5_000));
    drop(guard);
}
