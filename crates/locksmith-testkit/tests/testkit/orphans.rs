//! No `redis-server` outlives the test process that started it, however
//! that process ends: abort (no destructors), `exit` (no destructors of
//! locals) or a panic (destructors run while unwinding).
//!
//! The parent tests re-run this test binary with a filter that selects only
//! `spawner`, which starts servers, records their process ids, and then ends
//! the process the way the parent asked. After the child exits, the parent
//! checks that every recorded server is gone.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use locksmith_testkit::{RedisNodes, RedisServer};

/// Set only in the re-run child: `<how>:<file for the pids>`.
const CHILD_ENV: &str = "LOCKSMITH_TESTKIT_ORPHAN_CHILD";

/// Servers the spawner starts: a group of two nodes and one single server.
const SERVERS: usize = 3;

/// Not a test of its own: a no-op unless run as the child of one below.
#[test]
fn spawner() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (how, pid_file) = spec.split_once(':').expect("<how>:<pid file>");
    let nodes = RedisNodes::start(2).unwrap();
    let single = RedisServer::start().unwrap();
    let lines: String = nodes
        .iter()
        .chain([&single])
        .map(|s| format!("{} {}\n", s.pid().unwrap(), s.port()))
        .collect();
    // Write then rename, so the parent never reads half a file.
    let tmp = format!("{pid_file}.tmp");
    std::fs::write(&tmp, lines).unwrap();
    std::fs::rename(&tmp, pid_file).unwrap();
    match how {
        "abort" => std::process::abort(),
        "exit" => std::process::exit(3),
        "panic" => panic!("spawner panics on purpose"),
        other => panic!("unknown way to end: {other}"),
    }
}

#[test]
fn no_server_outlives_an_aborted_process() {
    run_child_and_check("abort");
}

#[test]
fn no_server_outlives_an_exiting_process() {
    run_child_and_check("exit");
}

#[test]
fn no_server_outlives_a_panicking_test() {
    run_child_and_check("panic");
}

fn run_child_and_check(how: &str) {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pids");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "orphans::spawner",
            "--exact",
            "--test-threads",
            "1",
            "--nocapture",
        ])
        .env(CHILD_ENV, format!("{how}:{}", pid_file.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the {how} child did not finish in time");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        !status.success(),
        "the {how} child ends in failure: {status}"
    );

    let servers = read_pids(&pid_file);
    assert_eq!(servers.len(), SERVERS, "the child recorded all its servers");
    // Checked by pid, not by port: another test may already have been
    // given the freed port.
    for &(pid, port) in &servers {
        // The kernel delivers the parent-death signal at once, but the
        // process may take a moment to die.
        let gone = (0..500).any(|_| {
            let gone = !is_redis_alive(pid, port);
            if !gone {
                std::thread::sleep(Duration::from_millis(20));
            }
            gone
        });
        assert!(
            gone,
            "redis-server pid {pid} (port {port}) outlived its {how} parent"
        );
    }
}

fn read_pids(path: &Path) -> Vec<(u32, u16)> {
    let text = std::fs::read_to_string(path).expect("the child wrote its pids");
    text.lines()
        .map(|line| {
            let (pid, port) = line.split_once(' ').unwrap();
            (pid.parse().unwrap(), port.parse().unwrap())
        })
        .collect()
}

/// True while `pid` is a live (not zombie) `redis-server` on `port`. The
/// command line check guards against the pid being reused by another
/// process; a zombie is dead, just not yet reaped by its new parent.
fn is_redis_alive(pid: u32, port: u16) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    if matches!(state, Some("Z" | "X") | None) {
        return false;
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let cmdline = String::from_utf8_lossy(&cmdline);
    cmdline.contains("redis-server") && cmdline.contains(&port.to_string())
}
