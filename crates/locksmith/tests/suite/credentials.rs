//! Rotating credentials: the password of the ACL user changes with `ACL
//! SETUSER` while a lock is held (its lease renewed by the watchdog) and a
//! waiter of another client waits on its pub/sub subscription; the
//! provider starts answering the new password; every connection of the
//! user is then killed. The hold survives (renewals reconnect with the new
//! password), the waiter's subscription comes back, the release wakes it,
//! and no call sees an error.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use locksmith::{Client, Credentials, CredentialsFuture, CredentialsProvider, ErrorKind};
use locksmith_testkit::RedisServer;

/// Answers the password it holds now; counts its calls.
#[derive(Clone, Default)]
struct Vault {
    password: Arc<Mutex<String>>,
    calls: Arc<Mutex<u32>>,
}

impl Vault {
    fn set(&self, password: &str) {
        *self.password.lock().unwrap() = password.to_owned();
    }
}

impl CredentialsProvider for Vault {
    fn credentials(&self) -> CredentialsFuture<'_> {
        *self.calls.lock().unwrap() += 1;
        let password = self.password.lock().unwrap().clone();
        Box::pin(async move {
            if password.is_empty() {
                return Err(locksmith::Error::InvalidArgument(
                    "the vault is sealed".into(),
                ));
            }
            Ok(Credentials::new(Some("app"), password))
        })
    }
}

/// A server whose default user is off (so no connection gets in without
/// the provider's credentials), with an admin for the test's own checks
/// and the user `app`.
fn server_with_user() -> RedisServer {
    let server = RedisServer::builder()
        .arg("--user")
        .arg("admin")
        .arg("on")
        .arg(">admin-pass")
        .arg("~*")
        .arg(common::all_channels())
        .arg("+@all")
        .arg("--user")
        .arg("default")
        .arg("off")
        .start()
        .unwrap();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("app")
        .arg("on")
        .arg(">first-pass")
        .arg("~*")
        .arg(common::all_channels())
        .arg("+@all")
        .query(&mut admin(&server))
        .unwrap();
    server
}

fn admin(server: &RedisServer) -> redis::Connection {
    redis::Client::open(format!("redis://admin:admin-pass@{}", server.addr()))
        .unwrap()
        .get_connection()
        .unwrap()
}

async fn client(server: &RedisServer, vault: &Vault) -> Client {
    // 3 s leases: renewed every second, and not lost to a stall under load
    // while the connections come back.
    Client::builder(server.url())
        .lease(Duration::from_secs(3))
        .credentials_provider(vault.clone(), Duration::from_millis(100))
        .build()
        .await
        .unwrap()
}

fn connections_of_app(server: &RedisServer) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut admin(server))
        .unwrap();
    common::clients_of(&list, "app").len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_password_keeps_holds_and_waiters() {
    let server = server_with_user();
    let vault = Vault::default();
    vault.set("first-pass");
    let holder_client = client(&server, &vault).await;
    let waiter_client = client(&server, &vault).await;

    let held = holder_client
        .lock("rotating")
        .unwrap()
        .lock()
        .await
        .unwrap();
    let waiter = {
        let lock = waiter_client.lock("rotating").unwrap();
        tokio::spawn(async move { lock.lock().await })
    };
    let channel = "redisson_lock__channel:{rotating}";
    let listeners = |server: &RedisServer| {
        let (_, n): (String, u64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query(&mut admin(server))
            .unwrap();
        n
    };
    assert!(
        common::eventually(Duration::from_secs(3), || async { listeners(&server) >= 1 }).await,
        "the waiter never subscribed"
    );

    // Rotate: the server takes only the new password from now on.
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("app")
        .arg("resetpass")
        .arg(">second-pass")
        .query(&mut admin(&server))
        .unwrap();
    vault.set("second-pass");
    tokio::time::sleep(Duration::from_millis(400)).await;
    // Every connection of the user goes; what reconnects must use the new
    // password (the old one is refused now).
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("USER")
        .arg("app")
        .query(&mut admin(&server))
        .unwrap();
    assert!(killed >= 2, "killed {killed}");

    // Longer than the lease: only renewals over reconnected connections
    // keep the hold.
    tokio::time::sleep(Duration::from_millis(4_000)).await;
    assert!(!held.is_lost(), "the hold was lost across the rotation");
    assert!(
        !waiter.is_finished(),
        "the waiter got a held lock: {waiter:?}"
    );
    assert!(
        common::eventually(Duration::from_secs(5), || async { listeners(&server) >= 1 }).await,
        "the waiter's subscription did not come back"
    );
    assert!(connections_of_app(&server) >= 2);

    held.release().await.expect("the release goes through");
    let got = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the release wakes the waiter")
        .unwrap()
        .expect("no error reaches the waiter");
    got.release().await.unwrap();
    assert!(
        *vault.calls.lock().unwrap() > 4,
        "the provider is asked on a schedule"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_fails_at_build_fails_the_build() {
    let server = server_with_user();
    let sealed = Vault::default();
    let e = Client::builder(server.url())
        .credentials_provider(sealed.clone(), Duration::from_secs(1))
        .build()
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(e.to_string().contains("sealed"), "{e}");
    // A wrong password from the provider is an authentication error.
    sealed.set("wrong");
    let e = Client::builder(server.url())
        .credentials_provider(sealed.clone(), Duration::from_secs(1))
        .build()
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
    // A refresh period of zero is refused.
    sealed.set("first-pass");
    let e = Client::builder(server.url())
        .credentials_provider(sealed, Duration::ZERO)
        .build()
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(e.is_invalid_argument(), "{e}");
}

/// A client built on one runtime and used on a later one keeps refreshing
/// its credentials: the refresh task, which ended with the first runtime,
/// starts again on the second (asking the provider at once), so a
/// password rotated meanwhile reaches the reconnecting connections.
#[test]
fn credentials_keep_rotating_on_a_later_runtime() {
    let server = server_with_user();
    let vault = Vault::default();
    vault.set("first-pass");
    let first = common::current_thread_runtime();
    let client = first.block_on(async {
        let client = client(&server, &vault).await;
        common::lock_and_release(&client, "rotate-later").await;
        client
    });
    drop(first);

    let second = common::current_thread_runtime();
    second.block_on(async {
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg("app")
            .arg("resetpass")
            .arg(">second-pass")
            .query(&mut admin(&server))
            .unwrap();
        vault.set("second-pass");
        let _: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("USER")
            .arg("app")
            .query(&mut admin(&server))
            .unwrap();
        // Past the refresh period: a running refresh task would have the
        // new password by now.
        tokio::time::sleep(Duration::from_millis(400)).await;
        // The first call on this runtime is a plain command, not an
        // acquire: it too starts the refresh again. (It may meet the killed
        // connection itself, which a plain command does not resend.)
        let _ = tokio::time::timeout(Duration::from_secs(10), client.ping()).await;
        // The refresh runs on this runtime beside the test: give it a few
        // seconds of turns on a loaded machine (without it, no ping ever
        // logs in again).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let pinged = tokio::time::timeout(Duration::from_secs(10), client.ping())
                .await
                .expect("no hang");
            match pinged {
                Ok(_) => break,
                Err(e) => assert!(
                    tokio::time::Instant::now() < deadline,
                    "the reconnect logs in with the rotated password: {e}"
                ),
            }
        }
        let guard = tokio::time::timeout(
            Duration::from_secs(10),
            client.lock("rotate-later").unwrap().lock(),
        )
        .await
        .expect("no hang")
        .expect("the reconnect logs in with the rotated password");
        guard.release().await.unwrap();
    });
}
