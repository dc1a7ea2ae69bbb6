//! The CLI against a TLS server with an ACL user, as a user would run it:
//! redis-cli's flag names (`--cacert`, `--cert`, `--key`, `--user`,
//! `--pass`, `--tls`, `--insecure`) and their environment variables; a
//! wrong password exits 77, a certificate that does not verify 69; `list`
//! scans every primary of a TLS cluster over TLS.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{finish, Output};
use locksmith_testkit::{RedisCluster, RedisServer, TlsFiles};

/// A TLS server whose default user is off and whose user `app` may do
/// everything.
fn acl_server(files: &TlsFiles, mutual: bool) -> RedisServer {
    RedisServer::builder()
        .tls(files, mutual)
        .arg("--user")
        .arg("app")
        .arg("on")
        .arg(">s3cret")
        .arg("~*")
        // Channel rules arrived in Redis 6.2 (before, every user has every
        // channel): there, a rule that changes nothing.
        .arg(if locksmith_testkit::server_id() == "redis6" {
            "~*"
        } else {
            "&*"
        })
        .arg("+@all")
        .arg("--user")
        .arg("default")
        .arg("off")
        .start()
        .unwrap()
}

/// `locksmith` with no Redis settings from the test's environment.
fn bare() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_locksmith"));
    for var in [
        "LOCKSMITH_REDIS_URL",
        "REDIS_URL",
        "LOCKSMITH_TLS",
        "LOCKSMITH_CACERT",
        "LOCKSMITH_CERT",
        "LOCKSMITH_KEY",
        "LOCKSMITH_INSECURE",
        "LOCKSMITH_USER",
        "LOCKSMITH_PASS",
    ] {
        cmd.env_remove(var);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn done(mut cmd: Command) -> Output {
    finish(cmd.spawn().expect("spawn locksmith"), Instant::now())
}

#[test]
fn flags_and_environment_reach_a_tls_server_as_an_acl_user() {
    let files = TlsFiles::generate().unwrap();
    let server = acl_server(&files, true);
    let tls_port = server.tls_port().unwrap().to_string();
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let ca = files.ca_cert().display().to_string();
    let (cert, key) = files.client_cert();
    let (cert, key) = (cert.display().to_string(), key.display().to_string());

    // redis-cli style flags: run a command under a lock.
    let mut cmd = bare();
    cmd.args([
        "--redis", &url, "--cacert", &ca, "--cert", &cert, "--key", &key,
    ])
    .args(["--user", "app", "--pass", "s3cret"])
    .args([
        "run",
        "--lock",
        "cli-tls",
        "--",
        "sh",
        "-c",
        "echo $LOCKSMITH_FENCING_TOKEN",
    ]);
    let out = done(cmd);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(out.stdout.trim().parse::<u64>().is_ok(), "{out:?}");

    // The same through environment variables, and --tls on a plain URL.
    let mut cmd = bare();
    cmd.env(
        "LOCKSMITH_REDIS_URL",
        format!("redis://127.0.0.1:{tls_port}"),
    )
    .env("LOCKSMITH_TLS", "true")
    .env("LOCKSMITH_CACERT", &ca)
    .env("LOCKSMITH_CERT", &cert)
    .env("LOCKSMITH_KEY", &key)
    .env("LOCKSMITH_USER", "app")
    .env("LOCKSMITH_PASS", "s3cret")
    .args(["latch", "latch-tls", "set", "2"]);
    let out = done(cmd);
    assert_eq!(out.code, Some(0), "{out:?}");
    let mut cmd = bare();
    cmd.env("LOCKSMITH_REDIS_URL", &url)
        .env("LOCKSMITH_CACERT", &ca)
        .env("LOCKSMITH_CERT", &cert)
        .env("LOCKSMITH_KEY", &key)
        .env("LOCKSMITH_USER", "app")
        .env("LOCKSMITH_PASS", "s3cret")
        .args(["latch", "latch-tls", "count-down"]);
    let out = done(cmd);
    assert_eq!(
        (out.code, out.stdout.trim()),
        (Some(0), "1"),
        "the latch set over TLS counts down: {out:?}"
    );

    // A wrong password: exit 77, the password not echoed.
    let mut cmd = bare();
    cmd.args([
        "--redis", &url, "--cacert", &ca, "--cert", &cert, "--key", &key,
    ])
    .env("LOCKSMITH_USER", "app")
    .env("LOCKSMITH_PASS", "not-it")
    .args(["status", "cli-tls"]);
    let out = done(cmd);
    assert_eq!(out.code, Some(77), "{out:?}");
    assert!(!out.stderr.contains("not-it"), "{out:?}");

    // Without the CA the server's certificate does not verify: exit 69.
    let mut cmd = bare();
    cmd.args(["--redis", &url, "--cert", &cert, "--key", &key])
        .args(["--user", "app", "--pass", "s3cret", "status", "cli-tls"]);
    let out = done(cmd);
    assert_eq!(out.code, Some(69), "{out:?}");
    assert!(out.stderr.contains("certificate"), "{out:?}");

    // --insecure skips the check (and still presents the certificate).
    let mut cmd = bare();
    cmd.args([
        "--redis",
        &url,
        "--insecure",
        "--cert",
        &cert,
        "--key",
        &key,
    ])
    .args(["--user", "app", "--pass", "s3cret", "status", "cli-tls"]);
    let out = done(cmd);
    assert_eq!(out.code, Some(0), "{out:?}");

    // --cert without --key is a usage error.
    let mut cmd = bare();
    cmd.args(["--redis", &url, "--cert", &cert, "status", "cli-tls"]);
    let out = done(cmd);
    assert_eq!(out.code, Some(64), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_scans_every_primary_of_a_tls_cluster() {
    let files = TlsFiles::generate().unwrap();
    let cluster = tokio::task::block_in_place(|| RedisCluster::start_tls(&files)).unwrap();
    let url = format!("rediss+cluster://{}", cluster.tls_addrs().join(","));
    // Connecting to six TLS nodes (twice: two cluster connections) takes
    // 0.2 s on an idle machine; under the full suite's load one CI run saw
    // it pass the default bound (twice 5 s). Room for both connects here.
    let client = locksmith::Client::builder(&url)
        .tls_ca_file(files.ca_cert())
        .connect_timeout(Duration::from_secs(15))
        .build()
        .await
        .unwrap();
    let mut guards = Vec::new();
    for name in ["tls-list-a", "tls-list-b", "tls-list-c", "tls-list-d"] {
        guards.push(client.lock(name).unwrap().lock().await.unwrap());
    }
    let ca = files.ca_cert().display().to_string();
    let mut cmd = bare();
    cmd.args(["--redis", &url, "--cacert", &ca, "--connect-timeout", "10s"])
        .args(["list", "--json"]);
    let out = tokio::task::block_in_place(|| done(cmd));
    assert_eq!(out.code, Some(0), "{out:?}");
    let objects: Vec<serde_json::Value> = serde_json::from_str(&out.stdout).unwrap();
    for name in ["tls-list-a", "tls-list-b", "tls-list-c", "tls-list-d"] {
        assert!(
            objects.iter().any(|o| o["name"] == name),
            "{name} not listed: {objects:?}"
        );
    }
    for g in guards {
        g.release().await.unwrap();
    }
}

#[test]
fn key_prefix_puts_every_name_under_the_prefix() {
    let server = RedisServer::start().unwrap();
    let mut cmd = bare();
    cmd.args(["--redis", &server.url(), "--key-prefix", "app1:"])
        .args(["latch", "gate", "set", "2"]);
    let out = done(cmd);
    assert_eq!(out.code, Some(0), "{out:?}");
    let mut cmd = bare();
    cmd.env("LOCKSMITH_REDIS_URL", server.url())
        .env("LOCKSMITH_KEY_PREFIX", "app1:")
        .args(["latch", "gate", "count-down"]);
    let out = done(cmd);
    assert_eq!((out.code, out.stdout.trim()), (Some(0), "1"), "{out:?}");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.connection().unwrap())
        .unwrap();
    assert_eq!(keys, vec!["app1:gate".to_owned()]);
}
