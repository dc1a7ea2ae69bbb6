//! Primary, replicas and Sentinels: a killed primary is replaced, and a
//! client that asks the Sentinels reaches the new one.

use std::time::Duration;

use locksmith_testkit::SentinelGroup;
use redis::sentinel::{SentinelClient, SentinelServerType};

fn role_and_port(conn: &mut redis::Connection) -> (String, String) {
    let info: String = redis::cmd("INFO").arg("replication").query(conn).unwrap();
    let role = info
        .lines()
        .find_map(|l| l.trim().strip_prefix("role:"))
        .unwrap()
        .to_owned();
    let port: (String, String) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("port")
        .query(conn)
        .unwrap();
    (role, port.1)
}

#[test]
fn sentinel_failover_promotes_a_replica_and_clients_follow() {
    let mut group = SentinelGroup::start().expect("start sentinel group");
    assert_eq!(group.nodes().len(), 3);
    assert_eq!(group.sentinel_urls().len(), 3);
    let old = group.primary_addr();

    let mut sentinel = SentinelClient::build(
        group.sentinel_urls(),
        group.master_name(),
        None,
        SentinelServerType::Master,
    )
    .unwrap();
    let mut conn = sentinel.get_connection().unwrap();
    assert_eq!(
        role_and_port(&mut conn),
        ("master".into(), group.nodes()[0].port().to_string())
    );
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v1")
        .query(&mut conn)
        .unwrap();
    // Make sure both replicas have it before the primary dies.
    let acked: i64 = redis::cmd("WAIT")
        .arg(2)
        .arg(5000)
        .query(&mut conn)
        .unwrap();
    assert_eq!(acked, 2);
    drop(conn);

    group.kill_primary();
    let new = group
        .wait_for_failover(Duration::from_secs(40))
        .expect("failover");
    assert_ne!(new, old);
    assert_eq!(group.primary_addr(), new);
    assert_ne!(group.primary_index(), 0);

    // A Sentinel-following client now lands on the new primary.
    let mut conn = (0..50)
        .find_map(|_| {
            sentinel.get_connection().ok().or_else(|| {
                std::thread::sleep(Duration::from_millis(100));
                None
            })
        })
        .expect("a connection to the new primary");
    let (role, port) = role_and_port(&mut conn);
    assert_eq!(role, "master");
    assert_eq!(format!("127.0.0.1:{port}"), new);
    let v: String = redis::cmd("GET").arg("k").query(&mut conn).unwrap();
    assert_eq!(v, "v1", "acknowledged write survived the failover");
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v2")
        .query(&mut conn)
        .unwrap();
    let v: String = redis::cmd("GET").arg("k").query(&mut conn).unwrap();
    assert_eq!(v, "v2");
}
