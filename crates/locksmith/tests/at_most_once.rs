//! Calls that are not idempotent run at most once, whatever happens to the
//! connection: a semaphore's release and `add_permits`, a latch's
//! `count_down`. The reply of such a call is cut after the server ran it
//! (a FaultProxy in front of the slot's owner on a cluster resets the
//! connection as the reply comes back); the caller may hear an error, but
//! the server must have applied the call exactly once. redis-rs's cluster
//! connection resends a command after a dropped connection, so before
//! these calls went through a connection that never resends, a cut reply
//! added permits twice and counted a latch down twice.

use std::time::{Duration, Instant};

use locksmith::Client;
use locksmith_testkit::{FaultProxy, RedisCluster};

/// A cluster whose node serving `key` is reached through a proxy: the node
/// announces the proxy's port, so clients that learn the slot map connect
/// through it.
struct Proxied {
    cluster: RedisCluster,
    proxy: FaultProxy,
    node: usize,
}

fn proxied_cluster(key: &str) -> Proxied {
    let cluster = RedisCluster::start().unwrap();
    let node = cluster.node_for_key(key).unwrap();
    let proxy = FaultProxy::start(&cluster.nodes()[node].addr()).unwrap();
    let port = proxy.addr().rsplit_once(':').unwrap().1.to_owned();
    let mut conn = cluster.nodes()[node].connection().unwrap();
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("cluster-announce-port")
        .arg(&port)
        .exec(&mut conn)
        .unwrap();
    // Wait until every node's slot map names the proxy.
    let deadline = Instant::now() + Duration::from_secs(20);
    for other in cluster.nodes() {
        let mut c = other.connection().unwrap();
        loop {
            let nodes: String = redis::cmd("CLUSTER").arg("NODES").query(&mut c).unwrap();
            if nodes.contains(&format!(":{port}@")) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster never announced the proxy"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Proxied {
        cluster,
        proxy,
        node,
    }
}

impl Proxied {
    /// A client that seeds from the nodes not behind the proxy.
    async fn client(&self) -> Client {
        let seeds: Vec<String> = self
            .cluster
            .nodes()
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != self.node)
            .map(|(_, n)| n.addr())
            .collect();
        Client::builder(format!("redis+cluster://{}", seeds.join(",")))
            .replica_acks(0, Duration::from_millis(100))
            .build()
            .await
            .unwrap()
    }

    /// `GET key` on the owner itself, past the proxy.
    fn get(&self, key: &str) -> Option<i64> {
        let mut conn = self.cluster.nodes()[self.node].connection().unwrap();
        redis::cmd("GET").arg(key).query(&mut conn).unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_replies_never_apply_a_semaphore_or_latch_change_twice() {
    let name = "once:{slot}";
    let (setup, latch_name) = tokio::task::spawn_blocking(move || {
        let setup = proxied_cluster(name);
        // Latch names take no braces on a cluster: find a plain one that
        // the proxied node serves.
        let latch_name = (0..)
            .map(|i| format!("once-latch-{i}"))
            .find(|n| setup.cluster.node_for_key(n).unwrap() == setup.node)
            .unwrap();
        (setup, latch_name)
    })
    .await
    .unwrap();
    let latch_name = latch_name.as_str();
    let client = setup.client().await;

    let semaphore = client.semaphore(name).unwrap();
    assert!(semaphore.try_set_permits(5).await.unwrap());
    assert_eq!(setup.get(name), Some(5));

    // add_permits(1) whose reply is cut: applied once (6), not twice.
    setup.proxy.cut_reply_after(b"EVALSHA");
    let added = semaphore.add_permits(1).await;
    assert_eq!(setup.proxy.cuts(), 1, "the reply was cut");
    assert!(added.is_err(), "the outcome is unknown: {added:?}");
    assert_eq!(setup.get(name), Some(6), "add_permits ran exactly once");

    // release(2) likewise: 8, not 10.
    setup.proxy.cut_reply_after(b"EVALSHA");
    let released = semaphore.release(2).await;
    assert_eq!(setup.proxy.cuts(), 2);
    assert!(released.is_err(), "{released:?}");
    assert_eq!(setup.get(name), Some(8), "release ran exactly once");

    // A latch counted down under a cut reply: 2, not 1.
    let latch = client.count_down_latch(latch_name).unwrap();
    assert!(latch.try_set_count(3).await.unwrap());
    setup.proxy.cut_reply_after(b"EVALSHA");
    let down = latch.count_down().await;
    assert_eq!(setup.proxy.cuts(), 3);
    assert!(down.is_err(), "{down:?}");
    assert_eq!(
        setup.get(latch_name),
        Some(2),
        "count_down ran exactly once"
    );

    // The connection recovers: the next calls work and count once.
    let after = semaphore.add_permits(1).await;
    assert_eq!(after.as_ref().ok(), Some(&9), "{after:?}");
    assert_eq!(latch.count_down().await.unwrap(), 1);
}
