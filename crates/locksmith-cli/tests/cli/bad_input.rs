//! The bad-input catalog of the CLI: each bad invocation with its exit code
//! (64 usage, 69 unreachable, 70 wrong-type key), and a message on stderr.

use crate::common;

use common::{locksmith, run, RedisServer};

#[test]
fn every_bad_invocation_maps_to_its_exit_code() {
    let server = RedisServer::start().unwrap();
    let mut conn = server.connection().unwrap();
    let _: () = redis::cmd("RPUSH")
        .arg("a-list")
        .arg("x")
        .query(&mut conn)
        .unwrap();
    let cases: &[(&[&str], i32)] = &[
        (&["run", "--lock", "", "--", "true"], 64),
        (&["run", "--lock", "l", "--lease", "0", "--", "true"], 64),
        (&["run", "--lock", "l", "--wait", "-1s", "--", "true"], 64),
        (&["run", "--lock", "l", "--wait", "5", "--", "true"], 64),
        (&["run", "--lock", "l", "--no-renew", "--", "true"], 64),
        (&["run", "--lock", "l"], 64),
        (&["run", "--lock", "a", "--lock", "a", "--", "true"], 64),
        (&["run", "--lock", "a,b", "--lock", "c", "--", "true"], 64),
        (&["run", "--semaphore", "s", "--", "true"], 64),
        (
            &["run", "--semaphore", "s", "--permits", "0", "--", "true"],
            64,
        ),
        (
            &["run", "--fair-lock", "f", "--read-lock", "r", "--", "true"],
            64,
        ),
        (&["status", ""], 64),
        (&["status", "x", "--kind", "queue"], 64),
        (&["unlock", "l"], 64),
        (&["latch", "c", "set", "0"], 64),
        (&["latch", "c", "wait", "--timeout", "soon"], 64),
        (&["id", "i", "--block", "0"], 64),
        (&["id", "i", "--count", "0"], 64),
        (&["completions", "tcsh"], 64),
        (&["--connect-timeout", "0", "status", "x"], 64),
        (&["--command-timeout", "soon", "status", "x"], 64),
        (&["--command-timeout", "2d", "status", "x"], 64),
        (&["frobnicate"], 64),
        (
            &["run", "--lock", "a-list", "--wait", "0", "--", "true"],
            70,
        ),
        (&["latch", "a-list", "count-down"], 70),
        (&["status", "a-list"], 70),
    ];
    for (args, code) in cases {
        let out = run(&server, args);
        assert_eq!(out.code, Some(*code), "{args:?}: {out:?}");
        assert!(!out.stderr.trim().is_empty(), "{args:?}: says why");
    }
    // Unreachable: every command that talks to Redis exits 69 and names the
    // address.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("redis://127.0.0.1:{port}");
    for args in [
        &["run", "--lock", "l", "--", "true"][..],
        &["status", "l"],
        &["latch", "c", "count"],
        &["id", "i"],
    ] {
        let out = locksmith(&server)
            .env("LOCKSMITH_REDIS_URL", &url)
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(69), "{args:?}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(&port.to_string()),
            "{args:?}: names the address"
        );
    }
}

/// `--connect-timeout` and `--command-timeout` reach the client: behind a
/// proxy that delays every chunk 300 ms (600 ms a round trip), a command
/// bound of 100 ms fails as unreachable and says it timed out, and the
/// defaults (5 s to connect, 3 s a command) go through.
#[test]
fn the_timeouts_reach_the_client() {
    let server = RedisServer::start().unwrap();
    let proxy = locksmith_testkit::FaultProxy::start(&server.addr()).unwrap();
    proxy.set_mode(locksmith_testkit::FaultMode::Latency(
        std::time::Duration::from_millis(300),
    ));
    let through = |extra: &[&str]| {
        let mut cmd = locksmith(&server);
        cmd.args(["--redis", &proxy.url()])
            .args(extra)
            .args(["status", "timeouts"]);
        common::finish(cmd.spawn().unwrap(), std::time::Instant::now())
    };
    // A connect bound with room: the handshake's round trips are slow too.
    let out = through(&["--connect-timeout", "20s"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let out = through(&["--connect-timeout", "20s", "--command-timeout", "100ms"]);
    assert_eq!(out.code, Some(69), "{out:?}");
    assert!(out.stderr.contains("timed out"), "{out:?}");
    // The environment variable works as the flag does.
    let mut cmd = locksmith(&server);
    cmd.args(["--redis", &proxy.url(), "status", "timeouts"])
        .env("LOCKSMITH_CONNECT_TIMEOUT", "20s")
        .env("LOCKSMITH_COMMAND_TIMEOUT", "100ms");
    let out = common::finish(cmd.spawn().unwrap(), std::time::Instant::now());
    assert_eq!(out.code, Some(69), "{out:?}");
}
