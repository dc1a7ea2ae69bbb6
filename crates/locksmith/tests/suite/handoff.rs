//! Local hand-off: a final release grants the lock straight to a parked
//! waiter of the same client, with a new fencing token and no release
//! message; streaks are capped so other clients get in; a waiter that gives
//! up mid-offer leaves nothing behind.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{eventually, keys, setup, Env};
use locksmith::Client;
use locksmith_testkit::RedisServer;

async fn client_with(server: &RedisServer, max_local_handoffs: u32) -> Client {
    Client::builder(server.url())
        .lease(Duration::from_secs(10))
        .max_local_handoffs(max_local_handoffs)
        .build()
        .await
        .expect("connect")
}

crate::on_every_topology!(release_hands_the_lock_to_a_parked_local_waiter);

async fn release_hands_the_lock_to_a_parked_local_waiter(env: Env) {
    let client = env.client(Duration::from_secs(10)).await;
    let name = env.name("ho");
    let messages = env.count_messages_on(&format!("redisson_lock__channel:{{{name}}}"));
    let first = client.lock(name.clone()).unwrap();
    let guard = first.lock().await.unwrap();

    let second = client.lock(name).unwrap();
    // The waiter runs in this task, which re-enters its hold below (a hold
    // belongs to the task it was given to).
    let waiter = tokio::time::timeout(Duration::from_secs(10), second.lock());
    let release = async {
        assert!(
            eventually(Duration::from_secs(5), || async {
                client.parked_waiter_count() == 1
            })
            .await,
            "the waiter parks"
        );
        let token = guard.fencing_token();
        guard.release().await.unwrap();
        token
    };
    let (handed, token) = tokio::join!(waiter, release);
    let handed = handed.expect("the waiter is granted at once").unwrap();

    // A new grant: larger token, the successor is the only holder, its lease
    // is set and renewed, and nobody else was woken.
    assert_eq!(handed.fencing_token(), token + 1);
    assert_eq!(client.local_handoff_count(), 1);
    let info = second.info().await.unwrap();
    assert_eq!(info.holders, vec![(second.owner().to_owned(), 1)]);
    assert_eq!(info.fencing_counter, token + 1);
    assert!(info.remaining_lease.unwrap() > Duration::from_secs(8));
    assert!(handed.remaining_lease() > Duration::from_secs(8));
    assert_eq!(client.tracked_lease_count(), 1);
    assert_eq!(client.parked_waiter_count(), 0);
    assert_eq!(second.hold_count().await.unwrap(), 1);
    // The successor re-enters and releases like any holder.
    let again = second.lock().await.unwrap();
    assert_eq!(second.hold_count().await.unwrap(), 2);
    again.release().await.unwrap();
    handed.release().await.unwrap();
    assert!(!first.is_locked().await.unwrap());
    let one_message = eventually(Duration::from_secs(2), || async {
        messages.load(Ordering::SeqCst) == 1
    })
    .await;
    assert!(
        one_message,
        "one release message, seen {}",
        messages.load(Ordering::SeqCst)
    );
    // Only the final, real release published.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(messages.load(Ordering::SeqCst), 1);
    assert_eq!(client.tracked_lease_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_lease_successor_gets_its_own_lease_and_no_watchdog() {
    let (server, client) = setup(Duration::from_secs(10)).await;
    let first = client.lock("fixed").unwrap();
    let guard = first.lock().await.unwrap();
    let second = client
        .lock("fixed")
        .unwrap()
        // Long enough to outlast the hand-off and the query below on a
        // loaded machine, far shorter than the 10 s watchdog lease.
        .with_lease(Duration::from_secs(3))
        .unwrap();
    let waiter = {
        let second = second.clone();
        tokio::spawn(async move { second.lock().await })
    };
    assert!(
        eventually(Duration::from_secs(5), || async {
            client.parked_waiter_count() == 1
        })
        .await
    );
    guard.release().await.unwrap();
    let handed = waiter.await.unwrap().unwrap();
    let ttl = second.remaining_lease().await.unwrap().unwrap();
    assert!(ttl <= Duration::from_secs(3), "{ttl:?}");
    // Not renewed: the guard is told before the lease runs out, the key
    // expires, and the release says so.
    tokio::time::timeout(Duration::from_secs(10), handed.lost().wait())
        .await
        .expect("the fixed lease runs out");
    assert!(
        eventually(Duration::from_secs(5), || async {
            !second.is_locked().await.unwrap()
        })
        .await
    );
    assert!(matches!(
        handed.release().await,
        Err(locksmith::Error::NotHeld { .. })
    ));
    assert!(keys(&server).iter().all(|k| k != "fixed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_streak_cap_holds_when_two_owners_take_turns() {
    let server = RedisServer::start().unwrap();
    let limit = 4;
    let busy = client_with(&server, limit).await;
    let outsider = client_with(&server, limit).await;
    let stop = Arc::new(AtomicBool::new(false));
    // Two owners of one client take turns: the local queue empties at
    // every hand-off (its only waiter is granted) and refills a moment
    // later. The streak must survive that.
    let mut loops = Vec::new();
    for _ in 0..2 {
        let lock = busy.lock("turns").unwrap();
        let stop = stop.clone();
        loops.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) && n < 5_000 {
                let g = lock.lock().await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
                g.release().await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
                n += 1;
            }
        }));
    }
    assert!(
        eventually(Duration::from_secs(5), || async {
            busy.local_handoff_count() > 0
        })
        .await,
        "the two owners hand the lock to each other"
    );
    for _ in 0..3 {
        let before = busy.local_handoff_count();
        let got = outsider
            .lock("turns")
            .unwrap()
            .try_lock_for(Duration::from_secs(5))
            .await
            .unwrap()
            .expect("another client gets the lock while two owners take turns");
        let handed = busy.local_handoff_count() - before;
        assert!(
            handed <= 4 * u64::from(limit),
            "the outsider waited through {handed} local hand-offs (cap {limit})"
        );
        got.release().await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for l in loops {
        tokio::time::timeout(Duration::from_secs(10), l)
            .await
            .unwrap()
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaks_are_capped_so_other_clients_get_the_lock() {
    let server = RedisServer::start().unwrap();
    let busy = client_with(&server, 4).await;
    let outsider = client_with(&server, 4).await;
    let handoffs_only = client_with(&server, 0).await;
    let stop = Arc::new(AtomicBool::new(false));
    // Eight owners of one client keep the lock busy, always with a local
    // waiter parked.
    let mut loops = Vec::new();
    for _ in 0..8 {
        let lock = busy.lock("streak").unwrap();
        let stop = stop.clone();
        loops.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) && n < 100_000 {
                let g = lock.lock().await.unwrap();
                tokio::time::sleep(Duration::from_micros(200)).await;
                g.release().await.unwrap();
                n += 1;
            }
            n
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The outsider still gets in, promptly (a capped streak is a few
    // critical sections long).
    for _ in 0..5 {
        let got = outsider
            .lock("streak")
            .unwrap()
            .try_lock_for(Duration::from_secs(5))
            .await
            .unwrap()
            .expect("another client gets the lock while the streaks run");
        got.release().await.unwrap();
    }
    // With hand-off disabled a client still works, through pub/sub.
    let plain = handoffs_only
        .lock("streak")
        .unwrap()
        .try_lock_for(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("a client without hand-off gets the lock too");
    plain.release().await.unwrap();
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for l in loops {
        total += tokio::time::timeout(Duration::from_secs(10), l)
            .await
            .unwrap()
            .unwrap();
    }
    assert!(total > 0);
    assert!(busy.local_handoff_count() > 0);
    assert_eq!(handoffs_only.local_handoff_count(), 0);
    assert_eq!(busy.parked_waiter_count(), 0);
    assert!(
        eventually(Duration::from_secs(5), || async {
            busy.tracked_lease_count() == 0
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_that_time_out_around_hand_offs_leave_no_lock() {
    let (server, client) = setup(Duration::from_secs(60)).await;
    // A holder loop and many short-lived waiters on one client: waiters
    // give up while parked, while offered, and after being granted.
    let holder = client.lock("flaky").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let holding = {
        let stop = stop.clone();
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if let Ok(Some(g)) = holder.try_lock_for(Duration::from_millis(100)).await {
                    tokio::time::sleep(Duration::from_micros(300)).await;
                    g.release().await.unwrap();
                }
            }
        })
    };
    let started = std::time::Instant::now();
    let mut tasks = Vec::new();
    for i in 0..400u64 {
        if started.elapsed() > Duration::from_secs(20) {
            break;
        }
        let lock = client.lock("flaky").unwrap();
        tasks.push(tokio::spawn(async move {
            let wait = Duration::from_micros(100 + (i * 7919) % 1500);
            if let Ok(Some(g)) = lock.try_lock_for(wait).await {
                g.release().await.unwrap();
            }
        }));
        if tasks.len() >= 16 {
            for t in tasks.drain(..) {
                t.await.unwrap();
            }
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    holding.await.unwrap();
    assert!(client.local_handoff_count() > 0, "hand-offs were exercised");
    let clean = eventually(Duration::from_secs(10), || async {
        keys(&server) == vec!["redisson_lock_token:{flaky}".to_owned()]
            && client.tracked_lease_count() == 0
            && client.parked_waiter_count() == 0
    })
    .await;
    assert!(
        clean,
        "left behind: keys {:?}, leases {}, parked {}",
        keys(&server),
        client.tracked_lease_count(),
        client.parked_waiter_count()
    );
}
