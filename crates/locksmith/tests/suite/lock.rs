//! The reentrant lock against a real server: exclusion, reentrancy,
//! leases, the watchdog, fencing, bad input.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{eventually, keys, setup, Env};
use locksmith::{Error, ErrorKind};

crate::on_every_topology!(
    mutual_exclusion_across_two_clients,
    reentrancy_counts_holds_per_owner,
    fixed_lease_expires_and_release_reports_it,
    watchdog_keeps_the_lock_past_several_leases_and_stops_after_release,
    force_unlock_makes_the_holder_lose_and_wakes_waiters,
    watchdog_renews_many_leases_in_batched_calls,
);

async fn mutual_exclusion_across_two_clients(env: Env) {
    let a = env.client(Duration::from_secs(10)).await;
    let b = env.client(Duration::from_secs(10)).await;
    let name = env.name("counter-lock");
    let counter = env.name("counter");
    const TASKS: usize = 64;
    const ROUNDS: usize = 5;
    let max_token = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let min_token = Arc::new(std::sync::atomic::AtomicU64::new(u64::MAX));
    let mut tasks = Vec::new();
    for c in [a.clone(), b.clone()] {
        for _ in 0..TASKS {
            let c = c.clone();
            let (max_token, min_token) = (max_token.clone(), min_token.clone());
            let (name, counter) = (name.clone(), counter.clone());
            tasks.push(tokio::spawn(async move {
                let mut conn = c.connection();
                for _ in 0..ROUNDS {
                    let guard = c.lock(name.clone()).unwrap().lock().await.unwrap();
                    // Tokens only grow from grant to grant.
                    let prev = max_token
                        .fetch_max(guard.fencing_token(), std::sync::atomic::Ordering::SeqCst);
                    assert!(guard.fencing_token() > prev, "fencing token went backwards");
                    min_token.fetch_min(guard.fencing_token(), std::sync::atomic::Ordering::SeqCst);
                    let v: Option<u64> = redis::cmd("GET")
                        .arg(&counter)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    tokio::task::yield_now().await;
                    let _: () = redis::cmd("SET")
                        .arg(&counter)
                        .arg(v.unwrap_or(0) + 1)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    guard.release().await.unwrap();
                }
            }));
        }
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(120), t)
            .await
            .unwrap()
            .unwrap();
    }
    let mut conn = a.connection();
    let total: u64 = redis::cmd("GET")
        .arg(&counter)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(total, (2 * TASKS * ROUNDS) as u64);
    // One new token per grant, consecutive (the first from the clock).
    let (min, max) = (
        min_token.load(std::sync::atomic::Ordering::SeqCst),
        max_token.load(std::sync::atomic::Ordering::SeqCst),
    );
    assert_eq!(max - min + 1, total);
    assert!(!a.lock(name).unwrap().is_locked().await.unwrap());
}

async fn reentrancy_counts_holds_per_owner(env: Env) {
    let client = env.client(Duration::from_secs(10)).await;
    let name = env.name("reentrant");
    let lock = client.lock(name.clone()).unwrap();
    let first = lock.lock().await.unwrap();
    let first_token = first.fencing_token();
    let second = lock.clone().lock().await.unwrap();
    assert_eq!(first.fencing_token(), second.fencing_token());
    assert_eq!(lock.hold_count().await.unwrap(), 2);
    let other = client.lock(name).unwrap();
    assert!(
        other.try_lock().await.unwrap().is_none(),
        "another owner is excluded"
    );
    assert_eq!(other.hold_count().await.unwrap(), 0);
    second.release().await.unwrap();
    assert!(lock.is_locked().await.unwrap());
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    first.release().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    let g = other
        .try_lock()
        .await
        .unwrap()
        .expect("free after the last release");
    assert!(g.fencing_token() > first_token);
    g.release().await.unwrap();
    assert_eq!(client.tracked_lease_count(), 0);
}

async fn fixed_lease_expires_and_release_reports_it(env: Env) {
    let client = env.client(Duration::from_secs(10)).await;
    let lock = client
        .lock(env.name("fixed"))
        .unwrap()
        .with_lease(Duration::from_millis(300))
        .unwrap();
    let guard = lock.lock().await.unwrap();
    let lost = guard.lost();
    assert!(guard.remaining_lease() <= Duration::from_millis(300));
    tokio::time::timeout(Duration::from_secs(5), lost.wait())
        .await
        .expect("lost signal fires");
    assert!(guard.is_lost());
    assert!(
        eventually(Duration::from_secs(5), || async {
            !lock.is_locked().await.unwrap()
        })
        .await
    );
    let err = guard.release().await.unwrap_err();
    assert!(matches!(err, Error::NotHeld { .. }), "{err}");
    assert_eq!(err.kind(), ErrorKind::NotHeld);
}

async fn watchdog_keeps_the_lock_past_several_leases_and_stops_after_release(env: Env) {
    // Long enough that a loaded machine's stall of a second is not a loss
    // (renewals every 500 ms); the full suite stalled a 600 ms lease.
    let lease = Duration::from_millis(1500);
    let client = env.client(lease).await;
    let lock = client.lock(env.name("watched")).unwrap();
    let guard = lock.lock().await.unwrap();
    tokio::time::sleep(lease * 4).await;
    assert!(!guard.is_lost());
    assert!(lock.is_locked().await.unwrap());
    let ttl = lock.remaining_lease().await.unwrap().unwrap();
    assert!(ttl > Duration::ZERO && ttl <= lease);
    assert_eq!(client.tracked_lease_count(), 1);
    guard.release().await.unwrap();
    assert_eq!(client.tracked_lease_count(), 0);
    tokio::time::sleep(lease).await;
    assert!(
        !lock.is_locked().await.unwrap(),
        "no renewal re-creates a released lock"
    );
}

async fn force_unlock_makes_the_holder_lose_and_wakes_waiters(env: Env) {
    // Long enough that the lease cannot lapse before the force unlock on a
    // loaded machine (the unlock would then find nothing to free), and
    // longer than the waiter's bound below: a waiter not woken by the
    // unlock's message would wait for it.
    let lease = Duration::from_secs(10);
    let client = env.client(lease).await;
    let name = env.name("forced");
    let holder = client.lock(name.clone()).unwrap();
    let guard = holder.lock().await.unwrap();
    let waiter_lock = client.lock(name).unwrap();
    let waiter =
        tokio::spawn(async move { waiter_lock.try_lock_for(Duration::from_secs(20)).await });
    assert!(
        eventually(Duration::from_secs(10), || async {
            client.parked_waiter_count() == 1
        })
        .await,
        "the waiter waits"
    );
    assert!(holder.force_unlock().await.unwrap());
    let got = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let got = got.expect("waiter acquires after force unlock");
    // At its next renewal (a third of the lease) at the latest.
    tokio::time::timeout(Duration::from_secs(10), guard.lost().wait())
        .await
        .expect("holder learns it lost the lock");
    assert!(matches!(guard.release().await, Err(Error::NotHeld { .. })));
    assert!(got.fencing_token() > 1);
    got.release().await.unwrap();
}

#[tokio::test]
async fn bad_input_is_rejected_clearly() {
    let (server, client) = setup(Duration::from_secs(10)).await;
    assert!(client.lock("").unwrap_err().is_invalid_argument());
    assert!(client
        .lock("x".repeat(64 * 1024 + 1))
        .unwrap_err()
        .is_invalid_argument());
    assert!(client.lock("x".repeat(64 * 1024)).is_ok());
    let lock = client.lock("ok").unwrap();
    assert!(lock
        .with_lease(Duration::ZERO)
        .unwrap_err()
        .is_invalid_argument());
    assert!(lock
        .with_lease(Duration::MAX)
        .unwrap_err()
        .is_invalid_argument());
    // A lease too short to hold anything once the drift allowance
    // (1% + 2 ms) is taken off is refused, with the minimum named.
    for too_short in [1, 2, 5, 9] {
        let err = lock
            .with_lease(Duration::from_millis(too_short))
            .unwrap_err();
        assert!(err.is_invalid_argument());
        assert!(err.to_string().contains("10ms"), "{err}");
    }
    assert!(lock.with_lease(Duration::from_millis(10)).is_ok());
    assert!(locksmith::Client::builder(server.url())
        .lease(Duration::from_millis(3))
        .build()
        .await
        .unwrap_err()
        .is_invalid_argument());
    // Periods that would overflow clock arithmetic are refused, not a panic.
    for builder in [
        locksmith::Client::builder(server.url()).pubsub_ping_interval(Duration::MAX),
        locksmith::Client::builder(server.url()).command_timeout(Duration::MAX),
        locksmith::Client::builder(server.url()).connect_timeout(Duration::MAX),
    ] {
        let err = builder.build().await.unwrap_err();
        assert!(err.is_invalid_argument(), "{err}");
    }
    assert!(lock
        .try_lock_for(Duration::MAX)
        .await
        .unwrap_err()
        .is_invalid_argument());
    assert!(client.simple_lock("").unwrap_err().is_invalid_argument());

    let mut conn = server.connection().unwrap();
    let _: () = redis::cmd("SET")
        .arg("a-string")
        .arg("x")
        .query(&mut conn)
        .unwrap();
    let err = client
        .lock("a-string")
        .unwrap()
        .try_lock()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongType);
    assert!(err.to_string().contains("a-string"), "{err}");
    let v: String = redis::cmd("GET").arg("a-string").query(&mut conn).unwrap();
    assert_eq!(v, "x", "nothing lost");
    assert_eq!(keys(&server), vec!["a-string".to_string()]);

    // A fencing counter of the wrong type is reported as that key, and the
    // lock is not taken without a token.
    let _: () = redis::cmd("HSET")
        .arg("redisson_lock_token:{fenced}")
        .arg("f")
        .arg("v")
        .query(&mut conn)
        .unwrap();
    let err = client.lock("fenced").unwrap().try_lock().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongType);
    assert!(
        matches!(&err, Error::WrongType { key } if key == "redisson_lock_token:{fenced}"),
        "{err}"
    );
    assert!(!client.lock("fenced").unwrap().is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holders_reentry_never_waits_behind_local_waiters() {
    let (_server, client) = setup(Duration::from_secs(10)).await;
    let holder = client.lock("reenter-past-waiters").unwrap();
    let outer = holder.lock().await.unwrap();
    // Another owner of the same client parks waiting for the lock.
    let waiter = client.lock("reenter-past-waiters").unwrap();
    let waiting = tokio::spawn(async move { waiter.lock().await });
    assert!(
        eventually(Duration::from_secs(5), || async {
            client.parked_waiter_count() == 1
        })
        .await
    );
    // The holder re-enters at once instead of queueing behind the waiter
    // until the recorded lease end (10 s).
    let inner = tokio::time::timeout(Duration::from_secs(3), holder.lock())
        .await
        .expect("re-entry does not wait behind local waiters")
        .unwrap();
    assert_eq!(holder.hold_count().await.unwrap(), 2);
    inner.release().await.unwrap();
    outer.release().await.unwrap();
    waiting.await.unwrap().unwrap().release().await.unwrap();
}

async fn watchdog_renews_many_leases_in_batched_calls(env: Env) {
    // As above: a lease a loaded machine's stall does not outlast.
    let lease = Duration::from_millis(1500);
    let client = env.client(lease).await;
    // All in one slot on a cluster (a hash tag), so the renewals of all 50
    // can share calls there too.
    let tag = env.name("batch");
    let mut guards = Vec::new();
    for i in 0..50 {
        guards.push(
            client
                .lock(format!("{{{tag}}}:{i}"))
                .unwrap()
                .lock()
                .await
                .unwrap(),
        );
    }
    let before = env.evalsha_calls(&tag);
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let renewals = env.evalsha_calls(&tag) - before;
    assert!(renewals > 0, "the watchdog renewed");
    // One call per lock per lease/3 would be about 200 in 2 s; batched,
    // a handful (more when a loaded machine spread the 50 acquires over
    // several batching windows). The count is only ours on the test's own
    // server; on a shared deployment other tests' script calls land on the
    // same node.
    if env.topo == crate::common::Topo::Single {
        assert!(
            renewals <= 60,
            "{renewals} renewal calls for 50 locks over 2 s"
        );
    }
    for g in &guards {
        assert!(!g.is_lost());
    }
    for g in guards {
        g.release().await.unwrap();
    }
    assert_eq!(client.tracked_lease_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_flushed_on_the_server_are_loaded_again() {
    let (server, client) = setup(Duration::from_secs(10)).await;
    let lock = client.lock("flushed").unwrap();
    lock.lock().await.unwrap().release().await.unwrap();
    let mut admin = server.connection().unwrap();
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut admin).unwrap();
    // Both batched scripts meet NOSCRIPT once, load themselves, and work.
    let guard = lock.lock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    guard.release().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}
