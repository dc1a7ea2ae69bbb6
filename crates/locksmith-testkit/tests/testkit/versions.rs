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

/// `make test` runs the suite's cross-version slice, and `make
/// test-servers` the whole suite, on the Makefile's `OTHER_SERVERS`: every
/// server the test kit knows but the system's Redis 7.0, and
/// scripts/servers installs each of them.
#[test]
fn the_makefile_and_the_installer_name_every_other_server() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let makefile = std::fs::read_to_string(format!("{root}/Makefile")).unwrap();
    let listed: Vec<&str> = makefile
        .lines()
        .find_map(|l| l.strip_prefix("OTHER_SERVERS = "))
        .expect("OTHER_SERVERS in the Makefile")
        .split_whitespace()
        .collect();
    let others: Vec<&str> = locksmith_testkit::SERVERS
        .into_iter()
        .filter(|id| *id != "redis7")
        .collect();
    assert_eq!(listed, others);
    let installer = std::process::Command::new(format!("{root}/scripts/servers"))
        .arg("--list")
        .output()
        .unwrap();
    let known = String::from_utf8(installer.stdout).unwrap();
    assert_eq!(known.split_whitespace().collect::<Vec<_>>(), others);
}
