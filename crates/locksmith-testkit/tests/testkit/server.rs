//! The single-node server: starts, restarts on the same address, pauses.

use locksmith_testkit::RedisServer;

#[test]
fn starts_restarts_and_keeps_its_address() {
    let mut server = RedisServer::start().expect("start redis-server");
    let addr = server.addr();
    let mut conn = server.connection().unwrap();
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query(&mut conn)
        .unwrap();

    server.restart().expect("restart");
    assert_eq!(server.addr(), addr, "restart keeps the address");
    let mut conn = server.connection().unwrap();
    let v: Option<String> = redis::cmd("GET").arg("k").query(&mut conn).unwrap();
    assert_eq!(v, None, "no persistence: data is gone after a restart");

    server.kill();
    assert!(!server.is_running());
    assert!(server.connection().is_err());
    server.restart().unwrap();
    assert!(server.is_running());
}

#[test]
fn paused_server_times_out_and_answers_after_resume() {
    let server = RedisServer::start().expect("start redis-server");
    let mut conn = server.connection().unwrap();
    conn.set_read_timeout(Some(std::time::Duration::from_millis(300)))
        .unwrap();

    server.pause().unwrap();
    let err = redis::cmd("PING")
        .query::<String>(&mut conn)
        .expect_err("a paused server does not answer");
    assert!(err.is_timeout(), "expected a timeout, got {err}");

    server.resume().unwrap();
    // The timed-out connection is spent; a new one gets answers again.
    let mut conn = server.connection().unwrap();
    let pong: String = redis::cmd("PING").query(&mut conn).unwrap();
    assert_eq!(pong, "PONG");
}
