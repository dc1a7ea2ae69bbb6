//! The fault proxy on its own, with plain synchronous connections: each
//! mode does what it says and switches take effect on open connections.

use std::time::{Duration, Instant};

use locksmith_testkit::{FaultMode, FaultProxy, RedisServer};

fn connect(proxy: &FaultProxy) -> redis::RedisResult<redis::Connection> {
    let conn =
        redis::Client::open(proxy.url())?.get_connection_with_timeout(Duration::from_secs(2))?;
    conn.set_read_timeout(Some(Duration::from_millis(500)))?;
    Ok(conn)
}

fn ping(conn: &mut redis::Connection) -> redis::RedisResult<String> {
    redis::cmd("PING").query(conn)
}

#[test]
fn pass_forwards_and_latency_delays() {
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(&server.addr()).unwrap();
    assert_eq!(proxy.mode(), FaultMode::Pass);
    assert_eq!(proxy.target(), server.addr());
    let mut conn = connect(&proxy).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(ping(&mut conn).unwrap(), "PONG");

    let added = Duration::from_millis(150);
    proxy.set_mode(FaultMode::Latency(added));
    for _ in 0..3 {
        let started = Instant::now();
        assert_eq!(ping(&mut conn).unwrap(), "PONG");
        // Held in each direction: a round trip gains at least twice.
        assert!(started.elapsed() >= added * 2, "{:?}", started.elapsed());
    }

    proxy.set_mode(FaultMode::Pass);
    assert_eq!(ping(&mut conn).unwrap(), "PONG");
}

#[test]
fn black_hole_holds_and_pass_releases() {
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(&server.addr()).unwrap();
    let mut conn = connect(&proxy).unwrap();
    assert_eq!(ping(&mut conn).unwrap(), "PONG");

    proxy.set_mode(FaultMode::BlackHole);
    let err = ping(&mut conn).expect_err("nothing comes back through a black hole");
    assert!(err.is_timeout(), "expected a timeout, got {err}");
    // New connections are accepted and held too.
    let held = std::net::TcpStream::connect(proxy.addr()).unwrap();
    held.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = [0u8; 8];
    let err = std::io::Read::read(&mut &held, &mut buf).expect_err("held open, silent");
    assert!(matches!(
        err.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    ));

    proxy.set_mode(FaultMode::Pass);
    let mut conn = connect(&proxy).unwrap();
    assert_eq!(ping(&mut conn).unwrap(), "PONG");
}

#[test]
fn reset_drops_open_and_new_connections() {
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(&server.addr()).unwrap();
    let mut conn = connect(&proxy).unwrap();
    assert_eq!(ping(&mut conn).unwrap(), "PONG");

    proxy.set_mode(FaultMode::Reset);
    // Give the pumps a moment to act on the open connection.
    std::thread::sleep(Duration::from_millis(100));
    let err = ping(&mut conn).expect_err("the open connection was reset");
    assert!(!err.is_timeout(), "expected a connection error, got {err}");
    let fresh = connect(&proxy).and_then(|mut c| ping(&mut c));
    assert!(fresh.is_err(), "new connections are reset: {fresh:?}");

    proxy.set_mode(FaultMode::Pass);
    let mut conn = connect(&proxy).unwrap();
    assert_eq!(ping(&mut conn).unwrap(), "PONG");
}

#[test]
fn drop_stops_the_proxy_and_closes_connections() {
    let server = RedisServer::start().unwrap();
    let proxy = FaultProxy::start(&server.addr()).unwrap();
    let mut conn = connect(&proxy).unwrap();
    assert_eq!(ping(&mut conn).unwrap(), "PONG");
    // Drop joins the proxy's threads, so it returning at all shows they
    // stopped. (Not checked: that the port is free; a concurrent test may
    // already have been given it.)
    drop(proxy);
    assert!(ping(&mut conn).is_err(), "the proxied connection is closed");
}
