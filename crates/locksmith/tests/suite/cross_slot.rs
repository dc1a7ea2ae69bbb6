//! Calls that carry several slots' requests on a cluster (one script call
//! per node, flagged `allow-cross-slot-keys`): Redis checks such a script
//! up front, and a primary over `maxmemory` refuses it whole (`OOM`). The
//! requests must then go again as calls of their own slot, where those
//! that write nothing Redis refuses under `maxmemory` (a final release:
//! `DEL`, `PUBLISH`) still run.

use crate::common;

use std::time::Duration;

use locksmith::Client;
use locksmith_testkit::RedisCluster;

/// Locks on one primary, each in a slot of its own.
const LOCKS: usize = 24;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_of_several_slots_go_through_on_a_primary_over_maxmemory() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start().expect("a cluster"))
        .await
        .unwrap();
    let client = Client::builder(common::cluster_url(&cluster))
        .replica_acks(0, Duration::from_millis(100))
        .build()
        .await
        .expect("connect");
    let home = cluster.node_for_key("{oom0}").unwrap();
    let tags: Vec<String> = (0..2000)
        .map(|i| format!("oom{i}"))
        .filter(|tag| cluster.node_for_key(&format!("{{{tag}}}")).unwrap() == home)
        .take(LOCKS)
        .collect();
    assert_eq!(tags.len(), LOCKS, "slots on one primary");
    let mut guards = Vec::new();
    for tag in &tags {
        let lock = client.lock(format!("{{{tag}}}:lock")).unwrap();
        guards.push(lock.lock().await.expect("acquired"));
    }
    // The primary is over maxmemory from now on: it refuses commands that
    // may grow memory, and flagged scripts that may write, up front.
    let mut node = redis::Client::open(cluster.nodes()[home].url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let set = |value: &'static str| {
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("SET").arg("maxmemory").arg(value);
        cmd
    };
    let _: () = set("1").query_async(&mut node).await.unwrap();
    // Released all at once: after the first, they queue and travel
    // together, several slots in one call.
    let released =
        futures_util::future::join_all(guards.into_iter().map(|guard| guard.release())).await;
    let _: () = set("0").query_async(&mut node).await.unwrap();
    for (tag, result) in tags.iter().zip(released) {
        assert!(
            result.is_ok(),
            "release of {tag} on a primary over maxmemory: {result:?}"
        );
    }
    for tag in &tags {
        let held: bool = redis::cmd("EXISTS")
            .arg(format!("{{{tag}}}:lock"))
            .query_async(&mut node)
            .await
            .unwrap();
        assert!(!held, "{tag} is still held on the server");
    }
    client.close().await.unwrap();
}
