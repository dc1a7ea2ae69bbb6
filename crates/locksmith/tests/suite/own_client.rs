//! A client built from the application's own redis-rs configuration
//! (`ClientBuilder::from_redis_client`, `ClientBuilder::from_cluster`):
//! URL, TLS, user and credentials are given once, in redis-rs terms, and
//! every connection locksmith opens (commands and release notifications)
//! is made from them.

use crate::common;

use std::time::{Duration, Instant};

use locksmith::{Client, ClientBuilder, ErrorKind};
use locksmith_testkit::RedisServer;

/// A waiter of `b` is woken by `a`'s release through the pub/sub
/// connection (well before the 30 s lease), and the fencing tokens grow.
async fn hand_over(a: &Client, b: &Client, name: &str) {
    let held = a.lock(name).unwrap().lock().await.unwrap();
    let first = held.fencing_token();
    let lock_b = b.lock(name).unwrap();
    assert!(lock_b.try_lock().await.unwrap().is_none(), "excluded");
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let guard = lock_b.lock().await.unwrap();
        (started.elapsed(), guard)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await.unwrap();
    let (waited, guard) = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken by the release message, not the lease")
        .unwrap();
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    assert!(guard.fencing_token() > first);
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_client_of_the_application_serves_locks() {
    let server = RedisServer::start().unwrap();
    let redis = redis::Client::open(format!("{}/3", server.url())).unwrap();
    let a = ClientBuilder::from_redis_client(redis.clone())
        .build()
        .await
        .unwrap();
    let b = ClientBuilder::from_redis_client(redis)
        .build()
        .await
        .unwrap();
    hand_over(&a, &b, "own-single").await;
    // The database of the application's client is the one used.
    let guard = a.lock("own-db").unwrap().lock().await.unwrap();
    let mut conn = server.connection().unwrap();
    let _: () = redis::cmd("SELECT").arg(3).query(&mut conn).unwrap();
    let exists: bool = redis::cmd("EXISTS").arg("own-db").query(&mut conn).unwrap();
    assert!(exists, "the lock lives in database 3");
    guard.release().await.unwrap();
    // Node clients: the application's own for its server, none other.
    let addr = server.addr();
    assert_eq!(
        a.node_client(&addr)
            .unwrap()
            .get_connection_info()
            .redis_settings()
            .db(),
        3
    );
    assert_eq!(
        a.node_client("127.0.0.1:1").unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    // The application's client comes back from redis_client().
    let again = a.redis_client().unwrap();
    assert_eq!(
        again.get_connection_info().redis_settings().db(),
        3,
        "the same configuration"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_with_an_acl_user_needs_no_settings_of_ours() {
    let files = common::suite_tls();
    let server = RedisServer::builder().tls(files, false).start().unwrap();
    let mut admin = server.connection().unwrap();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(common::minimal_acl("own-s3cret"))
        .query(&mut admin)
        .unwrap();
    let url = format!(
        "rediss://locksmith:own-s3cret@127.0.0.1:{}",
        server.tls_port().unwrap()
    );
    let certs = redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(std::fs::read(files.ca_cert()).unwrap()),
    };
    let redis = redis::Client::build_with_tls(url.as_str(), certs).unwrap();
    let a = ClientBuilder::from_redis_client(redis.clone())
        .build()
        .await
        .unwrap();
    let b = ClientBuilder::from_redis_client(redis.clone())
        .build()
        .await
        .unwrap();
    hand_over(&a, &b, "own-tls").await;
    // Every connection of both clients, commands and notifications alike,
    // logged in as the application's user.
    let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut admin).unwrap();
    let ours = common::clients_of(&clients, "locksmith").len();
    let others = clients.lines().count() - ours;
    assert!(
        ours >= 3,
        "two command connections and the waiter's pub/sub connection:\n{clients}"
    );
    assert!(
        clients
            .lines()
            .any(|l| common::clients_of(l, "locksmith").len() == 1 && l.contains("subscribe")),
        "the pub/sub connection too:\n{clients}"
    );
    assert_eq!(
        others, 1,
        "only the admin connection is not ours:\n{clients}"
    );

    // Our TLS and credential settings would be a second source of truth:
    // refused, naming where they belong.
    let e = ClientBuilder::from_redis_client(redis.clone())
        .tls_ca_file(files.ca_cert())
        .build()
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.to_string().contains("redis-rs client"), "{e}");
    // Without the CA, the same URL does not verify: the certificates came
    // from the application's client.
    let e = Client::builder(&url)
        .connect_timeout(Duration::from_secs(2))
        .build()
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Tls, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_configuration_of_the_application_serves_locks() {
    let cluster = tokio::task::spawn_blocking(|| {
        let cluster = locksmith_testkit::RedisCluster::start().expect("a cluster");
        for node in cluster.nodes() {
            let _: () = redis::cmd("ACL")
                .arg("SETUSER")
                .arg("app")
                .arg(&["on", ">c1uster", "~*", common::all_channels(), "+@all"][..])
                .query(&mut node.connection().unwrap())
                .unwrap();
        }
        cluster
    })
    .await
    .unwrap();
    let seeds: Vec<String> = cluster
        .addrs()
        .iter()
        .map(|a| format!("redis://{a}"))
        .collect();
    // The application's settings come first: its retry count and protocol
    // do not reach locksmith's own clients (the connection that never
    // resends, the RESP3 one of release notifications).
    let build = || {
        ClientBuilder::from_cluster(seeds.clone(), |builder| {
            builder
                .username("app")
                .password("c1uster")
                .retries(9)
                .use_protocol(redis::ProtocolVersion::RESP2)
        })
        .build()
    };
    let a = build().await.unwrap();
    let b = build().await.unwrap();
    assert_eq!(a.topology(), locksmith::Topology::Cluster);
    let whoami: String = redis::cmd("ACL")
        .arg("WHOAMI")
        .query_async(&mut a.connection())
        .await
        .unwrap();
    assert_eq!(whoami, "app", "the credentials came from the configuration");
    for name in ["own-cluster-a", "own-cluster-b", "own-cluster-c"] {
        hand_over(&a, &b, name).await;
    }
    // Seeds may carry the credentials themselves.
    let with_credentials: Vec<String> = cluster
        .addrs()
        .iter()
        .map(|a| format!("redis://app:c1uster@{a}"))
        .collect();
    let c = ClientBuilder::from_cluster(with_credentials, |builder| builder)
        .build()
        .await
        .unwrap();
    let whoami: String = redis::cmd("ACL")
        .arg("WHOAMI")
        .query_async(&mut c.connection())
        .await
        .unwrap();
    assert_eq!(whoami, "app");
    hand_over(&a, &c, "own-cluster-seeds").await;
    assert!(
        c.node_client(&cluster.addrs()[0]).is_err(),
        "no node clients"
    );
    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_configuration_of_the_application_serves_locks() {
    let group = tokio::task::spawn_blocking(|| {
        let group = locksmith_testkit::SentinelGroup::start().expect("a Sentinel group");
        for node in group.nodes() {
            let _: () = redis::cmd("ACL")
                .arg("SETUSER")
                .arg("app")
                .arg(&["on", ">s3ntinel", "~*", common::all_channels(), "+@all"][..])
                .query(&mut node.connection().unwrap())
                .unwrap();
        }
        group
    })
    .await
    .unwrap();
    let build = || {
        ClientBuilder::from_sentinel(group.sentinel_urls(), group.master_name(), |builder| {
            builder
                .set_client_to_redis_username("app")
                .set_client_to_redis_password("s3ntinel")
                .set_client_to_redis_db(4)
        })
        .build()
    };
    let a = build().await.unwrap();
    let b = build().await.unwrap();
    assert_eq!(a.topology(), locksmith::Topology::Sentinel);
    let whoami: String = redis::cmd("ACL")
        .arg("WHOAMI")
        .query_async(&mut a.connection())
        .await
        .unwrap();
    assert_eq!(
        whoami, "app",
        "the data nodes' credentials came from the configuration"
    );
    hand_over(&a, &b, "own-sentinel").await;
    let guard = a.lock("own-sentinel-db").unwrap().lock().await.unwrap();
    let mut primary = redis::Client::open(format!("{}/4", group.primary_url()))
        .unwrap()
        .get_connection()
        .unwrap();
    let exists: bool = redis::cmd("EXISTS")
        .arg("own-sentinel-db")
        .query(&mut primary)
        .unwrap();
    assert!(exists, "the configuration's database");
    guard.release().await.unwrap();
    // Our own Sentinel settings beside it would be a second source.
    let e = ClientBuilder::from_sentinel(group.sentinel_urls(), group.master_name(), |b| b)
        .sentinel_credentials(Some("x"), "y")
        .build()
        .await
        .map(|_| ())
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
}

/// Redlock nodes given as the application's own redis-rs clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_nodes_from_the_applications_clients() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start().unwrap()).collect();
    let builders = servers
        .iter()
        .map(|s| ClientBuilder::from_redis_client(redis::Client::open(s.url()).unwrap()));
    let nodes = locksmith::RedlockNodes::connect_with(builders)
        .await
        .unwrap();
    let guard = nodes.lock("own-redlock").unwrap().lock().await.unwrap();
    for server in &servers {
        let held: bool = redis::cmd("EXISTS")
            .arg("own-redlock")
            .query(&mut server.connection().unwrap())
            .unwrap();
        assert!(held, "held on every node");
    }
    guard.release().await.unwrap();
}
