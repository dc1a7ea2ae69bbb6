//! The `locksmith` CLI beside the real Redisson (the Java peer of
//! `interop/redisson`, Redisson 4.x): a Java service and a shell job share
//! a lock, a semaphore and a latch, each side's waiter let go by the other
//! side.

use crate::common;

use std::time::{Duration, Instant};

use common::{finish, hold, locksmith, run, RedisServer};
use locksmith_testkit::RedissonPeer;

#[test]
fn the_cli_and_redisson_share_locks_semaphores_and_latches() {
    let server = RedisServer::start().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let java = rt
        .block_on(RedissonPeer::start(&["--url", &server.url()]))
        .expect("start the Redisson peer (needs Java 17 and Maven; scripts/setup installs them)");
    let call = |request: &str| {
        let answer = rt.block_on(java.call(request)).unwrap();
        answer
            .ok_value()
            .unwrap_or_else(|e| panic!("{request}: {e}"))
            .to_owned()
    };

    // A Java hold keeps `locksmith run --lock` waiting; the Java unlock
    // lets it run.
    call("lock lock job 1 -1");
    let started = Instant::now();
    let mut waiting = locksmith(&server)
        .args(["run", "--lock", "job", "--", "true"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        waiting.try_wait().unwrap().is_none(),
        "the CLI waits for Java"
    );
    call("unlock lock job 1");
    let ran = finish(waiting, started);
    assert_eq!(ran.code, Some(0), "{ran:?}");

    // A CLI hold keeps a Java waiter waiting; the CLI's release at its
    // command's end lets it in.
    let gate = common::Gate::new();
    let script = gate.script("", "");
    let mut holding = hold(&server, "job", &[], &["sh", "-c", &script]);
    let java_waiter = rt.block_on(java.send("lock lock job 2 -1")).unwrap();
    // The CLI's command ends once the Java waiter waits.
    common::wait_until(
        || common::listeners(&server, "redisson_lock__channel:{job}") >= 1,
        "the Java waiter to wait",
    );
    gate.open();
    let status = common::wait_bounded(&mut holding, Duration::from_secs(30));
    assert!(status.success());
    let released = tokio::time::Instant::now();
    let granted = rt
        .block_on(RedissonPeer::answer(
            java_waiter,
            Duration::from_secs(10),
            "lock",
        ))
        .expect("the Java waiter is let in by the CLI's release");
    granted.ok_value().unwrap();
    assert!(
        granted.at.saturating_duration_since(released) < Duration::from_secs(2),
        "{:?}",
        granted.at.saturating_duration_since(released)
    );
    call("unlock lock job 2");

    // A semaphore whose only permit Java holds.
    assert_eq!(call("sem-trysetpermits encoders 1"), "true");
    call("sem-acquire encoders 1");
    let started = Instant::now();
    let mut waiting = locksmith(&server)
        .args([
            "run",
            "--semaphore",
            "encoders",
            "--permits",
            "1",
            "--",
            "true",
        ])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        waiting.try_wait().unwrap().is_none(),
        "the CLI waits for the permit"
    );
    call("sem-release encoders 1");
    let ran = finish(waiting, started);
    assert_eq!(ran.code, Some(0), "{ran:?}");
    assert_eq!(call("sem-available encoders"), "1", "the permit is back");

    // A latch: the CLI waits on Java's count-down, and Java on the CLI's.
    assert_eq!(call("latch-trysetcount shards 1"), "true");
    let started = Instant::now();
    let waiting = locksmith(&server)
        .args(["latch", "shards", "wait", "--timeout", "20s"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    call("latch-countdown shards");
    let opened = finish(waiting, started);
    assert_eq!(opened.code, Some(0), "{opened:?}");
    let set = run(&server, &["latch", "loaded", "set", "1"]);
    assert_eq!(set.code, Some(0), "{set:?}");
    let java_waiter = rt.block_on(java.send("latch-await loaded 10000")).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let down = run(&server, &["latch", "loaded", "count-down"]);
    assert_eq!(down.code, Some(0), "{down:?}");
    let opened = rt
        .block_on(RedissonPeer::answer(
            java_waiter,
            Duration::from_secs(10),
            "latch-await",
        ))
        .unwrap();
    assert_eq!(
        opened.ok_value().unwrap(),
        "true",
        "Java saw the latch open"
    );
}
