//! `locksmith status`, `locksmith unlock`, and bad input, through the built
//! binary.

use crate::common;

use std::time::Instant;

use common::{finish, hold, is_locked, locksmith, run, wait_bounded, RedisServer, LIMIT};

fn status_json(server: &RedisServer, name: &str) -> serde_json::Value {
    let out = run(server, &["status", name, "--json"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("bad JSON ({e}): {out:?}"))
}

#[test]
fn status_json_describes_a_held_and_a_free_lock() {
    let server = RedisServer::start().unwrap();
    let free = status_json(&server, "report");
    assert_eq!(free["name"], "report");
    assert_eq!(free["locked"], false);
    assert_eq!(free["holders"].as_array().unwrap().len(), 0);
    assert!(free["remaining_lease_ms"].is_null());
    assert_eq!(free["fencing_counter"], 0);

    let holder = hold(&server, "report", &["--lease", "20s"], &["sleep", "20"]);
    let held = status_json(&server, "report");
    assert_eq!(held["locked"], true);
    let holders = held["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 1, "{held}");
    assert_eq!(holders[0]["count"], 1);
    assert!(holders[0]["owner"].as_str().unwrap().contains(':'));
    let lease = held["remaining_lease_ms"].as_u64().unwrap();
    assert!(lease > 0 && lease <= 20_000, "{held}");
    // A new counter starts from the server's clock in microseconds.
    assert!(
        held["fencing_counter"].as_u64().unwrap() > 1_700_000_000_000_000,
        "{held}"
    );

    let text = run(&server, &["status", "report"]);
    assert!(text.stdout.contains("locked"), "{text:?}");
    assert!(text.stdout.contains("hold count 1"), "{text:?}");

    // The holder's command is killed once the lock is force-unlocked.
    assert_eq!(run(&server, &["unlock", "--force", "report"]).code, Some(0));
    let out = finish(holder, Instant::now());
    assert_eq!(out.code, Some(70), "{out:?}");
}

#[test]
fn unlock_requires_force() {
    let server = RedisServer::start().unwrap();
    // A lease that cannot lapse while the commands below start on a
    // loaded machine; the holder learns of the force unlock at its next
    // renewal, a third of it later.
    let mut holder = hold(&server, "guarded", &["--lease", "10s"], &["sleep", "20"]);
    let out = run(&server, &["unlock", "guarded"]);
    assert_eq!(out.code, Some(64), "{out:?}");
    assert!(out.stderr.contains("--force"), "{out:?}");
    assert!(is_locked(&server, "guarded"));

    let out = run(&server, &["unlock", "--force", "guarded"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(!is_locked(&server, "guarded"));
    assert_eq!(wait_bounded(&mut holder, LIMIT).code(), Some(70));

    let out = run(&server, &["unlock", "--force", "guarded"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("was not locked"), "{out:?}");
}

#[test]
fn bad_input_is_a_usage_error() {
    let server = RedisServer::start().unwrap();
    let cases: [(&[&str], &str); 7] = [
        (&["run", "--lock", "", "--", "true"], "--lock"),
        (
            &["run", "--lock", "a", "--lease", "0", "--", "true"],
            "--lease",
        ),
        (
            &["run", "--lock", "a", "--wait", "soon", "--", "true"],
            "--wait",
        ),
        (
            &["run", "--lock", "a", "--wait=-1s", "--", "true"],
            "--wait",
        ),
        (
            &["run", "--lock", "a", "--lease", "5", "--", "true"],
            "no unit",
        ),
        (&["run", "--lock", "a"], "CMD"),
        (&["status", ""], "NAME"),
    ];
    for (args, needle) in cases {
        let out = run(&server, args);
        assert_eq!(out.code, Some(64), "{args:?}: {out:?}");
        assert!(out.stderr.contains(needle), "{args:?}: {out:?}");
    }
    let out = run(&server, &["--redis", "ftp://nowhere", "status", "a"]);
    assert_eq!(out.code, Some(64), "{out:?}");
}

#[test]
fn unreachable_redis_names_the_address() {
    // A port nothing listens on: bind one, note it, and close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = RedisServer::start().unwrap();
    let url = format!("redis://127.0.0.1:{port}");
    for args in [
        vec!["--redis", &url, "run", "--lock", "a", "--", "true"],
        vec!["--redis", &url, "status", "a"],
        vec!["--redis", &url, "unlock", "--force", "a"],
    ] {
        let out = run(&server, &args);
        assert_eq!(out.code, Some(69), "{args:?}: {out:?}");
        assert!(out.stderr.contains(&format!("127.0.0.1:{port}")), "{out:?}");
    }
    // The environment variable is used the same way.
    let mut cmd = locksmith(&server);
    cmd.env("LOCKSMITH_REDIS_URL", &url).args(["status", "a"]);
    let out = finish(cmd.spawn().unwrap(), Instant::now());
    assert_eq!(out.code, Some(69), "{out:?}");
}

/// `unlock --force` on a name that holds something other than a lock (a
/// semaphore's count, a list) refuses and deletes nothing.
#[test]
fn unlock_force_leaves_other_kinds_alone() {
    let server = RedisServer::start().unwrap();
    let mut conn = server.connection().unwrap();
    let _: () = redis::cmd("SET")
        .arg("permits")
        .arg(3)
        .query(&mut conn)
        .unwrap();
    let _: () = redis::cmd("RPUSH")
        .arg("jobs")
        .arg("a")
        .query(&mut conn)
        .unwrap();
    for name in ["permits", "jobs"] {
        let out = run(&server, &["unlock", "--force", name]);
        assert_eq!(out.code, Some(70), "{out:?}");
        assert!(out.stderr.contains("wrong type"), "{out:?}");
        let exists: i64 = redis::cmd("EXISTS").arg(name).query(&mut conn).unwrap();
        assert_eq!(exists, 1, "{name} kept");
    }
}

/// `unlock --force` frees a read-write lock held by `run --write-lock`
/// (whose command is then signalled: it lost the lock), a fair lock with a
/// waiter queued (which then runs), and a simple lock another client took
/// with its own token.
#[test]
fn unlock_force_frees_read_write_and_simple_locks() {
    let server = RedisServer::start().unwrap();
    let mut command = locksmith(&server);
    command
        .args(["run", "--write-lock", "rw-job", "--lease", "10s", "--"])
        .args(["sleep", "20"]);
    let mut holder = command.spawn().expect("spawn locksmith");
    common::wait_until(|| is_locked(&server, "rw-job"), "the write lock");
    let out = run(&server, &["unlock", "--force", "rw-job"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("unlocked"), "{out:?}");
    assert_eq!(wait_bounded(&mut holder, LIMIT).code(), Some(70));

    // A fair lock with a waiter queued: freed, and the waiter runs.
    let mut command = locksmith(&server);
    command
        .args(["run", "--fair-lock", "fair-job", "--lease", "30s", "--"])
        .args(["sleep", "20"]);
    let mut fair_holder = command.spawn().expect("spawn locksmith");
    common::wait_until(|| is_locked(&server, "fair-job"), "the fair lock");
    let mut command = locksmith(&server);
    command
        .args(["run", "--fair-lock", "fair-job", "--wait", "25s", "--"])
        .arg("true");
    let mut fair_waiter = command.spawn().expect("spawn locksmith");
    let mut conn = server.connection().unwrap();
    common::wait_until(
        || {
            redis::cmd("EXISTS")
                .arg("redisson_lock_queue:{fair-job}")
                .query::<bool>(&mut conn)
                .unwrap()
        },
        "the waiter to queue",
    );
    let out = run(&server, &["unlock", "--force", "fair-job"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("unlocked"), "{out:?}");
    assert_eq!(wait_bounded(&mut fair_waiter, LIMIT).code(), Some(0));
    assert_eq!(wait_bounded(&mut fair_holder, LIMIT).code(), Some(70));

    let _: () = redis::cmd("SET")
        .arg("peer")
        .arg("python-token")
        .arg("PX")
        .arg(20_000)
        .query(&mut conn)
        .unwrap();
    let out = run(&server, &["unlock", "--force", "peer"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(!is_locked(&server, "peer"));
}

/// Under `--key-prefix`, `status` and `unlock --force` look at the
/// prefixed key, as every other command does: a read-write lock is seen
/// as one, and freed.
#[test]
fn status_and_unlock_read_the_key_under_the_prefix() {
    let server = RedisServer::start().unwrap();
    let prefixed = |args: &[&str]| {
        let mut cmd = locksmith(&server);
        cmd.env("LOCKSMITH_KEY_PREFIX", "app1:").args(args);
        cmd
    };
    let mut holder = prefixed(&[
        "run",
        "--read-lock",
        "doc",
        "--lease",
        "30s",
        "--",
        "sleep",
        "20",
    ])
    .spawn()
    .expect("spawn locksmith");
    common::wait_until(|| is_locked(&server, "app1:doc"), "the read lock");
    let out = finish(
        prefixed(&["status", "doc", "--json"]).spawn().unwrap(),
        Instant::now(),
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    let status: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(status["kind"], "read-write-lock", "{status}");
    let out = finish(
        prefixed(&["unlock", "--force", "doc"]).spawn().unwrap(),
        Instant::now(),
    );
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("unlocked"), "{out:?}");
    assert!(!is_locked(&server, "app1:doc"));
    assert_eq!(wait_bounded(&mut holder, LIMIT).code(), Some(70));
}
