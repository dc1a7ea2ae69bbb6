//! The six-node cluster: reaches `cluster_state:ok`, routes keys to every
//! primary, and survives manual and automatic failovers.

use std::collections::BTreeMap;
use std::time::Duration;

use locksmith_testkit::RedisCluster;
use redis::cluster::ClusterClient;
use redis::AsyncCommands;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn client(cluster: &RedisCluster) -> ClusterClient {
    ClusterClient::builder(cluster.initial_nodes())
        .connection_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(3))
        .build()
        .unwrap()
}

/// One key per primary: `primary index -> key`.
fn key_per_primary(cluster: &RedisCluster, prefix: &str) -> BTreeMap<usize, String> {
    let primaries = cluster.primaries().unwrap();
    let mut keys = BTreeMap::new();
    for i in 0..1000 {
        let key = format!("{prefix}:{i}");
        keys.entry(cluster.node_for_key(&key).unwrap())
            .or_insert(key);
        if keys.len() == primaries.len() {
            break;
        }
    }
    assert_eq!(
        keys.keys().copied().collect::<Vec<_>>(),
        {
            let mut p = primaries.clone();
            p.sort();
            p
        },
        "found a key for every primary"
    );
    keys
}

fn get_direct(cluster: &RedisCluster, node: usize, key: &str) -> Option<String> {
    let mut conn = cluster.nodes()[node].connection().unwrap();
    redis::cmd("GET").arg(key).query(&mut conn).unwrap()
}

#[test]
fn cluster_is_ok_and_routes_keys_to_every_primary() {
    let cluster = RedisCluster::start().expect("start cluster");
    assert_eq!(cluster.len(), 6);
    for node in cluster.nodes() {
        let mut conn = node.connection().unwrap();
        let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut conn).unwrap();
        assert!(info.contains("cluster_state:ok"), "{info}");
        assert!(info.contains("cluster_slots_assigned:16384"), "{info}");
    }
    let primaries = cluster.primaries().unwrap();
    assert_eq!(primaries.len(), 3, "three primaries");
    for &p in &primaries {
        let r = cluster.replica_of(p).unwrap();
        assert!(!primaries.contains(&r), "replica {r} of {p} is no primary");
    }

    let keys = key_per_primary(&cluster, "route");
    let client = client(&cluster);
    runtime().block_on(async {
        let mut conn = client.get_async_connection().await.unwrap();
        for key in keys.values() {
            let _: () = conn.set(key, format!("v-{key}")).await.unwrap();
        }
        for key in keys.values() {
            let v: String = conn.get(key).await.unwrap();
            assert_eq!(v, format!("v-{key}"));
        }
    });
    // Each key lives on the primary that serves its slot.
    for (&node, key) in &keys {
        assert_eq!(get_direct(&cluster, node, key), Some(format!("v-{key}")));
    }
}

#[test]
fn manual_failover_promotes_the_replica_and_clients_follow() {
    let mut cluster = RedisCluster::start().expect("start cluster");
    let keys = key_per_primary(&cluster, "manual");
    let (&old, key) = keys.iter().next().unwrap();
    let key = key.clone();
    let client = client(&cluster);
    let rt = runtime();
    let mut conn = rt.block_on(async {
        let mut conn = client.get_async_connection().await.unwrap();
        let _: () = conn.set(&key, "before").await.unwrap();
        conn
    });

    let new = cluster.failover(old).expect("manual failover");
    assert_ne!(new, old);
    let primaries = cluster.primaries().unwrap();
    assert!(primaries.contains(&new) && !primaries.contains(&old));
    assert_eq!(cluster.replica_of(new).unwrap(), old, "old primary follows");
    assert_eq!(cluster.node_for_key(&key).unwrap(), new);

    // A manual failover loses nothing; the client follows the MOVED reply.
    rt.block_on(async {
        let v: String = conn.get(&key).await.unwrap();
        assert_eq!(v, "before");
        let _: () = conn.set(&key, "after").await.unwrap();
    });
    assert_eq!(get_direct(&cluster, new, &key), Some("after".into()));
}

#[test]
fn killed_primary_is_replaced_by_its_replica() {
    let mut cluster = RedisCluster::start().expect("start cluster");
    let keys = key_per_primary(&cluster, "kill");
    let (&old, key) = keys.iter().last().unwrap();
    let key = key.clone();

    let new = cluster.kill_primary(old).expect("automatic failover");
    assert_ne!(new, old);
    assert!(cluster.nodes()[old].pid().is_none());
    assert_eq!(cluster.node_for_key(&key).unwrap(), new);

    let client = client(&cluster);
    runtime().block_on(async {
        let mut conn = client.get_async_connection().await.unwrap();
        let _: () = conn.set(&key, "on the new primary").await.unwrap();
        let v: String = conn.get(&key).await.unwrap();
        assert_eq!(v, "on the new primary");
    });

    // The killed node comes back as a replica of the node that replaced it
    // (once the others tell it so: Redis 6.0 can take a few seconds after
    // the cluster is ok again).
    cluster.node(old).restart().unwrap();
    cluster.wait_ok(Duration::from_secs(45)).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let replica = loop {
        match cluster.replica_of(new) {
            Ok(replica) => break replica,
            Err(e) if std::time::Instant::now() > deadline => panic!("{e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    assert_eq!(replica, old);
}
