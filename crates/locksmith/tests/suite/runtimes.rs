//! A client outlives the runtime it was first used on: its watchdog and its
//! pub/sub connection start again on the runtime that uses it next, and a
//! lost signal fires on time even when no task of the client runs.

use crate::common;

use std::time::{Duration, Instant};

use locksmith::Client;
use locksmith_testkit::RedisServer;

use common::current_thread_runtime as runtime;

#[test]
fn background_tasks_restart_on_the_next_runtime() {
    let server = RedisServer::start().unwrap();
    let lease = Duration::from_secs(2);
    let first = runtime();
    let (client, holder) = first.block_on(async {
        let client = Client::builder(server.url())
            .lease(lease)
            .command_timeout(Duration::from_secs(2))
            .build()
            .await
            .unwrap();
        // Start both background tasks on this runtime: the watchdog (a
        // held lock) and the pub/sub connection (a wait).
        let other = client.lock("rt-wait").unwrap();
        let g = other.lock().await.unwrap();
        let waiter = client.lock("rt-wait").unwrap();
        assert!(waiter
            .try_lock_for(Duration::from_millis(100))
            .await
            .unwrap()
            .is_none());
        g.release().await.unwrap();
        let held = client.lock("rt-held").unwrap();
        (client, held)
    });
    drop(first);

    let second = runtime();
    second.block_on(async {
        // A lock taken on the new runtime is renewed past several leases.
        let guard = holder.lock().await.unwrap();
        tokio::time::sleep(lease * 3).await;
        assert!(!guard.is_lost(), "the watchdog did not run on this runtime");
        assert_eq!(holder.hold_count().await.unwrap(), 1);

        // A waiter is woken by the release message, not by the lease.
        let other = common::client(&server, Duration::from_secs(10)).await;
        let theirs = other.lock("rt-wait").unwrap().lock().await.unwrap();
        let waiter = client.lock("rt-wait").unwrap();
        let waiting = tokio::spawn(async move {
            let got = waiter.try_lock_for(Duration::from_secs(20)).await;
            (got, Instant::now())
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let released_at = Instant::now();
        theirs.release().await.unwrap();
        let (got, at) = waiting.await.unwrap();
        got.unwrap().expect("woken").release().await.unwrap();
        assert!(
            at - released_at < Duration::from_secs(3),
            "the waiter slept {:?} past the release: no pub/sub on this runtime",
            at - released_at
        );
        guard.release().await.unwrap();
    });
}

#[test]
fn the_lost_signal_fires_on_its_own_when_no_client_task_runs() {
    let server = RedisServer::start().unwrap();
    let first = runtime();
    let (client, guard) = first.block_on(async {
        let client = Client::open(&server.url()).await.unwrap();
        let guard = client
            .lock("rt-lost")
            .unwrap()
            .with_lease(Duration::from_millis(300))
            .unwrap()
            .lock()
            .await
            .unwrap();
        (client, guard)
    });
    // The runtime that ran the expiry timer is gone.
    drop(first);
    let second = runtime();
    second.block_on(async {
        let lost = guard.lost();
        tokio::time::timeout(Duration::from_secs(2), lost.wait())
            .await
            .expect("the lost signal fires at the local deadline");
        assert!(guard.is_lost());
        assert_eq!(guard.remaining_lease(), Duration::ZERO);
        drop(guard);
        drop(client);
    });
}

/// Whether `name` still exists on `server` after `wait`.
fn exists_after(server: &RedisServer, name: &str, wait: Duration) -> bool {
    std::thread::sleep(wait);
    redis::cmd("EXISTS")
        .arg(name)
        .query::<bool>(&mut server.connection().unwrap())
        .unwrap()
}

/// A guard dropped while its runtime shuts down (its task is dropped with
/// the runtime, and the release it spawns never runs): the hold is given
/// up locally, so the client's watchdog, running again on a later runtime,
/// does not keep the lock alive past its lease.
#[test]
fn a_guard_dropped_by_a_runtime_shutting_down_is_not_renewed_on() {
    let server = RedisServer::start().unwrap();
    let lease = Duration::from_secs(1);
    let first = runtime();
    // The handle stays (a service keeps it): its owner's state outlives
    // the guard.
    let (client, _handle) = first.block_on(async {
        let client = Client::builder(server.url())
            .lease(lease)
            .build()
            .await
            .unwrap();
        let handle = client.lock("rt-shutdown").unwrap();
        let guard = handle.lock().await.unwrap();
        // The guard lives in a task that never ends: the shutdown drops it.
        tokio::spawn(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
        tokio::task::yield_now().await;
        (client, handle)
    });
    drop(first);

    let second = runtime();
    second.block_on(async {
        // The client goes on here: its watchdog starts again.
        let other = client.lock("rt-shutdown-other").unwrap();
        other.lock().await.unwrap().release().await.unwrap();
    });
    let gone = !exists_after(&server, "rt-shutdown", lease * 3);
    assert!(gone, "the dropped guard's lock is renewed on");
    drop(second);
}

/// A guard that outlives its runtime and is dropped afterwards, on a
/// thread with no runtime, while the client lives on in another runtime:
/// the lock is not renewed on either.
#[test]
fn a_guard_dropped_after_its_runtime_ended_is_not_renewed_on() {
    let server = RedisServer::start().unwrap();
    let lease = Duration::from_secs(1);
    let first = runtime();
    let (client, _handle, guard) = first.block_on(async {
        let client = Client::builder(server.url())
            .lease(lease)
            .build()
            .await
            .unwrap();
        let handle = client.lock("rt-outlived").unwrap();
        let guard = handle.lock().await.unwrap();
        (client, handle, guard)
    });
    drop(first);
    let second = runtime();
    second.block_on(async {
        // The watchdog runs again, on this runtime.
        let other = client.lock("rt-outlived-other").unwrap();
        other.lock().await.unwrap().release().await.unwrap();
    });
    // Dropped here, outside any runtime.
    drop(guard);
    let handle = std::thread::spawn({
        let client = client.clone();
        move || {
            // Keep the second runtime busy with the client meanwhile.
            second.block_on(async move {
                tokio::time::sleep(Duration::from_secs(3)).await;
                drop(client);
            });
        }
    });
    let gone = !exists_after(&server, "rt-outlived", lease * 3);
    handle.join().unwrap();
    assert!(gone, "the dropped guard's lock is renewed on");
}
