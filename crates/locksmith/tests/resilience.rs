//! Server trouble: a restart under a waiter, and resent commands after a
//! lost reply (the scripts must be idempotent).

mod common;

use std::time::Duration;

use common::{client, setup};
use locksmith_testkit::RedisServer;
use redis::Script;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_recovers_when_redis_restarts() {
    let lease = Duration::from_millis(1500);
    let (mut server, holder) = setup(lease).await;
    let waiter_client = client(&server, lease).await;
    let guard = holder.lock("restart").unwrap().lock().await.unwrap();
    let lost = guard.lost();

    let waiter_lock = waiter_client.lock("restart").unwrap();
    let waiter =
        tokio::spawn(async move { waiter_lock.try_lock_for(Duration::from_secs(30)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;

    // No persistence: the restarted server has forgotten the lock.
    server.restart().unwrap();

    let got = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("waiter finishes")
        .unwrap();
    let got = got
        .expect("waiter survives the restart")
        .expect("and acquires");
    tokio::time::timeout(Duration::from_secs(10), lost.wait())
        .await
        .expect("the old holder learns its lock is gone");
    assert!(matches!(
        guard.release().await,
        Err(locksmith::Error::NotHeld { .. })
    ));
    got.release().await.unwrap();
}

fn conn(server: &RedisServer) -> redis::Connection {
    server.connection().unwrap()
}

#[test]
fn resent_acquire_and_release_do_not_double_count() {
    let server = RedisServer::start().unwrap();
    let mut c = conn(&server);
    let acquire = Script::new(include_str!("../src/scripts/lock_acquire.lua"));
    let release = Script::new(include_str!("../src/scripts/lock_release.lua"));
    let owner = "00000000-0000-4000-8000-000000000000:1";
    let run_acquire = |c: &mut redis::Connection, expected: u32| -> (i64, i64, i64) {
        acquire
            .key("idem")
            .key("redisson_lock_token:{idem}")
            .arg(10_000)
            .arg(owner)
            .arg(expected)
            .invoke(c)
            .unwrap()
    };
    let run_release = |c: &mut redis::Connection, expected: u32| -> (i64, i64) {
        release
            .key("idem")
            .key("redisson_lock__channel:{idem}")
            .arg(10_000)
            .arg(owner)
            .arg(expected)
            .arg(0)
            .invoke(c)
            .unwrap()
    };
    let count = |c: &mut redis::Connection| -> Option<i64> {
        redis::cmd("HGET").arg("idem").arg(owner).query(c).unwrap()
    };

    // First grant, then its resend: one hold, one fencing token.
    assert_eq!(run_acquire(&mut c, 0), (1, 1, 1));
    assert_eq!(run_acquire(&mut c, 0), (1, 1, 1));
    assert_eq!(count(&mut c), Some(1));
    // Reentrant grant and its resend: two holds.
    assert_eq!(run_acquire(&mut c, 1), (1, 1, 2));
    assert_eq!(run_acquire(&mut c, 1), (1, 1, 2));
    assert_eq!(count(&mut c), Some(2));
    // Release from 2 and its resend: one hold left.
    assert_eq!(run_release(&mut c, 2), (2, 1));
    assert_eq!(run_release(&mut c, 2), (2, 1));
    assert_eq!(count(&mut c), Some(1));
    // Final release frees; its resend finds nothing (the client treats a
    // "gone" answer to a resent final release as success).
    assert_eq!(run_release(&mut c, 1), (1, 0));
    assert_eq!(run_release(&mut c, 1), (0, 0));
    assert_eq!(count(&mut c), None);
    // A count the server does not agree with is reported, not papered over.
    assert_eq!(run_acquire(&mut c, 3).0, -1);
    // The next grant from free has a larger token.
    assert_eq!(run_acquire(&mut c, 0), (1, 2, 1));
}
