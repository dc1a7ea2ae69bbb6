//! Holders in other processes: killed with SIGKILL, or paused with SIGSTOP
//! past their lease. The holder is this test binary re-run with a filter
//! and an environment variable (see `child_holder`).

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{client, eventually};
use locksmith::Client;
use locksmith_testkit::RedisServer;

const URL_ENV: &str = "LOCKSMITH_TEST_CHILD_URL";
const LEASE_ENV: &str = "LOCKSMITH_TEST_CHILD_LEASE_MS";
const LOCK: &str = "process-lock";

/// Runs only as a child: holds the lock, reports on stdout, waits for the
/// lost signal, then tries to release.
#[tokio::test]
#[ignore = "run by the other tests as a child process"]
async fn child_holder() {
    let Ok(url) = std::env::var(URL_ENV) else {
        return;
    };
    let lease: u64 = std::env::var(LEASE_ENV).unwrap().parse().unwrap();
    let client = Client::builder(url)
        .lease(Duration::from_millis(lease))
        .build()
        .await
        .unwrap();
    let guard = client.lock(LOCK).unwrap().lock().await.unwrap();
    println!("ACQUIRED {}", guard.fencing_token());
    tokio::select! {
        _ = guard.lost().wait() => println!("LOST"),
        _ = tokio::time::sleep(Duration::from_secs(60)) => println!("TIMEOUT"),
    }
    match guard.release().await {
        Ok(()) => println!("RELEASED"),
        Err(e) => println!("RELEASE-ERROR {:?}", e.kind()),
    }
}

struct Holder {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Holder {
    fn start(server: &RedisServer, lease: Duration) -> Holder {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "process::child_holder",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(URL_ENV, server.url())
            .env(LEASE_ENV, lease.as_millis().to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Holder { child, lines }
    }

    /// Waits for a line starting with `prefix` and returns the rest.
    fn expect(&self, prefix: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                // The test harness may print "test child_holder ... " first
                // on the same line.
                Ok(line) => {
                    if let Some(at) = line.find(prefix) {
                        return line[at + prefix.len()..].trim().to_string();
                    }
                }
                Err(_) => panic!("child never printed {prefix:?}"),
            }
        }
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_frees_the_lock_within_its_lease() {
    let server = RedisServer::start().unwrap();
    // The holder's watchdog must keep the lock until it is killed, also
    // through a stall of a second under load.
    let lease = Duration::from_secs(3);
    let holder = Holder::start(&server, lease);
    holder.expect("ACQUIRED", Duration::from_secs(20));
    let me = client(&server, lease).await;
    let lock = me.lock(LOCK).unwrap();
    assert!(lock.is_locked().await.unwrap());

    holder.signal("KILL");
    let killed_at = Instant::now();
    let guard = lock
        .try_lock_for(Duration::from_secs(15))
        .await
        .unwrap()
        .expect("the lock frees once the dead holder's lease runs out");
    // The lease was at most 3 s when the holder died; allow scheduling slack.
    assert!(
        killed_at.elapsed() < lease + Duration::from_secs(4),
        "took {:?}",
        killed_at.elapsed()
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_holder_loses_its_lease_learns_it_and_is_fenced_off() {
    let server = RedisServer::start().unwrap();
    let lease = Duration::from_millis(800);
    let holder = Holder::start(&server, lease);
    let paused_token: u64 = holder
        .expect("ACQUIRED", Duration::from_secs(20))
        .parse()
        .unwrap();

    holder.signal("STOP");
    // This side's own grant must outlast the checks below: a long lease.
    let me = client(&server, Duration::from_secs(30)).await;
    let lock = me.lock(LOCK).unwrap();
    let guard = lock
        .try_lock_for(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("the paused holder's lease runs out");
    assert!(
        guard.fencing_token() > paused_token,
        "a later grant has a larger fencing token"
    );

    holder.signal("CONT");
    holder.expect("LOST", Duration::from_secs(10));
    let release = holder.expect("RELEASE-ERROR", Duration::from_secs(10));
    assert_eq!(release, "NotHeld");
    assert!(
        lock.is_locked().await.unwrap(),
        "the resumed holder did not disturb the new grant"
    );
    guard.release().await.unwrap();
    assert!(
        eventually(Duration::from_secs(2), || async {
            !lock.is_locked().await.unwrap()
        })
        .await
    );
}
