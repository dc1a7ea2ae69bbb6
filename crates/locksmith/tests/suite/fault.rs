//! The client behind a fault proxy: a black hole ends in the command
//! timeout, a reset in a connection error, latency in slower answers, and
//! the client recovers by itself once the network heals.

use std::time::{Duration, Instant};

use locksmith::Client;
use locksmith_testkit::{FaultMode, FaultProxy, RedisServer};

/// The command timeout of the clients under test.
const COMMAND_TIMEOUT: Duration = Duration::from_millis(300);

async fn client(proxy: &FaultProxy) -> Client {
    Client::builder(proxy.url())
        .command_timeout(COMMAND_TIMEOUT)
        .connect_timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("connect through the proxy")
}

/// Pings until one succeeds; the client reconnects on its own, which may
/// take a few attempts after a fault.
async fn recovers(client: &Client) {
    let mut last = None;
    for _ in 0..50 {
        match client.ping().await {
            Ok(_) => return,
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the client did not recover: {last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn black_hole_times_out_and_pass_recovers() {
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(&server.addr()).unwrap();
    let client = client(&proxy).await;
    client.ping().await.unwrap();

    proxy.set_mode(FaultMode::BlackHole);
    let err = client
        .ping()
        .await
        .expect_err("no answer through a black hole");
    assert!(err.is_timeout(), "expected a timeout, got {err:?}");
    let lock = client.lock("fault:black-hole").unwrap();
    let err = lock
        .try_lock()
        .await
        .expect_err("the acquire cannot answer");
    assert!(err.is_timeout(), "expected a timeout, got {err:?}");

    proxy.set_mode(FaultMode::Pass);
    recovers(&client).await;
    let guard = lock.try_lock().await.unwrap().expect("the lock is free");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_is_a_connection_error_and_pass_recovers() {
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(&server.addr()).unwrap();
    let client = client(&proxy).await;
    client.ping().await.unwrap();

    proxy.set_mode(FaultMode::Reset);
    // The reset reaches open connections within a few milliseconds.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let err = client.ping().await.expect_err("the connection was reset");
    assert!(
        err.is_connection_error(),
        "expected a connection error, got {err:?}"
    );

    proxy.set_mode(FaultMode::Pass);
    recovers(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_slows_every_command_down() {
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(&server.addr()).unwrap();
    let client = Client::builder(proxy.url())
        .command_timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap();
    client.ping().await.unwrap();

    let added = Duration::from_millis(100);
    proxy.set_mode(FaultMode::Latency(added));
    for _ in 0..3 {
        let started = Instant::now();
        client.ping().await.unwrap();
        // The proxy holds data in both directions.
        assert!(started.elapsed() >= 2 * added, "{:?}", started.elapsed());
    }
    let lock = client.lock("fault:latency").unwrap();
    let started = Instant::now();
    let guard = lock.lock().await.unwrap();
    assert!(started.elapsed() >= 2 * added, "{:?}", started.elapsed());
    guard.release().await.unwrap();
}
