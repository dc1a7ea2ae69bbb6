//! Running the built `locksmith` binary against a testkit server, with a
//! bound on every wait so a hung child fails the test instead of CI.

#![allow(dead_code)] // each test file uses a different subset

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub use locksmith_testkit::RedisServer;

/// Upper bound on any one `locksmith` invocation in these tests.
pub const LIMIT: Duration = Duration::from_secs(30);

/// What a finished invocation left behind.
#[derive(Debug)]
pub struct Output {
    /// Exit code (None if killed by a signal).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// Wall time, for "did it wait at least" checks (never for speed).
    pub elapsed: Duration,
}

/// A `locksmith` command pointed at `server` through the environment, the
/// way a cron job would configure it.
pub fn locksmith(server: &RedisServer) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_locksmith"));
    cmd.env("LOCKSMITH_REDIS_URL", server.url())
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Runs `args` to completion (bounded by [`LIMIT`]).
pub fn run(server: &RedisServer, args: &[&str]) -> Output {
    let mut cmd = locksmith(server);
    cmd.args(args);
    finish(cmd.spawn().expect("spawn locksmith"), Instant::now())
}

/// Waits for a spawned invocation (bounded by [`LIMIT`]) and collects its
/// output.
pub fn finish(mut child: Child, started: Instant) -> Output {
    let status = wait_bounded(&mut child, LIMIT);
    let mut stdout = String::new();
    let mut stderr = String::new();
    child
        .stdout
        .take()
        .map(|mut s| s.read_to_string(&mut stdout));
    child
        .stderr
        .take()
        .map(|mut s| s.read_to_string(&mut stderr));
    Output {
        code: status.code(),
        stdout,
        stderr,
        elapsed: started.elapsed(),
    }
}

/// Waits for `child`, killing it and failing the test after `limit`.
pub fn wait_bounded(child: &mut Child, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("locksmith did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Starts `locksmith run --lock NAME <extra> -- CMD...` in the background
/// and returns once the lock is held.
pub fn hold(server: &RedisServer, name: &str, extra: &[&str], cmd: &[&str]) -> Child {
    let mut command = locksmith(server);
    command
        .args(["run", "--lock", name])
        .args(extra)
        .arg("--")
        .args(cmd);
    let mut child = command.spawn().expect("spawn locksmith");
    wait_while_running(
        &mut child,
        || is_locked(server, name),
        "the lock to be taken",
    );
    child
}

/// Polls `cond` until it holds, failing the test after [`LIMIT`] (starting
/// a process and connecting can take seconds on a loaded machine), or as
/// soon as `child` exits first, with what it printed.
pub fn wait_while_running(child: &mut Child, mut cond: impl FnMut() -> bool, what: &str) {
    let deadline = Instant::now() + LIMIT;
    while !cond() {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut stderr = String::new();
            child
                .stderr
                .take()
                .map(|mut s| s.read_to_string(&mut stderr));
            panic!("locksmith exited with {status} while waiting for {what}: {stderr}");
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How many clients listen on `channel` (`PUBSUB NUMSUB`): the waiters of
/// the object whose channel it is.
pub fn listeners(server: &RedisServer, channel: &str) -> u64 {
    let mut conn = server.connection().expect("connect");
    let (_, n): (String, u64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(&mut conn)
        .expect("PUBSUB NUMSUB");
    n
}

/// True while the lock key exists.
pub fn is_locked(server: &RedisServer, name: &str) -> bool {
    let mut conn = server.connection().expect("connect");
    redis::cmd("EXISTS")
        .arg(name)
        .query::<i64>(&mut conn)
        .expect("EXISTS")
        == 1
}

/// Polls `cond` until it holds, failing the test after [`LIMIT`] (a bound
/// for a loaded machine, not a speed check).
pub fn wait_until(mut cond: impl FnMut() -> bool, what: &str) {
    let deadline = Instant::now() + LIMIT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `sig` to a child process.
pub fn signal(child: &Child, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).expect("kill");
}

/// A command's gate, so that no step of a test races a fixed sleep: the
/// command marks when it runs and waits until the test opens the gate.
/// The files live in a directory of their own, removed on drop.
pub struct Gate {
    dir: std::path::PathBuf,
}

impl Gate {
    /// A new gate, closed.
    pub fn new() -> Gate {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("locksmith-gate-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("gate directory");
        Gate { dir }
    }

    /// A `sh -c` script: runs `first`, marks the command as running, then
    /// waits for the gate to open (or to be dropped: a test that failed
    /// first leaves no command waiting), then runs `last`.
    pub fn script(&self, first: &str, last: &str) -> String {
        let ready = self.dir.join("ready");
        let open = self.dir.join("open");
        format!(
            "{first}\ntouch '{}'\nwhile [ -d '{}' ] && [ ! -e '{}' ]; do sleep 0.05; done\n{last}",
            ready.display(),
            self.dir.display(),
            open.display()
        )
    }

    /// Waits (bounded by [`LIMIT`]) until the command runs; fails the test
    /// if `child` exits first.
    pub fn wait_running(&self, child: &mut Child) {
        let ready = self.dir.join("ready");
        wait_while_running(child, || ready.exists(), "its command to run");
    }

    /// Lets the command finish.
    pub fn open(&self) {
        std::fs::write(self.dir.join("open"), "").expect("open the gate");
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
