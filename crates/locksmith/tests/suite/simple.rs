//! The simple `SET NX PX` lock, alone and shared with a client that uses
//! the plain pattern (as redis-py's `Lock` does).

use crate::common;

use std::time::{Duration, Instant};

use common::setup;
use locksmith::Error;

#[tokio::test]
async fn excludes_is_not_reentrant_and_releases_by_token() {
    let (_server, client) = setup(Duration::from_secs(10)).await;
    let lock = client.simple_lock("simple").unwrap();
    let guard = lock.try_lock().await.unwrap().expect("free");
    assert!(
        lock.try_lock().await.unwrap().is_none(),
        "not reentrant: a second acquire through the same handle is excluded"
    );
    assert!(lock.is_locked().await.unwrap());
    let first_token = guard.fencing_token();
    guard.release().await.unwrap();
    let again = lock.try_lock().await.unwrap().expect("free again");
    assert!(again.fencing_token() > first_token);
    assert!(lock.force_unlock().await.unwrap());
    assert!(matches!(again.release().await, Err(Error::NotHeld { .. })));
    assert_eq!(client.tracked_lease_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_a_lock_with_a_plain_set_nx_client() {
    let (server, client) = setup(Duration::from_secs(10)).await;
    let mut plain = server.connection().unwrap();
    // The other client takes the lock the way redis-py does.
    let ok: Option<String> = redis::cmd("SET")
        .arg("shared-simple")
        .arg("python-token")
        .arg("NX")
        .arg("PX")
        .arg(10_000)
        .query(&mut plain)
        .unwrap();
    assert_eq!(ok.as_deref(), Some("OK"));
    let lock = client.simple_lock("shared-simple").unwrap();
    assert!(lock.try_lock().await.unwrap().is_none());

    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        (
            lock.try_lock_for(Duration::from_secs(8)).await,
            started.elapsed(),
        )
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The plain client's compare-and-delete release publishes nothing; the
    // waiter's polling finds the lock free well before the 10 s lease.
    let _: i64 = redis::cmd("DEL")
        .arg("shared-simple")
        .query(&mut plain)
        .unwrap();
    let (got, waited) = waiter.await.unwrap();
    let guard = got.unwrap().expect("acquired after the plain release");
    assert!(waited < Duration::from_secs(5), "waited {waited:?}");
    let value: String = redis::cmd("GET")
        .arg("shared-simple")
        .query(&mut plain)
        .unwrap();
    assert_ne!(value, "python-token");
    // The plain client cannot take it now.
    let taken: Option<String> = redis::cmd("SET")
        .arg("shared-simple")
        .arg("python-token")
        .arg("NX")
        .arg("PX")
        .arg(10_000)
        .query(&mut plain)
        .unwrap();
    assert_eq!(taken, None);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn fixed_lease_runs_out_and_watchdog_renews() {
    // The watchdog's lease: 1.5 s, so a loaded machine's stall of a
    // second does not pass for a loss (renewals every 500 ms).
    let (_server, client) = setup(Duration::from_millis(1500)).await;
    let fixed = client
        .simple_lock("simple-lease")
        .unwrap()
        .with_lease(Duration::from_millis(300))
        .unwrap();
    let guard = fixed.lock().await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), guard.lost().wait())
        .await
        .expect("fixed lease runs out");
    // The local deadline is conservative; wait for the server to agree.
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            !fixed.is_locked().await.unwrap()
        })
        .await
    );
    assert!(matches!(guard.release().await, Err(Error::NotHeld { .. })));

    let watched = client.simple_lock("simple-watched").unwrap();
    let guard = watched.lock().await.unwrap();
    // Past two leases.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert!(!guard.is_lost());
    assert!(watched.is_locked().await.unwrap());
    guard.release().await.unwrap();
    assert!(!watched.is_locked().await.unwrap());
}

/// A lock another client took with its own token (not locksmith's 32 hex
/// digits) is force-unlocked; a number under the name (a semaphore's
/// count) is refused and kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_frees_a_peers_token_and_refuses_a_count() {
    let (server, client) = setup(Duration::from_secs(10)).await;
    let mut plain = server.connection().unwrap();
    for token in ["python-token", "6f1c1a4e-2b0d-4c5e-9a41-3e0f5b7d9c21"] {
        let _: () = redis::cmd("SET")
            .arg("peer-simple")
            .arg(token)
            .arg("PX")
            .arg(10_000)
            .query(&mut plain)
            .unwrap();
        let lock = client.simple_lock("peer-simple").unwrap();
        assert!(lock.force_unlock().await.unwrap(), "{token}");
        assert!(!lock.is_locked().await.unwrap(), "{token}");
    }
    let _: () = redis::cmd("SET")
        .arg("a-count")
        .arg(3)
        .query(&mut plain)
        .unwrap();
    let err = client
        .simple_lock("a-count")
        .unwrap()
        .force_unlock()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), locksmith::ErrorKind::WrongType, "{err}");
    let kept: String = redis::cmd("GET").arg("a-count").query(&mut plain).unwrap();
    assert_eq!(kept, "3");
}
