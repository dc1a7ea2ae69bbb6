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
