//! `extend` on guards and permits with a fixed lease: the lease end moves
//! forward only while the hold is still the guard's, never backward, and
//! the local lease view follows.

use crate::common;

use std::time::Duration;

use common::setup;
use locksmith::{Client, Error, ErrorKind, LockGuard};

/// A fixed lease that outlasts the calls between an acquire and its
/// extend on a loaded machine.
const SHORT: Duration = Duration::from_secs(3);
/// [`SHORT`] as `PTTL` gives it.
const SHORT_MS: i64 = 3_000;
const LONG: Duration = Duration::from_secs(20);

/// Milliseconds left on `key` on the server.
fn pttl(server: &locksmith_testkit::RedisServer, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query(&mut server.connection().unwrap())
        .unwrap()
}

/// The kinds whose guards take a fixed lease.
const KINDS: [&str; 5] = ["lock", "fair", "write", "read", "simple"];

/// A guard of `kind` with a fixed lease of `SHORT`, and the key whose
/// expiry holds its lease.
async fn guard(client: &Client, kind: &str) -> (LockGuard, String) {
    let key = format!("ext-{kind}");
    let guard = match kind {
        "lock" => {
            client
                .lock(&key)
                .unwrap()
                .with_lease(SHORT)
                .unwrap()
                .lock()
                .await
        }
        "fair" => {
            client
                .fair_lock(&key)
                .unwrap()
                .with_lease(SHORT)
                .unwrap()
                .lock()
                .await
        }
        "write" => {
            let rw = client
                .read_write_lock(&key)
                .unwrap()
                .with_lease(SHORT)
                .unwrap();
            rw.write().await
        }
        "read" => {
            let rw = client
                .read_write_lock(&key)
                .unwrap()
                .with_lease(SHORT)
                .unwrap();
            rw.read().await
        }
        "simple" => {
            let simple = client.simple_lock(&key).unwrap().with_lease(SHORT).unwrap();
            simple.lock().await
        }
        _ => unreachable!("{kind}"),
    };
    (guard.unwrap(), key)
}

#[tokio::test]
async fn extend_moves_a_fixed_lease_forward_on_every_kind() {
    let (server, client) = setup(Duration::from_secs(10)).await;
    for kind in KINDS {
        let (guard, key) = guard(&client, kind).await;
        assert!(pttl(&server, &key) <= SHORT_MS, "{kind}");
        guard.extend(LONG).await.unwrap();
        let left = pttl(&server, &key);
        assert!(left > 15_000, "{kind}: {left} ms left on the server");
        assert!(
            guard.remaining_lease() > Duration::from_secs(15),
            "{kind}: the local view follows: {:?}",
            guard.remaining_lease()
        );
        // Past the first lease, still held and still ours.
        tokio::time::sleep(SHORT + Duration::from_millis(300)).await;
        assert!(!guard.is_lost(), "{kind}");
        assert!(pttl(&server, &key) > 10_000, "{kind}");
        guard.release().await.unwrap();
    }
    assert_eq!(client.tracked_lease_count(), 0);
}

#[tokio::test]
async fn extend_never_shortens_a_lease() {
    let (server, client) = setup(Duration::from_secs(10)).await;
    for kind in KINDS {
        let (guard, key) = guard(&client, kind).await;
        guard.extend(LONG).await.unwrap();
        guard.extend(Duration::from_millis(200)).await.unwrap();
        assert!(
            pttl(&server, &key) > 15_000,
            "{kind}: shortened on the server"
        );
        assert!(
            guard.remaining_lease() > Duration::from_secs(15),
            "{kind}: shortened locally"
        );
        guard.release().await.unwrap();
    }
}

#[tokio::test]
async fn extend_of_a_lost_hold_answers_not_held_and_extends_nothing() {
    let (server, client) = setup(Duration::from_secs(10)).await;
    for kind in KINDS {
        let (guard, key) = guard(&client, kind).await;
        let _: i64 = redis::cmd("DEL")
            .arg(&key)
            .query(&mut server.connection().unwrap())
            .unwrap();
        let e = guard.extend(LONG).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotHeld, "{kind}: {e:?}");
        assert!(guard.is_lost(), "{kind}: the lease is marked lost");
        assert_eq!(pttl(&server, &key), -2, "{kind}: nothing was re-created");
        assert!(matches!(guard.release().await, Err(Error::NotHeld { .. })));
    }
}

/// A guard whose hold was lost must not extend the owner's next hold.
#[tokio::test]
async fn a_stale_guard_does_not_extend_the_owners_next_hold() {
    let (server, client) = setup(Duration::from_secs(10)).await;
    let lock = client.lock("ext-stale").unwrap().with_lease(SHORT).unwrap();
    let first = lock.lock().await.unwrap();
    let again = lock.lock().await.unwrap();
    assert!(lock.force_unlock().await.unwrap());
    // The owner learns of the loss, and takes the lock anew.
    assert!(matches!(again.release().await, Err(Error::NotHeld { .. })));
    let second = lock.lock().await.unwrap();
    let e = first.extend(LONG).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotHeld, "{e:?}");
    assert!(
        pttl(&server, "ext-stale") <= SHORT_MS,
        "the next hold's lease was moved by the stale guard"
    );
    assert!(second.remaining_lease() <= SHORT);
    second.release().await.unwrap();
    assert!(matches!(first.release().await, Err(Error::NotHeld { .. })));
}

#[tokio::test]
async fn extend_refuses_watchdog_holds_and_bad_leases() {
    let (server, client) = setup(Duration::from_secs(10)).await;
    let renewed = client.lock("ext-watchdog").unwrap().lock().await.unwrap();
    let e = renewed.extend(LONG).await.unwrap_err();
    assert!(e.is_invalid_argument(), "{e:?}");
    assert!(e.to_string().contains("watchdog"), "{e}");
    renewed.release().await.unwrap();

    let fixed = client
        .lock("ext-zero")
        .unwrap()
        .with_lease(SHORT)
        .unwrap()
        .lock()
        .await
        .unwrap();
    for bad in [Duration::ZERO, Duration::from_millis(1)] {
        let e = fixed.extend(bad).await.unwrap_err();
        assert!(e.is_invalid_argument(), "{bad:?}: {e:?}");
    }
    assert!(pttl(&server, "ext-zero") <= SHORT_MS);
    fixed.release().await.unwrap();
}

#[tokio::test]
async fn a_permit_extends_until_its_lease_has_run_out() {
    let (server, client) = setup(Duration::from_secs(10)).await;
    let sem = client.expirable_semaphore("ext-permits").unwrap();
    assert!(sem.try_set_permits(1).await.unwrap());
    let permit = sem
        .with_lease(SHORT)
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .expect("a permit");
    permit.extend(LONG).await.unwrap();
    assert!(permit.remaining_lease() > Duration::from_secs(15));
    tokio::time::sleep(SHORT + Duration::from_millis(300)).await;
    assert_eq!(sem.available().await.unwrap(), 0, "still taken");
    // A shorter lease leaves the end where it is.
    permit.extend(Duration::from_millis(100)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sem.available().await.unwrap(), 0, "still taken");
    permit.release().await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 1);

    let short = sem
        .with_lease(Duration::from_millis(200))
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .expect("a permit");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let e = short.extend(LONG).await.unwrap_err();
    assert!(
        matches!(e, Error::PermitNotHeld { .. }),
        "an expired permit is not extended: {e:?}"
    );
    assert_eq!(sem.available().await.unwrap(), 1, "back in the pool");
    drop(server);
}
