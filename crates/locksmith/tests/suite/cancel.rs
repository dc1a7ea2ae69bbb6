//! Cancellation: acquire futures dropped at arbitrary points leave no lock
//! beyond its lease, no subscription and no watchdog entry behind.

use std::time::Duration;

use crate::common::{eventually, setup, Env};

crate::on_every_topology!(dropped_acquires_leave_nothing_behind);

/// xorshift64*: deterministic pseudo-random delays without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

async fn dropped_acquires_leave_nothing_behind(env: Env) {
    // A long lease: an orphaned grant would outlive the checks below.
    let client = env.client(Duration::from_secs(60)).await;
    let other = env.client(Duration::from_secs(2)).await;
    let name = env.name("cancel-me");
    let name = name.as_str();
    let lock_keys = [name.to_owned(), format!("redisson_lock_token:{{{name}}}")];
    let channel = format!("redisson_lock__channel:{{{name}}}");

    // A second client and a second owner of the same client take and
    // release the lock in loops, so cancelled acquires hit every state:
    // free, busy, waiting, being woken, being handed the lock locally.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let contenders: Vec<_> = [other.lock(name).unwrap(), client.lock(name).unwrap()]
        .into_iter()
        .map(|lock| {
            let stop = stop.clone();
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Ok(Some(g)) = lock.try_lock_for(Duration::from_millis(50)).await {
                        tokio::time::sleep(Duration::from_micros(300)).await;
                        let _ = g.release().await;
                    }
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();

    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut acquired = 0;
    let started = std::time::Instant::now();
    for i in 0..3000 {
        if started.elapsed() > Duration::from_secs(40) {
            break;
        }
        let lock = client.lock(name).unwrap();
        let budget = Duration::from_micros(rng.next() % 2500);
        let outcome = if i % 2 == 0 {
            tokio::time::timeout(budget, lock.lock()).await.ok()
        } else {
            tokio::time::timeout(budget, async {
                lock.try_lock_for(Duration::from_secs(5))
                    .await
                    .map(|g| g.expect("5 s is plenty"))
            })
            .await
            .ok()
        };
        if let Some(guard) = outcome {
            acquired += 1;
            // Reentrant acquire dropped mid-flight, too.
            let nested =
                tokio::time::timeout(Duration::from_micros(rng.next() % 500), lock.lock()).await;
            drop(nested);
            drop(guard.unwrap());
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for contender in contenders {
        contender.await.unwrap();
    }
    assert!(acquired > 0, "some acquires must have completed");
    assert!(
        client.local_handoff_count() > 0,
        "local hand-offs were exercised"
    );

    // Rollbacks and drop-releases run in the background; give them a moment.
    let clean = eventually(Duration::from_secs(10), || async {
        env.existing(&lock_keys) == vec![lock_keys[1].clone()]
            && client.subscription_count() == 0
            && client.tracked_lease_count() == 0
            && client.parked_waiter_count() == 0
            && other.tracked_lease_count() == 0
    })
    .await;
    assert!(
        clean,
        "left behind: keys {:?}, subscriptions {}, leases {}, parked {}",
        env.existing(&lock_keys),
        client.subscription_count(),
        client.tracked_lease_count(),
        client.parked_waiter_count()
    );
    // Unsubscribe is asynchronous; allow it to land.
    let unsubscribed = eventually(Duration::from_secs(5), || async {
        env.listeners(&channel) == 0
    })
    .await;
    assert!(
        unsubscribed,
        "server still counts {} subscribers",
        env.listeners(&channel)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_acquire_queued_behind_busy_calls_never_lands_after_its_rollback() {
    let (server, client) = setup(Duration::from_secs(10)).await;
    let mut admin = server.connection().unwrap();
    crate::common::pause_all(&mut admin, 1000);
    // Two acquire calls in flight (the most one client keeps outstanding),
    // stuck behind the pause.
    let busy: Vec<_> = ["paused-a", "paused-b"]
        .into_iter()
        .map(|name| {
            let lock = client.lock(name).unwrap();
            tokio::spawn(async move { lock.lock().await.map(drop) })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // A third acquire queues behind them and is cancelled before it is
    // sent; its rollback must not be overtaken by the grant it undoes.
    let lock = client.lock("paused-cancel").unwrap();
    let long = lock.with_lease(Duration::from_secs(600)).unwrap();
    let cancelled = tokio::time::timeout(Duration::from_millis(50), long.lock()).await;
    assert!(cancelled.is_err(), "nothing answers during the pause");
    for task in busy {
        task.await.unwrap().unwrap();
    }
    // Whatever the order, no 600 s lock is left behind without an owner.
    let clean = eventually(Duration::from_secs(5), || async {
        !lock.is_locked().await.unwrap() && client.tracked_lease_count() == 0
    })
    .await;
    let mut conn = server.connection().unwrap();
    let ttl: i64 = redis::cmd("PTTL")
        .arg("paused-cancel")
        .query(&mut conn)
        .unwrap();
    assert!(clean, "an orphaned grant is left with {ttl} ms to live");
}

/// Issue 37, defect 3: a waiter woken by a release and cancelled while its
/// attempt still waited in the batcher (both of its client's calls were out)
/// went away with the wake-up: the attempt was withdrawn unsent, and the next
/// waiter of that client slept until the old holder's lease end (30 s here)
/// while the lock was free. The wake-up is now handed on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_waiter_cancelled_before_its_attempt_is_sent_hands_the_wake_up_on() {
    use locksmith_testkit::{FaultMode, FaultProxy, RedisServer};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let server = tokio::task::block_in_place(RedisServer::start).unwrap();
    let proxy = FaultProxy::start(&server.addr()).unwrap();
    let build = |url: String| async move {
        locksmith::Client::builder(url)
            .lease(Duration::from_secs(30))
            .build()
            .await
            .unwrap()
    };
    // A behind 200 ms of round trip; B direct.
    let a = build(proxy.url()).await;
    let b = build(server.url()).await;
    proxy.set_mode(FaultMode::Latency(Duration::from_millis(100)));
    for round in 0..20 {
        let name = format!("handed-on-{round}");
        let held = b.lock(name.as_str()).unwrap().lock().await.unwrap();
        // Two of A's acquires on other names always out: A's next call
        // waits its turn.
        let stop = Arc::new(AtomicBool::new(false));
        let busy: Vec<_> = (0..2)
            .map(|i| {
                let lock = a.lock(format!("busy-{round}-{i}")).unwrap();
                let stop = stop.clone();
                tokio::spawn(async move {
                    while !stop.load(Ordering::SeqCst) {
                        if let Ok(guard) = lock.lock().await {
                            let _ = guard.release().await;
                        }
                    }
                })
            })
            .collect();
        let w1 = {
            let lock = a.lock(name.as_str()).unwrap();
            tokio::spawn(async move { lock.lock().await.map(drop) })
        };
        assert!(
            eventually(Duration::from_secs(10), || async {
                a.parked_waiter_count() == 1
            })
            .await,
            "round {round}: W1 parks"
        );
        let w2 = {
            let lock = a.lock(name.as_str()).unwrap();
            tokio::spawn(async move { lock.lock().await })
        };
        assert!(
            eventually(Duration::from_secs(10), || async {
                a.parked_waiter_count() == 2
            })
            .await,
            "round {round}: W2 parks"
        );
        // The message reaches A 100 ms after the release; W1, woken first,
        // is cancelled 50 ms later, its attempt still queued.
        held.release().await.unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
        w1.abort();
        let _ = w1.await;
        stop.store(true, Ordering::SeqCst);
        let granted = tokio::time::timeout(Duration::from_secs(2), w2).await;
        let guard = granted
            .unwrap_or_else(|_| panic!("round {round}: W2 slept on while the lock was free"))
            .unwrap()
            .unwrap();
        guard.release().await.unwrap();
        for task in busy {
            task.await.unwrap();
        }
    }
}
