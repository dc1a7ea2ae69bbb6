//! A release whose answer never comes must not leave the owner wrong: the
//! watchdog stops renewing, the release is resent in the background until
//! Redis answers, the handle works again afterwards, and a resend is never
//! mistaken for success when the lease was already lost.

use crate::common;

use std::time::Duration;

use common::eventually;
use locksmith::{Client, ErrorKind};
use locksmith_testkit::{FaultMode, FaultProxy, RedisServer};

/// A client behind `proxy` with a short command timeout and `lease`.
async fn proxied(proxy: &FaultProxy, lease: Duration) -> Client {
    Client::builder(proxy.url())
        .lease(lease)
        .command_timeout(Duration::from_millis(300))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .await
        .expect("connect through the proxy")
}

/// This owner's field on the server, read directly.
fn field(server: &RedisServer, name: &str, owner: &str) -> Option<u64> {
    let mut conn = server.connection().unwrap();
    redis::cmd("HGET")
        .arg(name)
        .arg(owner)
        .query(&mut conn)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_cut_off_by_a_reset_frees_the_lock_within_one_lease() {
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(&server.addr()).unwrap();
    // Long enough that only the background resend can free the lock in
    // the time allowed below.
    let lease = Duration::from_secs(30);
    let client = proxied(&proxy, lease).await;
    let other = common::client(&server, lease).await;
    let lock = client.lock("cut-release").unwrap();
    let guard = lock.lock().await.unwrap();

    proxy.set_mode(FaultMode::Reset);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let err = guard
        .release()
        .await
        .expect_err("the release cannot get through");
    assert!(err.is_connection_error() || err.is_timeout(), "{err:?}");
    // The owner let go: nothing renews the lease any more.
    assert_eq!(client.tracked_lease_count(), 0);
    proxy.set_mode(FaultMode::Pass);

    // Another client gets the lock soon after Redis is reachable again:
    // the release is resent in the background (without it the lock would
    // stay until its 30 s lease ran out).
    let started = std::time::Instant::now();
    let got = other
        .lock("cut-release")
        .unwrap()
        .try_lock_for(Duration::from_secs(5))
        .await
        .unwrap();
    assert!(
        got.is_some(),
        "the lock was still held {:?} after the failed release",
        started.elapsed()
    );
    got.unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handle_works_again_after_a_reset_longer_than_the_lease() {
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(&server.addr()).unwrap();
    let lease = Duration::from_secs(1);
    let client = proxied(&proxy, lease).await;
    let lock = client.lock("long-reset").unwrap();
    let guard = lock.lock().await.unwrap();
    let first = guard.fencing_token();

    proxy.set_mode(FaultMode::Reset);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(guard.release().await.is_err());
    // Longer than the lease: the lock expires on the server meanwhile.
    tokio::time::sleep(lease + Duration::from_millis(500)).await;
    proxy.set_mode(FaultMode::Pass);

    let again = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match lock.try_lock_for(Duration::from_secs(1)).await {
                Ok(Some(guard)) => return Ok(guard),
                Ok(None) => {}
                // The client may need a few tries to reconnect.
                Err(e) if e.is_connection_error() || e.is_timeout() => {}
                Err(e) => return Err(e),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the handle acquires again")
    .expect("no NotHeld: the handle forgot the hold it gave up");
    assert_eq!(again.fencing_token(), first + 1, "a new grant from free");
    again.release().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_reentrant_acquire_does_not_make_the_next_release_a_no_op() {
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(&server.addr()).unwrap();
    // A lease far longer than the outage: the hold must survive it.
    let client = proxied(&proxy, Duration::from_secs(30)).await;
    let lock = client.lock("reentry-under-reset").unwrap();
    let outer = lock.lock().await.unwrap();

    proxy.set_mode(FaultMode::Reset);
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The re-entrant acquire fails; its rollback (a release of the hold it
    // may have added) fails too while the reset lasts.
    let err = lock.lock().await.expect_err("no re-entry through a reset");
    assert!(err.is_connection_error() || err.is_timeout(), "{err:?}");
    // Longer than the connection manager's own reconnect attempts, so the
    // rollback's release really fails.
    tokio::time::sleep(Duration::from_secs(2)).await;
    proxy.set_mode(FaultMode::Pass);

    // The real release really releases (the rollback is settled first,
    // in the background, once Redis answers again).
    assert_eq!(field(&server, "reentry-under-reset", lock.owner()), Some(1));
    let result = outer.release().await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(field(&server, "reentry-under-reset", lock.owner()), None);
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_release_of_a_lease_lost_before_it_was_sent_reports_not_held() {
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(&server.addr()).unwrap();
    let client = proxied(&proxy, Duration::from_secs(5)).await;
    let lock = client.lock("lost-then-resent").unwrap();
    let guard = lock
        .with_lease(Duration::from_millis(200))
        .unwrap()
        .lock()
        .await
        .unwrap();
    // Past the lease view and one command timeout (300 ms) more: the
    // latest the server's expiry can be. The release knows the hold was
    // lost before it went out, whatever its resend finds.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(guard.is_lost());

    // The first send is held past the command timeout (its reply is lost
    // to the client), so the release is resent; the resend finds nothing.
    proxy.set_mode(FaultMode::Latency(Duration::from_millis(400)));
    let releasing = tokio::spawn(guard.release());
    tokio::time::sleep(Duration::from_millis(350)).await;
    proxy.set_mode(FaultMode::Pass);
    let result = releasing.await.unwrap();
    assert_eq!(
        result.as_ref().map_err(|e| e.kind()),
        Err(ErrorKind::NotHeld),
        "{result:?}"
    );
    assert!(
        eventually(Duration::from_secs(2), || async {
            client.tracked_lease_count() == 0
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_cancelled_mid_call_keeps_the_owners_count_in_step() {
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(&server.addr()).unwrap();
    let client = Client::builder(proxy.url())
        .lease(Duration::from_secs(30))
        .command_timeout(Duration::from_secs(3))
        .build()
        .await
        .unwrap();
    let lock = client.lock("cancelled-release").unwrap();
    let outer = lock.lock().await.unwrap();
    let inner = lock.lock().await.unwrap();

    // The inner release is slow on the wire and its caller gives up on it
    // while it is in flight; it lands on the server anyway.
    proxy.set_mode(FaultMode::Latency(Duration::from_millis(300)));
    let releasing = tokio::spawn(async move {
        tokio::time::timeout(Duration::from_millis(150), inner.release()).await
    });
    tokio::time::sleep(Duration::from_millis(30)).await;
    // Meanwhile the same owner re-enters through a clone (in this task,
    // which holds the outer hold): it queues for the owner's state behind
    // the release, and must then see the count the server has (1 after the
    // landed release), not a stale 2.
    let clone = lock.clone();
    let (released, again) = tokio::join!(releasing, clone.lock());
    assert!(released.unwrap().is_err(), "the release was in flight");
    let again = again.expect("re-entry after a cancelled release");
    proxy.set_mode(FaultMode::Pass);
    assert_eq!(lock.hold_count().await.unwrap(), 2);
    again.release().await.unwrap();
    outer.release().await.expect("the outer hold is still ours");
    assert!(!lock.is_locked().await.unwrap());
}
