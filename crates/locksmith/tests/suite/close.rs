//! `Client::close` and `RedlockNodes::close`: waits end with `Closed`,
//! holds report lost, new acquires are refused, and the background work
//! (a dropped guard's release, the undo of a cancelled acquire) is done
//! by the time `close` returns, or `close` says it was not.

use crate::common;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use locksmith::{Client, ErrorKind, RedlockNodes};
use locksmith_testkit::{FaultMode, FaultProxy, RedisServer};

use common::{client, keys};

/// Long enough that nothing in these tests ends by running out.
const LEASE: Duration = Duration::from_secs(30);
/// How soon after `close` a waiter must have ended (it would otherwise
/// wait for its lock's 30 s lease, or for ever).
const PROMPT: Duration = Duration::from_secs(3);

/// A client of the server behind `proxy`.
async fn through(proxy: &FaultProxy) -> Client {
    Client::builder(proxy.url())
        .lease(LEASE)
        .command_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap()
}

type Wait = Pin<Box<dyn Future<Output = ErrorKind> + Send>>;

/// Every kind of wait the client offers, each blocked by `holder`'s holds
/// (or an empty semaphore, or a latch that never opens), answering the
/// kind of the error it ended with.
async fn blocked_waits(closing: &Client, holder: &Client) -> Vec<(&'static str, Wait)> {
    let kind = |r: locksmith::Result<()>| match r {
        Ok(()) => panic!("a blocked wait succeeded"),
        Err(e) => e.kind(),
    };
    let mut held = Vec::new();
    held.push(Box::new(holder.lock("c-lock").unwrap().lock().await.unwrap()) as Box<dyn Send>);
    held.push(Box::new(
        holder.fair_lock("c-fair").unwrap().lock().await.unwrap(),
    ));
    held.push(Box::new(
        holder
            .read_write_lock("c-rw")
            .unwrap()
            .read()
            .await
            .unwrap(),
    ));
    held.push(Box::new(
        holder
            .simple_lock("c-simple")
            .unwrap()
            .lock()
            .await
            .unwrap(),
    ));
    held.push(Box::new(holder.lock("c-m2").unwrap().lock().await.unwrap()));
    closing
        .semaphore("c-sem")
        .unwrap()
        .try_set_permits(0)
        .await
        .unwrap();
    closing
        .expirable_semaphore("c-permit")
        .unwrap()
        .try_set_permits(0)
        .await
        .unwrap();
    closing
        .count_down_latch("c-latch")
        .unwrap()
        .try_set_count(1)
        .await
        .unwrap();
    // The holds stay with the holder for the test's length.
    std::mem::forget(held);

    let lock = closing.lock("c-lock").unwrap();
    let fair = closing.fair_lock("c-fair").unwrap();
    let write = closing.read_write_lock("c-rw").unwrap().prefer_writers();
    let simple = closing.simple_lock("c-simple").unwrap();
    let multi = closing.multi_lock(["c-m1", "c-m2"]).unwrap();
    let sem = closing.semaphore("c-sem").unwrap();
    let permit = closing.expirable_semaphore("c-permit").unwrap();
    let latch = closing.count_down_latch("c-latch").unwrap();
    vec![
        (
            "lock",
            Box::pin(async move { kind(lock.lock().await.map(drop)) }) as Wait,
        ),
        (
            "fair lock",
            Box::pin(async move { kind(fair.lock().await.map(drop)) }),
        ),
        (
            "preferring writer",
            Box::pin(async move { kind(write.write().await.map(drop)) }),
        ),
        (
            "simple lock",
            Box::pin(async move { kind(simple.lock().await.map(drop)) }),
        ),
        (
            "multi lock",
            Box::pin(async move { kind(multi.lock().await.map(drop)) }),
        ),
        (
            "semaphore",
            Box::pin(async move { kind(sem.acquire(1).await.map(drop)) }),
        ),
        (
            "permit semaphore",
            Box::pin(async move { kind(permit.acquire().await.map(drop)) }),
        ),
        ("latch", Box::pin(async move { kind(latch.wait().await) })),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_ends_every_wait_with_closed_and_leaves_no_queue_entry_or_claim() {
    let server = RedisServer::start().expect("redis-server");
    let holder = client(&server, LEASE).await;
    let closing = client(&server, LEASE).await;
    let waits = blocked_waits(&closing, &holder).await;
    let running: Vec<_> = waits
        .into_iter()
        .map(|(what, wait)| (what, tokio::spawn(wait)))
        .collect();
    // Every wait has sent its first attempt and sleeps.
    tokio::time::sleep(Duration::from_millis(400)).await;
    for (what, task) in &running {
        assert!(!task.is_finished(), "{what} ended before the close");
    }
    let started = std::time::Instant::now();
    closing.close().await.expect("close");
    assert!(
        started.elapsed() < PROMPT,
        "close took {:?}",
        started.elapsed()
    );
    assert!(closing.is_closed());
    // The fair queue and the writer's claim were withdrawn before close
    // returned: what is left on the server is the holder's, the counters
    // and the set-ups.
    let left = keys(&server);
    for key in &left {
        assert!(
            !key.contains("redisson_lock_queue")
                && !key.contains("redisson_lock_timeout")
                && !key.contains("locksmith_give_up"),
            "a fair queue entry is left: {left:?}"
        );
    }
    assert!(
        !left.contains(&"{c-rw}:locksmith_writers".to_owned()),
        "the writer's claim is left: {left:?}"
    );
    for (what, task) in running {
        // Every wait had withdrawn its entry before close returned (each
        // counts in the client's background work until then, checked on
        // the server above); its task then only hands back the answer,
        // which may take the scheduler a moment.
        let kind = tokio::time::timeout(Duration::from_secs(1), task)
            .await
            .unwrap_or_else(|_| panic!("{what} still waits 1 s after close returned"))
            .expect("wait task");
        assert_eq!(kind, ErrorKind::Closed, "{what}");
    }
    // Counted only now: a channel stays registered while a handle that
    // keeps it lives (the fair lock keeps its owner's channel), and each
    // handle lived in its wait's task until that task handed back its
    // answer (a CI run once counted the fair lock's channel in between).
    assert_eq!(closing.subscription_count(), 0, "subscriptions are left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_close_holds_are_lost_acquires_refused_and_releases_still_work() {
    let server = RedisServer::start().expect("redis-server");
    let client = client(&server, LEASE).await;
    let guard = client.lock("held").unwrap().lock().await.unwrap();
    let lost = guard.lost();
    let permit = {
        let s = client.expirable_semaphore("permits").unwrap();
        s.try_set_permits(2).await.unwrap();
        s.acquire().await.unwrap()
    };
    assert_eq!(client.tracked_lease_count(), 2);
    let other = client.clone();
    other.close().await.expect("close");
    // Every clone is closed.
    assert!(client.is_closed());
    assert!(guard.is_lost(), "a held lock reports lost after close");
    assert!(permit.is_lost(), "a held permit reports lost after close");
    tokio::time::timeout(Duration::from_secs(1), lost.wait())
        .await
        .expect("the lost signal fires at close");
    assert_eq!(
        client.tracked_lease_count(),
        0,
        "the watchdog forgot its holds"
    );
    let multi = client.multi_lock(["m1", "m2"]).unwrap();
    let permits = client.expirable_semaphore("permits").unwrap();
    let latch = client.count_down_latch("latch").unwrap();
    for (what, err) in [
        (
            "try_lock",
            client.lock("other").unwrap().try_lock().await.err(),
        ),
        // A waiting acquire of a lock that is held: refused at once, not
        // after the holder's lease.
        ("lock", client.lock("held").unwrap().lock().await.err()),
        (
            "fair try_lock",
            client.fair_lock("fair").unwrap().try_lock().await.err(),
        ),
        (
            "try_read",
            client.read_write_lock("rw").unwrap().try_read().await.err(),
        ),
        (
            "try_write",
            client
                .read_write_lock("rw")
                .unwrap()
                .try_write()
                .await
                .err(),
        ),
        (
            "simple try_lock",
            client.simple_lock("simple").unwrap().try_lock().await.err(),
        ),
        ("multi try_lock", multi.try_lock().await.err()),
        (
            "try_acquire",
            client.semaphore("sem").unwrap().try_acquire(1).await.err(),
        ),
        ("permit try_acquire", permits.try_acquire().await.err()),
        ("latch wait", latch.wait_for(LEASE).await.err()),
    ] {
        let err = err.unwrap_or_else(|| panic!("{what} succeeded after close"));
        assert_eq!(err.kind(), ErrorKind::Closed, "{what}: {err}");
        assert!(err.to_string().contains("closed"), "{what}: {err}");
    }
    // The hold is still on the server (its lease runs on) until released,
    // and releasing still works.
    assert!(keys(&server).contains(&"held".to_owned()));
    guard.release().await.expect("release after close");
    permit.release().await.expect("permit release after close");
    assert!(!keys(&server).contains(&"held".to_owned()));
    // Closing again is harmless.
    client.close().await.expect("second close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_returns_after_the_release_of_a_dropped_guard_is_done() {
    let server = RedisServer::start().expect("redis-server");
    let proxy = FaultProxy::start(&server.addr()).expect("proxy");
    let client = through(&proxy).await;
    let guard = client.lock("dropped").unwrap().lock().await.unwrap();
    let permits = {
        let s = client.semaphore("given-back").unwrap();
        s.try_set_permits(3).await.unwrap();
        s.acquire(2).await.unwrap()
    };
    // Each command now takes 300 ms more: the background releases are
    // still under way when close is called.
    proxy.set_mode(FaultMode::Latency(Duration::from_millis(150)));
    drop(guard);
    drop(permits);
    client.close().await.expect("close");
    let left = keys(&server);
    assert!(
        !left.contains(&"dropped".to_owned()),
        "the dropped guard's lock is still held when close returned: {left:?}"
    );
    let mut conn = server.connection().unwrap();
    let available: i64 = redis::cmd("GET")
        .arg("given-back")
        .query(&mut conn)
        .unwrap();
    assert_eq!(
        available, 3,
        "the dropped permits were not given back by then"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_returns_after_a_cancelled_acquire_was_undone() {
    let server = RedisServer::start().expect("redis-server");
    let proxy = FaultProxy::start(&server.addr()).expect("proxy");
    // One client per kind, so one kind's slower clean-up cannot cover
    // another's.
    for key in ["cancelled", "cancelled-fair", "cancelled-simple"] {
        let client = through(&proxy).await;
        let acquire = |client: Client| async move {
            let _ = match key {
                "cancelled" => client.lock(key).unwrap().lock().await.map(drop),
                "cancelled-fair" => client.fair_lock(key).unwrap().lock().await.map(drop),
                _ => client.simple_lock(key).unwrap().lock().await.map(drop),
            };
        };
        proxy.set_mode(FaultMode::Pass);
        // Scripts loaded and the connection warm before the latency.
        acquire(client.clone()).await;
        assert!(
            common::eventually(Duration::from_secs(5), || async {
                !keys(&server).contains(&key.to_owned())
            })
            .await
        );
        proxy.set_mode(FaultMode::Latency(Duration::from_millis(150)));
        // Cut off after the request went out and before its reply came
        // back: the grant lands on the server with nobody to take it.
        let cut = Duration::from_millis(100);
        assert!(tokio::time::timeout(cut, acquire(client.clone()))
            .await
            .is_err());
        client.close().await.expect("close");
        let left = keys(&server);
        assert!(
            !left.contains(&key.to_owned()),
            "the cancelled acquire of {key} was not undone when close returned: {left:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_within_says_when_background_work_outlived_the_bound() {
    let server = RedisServer::start().expect("redis-server");
    let proxy = FaultProxy::start(&server.addr()).expect("proxy");
    let client = through(&proxy).await;
    let guard = client.lock("stuck").unwrap().lock().await.unwrap();
    proxy.set_mode(FaultMode::BlackHole);
    drop(guard);
    let bound = Duration::from_millis(300);
    let started = std::time::Instant::now();
    let err = client
        .close_within(bound)
        .await
        .expect_err("nothing can finish");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(
        started.elapsed() < bound + Duration::from_secs(1),
        "close_within overran its bound: {:?}",
        started.elapsed()
    );
    // Once the network heals, the release still completes in the
    // background (the runtime is alive).
    proxy.set_mode(FaultMode::Pass);
    assert!(
        common::eventually(Duration::from_secs(10), || async {
            !keys(&server).contains(&"stuck".to_owned())
        })
        .await,
        "the release never completed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_close_ends_waits_loses_holds_and_refuses_acquires() {
    let servers: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start().expect("redis-server"))
        .collect();
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    // Node timeouts generous for a shared machine: a wait that meets its
    // nodes' 50 ms default on a loaded machine ends with `NoQuorum` before
    // the close this test is about.
    let holder = RedlockNodes::connect(urls.iter().map(String::as_str))
        .await
        .unwrap()
        .with_node_timeout(Duration::from_millis(500))
        .unwrap();
    let closing = RedlockNodes::connect(urls.iter().map(String::as_str))
        .await
        .unwrap()
        .with_node_timeout(Duration::from_millis(500))
        .unwrap();
    let held = holder.lock("r").unwrap().lock().await.unwrap();
    let mine = closing.lock("mine").unwrap().lock().await.unwrap();
    let fixed = closing
        .lock("fixed")
        .unwrap()
        .with_lease(LEASE)
        .unwrap()
        .lock()
        .await
        .unwrap();
    let lock = closing.lock("r").unwrap();
    let waiting = tokio::spawn(async move { lock.lock().await.map(drop) });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished());
    closing.close().await.expect("close");
    assert!(closing.is_closed());
    let err = tokio::time::timeout(PROMPT, waiting)
        .await
        .expect("the Redlock wait ended")
        .unwrap()
        .expect_err("it was closed");
    assert_eq!(err.kind(), ErrorKind::Closed, "{err}");
    assert!(mine.is_lost(), "a held Redlock reports lost after close");
    let err = closing
        .lock("new")
        .unwrap()
        .try_lock()
        .await
        .expect_err("closed");
    assert_eq!(err.kind(), ErrorKind::Closed, "{err}");
    // A fixed-lease Redlock taken before the close reports lost too.
    assert!(
        fixed.is_lost(),
        "a fixed-lease Redlock reports lost after close"
    );
    drop(fixed);
    // A release still goes out to every node; it answers NotHeld, as for
    // any Redlock whose validity ended before its release.
    let err = mine.release().await.expect_err("validity is over");
    assert_eq!(err.kind(), ErrorKind::NotHeld, "{err}");
    for server in &servers {
        assert!(
            !keys(server).contains(&"mine".to_owned()),
            "the release after close did not reach {}",
            server.url()
        );
    }
    held.release().await.unwrap();
}
