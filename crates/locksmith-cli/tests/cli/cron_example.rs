//! `crates/locksmith/examples/cron-job.sh`: a job guarded by `locksmith
//! run` runs once at a time, whichever host starts it.

use std::process::{Command, Stdio};
use std::time::Duration;

use locksmith_testkit::RedisServer;

fn job(server: &RedisServer, seconds: &str) -> Command {
    let mut cmd = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../locksmith/examples/cron-job.sh"
    ));
    cmd.env("LOCKSMITH", env!("CARGO_BIN_EXE_locksmith"))
        .env("LOCKSMITH_REDIS_URL", server.url())
        .env("JOB_SECONDS", seconds)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

#[test]
fn the_cron_job_runs_once_at_a_time() {
    let server = RedisServer::start().unwrap();
    // Long enough that the second run starts while the first holds, also
    // on a loaded machine.
    let first = job(&server, "10").spawn().unwrap();
    // Wait until the first run holds the lock.
    let mut conn = server.connection().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let held: bool = redis::cmd("EXISTS")
            .arg("cron:nightly-report")
            .query(&mut conn)
            .unwrap();
        if held {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the job never took its lock"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let second = job(&server, "0").output().unwrap();
    assert_eq!(second.status.code(), Some(75), "{second:?}");
    let first = first.wait_with_output().unwrap();
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(stdout.contains("with token "), "{stdout}");
    let again = job(&server, "0").output().unwrap();
    assert_eq!(again.status.code(), Some(0), "{again:?}");
}
