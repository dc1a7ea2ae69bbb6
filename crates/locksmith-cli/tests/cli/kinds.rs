//! `locksmith run --fair-lock | --read-lock | --write-lock` and `status`
//! of those kinds, through the built binary.

use crate::common;

use std::time::{Duration, Instant};

use common::{finish, locksmith, run, wait_until, RedisServer};

fn status_json(server: &RedisServer, name: &str) -> serde_json::Value {
    let out = run(server, &["status", name, "--json"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    serde_json::from_str(&out.stdout).unwrap()
}

#[test]
fn readers_share_and_a_writer_waits_for_them() {
    let server = RedisServer::start().unwrap();
    // Each reader's command holds until the test opens its gate.
    let reader = |gate: &common::Gate| {
        let mut child = locksmith(&server)
            .args(["run", "--read-lock", "catalog", "--", "sh", "-c"])
            .arg(gate.script("", ""))
            .spawn()
            .unwrap();
        gate.wait_running(&mut child);
        child
    };
    let started = Instant::now();
    let gates = [common::Gate::new(), common::Gate::new()];
    let (a, b) = (reader(&gates[0]), reader(&gates[1]));
    let json = status_json(&server, "catalog");
    assert_eq!(json["kind"], "read-write-lock");
    assert_eq!(json["mode"], "read");
    assert_eq!(
        json["readers"].as_array().map_or(0, Vec::len),
        2,
        "two readers at once: {json}"
    );
    let busy = run(
        &server,
        &[
            "run",
            "--write-lock",
            "catalog",
            "--wait",
            "0",
            "--",
            "true",
        ],
    );
    assert_eq!(busy.code, Some(75), "{busy:?}");
    assert!(
        busy.stderr.contains("write lock \"catalog\" is held"),
        "{busy:?}"
    );
    let writer = locksmith(&server)
        .args(["run", "--write-lock", "catalog", "--wait", "20s", "--"])
        .args(["sh", "-c", "echo $LOCKSMITH_FENCING_TOKEN"])
        .spawn()
        .unwrap();
    wait_until(
        || common::listeners(&server, "redisson_rwlock:{catalog}") == 1,
        "the writer waits for the readers",
    );
    for gate in &gates {
        gate.open();
    }
    let writer = finish(writer, started);
    assert_eq!(writer.code, Some(0), "{writer:?}");
    assert!(writer.stdout.trim().parse::<u64>().unwrap() >= 1);
    for child in [a, b] {
        assert_eq!(finish(child, started).code, Some(0));
    }
}

#[test]
fn fair_lock_queue_shows_in_status() {
    let server = RedisServer::start().unwrap();
    let gate = common::Gate::new();
    let mut holder = locksmith(&server)
        .args(["run", "--fair-lock", "payouts", "--", "sh", "-c"])
        .arg(gate.script("", ""))
        .spawn()
        .unwrap();
    gate.wait_running(&mut holder);
    let started = Instant::now();
    let waiter = locksmith(&server)
        .args([
            "run",
            "--fair-lock",
            "payouts",
            "--wait",
            "20s",
            "--",
            "true",
        ])
        .spawn()
        .unwrap();
    wait_until(
        || {
            status_json(&server, "payouts")["queue"]
                .as_array()
                .map_or(0, Vec::len)
                == 1
        },
        "the waiter in the queue",
    );
    let text = run(&server, &["status", "payouts"]);
    assert!(text.stdout.contains("queued 1:"), "{text:?}");
    gate.open();
    assert_eq!(finish(holder, started).code, Some(0));
    let out = finish(waiter, started);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.elapsed < Duration::from_secs(15), "{out:?}");
    assert_eq!(
        status_json(&server, "payouts")["queue"],
        serde_json::json!([])
    );
}

#[test]
fn several_locks_are_taken_together_or_not_at_all() {
    let server = RedisServer::start().unwrap();
    let out = run(
        &server,
        &[
            "run",
            "--lock",
            "to",
            "--lock",
            "from",
            "--",
            "sh",
            "-c",
            "echo $LOCKSMITH_LOCK_NAME $LOCKSMITH_FENCING_TOKEN",
        ],
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    // Names in canonical order; each token a new counter's first (from
    // the server clock).
    let (names, tokens) = out.stdout.trim().split_once(' ').unwrap();
    assert_eq!(names, "from,to", "names in canonical order");
    let tokens: Vec<u64> = tokens.split(',').map(|t| t.parse().unwrap()).collect();
    assert_eq!(tokens.len(), 2);
    assert!(
        tokens.iter().all(|t| *t > 1_700_000_000_000_000),
        "{tokens:?}"
    );
    // One member busy: exit 75 and the other member is not kept.
    let gate = common::Gate::new();
    let mut holder = locksmith(&server)
        .args(["run", "--lock", "to", "--", "sh", "-c"])
        .arg(gate.script("", ""))
        .spawn()
        .unwrap();
    gate.wait_running(&mut holder);
    let started = Instant::now();
    let busy = run(
        &server,
        &[
            "run", "--lock", "from", "--lock", "to", "--wait", "0", "--", "true",
        ],
    );
    assert_eq!(busy.code, Some(75), "{busy:?}");
    assert_eq!(
        status_json(&server, "from")["locked"],
        false,
        "nothing kept"
    );
    assert!(
        run(
            &server,
            &["run", "--lock", "from", "--lock", "from", "--", "true"]
        )
        .code
            == Some(64),
        "a name twice is bad input"
    );
    gate.open();
    assert_eq!(finish(holder, started).code, Some(0));
}
