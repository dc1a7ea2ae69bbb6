//! The pub/sub hub: a half-open connection is found by the health check
//! and replaced, so waiters are still woken by releases; a waiter never
//! waits for a subscription past its own deadline.

use crate::common;

use std::time::{Duration, Instant};

use common::eventually;
use locksmith::Client;
use locksmith_testkit::{FaultProxy, RedisServer};

async fn proxied(proxy: &FaultProxy) -> Client {
    Client::builder(proxy.url())
        .lease(Duration::from_secs(10))
        // Short enough that the test stays short, long enough that a
        // healthy connection's ping is not taken for a dead one under load.
        .command_timeout(Duration::from_secs(1))
        .pubsub_ping_interval(Duration::from_secs(1))
        .build()
        .await
        .expect("connect through the proxy")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_open_pubsub_connection_is_replaced_and_waiters_still_wake() {
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(&server.addr()).unwrap();
    let waiters = proxied(&proxy).await;
    // The holder renews a 30 s lease: a waiter that misses the release
    // message would sleep until that lease runs out.
    let holder = common::client(&server, Duration::from_secs(30)).await;
    let guard = holder.lock("half-open").unwrap().lock().await.unwrap();

    let lock = waiters.lock("half-open").unwrap();
    let waiting = tokio::spawn(async move {
        // Past the test's own waits before the release (up to 20 s).
        let got = lock.try_lock_for(Duration::from_secs(60)).await;
        (got, Instant::now())
    });
    // Parked, and the hub's pub/sub connection open (a waiter is parked
    // from its first busy answer on, before its subscription is made).
    assert!(
        eventually(Duration::from_secs(5), || async {
            waiters.parked_waiter_count() == 1
                && waiters.subscription_count() == 1
                && proxy.connection_count() == 2
        })
        .await
    );
    // Connection 0 carries commands, connection 1 is the hub's pub/sub
    // connection: cut it off silently.
    proxy.sever(1);
    // The health check notices within a ping interval plus its timeout and
    // reconnects (a third connection).
    assert!(
        eventually(Duration::from_secs(5), || async {
            proxy.connection_count() >= 3
        })
        .await,
        "the half-open connection was not replaced"
    );
    // Once the new connection subscribed (the server still counts the
    // half-open one too), release: the waiter is woken by the message,
    // long before the 30 s lease would end.
    // At least two: on a loaded machine the health check (1 s pings) may
    // replace the new connection once more before this looks, and the
    // count settles later than 10 s now and then.
    let mut admin = server.connection().unwrap();
    assert!(
        eventually(Duration::from_secs(20), || {
            let (_, n): (String, u64) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg("redisson_lock__channel:{half-open}")
                .query(&mut admin)
                .unwrap();
            std::future::ready(n >= 2)
        })
        .await,
        "the new connection subscribed"
    );
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let (got, at) = waiting.await.unwrap();
    let got = got.unwrap().expect("the waiter gets the lock");
    assert!(
        at - released_at < Duration::from_secs(5),
        "woken {:?} after the release: the message was missed",
        at - released_at
    );
    got.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_never_waits_for_its_subscription_past_its_deadline() {
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(&server.addr()).unwrap();
    let waiters = Client::builder(proxy.url())
        .command_timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    let holder = common::client(&server, Duration::from_secs(10)).await;
    let guard = holder.lock("slow-subscribe").unwrap().lock().await.unwrap();
    // The hub's connection (the next one) will never answer its SUBSCRIBE.
    proxy.sever(proxy.connection_count());
    let started = Instant::now();
    let got = waiters
        .lock("slow-subscribe")
        .unwrap()
        .try_lock_for(Duration::from_millis(300))
        .await
        .unwrap();
    assert!(got.is_none());
    // Bounded by the caller's 300 ms, not by the 5 s command timeout.
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "try_lock_for(300ms) took {:?}",
        started.elapsed()
    );
    guard.release().await.unwrap();
}
