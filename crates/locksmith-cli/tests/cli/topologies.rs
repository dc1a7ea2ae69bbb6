//! `locksmith run`, `status` and `unlock` against a Sentinel-managed
//! primary and a Redis Cluster, through the built binary and the URL forms
//! of docs/cli.md.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Instant;

use common::{finish, wait_until, LIMIT};
use locksmith_testkit::{RedisCluster, SentinelGroup};

fn locksmith(url: &str, args: &[&str]) -> common::Output {
    let child = Command::new(env!("CARGO_BIN_EXE_locksmith"))
        .arg("--redis")
        .arg(url)
        .args(args)
        .env_remove("LOCKSMITH_REDIS_URL")
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn locksmith");
    finish(child, Instant::now())
}

fn status(url: &str, name: &str) -> serde_json::Value {
    let out = locksmith(url, &["status", name, "--json"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("bad JSON ({e}): {out:?}"))
}

/// The same session of commands on any deployment.
fn every_command_works(url: &str) {
    let script = r#"echo "$LOCKSMITH_FENCING_TOKEN""#;
    let first = locksmith(url, &["run", "--lock", "nightly", "--", "sh", "-c", script]);
    assert_eq!(first.code, Some(0), "{first:?}");
    let second = locksmith(url, &["run", "--lock", "nightly", "--", "sh", "-c", script]);
    let token = |o: &common::Output| o.stdout.trim().parse::<u64>().expect("token");
    assert!(token(&second) > token(&first), "{first:?} {second:?}");

    let holder = Command::new(env!("CARGO_BIN_EXE_locksmith"))
        .args([
            "--redis", url, "run", "--lock", "report", "--", "sleep", "20",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn holder");
    wait_until(
        || status(url, "report")["locked"] == true,
        "the lock to be taken",
    );
    let held = status(url, "report");
    assert_eq!(held["holders"].as_array().unwrap().len(), 1, "{held}");
    let busy = locksmith(
        url,
        &["run", "--lock", "report", "--wait", "0", "--", "true"],
    );
    assert_eq!(busy.code, Some(75), "{busy:?}");
    let out = locksmith(url, &["unlock", "--force", "report"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let out = finish(holder, Instant::now());
    assert_eq!(
        out.code,
        Some(70),
        "the holder learns it lost the lock: {out:?}"
    );
    assert_eq!(status(url, "report")["locked"], false);
    let _ = LIMIT;
}

#[test]
fn run_status_and_unlock_work_behind_sentinel() {
    let group = SentinelGroup::start().unwrap();
    let url = format!(
        "redis+sentinel://{}/{}",
        group.sentinel_addrs().join(","),
        group.master_name()
    );
    every_command_works(&url);
}

#[test]
fn run_status_and_unlock_work_on_a_cluster() {
    let cluster = RedisCluster::start().unwrap();
    let url = format!("redis+cluster://{}", cluster.addrs().join(","));
    every_command_works(&url);
    // What the deployment lacks is said on stderr: sharded pub/sub here,
    // for a user without it (before Redis 7.0, for anyone: the servers
    // have none, nor scripts that reach several slots).
    let redis6 = locksmith_testkit::server_id() == "redis6";
    let user_url = if redis6 {
        url.clone()
    } else {
        for node in cluster.nodes() {
            redis::cmd("ACL")
                .arg("SETUSER")
                .arg("app")
                .arg("on")
                .arg(">app-pass")
                .arg("~*")
                .arg("&*")
                .arg("+@all")
                .arg(
                    &[
                        "-spublish",
                        "-ssubscribe",
                        "-sunsubscribe",
                        "-pubsub|shardnumsub",
                    ][..],
                )
                .exec(&mut node.connection().unwrap())
                .unwrap();
        }
        format!("redis+cluster://app:app-pass@{}", cluster.addrs().join(","))
    };
    let out = locksmith(&user_url, &["status", "x"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stderr
            .contains("locksmith: note: release notifications use classic pub/sub"),
        "{out:?}"
    );
    assert_eq!(
        out.stderr.contains("batched calls carry one slot each"),
        redis6,
        "{out:?}"
    );
    // `run` too, before CMD runs.
    let out = locksmith(&user_url, &["run", "--lock", "noted", "--", "true"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(
        out.stderr
            .contains("locksmith: note: release notifications use classic pub/sub"),
        "{out:?}"
    );
    // A malformed topology URL is a usage error, not a hang.
    let out = locksmith("redis+cluster://", &["status", "x"]);
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(out.stderr.contains("host:port"), "{out:?}");
}
