//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::time::Duration;

use locksmith::Client;
use locksmith_testkit::RedisServer;

/// A fresh server and a client with a short watchdog lease.
pub async fn setup(lease: Duration) -> (RedisServer, Client) {
    let server = RedisServer::start().expect("start redis-server");
    let client = client(&server, lease).await;
    (server, client)
}

/// Another client of `server`.
pub async fn client(server: &RedisServer, lease: Duration) -> Client {
    Client::builder(server.url())
        .lease(lease)
        .command_timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("connect")
}

/// Polls `cond` every 20 ms for at most `limit`; true if it became true.
pub async fn eventually<F, Fut>(limit: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if cond().await {
            return true;
        }
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// All keys on the server.
pub fn keys(server: &RedisServer) -> Vec<String> {
    let mut conn = server.connection().expect("connection");
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).expect("KEYS");
    keys.sort();
    keys
}
