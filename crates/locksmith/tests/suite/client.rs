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
