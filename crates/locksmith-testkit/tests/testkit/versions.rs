//! The server `LOCKSMITH_TEST_SERVER` chooses is the one that runs.

use locksmith_testkit::{server_id, RedisServer};

#[test]
fn the_chosen_server_runs() {
    let server = RedisServer::start().unwrap();
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut server.connection().unwrap())
        .unwrap();
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(|v| v.trim().to_owned())
    };
    let id = server_id();
    let (field_name, major) = match id.as_str() {
        "redis7" => ("redis_version", "7."),
        "redis6" => ("redis_version", "6."),
        "redis8" => ("redis_version", "8."),
        // Valkey reports a Redis-compatible redis_version (7.2.4) beside
        // its own.
        "valkey8" => ("valkey_version", "8."),
        other => panic!("unknown server id {other}"),
    };
    let version = field(field_name).unwrap_or_default();
    assert!(
        version.starts_with(major),
        "{id}: {field_name} is {version:?}\n{info}"
    );
}
