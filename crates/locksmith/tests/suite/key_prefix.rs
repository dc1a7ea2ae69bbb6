//! `ClientBuilder::key_prefix`: two applications share one Redis without
//! their names meeting; every key and channel of every primitive carries
//! the prefix (in front, or inside the `{…}` hash tag of an auxiliary
//! key), and on a cluster a name's own hash tag stays its slot.

use crate::common;

use std::time::Duration;

use locksmith::{Client, ErrorKind, RedlockNodes};
use locksmith_testkit::{RedisCluster, RedisServer};

async fn prefixed(url: &str, prefix: &str) -> Client {
    Client::builder(url)
        .key_prefix(prefix)
        .lease(Duration::from_secs(5))
        .build()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_prefixes_never_share_a_key() {
    let server = RedisServer::start().unwrap();
    let a = prefixed(&server.url(), "app1:").await;
    let b = prefixed(&server.url(), "app2:").await;
    assert_eq!(a.key_prefix(), "app1:");

    // The same name in both: two locks.
    let la = a.lock("orders").unwrap();
    assert_eq!(la.name(), "app1:orders");
    let held_a = la.lock().await.unwrap();
    let held_b = b.lock("orders").unwrap().try_lock().await.unwrap();
    assert!(held_b.is_some(), "app2's lock is not app1's");

    // Every kind leaves its keys under the prefix.
    let fair = a.fair_lock("queue").unwrap();
    let fair_held = fair.lock().await.unwrap();
    let fair_waiter = {
        let other = prefixed(&server.url(), "app1:").await;
        tokio::spawn(async move {
            let lock = other.fair_lock("queue").unwrap();
            let _ = tokio::time::timeout(Duration::from_millis(300), lock.lock()).await;
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let rw = a.read_write_lock("doc").unwrap().write().await.unwrap();
    let sem = a.semaphore("pool").unwrap();
    assert!(sem.try_set_permits(2).await.unwrap());
    let permits = sem.acquire(1).await.unwrap();
    let exp = a.expirable_semaphore("slots").unwrap();
    assert!(exp.try_set_permits(1).await.unwrap());
    let permit = exp.acquire().await.unwrap();
    let latch = a.count_down_latch("gate").unwrap();
    assert!(latch.try_set_count(2).await.unwrap());
    let id = a
        .id_generator("orders-seq")
        .unwrap()
        .next_id()
        .await
        .unwrap();
    assert!(id > 0);
    let keys = common::keys(&server);
    let stray: Vec<&String> = keys
        .iter()
        .filter(|k| {
            !(k.starts_with("app1:")
                || k.starts_with("app2:")
                || k.contains("{app1:")
                || k.contains("{app2:"))
        })
        .collect();
    assert!(
        stray.is_empty(),
        "keys outside the prefixes: {stray:?} of {keys:?}"
    );
    assert!(keys.iter().any(|k| k.contains("{app1:queue}")), "{keys:?}");

    fair_waiter.await.unwrap();
    for g in [held_a, fair_held, rw] {
        g.release().await.unwrap();
    }
    held_b.unwrap().release().await.unwrap();
    permits.release().await.unwrap();
    permit.release().await.unwrap();

    // Bad prefixes and names are refused before anything is sent.
    for bad in ["a{b", "x}"] {
        let e = Client::builder(server.url())
            .key_prefix(bad)
            .build()
            .await
            .map(|_| ())
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{bad}: {e}");
    }
    assert!(a.lock("").unwrap_err().is_invalid_argument());
    let long = Client::builder(server.url())
        .key_prefix("p:")
        .max_name_len(8)
        .build()
        .await
        .unwrap();
    assert!(long.lock("123456").is_ok(), "8 bytes with the prefix");
    assert!(long.lock("1234567").unwrap_err().is_invalid_argument());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_names_hash_tag_stays_its_slot_on_a_cluster() {
    let cluster = tokio::task::block_in_place(RedisCluster::start).unwrap();
    let url = format!("redis+cluster://{}", cluster.addrs().join(","));
    let a = prefixed(&url, "app1:").await;
    // Multi-key scripts: a CROSSSLOT error if the prefix split the slot.
    let name = "{user:7}:cart";
    let fair = a.fair_lock(name).unwrap();
    assert_eq!(fair.name(), "app1:{user:7}:cart");
    fair.lock().await.unwrap().release().await.unwrap();
    let rw = a.read_write_lock(name).unwrap();
    rw.read().await.unwrap().release().await.unwrap();
    rw.write().await.unwrap().release().await.unwrap();
    let sem = a.expirable_semaphore("plain-name").unwrap();
    assert!(sem.try_set_permits(1).await.unwrap());
    sem.acquire().await.unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_nodes_must_share_one_prefix() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start().unwrap()).collect();
    let mut clients = Vec::new();
    for (i, s) in servers.iter().enumerate() {
        clients.push(prefixed(&s.url(), if i == 2 { "other:" } else { "app1:" }).await);
    }
    let e = RedlockNodes::new(clients.clone()).unwrap_err();
    assert!(e.to_string().contains("key prefixes"), "{e}");
    clients[2] = prefixed(&servers[2].url(), "app1:").await;
    let nodes = RedlockNodes::new(clients).unwrap();
    let lock = nodes.lock("job").unwrap();
    assert_eq!(lock.name(), "app1:job");
    let guard = lock.lock().await.unwrap();
    let mut conn = servers[0].connection().unwrap();
    let exists: bool = redis::cmd("EXISTS")
        .arg("app1:job")
        .query(&mut conn)
        .unwrap();
    assert!(exists);
    guard.release().await.unwrap();
}
