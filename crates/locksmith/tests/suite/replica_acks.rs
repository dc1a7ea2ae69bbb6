//! With replica acknowledgement on (the default where the primary has
//! replicas), every release of the family is followed by `WAIT` in the same
//! round trip, as docs/topologies.md promises: the fair, read-write,
//! semaphore and permit-semaphore releases once went out as plain script
//! calls. A primary with one replica of its own, so no other test's
//! traffic counts.

use crate::common;
use std::time::{Duration, Instant};

use locksmith::Client;
use locksmith_testkit::RedisServer;

/// `WAIT` calls the server has served.
fn waits(server: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.connection().unwrap())
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_wait:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_release_of_the_family_waits_for_replicas() {
    let (primary, _replica) = tokio::task::spawn_blocking(|| primary_with_replica(false))
        .await
        .unwrap();
    let client = Client::open(&primary.url()).await.unwrap();
    assert_eq!(client.replica_acks(), 1, "on by default with a replica");

    // Each release adds a WAIT (the script call and its WAIT travel
    // together); nothing else runs on this server meanwhile.
    let released = |before: u64, what: &str| {
        let after = waits(&primary);
        assert!(after > before, "{what}: no WAIT behind the release");
    };

    let guard = client.fair_lock("fair").unwrap().lock().await.unwrap();
    let before = waits(&primary);
    guard.release().await.unwrap();
    released(before, "fair lock");

    let rw = client.read_write_lock("rw").unwrap();
    let guard = rw.write().await.unwrap();
    let before = waits(&primary);
    guard.release().await.unwrap();
    released(before, "write lock");
    let guard = rw.read().await.unwrap();
    let before = waits(&primary);
    guard.release().await.unwrap();
    released(before, "read lock");

    let semaphore = client.semaphore("sem").unwrap();
    semaphore.try_set_permits(2).await.unwrap();
    let permits = semaphore.acquire(1).await.unwrap();
    let before = waits(&primary);
    permits.release().await.unwrap();
    released(before, "semaphore");

    let expirable = client.expirable_semaphore("permits").unwrap();
    expirable.try_set_permits(2).await.unwrap();
    let permit = expirable.acquire().await.unwrap();
    let before = waits(&primary);
    permit.release().await.unwrap();
    released(before, "permit semaphore");

    // The plain lock, as before.
    let guard = client.lock("plain").unwrap().lock().await.unwrap();
    let before = waits(&primary);
    guard.release().await.unwrap();
    released(before, "lock");

    // Reads never wait.
    let before = waits(&primary);
    client.fair_lock("fair").unwrap().info().await.unwrap();
    rw.info().await.unwrap();
    assert_eq!(waits(&primary), before, "reads send no WAIT");
}

/// A primary whose `WAIT` is renamed away (as on proxies and serverless
/// offerings that answer "unknown command 'wait'"), with a replica in
/// sync: acknowledgement would be on by default.
/// A primary (its `WAIT` renamed away if `no_wait`) and a replica in sync.
fn primary_with_replica(no_wait: bool) -> (RedisServer, RedisServer) {
    let mut builder = RedisServer::builder();
    if no_wait {
        builder = builder.arg("--rename-command").arg("WAIT").arg("");
    }
    let primary = builder.start().unwrap();
    let replica = RedisServer::builder()
        .arg("--replicaof")
        .arg("127.0.0.1")
        .arg(primary.port().to_string())
        .start()
        .unwrap();
    wait_in_sync(&replica);
    (primary, replica)
}

/// Waits (up to 20 s) until `replica`'s link to its primary is up.
fn wait_in_sync(replica: &RedisServer) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut replica.connection().unwrap())
            .unwrap();
        if info.contains("master_link_status:up") {
            return;
        }
        assert!(Instant::now() < deadline, "the replica never synced");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_refuses_wait_turns_automatic_acknowledgement_off() {
    let (primary, _replica) = tokio::task::spawn_blocking(|| primary_with_replica(true))
        .await
        .unwrap();
    // Automatic: off, with a note saying why; everything works.
    let client = Client::open(&primary.url()).await.unwrap();
    assert_eq!(client.replica_acks(), 0);
    assert_eq!(client.notes().len(), 1, "{:?}", client.notes());
    assert!(client.notes()[0].contains("WAIT"), "{:?}", client.notes());
    let guard = client.lock("no-wait").unwrap().lock().await.unwrap();
    guard.release().await.unwrap();
    let sem = client.semaphore("no-wait-sem").unwrap();
    assert!(sem.try_set_permits(1).await.unwrap());
    sem.acquire(1).await.unwrap().release().await.unwrap();
    // Asked for explicitly: a clear error naming the command.
    let e = Client::builder(primary.url())
        .replica_acks(1, Duration::from_millis(500))
        .build()
        .await
        .map(|_| ())
        .unwrap_err();
    assert!(e.is_invalid_argument(), "{e}");
    assert!(e.to_string().contains("WAIT"), "{e}");
    // Where WAIT is there, nothing is noted.
    let (plain, _replica) = tokio::task::spawn_blocking(|| primary_with_replica(false))
        .await
        .unwrap();
    let client = Client::open(&plain.url()).await.unwrap();
    assert_eq!(
        client.replica_acks(),
        1,
        "WAIT is there: acknowledgement on"
    );
    assert!(client.notes().is_empty(), "{:?}", client.notes());
}

/// A cluster user without sharded pub/sub's rights (as behind a proxy that
/// does not know them): notifications fall back to classic pub/sub, with
/// a note, and a waiter is still woken by a release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_sharded_pubsub_notifies_classically() {
    let cluster =
        tokio::task::block_in_place(locksmith_testkit::RedisCluster::start).expect("a cluster");
    // Before 7.0 the servers have no sharded pub/sub at all (and ACL
    // rules name no subcommand).
    let without_sharded: &[&str] = if common::has_7_0() {
        &[
            "-pubsub|shardnumsub",
            "-ssubscribe",
            "-sunsubscribe",
            "-spublish",
        ]
    } else {
        &[]
    };
    for node in cluster.nodes() {
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(&[
                "app",
                "on",
                ">app-pass",
                "~*",
                common::all_channels(),
                "+@all",
            ])
            .arg(without_sharded)
            .query(&mut node.connection().unwrap())
            .unwrap();
    }
    let url = format!("redis+cluster://app:app-pass@{}", cluster.addrs().join(","));
    let holder = Client::builder(&url)
        .replica_acks(0, Duration::from_millis(100))
        .build()
        .await
        .unwrap();
    assert!(
        holder.notes().iter().any(|n| n.contains("classic pub/sub")),
        "{:?}",
        holder.notes()
    );
    // Before Redis 7.0 no script reaches several slots either, known at
    // connect from the version and said the same way.
    assert_eq!(
        holder
            .notes()
            .iter()
            .any(|n| n.contains("batched calls carry one slot each") && n.contains("Redis 6.")),
        !common::has_7_0(),
        "{:?}",
        holder.notes()
    );
    let waiter_client = Client::builder(&url)
        .replica_acks(0, Duration::from_millis(100))
        .lease(Duration::from_secs(30))
        .build()
        .await
        .unwrap();
    let held = holder.lock("no-sharded").unwrap().lock().await.unwrap();
    let waiter = {
        let lock = waiter_client.lock("no-sharded").unwrap();
        tokio::spawn(async move {
            let started = Instant::now();
            let guard = lock.lock().await.unwrap();
            (started.elapsed(), guard)
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.release().await.unwrap();
    let (waited, guard) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("woken by the classic release message, long before the 30 s lease")
        .unwrap();
    assert!(waited < Duration::from_secs(10));
    guard.release().await.unwrap();
}

/// `replica_ack_timeout` lengthens the default acknowledgement's wait and
/// asks for nothing more: behind a replication link whose acknowledgement
/// comes after about 1.4 s (700 ms of latency each way), a grant with the
/// default 1 s is refused `NotReplicated`, and one with 6 s is granted. A
/// server without replicas still connects with it (acknowledgement off),
/// and a timeout of zero or not shorter than the command timeout is
/// refused at build.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_longer_acknowledgement_timeout_waits_for_a_slow_replica() {
    use locksmith_testkit::{FaultMode, FaultProxy};
    let (primary, _replica, link) = tokio::task::spawn_blocking(|| {
        let primary = RedisServer::start().unwrap();
        let link = FaultProxy::start(&primary.addr()).unwrap();
        let replica = RedisServer::builder()
            .arg("--replicaof")
            .arg("127.0.0.1")
            .arg(link.addr().rsplit(':').next().unwrap().to_string())
            .start()
            .unwrap();
        wait_in_sync(&replica);
        (primary, replica, link)
    })
    .await
    .unwrap();
    link.set_mode(FaultMode::Latency(Duration::from_millis(700)));
    let short = Client::builder(primary.url())
        .command_timeout(Duration::from_secs(8))
        .build()
        .await
        .unwrap();
    let e = short
        .lock("slow-replica")
        .unwrap()
        .lock()
        .await
        .unwrap_err();
    assert_eq!(
        e.kind(),
        locksmith::ErrorKind::NotReplicated,
        "the default 1 s is too short: {e}"
    );
    let long = Client::builder(primary.url())
        .command_timeout(Duration::from_secs(8))
        .replica_ack_timeout(Duration::from_secs(6))
        .build()
        .await
        .unwrap();
    assert_eq!(long.replica_acks(), 1);
    let guard = long.lock("slow-replica").unwrap().lock().await.unwrap();
    guard.release().await.unwrap();

    let alone = RedisServer::start().unwrap();
    let client = Client::builder(alone.url())
        .replica_ack_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    assert_eq!(client.replica_acks(), 0, "no replicas: acknowledgement off");
    // Refused whether or not the server has replicas.
    for (server, bad) in [
        (&primary, Duration::ZERO),
        (&primary, Duration::from_secs(2)),
        (&alone, Duration::from_secs(3)),
        (&alone, Duration::ZERO),
    ] {
        let e = Client::builder(server.url())
            .command_timeout(Duration::from_secs(2))
            .replica_ack_timeout(bad)
            .build()
            .await
            .map(|_| ())
            .unwrap_err();
        assert!(e.is_invalid_argument(), "{bad:?}: {e}");
        assert!(e.to_string().contains("replica_ack_timeout"), "{e}");
    }
}
