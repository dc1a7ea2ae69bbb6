//! Sentinel and Cluster under faults: a failover under held locks, a slot
//! migration under a waiter, and deployments that are not what the URL
//! says. Each test owns its deployment (they kill and move things).

use crate::common;

use std::time::{Duration, Instant};

use common::{cluster_url, sentinel_url};
use locksmith::{Client, ErrorKind, NotifyMode, Topology};
use locksmith_testkit::{RedisCluster, RedisServer, SentinelGroup};

/// Waits for `lock` with retries across the connection errors a failover
/// causes (a caller of the library would retry the same way).
async fn lock_retrying(lock: &locksmith::Lock, limit: Duration) -> Option<locksmith::LockGuard> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        match lock.try_lock_for(deadline - Instant::now()).await {
            Ok(got) => return got,
            Err(e)
                if e.is_connection_error()
                    || e.is_timeout()
                    || e.kind() == ErrorKind::NotReplicated =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_moves_the_lock_and_its_waiters_to_the_new_primary() {
    let mut group = tokio::task::spawn_blocking(|| SentinelGroup::start().unwrap())
        .await
        .unwrap();
    let url = sentinel_url(&group);
    // A lease that outlasts a slow failover (a split vote is retried only
    // after 10 s), renewed every 5 s.
    let lease = Duration::from_secs(15);
    let holder = Client::builder(url.clone())
        .lease(lease)
        .command_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    assert_eq!(holder.topology(), Topology::Sentinel);
    let waiter = Client::builder(url)
        .lease(Duration::from_secs(6))
        .command_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let old_primary = group.primary_addr();
    let lock = holder.lock("orders:failover").unwrap();
    let guard = lock.lock().await.unwrap();
    let token = guard.fencing_token();
    // Let the grant reach the replicas before the primary dies (without
    // replica acknowledgement nothing else waits for it).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let waiting = {
        let lock = waiter.lock("orders:failover").unwrap();
        tokio::spawn(async move { lock_retrying(&lock, Duration::from_secs(60)).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;

    let new_primary = tokio::task::spawn_blocking(move || {
        group.kill_primary();
        let new = group.wait_for_failover(Duration::from_secs(45)).unwrap();
        (group, new)
    })
    .await
    .unwrap();
    let (_group, new_primary) = new_primary;
    assert_ne!(old_primary, new_primary);

    // The holder keeps its lock: its renewals reach the new primary (the
    // grant was replicated). Past a renewal period and some, the lease
    // left there shows a renewal since the failover: without one it
    // would be at most the lease less this wait and the failover's.
    let waited = lease / 3 + Duration::from_secs(4);
    tokio::time::sleep(waited).await;
    assert!(
        !guard.is_lost(),
        "the replicated grant survives the failover and keeps being renewed"
    );
    assert!(!waiting.is_finished(), "the waiter still waits");
    let info = lock.info().await.unwrap();
    assert_eq!(info.holders.len(), 1, "held on the new primary: {info:?}");
    let left = info.remaining_lease.expect("a lease on the new primary");
    assert!(
        left > lease - waited + Duration::from_millis(500),
        "renewed on the new primary: {left:?} left"
    );
    guard.release().await.unwrap();
    // Woken by the release message once its pub/sub connection has moved
    // to the new primary, or at the latest when the lease it last saw on
    // the lock runs out (a lock waiter has no periodic re-check): up to
    // the holder's 15 s, which a loaded machine can stretch.
    let got = tokio::time::timeout(Duration::from_secs(40), waiting)
        .await
        .expect("the waiter acquires on the new primary")
        .unwrap()
        .expect("the waiter acquires");
    assert!(got.fencing_token() > token, "tokens keep growing");
    got.release().await.unwrap();
}

/// The slot of `key`, and moves it from its primary to another one the way
/// `redis-cli --cluster reshard` does. Returns (from, to) node indices.
fn migrate_slot_of(cluster: &RedisCluster, key: &str) -> (usize, usize) {
    let from = cluster.node_for_key(key).unwrap();
    let to = cluster
        .primaries()
        .unwrap()
        .into_iter()
        .find(|&p| p != from)
        .unwrap();
    let mut src = cluster.nodes()[from].connection().unwrap();
    let mut dst = cluster.nodes()[to].connection().unwrap();
    let slot: u64 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(&mut src)
        .unwrap();
    let (from_id, to_id) = (
        cluster.node_id(from).to_owned(),
        cluster.node_id(to).to_owned(),
    );
    redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg("IMPORTING")
        .arg(&from_id)
        .exec(&mut dst)
        .unwrap();
    redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg("MIGRATING")
        .arg(&to_id)
        .exec(&mut src)
        .unwrap();
    let keys: Vec<String> = redis::cmd("CLUSTER")
        .arg("GETKEYSINSLOT")
        .arg(slot)
        .arg(1000)
        .query(&mut src)
        .unwrap();
    if !keys.is_empty() {
        let port = cluster.nodes()[to].port();
        redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(port)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(&keys)
            .exec(&mut src)
            .unwrap();
    }
    for conn in [&mut dst, &mut src] {
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("NODE")
            .arg(&to_id)
            .exec(conn)
            .unwrap();
    }
    for p in cluster.primaries().unwrap() {
        if p != from && p != to {
            let mut c = cluster.nodes()[p].connection().unwrap();
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("NODE")
                .arg(&to_id)
                .exec(&mut c)
                .unwrap();
        }
    }
    (from, to)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_waiters_follow_a_migrated_slot_and_held_locks_survive_a_failover() {
    let mut cluster = tokio::task::spawn_blocking(|| RedisCluster::start().unwrap())
        .await
        .unwrap();
    let url = cluster_url(&cluster);
    let a = Client::builder(url.clone())
        .lease(Duration::from_secs(30))
        .build()
        .await
        .unwrap();
    assert_eq!(a.topology(), Topology::Cluster);
    assert_eq!(
        a.notify_mode(),
        if common::has_7_0() {
            NotifyMode::Sharded
        } else {
            NotifyMode::Classic
        },
        "Redisson's default: sharded from Redis 7.0, classic before"
    );
    let b = Client::builder(url)
        .lease(Duration::from_secs(30))
        .build()
        .await
        .unwrap();

    // A waiter in another client waits while the lock's slot moves to
    // another primary; the holder's release on the new owner wakes it (by
    // message: the 30 s lease is far off).
    let name = "stock:migrating";
    let guard = a.lock(name).unwrap().lock().await.unwrap();
    let waiting = {
        let lock = b.lock(name).unwrap();
        tokio::spawn(async move {
            let started = Instant::now();
            let got = lock.try_lock_for(Duration::from_secs(25)).await.unwrap();
            (got, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (from, to) = {
        let cluster = &cluster;
        tokio::task::block_in_place(|| migrate_slot_of(cluster, name))
    };
    assert_eq!(cluster.node_for_key(name).unwrap(), to);
    assert_ne!(from, to);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let token = guard.fencing_token();
    guard.release().await.unwrap();
    let (got, waited) = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .unwrap()
        .unwrap();
    let got = got.expect("the waiter acquires after the migration");
    assert!(
        waited < Duration::from_secs(10),
        "woken by the release on the slot's new owner, waited {waited:?}"
    );
    assert!(got.fencing_token() > token);

    // A primary fails over (coordinated, lossless) while the lock is held:
    // the holder keeps it, renewing on the promoted replica.
    let primary = cluster.node_for_key(name).unwrap();
    tokio::task::block_in_place(|| cluster.failover(primary).unwrap());
    assert_ne!(cluster.node_for_key(name).unwrap(), primary);
    let lock_b = b.lock(name).unwrap();
    let info = lock_b.info().await.unwrap();
    assert_eq!(info.holders.len(), 1, "still held after the failover");
    assert!(!got.is_lost());
    got.release().await.unwrap();
    assert!(!lock_b.is_locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployments_that_do_not_match_the_url_are_refused_clearly() {
    // A standalone server given as a cluster seed.
    let single = RedisServer::start().unwrap();
    let err = Client::open(&format!("redis+cluster://{}", single.addr()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains("standalone"), "{err}");

    // A cluster node given as a single server; and a cluster with slots
    // nobody serves.
    let node = RedisServer::builder()
        .arg("--cluster-enabled")
        .arg("yes")
        .start()
        .unwrap();
    let err = Client::open(&node.url()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains("redis+cluster://"), "{err}");
    redis::cmd("CLUSTER")
        .arg("ADDSLOTS")
        .arg((0..100).collect::<Vec<u16>>())
        .exec(&mut node.connection().unwrap())
        .unwrap();
    let started = Instant::now();
    let err = Client::builder(format!("redis+cluster://{}", node.addr()))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10), "no hang");
    assert!(
        err.to_string().contains("slot"),
        "names the uncovered slots: {err}"
    );

    // No Sentinel reachable, and a service name no Sentinel knows.
    let nobody = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = nobody.local_addr().unwrap().port();
    drop(nobody);
    let started = Instant::now();
    let err = Client::builder(format!("redis+sentinel://127.0.0.1:{port}/mymaster"))
        .connect_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    assert!(started.elapsed() < Duration::from_secs(5), "no hang");
    let sentinel = RedisServer::builder()
        .config_file(format!(
            "sentinel monitor known 127.0.0.1 {} 1\n",
            single.port()
        ))
        .arg("--sentinel")
        .start()
        .unwrap();
    let err = Client::open(&format!("redis+sentinel://{}/unknown", sentinel.addr()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    assert!(
        err.to_string().contains("service name"),
        "says to check the service name: {err}"
    );
    let ok = Client::open(&format!("redis+sentinel://{}/known", sentinel.addr()))
        .await
        .unwrap();
    assert_eq!(ok.topology(), Topology::Sentinel);
    // Sharded notifications are a cluster option; elsewhere classic.
    assert_eq!(ok.notify_mode(), NotifyMode::Classic);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_names_must_keep_their_keys_in_one_slot() {
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start().unwrap())
        .await
        .unwrap();
    let client = Client::open(&cluster_url(&cluster)).await.unwrap();
    // "a}b" has no '{', so its auxiliary keys are `prefix:{a}b}`, whose
    // tag is "a": another slot than "a}b" itself (CROSSSLOT once used).
    for bad in ["a{}b", "a{b", "x}{y", "a}b", "}"] {
        let err = client.lock(bad).unwrap_err();
        assert!(err.is_invalid_argument(), "{bad}: {err}");
        assert!(err.to_string().contains("hash tag"), "{err}");
        assert!(client.simple_lock(bad).is_err());
        assert!(client.fair_lock(bad).is_err(), "{bad}");
        assert!(client.read_write_lock(bad).is_err(), "{bad}");
        assert!(client.semaphore(bad).is_err(), "{bad}");
    }
    // Names with a real tag, and names over many slots, work.
    for name in ["orders:{42}:a", "orders:{42}:b", "plain", "x{y}z"] {
        let guard = client.lock(name).unwrap().lock().await.unwrap();
        guard.release().await.unwrap();
    }
    for i in 0..64 {
        let lock = client.simple_lock(format!("spread:{i}")).unwrap();
        lock.lock().await.unwrap().release().await.unwrap();
    }
}

/// One run of the acknowledged-grant check on a fresh group: grant (with
/// the default acknowledgement), SIGKILL the primary at once, and read the
/// lock on the promoted replica. `Err` says what was seen instead.
///
/// The lease is long (60 s) on purpose: this checks that an acknowledged
/// grant reaches the replica that gets promoted, not how long a lease
/// lasts. With five groups failing over at once on a loaded machine, a
/// split Sentinel vote is retried only after twice the failover timeout
/// (10 s), long enough for a short lease to lapse on the promoted replica
/// before the holder's watchdog can reach it.
async fn acked_grant_survives_a_failover(run: usize) -> Result<(), String> {
    let group = tokio::task::spawn_blocking(|| SentinelGroup::start().unwrap())
        .await
        .unwrap();
    let url = sentinel_url(&group);
    let holder = Client::builder(url)
        .lease(Duration::from_secs(60))
        .command_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    assert_eq!(holder.replica_acks(), 1, "on by default with replicas");
    let lock = holder.lock(format!("acked:{run}")).unwrap();
    let guard = lock_retrying(&lock, Duration::from_secs(30))
        .await
        .expect("granted");
    // No pause for replication to catch up: the acknowledgement is all.
    let killed = Instant::now();
    let _group = tokio::task::spawn_blocking(move || {
        let mut group = group;
        group.kill_primary();
        group.wait_for_failover(Duration::from_secs(45)).unwrap();
        group
    })
    .await
    .unwrap();
    let failover = killed.elapsed();
    let mut seen = Err("no answer".to_owned());
    for _ in 0..100 {
        match lock.info().await {
            Ok(info) => {
                seen = Ok(info);
                break;
            }
            Err(e) => {
                seen = Err(e.to_string());
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    match seen {
        Ok(info) if info.holders == vec![(lock.owner().to_owned(), 1)] => {
            assert!(!guard.is_lost(), "run {run}");
            guard.release().await.unwrap();
            Ok(())
        }
        other => Err(format!(
            "run {run}: after a failover of {failover:?} the promoted primary answers \
             {other:?}; the holder's guard is lost: {}",
            guard.is_lost()
        )),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_acks_keep_grants_through_failovers_and_without_them_a_grant_can_vanish() {
    // With acknowledgement on, the primary dies right after each grant and
    // the grant survives on the promoted replica, in every one of 10 runs
    // (each on a fresh group, five at a time).
    for wave in 0..2 {
        let runs: Vec<_> = (0..5)
            .map(|i| tokio::spawn(acked_grant_survives_a_failover(wave * 5 + i)))
            .collect();
        for run in runs {
            if let Err(seen) = run.await.unwrap() {
                panic!("the acknowledged grant did not survive the failover: {seen}");
            }
        }
    }

    let group = tokio::task::spawn_blocking(|| SentinelGroup::start().unwrap())
        .await
        .unwrap();
    let url = sentinel_url(&group);
    // Asking for more acknowledgements than there are replicas is refused.
    let err = Client::builder(url.clone())
        .replica_acks(3, Duration::from_millis(500))
        .build()
        .await
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    assert!(err.to_string().contains("2 connected replica"), "{err}");

    // Without it, the window the docs warn about: the replicas are frozen
    // and cut off, the grant lands on the primary only, the primary dies,
    // and the promoted replica never saw the grant: another client takes
    // the "held" lock. The first holder is told.
    let unacked = Client::builder(url.clone())
        .lease(Duration::from_secs(10))
        .command_timeout(Duration::from_secs(1))
        .replica_acks(0, Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    assert_eq!(unacked.replica_acks(), 0);
    let replicas: Vec<usize> = (0..group.nodes().len())
        .filter(|&i| i != group.primary_index())
        .collect();
    for &i in &replicas {
        group.nodes()[i].pause().unwrap();
    }
    let mut primary = redis::Client::open(group.primary_url())
        .unwrap()
        .get_connection()
        .unwrap();
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .exec(&mut primary)
        .unwrap();
    let first = unacked.lock("window").unwrap().lock().await.unwrap();
    let lost = first.lost();
    let group = tokio::task::spawn_blocking(move || {
        let mut group = group;
        group.kill_primary();
        for &i in &replicas {
            group.nodes()[i].resume().unwrap();
        }
        group.wait_for_failover(Duration::from_secs(45)).unwrap();
        group
    })
    .await
    .unwrap();
    let other = Client::builder(url)
        .lease(Duration::from_secs(10))
        .command_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let second = lock_retrying(&other.lock("window").unwrap(), Duration::from_secs(20))
        .await
        .expect("the promoted replica never saw the grant: the lock is free again");
    assert!(second.fencing_token() >= 1);
    // Never silently: the first holder's next renewal finds the lock gone.
    tokio::time::timeout(Duration::from_secs(12), lost.wait())
        .await
        .expect("the first holder is signalled lost");
    second.release().await.unwrap();
    drop(group);
}

/// The client list of every Sentinel of `group`, one line per connection,
/// without the Sentinels' links to each other (named `sentinel-…`, made
/// while the group settles) and the one asking.
fn sentinel_clients(group: &locksmith_testkit::SentinelGroup) -> Vec<String> {
    let ask = || {
        let mut lines = Vec::new();
        for addr in group.sentinel_addrs() {
            let list: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query(
                    &mut redis::Client::open(format!("redis://{addr}"))
                        .unwrap()
                        .get_connection()
                        .unwrap(),
                )
                .unwrap();
            lines.extend(
                list.lines()
                    .filter(|l| !l.contains(" name=sentinel-") && !l.contains("cmd=client|list"))
                    .map(str::to_owned),
            );
        }
        lines
    };
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(ask),
        _ => ask(),
    }
}

/// How many connections subscribed on the Sentinels of `group`: the
/// `+switch-master` watchers.
fn sentinel_watchers(group: &locksmith_testkit::SentinelGroup) -> usize {
    sentinel_clients(group)
        .iter()
        .filter(|l| l.contains(" sub=1 "))
        .count()
}

/// A dropped Sentinel client leaves no connection to the Sentinels behind
/// (its `+switch-master` watcher ends with it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_sentinel_clients_leave_no_sentinel_connections() {
    // A group of its own: nothing else connects to its Sentinels.
    let group = tokio::task::block_in_place(SentinelGroup::start).expect("a Sentinel group");
    let url = sentinel_url(&group);
    let before = sentinel_clients(&group).len();
    for i in 0..20 {
        let client = Client::open(&url).await.unwrap();
        common::lock_and_release(&client, &format!("drop-{i}")).await;
        drop(client);
    }
    let settled = common::eventually(Duration::from_secs(20), || async {
        sentinel_clients(&group).len() <= before + 2
    })
    .await;
    let after = sentinel_clients(&group);
    assert!(
        settled,
        "Sentinel connections grew from {before} to {}:\n{}",
        after.len(),
        after.join("\n")
    );
}

/// The `+switch-master` watcher follows its client's runtime: it ends with
/// the runtime that built the client, starts again with the client's first
/// command on a later one, and ends for good at `close()`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sentinel_watcher_follows_the_runtime_and_ends_at_close() {
    let group = tokio::task::block_in_place(SentinelGroup::start).expect("a Sentinel group");
    let url = sentinel_url(&group);
    let watching = |n: usize| {
        let group = &group;
        async move {
            common::eventually(Duration::from_secs(10), || async {
                sentinel_watchers(group) == n
            })
            .await
        }
    };
    // Built on a runtime of its own, which then ends.
    let client = std::thread::scope(|s| {
        s.spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let client = runtime.block_on(Client::open(&url)).unwrap();
            runtime.block_on(async {
                assert!(
                    common::eventually(Duration::from_secs(10), || async {
                        sentinel_watchers(&group) == 1
                    })
                    .await,
                    "a client watches one Sentinel"
                );
            });
            client
        })
        .join()
        .unwrap()
    });
    assert!(
        watching(0).await,
        "the watcher ended with its runtime: {:?}",
        sentinel_clients(&group)
    );
    common::lock_and_release(&client, "later-runtime").await;
    assert!(
        watching(1).await,
        "the first command on a later runtime starts the watcher again: {:?}",
        sentinel_clients(&group)
    );
    client.close().await.unwrap();
    assert!(
        watching(0).await,
        "close() ends the watcher: {:?}",
        sentinel_clients(&group)
    );
    client
        .lock("after-close")
        .unwrap()
        .lock()
        .await
        .expect_err("a closed client takes nothing");
    assert_eq!(sentinel_watchers(&group), 0, "nothing starts it again");
}
