//! A client outlives the runtime it was first used on: its watchdog and its
//! pub/sub connection start again on the runtime that uses it next, and a
//! lost signal fires on time even when no task of the client runs.

use crate::common;

use std::time::{Duration, Instant};

use locksmith::Client;
use locksmith_testkit::RedisServer;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

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
