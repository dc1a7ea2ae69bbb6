//! `locksmith latch` and `locksmith status` for semaphores and latches,
//! through the built binary.

use crate::common;

use std::time::{Duration, Instant};

use common::{finish, locksmith, run, RedisServer};

#[test]
fn latch_commands_set_count_down_and_wait() {
    let server = RedisServer::start().unwrap();
    let set = run(&server, &["latch", "deploy", "set", "2"]);
    assert_eq!(set.code, Some(0), "{set:?}");
    let again = run(&server, &["latch", "deploy", "set", "5"]);
    assert_eq!(again.code, Some(1), "{again:?}");
    assert!(
        again.stderr.contains("already armed (count 2)"),
        "{again:?}"
    );
    assert_eq!(
        run(&server, &["latch", "deploy", "count"]).stdout.trim(),
        "2"
    );

    let closed = run(&server, &["latch", "deploy", "wait", "--timeout", "200ms"]);
    assert_eq!(closed.code, Some(75), "{closed:?}");
    assert!(closed.elapsed >= Duration::from_millis(200), "{closed:?}");

    let waiter = locksmith(&server)
        .args(["latch", "deploy", "wait", "--timeout", "25s"])
        .spawn()
        .unwrap();
    let started = Instant::now();
    std::thread::sleep(Duration::from_millis(300));
    let down = run(&server, &["latch", "deploy", "count-down"]);
    assert_eq!((down.code, down.stdout.trim()), (Some(0), "1"), "{down:?}");
    let down = run(&server, &["latch", "deploy", "count-down"]);
    assert_eq!((down.code, down.stdout.trim()), (Some(0), "0"), "{down:?}");
    let waited = finish(waiter, started);
    assert_eq!(waited.code, Some(0), "{waited:?}");
    assert!(waited.elapsed < Duration::from_secs(20), "{waited:?}");

    let status = run(&server, &["status", "deploy", "--kind", "latch", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(json["kind"], "latch");
    assert_eq!(json["open"], true);
}

#[test]
fn latch_bad_input_is_a_usage_error() {
    let server = RedisServer::start().unwrap();
    for args in [
        &["latch", "x", "set", "0"][..],
        &["latch", "x", "set", "-1"],
        &["latch", "", "count"],
        &["latch", "x", "wait", "--timeout", "-1s"],
        &["latch", "x", "explode"],
    ] {
        let out = run(&server, args);
        assert_eq!(out.code, Some(64), "{args:?}: {out:?}");
    }
    // A key of another kind: a clear error naming it, nothing changed.
    let mut conn = server.connection().unwrap();
    let _: () = redis::cmd("HSET")
        .arg("h")
        .arg("f")
        .arg("v")
        .query(&mut conn)
        .unwrap();
    let out = run(&server, &["latch", "h", "count-down"]);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(
        out.stderr.contains("\"h\"") || out.stderr.contains(" h "),
        "{out:?}"
    );
}

#[test]
fn status_shows_semaphores_and_counts() {
    let server = RedisServer::start().unwrap();
    let mut conn = server.connection().unwrap();
    let _: () = redis::cmd("SET")
        .arg("pool")
        .arg(5)
        .query(&mut conn)
        .unwrap();
    let out = run(&server, &["status", "pool", "--kind", "semaphore"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.contains("5 permits available"), "{out:?}");
    let out = run(&server, &["status", "pool", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        (json["kind"].as_str(), json["value"].as_i64()),
        (Some("counter"), Some(5))
    );
    let _: () = redis::cmd("RPUSH")
        .arg("queue")
        .arg("x")
        .query(&mut conn)
        .unwrap();
    let out = run(&server, &["status", "queue"]);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(out.stderr.contains("is a list"), "{out:?}");
}
