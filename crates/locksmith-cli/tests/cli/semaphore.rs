//! `locksmith run --semaphore NAME --permits N`: at most N commands at
//! once, and a killed holder's permit comes back after its lease.

use crate::common;

use std::time::{Duration, Instant};

use common::{finish, locksmith, run, signal, wait_until, RedisServer};

fn held(server: &RedisServer, name: &str) -> i64 {
    let mut conn = server.connection().unwrap();
    redis::cmd("ZCARD")
        .arg(format!("{{{name}}}:timeout"))
        .query(&mut conn)
        .unwrap()
}

#[test]
fn at_most_n_commands_run_at_once() {
    let server = RedisServer::start().unwrap();
    let spawn = |gate: &common::Gate| {
        let mut child = locksmith(&server)
            .args(["run", "--semaphore", "encoders", "--permits", "2", "--"])
            .args(["sh", "-c"])
            .arg(gate.script("echo $LOCKSMITH_SEMAPHORE_NAME $LOCKSMITH_PERMIT_ID", ""))
            .spawn()
            .unwrap();
        gate.wait_running(&mut child);
        child
    };
    let started = Instant::now();
    let gates = [common::Gate::new(), common::Gate::new()];
    let first = spawn(&gates[0]);
    let second = spawn(&gates[1]);
    assert_eq!(held(&server, "encoders"), 2, "two permits taken");
    let third = run(
        &server,
        &[
            "run",
            "--semaphore",
            "encoders",
            "--permits",
            "2",
            "--wait",
            "0",
            "--",
            "true",
        ],
    );
    assert_eq!(third.code, Some(75), "{third:?}");
    assert!(third.stderr.contains("no free permit"), "{third:?}");
    for gate in &gates {
        gate.open();
    }
    for child in [first, second] {
        let out = finish(child, started);
        assert_eq!(out.code, Some(0), "{out:?}");
        let mut words = out.stdout.split_whitespace();
        assert_eq!(words.next(), Some("encoders"));
        let id = words.next().unwrap_or_default();
        assert!(
            id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()),
            "{out:?}"
        );
    }
    assert_eq!(held(&server, "encoders"), 0, "both released");
    let status = run(
        &server,
        &["status", "encoders", "--kind", "semaphore", "--json"],
    );
    let json: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(json["available"], 2, "{status:?}");
}

#[test]
fn a_killed_holders_permit_returns_after_its_lease() {
    let server = RedisServer::start().unwrap();
    let holder = locksmith(&server)
        .args([
            "run",
            "--semaphore",
            "single",
            "--permits",
            "1",
            "--lease",
            "1s",
            "--",
        ])
        // Killed long before this ends.
        .args(["sleep", "30"])
        .spawn()
        .unwrap();
    wait_until(|| held(&server, "single") == 1, "the permit taken");
    signal(&holder, nix::sys::signal::Signal::SIGKILL);
    let killed_at = Instant::now();
    let _ = finish(holder, killed_at);
    let next = run(
        &server,
        &[
            "run",
            "--semaphore",
            "single",
            "--permits",
            "1",
            "--wait",
            "20s",
            "--",
            "true",
        ],
    );
    assert_eq!(next.code, Some(0), "the permit came back: {next:?}");
    assert!(
        killed_at.elapsed() >= Duration::from_millis(500),
        "not before the lease ran out"
    );
}

#[test]
fn bad_semaphore_input_is_a_usage_error() {
    let server = RedisServer::start().unwrap();
    for args in [
        &["run", "--semaphore", "s", "--", "true"][..],
        &["run", "--semaphore", "s", "--permits", "0", "--", "true"],
        &["run", "--semaphore", "", "--permits", "1", "--", "true"],
        &["run", "--lock", "l", "--permits", "1", "--", "true"],
        &[
            "run",
            "--lock",
            "l",
            "--semaphore",
            "s",
            "--permits",
            "1",
            "--",
            "true",
        ],
    ] {
        let out = run(&server, args);
        assert_eq!(out.code, Some(64), "{args:?}: {out:?}");
    }
}
