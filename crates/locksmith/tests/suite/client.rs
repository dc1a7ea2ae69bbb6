//! Connecting: options, errors for unreachable servers, scripts.

use std::time::{Duration, Instant};

use locksmith::{Client, ErrorKind};
use locksmith_testkit::RedisServer;

#[tokio::test]
async fn connects_and_pings() {
    let server = RedisServer::start().unwrap();
    let client = Client::open(&server.url()).await.unwrap();
    assert_eq!(client.addr(), server.addr());
    let rtt = client.ping().await.unwrap();
    assert!(rtt < Duration::from_secs(5));
}

#[tokio::test]
async fn unreachable_address_fails_fast_and_names_it() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("redis://127.0.0.1:{port}");
    let started = Instant::now();
    let err = Client::builder(&url)
        .connect_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(err.kind(), ErrorKind::Connection);
    assert!(
        err.to_string().contains(&format!("127.0.0.1:{port}")),
        "error should name the address: {err}"
    );
}

#[tokio::test]
async fn bad_options_are_rejected() {
    for builder in [
        Client::builder("not a url"),
        Client::builder("redis://127.0.0.1:1").command_timeout(Duration::ZERO),
        Client::builder("redis://127.0.0.1:1").lease(Duration::ZERO),
        Client::builder("redis://127.0.0.1:1").max_name_len(0),
    ] {
        let err = builder.build().await.unwrap_err();
        assert!(err.is_invalid_argument(), "{err}");
    }
}

/// A node connection is bounded by the client's command timeout, not
/// redis-rs's half-second default: a reply taking 0.8 s arrives within
/// a 5 s bound, and one held past a 1 s bound is a timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_connection_is_bounded_by_the_clients_command_timeout() {
    use locksmith_testkit::{FaultMode, FaultProxy};
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(&server.addr()).unwrap();
    for (bound, answers) in [
        (Duration::from_secs(5), true),
        (Duration::from_secs(1), false),
    ] {
        let client = Client::builder(server.url())
            .command_timeout(bound)
            .build()
            .await
            .unwrap();
        proxy.set_mode(FaultMode::Pass);
        let mut conn = client.node_connection(&proxy.addr()).await.unwrap();
        // 0.4 s each way: a round trip of at least 0.8 s; with the 1 s
        // bound, 0.6 s each way (1.2 s).
        let each_way = if answers { 400 } else { 600 };
        proxy.set_mode(FaultMode::Latency(Duration::from_millis(each_way)));
        let pong: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut conn).await;
        if answers {
            assert_eq!(pong.unwrap(), "PONG");
        } else {
            assert!(pong.unwrap_err().is_timeout(), "a timeout past the bound");
        }
    }
    assert!(
        Client::open(&server.url())
            .await
            .unwrap()
            .node_connection("127.0.0.1:1")
            .await
            .is_err(),
        "nothing listens at port 1"
    );
}
