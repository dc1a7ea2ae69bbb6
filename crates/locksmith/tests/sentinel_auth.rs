//! Sentinels that require a password of their own, in front of data nodes
//! with an ACL user: the URL's credentials are the data nodes',
//! `ClientBuilder::sentinel_credentials` the Sentinels'. Without the
//! latter the Sentinels refuse the lookup.

use std::time::Duration;

use locksmith::Client;
use locksmith_testkit::SentinelGroup;

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
    for node in group.nodes() {
        acl(
            &node.addr(),
            &["app", "on", ">data-pass", "~*", "&*", "+@all"],
        );
    }
    // The Sentinels: a user of their own; the default user off, last.
    for addr in group.sentinel_addrs() {
        acl(
            &addr,
            &["watcher", "on", ">sentinel-pass", "allchannels", "+@all"],
        );
        acl(&addr, &["default", "off"]);
    }
    let url = format!(
        "redis+sentinel://app:data-pass@{}/{}",
        group.sentinel_addrs().join(","),
        group.master_name()
    );
    let client = Client::builder(&url)
        .sentinel_credentials(Some("watcher"), "sentinel-pass")
        .connect_timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("connect through password-protected Sentinels");
    let guard = client.lock("sentinel-auth").unwrap().lock().await.unwrap();
    guard.release().await.unwrap();

    // Without the Sentinels' credentials: refused, and said so.
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
    // sentinel_credentials on another topology is a mistake.
    let e = Client::builder(group.primary_url())
        .sentinel_credentials(None, "x")
        .build()
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(e.is_invalid_argument(), "{e}");
}
