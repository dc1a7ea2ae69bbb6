//! `locksmith id`, through the built binary.

use crate::common;

use std::collections::HashSet;

use common::{run, RedisServer};

#[test]
fn ids_are_unique_and_increasing_across_invocations() {
    let server = RedisServer::start().unwrap();
    let first = run(
        &server,
        &["id", "orders", "--count", "500", "--block", "100"],
    );
    assert_eq!(first.code, Some(0), "{first:?}");
    let second = run(&server, &["id", "orders", "--count", "500"]);
    assert_eq!(second.code, Some(0), "{second:?}");
    let ids: Vec<i64> = first
        .stdout
        .lines()
        .chain(second.stdout.lines())
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(ids.len(), 1000);
    assert!(ids.windows(2).all(|w| w[1] > w[0]), "increasing");
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 1000, "unique");

    let json = run(&server, &["id", "orders", "--json"]);
    let value: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let item = &value[0];
    let id: i64 = item["id"].as_str().unwrap().parse().unwrap();
    assert!(id > *ids.last().unwrap());
    assert_eq!(item["sequence"].as_i64().unwrap(), id & 0xffff_ffff);
    assert_eq!(item["seconds"].as_i64().unwrap(), id >> 32);
}

#[test]
fn bad_id_input_is_a_usage_error() {
    let server = RedisServer::start().unwrap();
    for args in [
        &["id", ""][..],
        &["id", "x", "--count", "0"],
        &["id", "x", "--block", "0"],
        &["id"],
    ] {
        let out = run(&server, args);
        assert_eq!(out.code, Some(64), "{args:?}: {out:?}");
    }
}
