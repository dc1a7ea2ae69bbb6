//! `locksmith run`: exit codes, environment, conflicts, waiting, lost
//! leases and signal forwarding, through the built binary.

use crate::common;

use std::time::{Duration, Instant};

use common::{
    finish, hold, is_locked, locksmith, run, signal, wait_bounded, wait_until, RedisServer, LIMIT,
};
use nix::sys::signal::Signal;

#[test]
fn passes_the_command_status_through_and_releases() {
    let server = RedisServer::start().unwrap();
    let out = run(
        &server,
        &["run", "--lock", "job", "--", "sh", "-c", "exit 3"],
    );
    assert_eq!(out.code, Some(3), "{out:?}");
    let out = run(&server, &["run", "--lock", "job", "--", "true"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(!is_locked(&server, "job"));
}

#[test]
fn signal_death_is_128_plus_the_signal() {
    let server = RedisServer::start().unwrap();
    let out = run(
        &server,
        &["run", "--lock", "job", "--", "sh", "-c", "kill -9 $$"],
    );
    assert_eq!(out.code, Some(128 + 9), "{out:?}");
    assert!(!is_locked(&server, "job"));
}

#[test]
fn command_sees_lock_name_and_increasing_fencing_tokens() {
    let server = RedisServer::start().unwrap();
    let script = r#"echo "$LOCKSMITH_LOCK_NAME $LOCKSMITH_FENCING_TOKEN""#;
    let first = run(
        &server,
        &["run", "--lock", "env-lock", "--", "sh", "-c", script],
    );
    let second = run(
        &server,
        &["run", "--lock", "env-lock", "--", "sh", "-c", script],
    );
    let token = |out: &common::Output| -> u64 {
        let (name, token) = out.stdout.trim().split_once(' ').expect("two words");
        assert_eq!(name, "env-lock");
        token.parse().expect("numeric token")
    };
    assert!(token(&second) > token(&first), "{first:?} {second:?}");
}

#[test]
fn wait_zero_while_held_exits_with_the_conflict_code() {
    let server = RedisServer::start().unwrap();
    let mut holder = hold(&server, "busy", &[], &["sleep", "20"]);

    let out = run(
        &server,
        &["run", "--lock", "busy", "--wait", "0", "--", "true"],
    );
    assert_eq!(out.code, Some(75), "{out:?}");
    assert!(out.stderr.contains("held by someone else"), "{out:?}");

    let out = run(
        &server,
        &[
            "run",
            "--lock",
            "busy",
            "--wait",
            "0",
            "--conflict-exit-code",
            "9",
            "--",
            "true",
        ],
    );
    assert_eq!(out.code, Some(9), "{out:?}");

    // SIGTERM to the holder is forwarded to `sleep`, which dies of it.
    signal(&holder, Signal::SIGTERM);
    assert_eq!(wait_bounded(&mut holder, LIMIT).code(), Some(128 + 15));
    assert!(!is_locked(&server, "busy"));
}

#[test]
fn wait_gives_up_after_the_timeout() {
    let server = RedisServer::start().unwrap();
    let mut holder = hold(&server, "busy", &[], &["sleep", "20"]);
    let out = run(
        &server,
        &["run", "--lock", "busy", "--wait", "300ms", "--", "true"],
    );
    assert_eq!(out.code, Some(75), "{out:?}");
    assert!(out.elapsed >= Duration::from_millis(300), "{out:?}");
    signal(&holder, Signal::SIGTERM);
    wait_bounded(&mut holder, LIMIT);
}

#[test]
fn wait_gets_the_lock_once_the_holder_finishes() {
    let server = RedisServer::start().unwrap();
    let gate = common::Gate::new();
    let script = gate.script("", "");
    let mut holder = hold(&server, "queue", &[], &["sh", "-c", &script]);
    let started = Instant::now();
    let waiter = locksmith(&server)
        .args(["run", "--lock", "queue", "--wait", "20s", "--"])
        .args(["echo", "ran"])
        .spawn()
        .unwrap();
    // The holder's command ends only once the waiter waits.
    wait_until(
        || common::listeners(&server, "redisson_lock__channel:{queue}") == 1,
        "the waiter to wait",
    );
    gate.open();
    let out = finish(waiter, started);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(out.stdout.trim(), "ran");
    assert_eq!(wait_bounded(&mut holder, LIMIT).code(), Some(0));
}

#[test]
fn fixed_lease_running_out_terminates_the_command() {
    let server = RedisServer::start().unwrap();
    // The command reports the SIGTERM it gets, then exits 0: locksmith must
    // still exit non-zero because the lock was lost.
    let script = r#"trap 'kill $!; echo got-sigterm; exit 0' TERM; sleep 10 & wait"#;
    let out = run(
        &server,
        &[
            "run",
            "--lock",
            "short",
            "--no-renew",
            // Long enough for the shell to set its trap first on a loaded
            // machine (with 500 ms, one run in a fresh clone's make test
            // saw the SIGTERM arrive before the trap: the shell died of it
            // without reporting).
            "--lease",
            "2s",
            "--",
            "sh",
            "-c",
            script,
        ],
    );
    assert_eq!(out.code, Some(70), "{out:?}");
    assert_eq!(out.stdout.trim(), "got-sigterm", "{out:?}");
    assert!(out.stderr.contains("lost lock \"short\""), "{out:?}");
    assert!(out.elapsed < Duration::from_secs(10), "{out:?}");
}

#[test]
fn force_unlock_while_running_kills_the_command_with_on_lost_kill() {
    let server = RedisServer::start().unwrap();
    // A 3 s renewed lease: the watchdog checks every second, and a stall
    // under load cannot end it before the force unlock does.
    let holder = hold(
        &server,
        "victim",
        &["--lease", "3s", "--on-lost", "kill"],
        &["sleep", "20"],
    );
    // The command's 20 s began before the lock was seen.
    let started = Instant::now();
    let out = run(&server, &["unlock", "--force", "victim"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let out = finish(holder, started);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert!(out.stderr.contains("lost lock \"victim\""), "{out:?}");
    assert!(out.stderr.contains("SIGKILL"), "{out:?}");
    assert!(out.elapsed < Duration::from_secs(15), "{out:?}");
}

#[test]
fn on_lost_ignore_lets_the_command_finish_but_still_fails() {
    let server = RedisServer::start().unwrap();
    let started = Instant::now();
    let gate = common::Gate::new();
    let script = gate.script("", "echo finished");
    let holder = hold(
        &server,
        "ignored",
        &["--lease", "3s", "--on-lost", "ignore"],
        &["sh", "-c", &script],
    );
    assert_eq!(
        run(&server, &["unlock", "--force", "ignored"]).code,
        Some(0)
    );
    // The watchdog notices the loss within a renewal (a third of the 3 s
    // lease); the command finishes well after that.
    std::thread::sleep(Duration::from_secs(5));
    gate.open();
    let out = finish(holder, started);
    assert_eq!(out.code, Some(70), "{out:?}");
    assert_eq!(out.stdout.trim(), "finished", "{out:?}");
    assert!(out.stderr.contains("--on-lost ignore"), "{out:?}");
}

#[test]
fn sigint_and_sigterm_are_forwarded_and_the_lock_released_after() {
    let server = RedisServer::start().unwrap();
    let dir = std::env::temp_dir().join(format!("locksmith-fwd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (sig, name) in [(Signal::SIGTERM, "TERM"), (Signal::SIGINT, "INT")] {
        // The command marks when its trap is set: a signal forwarded before
        // that (the lock is taken before the command starts) would end the
        // shell the default way, which is not what this test is about.
        let ready = dir.join(format!("ready-{name}"));
        let script = format!(
            "trap 'kill $!; echo got-{name}; exit 5' {name}; touch '{}'; sleep 20 & wait",
            ready.display()
        );
        let started = Instant::now();
        let holder = hold(&server, "fwd", &[], &["sh", "-c", &script]);
        wait_until(|| ready.exists(), "the command to set its trap");
        signal(&holder, sig);
        let out = finish(holder, started);
        assert_eq!(out.code, Some(5), "{out:?}");
        assert_eq!(out.stdout.trim(), format!("got-{name}"));
        assert!(!is_locked(&server, "fwd"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn missing_command_exits_127_and_releases() {
    let server = RedisServer::start().unwrap();
    let out = run(
        &server,
        &[
            "run",
            "--lock",
            "nocmd",
            "--",
            "/nonexistent/locksmith-test-cmd",
        ],
    );
    assert_eq!(out.code, Some(127), "{out:?}");
    assert!(
        out.stderr.contains("/nonexistent/locksmith-test-cmd"),
        "{out:?}"
    );
    wait_until(|| !is_locked(&server, "nocmd"), "the lock to be released");
}

#[test]
fn redis_url_falls_back_to_redis_url_env() {
    let server = RedisServer::start().unwrap();
    let mut cmd = locksmith(&server);
    cmd.env_remove("LOCKSMITH_REDIS_URL")
        .env("REDIS_URL", server.url())
        .args(["run", "--lock", "envurl", "--", "true"]);
    let out = finish(cmd.spawn().unwrap(), Instant::now());
    assert_eq!(out.code, Some(0), "{out:?}");
}

#[test]
fn a_signal_during_a_fair_wait_leaves_no_queue_entry_behind() {
    let server = RedisServer::start().unwrap();
    let mut holder = locksmith(&server);
    holder.args(["run", "--fair-lock", "fq", "--", "sleep", "20"]);
    let mut holder = holder.spawn().expect("spawn holder");
    wait_until(|| is_locked(&server, "fq"), "the fair lock to be taken");
    let queue_len = || {
        let mut conn = server.connection().unwrap();
        redis::cmd("LLEN")
            .arg("redisson_lock_queue:{fq}")
            .query::<i64>(&mut conn)
            .unwrap()
    };
    let mut waiter = locksmith(&server);
    waiter.args(["run", "--fair-lock", "fq", "--wait", "60s", "--", "true"]);
    let started = Instant::now();
    let waiter = waiter.spawn().expect("spawn waiter");
    wait_until(|| queue_len() == 1, "the waiter to queue");
    signal(&waiter, Signal::SIGTERM);
    let out = finish(waiter, started);
    assert_eq!(out.code, Some(128 + 15), "{out:?}");
    // The queue entry was withdrawn before the process exited (its
    // give-up time is a minute away).
    assert_eq!(queue_len(), 0, "the waiter's queue entry outlived it");
    signal(&holder, Signal::SIGTERM);
    let _ = wait_bounded(&mut holder, LIMIT);
}
