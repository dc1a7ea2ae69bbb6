//! Sentinels that require a password of their own, in front of data nodes
//! with an ACL user: the URL's credentials are the data nodes',
//! `ClientBuilder::sentinel_credentials` the Sentinels'. Without the
//! latter the Sentinels refuse the lookup.

use crate::common;
use std::time::Duration;

use locksmith::Client;
use locksmith_testkit::SentinelGroup;

/// `SENTINEL SET <service> option value` on every Sentinel of `group`.
fn sentinel_set(group: &SentinelGroup, option: &str, value: &str) {
    for addr in group.sentinel_addrs() {
        let _: () = redis::cmd("SENTINEL")
            .arg("SET")
            .arg(group.master_name())
            .arg(option)
            .arg(value)
            .query(
                &mut redis::Client::open(format!("redis://{addr}"))
                    .unwrap()
                    .get_connection()
                    .unwrap(),
            )
            .unwrap();
    }
}

fn acl(addr: &str, args: &[&str]) {
    let mut conn = redis::Client::open(format!("redis://{addr}"))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(args)
        .query(&mut conn)
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_and_data_nodes_take_their_own_credentials() {
    let group = tokio::task::block_in_place(SentinelGroup::start).expect("a Sentinel group");
    // The Sentinels monitor the data nodes as `app` from now on; then the
    // data nodes' default user goes, so only `app` gets in there.
    sentinel_set(&group, "auth-user", "app");
    sentinel_set(&group, "auth-pass", "data-pass");
    for node in group.nodes() {
        acl(
            &node.addr(),
            &[
                "app",
                "on",
                ">data-pass",
                "~*",
                common::all_channels(),
                "+@all",
            ],
        );
    }
    for node in group.nodes() {
        acl(&node.addr(), &["default", "off"]);
    }
    // The Sentinels: a user of their own; the default user off, last.
    // Sentinels take ACL users from Redis 6.2: before that they keep
    // answering the default user, and the data nodes' part is what is
    // checked.
    let sentinel_acl = common::has_7_0();
    if sentinel_acl {
        for addr in group.sentinel_addrs() {
            acl(
                &addr,
                &["watcher", "on", ">sentinel-pass", "allchannels", "+@all"],
            );
            acl(&addr, &["default", "off"]);
        }
    }
    let with_sentinel_credentials = |builder: locksmith::ClientBuilder| {
        if sentinel_acl {
            builder.sentinel_credentials(Some("watcher"), "sentinel-pass")
        } else {
            builder
        }
    };
    let url = format!(
        "redis+sentinel://app:data-pass@{}/{}",
        group.sentinel_addrs().join(","),
        group.master_name()
    );
    let client = with_sentinel_credentials(Client::builder(&url))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("connect through password-protected Sentinels");
    common::lock_and_release(&client, "sentinel-auth").await;
    // The same through the application's own Sentinel configuration: the
    // Sentinels' credentials in their URLs, the data nodes' in the closure.
    let sentinels: Vec<String> = group
        .sentinel_addrs()
        .iter()
        .map(|a| {
            if sentinel_acl {
                format!("redis://watcher:sentinel-pass@{a}")
            } else {
                format!("redis://{a}")
            }
        })
        .collect();
    let own = locksmith::ClientBuilder::from_sentinel(sentinels, group.master_name(), |b| {
        b.set_client_to_redis_username("app")
            .set_client_to_redis_password("data-pass")
    })
    .connect_timeout(Duration::from_secs(2))
    .build()
    .await
    .expect("the Sentinels' credentials come from their URLs");
    common::lock_and_release(&own, "sentinel-auth-own").await;
    // Without the data nodes' credentials the Sentinels still answer, the
    // primary does not.
    let bare = format!(
        "redis+sentinel://{}/{}",
        group.sentinel_addrs().join(","),
        group.master_name()
    );
    let e = with_sentinel_credentials(Client::builder(&bare))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(
        e.to_string().to_lowercase().contains("auth"),
        "the data nodes refuse the default user: {e}"
    );

    // Without the Sentinels' credentials: refused, and said so.
    if sentinel_acl {
        let e = Client::builder(&url)
            .connect_timeout(Duration::from_secs(2))
            .build()
            .await
            .map(|_| ())
            .unwrap_err();
        assert!(
            e.to_string().contains("NOAUTH") || e.to_string().contains("auth"),
            "{e}"
        );
    }
    // sentinel_credentials on another topology is a mistake.
    let e = Client::builder(group.primary_url())
        .sentinel_credentials(None, "x")
        .build()
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(e.is_invalid_argument(), "{e}");
}

/// Answers the password it holds now.
#[derive(Clone, Default)]
struct Vault(std::sync::Arc<std::sync::Mutex<String>>);

impl locksmith::CredentialsProvider for Vault {
    fn credentials(&self) -> locksmith::CredentialsFuture<'_> {
        let password = self.0.lock().unwrap().clone();
        Box::pin(async move { Ok(locksmith::Credentials::new(Some("app"), password)) })
    }
}

/// Rotating credentials behind Sentinel: the data nodes' password changes
/// while a lock is held and a waiter of another client waits, and every
/// connection of the user is killed. The pub/sub connection is reopened
/// through a fresh lookup with the new password (the Sentinels' lookup
/// checks the primary's role with the data nodes' credentials).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_data_node_credentials_behind_sentinel() {
    let group = tokio::task::block_in_place(SentinelGroup::start).expect("a Sentinel group");
    sentinel_set(&group, "auth-user", "app");
    sentinel_set(&group, "auth-pass", "pass-1");
    for node in group.nodes() {
        acl(
            &node.addr(),
            &[
                "app",
                "on",
                ">pass-1",
                "~*",
                common::all_channels(),
                "+@all",
            ],
        );
    }
    for node in group.nodes() {
        acl(&node.addr(), &["default", "off"]);
    }
    let primary = group.primary_addr();
    let as_app = |password: &str| {
        redis::Client::open(format!("redis://app:{password}@{primary}"))
            .unwrap()
            .get_connection()
            .unwrap()
    };
    let vault = Vault::default();
    *vault.0.lock().unwrap() = "pass-1".into();
    let url = format!(
        "redis+sentinel://{}/{}",
        group.sentinel_addrs().join(","),
        group.master_name()
    );
    let connect = || {
        Client::builder(&url)
            .lease(Duration::from_secs(3))
            .replica_acks(0, Duration::from_millis(100))
            .credentials_provider(vault.clone(), Duration::from_millis(100))
            .build()
    };
    let holder = connect().await.unwrap();
    let other = connect().await.unwrap();
    let held = holder.lock("rotating").unwrap().lock().await.unwrap();
    let waiter = {
        let lock = other.lock("rotating").unwrap();
        tokio::spawn(async move { lock.lock().await })
    };
    let listeners = |password: &'static str| {
        let mut conn = as_app(password);
        let (_, n): (String, u64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg("redisson_lock__channel:{rotating}")
            .query(&mut conn)
            .unwrap();
        n
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while listeners("pass-1") == 0 {
        assert!(std::time::Instant::now() < deadline, "never subscribed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Rotate on every data node and in the Sentinels, then in the vault.
    for node in group.nodes() {
        let mut conn = redis::Client::open(format!("redis://app:pass-1@{}", node.addr()))
            .unwrap()
            .get_connection()
            .unwrap();
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(&["app", "resetpass", ">pass-2"])
            .query(&mut conn)
            .unwrap();
    }
    sentinel_set(&group, "auth-pass", "pass-2");
    *vault.0.lock().unwrap() = "pass-2".into();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("USER")
        .arg("app")
        .query(&mut as_app("pass-2"))
        .unwrap();
    // Longer than the lease: only renewals over reconnected connections
    // keep the hold.
    tokio::time::sleep(Duration::from_millis(4_000)).await;
    assert!(!held.is_lost(), "the hold was lost across the rotation");
    let deadline = std::time::Instant::now() + Duration::from_secs(8);
    while listeners("pass-2") == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the waiter's subscription did not come back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    held.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the release wakes the waiter")
        .unwrap()
        .expect("no error reaches the waiter");
    got.release().await.unwrap();
}
